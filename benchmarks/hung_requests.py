#!/usr/bin/env python3
"""Wall time of N LLM calls when a share of the requests hang (never answered).

A healthy stub server and a fault-injecting proxy in front of it (``ddibench.llm.stub``) run in their
own processes; the proxy leaves a share of the chat requests unanswered (``--hang``, default 5%; a
retry of a hung request draws again). The client under test sends N distinct prompts through
``LLMPool`` at concurrency 16 and waits for all of them:

* ``adaptive`` — this ddibench's defaults (120 s timeout; requests cut at 8x the endpoint's p95
  latency, at least 2 s, once 20 answers were seen);
* ``timeout=10`` — the model option ``#timeout=10`` on top;
* ``before`` — with ``--before-src DIR``, the same client code from an older source tree (e.g.
  ``git archive ae1559e | tar -x -C DIR``), where a hung request held its slot for the full 120 s.

    python benchmarks/hung_requests.py [--n 1000] [--hang 0.05] [--before-src DIR]

Prints wall time, calls that failed for good, retries and timeouts per variant; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start(args: list[str]) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "ddibench.llm.stub", "--port", str(port), *args], stdout=subprocess.DEVNULL, env=env
    )
    url = f"http://127.0.0.1:{port}/v1"
    for _ in range(200):
        try:
            urllib.request.urlopen(url + "/models", timeout=1).close()
            return proc, url
        except OSError:
            time.sleep(0.05)
    raise SystemExit("stub server did not start")


def client(url: str, n: int, suffix: str) -> None:
    """Send n distinct prompts through LLMPool; print one JSON line of what happened."""
    import asyncio

    from ddibench.llm import LLMPool, ModelSpec

    async def go() -> dict[str, object]:
        pool = LLMPool({"generator": ModelSpec.parse(f"vllm:stub-model@{url}{suffix}")}, cache=None, concurrency=16)
        pool.served["x"] = {}
        await pool.start(["generator"])
        chat = pool.client("generator")
        failed = 0

        async def one(i: int) -> None:
            nonlocal failed
            try:
                await chat.chat([{"role": "user", "content": f"question {i}: do these drugs interact?"}], max_tokens=16)
            except Exception:  # noqa: BLE001 - counted, not raised: the benchmark measures the whole batch
                failed += 1

        t0 = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(n)))
        wall = time.perf_counter() - t0
        await pool.close()
        usage = pool.ledger.roles["generator"]
        return {
            "wall_s": round(wall, 2),
            "failed": failed,
            "retries": usage.retries,
            "timeouts": getattr(usage, "timeouts", None),
        }

    print(json.dumps(asyncio.run(go())))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--hang", type=float, default=0.05)
    parser.add_argument(
        "--before-src", type=Path, default=None, help="An older ddibench source tree to measure the same client from."
    )
    parser.add_argument("--client", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--suffix", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        client(args.client, args.n, args.suffix)
        return
    stub, upstream = start([])
    variants: list[tuple[str, Path | None, str, float]] = [
        ("no hung requests (reference)", None, "", 0.0),
        ("adaptive (this ddibench, defaults)", None, "", args.hang),
        ("adaptive + #timeout=10", None, "#timeout=10", args.hang),
    ]
    if args.before_src:
        variants.insert(1, (f"before ({args.before_src.name}, 120 s timeout)", args.before_src, "", args.hang))
    rows = []
    try:
        for name, src, suffix, share in variants:
            # a fresh proxy per variant: every client meets the same hung requests (draws depend on the seed and the request)
            proxy, url = start(["--upstream", upstream, "--fault", f"hang={share}", "--seed", "0"])
            env = (
                {**os.environ, "PYTHONPATH": str(src.resolve())}
                if src
                else {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
            )
            cmd = [
                sys.executable,
                str(Path(__file__).resolve()),
                "--client",
                url,
                "--n",
                str(args.n),
                "--suffix",
                suffix,
            ]
            out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=src or REPO)
            proxy.terminate()
            proxy.wait()
            if out.returncode != 0:
                raise SystemExit(out.stderr)
            rows.append((name, json.loads(out.stdout.strip().splitlines()[-1])))
    finally:
        stub.terminate()
        stub.wait()
    print(
        f"{args.n} chat calls at concurrency 16, {args.hang:.0%} of requests hang (a retry draws again); stub behind a fault proxy"
    )
    print(f"{'client':42s} {'wall s':>8s} {'failed':>7s} {'retries':>8s} {'timeouts':>9s}")
    for name, row in rows:
        print(
            f"{name:42s} {row['wall_s']:8.2f} {row['failed']:7d} {row['retries']:8d} {row['timeouts'] if row['timeouts'] is not None else '-':>9}"
        )


if __name__ == "__main__":
    main()
