#!/usr/bin/env python3
"""Knowledge-graph and EmerGNN costs on this machine.

* KG build: Hetionet from the pinned sources (no cache), its mapping into the DrugBank id space, and a
  load from the artifact cache;
* path queries over 1,000 DrugBank S1 (EmerGNN seed 1234) test pairs on the KG plus the training
  interactions: bounded shortest path, and K-Paths' 10 diverse paths (Yen's algorithm) — median, p95;
* EmerGNN: walk-subgraph extraction per test pair on the prediction graph (the training step and
  inference, before and after, are benchmarks/emergnn_step.py).

    python benchmarks/kg_and_emergnn.py [--pairs 1000]

Prints numbers; asserts nothing.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np


def percentiles(values: list[float]) -> str:
    arr = np.asarray(values) * 1000
    return f"median {np.median(arr):.2f} ms, p95 {np.percentile(arr, 95):.2f} ms, max {arr.max():.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=1000)
    args = parser.parse_args()

    import os

    from ddibench.kg import build_hetionet, get_space, map_to_space

    with tempfile.TemporaryDirectory() as tmp:
        os.environ["DDIBENCH_CACHE"] = tmp  # a cold cache for the build timings
        t0 = time.perf_counter()
        hetionet = build_hetionet()
        t1 = time.perf_counter()
        kg = map_to_space(hetionet, get_space("drugbank"))
        t2 = time.perf_counter()
        hetionet.save(Path(tmp))
        t3 = time.perf_counter()
        from ddibench.kg import Hetionet

        map_to_space(Hetionet.load(Path(tmp)), get_space("drugbank"))
        t4 = time.perf_counter()
    print(
        f"KG build from sources: {t1 - t0:.1f} s ({hetionet.n_edges():,} edges, {len(hetionet.node_ids):,} nodes); "
        f"id-space mapping {t2 - t1:.2f} s; cached load + mapping {t4 - t3:.2f} s"
    )

    from ddibench.kg import shortest_path, yen_paths
    from ddibench.registry import get_task
    from ddibench.systems.emergnn import EmerGNNSystem, _triples

    data = get_task("drugbank_s1_emergnn").load()
    train, test = _triples(data.split("train")), _triples(data.split("test"))
    graph = kg.with_interactions(train)
    rng = np.random.default_rng(0)
    sample = test[rng.choice(len(test), min(args.pairs, len(test)), replace=False)]
    _ = graph.csr  # build the CSR once, as a long-lived process would
    times, found = [], 0
    for u, v, _ in sample.tolist():
        t = time.perf_counter()
        found += shortest_path(graph, u, v, 3) is not None
        times.append(time.perf_counter() - t)
    print(f"shortest path (<= 3 hops), {len(sample)} test pairs: {percentiles(times)}; {found} connected")
    times = []
    for u, v, _ in sample[: min(len(sample), 300)].tolist():
        t = time.perf_counter()
        yen_paths(graph, u, v, k=10, max_hops=3)
        times.append(time.perf_counter() - t)
    print(f"10 diverse paths (Yen + relation-sequence filter), {len(times)} test pairs: {percentiles(times)}")

    from ddibench.systems.emergnn.walks import walk_batch

    test_graph = EmerGNNSystem()._message_graph(
        kg, set(), train
    )  # the prediction graph (training interactions as facts)
    t = time.perf_counter()
    edges = 0
    for start in range(0, len(sample), 64):
        edges += walk_batch(test_graph, sample[start : start + 64, 0], sample[start : start + 64, 1], 3).n_edges
    elapsed = time.perf_counter() - t
    print(
        f"walk subgraphs (L=3): {1000 * elapsed / len(sample):.2f} ms per test pair, {edges / len(sample):,.0f} edges per pair"
    )


if __name__ == "__main__":
    main()
