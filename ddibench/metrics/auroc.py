"""Area under the ROC curve under sample weights, for many bootstrap replicates at once.

:func:`weighted_auroc` equals scikit-learn's ``roc_auc_score(y_true, scores, sample_weight=w)`` (tests
check it on data with ties and on bootstrap weights). It is written here because the intervals need it
thousands of times: a captioning probe reports the mean AUROC over 5 seeds and up to 27 label columns,
so 1,000 replicates are 135,000 AUROCs; scikit-learn validates its input on every call (about 1-2 ms
here), which makes that minutes, while sorting once and summing weights per replicate is a fraction of
a second (``benchmarks/probe_cost.py`` prints both).

The definition: the probability that a random positive outranks a random negative, ties counting one
half, with every sample counted by its weight:

    AUROC = sum over positive i, negative j of w_i * w_j * ([s_i > s_j] + 0.5 [s_i = s_j]) / (W_pos * W_neg)

It is NaN when the weights leave no positive or no negative sample.
"""

from __future__ import annotations

import numpy as np


def weighted_auroc(y_true: np.ndarray, scores: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray | float:
    """AUROC of ``scores`` for binary ``y_true`` (1 = positive); ``weights`` of shape (n,) gives a float,
    of shape (replicates, n) an array of one AUROC per replicate; None weighs every sample once."""
    y = np.asarray(y_true).astype(bool)
    s = np.asarray(scores, dtype=np.float64)
    if y.shape != s.shape or y.ndim != 1:
        raise ValueError("y_true and scores must be 1-D arrays of the same length")
    single = weights is None or np.ndim(weights) == 1
    w = np.ones((1, y.size)) if weights is None else np.atleast_2d(np.asarray(weights, dtype=np.float64))
    if w.shape[1] != y.size:
        raise ValueError(f"weights have {w.shape[1]} columns for {y.size} samples")
    if y.size == 0:
        out = np.full(w.shape[0], np.nan)
        return float(out[0]) if single else out
    order = np.argsort(s, kind="stable")
    sorted_scores = s[order]
    starts = np.flatnonzero(np.r_[True, sorted_scores[1:] != sorted_scores[:-1]])  # first index of each tied group
    pos = w[:, order] * y[order]
    neg = w[:, order] * ~y[order]
    pos_g = np.add.reduceat(pos, starts, axis=1)  # weight of positives per tied score group, (replicates, groups)
    neg_g = np.add.reduceat(neg, starts, axis=1)
    below = np.cumsum(neg_g, axis=1) - neg_g  # negatives with a strictly lower score
    total_pos, total_neg = pos_g.sum(axis=1), neg_g.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = (pos_g * (below + 0.5 * neg_g)).sum(axis=1) / (total_pos * total_neg)
    out = np.where((total_pos > 0) & (total_neg > 0), out, np.nan)
    return float(out[0]) if single else out
