"""The S0/S1/S2 checks both drug-pair families run on every load, on small planted pairs: each setting's pairs
pass their own setting's check and fail the others', and a declared exception passes only as declared."""

from __future__ import annotations

import pytest

from ddibench.drug_settings import UNSEEN, drugs_of, n_unseen, setting_check, setting_holds, unseen_counts

TRAIN = [(0, 1), (1, 2), (3, 0)]  # drugs 0..3 are seen; 4..9 are new
PLANTED = {
    "S0": [(0, 2), (2, 3), (3, 1)],  # both drugs seen
    "S1": [(0, 4), (5, 1), (2, 6)],  # one of each pair new, in either column
    "S2": [(4, 5), (6, 7), (8, 9)],  # both new
}


def test_drugs_are_read_over_both_columns() -> None:
    seen = drugs_of(TRAIN)
    assert seen == {0, 1, 2, 3}
    assert [n_unseen(h, t, seen) for h, t in [(0, 1), (4, 0), (0, 4), (4, 5)]] == [0, 1, 1, 2]
    assert unseen_counts(PLANTED["S1"] + PLANTED["S2"], seen) == [0, 3, 3]


@pytest.mark.parametrize("setting", sorted(UNSEEN))
def test_each_setting_passes_its_own_pairs_and_fails_the_others(setting: str) -> None:
    seen = drugs_of(TRAIN)
    for planted, pairs in PLANTED.items():
        check = setting_check(setting, "test", pairs, seen)
        assert check.ok == (planted == setting), (setting, planted, check)
        assert check.name == f"{setting} property (test)"


def test_declared_exceptions_pass_as_declared_and_only_so() -> None:
    seen = drugs_of(TRAIN)
    pairs = [*PLANTED["S1"], (0, 1)]  # an S1 split published with one pair whose drugs are both seen
    assert not setting_check("S1", "valid", pairs, seen).ok
    check = setting_check("S1", "valid", pairs, seen, declared=(1, 3, 0))
    assert (
        check.ok and check.detail == "pairs with 0/1/2 drugs unseen in training pairs: [1, 3, 0] (declared [1, 3, 0])"
    )
    assert not setting_check("S1", "valid", pairs, seen, declared=(0, 4, 0)).ok


def test_a_setting_holds_unless_a_pair_has_fewer_new_drugs_than_it_requires() -> None:
    seen = drugs_of(TRAIN)
    # more new drugs than the setting asks for is allowed; fewer is a leak
    assert [setting_holds(s, "test", PLANTED["S1"], seen).ok for s in ("S0", "S1", "S2")] == [True, True, False]
    assert [setting_holds(s, "test", PLANTED["S0"], seen).ok for s in ("S0", "S1", "S2")] == [True, False, False]
    leaked = drugs_of([*TRAIN, (4, 0)])  # a training pair now holds drug 4
    failed = setting_holds("S2", "test", PLANTED["S2"], leaked)
    assert not failed.ok and "1 with fewer than 2" in failed.detail
