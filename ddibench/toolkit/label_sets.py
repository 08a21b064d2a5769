"""What trained systems (``mlp``, ``emergnn``, an outside author's) share on label-set tasks (TWOSIDES side effects).

A label-set task's sample is a drug pair with a *set* of labels; the trained model has one sigmoid
output per label and a prediction is the labels ranked by score. Two objectives (the ``multilabel_loss``
option of both systems):

* ``"negatives"`` — EmerGNN's TWOSIDES objective (``TWOSIDES/base_model.py``): binary cross-entropy over
  the *positive* labels of each training pair (target 1) and the same labels on a generated negative
  pair, one drug replaced by a random training drug (target 0). It learns whether a pair has a side
  effect compared with a random pair, not which side effects a pair has most likely.
* ``"bce"`` — binary cross-entropy over all labels of each training pair (its labels 1, the others 0):
  the objective of ranking the labels of a pair known to interact, which is what the task asks.

Model selection uses the task's own metric on validation pairs (recall@k): EmerGNN selects by PR-AUC of
positives against its negatives, which a task without negatives cannot compute.

Config options added for these tasks are left out of a configuration's dump at their default value
(:func:`omit_at_default`), so a DrugBank run keeps the config hash, run id and cached checkpoint it had
before they existed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ddibench.schema import Sample

LOSSES = ("negatives", "bce")


def is_label_set_task(task: Any) -> bool:
    """Whether the task scores ranked labels against gold label sets."""
    return task.evaluator().kind == "ranking"


def top_k(task: Any, default: int = 5) -> int:
    """The cut-off the task's evaluator scores (k of recall@k)."""
    return int(getattr(task.evaluator(), "k", default))


def omit_at_default(data: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """``data`` without the keys of ``defaults`` whose value is the default (see the module docstring)."""
    return {k: v for k, v in data.items() if not (k in defaults and v == defaults[k])}


def label_matrix(samples: Sequence[Sample], n_labels: int) -> np.ndarray:
    """(n, n_labels) 0/1 matrix of the samples' label sets."""
    y = np.zeros((len(samples), n_labels), dtype=np.float32)
    for i, s in enumerate(samples):
        target = s.target if isinstance(s.target, (tuple, list)) else ()
        y[i, [int(k) for k in target]] = 1.0
    return y


def corrupt_pairs(pairs: np.ndarray, drugs: np.ndarray, rng: np.random.Generator, max_tries: int = 50) -> np.ndarray:
    """One negative per positive pair, as EmerGNN's files have them: the head or the tail (a fair coin)
    replaced by a random drug of ``drugs``, so that the new pair is not a known pair in either orientation."""
    known = {(int(h), int(t)) for h, t in pairs} | {(int(t), int(h)) for h, t in pairs}
    out = pairs.copy()
    replace_head = rng.random(len(pairs)) < 0.5
    for i in range(len(pairs)):
        h, t = int(pairs[i, 0]), int(pairs[i, 1])
        for _ in range(max_tries):
            d = int(drugs[rng.integers(len(drugs))])
            candidate = (d, t) if replace_head[i] else (h, d)
            if candidate[0] != candidate[1] and candidate not in known:
                out[i] = candidate
                break
    return out


def loss(kind: str, logits: Any, labels: Any, negative_logits: Any = None) -> Any:
    """The training loss of a batch (torch tensors): see the module docstring."""
    import torch

    if kind == "bce":
        return torch.nn.functional.binary_cross_entropy_with_logits(logits, labels)
    positive = labels > 0
    scores = torch.cat([logits[positive], negative_logits[positive]])
    targets = torch.cat(
        [torch.ones(int(positive.sum()), device=logits.device), torch.zeros(int(positive.sum()), device=logits.device)]
    )
    return torch.nn.functional.binary_cross_entropy_with_logits(scores, targets)


def recall_at_k(scores: np.ndarray, labels: np.ndarray, k: int) -> float:
    """Mean recall@k of score rows against 0/1 label rows (ties: the smaller label id first)."""
    if not len(scores):
        return float("nan")
    top = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    hits = np.take_along_axis(labels, top, axis=1).sum(axis=1)
    return float(np.mean(hits / np.maximum(labels.sum(axis=1), 1)))
