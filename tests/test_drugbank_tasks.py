"""DrugBank DDI tasks built from the pinned sources: sizes, settings, catalog, labels, sample ids."""

from __future__ import annotations

import csv
from collections import Counter

import pytest
from conftest import reference_dir

from ddibench.registry import get_task, task_names
from ddibench.tasks.drugbank import TASKS, load_catalog, load_labels

REFERENCE = reference_dir() / "ddi_derived"

# the split sizes the issue and the upstream papers state
EXPECTED = {
    "drugbank_s0": (134_641, 19_224, 38_419),
    "drugbank_s1": (99_283, 28_823, 31_984),
    "drugbank_s2": (99_283, 1_606, 1_992),
    "drugbank_s1_emergnn": (139_141, 15_635, 33_254),
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
