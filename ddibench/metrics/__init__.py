"""Metrics and their confidence intervals."""

from ddibench.metrics.bootstrap import BootstrapSpec, bootstrap_intervals
from ddibench.metrics.classification import (
    INVALID,
    ClassificationScores,
    classification_scores,
    confusion_matrices,
    scores_from_confusion,
)

__all__ = [
    "INVALID",
    "BootstrapSpec",
    "ClassificationScores",
    "bootstrap_intervals",
    "classification_scores",
    "confusion_matrices",
    "scores_from_confusion",
]
