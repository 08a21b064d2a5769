#!/usr/bin/env python3
"""A rehearsal, on this CPU, of the paper-scale headline command: ``ddibench run -s cbr-ddi -t drugbank_s2``
under a GPU profile's budgets (``--profile h100-80g``: the whole training split for the repository, every case
refined, lam chosen on every validation pair), against the local stub server in place of a served model.

What is not the paper's setting, and says so in the output:

* the repository is ``--scale`` training pairs (``-C repository_size=N``: ``1000``, ``10000``, ``all`` for the
  99,283; a fraction such as ``0.1`` of them), so the growth of every phase can be read off scale by scale;
* the GNN module trains on the CPU for ``--epochs`` epochs (``-C gnn={"max_epochs": 1, "device": "cpu"}``), not
  the profile's 100 on its GPU: the rehearsal measures the harness, not EmerGNN's training; the text encoder
  embeds on the CPU too (``-C encoder_device=cpu``);
* the model is the stub (``ddibench.llm.stub``) answering after ``--latency`` seconds, its free text filling
  ``--fill`` of each request's ``max_tokens`` (descriptions ~110 of 128 tokens, insights ~135 of 160, the query
  answer's mechanism likewise), constrained answers valid for their schema.

Every scale runs the real command in its own process, from an empty response cache and artifact store. This
process holds the stub and samples, every ``--every`` seconds, the run's CPU seconds and RSS (``/proc``) and the
stub's counters (requests, request-seconds in flight, seconds busy, tokens). Phase boundaries are the run's own:
cbr-ddi times each phase into ``system_info["phases"]`` (start, wall, CPU); start-up (imports, the task, the
knowledge graph) runs from spawn to the first phase, scoring and writing from the last query to the exit.

Per phase it prints wall and CPU seconds, peak RSS, LLM calls and tokens (prompt + completion, the stub's
characters / 4), the harness's share of the wall time (the share with no request in flight at the server: the
time the run spent on its own work, not waiting on the model) and the mean requests in flight over the
profile's concurrency limit.

    python benchmarks/paper_scale.py [--scale 1000,10000] [--profile h100-80g] [--latency 0] [--fill 0.85]
        [--epochs 1] [--limit N] [--encoder cpu|free] [--json out.json]

``--encoder free`` runs the command with a stand-in for the text encoder's forward that costs next to nothing:
each text's vector is drawn from a generator seeded by the text's hash (384 dimensions, unit length), so the
phases measure everything a case costs the host except MiniLM's forward, which the GPU profiles run on the device
(``encoder_device=cuda``; what the device takes per batch is not measured). The encoder's forward on this CPU is
~75 ms a case (two texts); the default, ``--encoder cpu``, runs it. The GNN module's forward stays real either way.

``--kmedoids N,K`` times K-medoids alone instead, on N random unit vectors of the encoder's 384 dimensions with
K medoids (a class of the whole split: the largest DrugBank type holds about a third of its 99,283 pairs, and the
sampling keeps 5% of it): wall and CPU seconds and the peak of numpy's allocations, holding the whole distance
matrix and computing it in blocks.

Run it under ``nice``; it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

TRAIN_PAIRS = 99_283  # drugbank_s2's training split
CLK_TCK = os.sysconf("SC_CLK_TCK")
FREE_ENCODER = "--run-with-free-encoder"  # this script's own argv[1] for the child run of ``--encoder free``
STAND_IN = "stand-in (rehearsal): blake2b-seeded unit normal vectors, no forward"


def repository_size(scale: str) -> int | None:
    """``-C repository_size`` for a scale: a count, a fraction of the training split, or None for all of it."""
    if scale == "all":
        return None
    value = float(scale)
    return int(round(value * TRAIN_PAIRS)) if "." in scale and value <= 1 else int(value)


def proc_sample(pid: int) -> tuple[float, int]:
    """CPU seconds (user + system, threads included) and resident bytes of a running process."""
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(stat[11]) + int(stat[12])) / CLK_TCK
    rss = next(
        int(ln.split()[1]) for ln in Path(f"/proc/{pid}/status").read_text().splitlines() if ln.startswith("VmRSS")
    )
    return cpu, rss * 1024


Sample = tuple[float, float, int, dict[str, float]]  # (unix time, CPU s, RSS, the stub's counters)


Answer = tuple[float, int, int]  # an answered request: (its arrival, unix time; prompt tokens; completion tokens)


def run_sampled(
    cmd: list[str], env: dict[str, str], stub: Any, every: float
) -> tuple[list[Sample], list[Answer], int, bytes]:
    """Run ``cmd`` to its end, sampling its CPU seconds and RSS and the stub's counters every ``every`` seconds; the
    last sample is taken as it exits. Returns the samples, the stub's answers so far (on the samples' clock), its
    exit code and its stderr."""
    samples: list[Sample] = []
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            try:
                cpu, rss = proc_sample(proc.pid)
            except (FileNotFoundError, ProcessLookupError, StopIteration):
                break
            samples.append((time.time(), cpu, rss, stub.counters()))
            done.wait(every)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, err = proc.communicate()
    ended = time.time()
    done.set()
    sampler.join()
    samples.append((ended, samples[-1][1] if samples else 0.0, 0, stub.counters()))
    offset = time.time() - time.monotonic()  # the stub's arrivals are on the monotonic clock
    return samples, [(t + offset, p, c) for t, p, c in stub.answered], proc.returncode, err


def run_scale(args: argparse.Namespace, scale: str, tmp: Path) -> dict[str, Any]:
    """One rehearsal: the command's phases, each with its measurements."""
    from ddibench.llm.stub import StubConfig, running_stub
    from ddibench.profiles import get_profile

    size = repository_size(scale)
    limit = get_profile(args.profile).llm_concurrency
    cache = tmp / f"cache-{scale}"
    run_dir = tmp / f"run-{scale}"
    gnn = {"max_epochs": args.epochs, "device": "cpu"}
    child = [sys.executable, __file__, FREE_ENCODER] if args.encoder == "free" else [sys.executable, "-m", "ddibench"]
    cmd = [*child, "run", "-s", "cbr-ddi", "-t", "drugbank_s2", "--profile", args.profile]
    cmd += ["-C", f"repository_size={'null' if size is None else size}", "-C", f"gnn={json.dumps(gnn)}"]
    cmd += ["-C", "encoder_device=cpu"]  # (the profile's accelerator is not here either)
    cmd += ["--run-dir", str(run_dir)] + (["--limit", str(args.limit)] if args.limit else [])
    with running_stub(StubConfig(delay=args.latency, fill=args.fill)) as stub:
        spec = f"vllm:stub-model@{stub.base_url}"
        env = {**os.environ, "DDIBENCH_CACHE": str(cache)}
        started = time.time()
        samples, answered, code, err = run_sampled([*cmd, "-m", spec], env, stub, args.every)
        ended = samples[-1][0]
        if code:
            raise SystemExit(f"[{scale}] ddibench run exited with {code}:\n{err.decode()[-3000:]}")
        concurrency = stub.peak_in_flight
    results = json.loads((run_dir / "results.json").read_text(encoding="utf-8"))
    info = results["system_info"]
    phases = [dict(p) for p in info.get("phases", [])]
    first = phases[0]["started_at"] if phases else ended
    last = max((p["started_at"] + p["wall_s"] for p in phases), default=started)
    rows: list[dict[str, Any]] = [
        {"phase": "start-up (imports, task, knowledge graph)", "started_at": started, "wall_s": first - started}
    ]
    rows += phases
    rows.append({"phase": "scoring and writing (to exit)", "started_at": last, "wall_s": ended - last})
    for row in rows:
        row.update(measure(samples, answered, row["started_at"], row["started_at"] + row["wall_s"], limit))
        row.setdefault("cpu_s", row.pop("cpu_sampled_s"))
        row.pop("cpu_sampled_s", None)
    total = measure(samples, answered, started, ended, limit)
    total.update(phase="whole command", started_at=started, wall_s=ended - started, cpu_s=total.pop("cpu_sampled_s"))
    rows.append(total)
    return {
        "scale": scale,
        "repository_size": size,
        "cases_kept": info.get("repository", {}).get("cases"),
        "refinement": info.get("repository", {}).get("refinement"),
        "limit": limit,
        "peak_in_flight": concurrency,
        "rows": rows,
    }


def at(samples: list[tuple[float, float, int, dict[str, float]]], t: float, key: str) -> float:
    """A cumulative stub counter (or the run's CPU seconds, ``key="cpu"``) at time ``t``, linearly interpolated."""

    def value(s: tuple[float, float, int, dict[str, float]]) -> float:
        return s[1] if key == "cpu" else s[3][key]

    if not samples or t <= samples[0][0]:
        return value(samples[0]) if samples else 0.0
    for a, b in zip(samples, samples[1:]):
        if a[0] <= t <= b[0]:
            w = (t - a[0]) / (b[0] - a[0]) if b[0] > a[0] else 0.0
            return value(a) + w * (value(b) - value(a))
    return value(samples[-1])


def measure(
    samples: list[Sample],
    answered: list[Answer],
    t0: float,
    t1: float,
    limit: int,
) -> dict[str, Any]:
    """What a window holds: the calls that arrived in it and their tokens (the stub's own record of each answer),
    and from the samples seconds busy, mean in flight, peak RSS and CPU seconds."""
    wall = max(t1 - t0, 1e-9)
    calls = [(p, c) for t, p, c in answered if t0 <= t < t1]
    busy = at(samples, t1, "busy_s") - at(samples, t0, "busy_s")
    area = at(samples, t1, "in_flight_area") - at(samples, t0, "in_flight_area")
    inside = [s[2] for s in samples if t0 - 0.5 <= s[0] <= t1 + 0.5 and s[2]]
    return {
        "calls": len(calls),
        "tokens": sum(p + c for p, c in calls),
        "harness_share": max(0.0, 1 - busy / wall),
        "in_flight_per_limit": area / wall / limit,
        "peak_rss_mb": max(inside, default=0) / 2**20,
        "cpu_sampled_s": at(samples, t1, "cpu") - at(samples, t0, "cpu"),
    }


def print_table(run: dict[str, Any], args: argparse.Namespace) -> None:
    size = run["repository_size"]
    print(
        f"\n== scale {run['scale']}: repository_size={'all (99,283)' if size is None else f'{size:,}'}, "
        f"{run['cases_kept']} cases kept; profile {args.profile} (concurrency {run['limit']}, "
        f"peak in flight {run['peak_in_flight']}); refinement {run['refinement']}"
    )
    head = f"{'phase':<44}{'wall s':>9}{'CPU s':>9}{'RSS MB':>8}{'calls':>8}{'tokens':>11}{'harness':>9}{'flight':>8}"
    print(head)
    for r in run["rows"]:
        print(
            f"{r['phase'][:43]:<44}{r['wall_s']:>9.1f}{r['cpu_s']:>9.1f}{r['peak_rss_mb']:>8.0f}{r['calls']:>8,}"
            f"{r['tokens']:>11,}{100 * r['harness_share']:>8.0f}%{r['in_flight_per_limit']:>8.2f}"
        )


def run_with_free_encoder(argv: list[str]) -> None:
    """``ddibench`` with ``argv``, its text encoder's forward replaced by a stand-in of next to no cost: a text's
    vector comes from a generator seeded by the text's blake2b hash (the same text, the same vector), so
    retrieval and K-medoids get vectors of the encoder's shape (384 dimensions, unit length) while nothing of
    MiniLM runs. The encoder's identity says so, and the run's manifest records it."""
    import hashlib

    import numpy as np

    from ddibench import embeddings
    from ddibench.cli import main as ddibench_main

    dim = 384  # all-MiniLM-L6-v2's

    def encode(self: Any, texts: Any, batch_size: int = 64) -> Any:
        out = np.empty((len(texts), dim), dtype=np.float32)
        for i, text in enumerate(texts):
            seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")
            out[i] = np.random.default_rng(seed).standard_normal(dim, dtype=np.float32)
        return out / np.linalg.norm(out, axis=1, keepdims=True).clip(min=1e-12)

    embeddings.TextEncoder.encode = encode  # type: ignore[method-assign]
    embeddings.TextEncoder.dim = property(lambda self: dim)  # type: ignore[assignment,method-assign]
    embeddings.TextEncoder.identity = property(  # type: ignore[assignment,method-assign]
        lambda self: {"encoder": STAND_IN, "weights_sha256": "none"}
    )
    sys.argv = ["ddibench", *argv]
    ddibench_main()


def time_kmedoids(spec: str) -> None:
    """K-medoids alone on random vectors: the whole matrix (where it fits) and blocks."""
    import tracemalloc

    import numpy as np

    from ddibench.systems.cbr_ddi.repository import FULL_MATRIX_CASES, k_medoids, normalise

    n, k = (int(x) for x in spec.split(","))
    vectors = normalise(np.random.default_rng(0).normal(size=(n, 384)))
    print(f"K-medoids, {n:,} cases, {k:,} medoids (whole matrix up to {FULL_MATRIX_CASES:,} cases)")
    print(f"{'distances':<14}{'wall s':>9}{'CPU s':>9}{'peak MB':>9}")
    for name, full in (("whole matrix", n), ("blocks", 0)):
        if name == "whole matrix" and n > 4 * FULL_MATRIX_CASES:
            print(f"{name:<14}{'(skipped: ' + format(4 * n * n / 2**30, '.1f') + ' GB matrix)':>27}")
            continue
        tracemalloc.start()
        wall, cpu = time.perf_counter(), time.process_time()
        k_medoids(vectors, k, np.random.default_rng(1), full_matrix=full)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        print(f"{name:<14}{wall:>9.1f}{cpu:>9.1f}{peak / 2**20:>9.0f}")


def main() -> None:
    if sys.argv[1:2] == [FREE_ENCODER]:
        run_with_free_encoder(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", default="1000,10000", help="repository sizes: counts, fractions, 'all'")
    parser.add_argument("--profile", default="h100-80g")
    parser.add_argument("--latency", type=float, default=0.0, help="the stub's seconds per request")
    parser.add_argument("--fill", type=float, default=0.85, help="share of max_tokens the stub's free text fills")
    parser.add_argument("--epochs", type=int, default=1, help="the GNN module's epochs on the CPU (rehearsal only)")
    parser.add_argument("--limit", type=int, default=None, help="test pairs answered (default: all 1,992)")
    parser.add_argument(
        "--encoder", choices=("cpu", "free"), default="cpu", help="MiniLM on this CPU, or a stand-in of no cost"
    )
    parser.add_argument("--every", type=float, default=0.1, help="seconds between samples")
    parser.add_argument("--json", type=Path, default=None, help="also write the measurements here")
    parser.add_argument("--kmedoids", default=None, metavar="N,K", help="time K-medoids alone on N vectors, K medoids")
    args = parser.parse_args()
    if args.kmedoids:
        time_kmedoids(args.kmedoids)
        return
    print(
        f"rehearsal: ddibench run -s cbr-ddi -t drugbank_s2 --profile {args.profile} against the stub "
        f"(latency {args.latency:g} s, free text {args.fill:.0%} of max_tokens); NOT the paper's run: "
        f"the GNN module trains {args.epochs} epoch(s) on the CPU (gnn={{max_epochs: {args.epochs}, device: cpu}}) "
        "and the repository is the scale's draw of the training split"
        + (f"; the text encoder's forward is a {STAND_IN}" if args.encoder == "free" else "")
    )
    print("harness: share of the phase's wall time with no request in flight; flight: mean requests in flight / limit")
    runs = []
    with tempfile.TemporaryDirectory(prefix="ddibench-scale-") as tmp:
        for scale in args.scale.split(","):
            runs.append(run_scale(args, scale.strip(), Path(tmp)))
            print_table(runs[-1], args)
    if args.json:
        args.json.write_text(json.dumps(runs, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
