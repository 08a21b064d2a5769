"""A small version of benchmarks/interval_coverage.py: on simulated drug pairs with per-drug effects, the
drug-clustered 95% interval covers the true metric about 95% of the time, the i.i.d. interval clearly
less often, and the board's paired "tied" test rarely separates two equally good systems.

Few repetitions, so the bands are wide (the benchmark runs 500): a clustered interval that ignored the
drugs, or an i.i.d. one that did not, fails here.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "interval_coverage.py"


@pytest.fixture(scope="module")
def sim():
    spec = importlib.util.spec_from_file_location("interval_coverage", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["interval_coverage"] = module
    spec.loader.exec_module(module)
    return module


def test_clustered_interval_covers_and_the_iid_interval_under_covers(sim) -> None:
    world = sim.World(sigma=1.2)
    intervals = {name: how for name, how in sim.INTERVALS.items() if how["interval"] == "bca"}
    cov = sim.coverage(world, reps=40, replicates=200, drugs=80, pairs=800, seed=11, intervals=intervals)
    clustered, iid = cov["drug-clustered BCa"], cov["i.i.d. (pairs) BCa"]
    for metric in sim.METRICS:
        assert clustered[metric] >= 0.85, (metric, cov)
        assert iid[metric] <= 0.85, (metric, cov)
        assert clustered[metric] - iid[metric] >= 0.1, (metric, cov)


def test_paired_tie_test_rarely_separates_equally_good_systems(sim) -> None:
    rates = sim.tie_false_positives(
        sim.World(sigma=1.2), reps=40, replicates=200, drugs=80, pairs=800, seed=12, methods=("cluster",)
    )
    for metric, rate in rates["cluster"].items():
        assert rate <= 0.15, (metric, rates)
