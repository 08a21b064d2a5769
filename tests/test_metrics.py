"""Metrics equal scikit-learn; bootstrap intervals are clustered by drug, seeded and reproducible."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import accuracy_score, cohen_kappa_score, f1_score

from ddibench.evaluation import ClassificationEvaluator, EvaluationInputError
from ddibench.metrics.bootstrap import BootstrapSpec, bootstrap_intervals
from ddibench.metrics.classification import (
    INVALID,
    classification_scores,
    confusion_matrices,
    scores_from_confusion,
)
from ddibench.registry import get_task
from ddibench.schema import Prediction


def sklearn_scores(y_true: np.ndarray, y_pred: np.ndarray, weights: np.ndarray | None = None) -> dict[str, float]:
    """scikit-learn's numbers with ddibench's convention for invalid predictions (label -1)."""
    valid = y_pred != INVALID
    labels = sorted(set(y_true.tolist()) | set(y_pred[valid].tolist()))
    return {
        "accuracy": accuracy_score(y_true, y_pred, sample_weight=weights),
        "macro_f1": f1_score(y_true, y_pred, labels=labels, average="macro", sample_weight=weights, zero_division=0),
        "kappa": cohen_kappa_score(y_true, y_pred, sample_weight=weights),
    }


@pytest.mark.parametrize("seed", range(6))
def test_scores_equal_sklearn_including_invalid_predictions(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, k = 500, 86
    y_true = rng.choice(k, size=n, p=np.r_[np.full(10, 0.08), np.full(k - 10, 0.2 / (k - 10))])
    y_pred = np.where(rng.random(n) < 0.5, y_true, rng.integers(0, k, n))
    y_pred[rng.random(n) < 0.1 * (seed % 3)] = INVALID  # 0%, 10%, 20% unparsable
    ours = classification_scores(y_true, y_pred, k).as_dict()
    ref = sklearn_scores(y_true, y_pred)
    for name in ours:
        assert ours[name] == pytest.approx(ref[name], abs=1e-12), name


def test_weighted_scores_equal_sklearn_sample_weight() -> None:
    rng = np.random.default_rng(7)
    y_true = rng.integers(0, 12, 300)
    y_pred = np.where(rng.random(300) < 0.6, y_true, rng.integers(0, 12, 300))
    y_pred[:20] = INVALID
    weights = rng.integers(0, 4, 300).astype(float)
    ours = scores_from_confusion(confusion_matrices(y_true, y_pred, 12, weights))
    ref = sklearn_scores(y_true, y_pred, weights)
    for name in ref:
        assert float(ours[name]) == pytest.approx(ref[name], abs=1e-12), name
    stacked = confusion_matrices(y_true, y_pred, 12, np.stack([weights, np.ones(300)]))
    assert stacked.shape == (2, 12, 13)
    assert float(scores_from_confusion(stacked)["kappa"][1]) == pytest.approx(sklearn_scores(y_true, y_pred)["kappa"], abs=1e-12)


def test_out_of_range_labels_are_rejected() -> None:
    with pytest.raises(ValueError, match="predicted labels"):
        confusion_matrices(np.array([0, 1]), np.array([0, 86]), 86)


def _predictions(samples, rng: np.random.Generator, accuracy: float) -> dict[str, Prediction]:
    out = {}
    for s in samples:
        label = s.target if rng.random() < accuracy else int(rng.integers(0, 86))
        out[s.id] = Prediction(sample_id=s.id, label=label)
    return out


@pytest.fixture(scope="module")
def s2_test():
    return get_task("drugbank_s2").load().split("test")


def test_cluster_bootstrap_is_reproducible_and_wider_than_iid(s2_test) -> None:
    evaluator = get_task("drugbank_s2").evaluator()
    preds = _predictions(s2_test, np.random.default_rng(0), 0.4)
    first = evaluator.evaluate(s2_test, preds, BootstrapSpec(replicates=300, seed=3))
    again = evaluator.evaluate(s2_test, preds, BootstrapSpec(replicates=300, seed=3))
    other_seed = evaluator.evaluate(s2_test, preds, BootstrapSpec(replicates=300, seed=4))
    iid = evaluator.evaluate(s2_test, preds, BootstrapSpec(replicates=300, seed=3, method="iid"))
    assert first.metrics == again.metrics
    assert first.metrics["accuracy"].ci_low != other_seed.metrics["accuracy"].ci_low
    for name, m in first.metrics.items():
        assert m.ci_low <= m.value <= m.ci_high, name
        width = m.ci_high - m.ci_low
        iid_width = iid.metrics[name].ci_high - iid.metrics[name].ci_low
        assert width > iid_width, f"{name}: drug-clustered CI should be wider than the i.i.d. one"
    point = sklearn_scores(
        np.array([s.target for s in s2_test]), np.array([preds[s.id].label for s in s2_test])
    )
    assert first.metrics["macro_f1"].value == pytest.approx(point["macro_f1"], abs=1e-12)


def test_bias_corrected_interval_covers_macro_f1_when_replicates_lose_rare_labels(s2_test) -> None:
    # a system that is right on frequent labels and wrong on rare ones: replicates that drop rare
    # labels overestimate macro-F1; the interval must still be an interval around the estimate
    counts = np.bincount([s.target for s in s2_test], minlength=86)
    frequent = set(np.argsort(counts)[-10:].tolist())
    preds = {s.id: Prediction(sample_id=s.id, label=s.target if s.target in frequent else 0) for s in s2_test}
    result = get_task("drugbank_s2").evaluator().evaluate(s2_test, preds, BootstrapSpec(replicates=400, seed=0))
    m = result.metrics["macro_f1"]
    assert m.ci_low <= m.value <= m.ci_high


def test_evaluator_input_checks(s2_test) -> None:
    evaluator = ClassificationEvaluator(get_task("drugbank_s2").label_space)
    samples = s2_test[:20]
    preds = {s.id: Prediction(sample_id=s.id, label=s.target) for s in samples}
    spec = BootstrapSpec(replicates=100)
    assert evaluator.evaluate(samples, preds, spec).metrics["accuracy"].value == 1.0
    missing = dict(list(preds.items())[:-1])
    with pytest.raises(EvaluationInputError, match="1 of 20 samples have no prediction"):
        evaluator.evaluate(samples, missing, spec)
    extra = {**preds, "ddi-unknown": Prediction(sample_id="ddi-unknown", label=1)}
    with pytest.raises(EvaluationInputError, match="name no evaluated sample"):
        evaluator.evaluate(samples, extra, spec)
    bad = {**preds, samples[0].id: Prediction(sample_id=samples[0].id, label=86)}
    with pytest.raises(EvaluationInputError, match="expected one Prediction per evaluated sample"):
        evaluator.evaluate(samples, bad, spec)
    invalid = {**preds, samples[0].id: Prediction.invalid(samples[0].id, "no option number")}
    result = evaluator.evaluate(samples, invalid, spec)
    assert result.n_invalid == 1 and result.metrics["accuracy"].value == pytest.approx(19 / 20)
    assert result.invalid_examples[0]["error"] == "no option number"


def test_bootstrap_handles_degenerate_inputs() -> None:
    def stat(w: np.ndarray) -> dict[str, np.ndarray]:
        return {"const": np.full(w.shape[0], 0.5)}

    assert bootstrap_intervals(stat, 0, BootstrapSpec()) == {}
    lo, hi = bootstrap_intervals(stat, 10, BootstrapSpec(replicates=100), clusters=[("a", "b")] * 10)["const"]
    assert lo == hi == 0.5


def test_majority_floor_is_the_most_frequent_training_label(cli, tmp_path) -> None:
    """The majority baseline answers the training split's most frequent type everywhere; its accuracy is
    that type's share of the test pairs and its class scores are the training frequencies."""
    import json
    from collections import Counter

    from sklearn.metrics import accuracy_score, f1_score

    from ddibench.registry import get_task

    code, _, err = cli("run", "-s", "majority", "-t", "drugbank_s2", "--run-dir", str(tmp_path / "m"))
    assert code == 0, err
    data = get_task("drugbank_s2").load()
    counts = Counter(int(s.target) for s in data.split("train"))
    label = min(counts, key=lambda k: (-counts[k], k))
    results = json.loads((tmp_path / "m" / "results.json").read_text())
    assert results["system_info"]["label"] == label
    gold = [int(s.target) for s in data.split("test")]
    metrics = results["evaluation"]["metrics"]
    assert metrics["accuracy"]["value"] == pytest.approx(accuracy_score(gold, [label] * len(gold)))
    assert metrics["macro_f1"]["value"] == pytest.approx(f1_score(gold, [label] * len(gold), average="macro"))
    code, _, err = cli("run", "-s", "majority", "-t", "ddi_qa_s2", "--limit", "3", "--run-dir", str(tmp_path / "qa"))
    assert code == 2 and "does not support task 'ddi_qa_s2'" in err
