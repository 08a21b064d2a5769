#!/usr/bin/env python3
"""The embedded model's engines side by side: xllamacpp (llama.cpp's native server, the prebuilt wheel
ddibench uses) and, when installed, llama-cpp-python's server (what ddibench used before), on the same
GGUF, prompts and threads, measured in one run.

    python benchmarks/embedded_engine.py [--model PATH.gguf] [--items 12] [--threads N]

Each engine answers the same zero-shot DrugBank-style requests: a ~1,700-token system prompt shared by
every request (the 86 interaction types) and a short question, under the same JSON schema. Prints, per
engine: seconds to ready, the first request (the shared prefix is processed), the median of the rest
(the prefix should come from the server's prompt cache), and prompt tokens the server reports as cached.
Asserts nothing.
"""

from __future__ import annotations

import argparse
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

QUESTIONS = [f"Drug pair {i}: Warfarin and drug number {i * 7}. Which interaction type applies?" for i in range(1, 64)]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _command(engine: str, model: Path, port: int, threads: int) -> list[str]:
    if engine == "xllamacpp":
        return [
            sys.executable,
            "-m",
            "ddibench.llm._serve",
            "--model",
            str(model),
            "--alias",
            "local",
            "--port",
            str(port),
            "--n-ctx",
            "4096",
            "--threads",
            str(threads),
        ]
    return [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(model),
        "--model_alias",
        "local",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        "4096",
        "--n_threads",
        str(threads),
        "--verbose",
        "False",
    ]


def _post(port: int, body: dict) -> dict:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/chat/completions", json.dumps(body).encode(), {"content-type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=900) as resp:
        return json.load(resp)


def measure(engine: str, model: Path, items: int, threads: int, system: str) -> dict:
    port = _port()
    log = tempfile.NamedTemporaryFile(prefix=f"{engine}-", suffix=".log", delete=False)
    t0 = time.perf_counter()
    proc = subprocess.Popen(_command(engine, model, port, threads), stdout=log, stderr=subprocess.STDOUT)
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{engine} exited with {proc.returncode}; see {log.name}")
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2).close()
                break
            except OSError:
                time.sleep(0.1)
        ready = time.perf_counter() - t0
        schema = {
            "type": "object",
            "properties": {"type": {"type": "integer", "enum": list(range(1, 87))}},
            "required": ["type"],
        }
        fmt = (
            {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}
            if engine == "xllamacpp"
            else {"type": "json_object", "schema": schema}
        )
        times, cached, prompt, completion = [], [], [], []
        invalid = 0
        for q in QUESTIONS[:items]:
            body = {
                "model": "local",
                "messages": [{"role": "system", "content": system}, {"role": "user", "content": q}],
                "temperature": 0,
                "max_tokens": 32,
                "response_format": fmt,
            }
            t = time.perf_counter()
            out = _post(port, body)
            times.append(time.perf_counter() - t)
            usage = out.get("usage", {})
            prompt.append(usage.get("prompt_tokens", 0))
            completion.append(usage.get("completion_tokens", 0))
            cached.append((usage.get("prompt_tokens_details") or {}).get("cached_tokens"))
            try:
                json.loads(out["choices"][0]["message"]["content"])  # constrained: should parse
            except ValueError:
                invalid += 1
        return {
            "ready_s": ready,
            "first_s": times[0],
            "rest_median_s": statistics.median(times[1:]) if len(times) > 1 else float("nan"),
            "prompt_tokens": statistics.median(prompt),
            "completion_tokens": statistics.median(completion),
            "cached_tokens": cached[-1],
            "invalid": invalid,
        }
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        os.unlink(log.name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None, help="a GGUF file (default: the embedded SmolLM2-135M)")
    parser.add_argument("--items", type=int, default=12)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    from ddibench.llm import default_gguf
    from ddibench.tasks.drugbank import load_labels
    from ddibench.toolkit.label_choice import option_texts

    model = args.model or default_gguf()
    options = option_texts(load_labels())
    system = "You classify drug-drug interactions. Answer with the number of the type that applies.\n" + "\n".join(
        f"{i}. {text}" for i, text in enumerate(options, 1)
    )
    engines = ["xllamacpp"] + (["llama-cpp-python"] if importlib.util.find_spec("llama_cpp") else [])
    print(f"model {model.name}, {args.items} requests each, {args.threads} threads, load {os.getloadavg()[0]:.1f}")
    print(
        f"{'engine':<18}{'ready s':>9}{'first s':>9}{'rest med s':>12}{'prompt tok':>12}{'gen tok':>9}{'cached tok':>12}{'not JSON':>10}"
    )
    for engine in engines:
        r = measure(engine, model, args.items, args.threads, system)
        print(
            f"{engine:<18}{r['ready_s']:>9.1f}{r['first_s']:>9.1f}{r['rest_median_s']:>12.2f}{r['prompt_tokens']:>12.0f}"
            f"{r['completion_tokens']:>9.0f}{str(r['cached_tokens']):>12}{r['invalid']:>10}"
        )
    if len(engines) == 1:
        print("(llama-cpp-python is not installed: only xllamacpp was measured)")


if __name__ == "__main__":
    main()
