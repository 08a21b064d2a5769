"""Bootstrap confidence intervals, clustered by drug.

Drug-pair samples share drugs, so they are not independent: an i.i.d. bootstrap over pairs gives
intervals that are too narrow. The cluster ("vertex") bootstrap resamples *drugs*: each replicate
draws the set of drugs with replacement, and a pair counts as many times as the product of its two
drugs' multiplicities (a pair whose drug was not drawn drops out). This is the standard bootstrap for
dyadic data (Snijders & Borgatti 1999; Owen's pigeonhole bootstrap for crossed factors). With
``method="iid"`` samples are resampled independently instead (for comparison, or for tasks whose
samples share nothing).

Intervals are bias-corrected and accelerated (BCa; Efron 1987, Efron & Tibshirani 1993 ch. 14) by
default: the percentile levels are moved by the bias correction ``z0`` (how far the replicates' median
sits from the estimate) and the acceleration ``a`` (the skewness of the statistic's influence), which
is estimated by a jackknife over the same clusters the bootstrap resamples (delete-a-group when there
are more than :data:`JACKKNIFE_GROUPS` of them), so the clustering is kept. On skewed statistics
(macro-F1 over rare labels) the plain percentile interval sits to one side of its own estimate; BCa
centres it where the bootstrap says the truth lies. Where the replicates lie almost wholly on one
side of the estimate the interval is widened to reach the estimate (it is never reported excluding
its own point). ``interval="percentile"`` keeps the plain percentile interval: results written before
BCa record no ``interval`` method, or ``"percentile"``, and recompute with it
(:meth:`BootstrapSpec.from_record`). scikit-learn and SciPy have no clustered BCa (SciPy's
``bootstrap`` resamples i.i.d. and jackknifes single observations), hence the hand-written one here.

Metrics whose definition depends on which
labels occur (macro-F1) need care under the cluster bootstrap: a replicate drawn from ~63% distinct
drugs loses rare interaction types that only a few drugs carry, so it would average over fewer (and
easier) labels; the classification metrics keep the label set of the evaluated samples fixed instead
(see :func:`ddibench.metrics.classification.scores_from_confusion`).

Replicates are seeded, so the same inputs and seed give the same interval.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np


@dataclass(frozen=True, slots=True)
class BootstrapSpec:
    replicates: int = 1000
    seed: int = 0
    method: str = "cluster"  # "cluster" (resample drugs) or "iid" (resample samples)
    level: float = 0.95
    interval: str = "bca"  # "bca" (bias-corrected and accelerated) or "percentile" (results before BCa)

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"unknown bootstrap method '{self.method}' (use {' or '.join(METHODS)})")
        if self.interval not in INTERVALS:
            raise ValueError(f"unknown bootstrap interval '{self.interval}' (use {' or '.join(INTERVALS)})")

    @classmethod
    def from_record(cls, record: Mapping[str, object]) -> BootstrapSpec:
        """The spec a results file's ``evaluation.bootstrap`` record describes. Records written before
        the interval method was recorded used the percentile interval, and read as such."""
        return cls(
            replicates=int(record.get("replicates", 1000)),  # type: ignore[call-overload]
            seed=int(record.get("seed", 0)),  # type: ignore[call-overload]
            method=str(record.get("method", "cluster")),
            level=float(record.get("level", 0.95)),  # type: ignore[arg-type]
            interval=str(record.get("interval", "percentile")),
        )

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
            "interval": self.interval,
            "interval_description": INTERVALS[self.interval],
        }


METHODS = ("cluster", "iid")
INTERVALS = {
    "bca": "BCa: percentile levels corrected for the replicates' median bias and for skewness (acceleration from a "
    "jackknife over the resampled clusters); widened to reach the estimate where the replicates lie almost wholly on one side",
    "percentile": "percentile interval of the replicates",
}
JACKKNIFE_GROUPS = 200  # more clusters than this: delete-a-group jackknife over this many random groups of clusters


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
    """Intervals (BCa, or percentile: ``spec.interval``) of the metrics that ``statistic`` computes from
    replicate weights; a metric's estimate is ``statistic`` under unit weights.

    ``statistic`` takes a (replicates, n_samples) weight matrix and returns one array of length
    ``replicates`` per metric. Replicates are drawn ``chunk`` at a time, fewer for large samples so that
    memory stays bounded; the draws (and so the intervals) do not depend on the chunk size.
    """
    if n_samples == 0:
        return {}
    chunk = max(1, min(chunk, MAX_CELLS // n_samples))
    rng = np.random.default_rng(spec.seed)
    matrix, n_units = cluster_index(clusters) if clusters is not None and spec.method == "cluster" else (None, 0)
    draws: dict[str, list[np.ndarray]] = {}
    done = 0
    while done < spec.replicates:
        size = min(chunk, spec.replicates - done)
        weights = replicate_weights(n_samples, spec, matrix, n_units, size, rng)
        for name, values in statistic(weights).items():
            draws.setdefault(name, []).append(np.asarray(values, dtype=np.float64))
        done += size
    if spec.interval == "percentile":
        return {name: percentile_interval(np.concatenate(parts), spec.level) for name, parts in draws.items()}
    point = {
        name: float(np.asarray(values, dtype=np.float64)[0])
        for name, values in statistic(np.ones((1, n_samples))).items()
    }
    jack = jackknife(statistic, n_samples, matrix, n_units, spec.seed, chunk)
    out = {
        name: bca_interval(np.concatenate(parts), point.get(name, float("nan")), jack.get(name), spec.level)
        for name, parts in draws.items()
    }
    if matrix is not None and matrix.shape[1] > 1:
        out = _dyadic_correction(statistic, n_samples, spec, matrix.shape[1], chunk, point, draws, out)
    return out


def _dyadic_correction(
    statistic: Callable[[np.ndarray], dict[str, np.ndarray]],
    n_samples: int,
    spec: BootstrapSpec,
    keys: int,
    chunk: int,
    point: dict[str, float],
    draws: dict[str, list[np.ndarray]],
    intervals: dict[str, tuple[float, float]],
) -> dict[str, tuple[float, float]]:
    """Shrink the intervals of a bootstrap over samples with several cluster keys (pairs of drugs) to
    the dyadic-robust variance.

    With product weights the bootstrap variance of a (linearised) statistic is the dyadic-robust
    variance (Aronow, Samii & Assenova 2015: covariances of every two samples that share a key) plus
    ``2**keys - 2`` times its i.i.d. variance: each sample's own residual enters once per key through
    the keys' multiplicities, and once more through their product. So the interval is conservative when
    pair-level noise dominates (benchmarks/interval_coverage.py measured 98% coverage for nominal
    95%). Each side's half-width is scaled by sqrt((V_cluster - (2**keys - 2) V_iid) / V_cluster), with
    the variances estimated from the cluster replicates and from as many i.i.d. replicates (never below
    the i.i.d. variance), and the result is widened to contain the i.i.d. BCa interval: clustering never
    makes an interval narrower than treating the samples as independent would.
    """
    rng = np.random.default_rng(spec.seed)  # the draws of the i.i.d. bootstrap with the same seed
    iid = BootstrapSpec(
        replicates=spec.replicates, seed=spec.seed, method="iid", level=spec.level, interval=spec.interval
    )
    iid_draws: dict[str, list[np.ndarray]] = {}
    done = 0
    while done < spec.replicates:
        size = min(chunk, spec.replicates - done)
        for name, values in statistic(replicate_weights(n_samples, iid, None, 0, size, rng)).items():
            iid_draws.setdefault(name, []).append(np.asarray(values, dtype=np.float64))
        done += size
    excess = 2.0**keys - 2.0
    iid_jack = jackknife(statistic, n_samples, None, 0, spec.seed, chunk)
    out = dict(intervals)
    for name, (lo, hi) in intervals.items():
        clustered = np.concatenate(draws[name])
        independent = np.concatenate(iid_draws.get(name, [np.empty(0)]))
        clustered, independent = clustered[np.isfinite(clustered)], independent[np.isfinite(independent)]
        est = point.get(name, float("nan"))
        if clustered.size < 2 or independent.size < 2 or not np.isfinite(est):
            continue
        v_cluster, v_iid = float(np.var(clustered)), float(np.var(independent))
        if v_cluster <= 0:
            continue
        scale = np.sqrt(max(v_cluster - excess * v_iid, v_iid) / v_cluster)
        iid_lo, iid_hi = bca_interval(independent, est, iid_jack.get(name), spec.level)
        out[name] = (min(est - scale * (est - lo), iid_lo), max(est + scale * (hi - est), iid_hi))
    return out


def percentile_interval(values: np.ndarray, level: float) -> tuple[float, float]:
    values = values[np.isfinite(values)]
    if values.size == 0:
        return float("nan"), float("nan")
    alpha = (1 - level) / 2
    lo, hi = np.quantile(values, [alpha, 1 - alpha])
    return float(lo), float(hi)


def jackknife(
    statistic: Callable[[np.ndarray], dict[str, np.ndarray]],
    n_samples: int,
    clusters: np.ndarray | None,
    n_units: int,
    seed: int,
    chunk: int,
) -> dict[str, np.ndarray]:
    """Delete-one (or delete-a-group) jackknife values of each metric, deleting clusters (a sample goes
    when any of its keys goes), or samples when there are no clusters. More than :data:`JACKKNIFE_GROUPS`
    units are split into that many seeded random groups of (nearly) equal size."""
    if clusters is None:
        clusters, n_units = np.arange(n_samples, dtype=np.int64)[:, None], n_samples
    if n_units < 2:
        return {}
    groups = min(n_units, JACKKNIFE_GROUPS)
    group_of = np.arange(n_units) % groups
    if groups < n_units:
        group_of = np.random.default_rng([seed, 1]).permutation(group_of)
    sample_groups = group_of[clusters]  # (n_samples, keys)
    values: dict[str, list[np.ndarray]] = {}
    for start in range(0, groups, chunk):
        ids = np.arange(start, min(groups, start + chunk))
        weights = np.ones((ids.size, n_samples))
        for j in range(sample_groups.shape[1]):
            weights[sample_groups[:, j][None, :] == ids[:, None]] = 0.0
        for name, out in statistic(weights).items():
            values.setdefault(name, []).append(np.asarray(out, dtype=np.float64))
    return {name: np.concatenate(parts) for name, parts in values.items()}


def acceleration(jack: np.ndarray) -> float:
    """BCa's acceleration from jackknife values (Efron & Tibshirani 1993, eq. 14.15); 0 when undefined."""
    jack = jack[np.isfinite(jack)]
    if jack.size < 3:
        return 0.0
    d = jack.mean() - jack
    denom = 6.0 * float(np.sum(d * d)) ** 1.5
    return float(np.sum(d**3)) / denom if denom > 0 else 0.0


def bca_interval(replicates: np.ndarray, point: float, jack: np.ndarray | None, level: float) -> tuple[float, float]:
    """BCa interval of ``replicates`` around ``point``; widened to reach ``point`` if it still excludes it."""
    values = replicates[np.isfinite(replicates)]
    if values.size == 0 or not np.isfinite(point):
        return percentile_interval(replicates, level)
    normal = NormalDist()
    b = values.size
    below = (np.count_nonzero(values < point) + 0.5 * np.count_nonzero(values == point)) / b
    z0 = normal.inv_cdf(min(max(below, 0.5 / b), 1 - 0.5 / b))
    a = acceleration(jack) if jack is not None else 0.0
    levels = []
    for tail in ((1 - level) / 2, (1 + level) / 2):
        z = z0 + normal.inv_cdf(tail)
        shifted = z0 + z / (1 - a * z) if a * z < 1 else (float("inf") if z > 0 else float("-inf"))
        levels.append(normal.cdf(shifted) if np.isfinite(shifted) else (1.0 if shifted > 0 else 0.0))
    lo, hi = np.quantile(values, levels)
    return float(min(lo, point)), float(max(hi, point))
