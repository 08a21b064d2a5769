#!/usr/bin/env python3
"""``ddibench board check`` (every shipped bundle recomputed in a sandboxed child) with 1 and N checks at once.

CI and the default test command check every bundle under results/; the checks are independent child processes,
so they can run side by side while the calling thread re-runs the reproduced entries and fills the store. This
copies a sample of the shipped bundles (``--per-task`` per task, the largest first: a QA run, a captioning run and
a trained full split cost most) into a results folder of their own and checks it with each ``--workers`` count in
turn, side by side in one process, from the same warm data cache:

    python benchmarks/board_check.py [--workers 1,2] [--per-task 1] [--tasks ddi_qa_s1,tox_herg,...]

It prints the seconds of each check and their ratio, and fails if the reports differ (the outcome of every
bundle, its checks and fresh index entry, and the problems) between worker counts. The sample's index keeps the
shipped tie verdicts and floors, which were made with every run in, so the check reports them as differing; those
problems are the same for every worker count and are printed, not counted as a failure.

Needs $DDIBENCH_MIRROR (or network) for the tasks' data.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def sample_folder(dest: Path, per_task: int, tasks: set[str] | None) -> int:
    """A results folder under ``dest`` with ``per_task`` shipped bundles of each task (the largest first)."""
    from ddibench.results.shipped import read_index

    index = read_index(REPO / "results")
    by_task: dict[str, list[dict]] = {}
    for entry in index["runs"]:
        if tasks is None or entry["task"] in tasks:
            by_task.setdefault(entry["task"], []).append(entry)
    chosen = [e for runs in by_task.values() for e in sorted(runs, key=lambda e: -e["bytes"])[:per_task]]
    for entry in chosen:
        (dest / entry["path"]).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / "results" / entry["path"], dest / entry["path"])
    kept = {e["task"] for e in chosen}
    floors = [f for f in index.get("floors", []) if f["task"] in kept]
    sample = {**index, "runs": chosen, "floors": floors, "total_bytes": sum(e["bytes"] for e in chosen)}
    (dest / "index.json").write_text(json.dumps(sample, indent=1), "utf-8")
    return len(chosen)


def report_of(check_report) -> dict:
    return {
        "outcomes": [
            (str(o.bundle.name), o.problem, o.checks, json.dumps(o.entry, sort_keys=True, default=str))
            for o in check_report.outcomes
        ],
        "problems": list(check_report.problems),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", default="1,2", help="worker counts to compare, comma-separated")
    parser.add_argument("--per-task", type=int, default=1)
    parser.add_argument("--tasks", default=None, help="comma-separated tasks (default: every task)")
    args = parser.parse_args()
    from ddibench.results.shipped import check

    counts = [int(w) for w in args.workers.split(",")]
    with tempfile.TemporaryDirectory(prefix="board-check-") as tmp:
        root = Path(tmp) / "results"
        n = sample_folder(root, args.per_task, set(args.tasks.split(",")) if args.tasks else None)
        print(f"{n} shipped bundles copied to a folder of their own")
        check(root, workers=1, reproduce=False)  # warm the data cache: every task's data read once before timing
        seconds, reports = {}, {}
        for workers in counts:
            started = time.perf_counter()
            reports[workers] = report_of(check(root, workers=workers))
            seconds[workers] = time.perf_counter() - started
            print(f"workers={workers}: {seconds[workers]:.1f} s", flush=True)
    base = counts[0]
    for workers in counts[1:]:
        print(f"workers={base} / workers={workers}: {seconds[base] / seconds[workers]:.2f}x")
    for problem in reports[base]["problems"]:
        print(f"  problem (the sample's index; the same for every count): {problem[:160]}")
    differing = [w for w in counts[1:] if reports[w] != reports[base]]
    if differing:
        print(f"FAIL: the reports with workers={differing} differ from workers={base}")
        return 1
    print("the reports are the same for every worker count")
    return 0


if __name__ == "__main__":
    sys.exit(main())
