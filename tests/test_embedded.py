"""End to end with the embedded model: a real llama.cpp server (SmolLM2-135M) on loopback."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import kill_run_after

from ddibench.label_choice import option_texts
from ddibench.llm import EmbeddedServer, LLMPool, ModelSpec, default_gguf
from ddibench.parsing import parse_choice
from ddibench.systems.zero_shot import ZeroShotSystem
from ddibench.tasks.drugbank import load_labels

pytestmark = pytest.mark.llm

pytest.importorskip("llama_cpp", reason="the embedded model needs the 'llm' extra")


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _llama_servers() -> set[int]:
    out = subprocess.run(["pgrep", "-f", "llama_cpp.server"], capture_output=True, text=True).stdout
    return {int(pid) for pid in out.split()}


def test_server_lifecycle_and_constrained_json(tmp_path: Path) -> None:
    server = EmbeddedServer(default_gguf(), "smollm2-135m-instruct", log_path=tmp_path / "server.log")
    with server:
        port = server.port
        assert port is not None and _port_open(port)
        spec = ModelSpec.parse("embedded")
        pool = LLMPool({"generator": spec}, cache=None)
        system = ZeroShotSystem()
        system.options = option_texts(load_labels())  # the prompt pieces prepare() would build
        schema = {"type": "object", "properties": {"type": {"type": "integer", "enum": list(range(1, 87))}}, "required": ["type"]}

        async def ask() -> str:
            import openai

            from ddibench.llm import EndpointPolicy

            pool._endpoints[spec] = (openai.AsyncOpenAI(base_url=server.base_url, api_key="x", max_retries=0), EndpointPolicy(1, 120, adaptive=False))
            try:
                messages = [{"role": "user", "content": "Warfarin and aspirin: which interaction type, 1 to 86?"}]
                result = await pool.client("generator").chat(messages, json_schema=schema, max_tokens=16)
                return result.text
            finally:
                await pool.close()

        text = asyncio.run(ask())
        value = json.loads(text)["type"]
        assert 1 <= value <= 86  # the grammar held the 135M model to the schema
        assert parse_choice(text, system.options).method == "json"
        assert pool.ledger.roles["generator"].prompt_tokens > 0
    assert server.process is None and not _port_open(port)


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ddibench", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
        timeout=900,
    )


def test_run_rerun_and_cache_with_the_embedded_model(tmp_path: Path, fresh_cache: Path) -> None:
    args = ["run", "--system", "zero-shot", "--task", "drugbank_s2", "--limit", "6", "--runs-dir", str(tmp_path / "runs")]
    first = _run(*args)
    assert first.returncode == 0, first.stderr
    assert "macro-F1" in first.stdout and "95% CI" in first.stdout and "embedded:smollm2-135m-instruct" in first.stdout
    run_dir = next((tmp_path / "runs").rglob("results.json")).parent
    results = json.loads((run_dir / "results.json").read_text())
    assert results["evaluation"]["n"] == 6
    ident = results["manifest"]["models"]["generator"]["identity"]
    assert ident["base_url"] == "embedded" and len(ident["weights_sha256"]) == 64
    assert (run_dir / "llm-server.log").exists()

    second = _run(*args)
    assert second.returncode == 0, second.stderr
    assert "nothing was predicted again" in second.stdout
    assert json.loads((run_dir / "results.json").read_text())["evaluation"] == results["evaluation"]
    from ddibench.runner.rundir import read_sessions

    assert [s.state for s in read_sessions(run_dir)] == ["finished"]  # one session: the rerun started no model

    other = _run(*args[:-2], "--run-dir", str(tmp_path / "fresh"))
    assert other.returncode == 0, other.stderr
    session = json.loads((tmp_path / "fresh" / "sessions.jsonl").read_text().splitlines()[-1])  # the session's end line
    assert session["llm_usage"]["generator"]["calls"] == 0
    assert session["llm_usage"]["generator"]["cache_hits"] == 6
    assert json.loads((tmp_path / "fresh" / "results.json").read_text())["evaluation"]["metrics"] == results["evaluation"]["metrics"]


def test_sigkill_with_the_embedded_model(tmp_path: Path, fresh_cache: Path) -> None:
    run_dir = tmp_path / "run"
    before = _llama_servers()
    cmd = [sys.executable, "-m", "ddibench", "run", "-s", "zero-shot", "-t", "drugbank_s2", "--limit", "10", "--run-dir", str(run_dir)]
    journal = run_dir / "journal.jsonl"
    killed_at = kill_run_after(cmd, journal, 3)
    assert 3 <= killed_at < 10
    deadline = time.monotonic() + 10  # the kernel kills it at once; reaping can lag on a loaded machine
    while not _llama_servers() <= before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _llama_servers() <= before, "the embedded server must not outlive a killed run"
    done = _run("run", "-s", "zero-shot", "-t", "drugbank_s2", "--limit", "10", "--run-dir", str(run_dir))
    assert done.returncode == 0, done.stderr
    ids = [json.loads(line)["prediction"]["sample_id"] for line in journal.read_text().splitlines()]
    assert len(ids) == len(set(ids)) == 10
