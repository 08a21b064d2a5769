"""``ddibench report RUN_A --against RUN_B``: two runs compared pair by pair on the samples both scored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ddibench.llm.stub import StubConfig, running_stub


def test_two_runs_are_compared_pair_by_pair_on_their_shared_samples(cli, tmp_path: Path) -> None:
    code, _, err = cli(
        "run", "-s", "majority", "-t", "drugbank_s2", "--limit", "60", "--run-dir", str(tmp_path / "majority")
    )
    assert code == 0, err
    with running_stub(StubConfig()) as server:  # answers a type chosen by a hash of each request
        code, _, err = cli(
            "run",
            "-s",
            "zero-shot",
            "-t",
            "drugbank_s2",
            "--limit",
            "60",
            "-m",
            f"vllm:stub-model@{server.base_url}",
            "--no-cache",
            "--run-dir",
            str(tmp_path / "stub"),
        )
        assert code == 0, err
    code, out, err = cli("report", str(tmp_path / "majority"), "--against", str(tmp_path / "stub"), "--json")
    assert code == 0, err
    result = json.loads(out)
    values = {
        name: json.loads((tmp_path / name / "results.json").read_text())["evaluation"]["metrics"]
        for name in ("majority", "stub")
    }
    assert result["n"] == 60
    for row in result["metrics"]:  # the point difference is the difference of the two runs' own values
        assert row["a"] == pytest.approx(values["majority"][row["metric"]]["value"])
        assert row["b"] == pytest.approx(values["stub"][row["metric"]]["value"])
        assert row["diff"] == pytest.approx(row["a"] - row["b"]) and row["low"] <= row["diff"] <= row["high"]
        assert row["significant"] == (row["low"] > 0 or row["high"] < 0)
    code, out, err = cli("report", str(tmp_path / "majority"), "--against", str(tmp_path / "majority"))
    assert code == 0 and "yes" not in out.split("A ≠ B")[1].split("A:")[0]  # a run is never different from itself
    code, _, err = cli(
        "run", "-s", "majority", "-t", "drugbank_s1", "--limit", "20", "--run-dir", str(tmp_path / "other")
    )
    assert code == 0, err
    code, _, err = cli("report", str(tmp_path / "majority"), "--against", str(tmp_path / "other"))
    assert code != 0 and "compare two runs of the same task" in err and len(err.strip().splitlines()) == 1
