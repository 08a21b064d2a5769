"""End to end with the embedded model: a real llama.cpp server (xllamacpp, SmolLM2-135M) on loopback."""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import kill_run_after

from ddibench.llm import (
    EMBEDDED_SLOTS,
    ChatResult,
    EmbeddedServer,
    LLMPool,
    MeasuredThroughput,
    ModelSpec,
    default_gguf,
    measure_throughput,
)
from ddibench.llm._pool import EMBEDDED_TIMEOUT
from ddibench.systems.zero_shot import ZeroShotSystem
from ddibench.tasks.drugbank import load_labels
from ddibench.toolkit.label_choice import option_texts
from ddibench.toolkit.parsing import parse_choice

pytestmark = pytest.mark.llm

pytest.importorskip("xllamacpp", reason="the embedded model needs the 'llm' extra")


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _llama_servers() -> set[int]:
    out = subprocess.run(["pgrep", "-f", "ddibench.llm._serve"], capture_output=True, text=True).stdout
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
        schema = {
            "type": "object",
            "properties": {"type": {"type": "integer", "enum": list(range(1, 87))}},
            "required": ["type"],
        }

        async def ask() -> str:
            from ddibench.llm import EndpointPolicy
            from ddibench.llm._pool import chat_endpoint

            pool._endpoints[spec] = (chat_endpoint(server.base_url, "x", 120), EndpointPolicy(1, 120, adaptive=False))
            try:
                messages = [{"role": "user", "content": "Warfarin and aspirin: which interaction type, 1 to 86?"}]
                result = await pool.client("generator").chat(
                    messages, json_schema=schema, max_tokens=32
                )  # llama.cpp may wrap JSON in a ```json fence
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
    args = [
        "run",
        "--system",
        "zero-shot",
        "--task",
        "drugbank_s2",
        "--limit",
        "6",
        "--runs-dir",
        str(tmp_path / "runs"),
    ]
    first = _run(*args)
    assert first.returncode == 0, first.stderr
    assert "macro-F1" in first.stdout and "95% CI" in first.stdout and "embedded:smollm2-135m-instruct" in first.stdout
    run_dir = next((tmp_path / "runs").rglob("results.json")).parent
    results = json.loads((run_dir / "results.json").read_text())
    assert results["evaluation"]["n"] == 6
    ident = results["manifest"]["models"]["generator"]["identity"]
    assert (
        ident["base_url"] == "embedded"
        and len(ident["weights_sha256"]) == 64
        and ident["engine"].startswith("xllamacpp ")
    )
    assert (run_dir / "llm-server.log").exists()
    # the server's threads and slots shape its answers: the session keeps the ones the start line announced
    served = json.loads((run_dir / "sessions.jsonl").read_text().splitlines()[-1])["served_models"]
    server = served["embedded:smollm2-135m-instruct"]
    announced = re.search(r"starting the embedded model server \(.*?, (\d+) threads?\)", first.stdout + first.stderr)
    assert announced is not None, first.stderr
    assert server["threads"] == int(announced.group(1)) >= 1
    assert server["slots"] == EMBEDDED_SLOTS and server["slot_roles"] == []  # zero-shot's one request at a time

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
    assert (
        json.loads((tmp_path / "fresh" / "results.json").read_text())["evaluation"]["metrics"]
        == results["evaluation"]["metrics"]
    )


def test_sigkill_with_the_embedded_model(tmp_path: Path, fresh_cache: Path) -> None:
    run_dir = tmp_path / "run"
    before = _llama_servers()
    cmd = [
        sys.executable,
        "-m",
        "ddibench",
        "run",
        "-s",
        "zero-shot",
        "-t",
        "drugbank_s2",
        "--limit",
        "10",
        "--run-dir",
        str(run_dir),
    ]
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


def test_a_server_that_dies_stops_the_run_at_once_and_the_run_resumes(tmp_path: Path, fresh_cache: Path) -> None:
    """The embedded server crashes mid-run (SIGSEGV, as a miscompiled llama.cpp did): the run stops with one
    line naming the signal, the log and the fix, retries nothing against the dead port, and resumes."""
    import signal

    run_dir = tmp_path / "run"
    journal = run_dir / "journal.jsonl"
    args = ["run", "-s", "zero-shot", "-t", "drugbank_s2", "--limit", "8", "--run-dir", str(run_dir)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "ddibench", *args],
        env={**os.environ, "COLUMNS": "200"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 600
    while (
        time.monotonic() < deadline
        and (not journal.exists() or journal.read_text().count("\n") < 2)
        and proc.poll() is None
    ):
        time.sleep(0.05)
    servers = subprocess.run(
        ["pgrep", "-P", str(proc.pid), "-f", "ddibench.llm._serve"], capture_output=True, text=True
    ).stdout.split()
    assert len(servers) == 1, "the run should have started one embedded server"
    os.kill(int(servers[0]), signal.SIGSEGV)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 3, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: the embedded llama.cpp server"), err
    assert "killed by signal SIGSEGV" in lines[0] and str(run_dir / "llm-server.log") in lines[0], lines[0]
    assert "samples are saved" in lines[0] and "re-run the same command to resume" in lines[0], lines[0]
    from ddibench.runner.rundir import read_sessions

    failed = read_sessions(run_dir)[-1]
    assert failed.state == "failed" and "SIGSEGV" in (failed.error or "")
    usage = failed.llm_usage["generator"]
    assert usage["retries"] == 0 and usage["failures"] == 1, usage  # nothing was retried against the dead port
    saved = journal.read_text().count("\n")
    assert 2 <= saved < 8

    done = _run(*args)
    assert done.returncode == 0, done.stderr
    ids = [json.loads(line)["prediction"]["sample_id"] for line in journal.read_text().splitlines()]
    assert len(ids) == len(set(ids)) == 8


def test_doctor_makes_one_real_constrained_completion(
    tmp_path: Path, fresh_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    done = _run("doctor")
    assert done.returncode == 0, done.stdout + done.stderr
    model = next(line for line in done.stdout.splitlines() if " model " in line)
    assert model.startswith("ok") and "under a JSON schema" in model, model
    assert "prompt tokens/s" in model and "generated tokens/s" in model, model
    # doctor keeps the rates it measured, with the server's threads; the plan times the model's calls at them
    kept = json.loads((fresh_cache / "throughput.json").read_text())["embedded:smollm2-135m-instruct"]
    assert kept["prompt_per_s"] > 0 and kept["generated_per_s"] > 0 and kept["threads"] >= 1
    _plan_uses_the_kept_rate(kept, monkeypatch)
    assert "ready" in done.stdout.splitlines()[-1]
    broken = _run("doctor", "--no-model", env={"DDIBENCH_MIRROR": str(tmp_path / "nowhere")})
    assert broken.returncode == 1
    assert any(line.startswith("FAIL") and "nowhere does not exist" in line for line in broken.stdout.splitlines()), (
        broken.stdout
    )


def _plan_uses_the_kept_rate(kept: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--plan`` times the calls at doctor's rate while the server would get the threads it was measured with, and
    at the table's otherwise (a server with other threads runs at another speed)."""
    import ddibench.runner.plan as plan_module
    from ddibench.llm import parse_model_options
    from ddibench.runner.forecast import THROUGHPUT, THROUGHPUT_BUSY, forecast
    from ddibench.runner.plan import RunRequest

    request = RunRequest("drugbank_s2", "zero-shot", parse_model_options(["embedded"]), limit=5)
    monkeypatch.setattr(plan_module, "embedded_threads", lambda: kept["threads"])
    fc = forecast(request)
    (rate,) = fc.rates.values()
    assert rate.source.startswith("measured by 'ddibench doctor' on this machine"), rate
    assert (rate.prompt, rate.generated) == (kept["prompt_per_s"], kept["generated_per_s"])
    phase = next(c for c in fc.phases if c.phase.calls)
    expected = phase.phase.prompt_tokens / rate.prompt + phase.phase.generated_tokens / rate.generated
    assert phase.seconds == pytest.approx(expected)
    # doctor also timed generation with the server's slots all decoding: CBR-DDI's describer phases get that rate
    assert kept["generated_parallel_per_s"] > 0
    cbr = forecast(RunRequest("drugbank_s2", "cbr-ddi", parse_model_options(["embedded"]), limit=2))
    for cost in (c for c in cbr.phases if c.phase.calls):
        generated = kept["generated_parallel_per_s"] if cost.phase.role == "describer" else kept["generated_per_s"]
        assert cost.seconds == pytest.approx(
            cost.phase.prompt_tokens / kept["prompt_per_s"] + cost.phase.generated_tokens / generated
        ), cost.phase.name
    monkeypatch.setattr(plan_module, "embedded_threads", lambda: kept["threads"] + 1)
    (other,) = forecast(request).rates.values()
    assert other in (THROUGHPUT["smollm2-135m-instruct"], THROUGHPUT_BUSY["smollm2-135m-instruct"])  # the tables'


def test_explicit_concurrency_gives_the_embedded_server_slots(tmp_path: Path) -> None:
    """--concurrency N: the server has N slots (it decodes N requests together) and N requests are let through;
    without it, the default slots, and only the system's generation roles' requests fill them."""
    import urllib.request

    from ddibench.llm import parse_model_options
    from ddibench.runner.plan import RunRequest, plan_run

    async def start(
        slots: int, spec: str = "embedded", generation_roles: tuple[str, ...] | None = None
    ) -> tuple[int, dict]:
        roles = {"generator": ModelSpec.parse(spec), "describer": ModelSpec.parse(spec)}
        pool = LLMPool(roles, cache=None, embedded_slots=slots, generation_roles=generation_roles, log_dir=tmp_path)
        await pool.start(list(roles))
        try:
            base = pool.served["embedded:smollm2-135m-instruct"]["base_url"].rsplit("/v1", 1)[0]
            with urllib.request.urlopen(f"{base}/props", timeout=30) as resp:
                props = json.load(resp)
            serial = {role: pool.client(role)._serial for role in roles}
            return props["total_slots"], {**pool.endpoint_stats(), "serial": serial}
        finally:
            await pool.close()

    slots, stats = asyncio.run(start(3))
    assert slots == 3 and stats["embedded:smollm2-135m-instruct"]["concurrency"] == 3
    # a slow request on the shared CPU is not cut at the remote default: only a hung server would reach this
    assert stats["embedded:smollm2-135m-instruct"]["timeout_s"] == EMBEDDED_TIMEOUT > 120
    slots, stats = asyncio.run(start(1, "embedded#timeout=45"))  # the model option still sets it
    assert slots == 1 and stats["embedded:smollm2-135m-instruct"]["concurrency"] == 1
    assert stats["embedded:smollm2-135m-instruct"]["timeout_s"] == 45
    assert stats["serial"] == {"generator": False, "describer": False}  # --concurrency: every role fills the slots
    # without --concurrency: the default slots, filled by the system's generation roles, the others one at a time
    slots, stats = asyncio.run(start(EMBEDDED_SLOTS, generation_roles=("describer",)))
    assert slots == EMBEDDED_SLOTS and stats["embedded:smollm2-135m-instruct"]["serial_concurrency"] == 1
    assert stats["serial"] == {"generator": True, "describer": False}
    plan = plan_run(RunRequest("drugbank_s2", "cbr-ddi", parse_model_options(["embedded"]), limit=2))
    assert plan.pool is not None
    assert (plan.pool.embedded_slots, plan.pool.generation_roles) == (EMBEDDED_SLOTS, ("describer",))
    explicit = plan_run(RunRequest("drugbank_s2", "cbr-ddi", parse_model_options(["embedded"]), limit=2, concurrency=2))
    assert explicit.pool is not None and (explicit.pool.embedded_slots, explicit.pool.generation_roles) == (2, None)


def test_the_likelihood_mode_walks_real_next_token_log_probabilities(tmp_path: Path) -> None:
    """llama.cpp continues the answer prefix and returns its top next tokens: every option number is scored
    (nine requests for 1..86 with SmolLM2's digit-by-digit tokenizer), the probabilities of the options sum to
    at most 1, and the prediction is the most likely option."""
    import math

    run_dir = tmp_path / "likelihood"
    done = _run(
        "run",
        "-s",
        "zero-shot",
        "-t",
        "drugbank_s2",
        "--limit",
        "3",
        "-C",
        "answer_mode=likelihood",
        "--no-cache",
        "--run-dir",
        str(run_dir),
    )
    assert done.returncode == 0, done.stderr
    for line in (run_dir / "journal.jsonl").read_text().splitlines():
        pred = json.loads(line)["prediction"]
        walk = pred["trace"]["likelihood"]
        assert pred["valid"] and walk["requests"] == 9 and walk["unscored"] == 0
        assert [c["messages"][-1]["content"] for c in pred["trace"]["llm"]] == ['{"type": '] + [
            f'{{"type": {d}' for d in range(1, 9)
        ]
        best_option, best_logprob = walk["top"][0]
        assert pred["position"] == best_option and all(lp <= best_logprob for _, lp in walk["top"])
        assert sum(math.exp(lp) for _, lp in walk["top"]) <= 1 + 1e-6


def test_throughput_and_prefix_reuse_are_read_from_the_server(tmp_path: Path) -> None:
    """The rates doctor prints come from real requests; the tokens the server reuses from its prefix cache are
    counted per call and in the ledger (benchmarks/headline.py divides a run's evaluated tokens by the rates)."""
    shared = [{"role": "system", "content": "You answer short questions about medicines. " * 30}]

    async def go() -> tuple[MeasuredThroughput, ChatResult, ChatResult, dict]:
        pool = LLMPool({"generator": ModelSpec.parse("embedded")}, cache=None, log_dir=tmp_path)
        await pool.start(["generator"])
        try:
            client = pool.client("generator")
            rates = await measure_throughput(client, prompt_tokens=256, generated_tokens=24)
            before = pool.ledger.snapshot()
            first = await client.chat([*shared, {"role": "user", "content": "Name one drug."}], max_tokens=4)
            second = await client.chat([*shared, {"role": "user", "content": "Name a vitamin."}], max_tokens=4)
            return rates, first, second, pool.ledger.since(before)
        finally:
            await pool.close()

    rates, first, second, used = asyncio.run(go())
    assert rates.prompt_per_s > 0 and rates.generated_per_s > 0
    assert rates.prompt_tokens >= 200 and rates.generated_tokens >= 12, rates
    # the second request shares the first's system prompt: the server evaluates only what follows it
    assert first.reused_prompt_tokens < first.prompt_tokens / 2
    assert second.reused_prompt_tokens >= 0.8 * (first.prompt_tokens - 10), (first, second)
    assert used["generator"]["calls"] == 2
    assert used["generator"]["reused_prompt_tokens"] == first.reused_prompt_tokens + second.reused_prompt_tokens
    assert used["generator"]["prompt_tokens"] == first.prompt_tokens + second.prompt_tokens
