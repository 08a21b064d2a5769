"""DrugBank DDI tasks built from the pinned sources: sizes, settings, catalog, labels, sample ids."""

from __future__ import annotations

import csv
from collections import Counter

import pytest
from conftest import reference_dir

from ddibench.data.drugbank import approval_date
from ddibench.errors import DataError
from ddibench.registry import get_task, task_names
from ddibench.tasks.drugbank import TASKS, DrugBankTask, approval_checks, load_catalog, load_labels, read_triples

REFERENCE = reference_dir() / "ddi_derived"

# the split sizes the issue and the upstream papers state
EXPECTED = {
    "drugbank_s0": (134_641, 19_224, 38_419),
    "drugbank_s1": (99_283, 28_823, 31_984),
    "drugbank_s2": (99_283, 1_606, 1_992),
    "drugbank_s1_emergnn": (139_141, 15_635, 33_254),
    # DDI-Ben's approval-time split (Real Scene): train_3 / valid_3 / test.txt, and the two earlier windows
    "drugbank_time": (12_855, 3_029, 2_520),
    "drugbank_time_1": (12_786, 2_881, 2_520),
    "drugbank_time_2": (16_049, 2_708, 2_520),
}


def test_drugbank_tasks_are_registered() -> None:
    assert set(TASKS) <= set(task_names())
    assert {
        "drugbank_s0",
        "drugbank_s1",
        "drugbank_s2",
        "drugbank_s1_emergnn",
        "drugbank_s1_cluster",
        "drugbank_s2_cluster",
        "drugbank_time",
        "drugbank_time_1",
        "drugbank_time_2",
    } <= set(task_names())


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_split_sizes_match_the_published_numbers(name: str) -> None:
    data = get_task(name).load()
    assert tuple(len(data.split(s)) for s in ("train", "valid", "test")) == EXPECTED[name]
    assert all(check.ok for check in data.checks), [c for c in data.checks if not c.ok]


@pytest.mark.parametrize("name", sorted(TASKS))
def test_setting_is_verified_over_both_drug_columns(name: str) -> None:
    task = get_task(name)
    data = task.load()
    train_drugs = {k for s in data.split("train") for k in s.clusters}
    expected = {"S0": 0, "S1": 1, "S2": 2}[task.setting]
    for split in ("valid", "test"):
        samples = data.split(split)
        counts = Counter(sum(k not in train_drugs for k in s.clusters) for s in samples)
        assert counts == Counter(s.meta["n_unseen"] for s in samples)
        # the setting holds for all but the declared upstream exceptions, which are stated as deviations
        off = sum(n for k, n in counts.items() if k != expected)
        assert off == sum(task.spec.unseen[split]) - task.spec.unseen[split][expected]
        assert off < 0.002 * len(samples)
        if off:
            assert any(f"{split} pairs contain" in d for d in task.deviations)


def test_ddiben_drug_sets() -> None:
    data = get_task("drugbank_s2").load()
    train_drugs = {k for s in data.split("train") for k in s.clusters}
    test_drugs = {k for s in data.split("test") for k in s.clusters}
    assert not train_drugs & test_drugs
    assert len(train_drugs) == 1_338  # of DDI-Ben's 1,367 training-set drugs, 1,338 have a training pair
    checks = {c.name: c for c in data.checks}
    assert checks["drug set sizes"].ok and "1367" in checks["drug set sizes"].detail


def test_emergnn_s1_test_drugs_are_emergnn_list() -> None:
    checks = {c.name: c for c in get_task("drugbank_s1_emergnn").load().checks}
    check = checks["test pairs contain exactly one listed new drug"]
    assert check.ok and "160 listed drugs" in check.detail


def test_samples_keep_direction_and_have_stable_unique_ids() -> None:
    data = get_task("drugbank_s0").load()
    labels = load_labels()
    sample = data.split("train")[0]  # first line of existing/train_ddi.txt is "10 1 0"
    assert (sample.input.head.node_id, sample.input.tail.node_id, sample.target) == (10, 1, 0)
    assert sample.label == 0 and isinstance(sample.label, int)
    with pytest.raises(TypeError, match="not a tuple of label ids"):
        sample.label_ids  # noqa: B018
    text = labels[sample.target].render(sample.input.head.name, sample.input.tail.name)
    assert text == "Riboflavin may increase the photosensitizing activities of Verteporfin."
    assert sample.clusters == (sample.input.head.drugbank_id, sample.input.tail.drugbank_id)
    for split in ("train", "valid", "test"):
        ids = [s.id for s in data.split(split)]
        assert len(ids) == len(set(ids))
    again = TASKS["drugbank_s0"].build().split("train")[0]  # a fresh build gives the same id
    assert again.id == sample.id
    blind = sample.blind()
    assert blind.target is None and blind.id == sample.id and dict(blind.meta) == {}


@pytest.mark.skipif(not REFERENCE.is_dir(), reason="independent reference tables not available")
def test_catalog_equals_independent_reference() -> None:
    catalog = load_catalog()
    with open(REFERENCE / "drugbank_drugs.tsv", newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    assert len(rows) == len(catalog) == 1710
    for row in rows:
        drug = catalog[int(row["node_id"])]
        assert (drug.drugbank_id, drug.name, drug.smiles) == (row["drugbank_id"], row["name"], row["smiles"])
        assert catalog.approval_dates[drug.node_id] == row["approval_date"]


@pytest.mark.skipif(not REFERENCE.is_dir(), reason="independent reference tables not available")
def test_labels_equal_independent_reference() -> None:
    labels = load_labels()
    with open(REFERENCE / "drugbank_relations.tsv", newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    assert [lb.template for lb in labels] == [row["template"] for row in rows]
    assert len(labels) == 86


def test_data_hash_names_sources_and_recipe() -> None:
    s1, s2 = get_task("drugbank_s1"), get_task("drugbank_s2")
    assert s1.data_sha256 != s2.data_sha256
    assert len(s1.data_sha256) == 64
    card = s1.card()
    assert card["data_sha256"] == s1.data_sha256
    assert any("train.txt" in src["url"] for src in card["sources"])
    assert all(src["license"] for src in card["sources"])


@pytest.mark.parametrize("name", ["drugbank_time", "drugbank_time_1", "drugbank_time_2"])
def test_time_split_puts_every_test_drug_after_every_training_drug(name: str) -> None:
    data = get_task(name).load()
    drugs = {
        s: {d for sample in data.split(s) for d in (sample.input.head, sample.input.tail)} for s in ("train", "test")
    }
    train_dates = [approval_date(load_catalog().approval_dates[d.node_id]) for d in drugs["train"]]
    test_dates = [approval_date(load_catalog().approval_dates[d.node_id]) for d in drugs["test"]]
    assert None not in train_dates and None not in test_dates  # drugs without an exact date are left out
    assert min(test_dates) >= max(train_dates)  # type: ignore[type-var]
    assert str(min(test_dates)) == "2011-01-21" and len(drugs["test"]) == 159
    # every test pair has two drugs absent from training: the S2 setting, and nothing else
    assert Counter(s.meta["n_unseen"] for s in data.split("test")) == Counter({2: 2_520})
    assert get_task(name).setting == "S2"
    checks = {c.name: c for c in data.checks}
    assert checks["test drugs approved after training drugs"].ok
    assert "824 catalog drugs have no exact date" in checks["no drug without an approval date"].detail


def test_time_split_windows_and_id_space() -> None:
    """The rows are EmerGNN node ids and relation ids (``head tail label``, head first), the id space of every DrugBank
    task: each file holds exactly the DrugBank triples (drugbank_s0's 192,284, in the same direction) whose two drugs
    both belong to the file's own drugs, so no pair joins a training drug and a test drug."""
    spec = TASKS["drugbank_time"].spec
    assert (spec.train, spec.valid, spec.test) == (
        "Real Scene/train_3.txt",
        "Real Scene/valid_3.txt",
        "Real Scene/test.txt",
    )
    assert [TASKS[f"drugbank_time_{w}"].spec.test for w in (1, 2)] == [spec.test] * 2
    assert spec.approval_dates["train"] == ("1995/02/02", "2010/11/15")
    full = {
        row for split in ("train", "valid", "test") for row in read_triples(TASKS["drugbank_s0"].split_source(split))
    }
    assert len(full) == 192_284
    for split in ("train", "test"):
        rows = read_triples(TASKS["drugbank_time"].split_source(split))
        drugs = {d for h, t, _ in rows for d in (h, t)}
        assert set(rows) <= full
        assert len(rows) == sum(1 for h, t, _ in full if h in drugs and t in drugs)


def test_a_time_split_whose_test_drugs_are_older_does_not_load() -> None:
    """Window 3's validation file (drugs approved 1987-1994) as the test file: everything else declared to match it,
    only the date order fails, and the load refuses with one line naming the first offending drugs."""
    task = TASKS["drugbank_time"]
    spec = task.spec.model_copy(
        update={
            "test": "Real Scene/valid_3.txt",
            "sizes": {**task.spec.sizes, "test": 3_029},
            "unseen": {**task.spec.unseen, "test": (0, 0, 3_029)},
            "pair_drugs": {**task.spec.pair_drugs, "test": 155},
            "approval_dates": {**task.spec.approval_dates, "test": ("1987/04/10", "1994/12/30")},
        }
    )
    with pytest.raises(DataError) as err:
        DrugBankTask("drugbank_time_older_test", spec).build()
    message = str(err.value)
    assert "\n" not in message  # one line: the failed check and the fix
    assert (
        "test drugs approved after training drugs: 155 test drug(s) approved before the latest training drug" in message
    )
    assert "(2010/11/15): DB" in message and "1987/04/10" in message
    assert "split sizes" not in message and "S2 property" not in message  # only the date order failed


def test_approval_check_catches_one_planted_older_test_drug() -> None:
    """The real files with one test pair's head replaced by a drug approved in 1990 that no training pair holds."""
    task = TASKS["drugbank_time"]
    catalog = load_catalog()
    triples = {s: read_triples(task.split_source(s)) for s in ("train", "valid", "test")}
    assert all(c.ok for c in approval_checks(task.spec, triples, catalog))
    train_drugs = {d for h, t, _ in triples["train"] for d in (h, t)}
    old = next(
        d
        for d in range(len(catalog))
        if d not in train_drugs and str(approval_date(catalog.approval_dates[d]) or "").startswith("1990")
    )
    h, t, r = triples["test"][0]
    planted = {**triples, "test": ((old, t, r), *triples["test"][1:])}
    failed = {c.name: c.detail for c in approval_checks(task.spec, planted, catalog) if not c.ok}
    assert "test drugs approved after training drugs" in failed
    assert failed["test drugs approved after training drugs"].startswith("1 test drug(s) approved before")
    assert catalog[old].drugbank_id in failed["test drugs approved after training drugs"]


def test_data_stats_prints_the_time_split_composition(cli) -> None:
    code, out, _ = cli("data", "stats", "drugbank_time")
    assert code == 0, out
    assert "test pairs, two drugs unseen" in out and "2,520" in out
    assert "1995-2010 / 1987-1994 / 2011-2022" in out
    assert "ok test drugs approved after training drugs: earliest test drug 2011/01/21, latest training drug" in out
