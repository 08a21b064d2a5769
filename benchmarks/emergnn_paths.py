#!/usr/bin/env python3
"""Probabilities, pair vectors and paths for a batch of pairs, as CBR-DDI asks EmerGNN for them: before and
after the paths were read from the batch's own forward, in one run.

*Before* (as at commit 0d997b2): ``encode`` for the batch, then ``explain`` for each pair, which built the pair's
walk subgraph again and ran the whole network on it (both propagations) to read the attention. *After*:
``encode_explained``, one forward for the batch, each pair's paths read from the batch's walk subgraphs, the
attention (a small network over the two drugs' features) computed for each pair alone. Both give the same paths,
float for float; the script checks it on every batch.

Setting: DrugBank S1 (``drugbank_s1``), EmerGNN after one short epoch (the paths' cost does not depend on the
weights), the ``cpu`` profile's L = 3; query pairs from the test split in CBR-DDI's query batches of 16, and
training pairs with their own edge hidden (CBR-DDI's cases) in batches of 256. The two ways run in interleaved
rounds, so machine load falls on both alike.

    python benchmarks/emergnn_paths.py [--pairs 256] [--rounds 3] [--top 5]

Then the paths' search alone, on the same batches and attention: *per pair*, each pair's walks read apart from
the batch's into a piece of their own (``WalkBatch.split``) and searched one piece after another, as EmerGNN
does, against *over the batch*, one ``top_paths`` over every pair's states at once.

Prints per-pair wall and CPU milliseconds (median over rounds) and the ratio; asserts nothing but the equality
of the paths. Needs the 'ml' extra and DDIBENCH_MIRROR (or downloads).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np


def _system() -> tuple[Any, Any, str]:
    from ddibench.artifacts import ArtifactStore
    from ddibench.profiles import get_profile
    from ddibench.registry import get_task
    from ddibench.system import RunContext, TrainingView
    from ddibench.systems.emergnn import EmerGNNConfig, EmerGNNSystem

    task = get_task("drugbank_s1")
    data = task.load()
    system = EmerGNNSystem(EmerGNNConfig(max_epochs=1, train_pairs_per_epoch=64, valid_pairs=32))
    view = TrainingView(task, data.split("train"), data.split("valid"), data.resources)
    with tempfile.TemporaryDirectory() as tmp:
        ctx = RunContext(task=task, profile=get_profile("cpu"), seed=0, artifacts=ArtifactStore(Path(tmp)))
        asyncio.run(system.prepare(view, ctx))
    return system, data, task.setting


def _before(system: Any, heads: list[int], tails: list[int], setting: str, top: int, hide_own: bool) -> list:
    """encode for the batch, then each pair alone through the whole network for its attention (explain at
    0d997b2)."""
    import torch

    from ddibench.systems.emergnn.model import PairBatch, top_paths

    system.encode(heads, tails, setting, hide_own=hide_own)
    cfg = system.resolved(setting)
    graph = system._graphs["predict"]
    out = []
    for h, t in zip(heads, tails):
        batch = PairBatch.of(
            graph, np.array([h]), np.array([t]), cfg["length"], system._device(), system._n_labels if hide_own else 0
        )
        with torch.no_grad():
            _, _, alpha = system._net(batch)
        weights = [a.cpu().numpy() for a in alpha]
        out.append(
            [
                {
                    "score": round(score, 4),
                    "steps": [list(s) for s in steps],
                    "text": "; ".join(system._kg.verbalise(a, r, b) for a, r, b in steps),
                }
                for score, steps in top_paths(batch.walks, weights, graph, top)[0]
            ]
        )
    return out


def _after(system: Any, heads: list[int], tails: list[int], setting: str, top: int, hide_own: bool) -> list:
    return system.encode_explained(heads, tails, setting, top, hide_own=hide_own)[2]


def _searches(system: Any, setting: str, pairs: list, size: int, top: int, hide_own: bool, rounds: int) -> list[float]:
    """CPU ms a pair of the search per pair and over the batch (median over rounds); exits if they differ."""
    from ddibench.systems.emergnn.model import PairBatch, top_paths

    cfg = system.resolved(setting)
    graph = system._graphs["predict"]
    inputs = []
    for i in range(0, len(pairs), size):
        chunk = pairs[i : i + size]
        heads = np.array([p.head.node_id for p in chunk])
        tails = np.array([p.tail.node_id for p in chunk])
        batch = PairBatch.of(graph, heads, tails, cfg["length"], system._device(), system._n_labels if hide_own else 0)
        alone = system.attention_alone(batch.heads, batch.tails)
        weights = [np.concatenate([a[layer] for a in alone]) for layer in range(cfg["length"])]
        inputs.append((batch.walks, weights))
    each_ms, batch_ms = [], []
    for _ in range(rounds):
        cpu = time.process_time()
        each = [
            top_paths(piece, [w[j : j + 1] for w in weights], graph, top)[0]
            for walks, weights in inputs
            for j, piece in enumerate(walks.split())
        ]
        each_ms.append((time.process_time() - cpu) * 1000 / len(pairs))
        cpu = time.process_time()
        together = [found for walks, weights in inputs for found in top_paths(walks, weights, graph, top)]
        batch_ms.append((time.process_time() - cpu) * 1000 / len(pairs))
        if each != together:
            raise SystemExit("the paths differ between the search per pair and over the batch")
    return [statistics.median(each_ms), statistics.median(batch_ms)]


def _timed(fn: Callable[[], list]) -> tuple[float, float, list]:
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--top", type=int, default=5)
    args = parser.parse_args()
    system, data, setting = _system()
    settings = [
        ("queries (test pairs, batches of 16)", "test", False, 16),
        ("cases (training pairs, own edge hidden, batches of 256)", "train", True, 256),
    ]
    print(
        f"EmerGNN paths for {args.pairs} pairs, top {args.top}, {args.rounds} interleaved rounds (ms per pair, median)"
    )
    print(f"{'pairs':<58} {'before wall':>11} {'before CPU':>10} {'after wall':>10} {'after CPU':>9} {'CPU ratio':>9}")
    for label, split, hide_own, size in settings:
        pairs = [s.input for s in data.split(split)[: args.pairs]]
        batches = [pairs[i : i + size] for i in range(0, len(pairs), size)]
        times: dict[str, list[tuple[float, float]]] = {"before": [], "after": []}
        for _ in range(args.rounds):
            for name, fn in (("before", _before), ("after", _after)):
                wall = cpu = 0.0
                found = []
                for batch in batches:
                    heads, tails = [p.head.node_id for p in batch], [p.tail.node_id for p in batch]
                    w, c, result = _timed(lambda: fn(system, heads, tails, setting, args.top, hide_own))  # noqa: B023
                    wall, cpu = wall + w, cpu + c
                    found += result
                times[name].append((wall, cpu))
                if name == "before":
                    reference = found
                elif found != reference:
                    raise SystemExit(f"{label}: the paths differ between before and after")
        per = {k: [statistics.median(x[i] for x in v) * 1000 / len(pairs) for i in (0, 1)] for k, v in times.items()}
        print(
            f"{label:<58} {per['before'][0]:>11.1f} {per['before'][1]:>10.1f} {per['after'][0]:>10.1f}"
            f" {per['after'][1]:>9.1f} {per['before'][1] / per['after'][1]:>8.1f}x"
        )
    print("the paths were the same, pair for pair, in every round")
    print(f"\nthe paths' search alone (CPU ms per pair, median): {'per pair':>9} {'over the batch':>15} {'ratio':>6}")
    for label, split, hide_own, size in settings:
        pairs = [s.input for s in data.split(split)[: args.pairs]]
        each, together = _searches(system, setting, pairs, size, args.top, hide_own, args.rounds)
        print(f"{label:<58} {each:>9.2f} {together:>15.2f} {each / together:>5.1f}x")
    print("the search per pair and over the batch found the same paths, pair for pair, in every round")
    # CBR-DDI's refinement once ran a forward of each refined case alone for its candidates; it now reads them from
    # the cases' batch forward above where they are CANDIDATE_TIE apart, so this is what a case no longer costs
    pairs = [s.input for s in data.split("train")[: args.pairs]]
    heads, tails = [p.head.node_id for p in pairs], [p.tail.node_id for p in pairs]
    batched = system.encode(heads, tails, setting, hide_own=True)[0]
    wall, cpu, alone = _timed(
        lambda: [system.encode([h], [t], setting, hide_own=True)[0][0] for h, t in zip(heads, tails)]
    )
    print(
        f"a case's probabilities alone (the refinement's forward a case, before): {wall * 1000 / len(pairs):.1f} ms wall, "
        f"{cpu * 1000 / len(pairs):.1f} ms CPU; the batch's within {float(np.max(np.abs(np.array(alone) - batched))):.1e}"
    )


if __name__ == "__main__":
    main()
