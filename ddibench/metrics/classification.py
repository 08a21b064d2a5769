"""Multi-class metrics from (weighted) confusion matrices: accuracy, macro-F1, Cohen's kappa.

They equal scikit-learn's ``accuracy_score``, ``f1_score(average="macro")`` and
``cohen_kappa_score`` on the same predictions (tests check this), with one convention for
predictions that could not be parsed (label :data:`INVALID`):

* they count as wrong (a false negative of the true class);
* macro-F1 averages over the labels present in the gold labels or in the *valid* predictions
  (scikit-learn's default label set, minus the invalid marker), so an invalid answer lowers recall of
  its true class without adding a phantom class;
* Cohen's kappa treats "invalid" as one more predicted category, exactly as scikit-learn does when
  the invalid marker is passed through.

Everything is computed from confusion matrices so that bootstrap replicates (weighted samples) are
one vectorised ``bincount`` each. For replicates, pass ``reference_f1`` (the per-label F1 of the full
sample): macro-F1 then averages over the full sample's label set, and a label that a replicate
happens not to contain keeps its observed F1, instead of silently dropping out of the average.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

INVALID = -1  # label of a prediction that could not be parsed


@dataclass(frozen=True, slots=True)
class ClassificationScores:
    accuracy: float
    macro_f1: float
    kappa: float

    def as_dict(self) -> dict[str, float]:
        return {"accuracy": self.accuracy, "macro_f1": self.macro_f1, "kappa": self.kappa}


def _columns(y_pred: np.ndarray, n_labels: int) -> np.ndarray:
    """Map predictions to confusion columns: 0..n-1 for labels, n for invalid."""
    y_pred = np.asarray(y_pred, dtype=np.int64)
    bad = (y_pred < 0) | (y_pred >= n_labels)
    if np.any(bad & (y_pred != INVALID)):
        raise ValueError(f"predicted labels must be in 0..{n_labels - 1} or {INVALID} (invalid)")
    return np.where(bad, n_labels, y_pred)


def confusion_matrices(
    y_true: np.ndarray, y_pred: np.ndarray, n_labels: int, weights: np.ndarray | None = None
) -> np.ndarray:
    """Confusion matrix of shape (n_labels, n_labels + 1); the last column counts invalid predictions.

    ``weights`` may be 1-D (one matrix) or 2-D of shape (replicates, samples) (a stack of matrices).
    """
    y_true = np.asarray(y_true, dtype=np.int64)
    if y_true.size and (y_true.min() < 0 or y_true.max() >= n_labels):
        raise ValueError(f"gold labels must be in 0..{n_labels - 1}")
    cols = _columns(y_pred, n_labels)
    width = n_labels + 1
    idx = y_true * width + cols
    cells = n_labels * width
    if weights is None:
        return np.bincount(idx, minlength=cells).reshape(n_labels, width).astype(np.float64)
    weights = np.asarray(weights, dtype=np.float64)
    if weights.ndim == 1:
        return np.bincount(idx, weights=weights, minlength=cells).reshape(n_labels, width)
    reps = weights.shape[0]
    flat = (np.arange(reps, dtype=np.int64)[:, None] * cells + idx[None, :]).ravel()
    return np.bincount(flat, weights=weights.ravel(), minlength=reps * cells).reshape(reps, n_labels, width)


def scores_from_confusion(cm: np.ndarray, reference_f1: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Accuracy, macro-F1 and kappa for one matrix (K, K+1) or a stack (B, K, K+1).

    ``reference_f1`` (length K, NaN for labels outside the label set) fixes macro-F1's label set: see
    the module docstring.
    """
    stack = cm if cm.ndim == 3 else cm[None]
    n_labels = stack.shape[1]
    total = stack.sum(axis=(1, 2))
    diag = np.trace(stack[:, :, :n_labels], axis1=1, axis2=2)
    rows = stack.sum(axis=2)  # gold marginals, (B, K)
    cols = stack.sum(axis=1)  # predicted marginals, (B, K+1)
    with np.errstate(invalid="ignore", divide="ignore"):
        accuracy = diag / total
        f1 = _f1(stack)
        present = (rows > 0) | (cols[:, :n_labels] > 0)
        if reference_f1 is None:
            macro_f1 = np.where(present, f1, 0.0).sum(axis=1) / present.sum(axis=1)
        else:
            in_set = ~np.isnan(reference_f1)
            filled = np.where(present, f1, reference_f1[None, :])
            macro_f1 = np.where(in_set[None, :], filled, 0.0).sum(axis=1) / in_set.sum()
        p_o = diag / total
        p_e = (rows * cols[:, :n_labels]).sum(axis=1) / (total * total)  # invalid column meets a zero row
        kappa = (p_o - p_e) / (1 - p_e)
    out = {"accuracy": accuracy, "macro_f1": macro_f1, "kappa": kappa}
    return out if cm.ndim == 3 else {k: v[0] for k, v in out.items()}


def _f1(stack: np.ndarray) -> np.ndarray:
    n_labels = stack.shape[1]
    tp = np.diagonal(stack[:, :, :n_labels], axis1=1, axis2=2)
    fp = stack[:, :, :n_labels].sum(axis=1) - tp
    fn = stack.sum(axis=2) - tp
    denom = 2 * tp + fp + fn
    return np.where(denom > 0, 2 * tp / np.where(denom > 0, denom, 1), 0.0)


def classification_scores(y_true: np.ndarray, y_pred: np.ndarray, n_labels: int) -> ClassificationScores:
    values = scores_from_confusion(confusion_matrices(y_true, y_pred, n_labels))
    return ClassificationScores(**{k: float(v) for k, v in values.items()})


def per_class_f1(cm: np.ndarray) -> np.ndarray:
    """F1 of each label (NaN for labels absent from both gold and valid predictions)."""
    n_labels = cm.shape[0]
    present = (cm.sum(axis=1) > 0) | (cm[:, :n_labels].sum(axis=0) > 0)
    return np.where(present, _f1(cm[None])[0], np.nan)
