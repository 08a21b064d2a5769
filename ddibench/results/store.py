"""The leaderboard's results store (DuckDB): verified runs, their per-sample detail, precomputed ties.

* ``runs`` — one row per run: task, system, model, profile, trust tier, the primary metric with its
  interval, its unit and direction, every metric and its declaration (JSON), the scoring variant,
  cost per item (calls, tokens, and US dollars where a price is known: ddibench.prices), the tie verdict against
  the best run of its task and variant, and the manifest (JSON).
* ``samples`` — per-sample input, gold, prediction, score, trace and the evaluator's *unit* record
  (what the paired comparison resamples), read only for a drill-down or a tie computation.
* ``floors`` — what answers without skill score on each task's evaluation split (the evaluator's
  majority or popularity floor and its uniform-random floor), one row per task, scoring variant and
  floor, with its metrics (JSON) and a note saying what it answers. Recomputed here from the task data
  when the first run of a task, scoring variant and task version is added: a bundle's own floors are
  its author's claim and are never read.

Ties are recomputed for a task whenever one of its runs is added: each run is compared with the best
run of the same task and scoring variant on their shared samples, with the evaluator's own paired
cluster bootstrap (:meth:`ddibench.evaluation.BaseEvaluator.paired`). Runs scored differently (another
probe, another encoder) sit in their own variant and are never ranked against each other. The board
reads the small ``runs`` table at start-up and touches ``samples`` only on demand.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ddibench.errors import ConfigError
from ddibench.evaluation.floors import floor_note
from ddibench.prices import Price, load_prices, price_for
from ddibench.schema import LabelSpace

if TYPE_CHECKING:
    from ddibench.evaluation import Evaluator
    from ddibench.submission import Verdict
    from ddibench.task import Task, TaskData

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
    # added with the evaluators' metric declarations (rows written before them are filled by _fill_undeclared)
    "ALTER TABLE runs ADD COLUMN IF NOT EXISTS primary_unit VARCHAR",
    "ALTER TABLE runs ADD COLUMN IF NOT EXISTS higher_is_better BOOLEAN",
    "ALTER TABLE runs ADD COLUMN IF NOT EXISTS metric_specs VARCHAR",
    "ALTER TABLE runs ADD COLUMN IF NOT EXISTS scoring_variant VARCHAR DEFAULT ''",
    "ALTER TABLE samples ADD COLUMN IF NOT EXISTS units VARCHAR",
    # added with sample-by-sample reproduction (how many predictions a re-run reproduced, under which tolerance)
    "ALTER TABLE runs ADD COLUMN IF NOT EXISTS reproduction VARCHAR",
    # added with the floors beside each task (stores written before them get them as runs are added)
    """CREATE TABLE IF NOT EXISTS floors (
        task VARCHAR, scoring_variant VARCHAR, task_version VARCHAR, data_sha256 VARCHAR, name VARCHAR, metrics VARCHAR, note VARCHAR)""",
    # the sample's place in the run's selection: a run's page shows the first samples, whose whole traces
    # a compact bundle keeps (NULL in older rows: those pages fall back to sample id order)
    "ALTER TABLE samples ADD COLUMN IF NOT EXISTS position INTEGER",
    # how a run's answers spread over the labels (the evaluator's AnswerDistribution, JSON) and whether they
    # collapsed; the run's variant as its manifest records it (its system's variant keys set off their defaults)
    "ALTER TABLE runs ADD COLUMN IF NOT EXISTS answers VARCHAR",
    "ALTER TABLE runs ADD COLUMN IF NOT EXISTS collapsed BOOLEAN DEFAULT FALSE",
    "ALTER TABLE runs ADD COLUMN IF NOT EXISTS variant VARCHAR DEFAULT ''",
    # whether the stored trace is the sample's whole trace (a compact bundle keeps a seeded handful whole; its
    # older bundles, the first few): a run's page shows those first (NULL in older rows: position order)
    "ALTER TABLE samples ADD COLUMN IF NOT EXISTS whole_trace BOOLEAN",
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
    if not read_only and not path.parent.is_dir():
        raise ConfigError(
            f"results store {path}: directory {path.parent} does not exist",
            "create it first, or give --store a path in an existing directory",
        )
    try:
        conn = duckdb.connect(str(path), read_only=read_only)
    except duckdb.Error as exc:
        from ddibench.errors import StorageError

        reason = " ".join(str(exc).split())
        raise StorageError(
            f"cannot open the results store {path} ({reason})",
            "give --store a DuckDB file this ddibench wrote, that no other process holds open",
        ) from None
    if read_only:
        version = (str(path.resolve()), path.stat().st_mtime_ns)
        if version not in _CURRENT_LAYOUT:  # the board opens a store once per read: check each version of it once
            _refuse_outdated(conn, path)
            _CURRENT_LAYOUT.add(version)
    else:
        upgrade(conn)
    return conn


# Stores written by earlier builds are brought to the current layout in one place, here, when a store is opened
# for writing; every reader assumes the current layout. A read-only open of an older store is refused with the
# command that upgrades it (the board's reader never writes).
def upgrade(conn: Any) -> None:
    """Bring an open store to the current layout: the schema's additions, then the rows written before them
    (in one transaction: a store is upgraded whole or not at all)."""
    conn.execute("BEGIN TRANSACTION")
    try:
        for statement in SCHEMA:
            conn.execute(statement)
        _fill_undeclared(conn)
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


# the metrics whose values were fractions before runs declared their units (the classification metrics)
_UNDECLARED_FRACTIONS = ("accuracy", "macro_f1", "kappa", "label_recovery")


def _fill_undeclared(conn: Any) -> None:
    """Rows written before the evaluators' metric declarations: their primary metric's unit and direction, their
    metrics' declarations, and each sample's unit record (the paired comparison's input), from what they stored."""
    conn.execute(
        "UPDATE runs SET primary_unit = CASE WHEN primary_metric IN ? THEN 'fraction' ELSE 'score' END,"
        " higher_is_better = primary_metric <> 'selfcheck' WHERE primary_unit IS NULL",
        [list(_UNDECLARED_FRACTIONS)],
    )
    from ddibench.runner.records import schema1_metric_specs

    for run_id, metrics in conn.execute("SELECT run_id, metrics FROM runs WHERE metric_specs IS NULL").fetchall():
        specs = [m.model_dump() for m in schema1_metric_specs(json.loads(metrics or "{}"))]
        conn.execute("UPDATE runs SET metric_specs = ? WHERE run_id = ?", [json.dumps(specs), run_id])
    rows = conn.execute(
        "SELECT s.rowid, r.primary_metric, s.label, s.gold_label, s.score, s.valid FROM samples s"
        " JOIN runs r USING (run_id) WHERE s.units IS NULL"
    ).fetchall()
    if rows:
        conn.executemany(
            "UPDATE samples SET units = ? WHERE rowid = ?",
            [[json.dumps(_undeclared_units(metric, *values)), rowid] for rowid, metric, *values in rows],
        )


def _undeclared_units(metric: str, label: Any, gold_label: Any, score: Any, valid: Any) -> dict[str, Any]:
    """The unit record of a sample row stored before units were, from its label, gold label, score and validity."""
    if gold_label is not None and metric in ("accuracy", "macro_f1", "kappa"):
        return {"pred": label if valid and label is not None else -1, "gold": gold_label}
    return {metric: score}


_CURRENT_LAYOUT: set[tuple[str, int]] = set()  # (store path, modification time) found in the current layout


def _refuse_outdated(conn: Any, path: Path) -> None:
    """A read-only store must have the current layout: every column the schema adds and no row left to fill."""
    have = {
        (t, c) for t, c in conn.execute("SELECT table_name, column_name FROM information_schema.columns").fetchall()
    }
    missing = [f"{t}.{c}" for t, c in _LAYOUT if (t, c) not in have]
    if not missing:
        unfilled = conn.execute(
            "SELECT (SELECT count(*) FROM runs WHERE primary_unit IS NULL OR metric_specs IS NULL)"
            " + (SELECT count(*) FROM samples WHERE units IS NULL)"
        ).fetchone()[0]
        if not unfilled:
            return
    from ddibench.errors import StorageError

    conn.close()
    raise StorageError(
        f"results store {path} was written by an earlier ddibench ({', '.join(missing) or 'rows without metric declarations'})",
        f"upgrade it in place once with 'ddibench board upgrade --store {path}'",
    )


# (table, column) of everything the schema adds after the first layout, read from SCHEMA itself
_LAYOUT = [
    (m[1], m[2])
    for statement in SCHEMA
    if (m := re.match(r"ALTER TABLE (\w+) ADD COLUMN IF NOT EXISTS (\w+)", statement))
] + [("floors", "task")]


def scoring_variant(evaluator: Evaluator) -> str:
    """The board groups runs by how they were scored: '' for the task's default scorers at version 1;
    scorers of another version or with options that change scores form their own group and are never ranked
    with it (options that only add model-based scores, such as a judge, do not: ``ScoringOption.variant``)."""
    parts = [f"{k}={v}" for k, v in sorted(evaluator.variant_settings().items())]
    if evaluator.version != 1:
        parts.insert(0, f"{evaluator.kind} scorers v{evaluator.version}")
    return ", ".join(parts)


FloorRow = tuple[str, dict[str, float], str]  # (floor name, its metrics, the note saying what it answers)


def add_run(
    path: Path,
    verdict: Verdict,
    prices: dict[str, Price] | None = None,
    ties: bool = True,
    floors: list[FloorRow] | None = None,
) -> str:
    """Store a run from a :class:`ddibench.submission.Verdict` (its tier decides which metrics are shown).
    ``ties=False`` leaves the task's tie verdicts to one :func:`update_ties` after a batch of runs; ``floors``:
    the task's floors as computed before (for its current version and data), where the store has none yet."""
    from ddibench.registry import get_task

    run, results = verdict.run, verdict.results
    if run is None or results is None:  # a bundle whose files could not be read: nothing to show
        raise ConfigError(
            "a bundle that could not be read has no run to store", "check it with 'ddibench verify BUNDLE'"
        )
    task = get_task(run.task.name)
    evaluator = verdict.evaluator or task.evaluator()
    data = task.load()
    variant = scoring_variant(evaluator)
    run_row = _run_row(verdict, task, variant, prices if prices is not None else load_prices())
    sample_rows = _sample_rows(verdict, evaluator, data)
    conn = connect(path)
    try:
        previous = conn.execute(
            "SELECT run_id FROM runs WHERE task = ? AND scoring_variant = ? AND best", [task.name, variant]
        ).fetchone()
        if _has_floors(conn, task, variant):
            floors = None
        elif floors is None:
            floors = floor_rows(task, evaluator, data)
        conn.execute("BEGIN")
        if floors is not None:
            _replace_floors(conn, task, variant, floors)
        conn.execute("DELETE FROM runs WHERE run_id = ?", [run.run_id])
        conn.execute("DELETE FROM samples WHERE run_id = ?", [run.run_id])
        conn.execute(
            "INSERT INTO runs (run_id, task, family, setting, system, system_version, config_hash, model, profile, tier, submittable, n,"
            " primary_metric, primary_value, ci_low, ci_high, metrics, calls_per_item, tokens_per_item, usd_per_item, manifest, reasons,"
            " primary_unit, higher_is_better, metric_specs, scoring_variant, reproduction, answers, collapsed, variant)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            run_row,
        )
        if sample_rows:
            _insert_samples(conn, sample_rows)
        conn.execute("COMMIT")
        if ties:
            update_ties(conn, task.name, variant, added=run.run_id, previous_best=previous[0] if previous else None)
    finally:
        conn.close()
    return run.run_id


def _run_row(verdict: Verdict, task: Task, variant: str, prices: dict[str, Price]) -> list[Any]:
    """The run's row of the ``runs`` table, in the column order of :func:`add_run`'s insert."""
    run, results = verdict.run, verdict.results
    assert run is not None and results is not None
    evaluation = verdict.evaluation
    primary = evaluation.primary_metric
    spec, metric = evaluation.spec(primary), evaluation.metrics[primary]
    manifest = results.manifest
    cost = verdict.cost or results.cost  # recomputed from the traces when the bundle was verified
    usd = None
    models = manifest.models
    priced = [
        (price_for(models[role].spec, prices) if role in models else None, v) for role, v in cost.per_item.items()
    ]
    if priced and all(price for price, _ in priced):
        usd = sum(price.usd(v.prompt_tokens, v.completion_tokens) for price, v in priced if price)
    return [
        run.run_id,
        task.name,
        task.family,
        task.setting,
        run.system.name,
        run.system.version,
        run.system.config_hash,
        manifest.answer_model,
        manifest.profile.name,
        verdict.tier,
        bool(manifest.submittable),
        evaluation.n,
        primary,
        metric.value,
        metric.ci_low,
        metric.ci_high,
        json.dumps({k: v.model_dump() for k, v in evaluation.metrics.items()}),
        cost.calls_per_item if cost.recorded else None,
        cost.tokens_per_item if cost.recorded else None,
        usd,
        json.dumps(manifest.dump()),
        json.dumps(verdict.reasons),
        spec.unit,
        spec.higher_is_better,
        json.dumps([m.model_dump() for m in evaluation.metric_specs]),
        variant,
        json.dumps(verdict.reproduction) if verdict.reproduction else None,
        evaluation.answers.model_dump_json() if evaluation.answers else None,
        # as the run recorded them, never as the code installed here says: a bundle gives the same row everywhere
        bool(evaluation.answers and evaluation.answers.collapsed and not manifest.system.constant_answer),
        manifest.system.variant,
    ]


def _sample_rows(verdict: Verdict, evaluator: Evaluator, data: TaskData) -> list[list[Any]]:
    """Each answered sample's row of the ``samples`` table: as the evaluator shows it, with its unit record,
    its whole trace where verify kept it, and its place in the run's selection."""
    run = verdict.run
    assert run is not None
    evaluation = verdict.evaluation
    samples = {s.id: s for s in data.split(run.split)}
    shared = [samples[sid] for sid in verdict.predictions if sid in samples]
    position = {s.id: i for i, s in enumerate(verdict.samples or data.split(run.split))}
    compact = verdict.bundle.compact if verdict.bundle is not None else None
    whole = set(compact.whole_ids(list(position))) if compact is not None else None  # None: every trace whole
    units = evaluator.units(shared, verdict.predictions, evaluation) if shared else []
    rows = []
    for sample, unit in zip(shared, units):
        pred = verdict.predictions[sample.id]
        view = evaluator.sample_view(sample, pred, evaluation)
        trace = verdict.traces.get(sample.id) or json.dumps(
            pred.trace
        )  # whole traces, kept by verify(keep_traces=True)
        rows.append(
            [
                run.run_id,
                sample.id,
                json.dumps(sample.input.as_dict()),
                view.gold,
                view.predicted,
                view.score,
                pred.label,
                view.gold_label,
                pred.valid,
                trace[:200_000],
                json.dumps(unit),
                position.get(sample.id),
                whole is None or sample.id in whole,
            ]
        )
    return rows


_SAMPLE_COLUMNS = (
    "run_id", "sample_id", "input", "gold", "prediction", "score", "label", "gold_label", "valid", "trace", "units", "position",
    "whole_trace",
)  # fmt: skip


def _insert_samples(conn: Any, rows: list[list[Any]]) -> None:
    """Insert sample rows in one columnar batch (DuckDB's executemany inserts row by row: minutes for a board)."""
    import pyarrow as pa

    columns = list(zip(*rows))
    types = {
        "score": pa.float64(),
        "label": pa.int32(),
        "gold_label": pa.int32(),
        "valid": pa.bool_(),
        "position": pa.int32(),
        "whole_trace": pa.bool_(),
    }
    table = pa.table(
        {name: pa.array(values, type=types.get(name, pa.string())) for name, values in zip(_SAMPLE_COLUMNS, columns)}
    )
    conn.register("new_samples", table)
    try:
        conn.execute(f"INSERT INTO samples ({', '.join(_SAMPLE_COLUMNS)}) SELECT * FROM new_samples")
    finally:
        conn.unregister("new_samples")


def floor_rows(task: Task, evaluator: Evaluator, data: TaskData) -> list[FloorRow]:
    """(name, metrics, note) of each of the evaluator's floors on the task's whole evaluation split, from
    the training split's targets where the task has one (as ``ddibench run`` computes them)."""
    train = data.split("train") if "train" in data.splits else ()
    floors = evaluator.floors(data.split(task.eval_split), train)
    return [
        (name, dict(floor["metrics"]), floor_note(name, floor, _label_namer(task.label_space)))
        for name, floor in floors.items()
        if isinstance(floor, Mapping) and "metrics" in floor
    ]


def _label_namer(labels: LabelSpace) -> Callable[[int], str]:
    return lambda label_id: labels[label_id].name if 0 <= label_id < len(labels) else str(label_id)


def _has_floors(conn: Any, task: Task, variant: str) -> bool:
    row = conn.execute(
        "SELECT count(*) FROM floors WHERE task = ? AND scoring_variant = ? AND task_version = ? AND data_sha256 = ?",
        [task.name, variant, task.version, task.data_sha256],
    ).fetchone()
    return bool(row[0])


def _replace_floors(conn: Any, task: Task, variant: str, rows: list[FloorRow]) -> None:
    """The floors of a task and scoring variant, for the task's current version and data (older ones go)."""
    conn.execute("DELETE FROM floors WHERE task = ? AND scoring_variant = ?", [task.name, variant])
    if rows:
        conn.executemany(
            "INSERT INTO floors (task, scoring_variant, task_version, data_sha256, name, metrics, note) VALUES (?, ?, ?, ?, ?, ?, ?)",
            [
                [task.name, variant, task.version, task.data_sha256, name, json.dumps(metrics), note]
                for name, metrics, note in rows
            ],
        )


def set_ties(path: Path, ties: Mapping[str, Mapping[str, Any]]) -> None:
    """Set runs' tie verdicts as computed before (run id: best, tied, diff, diff_low, diff_high), in one transaction."""
    if not ties:
        return
    conn = connect(path)
    try:
        conn.execute("BEGIN")
        conn.executemany(
            "UPDATE runs SET best = ?, tied = ?, diff = ?, diff_low = ?, diff_high = ? WHERE run_id = ?",
            [[t["best"], t["tied"], t["diff"], t["diff_low"], t["diff_high"], run_id] for run_id, t in ties.items()],
        )
        conn.execute("COMMIT")
    finally:
        conn.close()


def update_all_ties(path: Path) -> None:
    """Every task's tie verdicts, computed afresh (after runs were added with ``ties=False``)."""
    conn = connect(path)
    try:
        groups = conn.execute(
            "SELECT DISTINCT task, scoring_variant FROM runs ORDER BY task, scoring_variant"
        ).fetchall()
        for task_name, variant in groups:
            update_ties(conn, task_name, variant)
    finally:
        conn.close()


def update_ties(
    conn: Any, task_name: str, variant: str = "", added: str | None = None, previous_best: str | None = None
) -> None:
    """Mark the best run of a task (within one scoring variant) and, for every other run, whether it is
    statistically tied with it.

    When a run was ``added`` and the best run stayed ``previous_best``, only the added run is compared
    (one paired bootstrap); otherwise every run of the task and variant is compared with the new best.
    """
    from ddibench.registry import get_task

    # the best run is the best submittable one; previews made with --limit are compared with it and never
    # best while a full run exists (a task with previews only is compared against its best preview)
    higher = conn.execute(
        "SELECT coalesce(bool_and(higher_is_better), TRUE) FROM runs WHERE task = ? AND scoring_variant = ?",
        [task_name, variant],
    ).fetchone()[0]
    order = "DESC" if higher else "ASC"
    runs = conn.execute(
        f"SELECT run_id, primary_metric FROM runs WHERE task = ? AND scoring_variant = ? ORDER BY submittable DESC, primary_value {order}, run_id",
        [task_name, variant],
    ).fetchall()
    if not runs:
        return
    task = get_task(task_name)
    evaluator = task.evaluator()
    best_id, metric = runs[0]
    incremental = added is not None and best_id == previous_best and added != best_id
    if incremental:
        others = [added]
    else:
        others = [r[0] for r in runs[1:]]
        conn.execute(
            "UPDATE runs SET best = (run_id = ?), tied = (run_id = ?), diff = NULL, diff_low = NULL, diff_high = NULL WHERE task = ? AND scoring_variant = ?",
            [best_id, best_id, task_name, variant],
        )
    samples = {s.id: s for s in task.load().split(task.eval_split)}

    def units_of(run_id: str) -> dict[str, dict[str, Any]]:
        rows = conn.execute("SELECT sample_id, units FROM samples WHERE run_id = ?", [run_id]).fetchall()
        return {sample_id: json.loads(units) for sample_id, units in rows}

    best = units_of(str(best_id))
    for run_id in others:
        other = units_of(str(run_id))
        shared = [sid for sid in best if sid in other and sid in samples]
        if not shared:
            continue
        clusters = [samples[sid].clusters for sid in shared]
        diff, low, high = evaluator.paired(metric, clusters, [best[s] for s in shared], [other[s] for s in shared])
        conn.execute(
            "UPDATE runs SET tied = ?, diff = ?, diff_low = ?, diff_high = ? WHERE run_id = ?",
            [bool(low <= 0 <= high), diff, low, high, run_id],
        )
