"""Which samples a run answers: one rule, :func:`run_samples`, for every place that needs them.

A run's samples follow from its identity alone (:attr:`ddibench.runner.records.RunIdentity.selection`: the split
it evaluates, ``--limit`` and the seed that draws the subset), so the runner that answers them, ``--shard`` that
splits them among processes, the planner that prices them, ``submit`` that packs them, ``verify`` (in its sandbox
too) that recomputes them, the board that reads a verified bundle back, ``report --against`` that pairs two runs and
the ceilings all select them here, and agree sample for sample.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ddibench.errors import ConfigError
from ddibench.schema import Sample
from ddibench.task import Task, TaskData


@dataclass(frozen=True)
class Selection:
    """What picks a run's samples from its task."""

    split: str
    """The split the run evaluates (a task may ask systems to answer others with it: :meth:`Task.predicted_splits`)."""
    limit: int | None = None
    """``--limit N``: a stratified, seeded subset of N samples (None: every sample)."""
    seed: int = 0
    """The run's seed, which draws the ``--limit`` subset."""
    shard: tuple[int, int] | None = None
    """``--shard I/N``: every N-th sample of the run's, from the I-th (counted from 1); None: the whole run. A shard
    belongs to its run's identity, which never names one."""

    def sharded(self, shard: tuple[int, int]) -> Selection:
        """The samples of one shard of this run."""
        return Selection(self.split, self.limit, self.seed, shard)


def run_samples(task: Task, selection: Selection, data: TaskData | None = None) -> list[Sample]:
    """The samples a run asks the system about, in order: the evaluated split or, for a task that predicts several
    splits (:meth:`Task.predicted_splits`: captioning writes a caption for every molecule, training ones included),
    each of them in turn; ``data``: the task's loaded data (default: loaded here).

    ``--limit N`` draws a stratified, seeded subset (:func:`stratified_subset`); over several splits it is shared
    among them in proportion to their sizes (:func:`split_quotas`), at least one sample each, so a preview of a
    captioning task still gives its probe training molecules. A shard takes every N-th of those (:func:`shard_of`).
    """
    data = data if data is not None else task.load()
    splits = task.predicted_splits(selection.split)
    pools = [data.split(s) for s in splits]
    limit = selection.limit
    if limit is None:
        chosen = [s for pool in pools for s in pool]
    elif len(pools) == 1:
        chosen = stratified_subset(pools[0], limit, selection.seed)
    elif limit < len(pools):
        raise ConfigError(
            f"--limit {limit} is too small for {task.name}: it predicts the {', '.join(splits)} splits",
            f"use --limit {len(pools)} or more",
        )
    else:
        quotas = split_quotas(limit, [len(p) for p in pools])
        chosen = [s for pool, q in zip(pools, quotas) for s in stratified_subset(pool, q, selection.seed)]
    return shard_of(chosen, selection.shard) if selection.shard is not None else chosen


def shard_of(selected: Sequence[Sample], shard: tuple[int, int]) -> list[Sample]:
    """Shard ``(i, n)`` of a run's samples: those at positions ≡ i-1 mod n."""
    i, n = shard
    return [s for k, s in enumerate(selected) if k % n == i - 1]


def stratified_subset(samples: Sequence[Sample], n: int, seed: int) -> list[Sample]:
    """``n`` samples with label proportions kept (largest-remainder allocation), seeded, in split order."""
    if n >= len(samples):
        return list(samples)
    rng = np.random.default_rng(seed)
    groups: dict[Any, list[int]] = {}
    for i, s in enumerate(samples):
        groups.setdefault(_stratum(s.target), []).append(i)
    keys = sorted(groups, key=str)
    exact = np.array([n * len(groups[k]) / len(samples) for k in keys])
    quota = np.floor(exact).astype(int)
    remainder = n - int(quota.sum())
    if remainder:
        order = sorted(range(len(keys)), key=lambda j: (-(exact[j] - quota[j]), rng.random()))
        for j in order[:remainder]:
            quota[j] += 1
    chosen: list[int] = []
    for k, q in zip(keys, quota):
        if q:
            chosen.extend(rng.choice(groups[k], size=int(q), replace=False).tolist())
    return [samples[i] for i in sorted(chosen)]


def _stratum(target: Any) -> Any:
    """What --limit stratifies by: the label (a question's interaction type or answer slice; a molecule's
    label columns together)."""
    if isinstance(target, Mapping):
        return target["label"] if "label" in target else tuple(sorted((str(k), str(v)) for k, v in target.items()))
    return tuple(target) if isinstance(target, list) else target


def split_quotas(limit: int, sizes: Sequence[int]) -> list[int]:
    """``limit`` samples shared among splits in proportion to their sizes (largest remainder, ties to the
    earlier split), at least one from each split."""
    total = sum(sizes)
    if limit >= total:
        return list(sizes)
    exact = [limit * n / total for n in sizes]
    quota = [max(1, int(e)) for e in exact]
    order = sorted(range(len(sizes)), key=lambda j: (-(exact[j] - int(exact[j])), j))
    i = 0
    while sum(quota) < limit:
        j = order[i % len(order)]
        if quota[j] < sizes[j]:
            quota[j] += 1
        i += 1
    while sum(quota) > limit:  # the at-least-one floor overshot: take back from the largest quota
        j = max(range(len(quota)), key=lambda k: (quota[k], -k))
        quota[j] -= 1
    return quota
