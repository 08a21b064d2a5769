"""``scripts/reader_table.py``: every finished run's own numbers, a row per run or a column per answer mode."""

from __future__ import annotations

import json
import runpy
from dataclasses import replace
from pathlib import Path

import pytest

from ddibench.llm.stub import StubConfig, running_stub

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "reader_table.py"


def _percent(value: float) -> str:
    text = f"{100 * value:.1f}"
    return "0.0" if text == "-0.0" else text


def test_reader_table_prints_each_runs_own_numbers_by_run_and_by_answer_mode(
    cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = tmp_path / "runs"
    base = ["-t", "drugbank_s2", "--limit", "16", "--no-cache"]
    code, _, err = cli("run", "-s", "majority", *base, "--run-dir", str(runs / "majority"))
    assert code == 0, err
    with running_stub(StubConfig()) as server:  # answers a type chosen by a hash of each request
        model = f"vllm:stub-model@{server.base_url}"
        for name, extra in (("plain", ()), ("shuffled", ("-C", "shuffle_options=3"))):
            code, _, err = cli("run", "-s", "zero-shot", *base, "-m", model, *extra, "--run-dir", str(runs / name))
            assert code == 0, err
        # a system whose context states labels: its row holds the ceilings of that context
        code, _, err = cli("run", "-s", "naive-cbr", *base, "-m", model, "--run-dir", str(runs / "cases"))
        assert code == 0, err
    (runs / "unfinished").mkdir()  # a run directory without results is left out
    (runs / "unfinished" / "run.json").write_text("{}")

    table = runpy.run_path(str(SCRIPT))
    rows = table["collect"](runs, "majority", [])
    assert [(r.system, r.variant) for r in rows] == [
        ("majority", ""),
        ("naive-cbr", ""),
        ("zero-shot", ""),
        ("zero-shot", "shuffle_options=3"),
    ]
    # --model keeps the runs whose manifest names the model (the majority run has none)
    assert [(r.system, r.variant) for r in table["collect"](runs, "majority", [], "stub-model")] == [
        ("naive-cbr", ""),
        ("zero-shot", ""),
        ("zero-shot", "shuffle_options=3"),
    ]
    assert table["collect"](runs, "majority", [], "another-model") == []
    cases = rows.pop(1)
    code, out, err = cli("report", str(runs / "cases"), "--ceilings", "--json")
    assert code == 0, err
    (found,) = json.loads(out)
    assert cases.vote == f"{_percent(found['vote_reader'][0])}" and cases.coverage == f"{found['coverage']:.0%}"
    # the papers' numbers for the same task, system and metric: CBR-DDI's Table 2 has Naive-CBR with three readers
    from ddibench.data.published import load_published

    papers = [
        p for p in load_published()[0] if (p.task, p.system, p.our_metric) == ("drugbank_s2", "naive-cbr", "macro_f1")
    ]
    assert len(papers) == 3 and cases.published == "cbr-ddi: " + ", ".join(f"{p.method} {p.value:.2f}" for p in papers)
    assert "Naive-CBR (Llama3.1-8B) 8.70" in cases.published
    for row, name in zip(rows, ("majority", "plain", "shuffled"), strict=True):
        metric = json.loads((runs / name / "results.json").read_text())["evaluation"]["metrics"]["macro_f1"]
        assert row.n == 16
        assert (
            row.primary == f"{_percent(metric['value'])} [{_percent(metric['ci_low'])}, {_percent(metric['ci_high'])}]"
        )
        assert row.against_reference is None
    majority, plain, shuffled = rows
    # the paired differences are those of `ddibench report A --against B`
    for row, a, b in ((plain, "plain", "majority"), (shuffled, "shuffled", "plain")):
        code, out, err = cli("report", str(runs / a), "--against", str(runs / b), "--json")
        assert code == 0, err
        m = next(m for m in json.loads(out)["metrics"] if m["metric"] == "macro_f1")
        expected = f"{_percent(m['diff'])} [{_percent(m['low'])}, {_percent(m['high'])}]"
        assert (plain.against_baseline if row is plain else shuffled.against_plain).startswith(expected)
    assert majority.against_baseline == "—" and shuffled.against_baseline == "—"  # no majority run shuffled
    assert shuffled.published == "—"  # the papers report no shuffled run
    assert majority.first == "—" and plain.first.endswith("%")  # majority lists no options

    lines = table["modes_table"](rows).splitlines()
    assert lines[0] == "| task | system | n | generated | shuffle_options=3 |"
    (zero_shot,) = [line for line in lines if line.startswith("| drugbank_s2 | zero-shot | 16 |")]
    generated, shuffled_cell = zero_shot.split(" | ")[3:5]
    assert generated.startswith(f"{plain.primary}, first {plain.first}")
    assert shuffled_cell.startswith(f"{shuffled.primary}, first {shuffled.first}")
    assert shuffled_cell.rstrip(" |").endswith(f"; vs plain {shuffled.against_plain}")
    (row,) = [line for line in lines if line.startswith("| drugbank_s2 | majority | 16 |")]
    assert row.endswith("| — |")
    assert len(table["runs_table"](rows, "majority", False).splitlines()) == 2 + 3
    with_papers = table["runs_table"]([cases], "majority", False, True).splitlines()
    assert with_papers[0].endswith("| the papers (same metric) |") and with_papers[2].endswith(f"| {cases.published} |")

    # the same table from the runs' bundles (as results/ ships them): the same rows, ceilings and pairings included
    bundles = tmp_path / "bundles"
    bundles.mkdir()
    for name in ("majority", "plain", "shuffled", "cases"):
        code, _, err = cli("submit", "--compact", str(runs / name), "--out", str(bundles / f"{name}.tar.gz"))
        assert code == 0, err
    assert table["collect"](bundles, "majority", []) == [rows[0], cases, *rows[1:]]
    # a compact bundle packed before it kept every sample's context labels (whole traces for five samples only)
    # shows no ceilings, rather than ceilings that count its other samples as stating nothing
    with monkeypatch.context() as patch:
        patch.setattr("ddibench.runner.ceilings.context_labels", lambda trace: None)
        code, _, err = cli("submit", "--compact", str(runs / "cases"), "--out", str(bundles / "cases.tar.gz"))
        assert code == 0, err
    assert table["collect"](bundles, "majority", []) == [rows[0], replace(cases, vote="—", coverage="—"), *rows[1:]]
    # a folder with two runs of one system and variant is refused: which one a pairing uses would be a guess
    code, _, err = cli("submit", "--compact", str(runs / "plain"), "--out", str(bundles / "again.tar.gz"))
    assert code == 0, err
    with pytest.raises(SystemExit, match="more than one run of drugbank_s2 zero-shot"):
        table["collect"](bundles, "majority", [])


def test_a_question_tasks_floor_is_top_passage_and_its_baseline_the_model_alone(cli, tmp_path: Path) -> None:
    """MedQuAD has no label to count and no zero-shot system: each row's floor is the top-passage run of the same
    size (kept under --model, though it names no model) and "vs zero-shot" pairs with no-rag."""
    runs = tmp_path / "runs"
    base = ["-t", "medquad", "--limit", "6", "--no-judge", "--selfcheck", "0", "--no-cache"]
    code, _, err = cli("run", "-s", "top-passage", *base, "--run-dir", str(runs / "floor"))
    assert code == 0, err
    small = ["-C", "interaction_chunks=50", "-C", "monograph_chunks=50", "-C", "medquad_chunks=50"]
    with running_stub(StubConfig()) as server:
        model = f"vllm:stub-model@{server.base_url}"
        for system, extra in (("no-rag", ()), ("text-rag", small)):
            code, _, err = cli("run", "-s", system, *base, "-m", model, *extra, "--run-dir", str(runs / system))
            assert code == 0, err
        # SelfCheckGPT only adds a model-based score: runs scored with and without it still pair
        code, _, err = cli(
            "rescore", str(runs / "no-rag"), "--no-judge", "--selfcheck", "1", "-m", f"generator={model}"
        )
        assert code == 0, err
        assert "selfcheck" in json.loads((runs / "no-rag" / "results.json").read_text())["evaluation"]["metrics"]
    table = runpy.run_path(str(SCRIPT))
    rows = table["collect"](runs, "zero-shot", [], "stub-model")
    assert [r.system for r in rows] == ["no-rag", "text-rag"]
    floor = json.loads((runs / "floor" / "results.json").read_text())["evaluation"]["metrics"]["embedding_similarity"]
    assert all(r.floors == f"top-passage {floor['value']:.3f}" for r in rows)
    code, out, err = cli("report", str(runs / "text-rag"), "--against", str(runs / "no-rag"), "--json")
    assert code == 0, err
    m = next(m for m in json.loads(out)["metrics"] if m["metric"] == "embedding_similarity")
    assert rows[0].against_baseline == "—"
    assert rows[1].against_baseline.startswith(f"{m['diff']:.3f} [{m['low']:.3f}, {m['high']:.3f}]")
    assert "| vs zero-shot (QA: no-rag) (paired) |" in table["runs_table"](rows, "zero-shot", False).splitlines()[0]
