#!/usr/bin/env python3
"""Tokens per second through ``ddibench run`` beside the same model driven directly, on the same prompts.

    python benchmarks/reader_throughput.py [--system naive-cbr] [--task drugbank_s1] [--items 20]
                                           [--model qwen2.5-coder-1.5b] [--parallel 2]

1. **ddibench**: ``ddibench run -s SYSTEM -t TASK --limit ITEMS --no-cache -m embedded:MODEL`` in a fresh
   run directory (the embedded llama.cpp server, the system's own prompts and JSON schema); the time is
   the run's prediction phase from its manifest (data loading and the server's start are left out).
2. **direct**: a fresh llama.cpp server (the same ``python -m ddibench.llm._serve``, threads and context)
   sent exactly the requests the run made — each call's messages from the journal (system prompts from
   ``texts/``), the same schema, token limit, temperature and seed — one after another, in the run's
   order, over plain HTTP: the limit of this machine for that work, with nothing of ddibench around it.
3. **direct, N slots** (``--parallel N``): the same requests with N server slots and N requests in
   flight (llama.cpp's continuous batching), to show what parallel slots give on this CPU.

4. **generation, N slots** (``--describe D``): D of CBR-DDI's drug-description requests (up to 128
   generated tokens each, a short prompt) through a direct server with 1, 2 and 4 slots: the work that
   parallel slots do speed up on a CPU, where one sequence's decoding cannot use the memory bandwidth.

Prints prompt and generated tokens per second for each and ddibench's share of the direct path (the
target is at least 80%). The llama.cpp server reports how many prompt tokens it evaluated (the rest came
from its prompt cache): printed too. Label-choice systems only (zero-shot, naive-cbr, kaping, k-paths):
their requests are rebuilt with :func:`ddibench.toolkit.label_choice.label_schema` and their ``max_tokens``.
Asserts nothing.

Measured on an idle 2-core machine (Qwen2.5-Coder-1.5B-Instruct Q4_K_M, xllamacpp 2026.10.11549, 2 threads,
naive-cbr on 20 drugbank_s1 pairs): ddibench 276 s, direct with 1 slot 291 s (ddibench at 105%; the two
differ by noise), direct with 2 slots 344 s: label-choice prompts are prompt-bound (about 557 prompt tokens
evaluated per item after the cached 1,734-token system prompt; 8 generated), and a second slot only splits
the same two cores. Eight descriptions: 9.7 generated tokens/s with 1 slot, 14.0 with 2, 19.0 with 4 —
hence ``ddibench run --concurrency N`` gives the embedded server N slots for generation-heavy systems
(CBR-DDI's descriptions and insights, CLADD's reports) and the default stays one slot.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _post(port: int, body: dict) -> dict:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/chat/completions", json.dumps(body).encode(), {"content-type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=1800) as resp:
        return json.load(resp)


def run_ddibench(system: str, task: str, items: int, model: str, workdir: Path) -> tuple[dict, list[dict]]:
    run_dir = workdir / "run"
    cmd = [
        sys.executable,
        "-m",
        "ddibench",
        "run",
        "-s",
        system,
        "-t",
        task,
        "--limit",
        str(items),
        "--no-cache",
        "-m",
        f"embedded:{model}",
        "--run-dir",
        str(run_dir),
        "--json",
    ]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    results = json.loads((run_dir / "results.json").read_text())
    calls = []
    for line in (run_dir / "journal.jsonl").read_text().splitlines():
        if not line.strip():
            continue
        for call in json.loads(line)["prediction"]["trace"].get("llm", []):
            messages = [
                {"role": "system", "content": (run_dir / "texts" / f"{m['sha256']}.txt").read_text()}
                if "sha256" in m
                else m
                for m in call["messages"]
            ]
            calls.append(
                {
                    "messages": messages,
                    "prompt_tokens": call["prompt_tokens"],
                    "completion_tokens": call["completion_tokens"],
                }
            )
    return results, calls


def run_direct(gguf: Path, alias: str, bodies: list[dict], threads: int, parallel: int) -> dict:
    port = _port()
    log = tempfile.NamedTemporaryFile(prefix="direct-", suffix=".log", delete=False)
    cmd = [
        sys.executable,
        "-m",
        "ddibench.llm._serve",
        "--model",
        str(gguf),
        "--alias",
        alias,
        "--port",
        str(port),
        "--n-ctx",
        "4096",
        "--threads",
        str(threads),
        "--parallel",
        str(parallel),
    ]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"the server exited with {proc.returncode}; see {log.name}")
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2).close()
                break
            except OSError:
                time.sleep(0.1)
        outs: list[dict | None] = [None] * len(bodies)
        queue = list(range(len(bodies)))
        lock = threading.Lock()

        def worker() -> None:
            while True:
                with lock:
                    if not queue:
                        return
                    i = queue.pop(0)
                outs[i] = _post(port, bodies[i])

        t0 = time.perf_counter()
        workers = [threading.Thread(target=worker) for _ in range(parallel)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        wall = time.perf_counter() - t0
        done = [o for o in outs if o is not None]
        return {
            "wall_s": wall,
            "prompt_tokens": sum(o["usage"]["prompt_tokens"] for o in done),
            "completion_tokens": sum(o["usage"]["completion_tokens"] for o in done),
            "evaluated": sum((o.get("timings") or {}).get("prompt_n", 0) for o in done),
        }
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        os.unlink(log.name)


def describe_bodies(model: str, drugs: list[str]) -> list[dict]:
    """CBR-DDI's description requests (its own prompts and token budget) for the given drug names."""
    from ddibench.systems.cbr_ddi import CBRDDIConfig, prompts

    budget = CBRDDIConfig().description_tokens
    return [
        {
            "model": model,
            "temperature": 0.0,
            "max_tokens": budget,
            "seed": 0,
            "messages": [
                {"role": "system", "content": prompts.DESCRIBE_SYSTEM},
                {"role": "user", "content": prompts.DESCRIBE_NO_ID.format(name=name)},
            ],
        }
        for name in drugs
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--system", default="naive-cbr")
    parser.add_argument("--task", default="drugbank_s1")
    parser.add_argument("--items", type=int, default=20)
    parser.add_argument("--model", default="qwen2.5-coder-1.5b")
    parser.add_argument("--parallel", type=int, default=2, help="slots for the third measurement (1: skip it)")
    parser.add_argument(
        "--describe", type=int, default=8, help="description requests for the generation measurement (0: skip it)"
    )
    args = parser.parse_args()

    from ddibench.llm import ModelSpec
    from ddibench.llm._wire import response_format
    from ddibench.registry import get_system_class
    from ddibench.toolkit.label_choice import label_schema

    spec = ModelSpec.parse(f"embedded:{args.model}")
    gguf = spec.gguf_path()
    threads = os.cpu_count() or 1
    print(
        f"{args.system} on {args.task}, {args.items} items, {spec.model}, {threads} threads, load {os.getloadavg()[0]:.1f} at the start"
    )
    with tempfile.TemporaryDirectory(prefix="reader-throughput-") as tmp:
        results, calls = run_ddibench(args.system, args.task, args.items, args.model, Path(tmp))
    predict_s = results["timing"]["predict_s_total"]
    config = get_system_class(args.system).Config()
    n_options = 86 if args.task.startswith("drugbank") else None
    if n_options is None:
        raise SystemExit("this benchmark rebuilds DrugBank label-choice requests only; use a drugbank_* task")
    fmt = response_format(spec.json_mode, label_schema(n_options))
    bodies = [
        {
            "model": spec.model,
            "messages": c["messages"],
            "temperature": config.temperature,
            "max_tokens": config.max_tokens,
            "seed": results["manifest"]["seeds"]["run"],
            "response_format": fmt,
        }
        for c in calls
    ]
    rows = [
        (
            "ddibench run",
            predict_s,
            sum(c["prompt_tokens"] for c in calls),
            sum(c["completion_tokens"] for c in calls),
            None,
        )
    ]
    direct = run_direct(gguf, spec.model, bodies, threads, 1)
    rows.append(
        ("direct, 1 slot", direct["wall_s"], direct["prompt_tokens"], direct["completion_tokens"], direct["evaluated"])
    )
    if args.parallel > 1:
        par = run_direct(gguf, spec.model, bodies, threads, args.parallel)
        rows.append(
            (
                f"direct, {args.parallel} slots",
                par["wall_s"],
                par["prompt_tokens"],
                par["completion_tokens"],
                par["evaluated"],
            )
        )
    if args.describe:
        from ddibench.registry import get_task

        names = sorted({s.input.head.name for s in get_task(args.task).load().split("test")[: 20 * args.describe]})[
            : args.describe
        ]
        for slots in (1, 2, 4):
            gen = run_direct(gguf, spec.model, describe_bodies(spec.model, names), threads, slots)
            rows.append(
                (
                    f"describe, {slots} slot{'s' if slots > 1 else ''}",
                    gen["wall_s"],
                    gen["prompt_tokens"],
                    gen["completion_tokens"],
                    gen["evaluated"],
                )
            )
    print(
        f"{'path':<18}{'seconds':>9}{'prompt tok':>12}{'evaluated':>11}{'prompt tok/s':>14}{'gen tok':>9}{'gen tok/s':>11}{'s/item':>8}"
    )
    for name, secs, prompt, gen, evaluated in rows:
        shown = "—" if evaluated is None else f"{evaluated:,}"
        items = args.describe if name.startswith("describe") else len(calls)
        print(
            f"{name:<18}{secs:>9.1f}{prompt:>12,}{shown:>11}{prompt / secs:>14.1f}{gen:>9,}{gen / secs:>11.2f}{secs / items:>8.2f}"
        )
    print(
        f"ddibench's throughput is {100 * direct['wall_s'] / predict_s:.0f}% of the direct path's (target: at least 80%)"
    )
    print(
        "evaluated: prompt tokens the server computed; the rest of each prompt came from its prompt cache (the shared system prompt)"
    )


if __name__ == "__main__":
    main()
