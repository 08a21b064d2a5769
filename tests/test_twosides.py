"""TWOSIDES top-5 side-effect tasks: derivations against the independent reference tables, the setting
checks (and a planted leak they catch), the ranking metrics against a direct computation, the KG in the
TWOSIDES id space, and the popularity floor."""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from conftest import reference_dir

from ddibench.data.twosides import load_catalog, load_cuis, load_labels
from ddibench.errors import DataError
from ddibench.registry import get_task, task_names
from ddibench.schema import Prediction
from ddibench.tasks.twosides import TASKS, Pair, TwosidesTask, drug_roles, recover_training, setting_checks

REFERENCE = reference_dir()
needs_reference = pytest.mark.skipif(not REFERENCE.is_dir(), reason="independent reference tables not available")


def _tsv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh, delimiter="\t"))


@pytest.fixture(scope="module")
def s2():
    task = get_task("twosides_s2")
    return task, task.load()


def test_tasks_are_registered_with_their_sizes_and_pass_their_checks() -> None:
    assert {"twosides_s1", "twosides_s2"} <= set(task_names())
    expected = {"twosides_s1": (11_605, 3_962, 5_712), "twosides_s2": (12_833, 106, 355)}
    for name, sizes in expected.items():
        data = get_task(name).load()
        assert tuple(len(data.split(s)) for s in ("train", "valid", "test")) == sizes
        assert data.checks and all(c.ok for c in data.checks), [c for c in data.checks if not c.ok]
        names = {c.name for c in data.checks}
        assert {"training pairs use training drugs only", "no training pair in test"} <= names
        assert any(n.endswith("holds over both drug columns (test)") for n in names)


def test_samples_are_label_sets_clustered_by_drug(s2) -> None:
    task, data = s2
    sample = data.split("test")[
        0
    ]  # first positive line of S2_1/test_ddi.txt: 11 24 with side effects 0, 22, 23, 30, ...
    assert (sample.input.head.node_id, sample.input.tail.node_id) == (11, 24)
    assert isinstance(sample.target, tuple) and sample.target[:4] == (0, 22, 23, 30)
    assert sample.clusters == (load_catalog().cids[11], load_catalog().cids[24])
    assert sample.meta["n_unseen"] == 2
    ids = [s.id for s in data.split("test")]
    assert len(set(ids)) == len(ids) and task.build().split("test")[0].id == sample.id
    assert data.resources["kg_space"] == "twosides" and len(data.resources["drugs"]) == 604
    assert task.evaluator().primary_metric == "recall@5"
    card = task.card()
    assert card["paper_train_triplets"] == 185_673 and any("44.0%" in d for d in card["deviations"])


@needs_reference
def test_catalog_and_labels_equal_the_independent_reference() -> None:
    catalog = load_catalog()
    rows = _tsv(REFERENCE / "ddi_derived" / "twosides_drugs.tsv")
    assert len(rows) == len(catalog) == 604
    for row in rows:
        i = int(row["node_id"])
        drug = catalog[i]
        assert (catalog.cids[i], drug.drugbank_id, drug.name, drug.smiles) == (
            row["pubchem_cid"],
            row["drugbank_id"],
            row["name"],
            row["smiles"],
        )
        assert catalog.summaries[i] == row["pubchem_summary"]
    labels = load_labels()
    rows = _tsv(REFERENCE / "ddi_derived" / "twosides_side_effects.tsv")
    assert [(lb.id, lb.name) for lb in labels] == [(int(r["label_index"]), r["name"]) for r in rows]
    assert list(load_cuis()) == [r["umls_cui"] for r in rows]


@needs_reference
@pytest.mark.parametrize("seed", [1, 1234])
def test_drug_roles_and_recovered_training_equal_the_reference(seed: int) -> None:
    ref = REFERENCE / "twosides_recovered"
    roles = {int(r["drug_id"]): r["role"] for r in _tsv(ref / f"seed{seed}_drug_roles.tsv")}
    assert drug_roles(seed) == roles
    theirs = []
    for line in (ref / f"seed{seed}_train_pos_recovered.txt").read_text().splitlines():
        h, t, flags, y = line.split("\t")
        assert y == "1"
        theirs.append(Pair(int(h), int(t), tuple(i for i, f in enumerate(flags.split(",")) if f == "1")))
    ours = recover_training(seed)
    assert sorted(ours, key=lambda p: (p.head, p.tail)) == sorted(theirs, key=lambda p: (p.head, p.tail))
    # REPORT_numbers.txt: seed 1 12,833 pairs / 81,727 triplets, seed 1234 11,605 / 70,008
    assert (len(ours), sum(len(p.labels) for p in ours)) == {1: (12_833, 81_727), 1234: (11_605, 70_008)}[seed]


@needs_reference
def test_s1_test_split_equals_the_reference_copy() -> None:
    rows = _tsv(REFERENCE / "ddi_derived" / "twosides_S1_1234_test_from_textddi.tsv")
    test = get_task("twosides_s1").load().split("test")
    assert [(s.input.head.node_id, s.input.tail.node_id, s.target) for s in test] == [
        (int(r["pos_head"]), int(r["pos_tail"]), tuple(int(x) for x in r["label_indices"].split(","))) for r in rows
    ]


def test_setting_checks_catch_a_planted_leak(s2) -> None:
    task, _ = s2
    pairs = task.split_pairs()
    roles = drug_roles(task.seed)
    assert all(c.ok for c in setting_checks("S2", pairs, roles))
    test_pair, train_pair = pairs["test"][0], pairs["train"][0]
    # a training pair that holds one test drug: the S2 test pairs with that drug now have a seen drug
    leaked = {**pairs, "train": (*pairs["train"], Pair(test_pair.head, train_pair.tail, (0,)))}
    failed = {c.name for c in setting_checks("S2", leaked, roles) if not c.ok}
    assert {"training pairs use training drugs only", "S2 holds over both drug columns (test)"} <= failed
    # an evaluation pair copied into training, read backwards
    copied = {**pairs, "train": (*pairs["train"], Pair(test_pair.tail, test_pair.head, test_pair.labels))}
    assert "no training pair in test" in {c.name for c in setting_checks("S2", copied, roles) if not c.ok}
    # S1: a test pair whose both drugs are seen in training is what the setting forbids
    s1 = TASKS["twosides_s1"]
    s1_pairs, s1_roles = s1.split_pairs(), drug_roles(s1.seed)
    new_drug = next(d for d in (s1_pairs["test"][0].head, s1_pairs["test"][0].tail) if s1_roles[d] == "test")
    planted = {**s1_pairs, "train": (*s1_pairs["train"], Pair(new_drug, s1_pairs["train"][0].head, (1,)))}
    assert "S1 holds over both drug columns (test)" in {
        c.name for c in setting_checks("S1", planted, s1_roles) if not c.ok
    }


def test_a_task_whose_training_pairs_leak_does_not_load() -> None:
    """The S1 evaluation files of seed 1234 with the drug roles of seed 1: the recovered training pairs then hold
    seed-1234 test drugs, and loading refuses."""
    spec = TASKS["twosides_s1"].spec.model_copy(update={"seed": 1})
    with pytest.raises(DataError, match="training pairs use training drugs only|holds over both drug columns"):
        TwosidesTask("twosides_s1_planted", spec).build()


def _sklearn_scores(gold: list[tuple[int, ...]], ranked: list[list[int]], k: int = 5) -> tuple[float, float]:
    from sklearn.metrics import ndcg_score

    n = len(load_labels())
    truth = np.zeros((len(gold), n))
    scores = np.zeros((len(gold), n))
    recall = []
    for i, (g, r) in enumerate(zip(gold, ranked)):
        truth[i, list(g)] = 1
        scores[i, r] = np.arange(len(r), 0, -1)  # best first; unranked labels tie at 0 below the top k
        recall.append(len(set(r[:k]) & set(g)) / len(g))
    return float(np.mean(recall)), float(ndcg_score(truth, scores, k=k))


def test_recall_and_ndcg_at_5_equal_a_direct_computation(s2) -> None:
    from ddibench.metrics.bootstrap import BootstrapSpec

    task, data = s2
    samples = data.split("test")
    rng = np.random.default_rng(0)
    preds, ranked = {}, []
    for i, s in enumerate(samples):
        gold = list(s.target)
        pool = rng.permutation(200).tolist()
        # five distinct labels (ties below the top five cannot matter), some of them hits, at various ranks
        r = list(dict.fromkeys(gold[: rng.integers(0, 4)] + pool))[:5] if i % 3 else pool[:5]
        r = rng.permutation(r).tolist()
        if i % 17 == 0:  # an unparsable answer scores zero
            preds[s.id] = Prediction.invalid(s.id, "unparsable")
            ranked.append([])
        else:
            preds[s.id] = Prediction(sample_id=s.id, ranked=r)
            ranked.append(r)
    result = task.evaluator().evaluate(samples, preds, BootstrapSpec(replicates=200))
    # an unparsable answer scores zero: sklearn sees the valid rows, and their mean is scaled to all rows
    valid = [i for i, r in enumerate(ranked) if r]
    invalid = [i for i, r in enumerate(ranked) if not r]
    recall, ndcg = _sklearn_scores([samples[i].target for i in valid], [ranked[i] for i in valid])
    share = len(valid) / len(samples)
    assert result.metrics["recall@5"].value == pytest.approx(recall * share, abs=1e-12)
    assert result.metrics["ndcg@5"].value == pytest.approx(ndcg * share, abs=1e-12)
    assert result.n_invalid == len(invalid)
    low, high = result.metrics["recall@5"].ci_low, result.metrics["recall@5"].ci_high
    assert low < result.metrics["recall@5"].value < high
    assert result.primary_metric == "recall@5" and set(result.breakdown) == {"n_unseen=2"}


def test_kg_in_the_twosides_space_names_the_catalog_drugs() -> None:
    from ddibench.kg import interaction_graph, load_kg

    kg = load_kg("twosides")
    catalog = load_catalog()
    assert kg.n_drugs == 604 and [kg.name(i) for i in range(604)] == [d.name for d in catalog.drugs]
    if REFERENCE.is_dir():
        rows = _tsv(REFERENCE / "ddi_derived" / "twosides_kg_entities.tsv")
        assert all(
            (kg.name(int(r["entity_id"])), kg.entity_kinds[int(r["entity_id"])]) == (r["name"], r["kind"]) for r in rows
        )
        ref = np.loadtxt(
            REFERENCE / "ddi2_derived" / "emergnn_kg" / "twosides_KG_hetionet_20rel.tsv.gz", dtype=np.int64
        )
        assert np.array_equal(ref, np.stack([kg.head, kg.tail, kg.rel], 1))
    train = get_task("twosides_s2").load().split("train")[:50]
    graph = interaction_graph(train, [lb.template for lb in load_labels()], space="twosides")
    assert len(graph) == len(kg) + sum(len(s.target) for s in train)
    s = train[0]
    text = graph.verbalise(s.input.head.node_id, s.target[0], s.input.tail.node_id)
    assert (
        text
        == f"{s.input.head.name} and {s.input.tail.name} taken together are associated with the side effect {load_labels()[s.target[0]].name}."
    )


def test_popularity_floor_on_s2_seed_1(cli, tmp_path: Path) -> None:
    code, _, err = cli("run", "-s", "popularity", "-t", "twosides_s2", "--run-dir", str(tmp_path / "pop"))
    assert code == 0, err
    results = json.loads((tmp_path / "pop" / "results.json").read_text())
    metrics = results["evaluation"]["metrics"]
    # the numbers: Recall@5 2.71, NDCG@5 5.17 on the 355 S2 test pairs of seed 1
    assert round(100 * metrics["recall@5"]["value"], 2) == 2.71 and round(100 * metrics["ndcg@5"]["value"], 2) == 5.17
    assert results["evaluation"]["n"] == 355 and results["manifest"]["submittable"] is True
    assert any("44.0%" in d for d in results["manifest"]["task"]["deviations"])


def test_bad_split_files_are_clear_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pickle

    from ddibench.data.sources import SourceFile
    from ddibench.hashing import sha256_file
    from ddibench.tasks.twosides import read_emergnn_ddi, read_textddi

    def pinned(name: str, payload: bytes) -> SourceFile:
        root = tmp_path / "mirror"
        src = SourceFile("x", "o/r", "c" * 40, name, "", 0, "none")
        path = root / src.relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(payload)
        monkeypatch.setenv("DDIBENCH_MIRROR", str(root))
        return dataclasses.replace(src, sha256=sha256_file(path), bytes=len(payload))

    flags = ",".join(["0"] * 199 + ["1"])
    with pytest.raises(DataError, match="two positives in a row"):
        read_emergnn_ddi(pinned("a.txt", f"1\t2\t{flags}\t1\n3\t4\t{flags}\t1\n".encode()))
    with pytest.raises(DataError, match="200 comma-separated"):
        read_emergnn_ddi(pinned("b.txt", b"1\t2\t0,1\t1\n"))

    class Evil:
        def __reduce__(self):
            return (print, ("never run",))

    with pytest.raises(DataError, match="plain lists only"):
        read_textddi(pinned("c.pkl", pickle.dumps([Evil()])))
    ok = read_textddi(pinned("d.pkl", pickle.dumps([["1", "2", "1", "5", [0] * 199 + [1]]])))
    assert ok == (Pair(1, 2, (199,)),)
