"""Paired comparison of two runs on the samples they share.

The difference in the primary metric (run A minus run B) gets a bootstrap interval in which both runs
are resampled with the *same* weights (the same drugs or documents drawn), so sample difficulty cancels
out. Two runs are "tied" when the 95% interval of the difference contains 0. Macro-F1 keeps each
run's label set fixed under resampling, as in the unpaired intervals.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ddibench.metrics.bootstrap import BootstrapSpec, bootstrap_intervals
from ddibench.metrics.classification import confusion_matrices, per_class_f1, scores_from_confusion


def paired_difference(
    metric: str,
    clusters: Sequence[Sequence[str]],
    gold: np.ndarray | None,
    a: np.ndarray,
    b: np.ndarray,
    n_labels: int = 0,
    spec: BootstrapSpec | None = None,
) -> tuple[float, float, float]:
    """(difference, low, high) of ``metric`` between runs A and B.

    For classification metrics (``accuracy``, ``macro_f1``, ``kappa``) ``a``/``b`` are predicted labels
    (-1 = invalid) and ``gold`` the labels; otherwise ``a``/``b`` are per-sample scores to average.
    """
    spec = spec or BootstrapSpec(replicates=500, seed=0)
    if metric in ("accuracy", "macro_f1", "kappa"):
        assert gold is not None
        ref_a = per_class_f1(confusion_matrices(gold, a, n_labels))
        ref_b = per_class_f1(confusion_matrices(gold, b, n_labels))
        point = (
            scores_from_confusion(confusion_matrices(gold, a, n_labels))[metric]
            - scores_from_confusion(confusion_matrices(gold, b, n_labels))[metric]
        )

        def statistic(weights: np.ndarray) -> dict[str, np.ndarray]:
            sa = scores_from_confusion(confusion_matrices(gold, a, n_labels, weights), reference_f1=ref_a)[
                metric
            ]
            sb = scores_from_confusion(confusion_matrices(gold, b, n_labels, weights), reference_f1=ref_b)[
                metric
            ]
            return {"diff": sa - sb}
    else:
        diff = np.nan_to_num(a.astype(float)) - np.nan_to_num(b.astype(float))
        point = float(diff.mean()) if diff.size else float("nan")

        def statistic(weights: np.ndarray) -> dict[str, np.ndarray]:
            return {"diff": (weights * diff).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-12)}

    low, high = bootstrap_intervals(statistic, len(a), spec, clusters=clusters)["diff"]
    return float(point), low, high
