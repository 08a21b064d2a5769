#!/usr/bin/env python3
"""Start-up time of the ddibench command: median of repeated runs of a few light commands.

    python benchmarks/cli_startup.py [--repeat 10]

For scale, it also times a bare ``python -c pass`` on the same machine. Prints seconds; asserts nothing.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time


def timed(cmd: list[str], repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    exe = shutil.which("ddibench")
    base = [exe] if exe else [sys.executable, "-m", "ddibench"]
    rows = [
        ("python -c pass", [sys.executable, "-c", "pass"]),
        ("ddibench --help", [*base, "--help"]),
        ("ddibench list profiles", [*base, "list", "profiles"]),
        ("ddibench list tasks", [*base, "list", "tasks"]),
        ("ddibench list systems", [*base, "list", "systems"]),
    ]
    print(f"median of {args.repeat} runs")
    for name, cmd in rows:
        print(f"{name:28s} {timed(cmd, args.repeat):6.3f} s")


if __name__ == "__main__":
    main()
