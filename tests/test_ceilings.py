"""Retrieval ceilings: the labels a retrieval system's context states, recorded in its traces, and what a
vote over them scores (``ddibench report --ceilings``)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ddibench.runner.ceilings import compute, context_labels, vote


def test_the_vote_takes_the_most_stated_label_and_breaks_ties_by_first_mention() -> None:
    assert vote([3, 5, 5, 3, 7], None) == [3]  # 3 and 5 tie; 3 came first
    assert vote([9, 2, 2], None) == [2]
    assert vote([4, 1, 1, 8, 4, 6], 3) == [4, 1, 8]
    assert context_labels({"context_labels": [1, 2]}) == [1, 2]
    assert context_labels({"context": {"context_labels": []}}) == []
    assert context_labels({"context": {"facts": ["x"]}}) is None


def _journal(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines() if line.strip()]


def _rewrite(run_dir: Path, labels_for) -> None:  # noqa: ANN001
    records = _journal(run_dir)
    for record in records:
        pred = record["prediction"]
        pred["trace"]["context"]["context_labels"] = labels_for(pred["sample_id"])
    (run_dir / "journal.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_naive_cbr_records_the_labels_its_prompt_shows_and_the_ceilings_follow_them(cli, stub, tmp_path: Path) -> None:
    run_dir = tmp_path / "r"
    code, _, err = cli(
        "run",
        "-s",
        "naive-cbr",
        "-t",
        "drugbank_s2",
        "--limit",
        "12",
        "-m",
        f"vllm:stub-model@{stub.base_url}",
        "--run-dir",
        str(run_dir),
    )
    assert code == 0, err
    for record in _journal(run_dir):
        trace = record["prediction"]["trace"]
        shown = [int(n) - 1 for n in re.findall(r": type (\d+) \(", trace["llm"][0]["messages"][-1]["content"])]
        assert shown and trace["context"]["context_labels"] == shown  # exactly what the prompt showed, in its order

    real = compute(run_dir)
    assert real is not None and real.n == 12 and real.with_context == 12 and 0 <= real.coverage <= 1

    from ddibench.registry import get_task
    from ddibench.runner.plan import select_samples

    task = get_task("drugbank_s2")
    samples = select_samples(task, task.load(), "test", 12, 0)
    gold = {s.id: s.label for s in samples}
    _rewrite(run_dir, lambda sid: [(gold[sid] + 1) % 86, gold[sid], gold[sid]])  # the gold stated most often
    perfect = compute(run_dir)
    assert perfect is not None and perfect.coverage == 1.0 and perfect.vote[0] == pytest.approx(1.0)
    half = {s.id for s in samples[::2]}
    _rewrite(run_dir, lambda sid: [gold[sid]] if sid in half else [])  # half state the gold, half state nothing
    mixed = compute(run_dir)
    assert (
        mixed is not None and mixed.coverage == pytest.approx(0.5) and mixed.with_context == 6 and 0 < mixed.vote[0] < 1
    )

    code, out, _ = cli("report", "--ceilings", "--json", str(tmp_path))
    assert code == 0 and json.loads(out)[0]["coverage"] == pytest.approx(0.5)
    code, out, _ = cli("report", "--ceilings", str(run_dir))
    assert code == 0 and "vote reader" in out and "50.0% (6 with context)" in out


def test_a_run_without_context_labels_has_no_ceilings(cli, stub, tmp_path: Path) -> None:
    code, _, err = cli(
        "run",
        "-s",
        "zero-shot",
        "-t",
        "drugbank_s2",
        "--limit",
        "4",
        "-m",
        f"vllm:stub-model@{stub.base_url}",
        "--run-dir",
        str(tmp_path / "z"),
    )
    assert code == 0, err
    assert compute(tmp_path / "z") is None
    code, out, _ = cli("report", "--ceilings", str(tmp_path))
    assert code == 1 and "no finished run records context labels" in out
