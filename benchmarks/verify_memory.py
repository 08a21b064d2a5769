#!/usr/bin/env python3
"""Peak memory (RSS) of ``ddibench verify`` on real bundles, and how much of it is the task's own data.

Builds two bundles unless given some: an MLP run on drugbank_s0 (38,419 predictions with top-5
scores; tiny training budget) and a zero-shot run on drugbank_s1 (31,984 predictions, each with its
LLM trace; answered by the stub server). Each measurement runs in a fresh process:

* ``task data`` — importing ddibench and loading the task's splits (what any verification needs);
* ``verify`` — :func:`ddibench.submission.verify` on the bundle;
* ``before`` — with ``--before-src DIR``, the same call from an older source tree (e.g.
  ``git archive ae1559e | tar -x -C DIR``), which read every member and parsed every trace whole.

    python benchmarks/verify_memory.py [--bundle B ...] [--before-src DIR] [--keep DIR]

Prints peak RSS in MB and wall seconds; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TINY = ["-C", "max_epochs=1", "-C", "max_train=1500", "-C", "hidden=[32]", "-C", "patience=1"]

MEASURE = """
import json, resource, sys, time
from pathlib import Path
t0 = time.perf_counter()
what, bundle, task = sys.argv[1:4]
if what == "task":
    from ddibench.registry import get_task
    get_task(task).load().split("test")
    ok = None
else:
    from ddibench.submission import verify
    ok = verify(Path(bundle)).accepted
print(json.dumps({"peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "wall_s": time.perf_counter() - t0, "accepted": ok}))
"""


def ddibench(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "ddibench", *args], check=True, stdout=subprocess.DEVNULL)


def build(out: Path) -> list[Path]:
    sys.path.insert(0, str(REPO / "benchmarks"))
    from runner_throughput import start_stub

    ddibench("run", "-s", "mlp", "-t", "drugbank_s0", *TINY, "--run-dir", str(out / "mlp"))
    ddibench("submit", str(out / "mlp"), "--out", str(out / "mlp-drugbank_s0.tar.gz"))
    proc, url = start_stub()
    try:
        ddibench(
            "run",
            "-s",
            "zero-shot",
            "-t",
            "drugbank_s1",
            "-m",
            f"vllm:stub-model@{url}",
            "--concurrency",
            "32",
            "--run-dir",
            str(out / "zs"),
        )
    finally:
        proc.terminate()
        proc.wait()
    ddibench("submit", str(out / "zs"), "--out", str(out / "zero-shot-drugbank_s1.tar.gz"))
    return [out / "mlp-drugbank_s0.tar.gz", out / "zero-shot-drugbank_s1.tar.gz"]


def measure(what: str, bundle: Path, task: str, src: Path | None) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if src is not None:
        env["PYTHONPATH"] = str(src.resolve())
    # run outside the repository: 'python -c' puts the working directory first on sys.path
    out = subprocess.run(
        [sys.executable, "-c", MEASURE, what, str(bundle.resolve()), task],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        cwd=tempfile.gettempdir(),
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundle", type=Path, action="append", default=[])
    parser.add_argument("--before-src", type=Path, default=None)
    parser.add_argument(
        "--keep", type=Path, default=None, help="Build the bundles in this directory (kept) instead of a temporary one."
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        bundles = args.bundle or build(args.keep or Path(tmp))
        rows = []
        for bundle in bundles:
            with tarfile.open(bundle) as tar:
                index = json.loads(tar.extractfile("bundle.json").read())  # type: ignore[union-attr]
                unpacked = sum(m.size for m in tar)
            task = index["task"]["name"]
            size = f"{bundle.stat().st_size / 2**20:.1f} MB gz, {unpacked / 2**20:.1f} MB unpacked"
            rows.append((bundle.name, size, "task data only", measure("task", bundle, task, None)))
            if args.before_src:
                rows.append(
                    (
                        bundle.name,
                        size,
                        f"verify, before ({args.before_src.name})",
                        measure("verify", bundle, task, args.before_src),
                    )
                )
            rows.append((bundle.name, size, "verify, now", measure("verify", bundle, task, None)))
    print(f"peak RSS of one process (Python {sys.version.split()[0]}, {os.cpu_count()} CPUs)")
    print(f"{'bundle':28s} {'size':28s} {'measured':30s} {'peak MB':>8s} {'wall s':>7s}")
    for name, size, what, m in rows:
        print(f"{name:28s} {size:28s} {what:30s} {m['peak_mb']:8.0f} {m['wall_s']:7.1f}")


if __name__ == "__main__":
    main()
