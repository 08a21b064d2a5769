#!/usr/bin/env python3
"""EmerGNN training step and inference on this machine, before and after, in one run.

*Before* is the implementation at commit 60ca4a2, read from this repository's git history: the L = 3
middle join read the CSR rows of whichever side was smaller for the whole batch; states were found by
sorting; the grouped sparse matrices were built as COO tensors and coalesced by torch; autograd went
through the sparse CSR product (which transposes and sorts the matrix on every backward pass); batches were
prepared one after the other. *After* is the code in this checkout: the side is chosen per pair and only
kept rows are read, the matrices and their transposes are built by scipy in linear time, the backward pass
multiplies by the precomputed transpose, and the next batch is prepared on a worker thread while the
network runs (``after, one thread`` times the same code without that overlap).

Setting: DrugBank S1 (EmerGNN seed 1234), one epoch's pseudo-emerging training graph and pairs, batch
32, Morgan features, L = 3, dimension 64 — what the ``cpu`` profile trains. The same batches, from the
same initial weights, in interleaved rounds (so machine load falls on both alike); the first batch's loss
and gradients of both implementations are compared (they differ only by float summation order).
Inference: 512 test pairs on the prediction graph, batches of 64.

    python benchmarks/emergnn_step.py [--steps 20] [--rounds 3] [--before REV] [--threads N]

Prints per-step wall and CPU milliseconds (median), the ratio, and the process's peak memory; asserts
nothing. Needs the 'ml' extra and git. On a CUDA machine add ``--device cuda`` (after only).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
import types
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def load_before(rev: str) -> types.ModuleType | None:
    """The walks and model modules at ``rev`` as one namespace (None where git cannot show them)."""
    try:
        walks_src, model_src = (
            subprocess.run(
                ["git", "show", f"{rev}:systems/emergnn/{name}.py"],
                cwd=ROOT,
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            for name in ("walks", "model")
        )
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"before ({rev}) unavailable: {exc}", file=sys.stderr)
        return None
    walks = types.ModuleType("emergnn_before_walks")
    sys.modules[walks.__name__] = walks
    exec(compile(walks_src, f"{rev}:walks.py", "exec"), walks.__dict__)
    model = types.ModuleType("emergnn_before_model")
    sys.modules[model.__name__] = model
    model_src = model_src.replace("from ddibench.systems.emergnn.walks import", "from emergnn_before_walks import")
    exec(compile(model_src, f"{rev}:model.py", "exec"), model.__dict__)
    model.walk_batch = walks.walk_batch
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="training steps per implementation and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--before", default="60ca4a2", help="git revision of the 'before' implementation")
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--threads",
        type=int,
        default=max(1, (os.cpu_count() or 1) - 1),
        help="torch threads (default: EmerGNN's, cores - 1)",
    )
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)

    from ddibench.chem import morgan_matrix
    from ddibench.kg import load_kg
    from ddibench.registry import get_task
    from ddibench.systems.emergnn import EmerGNNSystem, _prefetched, _pseudo_emerging, _triples
    from ddibench.systems.emergnn.model import EmerGNNNet, PairBatch
    from ddibench.systems.emergnn.walks import MessageGraph
    from ddibench.tasks.drugbank import load_catalog

    device = torch.device(args.device)
    kg = load_kg("drugbank")
    data = get_task("drugbank_s1_emergnn").load()
    train, test = _triples(data.split("train")), _triples(data.split("test"))
    rng = np.random.default_rng(0)
    train_drugs = {int(d) for d in train[:, :2].ravel()}
    facts, pairs = _pseudo_emerging("S1", train, np.array(sorted(train_drugs)), 0.8, rng)
    kg_train = kg.without_entities(set(range(kg.n_drugs)) - train_drugs)

    graphs = EmerGNNSystem()  # builds message graphs as training (pseudo-emerging facts) and prediction do
    train_graph, test_graph = graphs._message_graph(kg_train, set(), facts), graphs._message_graph(kg, set(), train)
    fingerprints, _ = morgan_matrix([d.smiles for d in load_catalog().drugs])
    batches = [pairs[rng.choice(len(pairs), 32, replace=False)] for _ in range(args.steps)]
    before = load_before(args.before) if device.type == "cpu" else None

    torch.manual_seed(0)
    net = EmerGNNNet(kg.n_drugs, 2 * kg.n_relations + 1, 86, fingerprints=fingerprints).to(device)
    initial = {k: v.clone() for k, v in net.state_dict().items()}
    optimiser = torch.optim.Adam(net.parameters(), lr=1e-3)
    old_net = old_optimiser = None
    if before is not None:
        old_net = before.EmerGNNNet(kg.n_drugs, 2 * kg.n_relations + 1, 86, fingerprints=fingerprints)
        old_net.load_state_dict(initial)
        old_optimiser = torch.optim.Adam(old_net.parameters(), lr=1e-3)

    def loss_of(logits: torch.Tensor, batch: np.ndarray) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(logits, torch.from_numpy(batch[:, 2]).to(device), reduction="sum")

    def logits_after(graph: MessageGraph, b: np.ndarray) -> torch.Tensor:
        return net(PairBatch.of(graph, b[:, 0], b[:, 1], 3, device))[0]

    def logits_before(graph: MessageGraph, b: np.ndarray) -> torch.Tensor:
        assert before is not None and old_net is not None
        walks = before.walk_batch(graph, b[:, 0], b[:, 1], 3)
        return old_net(
            torch.from_numpy(b[:, 0]),
            torch.from_numpy(b[:, 1]),
            before.TensorWalks.of(walks, device),
            before.TensorWalks.of(walks.reversed(graph), device),
        )[0]

    def train_after(prefetch: bool) -> None:
        prepare = lambda b: (b, PairBatch.of(train_graph, b[:, 0], b[:, 1], 3, device))  # noqa: E731
        for batch, prepared in _prefetched(prepare, batches) if prefetch else map(prepare, batches):
            loss = loss_of(net(prepared)[0], batch)
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
        if device.type == "cuda":
            torch.cuda.synchronize()

    def train_before() -> None:
        assert old_optimiser is not None
        for batch in batches:
            loss = loss_of(logits_before(train_graph, batch), batch)
            old_optimiser.zero_grad()
            loss.backward()
            old_optimiser.step()

    if before is not None:  # the same first step in both: loss and gradients agree up to summation order
        assert old_net is not None
        b = batches[0]
        new_loss = loss_of(logits_after(train_graph, b), b)
        new_loss.backward()
        old_loss = loss_of(logits_before(train_graph, b), b)
        old_loss.backward()
        grad_diff = max(
            float((p.grad - q.grad).abs().max())
            for p, q in zip(net.parameters(), old_net.parameters())
            if p.grad is not None
        )
        print(
            f"first batch: loss after {new_loss.item():.6f}, before {old_loss.item():.6f}; largest gradient difference {grad_diff:.2e}"
        )
        net.zero_grad()
        old_net.zero_grad()

    runs: dict[str, tuple[list[float], list[float]]] = {}
    variants = {"after": lambda: train_after(True), "after, one thread": lambda: train_after(False)}
    if before is not None:
        variants["before"] = train_before
    for _ in range(args.rounds):
        for name, fn in variants.items():
            wall, cpu = time.perf_counter(), time.process_time()
            fn()
            runs.setdefault(name, ([], []))[0].append((time.perf_counter() - wall) * 1000 / len(batches))
            runs[name][1].append((time.process_time() - cpu) * 1000 / len(batches))
    print(
        f"EmerGNN training step on {device} (batch 32, {torch.get_num_threads()} torch threads, {args.rounds} rounds of {len(batches)} steps):"
    )
    for name, (wall, cpu) in runs.items():
        print(f"  {name:<18} wall {np.median(wall):7.1f} ms, CPU {np.median(cpu):7.1f} ms per step")
    if "before" in runs:
        ratio = np.median(runs["before"][0]) / np.median(runs["after"][0])
        print(f"  ratio of wall medians (before / after): {ratio:.2f}x")

    sample = test[np.random.default_rng(1).choice(len(test), 512, replace=False)]
    net.eval()
    with torch.no_grad():
        t = time.perf_counter()
        for start in range(0, len(sample), 64):
            logits_after(test_graph, sample[start : start + 64])
        after_ms = (time.perf_counter() - t) * 1000 / len(sample)
        line = f"inference (batches of 64, one after the other): after {after_ms:.2f} ms per pair"
        if before is not None and old_net is not None:
            t = time.perf_counter()
            for start in range(0, len(sample), 64):
                logits_before(test_graph, sample[start : start + 64])
            before_ms = (time.perf_counter() - t) * 1000 / len(sample)
            line += f", before {before_ms:.2f} ms per pair ({before_ms / after_ms:.2f}x)"
    print(line)
    memory = f"peak GPU memory {torch.cuda.max_memory_allocated() / 2**20:.0f} MiB" if device.type == "cuda" else ""
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB {memory}".strip())


if __name__ == "__main__":
    main()
