"""``naive-cbr``: the 10 most structurally similar training pairs as labelled few-shot examples.

Similarity of a query pair (a, b) to a training pair (x, y) is the mean of the Tanimoto similarities of
the Morgan fingerprints (radius 2, 1,024 bits) of a and x and of b and y: drugs are compared position
by position, because the interaction type is directional (``#Drug1``/``#Drug2``). Ties go to the
earlier training pair. Only training pairs are ever shown. On label-set tasks (TWOSIDES) an example shows
the pair's side effects.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import Field

from ddibench.schema import Sample
from ddibench.system import RunContext, TrainingView
from ddibench.toolkit.label_choice import LabelChoiceConfig, LabelChoiceSystem


class NaiveCBRConfig(LabelChoiceConfig):
    k_examples: int = Field(10, ge=0)


def tanimoto_matrix(bits: np.ndarray) -> np.ndarray:
    f = bits.astype(np.float32)
    inter = f @ f.T
    counts = f.sum(axis=1)
    union = counts[:, None] + counts[None, :] - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0).astype(np.float32)


class NaiveCBRSystem(LabelChoiceSystem):
    name = "naive-cbr"
    version = "1.0.0"
    description = (
        "10 training pairs most similar by Morgan-fingerprint Tanimoto (position-wise mean) as few-shot examples"
    )
    Config = NaiveCBRConfig
    config: NaiveCBRConfig
    context_heading = "Solved examples of similar drug pairs"

    async def prepare_context(self, view: TrainingView, ctx: RunContext) -> None:
        from ddibench.chem import morgan_matrix

        catalog = view.resources["drugs"]
        bits, _ = morgan_matrix([d.smiles for d in catalog.drugs])
        self._sim = tanimoto_matrix(bits)
        self._drugs = catalog.drugs
        self._heads = np.array([s.pair.head.node_id for s in view.train])
        self._tails = np.array([s.pair.tail.node_id for s in view.train])
        if view.train and isinstance(view.train[0].target, tuple):  # label sets: an object array of tuples
            self._labels = np.empty(len(view.train), dtype=object)
            self._labels[:] = [s.target for s in view.train]
        else:
            self._labels = np.array([s.label for s in view.train])
        self._labels_space = view.task.label_space

    def examples(self, head: int, tail: int) -> tuple[np.ndarray, np.ndarray]:
        score = (self._sim[head, self._heads] + self._sim[tail, self._tails]) / 2
        k = min(self.config.k_examples, len(score))
        top = np.argpartition(-score, k - 1)[:k] if k else np.zeros(0, dtype=np.int64)
        top = top[np.lexsort((top, -score[top]))]
        return top, score[top]

    async def context(self, sample: Sample, ctx: RunContext) -> tuple[list[str], dict[str, Any]]:
        top, scores = self.examples(sample.pair.head.node_id, sample.pair.tail.node_id)
        lines, labels = [], []
        for i in top.tolist():
            a, b, target = self._drugs[self._heads[i]], self._drugs[self._tails[i]], self._labels[i]
            if isinstance(target, tuple):  # a label set: the pair's side effects
                lines.append(
                    f"Drug A = {a.name}, Drug B = {b.name}: side effects {', '.join(self._labels_space[k].name for k in target)}"
                )
                labels += [int(k) for k in target]
            else:
                label = int(target)  # type: ignore[arg-type]
                lines.append(
                    f"Drug A = {a.name}, Drug B = {b.name}: type {self.shown_number(label)} ({self._labels_space[label].render(a.name, b.name)})"
                )
                labels.append(label)
        return lines, {
            "examples": [[int(i), round(float(s), 4)] for i, s in zip(top, scores)],
            "context_labels": labels,
        }
