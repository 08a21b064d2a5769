"""``ddibench report RUN_A --against RUN_B``: two runs compared pair by pair on the samples both scored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ddibench.llm.stub import StubConfig, running_stub


def _stub_zero_shot(cli, run_dir: Path, limit: int) -> None:
    """zero-shot on drugbank_s2 through a local stub server that answers a type chosen by a hash of each request."""
    with running_stub(StubConfig()) as server:
        model = f"vllm:stub-model@{server.base_url}"
        code, _, err = cli(
            "run",
            "-s",
            "zero-shot",
            "-t",
            "drugbank_s2",
            "--limit",
            str(limit),
            "-m",
            model,
            "--no-cache",
            "--run-dir",
            str(run_dir),
        )
    assert code == 0, err


def test_two_runs_are_compared_pair_by_pair_on_their_shared_samples(cli, tmp_path: Path) -> None:
    code, _, err = cli(
        "run", "-s", "majority", "-t", "drugbank_s2", "--limit", "60", "--run-dir", str(tmp_path / "majority")
    )
    assert code == 0, err
    _stub_zero_shot(cli, tmp_path / "stub", 60)
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


def test_a_run_is_compared_against_a_published_bundle_on_the_samples_both_scored(cli, tmp_path: Path) -> None:
    """A --limit preview against the full majority run shipped in results/: the bundle is verified, then
    compared on the preview's samples, exactly as the same answers in a run directory are."""
    (bundle,) = (Path(__file__).parents[1] / "results" / "drugbank_s2" / "majority").glob("*.tar.gz")
    code, _, err = cli(
        "run", "-s", "majority", "-t", "drugbank_s2", "--limit", "40", "--run-dir", str(tmp_path / "majority")
    )
    assert code == 0, err
    _stub_zero_shot(cli, tmp_path / "preview", 40)
    rows = {}
    for against in (tmp_path / "majority", bundle):
        code, out, err = cli("report", str(tmp_path / "preview"), "--against", str(against), "--json")
        assert code == 0, err
        result = json.loads(out)
        assert result["n"] == 40
        rows[against] = [(r["metric"], r["a"], r["b"], r["diff"], r["low"], r["high"]) for r in result["metrics"]]
    # the full run's majority answers restricted to the preview's 40 samples are the preview-sized run's
    assert rows[bundle] == rows[tmp_path / "majority"]
    code, out, err = cli("report", str(bundle), "--against", str(tmp_path / "preview"), "--json")
    assert code == 0, err
    assert json.loads(out)["metrics"][0]["diff"] == pytest.approx(-rows[bundle][0][3])

    damaged = tmp_path / "damaged.tar.gz"
    damaged.write_bytes(bundle.read_bytes()[:-200])
    for bad, says in ((damaged, "damaged.tar.gz"), (tmp_path / "absent.tar.gz", "does not exist")):
        code, _, err = cli("report", str(tmp_path / "preview"), "--against", str(bad))
        assert code != 0 and says in err and len(err.strip().splitlines()) == 1, err


def test_a_bundle_alone_is_reported_once_it_verifies(cli, tmp_path: Path) -> None:
    """``ddibench report BUNDLE``, what a reviewer types for a bundle downloaded from the board: the bundle's own
    results (the metrics its predictions give again), and a one-line error for a bundle that does not verify."""
    (bundle,) = (Path(__file__).parents[1] / "results" / "drugbank_s2" / "majority").glob("*.tar.gz")
    code, out, err = cli("report", str(bundle), "--json")
    assert code == 0, err
    shown = json.loads(out)
    assert shown["task"] == "drugbank_s2" and shown["system"] == "majority"
    index = json.loads((Path(__file__).parents[1] / "results" / "index.json").read_text())
    (entry,) = [e for e in index["runs"] if e["path"].endswith(bundle.name)]
    assert shown["evaluation"]["metrics"][entry["primary_metric"]]["value"] == pytest.approx(entry["value"])
    code, out, err = cli("report", str(bundle))
    assert code == 0 and "majority on drugbank_s2" in out and f"bundle: {bundle}" in out.replace("\n", ""), err
    damaged = tmp_path / "damaged.tar.gz"
    damaged.write_bytes(bundle.read_bytes()[:-200])
    code, _, err = cli("report", str(damaged))
    assert code != 0 and "damaged.tar.gz" in err and len(err.strip().splitlines()) == 1, err
