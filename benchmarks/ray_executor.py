#!/usr/bin/env python3
"""Items/s of one run on the local executor and on Ray, against a zero-latency stub server on loopback.

    python benchmarks/ray_executor.py [--n 500] [--workers 2] [--delay 0]

Both runs are the same zero-shot run on drugbank_s2 (``--limit N``, no response cache), made with the
``ddibench`` command, so Ray's start-up (cluster, actors, task data in every actor) is included; the
Ray executor pays off when one machine is not enough (many nodes, slow endpoints), not on 2 cores.
Prints wall seconds and items/s; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    from ddibench.llm.stub import StubConfig, running_stub

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=500)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--delay", type=float, default=0.0, help="seconds the stub waits before each answer (a slow endpoint)"
    )
    args = parser.parse_args()
    with running_stub(StubConfig(delay=args.delay)) as stub, tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "DDIBENCH_CACHE": str(Path(tmp) / "cache")}
        base = [
            sys.executable,
            "-m",
            "ddibench",
            "run",
            "-s",
            "zero-shot",
            "-t",
            "drugbank_s2",
            "--limit",
            str(args.n),
            "-m",
            f"vllm:stub-model@{stub.base_url}",
            "--no-cache",
            "--concurrency",
            "16",
        ]
        print(f"{args.n} zero-shot items, stub delay {args.delay} s, {os.cpu_count()} CPUs")
        for name, extra in (
            ("local", []),
            (f"ray, {args.workers} workers", ["--executor", "ray", "--workers", str(args.workers)]),
        ):
            start = time.perf_counter()
            proc = subprocess.run(
                [*base, "--run-dir", str(Path(tmp) / name.split(",")[0]), *extra],
                capture_output=True,
                text=True,
                env=env,
            )
            wall = time.perf_counter() - start
            if proc.returncode:
                raise SystemExit(proc.stdout[-2000:] + proc.stderr[-2000:])
            print(f"{name:20s} {wall:7.1f} s  {args.n / wall:7.1f} items/s (process start to results)")


if __name__ == "__main__":
    main()
