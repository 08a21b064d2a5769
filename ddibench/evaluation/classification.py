"""Single-label classification: accuracy, macro-F1 and Cohen's kappa over a :class:`LabelSpace`.

Each metric has a bootstrap interval clustered by the samples' cluster keys (the drugs of a pair, the
scaffold of a molecule). The input check is strict, OGB style: exactly one prediction per sample, no
unknown ids, labels in range. Metric values equal scikit-learn's on the same predictions (see
:mod:`ddibench.metrics.classification` for the convention on unparsable answers).

Binary tasks (``positive_label`` set, e.g. toxicity's "yes") also report **AUROC** of the positive
label's score (``Prediction.scores[str(positive_label)]``, a probability in [0, 1]) when the system
gives scores: every valid prediction must then carry one; an unparsable answer has no score and ranks
at 0.5, in the middle. A system that gives labels only (an LLM answering yes/no) gets no AUROC. AUROC is
part of the units and of :meth:`ClassificationEvaluator.statistic`, so it has intervals and paired
comparisons like the other metrics; it equals scikit-learn's ``roc_auc_score`` (with ``sample_weight``
for the bootstrap replicates; see :mod:`ddibench.metrics.auroc`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from ddibench.evaluation.answers import AnswerDistribution, answer_distribution
from ddibench.evaluation.base import (
    BaseEvaluator,
    EvaluationInputError,
    EvaluationResult,
    MetricSpec,
    MetricValue,
    SampleView,
    Statistic,
    answer_text,
    check_coverage,
    pair_names,
)
from ddibench.metrics.auroc import weighted_auroc
from ddibench.metrics.bootstrap import BootstrapSpec
from ddibench.metrics.classification import INVALID, confusion_matrices, per_class_f1, scores_from_confusion
from ddibench.schema import LabelSpace, Prediction, Sample

CLASSIFICATION_METRICS = (
    MetricSpec(name="accuracy", label="accuracy", description="share of samples whose label is the gold label"),
    MetricSpec(
        name="macro_f1",
        label="macro-F1",
        primary=True,
        description="F1 averaged over the labels present in the gold labels or the valid predictions",
    ),
    MetricSpec(name="kappa", label="Cohen's kappa", description="agreement with the gold labels beyond chance"),
)
AUROC_METRIC = MetricSpec(
    name="auroc",
    label="AUROC",
    description="area under the ROC curve of the positive label's score (systems that give scores; unparsable answers rank at 0.5)",
)
INVALID_SCORE = 0.5  # the score of an answer that could not be parsed: it ranks in the middle


class ClassificationEvaluator(BaseEvaluator):
    """Single-label classification over a :class:`LabelSpace`."""

    kind = "classification"
    metrics: tuple[MetricSpec, ...] = CLASSIFICATION_METRICS
    answer_fields: ClassVar[tuple[str, ...]] = ("label", "position")

    def __init__(
        self, label_space: LabelSpace, breakdown_key: str | None = "n_unseen", positive_label: int | None = None
    ) -> None:
        super().__init__()
        self.label_space = label_space
        self.breakdown_key = breakdown_key
        if positive_label is not None and not (len(label_space) == 2 and positive_label in (0, 1)):
            raise ValueError("AUROC (positive_label) needs a binary label space and a positive label of 0 or 1")
        self.positive_label = positive_label
        if positive_label is not None:
            self.metrics = (*CLASSIFICATION_METRICS, AUROC_METRIC)

    @property
    def expected_format(self) -> str:
        n = len(self.label_space)
        scores = (
            f"; optionally scores: {{'{self.positive_label}': probability of label {self.positive_label} in [0, 1], ...}} "
            "on every valid prediction (for AUROC)"
            if self.positive_label is not None
            else ""
        )
        return (
            f"one Prediction per evaluated sample, keyed by sample id; label: int in 0..{n - 1} "
            f"(the label id), or valid=False (label ignored) when the system's output could not be parsed{scores}"
        )

    def reduce(self, prediction: Prediction) -> Prediction:
        """The label, and the positive label's score where AUROC reads it (never the other labels' scores:
        an 86-label score vector is most of a DrugBank bundle and no metric here reads it)."""
        out = super().reduce(prediction)
        key = str(self.positive_label)
        if self.positive_label is not None and prediction.scores is not None and key in prediction.scores:
            out = out.model_copy(update={"scores": {key: prediction.scores[key]}})
        return out

    def _positive_scores(self, samples: Sequence[Sample], predictions: Mapping[str, Prediction]) -> list[float] | None:
        """The positive label's score of every sample (invalid answers: 0.5), or None when the system gave
        no scores; a system that scores some valid answers and not others is a bug in the system."""
        if self.positive_label is None:
            return None
        key = str(self.positive_label)
        valid = [predictions[s.id] for s in samples if predictions[s.id].valid]
        with_scores = [p for p in valid if p.scores is not None and key in p.scores]
        if not with_scores:
            return None
        if len(with_scores) != len(valid):
            missing = next(p.sample_id for p in valid if p.scores is None or key not in p.scores)
            raise EvaluationInputError(
                f"prediction for {missing} has no score for label {key} while others do; expected {self.expected_format}"
            )
        out = []
        for s in samples:
            pred = predictions[s.id]
            if not pred.valid:
                out.append(INVALID_SCORE)
                continue
            value = pred.scores[key]  # type: ignore[index]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= float(value) <= 1.0:
                raise EvaluationInputError(
                    f"prediction for {s.id} has score {value!r} for label {key}; expected {self.expected_format}"
                )
            out.append(float(value))
        return out

    def _predicted_labels(self, samples: Sequence[Sample], predictions: Mapping[str, Prediction]) -> np.ndarray:
        n = len(self.label_space)
        out = np.empty(len(samples), dtype=np.int64)
        for i, sample in enumerate(samples):
            pred = predictions[sample.id]
            if not pred.valid:
                out[i] = INVALID
                continue
            if not isinstance(pred.label, int) or isinstance(pred.label, bool) or not 0 <= pred.label < n:
                raise EvaluationInputError(
                    f"prediction for {sample.id} has label {pred.label!r}; expected {self.expected_format}"
                )
            out[i] = pred.label
        return out

    def units(
        self,
        samples: Sequence[Sample],
        predictions: Mapping[str, Prediction],
        evaluation: EvaluationResult | None = None,
    ) -> list[dict[str, Any]]:
        y_pred = self._predicted_labels(samples, predictions)
        units: list[dict[str, Any]] = [{"pred": int(p), "gold": s.label} for s, p in zip(samples, y_pred)]
        scores = self._positive_scores(samples, predictions)
        if scores is not None:
            for unit, score in zip(units, scores):
                unit["score"] = score
        return units

    def statistic(self, units: Sequence[Mapping[str, Any]]) -> Statistic:
        n_labels = len(self.label_space)
        y_true = np.fromiter((u["gold"] for u in units), dtype=np.int64, count=len(units))
        y_pred = np.fromiter((u["pred"] for u in units), dtype=np.int64, count=len(units))
        reference = per_class_f1(confusion_matrices(y_true, y_pred, n_labels))
        with_auroc = self.positive_label is not None and bool(units) and all(u.get("score") is not None for u in units)
        positive = y_true == self.positive_label
        scores = np.array([u["score"] for u in units], dtype=float) if with_auroc else None

        def statistic(weights: np.ndarray) -> dict[str, np.ndarray]:
            out = scores_from_confusion(confusion_matrices(y_true, y_pred, n_labels, weights), reference_f1=reference)
            if scores is not None:
                out["auroc"] = np.asarray(weighted_auroc(positive, scores, weights))
            return out

        return statistic

    def sample_view(self, sample: Sample, prediction: Prediction, evaluation: EvaluationResult) -> SampleView:
        """Labels as their sentences with the pair's names; a sample scores 1 when its answer is the gold."""
        names = pair_names(sample)
        labels = self.label_space

        def text(label_id: int) -> str:
            return labels[label_id].render(*names) if 0 <= label_id < len(labels) else str(label_id)

        gold = sample.label
        predicted = answer_text(prediction, None if prediction.label is None else text(prediction.label))
        return SampleView(text(gold), predicted, gold, float(prediction.valid and prediction.label == gold))

    def floors(
        self, samples: Sequence[Sample], train: Sequence[Sample], draws: int = 20, seed: int = 0
    ) -> dict[str, Any]:
        """The majority floor (the training split's most frequent label for every sample; the evaluated
        samples' own when there is no training split) and the uniform-random floor (mean of ``draws``
        seeded draws of a label uniformly at random), on these samples."""
        if not samples:
            return {}
        counts = Counter(s.label for s in (train or samples))
        majority = min(counts, key=lambda k: (-counts[k], k))
        n = len(self.label_space)
        return {
            "majority": {
                "label": majority,
                "from": "training split" if train else "evaluated samples",
                "metrics": self._floor_metrics(
                    samples, {s.id: Prediction(sample_id=s.id, label=majority) for s in samples}
                ),
            },
            "uniform_random": {
                "draws": draws,
                "seed": seed,
                "metrics": self._random_floor(
                    samples, lambda rng: Prediction(sample_id="", label=int(rng.integers(n))), draws, seed
                ),
            },
        }

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
        f1 = per_class_f1(confusion_matrices(y_true, y_pred, n_labels))
        intervals = self.intervals(units, [s.clusters for s in samples], bootstrap)
        metrics = {
            name: MetricValue(value=value, ci_low=intervals[name][0], ci_high=intervals[name][1])
            for name, value in self.point(units).items()
        }
        invalid = [s.id for s, p in zip(samples, y_pred) if p == INVALID]
        examples = [{"sample_id": sid, "error": predictions[sid].error or "unparsable output"} for sid in invalid[:5]]
        answers = self._spread(samples, predictions, y_true, y_pred)
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
            answers=answers,
        )

    def answer_spread(self, samples: Sequence[Sample], predictions: Mapping[str, Prediction]) -> AnswerDistribution:
        """How the answers spread over the labels, beside the gold: :meth:`evaluate`'s ``answers`` without the
        bootstrap."""
        units = self.units(samples, predictions)
        y_true = np.fromiter((u["gold"] for u in units), dtype=np.int64, count=len(units))
        y_pred = np.fromiter((u["pred"] for u in units), dtype=np.int64, count=len(units))
        return self._spread(samples, predictions, y_true, y_pred)

    def _spread(
        self, samples: Sequence[Sample], predictions: Mapping[str, Prediction], y_true: np.ndarray, y_pred: np.ndarray
    ) -> AnswerDistribution:
        valid = [s for s, p in zip(samples, y_pred) if p != INVALID]
        return answer_distribution(
            [int(p) for p in y_pred if p != INVALID],
            [[int(t)] for t in y_true],
            len(self.label_space),
            names=[lb.name for lb in self.label_space],
            positions=[predictions[s.id].position for s in valid],
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
