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
    from ddibench.runner.selection import Selection, run_samples

    task = get_task("drugbank_s2")
    samples = run_samples(task, Selection("test", 12, 0))
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


def test_qa_systems_record_the_types_their_prompt_states_and_the_vote_reader_writes_that_types_sentence(
    cli, stub, tmp_path: Path
) -> None:
    """A retrieving QA system's trace records the interaction types its answer prompt's context states (any drug
    names); the ceilings' vote reader answers the most stated type's sentence about the question's pair, scored
    by the task's own text scorers. The model alone records none."""
    from collections import Counter

    from ddibench.registry import get_task
    from ddibench.runner.selection import Selection, run_samples

    base = [
        "-t",
        "ddi_qa_s1",
        "--limit",
        "6",
        "--no-judge",
        "--selfcheck",
        "0",
        "-m",
        f"vllm:stub-model@{stub.base_url}",
    ]
    small = ["-C", "interaction_chunks=300", "-C", "monograph_chunks=100", "-C", "medquad_chunks=100"]
    code, _, err = cli("run", "-s", "text-rag", *base, *small, "--run-dir", str(tmp_path / "rag"))
    assert code == 0, err
    task = get_task("ddi_qa_s1")
    data = task.load()
    train = {s.id: int(s.target["label"]) for s in data.split("train")}
    from_sentences = 0
    for record in _journal(tmp_path / "rag"):
        trace = record["prediction"]["trace"]
        assert "context_labels" not in trace["llm"][-1]  # lifted to the trace's top
        shown = [train[c["id"].split(":", 1)[1]] for c in trace["retrieved"] if c["source"] == "interaction"]
        assert not Counter(shown) - Counter(trace["context_labels"])  # every training sentence shown is counted
        from_sentences += len(shown)
    assert from_sentences > 0

    real = compute(tmp_path / "rag")
    assert real is not None and real.n == 6 and real.metric == "embedding_similarity"
    samples = run_samples(task, Selection("test", 6, 0), data)
    gold = {s.id: int(s.target["label"]) for s in samples}
    records = _journal(tmp_path / "rag")
    for record in records:
        record["prediction"]["trace"]["context_labels"] = [(gold[record["prediction"]["sample_id"]] + 1) % 86] + [
            gold[record["prediction"]["sample_id"]]
        ] * 2
    (tmp_path / "rag" / "journal.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    perfect = compute(tmp_path / "rag")
    assert perfect is not None and perfect.coverage == 1.0 and perfect.vote[0] == pytest.approx(1.0, abs=1e-3)

    code, _, err = cli("run", "-s", "no-rag", *base, "--run-dir", str(tmp_path / "alone"))
    assert code == 0, err
    assert all("context_labels" not in r["prediction"]["trace"] for r in _journal(tmp_path / "alone"))
    assert compute(tmp_path / "alone") is None
