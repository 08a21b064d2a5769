"""Single-label classification: accuracy, macro-F1 and Cohen's kappa over a :class:`LabelSpace`.

Each metric has a bootstrap interval clustered by the samples' cluster keys (the drugs of a pair). The
input check is strict, OGB style: exactly one prediction per sample, no unknown ids, labels in range.
Metric values equal scikit-learn's on the same predictions (see :mod:`ddibench.metrics.classification`
for the convention on unparsable answers).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ddibench.evaluation.base import BaseEvaluator, EvaluationInputError, EvaluationResult, MetricSpec, MetricValue, Statistic, check_coverage
from ddibench.metrics.bootstrap import BootstrapSpec
from ddibench.metrics.classification import INVALID, confusion_matrices, per_class_f1, scores_from_confusion
from ddibench.schema import LabelSpace, Prediction, Sample

CLASSIFICATION_METRICS = (
    MetricSpec(name="accuracy", label="accuracy", description="share of samples whose label is the gold label"),
    MetricSpec(name="macro_f1", label="macro-F1", primary=True,
               description="F1 averaged over the labels present in the gold labels or the valid predictions"),  # fmt: skip
    MetricSpec(name="kappa", label="Cohen's kappa", description="agreement with the gold labels beyond chance"),
)


class ClassificationEvaluator(BaseEvaluator):
    """Single-label classification over a :class:`LabelSpace`."""

    kind = "classification"
    metrics = CLASSIFICATION_METRICS

    def __init__(self, label_space: LabelSpace, breakdown_key: str | None = "n_unseen") -> None:
        super().__init__()
        self.label_space = label_space
        self.breakdown_key = breakdown_key

    @property
    def expected_format(self) -> str:
        n = len(self.label_space)
        return (
            f"one Prediction per evaluated sample, keyed by sample id; label: int in 0..{n - 1} "
            "(the label id), or valid=False (label ignored) when the system's output could not be parsed"
        )

    def _predicted_labels(self, samples: Sequence[Sample], predictions: Mapping[str, Prediction]) -> np.ndarray:
        n = len(self.label_space)
        out = np.empty(len(samples), dtype=np.int64)
        for i, sample in enumerate(samples):
            pred = predictions[sample.id]
            if not pred.valid:
                out[i] = INVALID
                continue
            if not isinstance(pred.label, int) or isinstance(pred.label, bool) or not 0 <= pred.label < n:
                raise EvaluationInputError(f"prediction for {sample.id} has label {pred.label!r}; expected {self.expected_format}")
            out[i] = pred.label
        return out

    def units(self, samples: Sequence[Sample], predictions: Mapping[str, Prediction], evaluation: EvaluationResult | None = None) -> list[dict[str, Any]]:
        y_pred = self._predicted_labels(samples, predictions)
        return [{"pred": int(p), "gold": int(s.target)} for s, p in zip(samples, y_pred)]  # type: ignore[arg-type]

    def statistic(self, units: Sequence[Mapping[str, Any]]) -> Statistic:
        n_labels = len(self.label_space)
        y_true = np.fromiter((u["gold"] for u in units), dtype=np.int64, count=len(units))
        y_pred = np.fromiter((u["pred"] for u in units), dtype=np.int64, count=len(units))
        reference = per_class_f1(confusion_matrices(y_true, y_pred, n_labels))

        def statistic(weights: np.ndarray) -> dict[str, np.ndarray]:
            return scores_from_confusion(confusion_matrices(y_true, y_pred, n_labels, weights), reference_f1=reference)

        return statistic

    def floors(self, samples: Sequence[Sample], train: Sequence[Sample], draws: int = 20, seed: int = 0) -> dict[str, Any]:
        """The majority floor (the training split's most frequent label for every sample; the evaluated
        samples' own when there is no training split) and the uniform-random floor (mean of ``draws``
        seeded draws of a label uniformly at random), on these samples."""
        if not samples:
            return {}
        counts = Counter(int(s.target) for s in (train or samples))  # type: ignore[arg-type]
        majority = min(counts, key=lambda k: (-counts[k], k))
        n = len(self.label_space)
        return {
            "majority": {"label": majority, "from": "training split" if train else "evaluated samples",
                         "metrics": self._floor_metrics(samples, {s.id: Prediction(sample_id=s.id, label=majority) for s in samples})},
            "uniform_random": {"draws": draws, "seed": seed,
                               "metrics": self._random_floor(samples, lambda rng: Prediction(sample_id="", label=int(rng.integers(n))), draws, seed)},
        }  # fmt: skip

    def evaluate(
        self,
        samples: Sequence[Sample],
        predictions: Mapping[str, Prediction],
        bootstrap: BootstrapSpec,
        extras: Mapping[str, object] | None = None,
    ) -> EvaluationResult:
        check_coverage(samples, predictions)
        n_labels = len(self.label_space)
        units = self.units(samples, predictions)
        y_true = np.fromiter((u["gold"] for u in units), dtype=np.int64, count=len(units))
        y_pred = np.fromiter((u["pred"] for u in units), dtype=np.int64, count=len(units))
        cm = confusion_matrices(y_true, y_pred, n_labels)
        point = scores_from_confusion(cm)
        f1 = per_class_f1(cm)
        intervals = self.intervals(units, [s.clusters for s in samples], bootstrap)
        metrics = {
            name: MetricValue(value=float(value), ci_low=intervals[name][0], ci_high=intervals[name][1]) for name, value in point.items()
        }
        invalid = [s.id for s, p in zip(samples, y_pred) if p == INVALID]
        examples = [{"sample_id": sid, "error": predictions[sid].error or "unparsable output"} for sid in invalid[:5]]
        return EvaluationResult(
            n=len(samples),
            n_invalid=len(invalid),
            metrics=metrics,
            primary_metric=self.primary_metric,
            bootstrap=bootstrap.describe(),
            metric_specs=list(self.metrics),
            breakdown=self._breakdown(samples, y_true, y_pred),
            per_label={str(i): (None if np.isnan(v) else float(v)) for i, v in enumerate(f1)},
            invalid_examples=examples,
        )

    def _breakdown(self, samples: Sequence[Sample], y_true: np.ndarray, y_pred: np.ndarray) -> dict[str, dict]:
        if self.breakdown_key is None:
            return {}
        groups: dict[str, list[int]] = {}
        for i, s in enumerate(samples):
            if self.breakdown_key in s.meta:
                groups.setdefault(f"{self.breakdown_key}={s.meta[self.breakdown_key]}", []).append(i)
        out = {}
        for key, idx in sorted(groups.items()):
            sel = np.asarray(idx)
            out[key] = {
                "n": int(sel.size),
                "accuracy": float(np.mean(y_true[sel] == y_pred[sel])),
                "n_invalid": int(np.sum(y_pred[sel] == INVALID)),
            }
        return out
