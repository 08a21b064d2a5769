#!/usr/bin/env python3
"""Count the CLADD answers of a run whose retrieved context states the gold label verbatim.

Usage: python scripts/cladd_leak_audit.py RUN_DIR [RUN_DIR ...]   (prints one JSON line per run)

The rule per task family is :mod:`ddibench.systems.cladd.audit`'s; the gold comes from the task the run
names (its data hash must match the run's).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def audit(run_dir: Path) -> dict:
    from ddibench.registry import get_task
    from ddibench.systems.cladd.audit import leak_audit

    run = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    task = get_task(run["task"]["name"])
    if task.data_sha256 != run["task"]["data_sha256"]:
        raise SystemExit(
            f"{run_dir}: the task's data changed since the run (data {task.data_sha256[:12]} vs {run['task']['data_sha256'][:12]})"
        )
    data = task.load()
    samples = {s.id: s for split in data.splits.values() for s in split}
    traces = {}
    for line in (run_dir / "journal.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            pred = json.loads(line)["prediction"]
            traces[pred["sample_id"]] = pred.get("trace") or {}
    result = leak_audit(task, samples, traces)
    return {"run": str(run_dir), "task": task.name, **result}


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        raise SystemExit(2)
    for arg in sys.argv[1:]:
        print(json.dumps(audit(Path(arg))))
