#!/usr/bin/env python3
"""How busy the query phase of ``ddibench run -s cbr-ddi`` keeps a served model, with the text encoder's work on
this CPU and without it.

On two cores the query phase of the paper-scale rehearsal (``benchmarks/paper_scale.py``) kept about 7 of 64 slots
of a 0.5 s server busy. A profile of that phase (py-spy, 300 queries) put 96% of the CPU worker's samples in
MiniLM's forward over the queries' pair texts, model compute that the GPU profiles run on the device
(``encoder_device=cuda``); the rest of a query, the harness's own work (its GNN forward and paths, retrieval at
every lam, the prompt, the call, the trace), is a few milliseconds. This benchmark measures the two apart:

* one process runs the same command twice (``ddibench.cli.main``, in process, two run directories, one
  artifact store): the first run's queries embed their pair texts on this CPU; the second run's find every pair
  text already embedded by the first (the encoder's per-process memo, :class:`ddibench.embeddings.TextEncoder`), so
  its query phase does everything a query does except the encoder's forward: it stands in for a run whose encoder
  is on a device, and measures what the harness alone feeds the server;
* this process holds the stub server (``--latency`` seconds an answer, ``--fill`` of max_tokens of free text) and
  samples the run's CPU seconds and the stub's counters every ``--every`` seconds (as ``paper_scale.py`` does).

For each run's query phase it prints wall and CPU seconds, calls, the harness's share of the wall time (no request
in flight) and the mean requests in flight over the profile's concurrency (``flight``: 1.0 is every slot busy the
whole phase) and the same over the phase less its first and last ``--latency`` seconds (``steady``: the ramp and
the drain left out). Both runs answer the same queries with the same vectors, so their predictions must agree; it
checks that and says so.

    python benchmarks/query_flight.py [--scale 1000] [--limit 1992] [--latency 0.5] [--profile h100-80g]
        [--cache DIR]

``--cache`` keeps the artifact store (repository, GNN module, stored text vectors) between invocations (its
response cache is deleted before each run); without it the first run builds the repository (minutes). The GNN
module trains one epoch on the CPU and the encoder runs on the CPU, as in the rehearsal. Run it under ``nice``; it
asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from paper_scale import measure, run_sampled  # noqa: E402 - the rehearsal's own sampling and windows

# the child: the same command twice in one process (the second run's pair texts are in the encoder's memo)
# and each run from an empty response cache: its answers are calls to the stub, its query drugs' descriptions
# (asked in prepare, for the catalogue) hits of the cache, as in any run
DRIVER = """
import sys
from ddibench.cli import main
from ddibench.data.resolve import cache_root
args, dirs = sys.argv[1:-2], sys.argv[-2:]
for run_dir in dirs:
    for stale in cache_root().glob("llm-cache.sqlite*"):
        stale.unlink()
    main([*args, "--run-dir", run_dir])
"""


def command(args: argparse.Namespace, spec: str) -> list[str]:
    gnn = json.dumps({"max_epochs": 1, "device": "cpu"})
    cmd = ["run", "-s", "cbr-ddi", "-t", "drugbank_s2", "--profile", args.profile, "-m", spec]
    cmd += ["-C", f"repository_size={args.scale}", "-C", f"gnn={gnn}", "-C", "encoder_device=cpu"]
    return cmd + ["--limit", str(args.limit)]


def run_twice(args: argparse.Namespace, tmp: Path) -> list[dict[str, Any]]:
    from ddibench.llm.stub import StubConfig, running_stub
    from ddibench.profiles import get_profile
    from ddibench.runner.journal import Journal

    limit = get_profile(args.profile).llm_concurrency
    dirs = [tmp / "encoder-on-cpu", tmp / "vectors-in-memo"]
    with running_stub(StubConfig(delay=args.latency, fill=args.fill)) as stub:
        env = {**os.environ, "DDIBENCH_CACHE": str(args.cache or tmp / "cache")}
        cmd = [sys.executable, "-c", DRIVER, *command(args, f"vllm:stub-model@{stub.base_url}"), *map(str, dirs)]
        samples, answered, code, err = run_sampled(cmd, env, stub, args.every)
        if code:
            raise SystemExit(f"the runs exited with {code}:\n{err.decode()[-3000:]}")
    rows = []
    for run_dir in dirs:
        results = json.loads((run_dir / "results.json").read_text(encoding="utf-8"))
        queries = next(p for p in results["system_info"]["phases"] if p["phase"] == "queries")
        t0 = queries["started_at"]
        row = {"run": run_dir.name, "wall_s": queries["wall_s"], "cpu_s": queries["cpu_s"]}
        row.update(measure(samples, answered, t0, t0 + queries["wall_s"], limit))
        # the phase less its first and last answer's latency: the ramp (the first calls not yet all sent) and the
        # drain (the last answers, fewer than the slots, coming back) bound a short phase's flight below 1.0
        # (none when the phase is not longer than the two together)
        lo, hi = t0 + args.latency, t0 + queries["wall_s"] - args.latency
        row["steady_flight"] = measure(samples, answered, lo, hi, limit)["in_flight_per_limit"] if hi > lo else None
        predictions = Journal(run_dir / "journal.jsonl").load(repair=False)
        row["answers"] = {sid: (p.label, p.ranked) for sid, p in predictions.items()}
        row["by_role"] = {role: r["calls"] for role, r in results["cost"]["by_role"].items()}
        row["limit"] = limit
        rows.append(row)
    return rows


def steady(flight: float | None) -> str:
    return "—" if flight is None else f"{flight:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=int, default=1000, help="repository_size (training pairs drawn)")
    parser.add_argument("--limit", type=int, default=1992, help="test pairs answered (default: all of drugbank_s2)")
    parser.add_argument("--latency", type=float, default=0.5, help="the stub's seconds per answer")
    parser.add_argument("--fill", type=float, default=0.85, help="share of max_tokens the stub's free text fills")
    parser.add_argument("--profile", default="h100-80g")
    parser.add_argument("--every", type=float, default=0.1, help="seconds between samples")
    parser.add_argument("--cache", type=Path, default=None, help="artifact store kept between invocations")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ddibench-flight-") as tmp:
        rows = run_twice(args, Path(tmp))
    print(
        f"query phase of cbr-ddi on drugbank_s2, {args.limit:,} queries, repository_size={args.scale:,}, profile "
        f"{args.profile} (concurrency {rows[0]['limit']}), stub answering after {args.latency:g} s"
    )
    print(f"{'run':<18}{'wall s':>9}{'CPU s':>9}{'CPU ms/q':>10}{'calls':>8}{'harness':>9}{'flight':>8}{'steady':>8}")
    for r in rows:
        per = 1000 * r["cpu_s"] / max(args.limit, 1)
        print(
            f"{r['run']:<18}{r['wall_s']:>9.1f}{r['cpu_s']:>9.1f}{per:>10.1f}{r['calls']:>8,}"
            f"{100 * r['harness_share']:>8.0f}%{r['in_flight_per_limit']:>8.2f}{steady(r['steady_flight']):>8}"
        )
    print("calls by role in each run: " + "; ".join(f"{r['run']} {r['by_role']}" for r in rows))
    same = rows[0]["answers"] == rows[1]["answers"]
    print(f"the two runs' answers are {'the same' if same else 'NOT the same'} ({len(rows[0]['answers']):,} queries)")


if __name__ == "__main__":
    main()
