"""Evaluators shared by task families.

:class:`ClassificationEvaluator` scores single-label predictions (DrugBank's 86 interaction types):
accuracy, macro-F1 and Cohen's kappa, each with a bootstrap interval clustered by drug. Its input
check is strict, OGB style: exactly one prediction per sample, no unknown ids, labels in range.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ddibench.metrics.bootstrap import BootstrapSpec, bootstrap_intervals
from ddibench.metrics.classification import INVALID, confusion_matrices, per_class_f1, scores_from_confusion
from ddibench.schema import LabelSpace, Prediction, Sample
from ddibench.task import EvaluationInputError, EvaluationResult, MetricValue


def check_coverage(samples: Sequence[Sample], predictions: Mapping[str, Prediction]) -> None:
    """Every sample has a prediction and every prediction belongs to a sample."""
    ids = [s.id for s in samples]
    wanted = set(ids)
    if len(wanted) != len(ids):
        dup = next(i for i, c in Counter(ids).items() if c > 1)
        raise EvaluationInputError(f"sample id {dup} occurs twice in the evaluated samples")
    missing = [i for i in ids if i not in predictions]
    extra = [i for i in predictions if i not in wanted]
    if missing:
        raise EvaluationInputError(
            f"{len(missing)} of {len(ids)} samples have no prediction (first: {', '.join(missing[:3])})"
        )
    if extra:
        raise EvaluationInputError(
            f"{len(extra)} predictions name no evaluated sample (first: {', '.join(extra[:3])})"
        )


class ClassificationEvaluator:
    """Single-label classification over a :class:`LabelSpace`."""

    primary_metric = "macro_f1"

    def __init__(self, label_space: LabelSpace, breakdown_key: str | None = "n_unseen") -> None:
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
                raise EvaluationInputError(
                    f"prediction for {sample.id} has label {pred.label!r}; expected {self.expected_format}"
                )
            out[i] = pred.label
        return out

    def evaluate(
        self,
        samples: Sequence[Sample],
        predictions: Mapping[str, Prediction],
        bootstrap: BootstrapSpec,
        extras: Mapping[str, object] | None = None,
    ) -> EvaluationResult:
        check_coverage(samples, predictions)
        n_labels = len(self.label_space)
        y_true = np.fromiter((int(s.target) for s in samples), dtype=np.int64, count=len(samples))  # type: ignore[arg-type]
        y_pred = self._predicted_labels(samples, predictions)
        cm = confusion_matrices(y_true, y_pred, n_labels)
        point = scores_from_confusion(cm)
        f1 = per_class_f1(cm)

        def statistic(weights: np.ndarray) -> dict[str, np.ndarray]:
            return scores_from_confusion(confusion_matrices(y_true, y_pred, n_labels, weights), reference_f1=f1)

        intervals = bootstrap_intervals(
            statistic, len(samples), bootstrap, clusters=[s.clusters for s in samples]
        )
        metrics = {
            name: MetricValue(value=float(value), ci_low=intervals[name][0], ci_high=intervals[name][1])
            for name, value in point.items()
        }
        invalid = [s.id for s, p in zip(samples, y_pred) if p == INVALID]
        examples = [
            {"sample_id": sid, "error": predictions[sid].error or "unparsable output"} for sid in invalid[:5]
        ]
        return EvaluationResult(
            n=len(samples),
            n_invalid=len(invalid),
            metrics=metrics,
            primary_metric=self.primary_metric,
            bootstrap=bootstrap.describe(),
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


def scoring_encoder_of(manifest: dict[str, Any]) -> str | None:
    """The non-default text encoder a run's free-text scorers used, from its manifest (None: the default)."""
    from ddibench.embeddings import DEFAULT_ENCODER

    spec = manifest.get("scoring", {}).get("scorers", {}).get("embedding", {}).get("encoder")
    return spec if spec and spec != DEFAULT_ENCODER else None


class QAEvaluator:
    """Free-text answers against reference answers.

    Always: embedding similarity and BERTScore F1 to the reference; for questions about a drug pair,
    label recovery (the answer mapped back to an interaction type, scored as accuracy). When the run was
    scored by LLMs (``extras``): the judge's correctness, clarity and overall (1-5) and SelfCheckGPT. Each
    mean has a bootstrap interval, clustered by the samples' cluster keys (drugs, or source documents).
    """

    primary_metric = "embedding_similarity"

    def __init__(self, label_space: LabelSpace | None, encoder: str = "minilm", bertscore_layers: int = 6) -> None:
        self.label_space = label_space
        self.encoder_spec = encoder
        self.bertscore_layers = bertscore_layers

    expected_format = "one Prediction per evaluated sample with the answer in text (valid=False or empty text counts as no answer)"

    def describe(self) -> dict[str, object]:
        from ddibench.embeddings import shared_encoder
        from ddibench.qa.scoring import BertScorer

        return {"embedding": shared_encoder(self.encoder_spec).identity, "bertscore": BertScorer(shared_encoder(self.encoder_spec), self.bertscore_layers).describe()}

    def evaluate(
        self,
        samples: Sequence[Sample],
        predictions: Mapping[str, Prediction],
        bootstrap: BootstrapSpec,
        extras: Mapping[str, object] | None = None,
    ) -> EvaluationResult:
        from ddibench.embeddings import shared_encoder
        from ddibench.qa.scoring import BertScorer, LabelRecovery, embedding_similarity, selfcheck_bertscore

        check_coverage(samples, predictions)
        extras = extras or {}
        encoder = shared_encoder(self.encoder_spec)
        answers = [(predictions[s.id].text or "").strip() if predictions[s.id].valid else "" for s in samples]
        references = [str(s.target["answer"]) for s in samples]  # type: ignore[index]
        per: dict[str, np.ndarray] = {
            "embedding_similarity": embedding_similarity(encoder, answers, references),
        }
        scorer = BertScorer(encoder, self.bertscore_layers)
        per["bertscore_f1"] = scorer.score(answers, references)[:, 2]
        labels = [s.target.get("label") for s in samples]  # type: ignore[union-attr]
        recovered: list[int | None] = []
        if self.label_space is not None and any(lb is not None for lb in labels):
            recovery = LabelRecovery(self.label_space, encoder)
            for s, answer in zip(samples, answers):
                pair = s.input.pair  # type: ignore[union-attr]
                recovered.append(recovery.recover(answer, pair.head.name, pair.tail.name)[0] if pair else None)
            per["label_recovery"] = np.array([float(r is not None and r == lb) for r, lb in zip(recovered, labels)])
        judge = extras.get("judge") or {}
        if judge:
            for key in ("correctness", "clarity", "overall"):
                per[f"judge_{key}"] = np.array([_num(judge.get(s.id, {}).get(key)) for s in samples])
        selfcheck = extras.get("selfcheck") or {}
        if selfcheck:
            per["selfcheck"] = np.array([
                _num(selfcheck_bertscore(scorer, a, selfcheck.get(s.id, {}).get("samples", [])) if a else None)
                for s, a in zip(samples, answers)
            ])  # fmt: skip
        values = {name: arr for name, arr in per.items()}

        def statistic(weights: np.ndarray) -> dict[str, np.ndarray]:
            out = {}
            for name, arr in values.items():
                ok = ~np.isnan(arr)
                w = weights[:, ok]
                total = w.sum(axis=1)
                out[name] = np.where(total > 0, (w * arr[ok]).sum(axis=1) / np.where(total > 0, total, 1), np.nan)
            return out

        intervals = bootstrap_intervals(statistic, len(samples), bootstrap, clusters=[s.clusters for s in samples])
        metrics = {
            name: MetricValue(value=float(np.nanmean(arr)) if np.any(~np.isnan(arr)) else float("nan"), ci_low=intervals[name][0], ci_high=intervals[name][1])
            for name, arr in values.items()
        }
        invalid = [s.id for s, a in zip(samples, answers) if not a]
        breakdown: dict[str, dict] = {}
        for i, s in enumerate(samples):
            key = str(s.meta.get("slice", ""))
            if key:
                b = breakdown.setdefault(f"slice={key}", {"n": 0, "_sum": 0.0})
                b["n"] += 1
                b["_sum"] += float(values["embedding_similarity"][i])
        for b in breakdown.values():
            b["embedding_similarity"] = b.pop("_sum") / b["n"]
        per_sample = {
            s.id: {name: (None if np.isnan(arr[i]) else round(float(arr[i]), 4)) for name, arr in values.items()}
            | ({"recovered_label": recovered[i]} if recovered else {})
            for i, s in enumerate(samples)
        }
        return EvaluationResult(
            n=len(samples),
            n_invalid=len(invalid),
            metrics=metrics,
            primary_metric=self.primary_metric,
            bootstrap=bootstrap.describe(),
            breakdown=breakdown,
            invalid_examples=[{"sample_id": sid, "error": predictions[sid].error or "empty answer"} for sid in invalid[:5]],
            per_sample=per_sample,
        )


def _num(value: object) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else float("nan")
