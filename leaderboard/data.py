"""What the board shows, computed from the results store (kept apart from the Streamlit code, so it is
testable and fast: one small query at start-up, per-sample rows only when a run is opened)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from ddibench.store import connect

PERCENT = {"accuracy", "macro_f1", "kappa", "label_recovery"}
RUN_COLUMNS = (
    "run_id, task, family, setting, system, system_version, model, profile, tier, submittable, n, primary_metric, "
    "primary_value, ci_low, ci_high, calls_per_item, tokens_per_item, usd_per_item, best, tied, diff, diff_low, diff_high"
)


def runs(path: Path) -> pd.DataFrame:
    conn = connect(path, read_only=True)
    try:
        return conn.execute(f"SELECT {RUN_COLUMNS} FROM runs ORDER BY task, primary_value DESC").df()
    finally:
        conn.close()


def fmt(metric: str, value: float | None) -> str:
    if value is None or value != value:
        return "—"
    return f"{100 * value:.1f}" if metric in PERCENT else f"{value:.3f}"


def cell(row: pd.Series) -> str:
    mark = " ★" if row["best"] else (" ≈" if row["tied"] else "")
    return f"{fmt(row['primary_metric'], row['primary_value'])} [{fmt(row['primary_metric'], row['ci_low'])}, {fmt(row['primary_metric'], row['ci_high'])}]{mark}"


def filtered(frame: pd.DataFrame, filters: dict[str, list[str]], previews: bool) -> pd.DataFrame:
    out = frame if previews else frame[frame["submittable"]]
    for column, allowed in filters.items():
        if allowed:
            out = out[out[column].isin(allowed)]
    return out


def matrix(frame: pd.DataFrame) -> pd.DataFrame:
    """Task x system: the best run of each cell, shown as 'value [CI]' with ★ best and ≈ tied with best.

    A full (submittable) run fills its cell before any ``--limit`` preview, whatever the preview scored.
    """
    if frame.empty:
        return pd.DataFrame()
    best = frame.sort_values(["submittable", "primary_value"], ascending=False).drop_duplicates(
        ["task", "system"]
    )
    table = best.assign(cell=best.apply(cell, axis=1)).pivot(index="task", columns="system", values="cell")
    metric = best.drop_duplicates("task").set_index("task")["primary_metric"]
    table.insert(0, "metric", metric.reindex(table.index))
    return table.fillna("")


def pareto(frame: pd.DataFrame) -> pd.DataFrame:
    """Runs on the cost-quality Pareto front of each task (fewer tokens per item, higher primary)."""
    keep = []
    for _, group in frame.groupby("task"):
        group = group.sort_values(["tokens_per_item", "primary_value"], ascending=[True, False])
        best = float("-inf")
        for idx, row in group.iterrows():
            if row["primary_value"] > best:
                keep.append(idx)
                best = row["primary_value"]
    return frame.loc[keep]


def run_detail(path: Path, run_id: str) -> dict[str, Any]:
    conn = connect(path, read_only=True)
    try:
        row = conn.execute(
            "SELECT metrics, manifest, reasons, tier FROM runs WHERE run_id = ?", [run_id]
        ).fetchone()
    finally:
        conn.close()
    if row is None:
        return {}
    return {
        "metrics": json.loads(row[0]),
        "manifest": json.loads(row[1]),
        "reasons": json.loads(row[2] or "[]"),
        "tier": row[3],
    }


def samples(path: Path, run_id: str, wrong_only: bool = False, limit: int = 500) -> pd.DataFrame:
    conn = connect(path, read_only=True)
    try:
        where = "AND score IS NOT NULL AND score < 1" if wrong_only else ""
        return conn.execute(
            f"SELECT sample_id, gold, prediction, score, valid FROM samples WHERE run_id = ? {where} ORDER BY sample_id LIMIT ?",
            [run_id, limit],
        ).df()
    finally:
        conn.close()


def sample(path: Path, run_id: str, sample_id: str) -> dict[str, Any]:
    conn = connect(path, read_only=True)
    try:
        row = conn.execute(
            "SELECT input, gold, prediction, score, valid, trace FROM samples WHERE run_id = ? AND sample_id = ?",
            [run_id, sample_id],
        ).fetchone()
    finally:
        conn.close()
    if row is None:
        return {}
    return {
        "input": json.loads(row[0]),
        "gold": row[1],
        "prediction": row[2],
        "score": row[3],
        "valid": row[4],
        "trace": json.loads(row[5]),
    }
