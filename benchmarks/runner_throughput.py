#!/usr/bin/env python3
"""Runner throughput against a zero-latency OpenAI-compatible stub server on loopback.

2,000 DrugBank S2 prompts (the 1,992 test pairs and the first 8 validation pairs) go through the
production path — zero-shot prompt building, the cached and accounted LLM client, answer parsing,
journal writes — at concurrency 1, 16 and 64, each with an empty response cache (so every prompt
reaches the server and its answer is written to the cache), then once more at 64 with the cache warm,
and finally the same prompts through the bare ``openai`` SDK (no cache, journal or parsing): the floor
that any harness built on that SDK pays. The stub runs in its own process, so the CPU time measured
here is the harness's alone.

    python benchmarks/runner_throughput.py [--n 2000]

Prints items/s and harness CPU milliseconds per item; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_stub() -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "ddibench.llm.stub", "--port", str(port)], stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/v1"
    for _ in range(100):
        try:
            urllib.request.urlopen(url + "/models", timeout=1).close()
            return proc, url
        except OSError:
            time.sleep(0.05)
    raise SystemExit("stub server did not start")


async def one_pass(samples, base_url: str, concurrency: int, cache_dir: Path, run_dir: Path) -> tuple[float, float]:
    from ddibench.artifacts import ArtifactStore
    from ddibench.llm import LLMPool, ModelSpec, ResponseCache
    from ddibench.profiles import get_profile
    from ddibench.registry import get_task
    from ddibench.runner.execute import predict_samples
    from ddibench.runner.journal import Journal
    from ddibench.system import RunContext, TrainingView
    from ddibench.systems.zero_shot import ZeroShotSystem

    task = get_task("drugbank_s2")
    pool = LLMPool({"generator": ModelSpec.parse(f"vllm:stub-model@{base_url}")}, cache=ResponseCache(cache_dir / "llm.sqlite"), concurrency=concurrency)
    await pool.start(["generator"])
    ctx = RunContext(task=task, profile=get_profile("cpu"), seed=0, artifacts=ArtifactStore(cache_dir / "a"), llm=pool, run_dir=run_dir)
    system = ZeroShotSystem()
    await system.prepare(TrainingView(task=task, train=(), valid=()), ctx)
    journal = Journal(run_dir / "journal.jsonl")
    wall0, cpu0 = time.perf_counter(), time.process_time()
    failed = await predict_samples(system, samples, ctx, journal, concurrency, ctx.progress, len(samples), 0, {"predicted": 0})
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    journal.close()
    await pool.close()
    assert not failed and len(journal.load()) == len(samples)
    return wall, cpu


async def raw_sdk_pass(samples, base_url: str, concurrency: int) -> tuple[float, float]:
    """The floor: the same prompts through the bare openai SDK, no cache, no journal, no parsing."""
    import openai

    from ddibench.artifacts import ArtifactStore
    from ddibench.profiles import get_profile
    from ddibench.registry import get_task
    from ddibench.system import RunContext, TrainingView
    from ddibench.systems.zero_shot import ZeroShotSystem

    task = get_task("drugbank_s2")
    system = ZeroShotSystem()
    ctx = RunContext(task=task, profile=get_profile("cpu"), seed=0, artifacts=ArtifactStore(Path(tempfile.gettempdir())))
    await system.prepare(TrainingView(task=task, train=(), valid=()), ctx)
    client = openai.AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0)
    semaphore = asyncio.Semaphore(concurrency)

    async def one(sample) -> None:
        async with semaphore:
            await client.chat.completions.create(model="stub-model", messages=[{"role": "system", "content": system.system_prompt}, {"role": "user", "content": system.question(sample.input, [])}], max_tokens=24, temperature=0)

    wall0, cpu0 = time.perf_counter(), time.process_time()
    await asyncio.gather(*(one(s) for s in samples))
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    await client.close()
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    args = parser.parse_args()

    from ddibench.registry import get_task

    data = get_task("drugbank_s2").load()
    samples = [s.blind() for s in (data.split("test") + data.split("valid"))[: args.n]]
    proc, url = start_stub()
    rows = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            warm_cache = None
            for concurrency in (1, 16, 64):
                cache = Path(tmp) / f"cache-{concurrency}"
                run_dir = Path(tmp) / f"run-{concurrency}"
                run_dir.mkdir()
                wall, cpu = asyncio.run(one_pass(samples, url, concurrency, cache, run_dir))
                rows.append((f"concurrency {concurrency}, cold cache", wall, cpu))
                warm_cache = cache
            run_dir = Path(tmp) / "run-warm"
            run_dir.mkdir()
            wall, cpu = asyncio.run(one_pass(samples, url, 64, warm_cache, run_dir))  # type: ignore[arg-type]
            rows.append(("concurrency 64, warm cache", wall, cpu))
            wall, cpu = asyncio.run(raw_sdk_pass(samples, url, 64))
            rows.append(("bare openai SDK, concurrency 64", wall, cpu))
    finally:
        proc.terminate()
        proc.wait()
    print(f"runner throughput, {len(samples)} DrugBank S2 zero-shot prompts, stub server in a separate process")
    print(f"machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}")
    print(f"{'setting':32s} {'items/s':>9s} {'wall s':>8s} {'harness CPU ms/item':>20s}")
    for name, wall, cpu in rows:
        print(f"{name:32s} {len(samples) / wall:9.1f} {wall:8.2f} {1000 * cpu / len(samples):20.2f}")


if __name__ == "__main__":
    main()
