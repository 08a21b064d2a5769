"""Bootstrap confidence intervals, clustered by drug.

Drug-pair samples share drugs, so they are not independent: an i.i.d. bootstrap over pairs gives
intervals that are too narrow. The cluster ("vertex") bootstrap resamples *drugs*: each replicate
draws the set of drugs with replacement, and a pair counts as many times as the product of its two
drugs' multiplicities (a pair whose drug was not drawn drops out). This is the standard bootstrap for
dyadic data (Snijders & Borgatti 1999; Owen's pigeonhole bootstrap for crossed factors). With
``method="iid"`` samples are resampled independently instead (for comparison, or for tasks whose
samples share nothing).

Intervals are percentile intervals of the replicates. Metrics whose definition depends on which
labels occur (macro-F1) need care under the cluster bootstrap: a replicate drawn from ~63% distinct
drugs loses rare interaction types that only a few drugs carry, so it would average over fewer (and
easier) labels; the classification metrics keep the label set of the evaluated samples fixed instead
(see :func:`ddibench.metrics.classification.scores_from_confusion`).

Replicates are seeded, so the same inputs and seed give the same interval.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class BootstrapSpec:
    replicates: int = 1000
    seed: int = 0
    method: str = "cluster"  # "cluster" (resample drugs) or "iid" (resample samples)
    level: float = 0.95

    def describe(self) -> dict[str, object]:
        what = (
            "cluster bootstrap: the samples' cluster keys (drugs of a pair, or a question's source document) resampled "
            "with replacement, a sample weighted by the product of its keys' multiplicities"
            if self.method == "cluster"
            else "i.i.d. bootstrap over samples"
        )
        return {
            "method": self.method,
            "description": what,
            "replicates": self.replicates,
            "seed": self.seed,
            "level": self.level,
            "interval": "percentile",
        }


def cluster_index(clusters: Sequence[Sequence[str]]) -> tuple[np.ndarray, int]:
    """Map each sample's cluster keys to integer unit ids: an (n, m) matrix and the number of units."""
    units: dict[str, int] = {}
    width = max((len(c) for c in clusters), default=1)
    matrix = np.empty((len(clusters), width), dtype=np.int64)
    for i, keys in enumerate(clusters):
        if len(keys) != width:
            raise ValueError("every sample needs the same number of cluster keys")
        for j, key in enumerate(keys):
            matrix[i, j] = units.setdefault(key, len(units))
    return matrix, len(units)


def replicate_weights(
    n_samples: int,
    spec: BootstrapSpec,
    clusters: np.ndarray | None,
    n_units: int,
    chunk: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """Weights of ``chunk`` bootstrap replicates: shape (chunk, n_samples)."""
    if spec.method == "iid" or clusters is None:
        return rng.multinomial(n_samples, np.full(n_samples, 1.0 / n_samples), size=chunk).astype(np.float64)
    if spec.method != "cluster":
        raise ValueError(f"unknown bootstrap method '{spec.method}' (use 'cluster' or 'iid')")
    counts = rng.multinomial(n_units, np.full(n_units, 1.0 / n_units), size=chunk).astype(np.float64)
    weights = counts[:, clusters[:, 0]]
    for j in range(1, clusters.shape[1]):
        weights = weights * counts[:, clusters[:, j]]
    return weights


MAX_CELLS = 1 << 19  # weights held at once (replicates x samples): 4 MiB of float64 per array


def bootstrap_intervals(
    statistic: Callable[[np.ndarray], dict[str, np.ndarray]],
    n_samples: int,
    spec: BootstrapSpec,
    clusters: Sequence[Sequence[str]] | None = None,
    chunk: int = 50,
) -> dict[str, tuple[float, float]]:
    """Percentile intervals of the metrics that ``statistic`` computes from replicate weights.

    ``statistic`` takes a (replicates, n_samples) weight matrix and returns one array of length
    ``replicates`` per metric. Replicates are drawn ``chunk`` at a time, fewer for large samples so that
    memory stays bounded; the draws (and so the intervals) do not depend on the chunk size.
    """
    if n_samples == 0:
        return {}
    chunk = max(1, min(chunk, MAX_CELLS // n_samples))
    rng = np.random.default_rng(spec.seed)
    matrix, n_units = cluster_index(clusters) if clusters is not None else (None, 0)
    draws: dict[str, list[np.ndarray]] = {}
    done = 0
    while done < spec.replicates:
        size = min(chunk, spec.replicates - done)
        weights = replicate_weights(n_samples, spec, matrix, n_units, size, rng)
        for name, values in statistic(weights).items():
            draws.setdefault(name, []).append(np.asarray(values, dtype=np.float64))
        done += size
    alpha = (1 - spec.level) / 2
    out: dict[str, tuple[float, float]] = {}
    for name, parts in draws.items():
        values = np.concatenate(parts)
        values = values[np.isfinite(values)]
        if values.size == 0:
            out[name] = (float("nan"), float("nan"))
        else:
            lo, hi = np.quantile(values, [alpha, 1 - alpha])
            out[name] = (float(lo), float(hi))
    return out
