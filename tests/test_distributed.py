"""More than one process per run: Ray workers, and shards merged afterwards.

Both must give exactly the predictions, journal and metrics of a local run, resume like one, and lose no
sample when a worker dies."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddibench.llm.stub import StubConfig, running_stub


def _predictions(run_dir: Path) -> dict[str, dict]:
    out = {}
    for line in (run_dir / "journal.jsonl").read_text().splitlines():
        pred = json.loads(line)["prediction"]
        for call in pred["trace"].get("llm", []):
            call.pop("latency_s", None)  # the only thing that may differ between two runs
        assert pred["sample_id"] not in out, "a sample journalled twice"
        out[pred["sample_id"]] = pred
    return out


def _metrics(run_dir: Path) -> dict:
    return json.loads((run_dir / "results.json").read_text())["evaluation"]["metrics"]


def _args(stub, limit: int = 30) -> list[str]:
    return [
        "run",
        "-s",
        "zero-shot",
        "-t",
        "drugbank_s2",
        "--limit",
        str(limit),
        "-m",
        f"vllm:stub-model@{stub.base_url}",
        "--no-cache",
    ]


@pytest.fixture
def local_run(cli, stub, tmp_path: Path) -> Path:
    code, _, err = cli(*_args(stub), "--run-dir", str(tmp_path / "local"))
    assert code == 0, err
    return tmp_path / "local"


def test_ray_run_equals_a_local_run(cli, stub, tmp_path: Path, local_run: Path) -> None:
    pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'ddibench[ray]')")
    run_dir = tmp_path / "ray"
    code, out, err = cli(*_args(stub), "--run-dir", str(run_dir), "--executor", "ray", "--workers", "2")
    assert code == 0, err
    assert "(ray, 2 workers)" in out or "ray" in out
    assert _predictions(run_dir) == _predictions(local_run)
    assert _metrics(run_dir) == _metrics(local_run)
    workers = [json.loads(x) for x in (run_dir / "ray-workers.jsonl").read_text().splitlines()]
    assert len(workers) == 2 and len({w["pid"] for w in workers}) == 2  # two processes did the predicting
    sessions = [json.loads(x) for x in (run_dir / "sessions.jsonl").read_text().splitlines()]
    assert sessions[-1]["system_info"]["executor"]["executor"] == "ray"
    code, out, _ = cli(*_args(stub), "--run-dir", str(run_dir), "--executor", "ray", "--workers", "2")
    assert code == 0 and "all 30 samples were already done" in out  # resumes like a local run


def test_a_killed_ray_worker_loses_no_sample(stub, tmp_path: Path, local_run: Path) -> None:
    pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'ddibench[ray]')")
    run_dir = tmp_path / "ray"
    with running_stub(StubConfig(delay=0.15)) as slow:
        args = _args(slow)
        proc = subprocess.Popen(
            [sys.executable, "-m", "ddibench", *args, "--run-dir", str(run_dir), "--executor", "ray", "--workers", "2"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "COLUMNS": "200"},
        )
        deadline = time.time() + 240
        workers = run_dir / "ray-workers.jsonl"
        journal = run_dir / "journal.jsonl"
        while time.time() < deadline and not (
            workers.exists() and journal.exists() and journal.read_text().count("\n") >= 4
        ):
            time.sleep(0.1)
        victim = json.loads(workers.read_text().splitlines()[0])["pid"]
        os.kill(victim, signal.SIGKILL)
        out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    predictions = _predictions(run_dir)  # every sample exactly once
    assert predictions.keys() == _predictions(local_run).keys()
    assert _metrics(run_dir) == _metrics(local_run)
    session = [json.loads(x) for x in (run_dir / "sessions.jsonl").read_text().splitlines()][-1]
    assert session["system_info"]["executor"]["replaced_workers"] >= 1


def test_shards_merge_into_the_local_run(cli, stub, tmp_path: Path, local_run: Path) -> None:
    run_dir = tmp_path / "sharded"
    for i in (1, 2):
        code, out, err = cli(*_args(stub), "--run-dir", str(run_dir), "--shard", f"{i}/3")
        assert code == 0 and f"shard {i}/3" in out, err
    assert not (run_dir / "results.json").exists()
    code, _, err = cli("merge", str(run_dir))
    assert (
        code == 2 and "is incomplete: 10 samples have no prediction yet" in err and len(err.strip().splitlines()) == 1
    )
    code, _, err = cli(*_args(stub), "--run-dir", str(run_dir), "--shard", "3/3")
    assert code == 0, err
    code, out, err = cli("merge", str(run_dir))
    assert code == 0 and "merged 3 shard(s)" in out, err
    assert _predictions(run_dir) == _predictions(local_run)
    assert _metrics(run_dir) == _metrics(local_run)
    code, out, err = cli("merge", str(run_dir))  # merging again adds nothing and scores the same
    assert code == 0 and "0 predictions added" in out and _metrics(run_dir) == _metrics(local_run)
    for bad in ("0/3", "4/3", "x"):
        code, _, err = cli(*_args(stub), "--run-dir", str(tmp_path / "bad"), "--shard", bad)
        assert code == 2 and "--shard" in err and len(err.strip().splitlines()) == 1
