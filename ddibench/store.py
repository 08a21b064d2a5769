"""The leaderboard's results store (DuckDB): verified runs, their per-sample detail, precomputed ties.

* ``runs`` — one row per run: task, system, model, profile, trust tier, the primary metric with its
  interval, every metric (JSON), cost per item (calls, tokens, and US dollars where a price is
  configured), the tie verdict against the task's best run, and the manifest (JSON).
* ``samples`` — per-sample input, gold, prediction, score and trace, read only for a drill-down.

Ties are recomputed for a task whenever one of its runs is added: each run is compared with the
task's best run on their shared samples with a paired cluster bootstrap (:mod:`ddibench.metrics.paired`).
The board reads the small ``runs`` table at start-up and touches ``samples`` only on demand.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from ddibench.errors import ConfigError

DEFAULT_STORE = "board.duckdb"
SCHEMA = [
    """CREATE TABLE IF NOT EXISTS runs (
        run_id VARCHAR PRIMARY KEY, task VARCHAR, family VARCHAR, setting VARCHAR, system VARCHAR,
        system_version VARCHAR, config_hash VARCHAR, model VARCHAR, profile VARCHAR, tier VARCHAR,
        submittable BOOLEAN, n INTEGER, primary_metric VARCHAR, primary_value DOUBLE, ci_low DOUBLE,
        ci_high DOUBLE, metrics VARCHAR, calls_per_item DOUBLE, tokens_per_item DOUBLE,
        usd_per_item DOUBLE, best BOOLEAN DEFAULT FALSE, tied BOOLEAN DEFAULT FALSE, diff DOUBLE,
        diff_low DOUBLE, diff_high DOUBLE, manifest VARCHAR, reasons VARCHAR, added TIMESTAMP DEFAULT current_timestamp)""",
    """CREATE TABLE IF NOT EXISTS samples (
        run_id VARCHAR, sample_id VARCHAR, input VARCHAR, gold VARCHAR, prediction VARCHAR,
        score DOUBLE, label INTEGER, gold_label INTEGER, valid BOOLEAN, trace VARCHAR)""",
    "CREATE INDEX IF NOT EXISTS samples_run ON samples (run_id)",
]


def store_path(value: str | Path | None = None) -> Path:
    return Path(value or os.environ.get("DDIBENCH_BOARD") or DEFAULT_STORE)


def connect(path: Path, read_only: bool = False) -> Any:
    try:
        import duckdb
    except ImportError:
        raise ConfigError("the results store needs duckdb", "pip install 'ddibench[board]'") from None
    if read_only and not path.exists():
        raise ConfigError(f"results store {path} does not exist", "add runs with 'ddibench board add BUNDLE'")
    conn = duckdb.connect(str(path), read_only=read_only)
    if not read_only:
        for statement in SCHEMA:
            conn.execute(statement)
    return conn


def load_prices() -> dict[str, dict[str, float]]:
    """Per-model prices (USD per 1,000 prompt / completion tokens) from $DDIBENCH_PRICES (a JSON file)."""
    path = os.environ.get("DDIBENCH_PRICES")
    return json.loads(Path(path).read_text(encoding="utf-8")) if path else {}


def add_run(path: Path, verdict: Any, prices: dict[str, dict[str, float]] | None = None) -> str:
    """Store a run from a :class:`ddibench.submission.Verdict` (its tier decides which metrics are shown)."""
    from ddibench.registry import get_task

    run, results = verdict.run, verdict.results
    task = get_task(run["task"]["name"])
    evaluation = verdict.recomputed or results["evaluation"]
    primary = evaluation["primary_metric"]
    manifest = results.get("manifest", {})
    models = manifest.get("models", {})
    model = models.get("generator", {}).get("spec") or (
        "—" if not models else next(iter(models.values()))["spec"]
    )
    cost = results.get("cost", {})
    per_item = cost.get("per_item", {})
    calls = sum(v.get("calls", 0) for v in per_item.values())
    tokens = sum(v.get("prompt_tokens", 0) + v.get("completion_tokens", 0) for v in per_item.values())
    usd = None
    prices = prices if prices is not None else load_prices()
    if per_item and all(models.get(role, {}).get("spec") in prices for role in per_item):
        usd = sum(
            v.get("prompt_tokens", 0) / 1000 * prices[models[role]["spec"]]["prompt"]
            + v.get("completion_tokens", 0) / 1000 * prices[models[role]["spec"]]["completion"]
            for role, v in per_item.items()
        )
    metric = evaluation["metrics"][primary]
    conn = connect(path)
    try:
        previous = conn.execute("SELECT run_id FROM runs WHERE task = ? AND best", [task.name]).fetchone()
        conn.execute("BEGIN")
        conn.execute("DELETE FROM runs WHERE run_id = ?", [run["run_id"]])
        conn.execute("DELETE FROM samples WHERE run_id = ?", [run["run_id"]])
        conn.execute(
            "INSERT INTO runs (run_id, task, family, setting, system, system_version, config_hash, model, profile, tier, submittable, n,"
            " primary_metric, primary_value, ci_low, ci_high, metrics, calls_per_item, tokens_per_item, usd_per_item, manifest, reasons)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                run["run_id"], task.name, task.family, task.setting, run["system"]["name"], run["system"]["version"],
                run["system"]["config_hash"], model, manifest.get("profile", {}).get("declared", {}).get("name", ""),
                verdict.tier, bool(manifest.get("submittable")), evaluation["n"], primary, metric["value"], metric["ci_low"],
                metric["ci_high"], json.dumps(evaluation["metrics"]), calls, tokens, usd, json.dumps(manifest), json.dumps(verdict.reasons),
            ],
        )  # fmt: skip
        samples = {s.id: s for s in task.load().split(run["split"])}
        per_sample = evaluation.get("per_sample", {})
        rows = []
        for sid, pred in verdict.predictions.items():
            sample = samples.get(sid)
            if sample is None:
                continue
            gold = sample.target
            gold_label = (
                gold if isinstance(gold, int) else (gold.get("label") if hasattr(gold, "get") else None)
            )
            names = (
                (sample.input.head.name, sample.input.tail.name)
                if hasattr(sample.input, "head")
                else ("#Drug1", "#Drug2")
            )
            gold_text = (
                task.label_space[gold].render(*names)
                if isinstance(gold, int)
                else str(gold.get("answer", ""))
                if hasattr(gold, "get")
                else str(gold)
            )
            predicted = pred.text or (
                task.label_space[pred.label].render(*names) if pred.label is not None else ""
            )
            score = (
                float(pred.valid and pred.label == gold)
                if isinstance(gold, int)
                else per_sample.get(sid, {}).get(primary)
            )
            rows.append([
                run["run_id"], sid, json.dumps(sample.input.as_dict()), gold_text, predicted,
                score, pred.label, gold_label, pred.valid, json.dumps(pred.trace)[:200_000],
            ])  # fmt: skip
        if rows:
            conn.executemany("INSERT INTO samples VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
        conn.execute("COMMIT")
        update_ties(conn, task.name, added=run["run_id"], previous_best=previous[0] if previous else None)
    finally:
        conn.close()
    return run["run_id"]


def update_ties(conn: Any, task_name: str, added: str | None = None, previous_best: str | None = None) -> None:
    """Mark the task's best run and, for every other run, whether it is statistically tied with it.

    When a run was ``added`` and the best run stayed ``previous_best``, only the added run is compared
    (one paired bootstrap); otherwise every run of the task is compared with the new best.
    """
    from ddibench.metrics.paired import paired_difference
    from ddibench.registry import get_task

    # the best run is the best submittable one; previews made with --limit are compared with it and never
    # best while a full run exists (a task with previews only is compared against its best preview)
    runs = conn.execute(
        "SELECT run_id, primary_metric, primary_value FROM runs WHERE task = ? ORDER BY submittable DESC, primary_value DESC, run_id",
        [task_name],
    ).fetchall()
    if not runs:
        return
    task = get_task(task_name)
    best_id, metric, _ = runs[0]
    incremental = added is not None and best_id == previous_best and added != best_id
    if incremental:
        others = [added]
    else:
        others = [r[0] for r in runs[1:]]
        conn.execute(
            "UPDATE runs SET best = (run_id = ?), tied = (run_id = ?), diff = NULL, diff_low = NULL, diff_high = NULL WHERE task = ?",
            [best_id, best_id, task_name],
        )
    samples = {s.id: s for s in task.load().split(task.eval_split)}

    def detail(run_id: str) -> dict[str, tuple[Any, ...]]:
        rows = conn.execute(
            "SELECT sample_id, label, gold_label, score, valid FROM samples WHERE run_id = ?", [run_id]
        ).fetchall()
        return {r[0]: r[1:] for r in rows}

    best = detail(best_id)
    for run_id in others:
        other = detail(run_id)
        shared = [sid for sid in best if sid in other and sid in samples]
        if not shared:
            continue
        clusters = [samples[sid].clusters for sid in shared]
        if metric in ("accuracy", "macro_f1", "kappa"):
            gold = np.array([best[s][1] for s in shared])
            a = np.array([best[s][0] if best[s][3] else -1 for s in shared])
            b = np.array([other[s][0] if other[s][3] else -1 for s in shared])
            diff, low, high = paired_difference(metric, clusters, gold, a, b, len(task.label_space))
        else:
            a = np.array([np.nan if best[s][2] is None else best[s][2] for s in shared], dtype=float)
            b = np.array([np.nan if other[s][2] is None else other[s][2] for s in shared], dtype=float)
            diff, low, high = paired_difference(metric, clusters, None, a, b)
        conn.execute(
            "UPDATE runs SET tied = ?, diff = ?, diff_low = ?, diff_high = ? WHERE run_id = ?",
            [bool(low <= 0 <= high), diff, low, high, run_id],
        )
