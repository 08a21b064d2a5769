"""The molecular task families: the 12 tasks, their deduplication and its counts, the splits, the drug
targets' direction rule and KG slices, and how a run selects the molecules of a captioning task."""

from __future__ import annotations

import numpy as np
import pytest

from ddibench.chem import morgan_matrix, scaffold_split, standardize, tanimoto_matrix
from ddibench.registry import get_task
from ddibench.runner.selection import Selection, run_samples, split_quotas
from ddibench.tasks.molecular.molecules import Row, deduplicate
from ddibench.tasks.molecular.targets import polarity

MOLECULAR = [
    "tox_herg",
    "tox_herg_tdc",
    "tox_dili",
    "tox_dili_tdc",
    "tox_skin",
    "tox_carcinogens",
    "caption_bbbp",
    "caption_sider",
    "caption_clintox",
    "caption_bace",
    "targets_inhibit",
    "targets_activate",
]


def test_list_tasks_shows_the_molecular_tasks(cli) -> None:
    code, out, _ = cli("list", "tasks")
    assert code == 0
    for name in MOLECULAR:
        assert name in out


def test_data_stats_prints_sizes_before_and_after_deduplication(cli) -> None:
    code, out, _ = cli("data", "stats", "tox_herg", "tox_carcinogens", "caption_bbbp", "caption_clintox")
    assert code == 0, out
    rows = {
        line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:-1]]
        for line in out.splitlines()
        if line.startswith("│")
    }
    # source rows table: rows, unparsable, unique structures, conflicting (dropped), molecules, paper
    assert rows["tox_herg"][-6:] == ["655", "0", "648", "3 (6 rows)", "645", "648"]
    assert rows["tox_carcinogens"][-6:] == ["280", "0", "278", "2 (4 rows)", "276", "278"]
    assert rows["caption_bbbp"][-6:] == ["2,039", "0", "1,975", "10 (20 rows)", "1,965", "2,039"]
    assert rows["caption_clintox"][-6:] == ["1,478", "0", "1,459", "19 (38 rows)", "1,440", "1,477"]
    assert "wildcard atom" in out  # the ClinTox row the paper lacks is explained
    assert "FAILED" not in out


def test_the_deduplication_rule() -> None:
    rows = [
        Row("OCC", (1,), "ethanol"),
        Row("CCO", (1,), "ethanol again"),  # the same structure, the same label: kept once
        Row("c1ccccc1", (0,)),
        Row("C1=CC=CC=C1", (1,)),  # benzene labelled both ways (Kekulé and aromatic): dropped
        Row("not a smiles", (0,)),
        Row("CC(=O)O", (0,)),
    ]
    entries, stats = deduplicate(rows, "agree")
    assert [e.std.canonical for e in entries] == ["CCO", "CC(=O)O"]
    assert entries[0].names == ("ethanol", "ethanol again")
    assert (
        stats.rows,
        stats.unparsable,
        stats.unique,
        stats.conflicting_groups,
        stats.conflicting_rows,
        stats.molecules,
    ) == (6, 1, 3, 1, 2, 2)
    merged, _ = deduplicate([Row("CCO", frozenset({"A"})), Row("OCC", frozenset({"B"}))], "union")
    assert merged[0].labels == {"A", "B"}


def test_target_direction_from_moa_terms() -> None:
    rules = {
        "neither": ["inverse agonist"],
        "inhibit": ["inhibitor", "blocker"],
        "activate": ["agonist", "activator", "positive allosteric modulator"],
    }
    assert polarity("EGFR inhibitor", rules) == "inhibit"
    assert polarity("calcium channel blocker", rules) == "inhibit"
    assert polarity("dopamine receptor agonist", rules) == "activate"
    assert polarity("dopamine receptor antagonist", rules) is None  # "antagonist" does not end with the word "agonist"
    assert polarity("cannabinoid receptor inverse agonist", rules) is None
    assert polarity("GABA receptor positive allosteric modulator", rules) == "activate"


def test_scaffold_splits() -> None:
    scaffolds = ["a", "b", "a", "c", "d", "b", "a", "e", "f", "g"]
    # DeepChem: sets by size (a: 3, b: 2), ties by first index, later first (g, f, e, d, c)
    assert scaffold_split(scaffolds, (0.6, 0.2, 0.2), order="deepchem") == [
        "train",
        "train",
        "train",
        "test",
        "test",
        "train",
        "train",
        "valid",
        "valid",
        "train",
    ]
    # the balanced order does not depend on the row order
    rng = np.random.default_rng(0)
    many = [f"s{int(i)}" for i in rng.integers(0, 40, 200)]
    perm = rng.permutation(200)
    first = scaffold_split(many, order="balanced")
    second = scaffold_split([many[i] for i in perm], order="balanced")
    assert [first[i] for i in perm] == second
    assert {s for s, x in zip(many, first) if x == "test"}.isdisjoint({s for s, x in zip(many, first) if x == "train"})


def test_standardize_and_tanimoto_equal_rdkit() -> None:
    from rdkit import Chem, DataStructs
    from rdkit.Chem import rdFingerprintGenerator

    std = standardize("OC(=O)c1ccccc1OC(C)=O")
    assert std is not None and std.inchikey == "BSYNRYMUTXBXSQ-UHFFFAOYSA-N" and std.scaffold == "c1ccccc1"
    assert standardize("CCO").scaffold == "" and standardize("nonsense") is None  # type: ignore[union-attr]
    smiles = ["CCO", "c1ccccc1O", "CC(=O)Oc1ccccc1C(=O)O", "CN1CCC[C@H]1c1cccnc1", "CCN(CC)CC"]
    bits, _ = morgan_matrix(smiles, 2, 2048)
    ours = tanimoto_matrix(bits, bits)
    gen = rdFingerprintGenerator.GetMorganGenerator(radius=2, fpSize=2048)
    fps = [gen.GetFingerprint(Chem.MolFromSmiles(s)) for s in smiles]
    for i, fp in enumerate(fps):
        assert ours[i] == pytest.approx(DataStructs.BulkTanimotoSimilarity(fp, fps), abs=1e-6)


def test_toxicity_samples_are_molecules_clustered_by_scaffold() -> None:
    task = get_task("tox_carcinogens")
    data = task.load()
    assert all(c.ok for c in data.checks)
    sample = data.splits["test"][0]
    assert sample.input.smiles == standardize(sample.input.smiles).canonical  # type: ignore[union-attr]
    assert len(sample.input.inchikey) == 27 and sample.clusters[0].startswith(("scaffold:", "acyclic:"))
    assert sample.meta["split"] == "test" and sample.target in (0, 1)
    assert data.resources["instruction"].endswith("Answer yes or no.")
    assert task.evaluator().primary_metric == "macro_f1"
    assert "auroc" in [m.name for m in task.evaluator().metrics]


def test_tdc_split_keeps_the_published_test_set() -> None:
    data = get_task("tox_dili_tdc").load()
    assert {s: len(v) for s, v in data.splits.items()} == {"train": 325, "valid": 54, "test": 96}


def test_targets_gold_sets_and_kg_slices() -> None:
    from ddibench.data.drugbank import load_catalog
    from ddibench.kg import skeleton

    task = get_task("targets_inhibit")
    data = task.load()
    assert all(c.ok for c in data.checks), [c for c in data.checks if not c.ok]
    everything = [s for v in data.splits.values() for s in v]
    imatinib = next(s for s in everything if s.input.name == "imatinib")
    names = {task.label_space[i].name for i in imatinib.label_ids}
    assert names == {"ABL1", "CSF1R", "DDR1", "KIT", "NTRK1", "PDGFRA", "PDGFRB", "RET"}  # the Hub's list
    with pytest.raises(TypeError, match="not one label id"):  # a label set is not read as one label
        imatinib.label  # noqa: B018
    assert imatinib.meta["kg"] == "overlap"  # imatinib is a DrugBank drug of the KG
    assert data.resources["kg_overlap"][imatinib.input.inchikey]
    # independently: no "no-overlap" molecule has the structure skeleton of a KG drug (from the catalog's SMILES)
    kg_skeletons = {skeleton(std.inchikey) for d in load_catalog().drugs if (std := standardize(d.smiles)) is not None}
    assert not [s for s in everything if s.meta["kg"] == "no-overlap" and skeleton(s.input.inchikey) in kg_skeletons]
    result = task.evaluator()
    assert result.primary_metric == "precision@5_no_overlap"
    assert any("ChemPert" in d for d in task.deviations)


def test_captioning_runs_every_split_and_limit_shares_it_among_them() -> None:
    task = get_task("caption_bace")
    data = task.load()
    assert task.predict_splits == ("train", "valid", "test") and not task.training_labels_visible
    assert len(run_samples(task, Selection("test", None, 0), data)) == 1513
    chosen = run_samples(task, Selection("test", 40, 0), data)
    by_split = [sum(1 for s in chosen if s.meta["split"] == name) for name in ("train", "valid", "test")]
    assert by_split == split_quotas(40, [1210, 151, 152]) == [32, 4, 4]
    assert chosen == run_samples(task, Selection("test", 40, 0), data)  # seeded: verify draws the same molecules
    assert [s.meta["split"] for s in run_samples(task, Selection("valid", None, 0), data)].count("test") == 0
    assert split_quotas(3, [1000, 1, 1]) == [1, 1, 1]
    from ddibench.errors import ConfigError

    with pytest.raises(ConfigError, match="too small"):
        run_samples(task, Selection("test", 2, 0), data)


def test_clintox_notation_shortcut_stated_in_the_card() -> None:
    """The raw ClinTox file writes every trial failure in Kekulé form: the notation alone predicts the labels."""
    import csv
    import re

    from sklearn.metrics import roc_auc_score

    task = get_task("caption_clintox")
    with open(task.path(str(task.spec.file)), encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    aromatic = np.array(
        [bool(re.search(r"[bcnops]", re.sub(r"\[[^\]]*\]|Cl|Br", "", r["smiles"]))) for r in rows], dtype=float
    )
    tox = np.array([int(r["CT_TOX"]) for r in rows])
    approved = np.array([int(r["FDA_APPROVED"]) for r in rows])
    assert aromatic[tox == 1].sum() == 0 and round(aromatic[approved == 1].mean(), 2) == 0.73
    assert round(roc_auc_score(approved, aromatic), 2) == 0.86 and round(roc_auc_score(tox, 1 - aromatic), 2) == 0.87
    assert any("Kekulé form" in d for d in task.deviations)
