"""What the benchmarks that drive ``ddibench run`` share: run a command into its run directory unless that directory
already holds a finished run, resuming an unfinished one (the same command continues it)."""

from __future__ import annotations

import shlex
import subprocess
import time
from pathlib import Path


def finish(name: str, run_dir: Path, cmd: list[str]) -> None:
    """Make ``run_dir`` hold a finished run: read it when it does, else run ``cmd`` (which writes it) and stop the
    benchmark with a one-line message when it fails."""
    if (run_dir / "results.json").is_file():
        print(f"[{name}] finished before: reading {run_dir}", flush=True)
        return
    print(f"[{name}] {'resuming' if run_dir.exists() else 'starting'}: {shlex.join(cmd)}", flush=True)
    started = time.perf_counter()
    code = subprocess.call(cmd)
    if code != 0:
        raise SystemExit(f"[{name}] ddibench run exited with {code}: run the same command again to resume")
    print(f"[{name}] done in {time.perf_counter() - started:.0f} s", flush=True)
