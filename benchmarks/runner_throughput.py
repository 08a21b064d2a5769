#!/usr/bin/env python3
"""Runner throughput against a zero-latency OpenAI-compatible stub server on loopback, beside lm-eval.

The 1,992 DrugBank S2 test prompts go through ddibench's production path (zero-shot prompt building,
the cached and accounted LLM client, answer parsing, journal writes, each pass with an empty response
cache so that every prompt reaches the server and its answer is written to the cache) and, on the same
stub server, through lm-evaluation-harness 0.4 (``local-chat-completions`` with ``num_concurrent``, on
the task ``ddibench export lm-eval --json-mode schema`` writes: the same prompt text, the same
constrained-JSON request, the same token limit), and through a raw asyncio HTTP client that sends
pre-built requests and reads the responses without parsing them (the floor: what the socket costs).

The machine is shared and noisy, so the settings are interleaved round by round (ddibench, lm-eval,
floor at concurrency 16, then at 64) and the ratios of each round are reported with their median:
absolute items/s swing with the load, ratios measured seconds apart do not. Times cover the request
phase only: ddibench's ``predict_samples`` (until the cache is committed), lm-eval's
``generate_until`` (its prompt building and scoring, done by ddibench's glue outside that call, are
not counted: this favours lm-eval). The stub and lm-eval run in their own processes, so the CPU time of
each harness is its own. Once at the end: ddibench at concurrency 1, with a warm cache, and the bare
``openai`` SDK at 64 (the path ddibench used before, without cache, journal or parsing).

Then whole commands, timed from the parent (a second stub runs in this process and notes when each
request arrives): spawn -> first chat request of ``ddibench run`` (zero-shot on drugbank_s2) and of
``lm_eval`` on the exported task, the warm rerun of the finished ddibench run (a journal resume), and
the resume of a large finished run (``--resume-task``, default drugbank_s0: its 38,419 test pairs,
predicted once by the ``majority`` baseline, so no model is needed), wall and CPU seconds.

    python benchmarks/runner_throughput.py [--rounds 3] [--n 1992] [--no-lm-eval] [--resume-task drugbank_s0]

Prints items/s and harness CPU milliseconds per item; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

CONCURRENCIES = (16, 64)

# lm-eval in its own process: it builds its task index once, then answers "run C" lines with the timing
# of generate_until at num_concurrent=C (one JSON line each)
LM_EVAL_WORKER = r"""
import json, os, sys, time
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TQDM_DISABLE", "1")
import logging
logging.disable(logging.WARNING)
from lm_eval import simple_evaluate
from lm_eval.models.api_models import TemplateAPI
from lm_eval.tasks import TaskManager

include, url = sys.argv[1], sys.argv[2]
stats = {}
original = TemplateAPI.generate_until

def timed(self, requests, disable_tqdm=False):
    wall, cpu = time.perf_counter(), time.process_time()
    out = original(self, requests, disable_tqdm=True)
    stats.update(wall=time.perf_counter() - wall, cpu=time.process_time() - cpu, n=len(requests))
    return out

TemplateAPI.generate_until = timed
manager = TaskManager(include_path=include)
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    concurrency = int(line)
    stats.clear()
    simple_evaluate(
        model="local-chat-completions",
        model_args=f"base_url={url}/chat/completions,model=stub-model,tokenized_requests=False,num_concurrent={concurrency},max_retries=3",
        tasks=["ddibench_drugbank_s2"], task_manager=manager, apply_chat_template=True, log_samples=False,
    )
    print(json.dumps(stats), flush=True)
"""


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


async def ddibench_pass(
    samples, base_url: str, concurrency: int, cache_dir: Path, run_dir: Path
) -> tuple[float, float]:
    """ddibench's production path; the time of predict_samples plus committing the cache."""
    from ddibench.artifacts import ArtifactStore
    from ddibench.llm import LLMPool, ModelSpec, ResponseCache
    from ddibench.profiles import get_profile
    from ddibench.registry import get_task
    from ddibench.runner.execute import predict_samples
    from ddibench.runner.journal import Journal
    from ddibench.system import RunContext, TrainingView
    from ddibench.systems.zero_shot import ZeroShotSystem

    task = get_task("drugbank_s2")
    cache = ResponseCache(cache_dir / "llm.sqlite")
    pool = LLMPool({"generator": ModelSpec.parse(f"vllm:stub-model@{base_url}")}, cache=cache, concurrency=concurrency)
    await pool.start(["generator"])
    ctx = RunContext(
        task=task,
        profile=get_profile("cpu"),
        seed=0,
        artifacts=ArtifactStore(cache_dir / "a"),
        llm=pool,
        run_dir=run_dir,
    )
    system = ZeroShotSystem()
    await system.prepare(TrainingView(task=task, train=(), valid=()), ctx)
    journal = Journal(run_dir / "journal.jsonl")
    wall0, cpu0 = time.perf_counter(), time.process_time()
    failed = await predict_samples(
        system, samples, ctx, journal, concurrency, ctx.progress, len(samples), 0, {"predicted": 0}
    )
    cache.flush()
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    journal.close()
    await pool.close()
    cache.close()
    assert not failed and len(journal.load()) == len(samples)
    return wall, cpu


def request_bodies(samples) -> list[bytes]:
    """The requests ddibench sends for ``samples`` (zero-shot, constrained JSON), as bytes."""
    from ddibench.llm import response_format
    from ddibench.registry import get_task
    from ddibench.systems.zero_shot import ZeroShotSystem
    from ddibench.toolkit.label_choice import label_schema, option_texts

    system = ZeroShotSystem()
    system.options = option_texts(get_task("drugbank_s2").label_space)
    types = "\n".join(f"{i}. {text}" for i, text in enumerate(system.options, 1))
    from ddibench.toolkit.label_choice import SYSTEM_PROMPT

    prompt = SYSTEM_PROMPT.format(types=types)
    fmt = response_format("schema", label_schema(len(system.options)))
    return [
        json.dumps(
            {
                "model": "stub-model",
                "messages": [
                    {"role": "system", "content": prompt},
                    {"role": "user", "content": system.question(s.input, [])},
                ],
                "temperature": 0.0,
                "max_tokens": 24,
                "seed": 0,
                "response_format": fmt,
            }
        ).encode()
        for s in samples
    ]


async def floor_pass(bodies: list[bytes], base_url: str, concurrency: int) -> tuple[float, float]:
    """A raw asyncio HTTP/1.1 client: pre-built requests on kept-alive connections, responses read, not parsed."""
    host, _, rest = base_url.partition("://")[2].partition("/")
    hostname, _, port = host.partition(":")
    path = f"/{rest}/chat/completions"
    pending = iter(bodies)

    async def connection() -> None:
        reader, writer = await asyncio.open_connection(hostname, int(port))
        for body in pending:
            writer.write(
                f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            await reader.readexactly(length)
        writer.close()

    wall0, cpu0 = time.perf_counter(), time.process_time()
    await asyncio.gather(*(connection() for _ in range(concurrency)))
    return time.perf_counter() - wall0, time.process_time() - cpu0


async def bare_sdk_pass(bodies: list[bytes], base_url: str, concurrency: int) -> tuple[float, float]:
    """The same requests through the bare openai SDK (no cache, journal or parsing)."""
    import openai

    client = openai.AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0)
    semaphore = asyncio.Semaphore(concurrency)
    requests = [json.loads(b) for b in bodies]

    async def one(request: dict) -> None:
        async with semaphore:
            await client.chat.completions.create(**request)

    wall0, cpu0 = time.perf_counter(), time.process_time()
    await asyncio.gather(*(one(r) for r in requests))
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    await client.close()
    return wall, cpu


class LMEval:
    """lm-eval in a worker process, asked for one timed pass at a time."""

    def __init__(self, tmp: Path, base_url: str, n: int) -> None:
        out = tmp / "lm-eval-tasks"
        limit = [] if n >= 1992 else ["--limit", str(n)]
        subprocess.run(
            [
                sys.executable,
                "-m",
                "ddibench",
                "export",
                "lm-eval",
                str(out),
                "-t",
                "drugbank_s2",
                "--json-mode",
                "schema",
                *limit,
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-c", LM_EVAL_WORKER, str(out), base_url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env={**os.environ, "PYTHONPATH": str(out)},
        )
        assert self.proc.stdout is not None
        ready = self.proc.stdout.readline()
        if not ready:
            raise SystemExit("lm-eval worker did not start")

    def run(self, concurrency: int) -> tuple[float, float, int]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{concurrency}\n")
        self.proc.stdin.flush()
        stats = json.loads(self.proc.stdout.readline())
        return stats["wall"], stats["cpu"], stats["n"]

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(30)


def timed_command(cmd: list[str], stub=None, env: dict[str, str] | None = None) -> tuple[float, float | None, float]:
    """Run ``cmd``; (wall seconds, seconds from spawn to the stub's first chat request or None, CPU seconds)."""
    import resource

    before = len(stub.request_times) if stub is not None else 0
    usage0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0, m0 = time.perf_counter(), time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, **(env or {})})
    first = None
    while proc.poll() is None:
        if first is None and stub is not None and len(stub.request_times) > before:
            first = stub.request_times[before] - m0
        time.sleep(0.002)
    wall = time.perf_counter() - t0
    if first is None and stub is not None and len(stub.request_times) > before:
        first = stub.request_times[before] - m0
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {proc.stderr.read().decode()[-2000:] if proc.stderr else ''}")
    return wall, first, (usage.ru_utime - usage0.ru_utime) + (usage.ru_stime - usage0.ru_stime)


def whole_commands(
    tmp: Path, n: int, use_lm_eval: bool, resume_task: str | None
) -> list[tuple[str, float, float | None, float]]:
    """Start-up, warm rerun and large-resume timings of whole commands."""
    from ddibench.llm.stub import running_stub

    out = []
    ddibench = [sys.executable, "-m", "ddibench"]
    env = {"DDIBENCH_CACHE": str(tmp / "ddibench-cache")}  # an empty response cache and artifact store
    with running_stub() as stub:
        spec = f"vllm:stub-model@{stub.base_url}"
        limit = [] if n >= 1992 else ["--limit", str(n)]
        run = [
            *ddibench,
            "run",
            "-t",
            "drugbank_s2",
            "-s",
            "zero-shot",
            "-m",
            spec,
            "--run-dir",
            str(tmp / "cmd-run"),
            "--concurrency",
            "64",
            *limit,
        ]
        wall, first, cpu = timed_command(run, stub, env)
        out.append((f"ddibench run, {n} items (cold)", wall, first, cpu))
        wall, first, cpu = timed_command(run, stub, env)
        out.append(("ddibench warm rerun (resume)", wall, first, cpu))
        if use_lm_eval:
            tasks = tmp / "lm-eval-tasks"
            cmd = [
                sys.executable,
                "-m",
                "lm_eval",
                "--model",
                "local-chat-completions",
                "--model_args",
                f"base_url={stub.base_url}/chat/completions,model=stub-model,tokenized_requests=False,num_concurrent=64,max_retries=3",
                "--tasks",
                "ddibench_drugbank_s2",
                "--include_path",
                str(tasks),
                "--apply_chat_template",
                "--output_path",
                str(tmp / "lm-eval-out"),
                "--use_cache",
                str(tmp / "lm-eval-cache"),
            ]
            env_cmd = ["env", f"PYTHONPATH={tasks}", "HF_DATASETS_OFFLINE=1", *cmd]
            wall, first, cpu = timed_command(env_cmd, stub)
            out.append((f"lm_eval, {n} items (cold)", wall, first, cpu))
            wall, first, cpu = timed_command(env_cmd, stub)
            out.append(("lm_eval warm rerun (its cache)", wall, first, cpu))
    if resume_task:
        big = [*ddibench, "run", "-t", resume_task, "-s", "majority", "--run-dir", str(tmp / "big-run")]
        wall, _, cpu = timed_command(big, env=env)
        out.append((f"{resume_task} majority, first run", wall, None, cpu))
        for i in range(3):
            wall, _, cpu = timed_command(big, env=env)
            out.append((f"{resume_task} resume of the finished run ({i + 1})", wall, None, cpu))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1992, help="prompts per pass (the first N of the 1,992 test pairs)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-lm-eval", action="store_true")
    parser.add_argument(
        "--resume-task", default="drugbank_s0", help="task of the large finished run whose resume is timed ('' to skip)"
    )
    args = parser.parse_args()

    from ddibench.registry import get_task

    samples = [s.blind() for s in get_task("drugbank_s2").load().split("test")[: args.n]]
    bodies = request_bodies(samples)
    use_lm_eval = not args.no_lm_eval and importlib.util.find_spec("lm_eval") is not None
    proc, url = start_stub()
    rows: dict[str, list[tuple[float, float]]] = {}
    lm_n = None
    try:
        with tempfile.TemporaryDirectory() as tmp_name:
            tmp = Path(tmp_name)
            lm = LMEval(tmp, url, args.n) if use_lm_eval else None
            try:
                warm = tmp / "run-warm-up"
                warm.mkdir()
                asyncio.run(
                    ddibench_pass(samples[:64], url, 16, tmp / "cache-warm-up", warm)
                )  # imports and first connections, untimed
                for r in range(args.rounds):
                    for c in CONCURRENCIES:
                        run_dir = tmp / f"run-{r}-{c}"
                        run_dir.mkdir()
                        rows.setdefault(f"ddibench c={c}", []).append(
                            asyncio.run(ddibench_pass(samples, url, c, tmp / f"cache-{r}-{c}", run_dir))
                        )
                        if lm is not None:
                            wall, cpu, lm_n = lm.run(c)
                            rows.setdefault(f"lm-eval c={c}", []).append(
                                (wall * len(samples) / lm_n, cpu * len(samples) / lm_n)
                            )
                        rows.setdefault(f"floor c={c}", []).append(asyncio.run(floor_pass(bodies, url, c)))
                    print(f"round {r + 1} of {args.rounds} done", file=sys.stderr, flush=True)
            finally:
                if lm is not None:
                    lm.close()
            once: dict[str, tuple[float, float]] = {}
            run_dir = tmp / "run-c1"
            run_dir.mkdir()
            once["ddibench c=1, cold cache"] = asyncio.run(ddibench_pass(samples, url, 1, tmp / "cache-c1", run_dir))
            run_dir = tmp / "run-warm"
            run_dir.mkdir()
            once["ddibench c=64, warm cache"] = asyncio.run(
                ddibench_pass(samples, url, 64, tmp / f"cache-0-{CONCURRENCIES[-1]}", run_dir)
            )
            if importlib.util.find_spec("openai") is not None:
                once["bare openai SDK c=64"] = asyncio.run(bare_sdk_pass(bodies, url, 64))
            commands = whole_commands(tmp, len(samples), use_lm_eval and lm_n is not None, args.resume_task or None)
    finally:
        proc.terminate()
        proc.wait()

    n = len(samples)
    print(
        f"runner throughput: {n} DrugBank S2 zero-shot prompts, stub server in its own process, {args.rounds} interleaved rounds"
    )
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}, Python {sys.version.split()[0]}")
    print(f"\n{'setting':28s} {'items/s (median, per round)':>40s} {'harness CPU ms/item (median)':>30s}")
    for name, values in rows.items():
        rates = [n / w for w, _ in values]
        cpus = [1000 * c / n for _, c in values]
        per_round = ", ".join(f"{x:.0f}" for x in rates)
        print(f"{name:28s} {statistics.median(rates):9.0f}  ({per_round:>26s}) {statistics.median(cpus):20.2f}")
    if use_lm_eval:
        print("\nratios, ddibench / lm-eval, each round measured side by side (median; per round)")
        for c in CONCURRENCIES:
            ours, theirs = rows[f"ddibench c={c}"], rows[f"lm-eval c={c}"]
            speed = [tw / ow for (ow, _), (tw, _) in zip(ours, theirs)]
            cpu = [oc / tc for (_, oc), (_, tc) in zip(ours, theirs)]
            print(
                f"  c={c:<3d} items/s x{statistics.median(speed):.2f} ({', '.join(f'{x:.2f}' for x in speed)});"
                f"  CPU per item x{statistics.median(cpu):.2f} ({', '.join(f'{x:.2f}' for x in cpu)})"
            )
    else:
        print("\n(lm-eval is not installed or --no-lm-eval: no comparison)")
    print()
    for name, (wall, cpu) in once.items():
        print(f"{name:28s} {n / wall:9.0f} items/s {1000 * cpu / n:29.2f} ms/item")
    print(f"\n{'whole command':44s} {'wall s':>8s} {'spawn -> 1st request s':>23s} {'CPU s':>7s}")
    for name, wall, first, cpu in commands:
        print(f"{name:44s} {wall:8.2f} {('-' if first is None else f'{first:.2f}'):>23s} {cpu:7.2f}")


if __name__ == "__main__":
    main()
