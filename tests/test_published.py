"""The published numbers the project compares with (ddibench/data/published.toml) name real tasks, systems
and metrics, equal the independent transcription where one is at hand, and ``ddibench report
--published`` prints our number beside each."""

from __future__ import annotations

import csv
import os
from pathlib import Path

import pytest

from ddibench.data.published import load_published
from ddibench.registry import get_system_class, get_task

REFERENCE = Path("/work/shared/reference/ddi2_derived/published_results/emergnn_paper_results.tsv")
TINY = ["-C", "max_epochs=1", "-C", "max_train=1500", "-C", "hidden=[32]", "-C", "patience=1"]


def test_every_row_names_a_real_task_system_and_metric() -> None:
    rows, papers = load_published()
    assert {r.paper for r in rows} == set(papers) == {"emergnn", "cladd"}
    assert len({(r.paper, r.table, r.setting, r.dataset, r.method, r.metric) for r in rows}) == len(rows)
    for row in rows:
        assert 0 < row.value <= 100, row
        if row.task:
            metrics = {m.name for m in get_task(row.task).evaluator().metrics}
            assert not row.our_metric or row.our_metric in metrics, row
        if row.system:
            get_system_class(row.system)
    ours = {(r.task, r.system, r.our_metric): r.value for r in rows}
    assert ours[("drugbank_s1_emergnn", "mlp", "macro_f1")] == 21.1  # the gap the MLP card explains
    assert ours[("caption_clintox", "only-smiles", "auroc")] == 91.62


@pytest.mark.skipif(not REFERENCE.exists(), reason="the independent transcription of the EmerGNN paper is not here")
def test_emergnn_rows_equal_the_independent_transcription() -> None:
    names = {"F1": "macro-F1", "Accuracy": "accuracy", "Kappa": "kappa", "PR-AUC": "PR-AUC", "ROC-AUC": "ROC-AUC"}
    with REFERENCE.open(newline="", encoding="utf-8") as fh:
        reference = {(r["paper_table"], r["setting"], r["dataset"], r["method"], names[r["metric"]]): (float(r["mean_pct"]), float(r["std_pct"]))
                     for r in csv.DictReader(fh, delimiter="\t")}  # fmt: skip
    rows = [r for r in load_published()[0] if r.paper == "emergnn"]
    assert len(rows) == 30
    for row in rows:
        assert reference[(row.table, row.setting, row.dataset, row.method, row.metric)] == (row.value, row.std), row


@pytest.mark.skipif(not os.environ.get("DDIBENCH_MIRROR"), reason="needs the mirror")
def test_report_published_prints_ours_beside_the_paper(cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    code, _, err = cli("run", "-s", "mlp", "-t", "drugbank_s1_emergnn", "--limit", "300", *TINY, "--run-dir", str(tmp_path / "runs" / "mlp"))
    assert code == 0, err
    monkeypatch.setenv("COLUMNS", "400")  # the table unfolded, one row per line
    code, out, err = cli("report", str(tmp_path / "runs"), "--published")
    assert code == 0, err
    line = next(x for x in out.splitlines() if "MLP" in x and "macro-F1" in x and "21.1" in x)
    assert "preview" in line and "[" in line  # our value with its interval, marked as a --limit preview
    assert "3 of 34 published rows have a number of ours" in out
    assert "no emergnn run on drugbank_s1_emergnn" in out
    code, _, err = cli("report", str(tmp_path / "nowhere"), "--published")
    assert code != 0 and "does not exist" in err
