"""The S0/S1/S2 settings of drug-pair tasks: how many drugs of an evaluation pair no training pair holds.

In S0 both drugs of every validation and test pair occur in training pairs, in S1 exactly one of them does, in S2
neither (EmerGNN's and DDI-Ben's definitions, read over both drug columns together: a drug seen only as a tail is
seen). A family of drug-pair tasks checks its splits with :func:`setting_check` (and :func:`setting_holds`) each
time a task loads, and marks each sample with its :func:`n_unseen` for the board's breakdown.

Pairs are ``(head, tail)`` ids of the family's own id space; what a family reads them from (DrugBank's triples,
TWOSIDES' label sets) stays in the family.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from types import MappingProxyType
from typing import Literal

from ddibench.task import Check

Setting = Literal["S0", "S1", "S2"]
UNSEEN: MappingProxyType[str, int] = MappingProxyType({"S0": 0, "S1": 1, "S2": 2})  # drugs unseen, per setting
UNSEEN_WORDS: MappingProxyType[int, str] = MappingProxyType({0: "no drug", 1: "one drug", 2: "two drugs"})


def drugs_of(pairs: Iterable[tuple[int, int]]) -> set[int]:
    """The drugs of ``pairs``, both columns together."""
    return {drug for pair in pairs for drug in pair}


def n_unseen(head: int, tail: int, seen: Collection[int]) -> int:
    """How many drugs of the pair ``seen`` (the drugs of the training pairs) lacks: 0, 1 or 2."""
    return (head not in seen) + (tail not in seen)


def unseen_counts(pairs: Iterable[tuple[int, int]], seen: Collection[int]) -> list[int]:
    """The pairs with 0, 1 and 2 drugs that ``seen`` lacks."""
    counts = Counter(n_unseen(head, tail, seen) for head, tail in pairs)
    return [counts.get(k, 0) for k in range(3)]


def setting_check(
    setting: str,
    split: str,
    pairs: Sequence[tuple[int, int]],
    seen: Collection[int],
    declared: Sequence[int] | None = None,
) -> Check:
    """The setting's property over ``split``'s pairs: the pairs with 0, 1 and 2 drugs absent from every training
    pair (``seen``) are as ``declared``, or, with nothing declared, every pair has exactly the setting's number.

    A split published upstream keeps its own exceptions (a few pairs off the setting): its task declares their
    counts, so that any other change to the data fails here."""
    counts = unseen_counts(pairs, seen)
    if declared is None:
        declared = [len(pairs) if k == UNSEEN[setting] else 0 for k in range(3)]
    expected = list(declared)
    return Check(
        f"{setting} property ({split})",
        counts == expected,
        f"pairs with 0/1/2 drugs unseen in training pairs: {counts} (declared {expected})",
    )


def setting_holds(setting: str, split: str, pairs: Iterable[tuple[int, int]], seen: Collection[int]) -> Check:
    """No pair of ``split`` has fewer drugs absent from the training pairs (``seen``) than the setting requires: a
    drug seen in training where the setting wants a new one is a leak. A pair with more unseen drugs is allowed
    here (a training drug of the split's definition that no training pair happens to hold)."""
    counts = unseen_counts(pairs, seen)
    expected = UNSEEN[setting]
    forbidden = sum(counts[:expected])
    return Check(
        f"{setting} holds over both drug columns ({split})",
        forbidden == 0,
        f"pairs with 0/1/2 drugs absent from training pairs: {counts}; "
        f"{forbidden} with fewer than {expected} (the setting forbids them)",
    )
