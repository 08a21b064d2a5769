#!/usr/bin/env python3
"""Do ddibench's 95% intervals cover the truth 95% of the time on drug-pair data? And is the board's
"tied" test right 95% of the time when two systems are equally good?

Synthetic pair data with known per-drug effects and a known population metric:

* each simulated test set draws ``drugs`` new drugs from the population; each drug has a difficulty
  effect ``u ~ N(0, sigma)`` and a favourite interaction type (Zipf-distributed over ``labels`` types);
* ``pairs`` pairs of distinct drugs; a pair's gold type is, with probability ``favour``, the favourite of
  one of its two drugs, else a Zipf draw; a system answers it correctly with probability
  ``logistic(beta + u_head + u_tail)``, else it names the most frequent type (half the time) or a
  uniformly random type;
* the *true* metric is the population value: accuracy and macro-F1 of the expected confusion matrix
  over the drug population (Monte Carlo over ``truth_pairs`` pairs of fresh drugs).

For every simulated test set the script computes the interval that ``ddibench`` reports (BCa, drugs
resampled), the previous percentile interval (drugs resampled), and the i.i.d. interval (pairs
resampled, BCa), through the real :class:`ddibench.evaluation.ClassificationEvaluator`, and counts how
often each covers the truth. Then two systems with the *same* generating process answer each test set
independently (true difference 0), and the paired comparison behind the board's "tied" groups
(:meth:`BaseEvaluator.paired`) is counted as a false positive when its interval excludes 0.

    python benchmarks/interval_coverage.py [--reps 500] [--replicates 500] [--drugs 150] [--pairs 1500]

Prints the coverage table and the false-positive rates; asserts nothing. A small version runs in
tests/test_interval_coverage.py.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass

import numpy as np

from ddibench.evaluation.classification import ClassificationEvaluator
from ddibench.metrics.bootstrap import BootstrapSpec
from ddibench.metrics.classification import scores_from_confusion
from ddibench.schema import Label, LabelSpace

METRICS = ("accuracy", "macro_f1")
# bootstrap seeds start far from the simulation's own seeds: a generator seeded alike draws the same bits,
# and weights drawn from the bits that made the data correlate with it
BOOT_SEED = 1_000_003
INTERVALS = {  # column title -> how the interval is computed
    "drug-clustered BCa": {"method": "cluster", "interval": "bca"},
    "drug-clustered percentile": {"method": "cluster", "interval": "percentile"},
    "i.i.d. (pairs) BCa": {"method": "iid", "interval": "bca"},
}


@dataclass(frozen=True)
class World:
    """The population the test sets are drawn from."""

    labels: int = 8
    sigma: float = 1.0  # sd of a drug's difficulty effect (logit scale)
    beta: float = 1.0  # logit of a pair's correctness at average difficulty
    favour: float = 0.5  # probability that a pair's type is one of its drugs' favourite
    zipf: float = 1.2

    def label_weights(self) -> np.ndarray:
        w = 1.0 / np.arange(1, self.labels + 1) ** self.zipf
        return w / w.sum()

    def draw(self, rng: np.random.Generator, drugs: int, pairs: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One test set: (head, tail) drug indices, gold labels, and each pair's correctness probability."""
        p = self.label_weights()
        effect = rng.normal(0.0, self.sigma, drugs)
        favourite = rng.choice(self.labels, size=drugs, p=p)
        head = rng.integers(0, drugs, pairs)
        tail = (head + rng.integers(1, drugs, pairs)) % drugs  # a distinct second drug
        side = np.where(rng.random(pairs) < 0.5, head, tail)
        gold = np.where(rng.random(pairs) < self.favour, favourite[side], rng.choice(self.labels, size=pairs, p=p))
        p_correct = 1.0 / (1.0 + np.exp(-(self.beta + effect[head] + effect[tail])))
        return np.stack([head, tail], axis=1), gold, p_correct

    def answer(self, rng: np.random.Generator, gold: np.ndarray, p_correct: np.ndarray) -> np.ndarray:
        """A system's answers: right with probability ``p_correct``, else the top type or a random one."""
        wrong = np.where(rng.random(gold.size) < 0.5, 0, rng.integers(0, self.labels, gold.size))
        return np.where(rng.random(gold.size) < p_correct, gold, wrong)

    def truth(self, pairs: int = 2_000_000, seed: int = 12345) -> dict[str, float]:
        """Population accuracy and macro-F1: every pair of fresh drugs (``drugs`` = 2 x ``pairs``)."""
        rng = np.random.default_rng(seed)
        cm = np.zeros((self.labels, self.labels + 1))
        for _ in range(pairs // 200_000):
            _, gold, p_correct = self.draw(rng, 400_000, 200_000)
            # the expected confusion matrix: condition on each pair's probabilities instead of sampling
            wrong_top = (1 - p_correct) * 0.5
            wrong_rand = (1 - p_correct) * 0.5 / self.labels
            cm[:, : self.labels] += np.bincount(gold, weights=wrong_rand, minlength=self.labels)[:, None]
            cm[:, 0] += np.bincount(gold, weights=wrong_top, minlength=self.labels)
            cm[np.arange(self.labels), np.arange(self.labels)] += np.bincount(
                gold, weights=p_correct, minlength=self.labels
            )
        scores = scores_from_confusion(cm)
        return {m: float(scores[m]) for m in METRICS}


def evaluator(labels: int) -> ClassificationEvaluator:
    return ClassificationEvaluator(
        LabelSpace(tuple(Label(i, f"#Drug1 type {i} #Drug2") for i in range(labels))), breakdown_key=None
    )


def coverage(
    world: World,
    reps: int,
    replicates: int,
    drugs: int,
    pairs: int,
    seed: int = 0,
    intervals: dict[str, dict[str, str]] | None = None,
) -> dict[str, dict[str, float]]:
    """Share of ``reps`` simulated test sets whose interval covers the true metric, per interval and metric."""
    intervals = intervals or INTERVALS
    truth = world.truth()
    ev = evaluator(world.labels)
    rng = np.random.default_rng(seed)
    hits = {name: dict.fromkeys(METRICS, 0) for name in intervals}
    for rep in range(reps):
        index, gold, p_correct = world.draw(rng, drugs, pairs)
        pred = world.answer(rng, gold, p_correct)
        units = [{"gold": int(g), "pred": int(p)} for g, p in zip(gold, pred)]
        clusters = [(f"d{h}", f"d{t}") for h, t in index]
        for name, how in intervals.items():
            spec = BootstrapSpec(
                replicates=replicates, seed=BOOT_SEED + rep, method=how["method"], interval=how["interval"]
            )
            found = ev.intervals(units, clusters, spec)
            for m in METRICS:
                lo, hi = found[m]
                hits[name][m] += int(lo <= truth[m] <= hi)
    return {name: {m: hits[name][m] / reps for m in METRICS} for name in intervals}


def tie_false_positives(
    world: World,
    reps: int,
    replicates: int,
    drugs: int,
    pairs: int,
    seed: int = 1,
    methods: tuple[str, ...] = ("cluster", "iid"),
) -> dict[str, dict[str, float]]:
    """Share of ``reps`` test sets on which two equally good systems are *not* called tied, per
    bootstrap method and metric (the paired BCa interval of the difference excludes 0)."""
    ev = evaluator(world.labels)
    rng = np.random.default_rng(seed)
    flagged = {method: dict.fromkeys(METRICS, 0) for method in methods}
    for rep in range(reps):
        index, gold, p_correct = world.draw(rng, drugs, pairs)
        a, b = world.answer(rng, gold, p_correct), world.answer(rng, gold, p_correct)
        units_a = [{"gold": int(g), "pred": int(p)} for g, p in zip(gold, a)]
        units_b = [{"gold": int(g), "pred": int(p)} for g, p in zip(gold, b)]
        clusters = [(f"d{h}", f"d{t}") for h, t in index]
        for method in methods:
            spec = BootstrapSpec(replicates=replicates, seed=BOOT_SEED + rep, method=method)
            for m in METRICS:
                _, lo, hi = ev.paired(m, clusters, units_a, units_b, spec)
                flagged[method][m] += int(not lo <= 0 <= hi)
    return {method: {m: flagged[method][m] / reps for m in METRICS} for method in methods}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--reps", type=int, default=500, help="simulated test sets")
    ap.add_argument("--replicates", type=int, default=500, help="bootstrap replicates per interval")
    ap.add_argument("--drugs", type=int, default=150)
    ap.add_argument("--pairs", type=int, default=1500)
    ap.add_argument("--sigma", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    world = World(sigma=args.sigma)
    truth = world.truth()
    print(f"population: {world}; true accuracy {truth['accuracy']:.4f}, true macro-F1 {truth['macro_f1']:.4f}")
    print(
        f"{args.reps} simulated test sets of {args.pairs} pairs over {args.drugs} drugs; {args.replicates} bootstrap replicates each"
    )
    t0 = time.perf_counter()
    cov = coverage(world, args.reps, args.replicates, args.drugs, args.pairs, seed=args.seed)
    se = (0.95 * 0.05 / args.reps) ** 0.5
    print(
        f"\ncoverage of the nominal 95% interval (target 0.95; binomial s.e. at 0.95: {se:.3f})  [{time.perf_counter() - t0:.0f}s]"
    )
    print(f"{'interval':<28}" + "".join(f"{m:>12}" for m in METRICS))
    for name, row in cov.items():
        print(f"{name:<28}" + "".join(f"{row[m]:>12.3f}" for m in METRICS))
    t0 = time.perf_counter()
    fp = tie_false_positives(world, args.reps, args.replicates, args.drugs, args.pairs, seed=args.seed + 1)
    print(
        f"\npaired tie test, two systems of equal true quality: share called different (target 0.05)  [{time.perf_counter() - t0:.0f}s]"
    )
    print(f"{'paired bootstrap':<28}" + "".join(f"{m:>12}" for m in METRICS))
    for method, row in fp.items():
        title = "drug-clustered BCa (board)" if method == "cluster" else "i.i.d. (pairs) BCa"
        print(f"{title:<28}" + "".join(f"{row[m]:>12.3f}" for m in METRICS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
