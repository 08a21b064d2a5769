"""Evaluation: one evaluator per kind of answer, all built on :mod:`ddibench.evaluation.base`.

* :class:`ClassificationEvaluator` — one label per sample (accuracy, macro-F1, Cohen's kappa).
* :class:`RankingEvaluator` — ranked labels against gold sets (precision@k, recall@k, NDCG@k).
* :class:`TextEvaluator` — free text against references (similarities, label recovery, LLM judge,
  SelfCheckGPT).
* :class:`ProbeEvaluator` — captions of every molecule, scored by a probe that learns a property from
  them (AUROC over probe seeds).

A task family's ``evaluator()`` returns one of these (or its own :class:`BaseEvaluator` subclass); the
runner, report, store and board read what it declares (:class:`MetricSpec`, :class:`ScoringOption`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# names -> defining module; imported on first use, so a task family importing one evaluator loads only that one
_EXPORTS = {
    **dict.fromkeys(
        (
            "BaseEvaluator",
            "EvaluationInputError",
            "EvaluationResult",
            "Evaluator",
            "MetricSpec",
            "MetricValue",
            "ModelScoring",
            "SampleView",
            "Scorer",
            "ScoringJob",
            "ScoringOption",
            "Statistic",
            "check_coverage",
            "mean_statistic",
        ),
        "ddibench.evaluation.base",
    ),
    "ClassificationEvaluator": "ddibench.evaluation.classification",
    "RankingEvaluator": "ddibench.evaluation.ranking",
    "ranking_scores": "ddibench.evaluation.ranking",
    "TextEvaluator": "ddibench.evaluation.text",
    **dict.fromkeys(("ProbeEvaluator", "ProbeData", "linear_probe", "finetune_probe"), "ddibench.evaluation.probe"),
    "scoring_encoder_of": "ddibench.evaluation.text",
}

if TYPE_CHECKING:
    from ddibench.evaluation.base import (
        BaseEvaluator,
        EvaluationInputError,
        EvaluationResult,
        Evaluator,
        MetricSpec,
        MetricValue,
        ModelScoring,
        SampleView,
        Scorer,
        ScoringJob,
        ScoringOption,
        Statistic,
        check_coverage,
        mean_statistic,
    )
    from ddibench.evaluation.classification import ClassificationEvaluator
    from ddibench.evaluation.probe import ProbeData, ProbeEvaluator, finetune_probe, linear_probe
    from ddibench.evaluation.ranking import RankingEvaluator, ranking_scores
    from ddibench.evaluation.text import TextEvaluator, scoring_encoder_of


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'ddibench.evaluation' has no attribute '{name}'")


__all__ = [
    "BaseEvaluator",
    "ClassificationEvaluator",
    "EvaluationInputError",
    "EvaluationResult",
    "Evaluator",
    "MetricSpec",
    "MetricValue",
    "ModelScoring",
    "ProbeData",
    "ProbeEvaluator",
    "RankingEvaluator",
    "SampleView",
    "Scorer",
    "ScoringJob",
    "ScoringOption",
    "Statistic",
    "TextEvaluator",
    "check_coverage",
    "finetune_probe",
    "linear_probe",
    "mean_statistic",
    "ranking_scores",
    "scoring_encoder_of",
]
