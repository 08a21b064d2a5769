"""The molecular families' metrics equal scikit-learn's (AUROC, F1) or a direct computation (P@5, R@5),
for whole runs, under bootstrap weights, per slice and per probe seed."""

from __future__ import annotations

from types import MappingProxyType

import numpy as np
import pytest
from sklearn.metrics import accuracy_score, f1_score, roc_auc_score

from ddibench.evaluation import ClassificationEvaluator, EvaluationInputError, ProbeEvaluator, RankingEvaluator
from ddibench.metrics.auroc import weighted_auroc
from ddibench.metrics.bootstrap import BootstrapSpec
from ddibench.schema import Label, LabelSpace, Molecule, Prediction, Sample

YES_NO = LabelSpace((Label(0, "no", "no"), Label(1, "yes", "yes")))


def molecules(n: int, targets: list, meta: list[dict] | None = None, clusters: int = 7) -> list[Sample]:
    return [
        Sample(
            id=f"m{i}",
            input=Molecule(smiles="C"),
            target=t,
            clusters=(f"scaffold:{i % clusters}",),
            meta=MappingProxyType((meta or [{}] * n)[i]),
        )
        for i, t in enumerate(targets)
    ]


@pytest.mark.parametrize("seed", range(5))
def test_weighted_auroc_equals_sklearn_with_ties_and_bootstrap_weights(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 300))
    y = rng.integers(0, 2, n)
    scores = np.round(rng.random(n), int(rng.integers(1, 4)))  # coarse rounding: many ties
    weights = rng.multinomial(n, np.full(n, 1 / n), size=20).astype(float)
    ours = weighted_auroc(y, scores, weights)
    for r in range(20):
        if weights[r][y == 1].sum() > 0 and weights[r][y == 0].sum() > 0:
            assert ours[r] == pytest.approx(roc_auc_score(y, scores, sample_weight=weights[r]), abs=1e-12)
        else:
            assert np.isnan(ours[r])
    if 0 < y.sum() < n:
        assert weighted_auroc(y, scores) == pytest.approx(roc_auc_score(y, scores), abs=1e-12)
    assert np.isnan(weighted_auroc(np.ones(4), np.arange(4.0)))  # one class only: undefined


def test_toxicity_metrics_equal_sklearn_auroc_included() -> None:
    rng = np.random.default_rng(3)
    gold = rng.integers(0, 2, 120).tolist()
    samples = molecules(120, gold)
    p_yes = np.clip(np.array(gold) * 0.3 + rng.random(120) * 0.7, 0, 1).round(3)
    preds = {
        s.id: Prediction(sample_id=s.id, label=int(p >= 0.5), scores={"0": 1 - p, "1": float(p)})
        for s, p in zip(samples, p_yes)
    }
    invalid = samples[5].id
    preds[invalid] = Prediction.invalid(invalid, "unparsable")
    evaluator = ClassificationEvaluator(YES_NO, breakdown_key=None, positive_label=1)
    result = evaluator.evaluate(samples, preds, BootstrapSpec(replicates=200, seed=1))
    y_pred = [preds[s.id].label if preds[s.id].valid else -1 for s in samples]
    y_score = [0.5 if not preds[s.id].valid else preds[s.id].scores["1"] for s in samples]
    assert result.metrics["macro_f1"].value == pytest.approx(
        f1_score(gold, y_pred, labels=[0, 1], average="macro"), abs=1e-12
    )
    assert result.metrics["accuracy"].value == pytest.approx(accuracy_score(gold, y_pred), abs=1e-12)
    assert result.metrics["auroc"].value == pytest.approx(roc_auc_score(gold, y_score), abs=1e-12)
    low, high = result.metrics["auroc"].ci_low, result.metrics["auroc"].ci_high
    assert low < result.metrics["auroc"].value < high
    # the statistic the board's paired comparisons use gives the same AUROC under any weights
    units = evaluator.units(samples, preds)
    weights = rng.integers(0, 3, (4, 120)).astype(float)
    replicate = evaluator.statistic(units)(weights)["auroc"]
    for r in range(4):
        assert replicate[r] == pytest.approx(roc_auc_score(gold, y_score, sample_weight=weights[r]), abs=1e-12)
    diff, lo, hi = evaluator.paired("auroc", [s.clusters for s in samples], units, units)
    assert (diff, lo, hi) == (0.0, 0.0, 0.0)


def test_labels_without_scores_give_no_auroc_and_half_scored_runs_are_refused() -> None:
    samples = molecules(10, [0, 1] * 5)
    evaluator = ClassificationEvaluator(YES_NO, breakdown_key=None, positive_label=1)
    labels_only = {s.id: Prediction(sample_id=s.id, label=1) for s in samples}
    assert "auroc" not in evaluator.evaluate(samples, labels_only, BootstrapSpec(replicates=50)).metrics
    mixed = dict(labels_only)
    mixed[samples[0].id] = Prediction(sample_id=samples[0].id, label=1, scores={"1": 0.9, "0": 0.1})
    with pytest.raises(EvaluationInputError, match="no score for label 1"):
        evaluator.evaluate(samples, mixed, BootstrapSpec(replicates=50))
    out_of_range = {s.id: Prediction(sample_id=s.id, label=1, scores={"1": 1.5}) for s in samples}
    with pytest.raises(EvaluationInputError, match="score 1.5"):
        evaluator.evaluate(samples, out_of_range, BootstrapSpec(replicates=50))


def direct_precision_recall(gold: set[int], ranked: list[int], k: int = 5) -> tuple[float, float]:
    top = []
    for label in ranked:
        if label not in top:
            top.append(label)
    hits = len(set(top[:k]) & gold)
    return hits / k, hits / len(gold)


def test_precision_and_recall_at_5_per_slice_equal_a_direct_computation() -> None:
    rng = np.random.default_rng(11)
    n_labels = 40
    labels = LabelSpace(tuple(Label(i, f"G{i}", f"G{i}") for i in range(n_labels)))
    gold = [tuple(sorted(set(rng.integers(0, n_labels, int(rng.integers(1, 8))).tolist()))) for _ in range(90)]
    slices = [{"kg": "overlap" if i % 3 == 0 else "no-overlap"} for i in range(90)]
    samples = molecules(90, gold, slices)
    preds = {}
    for s in samples:
        preds[s.id] = Prediction(sample_id=s.id, ranked=[int(x) for x in rng.integers(0, n_labels, 7)])
    preds[samples[4].id] = Prediction.invalid(samples[4].id, "no known symbol")
    evaluator = RankingEvaluator(
        labels,
        k=5,
        metrics=("precision", "recall"),
        slice_key="kg",
        slices=("no-overlap", "overlap"),
        primary_slice="no-overlap",
    )
    result = evaluator.evaluate(samples, preds, BootstrapSpec(replicates=100))
    assert result.primary_metric == "precision@5_no_overlap"
    for name, wanted in (("", None), ("_no_overlap", "no-overlap"), ("_overlap", "overlap")):
        chosen = [s for s, m in zip(samples, slices) if wanted is None or m["kg"] == wanted]
        direct = [
            direct_precision_recall(set(s.target), preds[s.id].ranked if preds[s.id].valid else []) for s in chosen
        ]
        assert result.metrics[f"precision@5{name}"].value == pytest.approx(np.mean([d[0] for d in direct]), abs=1e-12)
        assert result.metrics[f"recall@5{name}"].value == pytest.approx(np.mean([d[1] for d in direct]), abs=1e-12)
        assert result.ceilings[f"precision@5{name}"] == pytest.approx(
            np.mean([min(len(s.target), 5) / 5 for s in chosen]), abs=1e-12
        )
        assert result.ceilings[f"recall@5{name}"] == pytest.approx(
            np.mean([min(len(s.target), 5) / len(s.target) for s in chosen]), abs=1e-12
        )
    assert result.n_invalid == 1 and result.breakdown["kg=no-overlap"]["n_invalid"] == 1
    # slice metrics resample correctly: a unit carries only its own slice's metrics
    units = evaluator.units(samples, preds)
    assert "precision@5_overlap" in units[0] and "precision@5_no_overlap" not in units[0]


def test_probe_statistic_equals_sklearn_per_seed_and_column() -> None:
    rng = np.random.default_rng(5)
    n, seeds, cols = 60, 5, 3
    gold = rng.integers(0, 2, (n, cols)).astype(float)
    gold[:, 2] = 1  # a column with one class only: no AUROC, left out
    gold[7, 0] = np.nan  # a missing label
    scores = rng.random((n, seeds, cols)).round(4)
    units = [
        {"gold": [None if np.isnan(v) else int(v) for v in gold[i]], "scores": scores[i].tolist()} for i in range(n)
    ]
    evaluator = ProbeEvaluator(["a", "b", "c"])
    weights = np.vstack([np.ones(n), rng.integers(0, 3, n)]).astype(float)
    out = evaluator.statistic(units)(weights)
    for r in range(2):
        per_seed = []
        for k in range(seeds):
            values = []
            for c in (0, 1):
                known = ~np.isnan(gold[:, c])
                values.append(roc_auc_score(gold[known, c], scores[known, k, c], sample_weight=weights[r][known]))
            per_seed.append(np.mean(values))
        assert out["auroc"][r] == pytest.approx(np.mean(per_seed), abs=1e-12)
        assert out["auroc_std"][r] == pytest.approx(np.std(per_seed), abs=1e-12)
