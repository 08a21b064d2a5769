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
    with connect(path, read_only=True) as conn:
        return conn.execute(f"SELECT {RUN_COLUMNS} FROM runs ORDER BY task, primary_value DESC").df()


def fmt(metric: str, value: float | None) -> str:
    if value is None or value != value:
        return "—"
    return f"{100 * value:.1f}" if metric in PERCENT else f"{value:.3f}"


def cell(row: pd.Series) -> str:
    best = " ★" if row.get("submittable", True) else " ☆"  # ☆: the best of a task that has only --limit previews
    mark = best if row["best"] else (" ≈" if row["tied"] else "")
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
    """Runs on the cost-quality Pareto front of each task (fewer tokens per item, higher primary).

    Within a task, sorted by cost (and by quality, best first, at equal cost), a run is on the front when
    it beats every cheaper run.
    """
    ordered = frame.sort_values(["task", "tokens_per_item", "primary_value"], ascending=[True, True, False])
    before = ordered.groupby("task")["primary_value"].transform(lambda v: v.cummax().shift(fill_value=float("-inf")))
    return ordered[ordered["primary_value"] > before]


def cells(frame: pd.DataFrame, by: tuple[str, ...] = ("task", "system", "model")) -> pd.DataFrame:
    """The best run of each group (full runs before ``--limit`` previews), for charts that would drown in every run."""
    return frame.sort_values(["submittable", "primary_value"], ascending=False).drop_duplicates(list(by))


def run_detail(path: Path, run_id: str) -> dict[str, Any]:
    with connect(path, read_only=True) as conn:
        row = conn.execute("SELECT metrics, manifest, reasons, tier FROM runs WHERE run_id = ?", [run_id]).fetchone()
    if row is None:
        return {}
    return {
        "metrics": json.loads(row[0]),
        "manifest": json.loads(row[1]),
        "reasons": json.loads(row[2] or "[]"),
        "tier": row[3],
    }


def samples(path: Path, run_id: str, wrong_only: bool = False, limit: int = 500) -> pd.DataFrame:
    where = "AND score IS NOT NULL AND score < 1" if wrong_only else ""
    with connect(path, read_only=True) as conn:
        return conn.execute(
            f"SELECT sample_id, gold, prediction, score, valid FROM samples WHERE run_id = ? {where} ORDER BY sample_id LIMIT ?",
            [run_id, limit],
        ).df()


def sample(path: Path, run_id: str, sample_id: str) -> dict[str, Any]:
    with connect(path, read_only=True) as conn:
        row = conn.execute(
            "SELECT input, gold, prediction, score, valid, trace FROM samples WHERE run_id = ? AND sample_id = ?",
            [run_id, sample_id],
        ).fetchone()
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


def _records(frame: pd.DataFrame, columns: list[str]) -> list[dict[str, Any]]:
    """Rows as JSON-ready dicts (NaN becomes null) for an inline Vega-Lite dataset."""
    return json.loads(frame[columns].to_json(orient="records"))


def heatmap_spec(best: pd.DataFrame) -> dict[str, Any]:
    """Vega-Lite spec: task x system, coloured by the primary metric of each cell's best run."""
    tooltip = ["task", "system", "model", "tier", "primary_value", "ci_low", "ci_high", "tied"]
    return {
        "data": {"values": _records(best, tooltip)},
        "mark": "rect",
        "height": 40 * max(1, best["task"].nunique()),
        "encoding": {
            "x": {"field": "system", "type": "nominal", "title": "system"},
            "y": {"field": "task", "type": "nominal", "title": "task"},
            "color": {"field": "primary_value", "type": "quantitative", "title": "primary metric", "scale": {"scheme": "viridis"}},
            "tooltip": [{"field": f, "format": ".3f"} if f == "primary_value" else {"field": f} for f in tooltip],
        },
    }


def cost_spec(points: pd.DataFrame, front: pd.DataFrame) -> dict[str, Any]:
    """Vega-Lite spec: tokens per item against the primary metric, with each task's Pareto front dashed."""
    fields = ["task", "system", "model", "calls_per_item", "tokens_per_item", "usd_per_item", "primary_value"]
    x = {"field": "tokens_per_item", "type": "quantitative", "title": "LLM tokens per item"}
    y = {"field": "primary_value", "type": "quantitative", "title": "primary metric"}
    color = {"field": "task", "type": "nominal"}
    return {
        "layer": [
            {
                "data": {"values": _records(points, fields)},
                "mark": {"type": "circle", "size": 90},
                "encoding": {"x": x, "y": y, "color": color, "tooltip": [{"field": f} for f in fields]},
            },
            {
                "data": {"values": _records(front, fields)},
                "mark": {"type": "line", "strokeDash": [4, 3]},
                "encoding": {"x": x, "y": y, "color": color},
            },
        ]
    }
