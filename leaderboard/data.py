"""What the board shows, computed from the results store (kept apart from the Streamlit code, so it is
testable and fast: one small query at start-up, per-sample rows only when a run is opened)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from ddibench.evaluation import MetricSpec, MetricValue
from ddibench.evaluation.classification import CLASSIFICATION_METRICS
from ddibench.evaluation.text import TEXT_METRICS
from ddibench.runner.records import Manifest
from ddibench.store import connect

RUN_COLUMNS = (
    "run_id, task, family, setting, system, system_version, model, profile, tier, submittable, n, primary_metric, "
    "primary_value, ci_low, ci_high, calls_per_item, tokens_per_item, usd_per_item, best, tied, diff, diff_low, diff_high, "
    "primary_unit, higher_is_better, scoring_variant"
)


LEGACY_COLUMNS = {  # columns a store written before the metric declarations lacks, and how to read them
    "primary_unit": "CASE WHEN primary_metric IN ('accuracy', 'macro_f1', 'kappa', 'label_recovery') THEN 'fraction' ELSE 'score' END",
    "higher_is_better": "primary_metric <> 'selfcheck'",
    "scoring_variant": "''",
}


def runs(path: Path) -> pd.DataFrame:
    with connect(path, read_only=True) as conn:
        have = {row[0] for row in conn.execute("DESCRIBE runs").fetchall()}
        columns = [c.strip() for c in RUN_COLUMNS.split(",")]
        select = ", ".join(c if c in have else f"{LEGACY_COLUMNS[c]} AS {c}" for c in columns)
        return conn.execute(f"SELECT {select} FROM runs ORDER BY task, primary_value DESC").df()


def fmt(unit: str, value: float | None) -> str:
    """A metric value in its declared unit (see :class:`ddibench.evaluation.MetricSpec`)."""
    from ddibench.evaluation import MetricSpec

    return MetricSpec(name="", label="", unit=unit if unit in ("fraction", "score", "scale") else "score").format(value)


def cell(row: pd.Series) -> str:
    best = " ★" if row.get("submittable", True) else " ☆"  # ☆: the best of a task that has only --limit previews
    mark = best if row["best"] else (" ≈" if row["tied"] else "")
    unit = row["primary_unit"]
    return f"{fmt(unit, row['primary_value'])} [{fmt(unit, row['ci_low'])}, {fmt(unit, row['ci_high'])}]{mark}"


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
    best = _best_first(frame).drop_duplicates(["task", "system"])
    table = best.assign(cell=best.apply(cell, axis=1)).pivot(index="task", columns="system", values="cell")
    metric = best.drop_duplicates("task").set_index("task")["primary_metric"]
    table.insert(0, "metric", metric.reindex(table.index))
    return table.fillna("")


def pareto(frame: pd.DataFrame) -> pd.DataFrame:
    """Runs on the cost-quality Pareto front of each task (fewer tokens per item, better primary metric).

    Within a task, sorted by cost (and by quality, best first, at equal cost), a run is on the front when
    it beats every cheaper run.
    """
    signed = frame.assign(_q=_signed(frame))
    ordered = signed.sort_values(["task", "tokens_per_item", "_q"], ascending=[True, True, False])
    before = ordered.groupby("task")["_q"].transform(lambda v: v.cummax().shift(fill_value=float("-inf")))
    return ordered[ordered["_q"] > before].drop(columns="_q")


def _best_first(frame: pd.DataFrame) -> pd.DataFrame:
    """Full runs before ``--limit`` previews, then the better primary value first (by the metric's direction)."""
    return frame.assign(_signed=_signed(frame)).sort_values(["submittable", "_signed"], ascending=False).drop(columns="_signed")


def _signed(frame: pd.DataFrame) -> pd.Series:
    """The primary value oriented so that larger is better (metrics such as SelfCheckGPT are lower-better)."""
    if "higher_is_better" not in frame:
        return frame["primary_value"]
    return frame["primary_value"].where(frame["higher_is_better"].fillna(True).astype(bool), -frame["primary_value"])


def cells(frame: pd.DataFrame, by: tuple[str, ...] = ("task", "system", "model")) -> pd.DataFrame:
    """The best run of each group (full runs before ``--limit`` previews), for charts that would drown in every run."""
    return _best_first(frame).drop_duplicates(list(by))


@dataclass(frozen=True)
class RunDetail:
    """What the run page shows: metrics with their declarations, the manifest, the verdict."""

    metrics: dict[str, MetricValue]
    specs: dict[str, MetricSpec]
    manifest: Manifest
    reasons: list[str]
    tier: str

    def metric_rows(self) -> list[dict[str, str]]:
        """Each metric in its own unit, the way the command line prints it."""
        rows = []
        for name, value in self.metrics.items():
            spec = self.specs.get(name) or MetricSpec(name=name, label=name, unit="score")
            rows.append({"metric": spec.title(), "value": spec.format(value.value),
                         "95% CI": f"[{spec.format(value.ci_low)}, {spec.format(value.ci_high)}]"})  # fmt: skip
        return rows


def run_detail(path: Path, run_id: str) -> RunDetail | None:
    with connect(path, read_only=True) as conn:
        have = {row[0] for row in conn.execute("DESCRIBE runs").fetchall()}
        specs_column = "metric_specs" if "metric_specs" in have else "NULL"
        row = conn.execute(f"SELECT metrics, manifest, reasons, tier, {specs_column} FROM runs WHERE run_id = ?", [run_id]).fetchone()
    if row is None:
        return None
    declared = [MetricSpec.model_validate(m) for m in json.loads(row[4] or "[]")]
    legacy = {m.name: m for m in (*CLASSIFICATION_METRICS, *TEXT_METRICS)}  # stores written before the declarations
    metrics = {k: MetricValue.model_validate(v) for k, v in json.loads(row[0]).items()}
    specs = {m.name: m for m in declared} or {k: legacy[k] for k in metrics if k in legacy}
    return RunDetail(metrics, specs, Manifest.model_validate(json.loads(row[1])), json.loads(row[2] or "[]"), row[3])


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


HEATMAP_ROW_PX = 44
HEATMAP_MARGIN_PX = 140  # axes, their titles and the colour legend


def heatmap_height(best: pd.DataFrame) -> int:
    """Pixels the heatmap needs: a readable row per task plus its axes."""
    return HEATMAP_ROW_PX * max(1, best["task"].nunique()) + HEATMAP_MARGIN_PX


def legend_title(best: pd.DataFrame) -> str:
    """The colour legend's title in the unit the cells are written in."""
    units = set(best["primary_unit"])
    names = {"fraction": "%", "score": "score", "scale": "1-5"}
    return "primary metric (" + ", ".join(names.get(u, u) for u in sorted(units)) + ")"


def heatmap_spec(best: pd.DataFrame) -> dict[str, Any]:
    """Vega-Lite spec: task x system, coloured by the primary metric of each cell's best run, each cell
    labelled with its value in the metric's unit. Rendered as SVG, so every label is text in the page."""
    tooltip = ["task", "system", "model", "tier", "value", "ci", "tied"]
    low, high = best["primary_value"].min(), best["primary_value"].max()
    spread = (high - low) or 1.0
    frame = best.assign(
        # the colour scale reads in the cells' unit (fractions in %), so the legend and the labels agree
        shown=[100 * v if u == "fraction" else v for u, v in zip(best["primary_unit"], best["primary_value"])],
        bright=((best["primary_value"] - low) / spread > 0.55),  # viridis' bright end: dark text there
        value=[fmt(u, v) for u, v in zip(best["primary_unit"], best["primary_value"])],
        ci=[f"[{fmt(u, lo)}, {fmt(u, hi)}]" for u, lo, hi in zip(best["primary_unit"], best["ci_low"], best["ci_high"])],
    )
    axis = {"labelLimit": 0, "labelFontSize": 12, "titleFontSize": 12}
    x = {"field": "system", "type": "nominal", "title": "system", "axis": {**axis, "labelAngle": -30}}
    y = {"field": "task", "type": "nominal", "title": "task", "axis": axis}
    return {
        "data": {"values": _records(frame, [*tooltip, "shown", "bright"])},
        "height": HEATMAP_ROW_PX * max(1, best["task"].nunique()),
        "width": "container",
        "usermeta": {"embedOptions": {"renderer": "svg", "actions": False}},
        "layer": [
            {
                "mark": "rect",
                "encoding": {
                    "x": x, "y": y,
                    "color": {"field": "shown", "type": "quantitative", "title": legend_title(best), "scale": {"scheme": "viridis"},
                              "legend": {"format": ".3~f"}},
                    "tooltip": [{"field": f} for f in tooltip],
                },
            },
            {
                "mark": {"type": "text", "fontSize": 12},
                "encoding": {
                    "x": x, "y": y, "text": {"field": "value"},
                    "color": {"condition": {"test": "datum.bright", "value": "black"}, "value": "white"},
                },
            },
        ],
    }  # fmt: skip


def cost_label(row: pd.Series) -> str:
    """Cost per item as a reader wants it: free when no LLM ran, calls and tokens (and $) otherwise."""
    calls, tokens, usd = row.get("calls_per_item"), row.get("tokens_per_item"), row.get("usd_per_item")
    if calls is None or calls != calls:
        return "not recorded"
    if calls == 0:
        return "free (no LLM)"
    text = f"{calls:g} call{'' if calls == 1 else 's'}, {tokens:,.0f} tokens"
    if usd is not None and usd == usd:
        text += f", ${usd:.4f}" if usd < 0.01 else f", ${usd:.3f}"
    local = str(row.get("model", "")).startswith(("embedded", "llamacpp", "ollama"))
    return text + (" (local model)" if local else "")


def cost_table(best: pd.DataFrame) -> pd.DataFrame:
    """The rows under the cost chart, every number in its unit."""
    return pd.DataFrame({
        "task": best["task"], "system": best["system"], "model": best["model"], "tier": best["tier"],
        "primary metric": [fmt(u, v) for u, v in zip(best["primary_unit"], best["primary_value"])],
        "cost per item": best.apply(cost_label, axis=1),
    })  # fmt: skip


def plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def cost_spec(points: pd.DataFrame, front: pd.DataFrame) -> dict[str, Any]:
    """Vega-Lite spec: tokens per item against the primary metric, with each task's Pareto front dashed."""
    fields = ["task", "system", "model", "calls_per_item", "tokens_per_item", "usd_per_item", "primary_value"]
    x = {"field": "tokens_per_item", "type": "quantitative", "title": "LLM tokens per item", "axis": {"format": ",.0f"}}
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
