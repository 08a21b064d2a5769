"""The published numbers the project compares with (ddibench/data/published.toml) name real tasks, systems
and metrics, equal the independent transcription where one is at hand, and ``ddibench report
--published`` prints our number beside each."""

from __future__ import annotations

import csv
import itertools
import os
import re
from pathlib import Path

import pytest

from ddibench.data.published import load_published
from ddibench.registry import get_system_class, get_task

REFERENCE = Path("/work/shared/reference/ddi2_derived/published_results/emergnn_paper_results.tsv")
SEED_TABLES = Path("/work/shared/reference/published-seed-tables.md")  # the four seed papers' tables, transcribed
TINY = ["-C", "max_epochs=1", "-C", "max_train=1500", "-C", "hidden=[32]", "-C", "patience=1"]


def test_every_row_names_a_real_task_system_and_metric() -> None:
    rows, papers = load_published()
    assert {r.paper for r in rows} == set(papers) == {"emergnn", "cbr-ddi", "cladd", "drugrag", "hybrid-agent"}
    counts = {paper: sum(r.paper == paper for r in rows) for paper in papers}
    assert counts == {"emergnn": 30, "cbr-ddi": 232, "cladd": 132, "drugrag": 8, "hybrid-agent": 1} and len(rows) == 403
    assert len({(r.paper, r.table, r.setting, r.dataset, r.method, r.metric) for r in rows}) == len(rows)
    for row in rows:
        assert 0 < row.value <= 100, row
        if row.task:
            metrics = {m.name for m in get_task(row.task).evaluator().metrics}
            assert not row.our_metric or row.our_metric in metrics, row
        if row.system:
            get_system_class(row.system)
        assert row.note, row  # every row says how the comparison differs
        if row.paper == "cbr-ddi" and row.dataset == "DrugBank":
            assert "is not available; closest: " in row.note, row  # the paper's own split is not in the mirror

    def ours(task: str, system: str, metric: str) -> list[float]:
        return [r.value for r in rows if (r.task, r.system, r.our_metric) == (task, system, metric)]

    assert ours("drugbank_s1_emergnn", "mlp", "macro_f1") == [21.1]  # the gap the MLP card explains
    assert ours("caption_clintox", "only-smiles", "auroc") == [91.62]
    assert ours("drugbank_s1", "cbr-ddi", "macro_f1") == [61.57, 70.85, 74.38]  # one row per reader LLM


@pytest.mark.skipif(not REFERENCE.exists(), reason="the independent transcription of the EmerGNN paper is not here")
def test_emergnn_rows_equal_the_independent_transcription() -> None:
    names = {"F1": "macro-F1", "Accuracy": "accuracy", "Kappa": "kappa", "PR-AUC": "PR-AUC", "ROC-AUC": "ROC-AUC"}
    with REFERENCE.open(newline="", encoding="utf-8") as fh:
        reference = {
            (r["paper_table"], r["setting"], r["dataset"], r["method"], names[r["metric"]]): (
                float(r["mean_pct"]),
                float(r["std_pct"]),
            )
            for r in csv.DictReader(fh, delimiter="\t")
        }
    rows = [r for r in load_published()[0] if r.paper == "emergnn"]
    assert len(rows) == 30
    for row in rows:
        assert reference[(row.table, row.setting, row.dataset, row.method, row.metric)] == (row.value, row.std), row


def _markdown_table(text: str, title: str) -> list[list[str]]:
    """The cells of the first markdown table after the line that starts with ``title``, header first (the
    separator row left out)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    first = next(i for i in range(start, len(lines)) if lines[i].startswith("|"))
    table = []
    for line in itertools.takewhile(lambda x: x.startswith("|"), lines[first:]):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not all(set(c) <= set("-: ") for c in cells):
            table.append(cells)
    return table


def _paragraph(text: str, start: str, end: str) -> str:
    """The text from ``start`` up to ``end``, its line breaks as spaces."""
    return " ".join(text[text.index(start) : text.index(end, text.index(start))].split())


NUMBER = r"(\d+\.\d+)"


@pytest.mark.skipif(not SEED_TABLES.exists(), reason="the transcription of the seed papers' tables is not here")
def test_cbr_ddi_table_2_rows_equal_the_transcription() -> None:
    header, *body = _markdown_table(SEED_TABLES.read_text(encoding="utf-8"), "Table 2 (S1 / S2)")
    datasets, metrics = (
        {"DB": "DrugBank", "TS": "TWOSIDES"},
        {"acc": "accuracy", "F1": "macro-F1", "R@5": "Recall@5", "NDCG@5": "NDCG@5"},
    )
    columns = [(datasets[d], setting, metrics[m]) for d, setting, m in (h.split(" ", 2) for h in header[2:])]
    expected = {}
    for kind, method, *cells in body:
        if kind not in (
            "feature",
            "graph",
            "LM",
        ):  # the reader LLM, named in the method ('Base (zero-shot)' is its 'Base')
            method = f"{method.split(' (')[0]} ({kind})"
        for (dataset, setting, metric), cell in zip(columns, cells, strict=True):
            expected[(setting, dataset, method, metric)] = float(cell)
    rows = {
        (r.setting, r.dataset, r.method, r.metric): r
        for r in load_published()[0]
        if r.paper == "cbr-ddi" and r.table == "Table 2"
    }
    assert len(expected) == 23 * 8 and set(rows) == set(expected)
    tasks = {
        ("S1", "DrugBank"): "drugbank_s1",
        ("S2", "DrugBank"): "drugbank_s2",
        ("S1", "TWOSIDES"): "twosides_s1",
        ("S2", "TWOSIDES"): "twosides_s2",
    }
    for key, value in expected.items():
        row = rows[key]
        assert (row.value, row.std, row.task) == (value, None, tasks[key[:2]]), row


@pytest.mark.skipif(not SEED_TABLES.exists(), reason="the transcription of the seed papers' tables is not here")
def test_the_other_seed_paper_rows_equal_the_transcription() -> None:
    text, rows = SEED_TABLES.read_text(encoding="utf-8"), load_published()[0]

    def published(paper: str, table: str) -> dict[tuple[str, str, str, str], tuple[float, float | None]]:
        return {
            (r.setting, r.dataset, r.method, r.metric): (r.value, r.std)
            for r in rows
            if (r.paper, r.table) == (paper, table)
        }

    def markdown(title: str, key) -> dict[tuple[str, str, str, str], tuple[float, float | None]]:
        header, *body = _markdown_table(text, title)
        out = {}
        for name, *cells in body:
            for column, cell in zip(header[1:], cells, strict=True):
                value, std = re.fullmatch(NUMBER + r"(?: \(" + NUMBER + r"\))?", cell).groups()
                out[key(name, column)] = (float(value), float(std) if std else None)
        return out

    # CBR-DDI Table 7 (S0; its LLM rows are Llama3.1-70B's) and Table 9, written as prose
    s0 = re.findall(
        r"([\w.-]+) " + NUMBER + " / " + NUMBER + ", " + NUMBER + " / " + NUMBER,
        _paragraph(text, "Table 7 (S0", "Table 9"),
    )
    llm = {"Base", "Naive-CBR", "KAPING", "K-Paths", "CBR-DDI"}
    expected = {}
    for name, *values in s0:
        method = f"{name} (Llama3.1-70B)" if name in llm else name
        for (dataset, metric), value in zip(
            [("DrugBank", "accuracy"), ("DrugBank", "macro-F1"), ("TWOSIDES", "Recall@5"), ("TWOSIDES", "NDCG@5")],
            values,
            strict=True,
        ):
            expected[("S0", dataset, method, metric)] = (float(value), None)
    assert len(s0) == 10 and published("cbr-ddi", "Table 7") == expected
    values = [float(v) for v in re.findall(NUMBER, _paragraph(text, "Table 9 (", "Headline"))]
    keys = [
        (s, "TWOSIDES", m, metric)
        for m in ("SA-DDI", "CBR-DDI (Llama3.1-70B)")
        for s in ("S1", "S2")
        for metric in ("Recall@5", "NDCG@5")
    ]
    assert len(values) == 8 and published("cbr-ddi", "Table 9") == {
        k: (v, None) for k, v in zip(keys, values, strict=True)
    }

    # CLADD Tables 1, 2, 3 and 6
    assert published("cladd", "Table 1") == markdown(
        "Table 1, property-specific captioning", lambda m, c: ("scaffold split", c, m, "AUROC")
    )
    settings = {"(a)": "(a) overlap with the external databases", "(b)": "(b) no overlap"}
    targets = {"activate": "ChemPert, activation", "inhibit": "ChemPert, inhibition"}
    assert published("cladd", "Table 2") == markdown(
        "Table 2, drug targets", lambda m, c: (settings[c.split()[0]], targets[c.split()[1]], m, "Precision@5")
    )
    columns = [
        (settings[c.split()[0]], targets[c.split()[1]]) for c in _markdown_table(text, "Table 2, drug targets")[0][1:]
    ]  # Table 6's too
    ablations = re.findall(
        r"([A-Za-z][\w ]*?) " + " / ".join([NUMBER] * 4),
        _paragraph(text, "Table 6, ablations", "Table 3, toxicity").split(": ", 1)[1],
    )
    expected = {}
    for name, *values in ablations:
        for (setting, dataset), value in zip(columns, values, strict=True):
            expected[(setting, dataset, f"CLADD, {name}", "Precision@5")] = (float(value), None)
    assert len(ablations) == 6 and published("cladd", "Table 6") == expected
    assert published("cladd", "Table 3") == markdown(
        "Table 3, toxicity", lambda m, c: ("the paper's split", {"avg": "average of the four"}.get(c, c), m, "macro-F1")
    )

    # DrugRAG Table II and the hybrid agent's one number
    methods = {
        "no retrieval": "No retrieval",
        "RAG (text, top-5 chunks)": "RAG, text top-5 chunks",
        "GraphRAG (agentic, 2 iterations)": "GraphRAG, agentic, 2 iterations",
        "DrugRAG": "DrugRAG",
    }
    assert published("drugrag", "Table II") == markdown(
        "Table II, MedQuAD-style QA",
        lambda s, llm: (
            "QA, LLM judge",
            "100 expert-written questions",
            f"{methods[s]} ({llm})",
            "judge score (0-100)",
        ),
    )
    hybrid = float(re.search(r"Reported " + NUMBER + "%", text).group(1))
    assert [r.value for r in rows if r.paper == "hybrid-agent"] == [hybrid]


@pytest.mark.skipif(not os.environ.get("DDIBENCH_MIRROR"), reason="needs the mirror")
def test_report_published_prints_ours_beside_the_paper(cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    code, _, err = cli(
        "run",
        "-s",
        "mlp",
        "-t",
        "drugbank_s1_emergnn",
        "--limit",
        "300",
        *TINY,
        "--run-dir",
        str(tmp_path / "runs" / "mlp"),
    )
    assert code == 0, err
    monkeypatch.setenv("COLUMNS", "400")  # the table unfolded, one row per line
    code, out, err = cli("report", str(tmp_path / "runs"), "--published")
    assert code == 0, err
    line = next(x for x in out.splitlines() if "MLP" in x and "macro-F1" in x and "21.1" in x)
    assert "preview" in line and "[" in line  # our value with its interval, marked as a --limit preview
    assert "3 of 403 published rows have a number of ours" in out
    assert "no emergnn run on drugbank_s1_emergnn" in out
    code, _, err = cli("report", str(tmp_path / "nowhere"), "--published")
    assert code != 0 and "does not exist" in err
