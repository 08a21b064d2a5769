"""Top-k answers against a gold *set* of labels: precision@k, recall@k and NDCG@k.

A sample's target is a tuple of gold label ids (no negatives: every listed label is relevant); a
prediction's ``ranked`` is a list of label ids, best first. Only the first ``k`` distinct ids count;
an invalid prediction (unparsable answer) scores zero and is counted apart.

* precision@k = hits in the top k / k
* recall@k    = hits in the top k / |gold|
* NDCG@k      = DCG / ideal DCG, DCG = sum over the top k of rel_i / log2(i + 2) (binary relevance)

Each is the mean over samples, with a bootstrap interval clustered by the samples' cluster keys. Beside
each metric the result states its **ceiling** on the same samples: what a perfect ranker would score.
With 2-3 gold labels per sample precision@5 cannot reach 1, and a reader needs to know how far it can go.

**Slices** (``slice_key``, ``slices``): each metric is also reported on the samples whose
``meta[slice_key]`` names a slice (``precision@5_no_overlap``: precision@5 on the "no-overlap" samples),
with its own interval and ceiling; ``primary_slice`` makes one slice's metric the headline (drug
targets: the molecules outside the knowledge graph). A sample's unit holds the metrics of its own slice
only, so the bootstrap and the paired comparisons resample every slice metric correctly.
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
    answer_text,
    check_coverage,
)
from ddibench.metrics.bootstrap import BootstrapSpec
from ddibench.schema import LabelSpace, Prediction, Sample

KINDS = {
    "precision": ("precision", "hits in the top {k} / {k}"),
    "recall": ("recall", "hits in the top {k} / number of gold labels"),
    "ndcg": ("NDCG", "discounted cumulative gain of the top {k}, divided by its ideal value"),
}


def ranking_scores(gold: set[int], ranked: Sequence[int], k: int) -> dict[str, float]:
    """precision@k, recall@k and NDCG@k of one ranked list (a direct, readable definition)."""
    top = list(dict.fromkeys(ranked))[:k]
    rel = [1.0 if label in gold else 0.0 for label in top]
    hits = sum(rel)
    dcg = sum(r / np.log2(i + 2) for i, r in enumerate(rel))
    ideal = sum(1.0 / np.log2(i + 2) for i in range(min(len(gold), k)))
    return {
        "precision": hits / k,
        "recall": hits / len(gold) if gold else 0.0,
        "ndcg": dcg / ideal if ideal > 0 else 0.0,
    }


class RankingEvaluator(BaseEvaluator):
    """Ranked label lists against gold label sets (see the module docstring)."""

    kind = "ranking"
    answer_fields: ClassVar[tuple[str, ...]] = ("ranked", "position")

    def __init__(
        self,
        label_space: LabelSpace,
        k: int = 5,
        metrics: Sequence[str] = ("precision", "recall", "ndcg"),
        primary: str = "precision",
        breakdown_key: str | None = None,
        slice_key: str | None = None,
        slices: Sequence[str] = (),
        primary_slice: str | None = None,
    ) -> None:
        super().__init__()
        unknown = [m for m in (*metrics, primary) if m not in KINDS]
        if unknown or primary not in metrics:
            raise ValueError(f"ranking metrics are {', '.join(KINDS)}; the primary one must be among those reported")
        if (slices and not slice_key) or (primary_slice is not None and primary_slice not in slices):
            raise ValueError("slices need a slice_key, and the primary slice must be one of them")
        self.label_space = label_space
        self.k = k
        self.kinds = tuple(metrics)
        self.breakdown_key = breakdown_key
        self.slice_key = slice_key
        self.slices = tuple(slices)
        self.primary_slice = primary_slice  # the slice whose metric is the headline (None: all samples)
        headline = self.metric_name(primary, primary_slice)
        order = (*((primary_slice,) if primary_slice else ()), None, *(s for s in self.slices if s != primary_slice))
        self.metrics = tuple(
            MetricSpec(
                name=self.metric_name(m, s),
                label=f"{KINDS[m][0]}@{k}" + (f" ({s})" if s else ""),
                primary=self.metric_name(m, s) == headline,
                description=KINDS[m][1].format(k=k) + (f", on the {s} samples" if s else ""),
            )
            for s in order
            for m in self.kinds
        )

    def metric_name(self, kind: str, slice_name: str | None = None) -> str:
        """``precision@5``, or ``precision@5_no_overlap`` for the slice "no-overlap"."""
        base = f"{kind}@{self.k}"
        return f"{base}_{slice_name.replace('-', '_').replace(' ', '_')}" if slice_name else base

    def _slice_of(self, sample: Sample) -> str | None:
        if not self.slice_key:
            return None
        value = sample.meta.get(self.slice_key)
        return str(value) if value is not None and str(value) in self.slices else None

    @property
    def expected_format(self) -> str:
        return (
            f"one Prediction per evaluated sample; ranked: a list of label ids in 0..{len(self.label_space) - 1}, best first "
            f"(the first {self.k} distinct ids count), or valid=False when the system's output could not be parsed"
        )

    def reduce(self, prediction: Prediction) -> Prediction:
        """The ranking up to its k-th distinct id (the metrics read no further; a model that ranks all 200
        side effects writes the other 195 into every prediction)."""
        out = super().reduce(prediction)
        if not isinstance(prediction.ranked, list):
            return out
        seen: set[int] = set()
        for end, label in enumerate(prediction.ranked, 1):
            seen.add(label)
            if len(seen) == self.k:
                return out.model_copy(update={"ranked": prediction.ranked[:end]})
        return out

    def _ranked(self, sample: Sample, pred: Prediction) -> list[int]:
        if not pred.valid:
            return []
        ranked = pred.ranked
        n = len(self.label_space)
        if not isinstance(ranked, list) or any(
            isinstance(x, bool) or not isinstance(x, int) or not 0 <= x < n for x in ranked
        ):
            raise EvaluationInputError(
                f"prediction for {sample.id} has ranked {ranked!r}; expected {self.expected_format}"
            )
        return ranked

    @staticmethod
    def gold(sample: Sample) -> set[int]:
        target = sample.target
        if not isinstance(target, (tuple, list)) or not target:
            raise EvaluationInputError(
                f"sample {sample.id} has target {target!r}; a ranking task's target is a non-empty tuple of label ids"
            )
        return {int(t) for t in target}

    def units(
        self,
        samples: Sequence[Sample],
        predictions: Mapping[str, Prediction],
        evaluation: EvaluationResult | None = None,
    ) -> list[dict[str, Any]]:
        return [
            self._unit(s, ranking_scores(self.gold(s), self._ranked(s, predictions[s.id]), self.k)) for s in samples
        ]

    def _unit(self, sample: Sample, scores: Mapping[str, float]) -> dict[str, Any]:
        """A sample's metrics: overall, and under its own slice's names."""
        unit = {self.metric_name(m): scores[m] for m in self.kinds}
        slice_name = self._slice_of(sample)
        if slice_name is not None:
            unit.update({self.metric_name(m, slice_name): scores[m] for m in self.kinds})
        return unit

    def sample_view(self, sample: Sample, prediction: Prediction, evaluation: EvaluationResult) -> SampleView:
        """Gold and ranked labels as their names, best first; the sample's primary score."""
        labels = self.label_space

        def names(ids: Sequence[int]) -> str:
            return ", ".join(labels[i].name if 0 <= i < len(labels) else str(i) for i in ids)

        predicted = answer_text(prediction, None if prediction.ranked is None else names(prediction.ranked))
        score = evaluation.per_sample.get(sample.id, {}).get(evaluation.primary_metric)
        self.gold(sample)  # refuses a target that is not a tuple of label ids
        return SampleView(names(list(sample.label_ids)), predicted, None, score)

    def floors(
        self, samples: Sequence[Sample], train: Sequence[Sample], draws: int = 20, seed: int = 0
    ) -> dict[str, Any]:
        """The popularity floor (the k labels most frequent in the training targets, for every sample) and
        the uniform-random floor (k distinct labels drawn uniformly, mean of ``draws`` seeded draws)."""
        if not samples:
            return {}
        counts: Counter[int] = Counter()
        for s in train or samples:
            counts.update(self.gold(s))
        top = sorted(counts, key=lambda k: (-counts[k], k))[: self.k]
        n = len(self.label_space)
        return {
            "popularity": {
                "labels": top,
                "from": "training split" if train else "evaluated samples",
                "metrics": self._floor_metrics(
                    samples, {s.id: Prediction(sample_id=s.id, ranked=top) for s in samples}
                ),
            },
            "uniform_random": {
                "draws": draws,
                "seed": seed,
                "metrics": self._random_floor(
                    samples,
                    lambda rng: Prediction(
                        sample_id="", ranked=[int(x) for x in rng.choice(n, size=min(self.k, n), replace=False)]
                    ),
                    draws,
                    seed,
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
        units = self.units(samples, predictions)
        intervals = self.intervals(units, [s.clusters for s in samples], bootstrap)
        point = self.point(units)  # the statistic at unit weights: a metric no unit holds is nan
        metrics = {}
        for spec in self.metrics:
            low, high = intervals.get(spec.name, (float("nan"), float("nan")))
            metrics[spec.name] = MetricValue(value=point.get(spec.name, float("nan")), ci_low=low, ci_high=high)
        perfect = [self._unit(s, ranking_scores(self.gold(s), sorted(self.gold(s)), self.k)) for s in samples]
        ceilings = {spec.name: _mean(perfect, spec.name) for spec in self.metrics}
        invalid = [s.id for s in samples if not predictions[s.id].valid]
        answers = self.answer_spread(samples, predictions)
        breakdown = self._breakdown(samples, predictions, units)
        return EvaluationResult(
            n=len(samples),
            n_invalid=len(invalid),
            metrics=metrics,
            primary_metric=self.primary_metric,
            bootstrap=bootstrap.describe(),
            metric_specs=list(self.metrics),
            ceilings=ceilings,
            breakdown=breakdown,
            invalid_examples=[
                {"sample_id": sid, "error": predictions[sid].error or "unparsable output"} for sid in invalid[:5]
            ],
            per_sample={s.id: {k: round(v, 4) for k, v in u.items()} for s, u in zip(samples, units)},
            answers=answers,
        )

    def answer_spread(self, samples: Sequence[Sample], predictions: Mapping[str, Prediction]) -> AnswerDistribution:
        """How the top-ranked answers of the valid, non-empty predictions spread over the labels, beside the gold."""
        answered = [predictions[s.id] for s in samples if predictions[s.id].valid and predictions[s.id].ranked]
        return answer_distribution(
            [int(p.ranked[0]) for p in answered if p.ranked],
            [self.gold(s) for s in samples],
            len(self.label_space),
            names=[lb.name for lb in self.label_space],
            positions=[p.position for p in answered],
        )

    def _breakdown(
        self, samples: Sequence[Sample], predictions: Mapping[str, Prediction], units: Sequence[Mapping[str, float]]
    ) -> dict[str, dict[str, Any]]:
        """Sample and invalid counts of each slice, then each ``breakdown_key`` group's counts and metric means."""
        breakdown: dict[str, dict[str, Any]] = {}
        for slice_name in self.slices:
            idx = [i for i, s in enumerate(samples) if self._slice_of(s) == slice_name]
            breakdown[f"{self.slice_key}={slice_name}"] = {
                "n": len(idx),
                "n_invalid": sum(1 for i in idx if not predictions[samples[i].id].valid),
            }
        if self.breakdown_key:
            groups: dict[str, list[int]] = {}
            for i, s in enumerate(samples):
                if self.breakdown_key in s.meta:
                    groups.setdefault(f"{self.breakdown_key}={s.meta[self.breakdown_key]}", []).append(i)
            for key, idx in sorted(groups.items()):
                breakdown[key] = {
                    "n": len(idx),
                    **{m.name: _mean([units[i] for i in idx], m.name) for m in self.metrics},
                    "n_invalid": sum(1 for i in idx if not predictions[samples[i].id].valid),
                }
        return breakdown


def _mean(units: Sequence[Mapping[str, float]], name: str) -> float:
    """The mean of metric ``name`` over the units that hold it (a sample's unit holds only its own slice's
    metrics); nan when none does."""
    values = np.array([u[name] for u in units if name in u], dtype=float)
    return float(values.mean()) if values.size else float("nan")
