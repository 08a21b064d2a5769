"""The leaderboard as a static site and as a markdown table, both generated from the results store.

:func:`write_site` writes HTML pages that open from the file system (``file://``): no server, no network,
no script; the style is inline. ``index.html`` holds the best full run of each task (task, system, score,
model: narrow enough for a phone) and the task x system matrix with the floors of each task, one line a
task (previews made with ``--limit`` sit in a table of their own, never ranked nor marked);
``published.html`` holds the papers' published numbers (paper, method, model, value), never ranked;
``tasks/``, ``runs/`` and ``systems/`` hold a page per task (its runs sorted by score with their models,
every metric, the tie verdicts, its published numbers), per run (provenance, metrics, cost, the first
samples with their traces) and per system (paper, code, card, runs). :func:`markdown_table` is the full
results table (``docs/results.md``, ``results/README.md``) and :func:`ranked_table` the README's compact one: each
byte-stable for the same store.

Everything read from the store is escaped: a bundle is hostile input until verified, and its text (a
system name, a trace) is shown as text, never run, never a link. What verify does not check (a system
card's description and deviations, the adapter's source, hardware, code version, model names) is
marked as the submitter's own words, and a system this installation does not register is marked
``unregistered`` wherever its name appears. File names derived from stored names are sanitised.
"""

from __future__ import annotations

import hashlib
import html
import json
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ddibench.errors import ConfigError
from ddibench.evaluation.floors import floor_title
from ddibench.leaderboard import columns
from ddibench.leaderboard import data as board

TRACES_SHOWN = 5  # samples with their traces on a run page
TRACE_CHARS = 20_000  # of one trace: a page stays readable, the whole trace is in the bundle
SITE_MARKER = ".ddibench-site"  # a directory holding it was written here and may be replaced whole
LEGEND = (
    "Scores: primary metric [95% CI, clustered by drug or source document] of full runs; ★ best in the task; ≈ not "
    "significantly different from the best (paired bootstrap on shared samples); ⚠ answers collapsed onto one label "
    "(the run answers the same label for most items, far more than the gold does); after ' · ', the model an LLM "
    f"system ran on ({board.UNCHECKED}). Floors: what answers without skill score on the task's evaluation split, "
    "recomputed by the board. Previews (--limit) and the papers' published numbers are listed apart, never ranked."
)
KEY = (
    "★ best · ≈ tied with the best · ⚠ answers collapsed onto one label · after ' · ': the model · "
    "previews and published numbers apart, never ranked"
)
PUBLISHED_PAGE = "published.html"
NBSP = "\u00a0"  # keeps a mark on its value's line


@dataclass(frozen=True)
class SiteSummary:
    runs: int
    tasks: int
    systems: int

    def __str__(self) -> str:
        return f"{board.plural(self.runs, 'run')}, {board.plural(self.tasks, 'task')}, {board.plural(self.systems, 'system')}"


@dataclass(frozen=True)
class _Board:
    """Everything the pages show, read from the store once."""

    runs: pd.DataFrame
    floors: pd.DataFrame
    published: pd.DataFrame
    details: dict[str, board.RunDetail]
    probes: dict[str, Any] = field(default_factory=dict)  # model spec -> its memorisation probe

    @classmethod
    def read(cls, store: Path, probes: dict[str, Any] | None = None) -> _Board:
        runs = board.runs(store).sort_values(["task", "system", "run_id"], kind="stable")
        details = {run_id: board.run_detail(store, run_id) for run_id in runs["run_id"]}
        return cls(
            runs,
            board.floors(store),
            board.published(board.metric_specs(store)),
            {k: v for k, v in details.items() if v is not None},
            dict(probes or {}),
        )

    @property
    def full(self) -> pd.DataFrame:
        return board.split_previews(self.runs)[0]

    @property
    def previews(self) -> pd.DataFrame:
        return board.split_previews(self.runs)[1]

    @property
    def shown_published(self) -> pd.DataFrame:
        """The published numbers of the tasks this board has runs of."""
        return self.published[self.published["task"].isin(self.runs["task"])]


def write_site(store: Path, out: Path, probes: dict[str, Any] | None = None) -> SiteSummary:
    """Write the static site of ``store`` into the directory ``out``, whole or not at all: the pages go to
    a temporary directory beside ``out`` that replaces it (only a directory an earlier export wrote, or an
    empty one, is replaced). ``probes`` (model spec -> memorisation probe, :func:`board.read_probes`) are shown
    beside the runs of their model: a column of the runs tables and a note on each run page."""
    data = _Board.read(store, probes)
    pages = {"index.html": _index(data), PUBLISHED_PAGE: _published_page(data)}
    for task, runs in data.runs.groupby("task"):
        pages[_page("tasks", task)] = _task_page(str(task), runs, data)
    for _, run in data.runs.iterrows():
        if run["run_id"] in data.details:
            probe = board.probe_of(data.probes, run["model"])
            pages[_page("runs", run["run_id"])] = _run_page(run, data.details[run["run_id"]], store, probe)
    for system, runs in data.runs.groupby("system"):
        pages[_page("systems", system)] = _system_page(str(system), runs, data)
    _write_whole(out, pages)
    return SiteSummary(runs=len(data.runs), tasks=data.runs["task"].nunique(), systems=data.runs["system"].nunique())


def markdown_table(store: Path) -> str:
    """The board as GitHub markdown: a row per task, its primary metric, each system's best full run as
    value [95% CI] with ★ / ≈, and the task's floors; previews in a table of their own. The same store
    content gives the same bytes (no timestamps; tasks, systems and equal runs in a fixed order)."""
    runs = board.runs(store).sort_values(["task", "system", "run_id"], kind="stable")
    lines = []
    table = board.matrix(runs[runs["submittable"]], board.floors(store))
    if not table.empty:
        systems = set(runs["system"])
        llm = _ranked_models(runs[runs["submittable"]])
        header = [
            (_md(c) if c not in systems else _md_system(c)) + (" (LLM)" if _column_system(c) in llm else "")
            for c in table.columns
        ]
        lines += [_md_line([columns.TASK.header, *header]), _md_row(["---"] * (len(header) + 1))]
        lines += [_md_row([task, *(value or "—" for value in row)]) for task, row in table.iterrows()]
        lines += [
            "",
            "★ best in the task; ≈ not significantly different from the best (paired bootstrap on shared samples); "
            "95% intervals clustered by drug or source document; floors on the task's evaluation split."
            + (" ⚠ answers collapsed onto one label." if runs[runs["submittable"]]["collapsed"].any() else ""),
        ]
        if llm:
            lines += [
                "",
                "(LLM): a system whose answers an LLM writes; the others are trained models or floors. Their models: "
                + "; ".join(
                    f"{_md_system(system)}: {', '.join(board.md_code(m).replace('|', chr(92) + '|') for m in models)}"
                    for system, models in llm.items()
                )
                + ".",
            ]
    previews = runs[~runs["submittable"]]
    if not previews.empty:
        lines += ["", "Previews (`--limit`: metrics on the samples it drew; never ranked):", ""]
        shown = columns.MARKDOWN_PREVIEWS
        lines += [_md_row(c.header for c in shown), _md_row(["---"] * len(shown))]
        cells = [c.cells(previews) for c in shown]
        lines += [_md_line(_md_cell(c, column[i]) for c, column in zip(shown, cells)) for i in range(len(previews))]
        if previews["collapsed"].any():
            lines += [
                "",
                "⚠ collapsed: the run answers one label for most items, far more often than the gold holds it "
                "(`ddibench report` says which and how often).",
            ]
    return "\n".join(lines) + "\n"


def ranked_table(store: Path) -> str:
    """The README's compact table: one line per task that has ranked (full) runs, with its primary metric, its best
    run (★), the best run of a system whose answers an LLM writes (marked (LLM); ★ or ≈ where it is the best or tied
    with it) and the task's floors; the models of those LLM runs below. Every other run, and the previews, are in
    :func:`markdown_table` and on the static site. The same store content gives the same bytes."""
    runs = board.runs(store).sort_values(["task", "system", "run_id"], kind="stable")
    full = runs[runs["submittable"]]
    if full.empty:
        return "No ranked run yet: `--limit` previews are listed on the full table.\n"
    ordered = board.best_first(full)
    heads = board.task_heads(full)
    floors = board.floor_labels(full, board.floors(store))
    with_llm = ordered[[bool(board.short_model(m)) for m in ordered["model"]]]
    lines = [_md_row(c.header for c in columns.COMPACT), _md_row(["---"] * len(columns.COMPACT))]
    shown_llm: dict[str, set[str]] = {}
    for task in sorted(heads.index):
        best = ordered[ordered["task"] == task].iloc[0]
        llm = with_llm[with_llm["task"] == task]
        cells = [_ranked_cell(best)]
        cells.append(_ranked_cell(llm.iloc[0]) if len(llm) else "—")
        for run in [best, *([llm.iloc[0]] if len(llm) else [])]:
            if board.short_model(run["model"]):
                shown_llm.setdefault(str(run["system"]), set()).add(str(run["model"]))
        lines.append(
            _md_line([_md(task), _md(heads.loc[task, "primary_metric"]), *cells, _md(floors.get(task) or "—")])
        )
    lines += [
        "",
        "★ best in the task; ≈ not significantly different from the best (paired bootstrap on shared samples); "
        "95% intervals clustered by drug or source document; floors on the task's evaluation split."
        + (" ⚠ answers collapsed onto one label." if "⚠" in "".join(lines) else ""),
    ]
    if shown_llm:
        lines += [
            "",
            "(LLM): a system whose answers an LLM writes; the others are trained models or floors. Their models: "
            + "; ".join(
                f"{_md_system(system)}: {', '.join(board.md_code(m).replace('|', chr(92) + '|') for m in sorted(models))}"
                for system, models in sorted(shown_llm.items())
            )
            + ".",
        ]
    return "\n".join(lines) + "\n"


def _ranked_cell(run: pd.Series) -> str:
    """A run in the compact table: its system (and variant), (LLM) when an LLM wrote its answers, its value [95% CI]
    with its marks."""
    variant = " " + _md(f"[{run['variant']}]") if isinstance(run["variant"], str) and run["variant"] else ""
    llm = " (LLM)" if board.short_model(run["model"]) else ""
    return f"{_md_system(str(run['system']))}{variant}{llm} {_md(board.cell(run))}"


def _ranked_models(full: pd.DataFrame) -> dict[str, list[str]]:
    """Each system whose ranked runs used an LLM, and those runs' models (sorted), systems in name order."""
    out: dict[str, list[str]] = {}
    for system, models in full.groupby("system", sort=True)["model"]:
        named = sorted({str(m) for m in models if board.short_model(m)})
        if named:
            out[str(system)] = named
    return out


def _column_system(column: str) -> str:
    """The system of a matrix column ('gin [train_fraction=0.1]' is a variant of gin)."""
    return column.split(" [", 1)[0]


def _md_cell(column: columns.Column, value: object) -> str:
    """A cell of a markdown table as its column shows it: a system's name labelled when unregistered, a submitter's
    words in a code span, the board's own text escaped."""
    text = columns.text(value)
    if column.shows == "system":
        shown = _md_system(text)
    elif column.shows == "words":
        shown = board.md_code(text).replace("|", "\\|")
    else:
        shown = _md(text)
    return shown or column.empty


def _md_row(cells: Iterable[object]) -> str:
    return _md_line(_md(c) for c in cells)


def _md_line(cells: Iterable[str]) -> str:
    """A table row of cells that are markdown already (escaped where they hold stored text)."""
    return "| " + " | ".join(cells) + " |"


def _md_system(name: str) -> str:
    """A system's name as a table cell: a registered one as :func:`_md` writes it, any other in a code
    span (shown as written, never a link) and labelled; a '|' in it escaped, as GitHub's tables need."""
    return _md(name) if board.is_registered(name) else board.system_md(name).replace("|", "\\|")


def _md(value: object) -> str:
    """This board's own text as one markdown table cell: one line, no cell break, no HTML, no link (a
    submitter's words go through :func:`_md_system`)."""
    text = re.sub(r"([\\|<>])", r"\\\1", " ".join(str(value).split()))
    return text.replace("](", "]\\(")


# ---- pages -------------------------------------------------------------------------------------------


def _index(data: _Board) -> str:
    full = data.full
    n_tasks, n_systems = data.runs["task"].nunique(), data.runs["system"].nunique()
    body = [
        "<h1>ddibench leaderboard</h1>",
        f'<p class="summary">{board.plural(len(data.runs), "run")} · {board.plural(n_tasks, "task")} · {board.plural(n_systems, "system")}</p>',
        f'<details class="legend"><summary>{_e(KEY)}</summary>{_e(LEGEND)}</details>',
    ]
    if not full.empty:
        body += [
            "<h2>Best full run of each task</h2>",
            _leaders(full),
            "<h2>Tasks × systems</h2>",
            "<p>Each system's best full run; a task's page ranks all of them, with every metric.</p>",
            _matrix(full, data),
        ]
    if not data.previews.empty:
        body += [
            '<h2 id="previews">Previews <span class="tag">not ranked</span></h2>',
            "<p>Runs made with <code>--limit</code>: their metrics are recomputed on the samples it drew, and they are never ranked.</p>",
            _previews_table(data.previews),
        ]
    numbers = data.shown_published
    if not numbers.empty:
        body += [
            '<h2>Published <span class="tag">not ranked</span></h2>',
            f"<p>The papers' own numbers on their own splits, in each metric's unit: <a href=\"{PUBLISHED_PAGE}\">"
            f"{board.plural(len(numbers), 'number')} for {board.plural(numbers['task'].nunique(), 'task')}</a> "
            "(each task's page lists its own).</p>",
        ]
    body += [
        "<h2>Systems</h2>",
        "<ul>" + "".join(f"<li>{_system_link('', s)}</li>" for s in sorted(data.runs["system"].unique())) + "</ul>",
    ]
    return _html("ddibench leaderboard", "\n".join(body), root="")


def _leaders(full: pd.DataFrame) -> str:
    """One row per task: its best full run's system, score (linked to the run) and model; narrow enough for a phone."""
    best = board.best_first(full).drop_duplicates("task").sort_values("task")
    return _table(_headers(columns.LEADERS), _rows(columns.LEADERS, best, root=""), "leaders", wrap=True)


def _score(run: pd.Series) -> str:
    """A run's value, interval (left out on a phone's width) and marks, linked to the run's page."""
    unit = run["primary_unit"]
    ci = f" [{board.fmt(unit, run['ci_low'])}, {board.fmt(unit, run['ci_high'])}]"
    href, marks = _e(_page("runs", run["run_id"])), _e(board.marks(run).replace(" ", NBSP))
    return f'<a href="{href}">{_e(board.fmt(unit, run["primary_value"]))}<span class="ci">{_e(ci)}</span>{marks}</a>'


def _model(spec: object) -> str:
    """The short name of a run's model (the submitter's word), '' for a run without an LLM."""
    short = board.short_model(spec)
    return f'<span class="model">{_e(short)}</span>' if short else ""


def _matrix(full: pd.DataFrame, data: _Board) -> str:
    """Task x system, one line a task: each cell the best full run (linked to its page) with the model an LLM
    system ran on, then the floors."""
    best = board.cells(full, ("task", "system", "variant")).set_index(["task", "system", "variant"])
    heads = board.task_heads(full)
    floors = board.floor_labels(full, data.floors)
    systems = sorted(set(zip(full["system"], full["variant"])))
    header = [
        *_headers(columns.MATRIX_HEAD),
        *(_system_link("", s) + (f" [{_e(v)}]" if v else "") for s, v in systems),
        *_headers(columns.MATRIX_TAIL),
    ]
    rows = []
    for task in sorted(heads.index):
        cells = [_link(_page("tasks", task), task), _e(heads.loc[task, "primary_metric"])]
        for s in systems:
            run = best.loc[(task, *s)] if (task, *s) in best.index else None
            model = _model(run["model"]) if run is not None else ""
            cells.append(
                _link(_page("runs", run["run_id"]), board.cell(run)) + (f" · {model}" if model else "")
                if run is not None
                else ""
            )
        cells.append(_e(floors.get(task, "")))
        rows.append(cells)
    return _table(header, rows, "matrix")


def _task_page(task: str, runs: pd.DataFrame, data: _Board) -> str:
    head = board.task_heads(runs).loc[task]
    body = [
        f"<h1>Task {_e(task)}</h1>",
        f"<p>{_e(runs['family'].iloc[0])} · {_e(runs['setting'].iloc[0])} · primary metric <b>{_e(head['primary_metric'])}</b></p>",
        "<h2>Runs</h2>",
        _runs_table(runs[runs["submittable"]], data, root="../", by_task=True)
        if runs["submittable"].any()
        else "<p>No full run yet.</p>",
    ]
    previews = runs[~runs["submittable"]]
    if not previews.empty:
        body += [
            '<h2>Previews <span class="tag">not ranked</span></h2>',
            _runs_table(previews, data, root="../", by_task=True),
        ]
    body += ["<h2>Floors</h2>", _floors_table(task, head["scoring_variant"], runs, data)]
    body += [
        '<h2 id="published">Published <span class="tag">not ranked</span></h2>',
        _published_table(data.published[data.published["task"] == task], with_task=False),
    ]
    return _html(f"{task} · ddibench", "\n".join(body), root="../")


def _previews_table(previews: pd.DataFrame) -> str:
    ordered = board.best_first(previews).sort_values("task", kind="stable")
    return _table(_headers(columns.SITE_PREVIEWS), _rows(columns.SITE_PREVIEWS, ordered, root=""), "previews")


def _runs_table(runs: pd.DataFrame, data: _Board, root: str, by_task: bool) -> str:
    """Runs, best first, with their verdict against the task's best and their cost: on a task's page
    (``by_task``) every metric of the task, elsewhere the task and the primary metric."""
    metrics: dict[str, str] = {}  # name -> column title
    for run_id in runs["run_id"] if by_task else ():
        detail = data.details.get(run_id)
        for name in detail.metrics if detail else ():
            spec = detail.specs.get(name) if detail else None
            metrics.setdefault(name, spec.title() if spec else name)
    shown = [
        c
        for c in columns.SITE_RUNS
        if not (by_task and c.key in columns.SITE_RUNS_ACROSS_TASKS) and (c is not columns.PROBE or data.probes)
    ]
    header: list[str] = []
    prose: list[int] = []
    for c in shown:  # the metrics: a column each
        prose += [len(header)] if c.key in columns.SITE_RUNS_PROSE else []
        header += [_e(title) for title in metrics.values()] if c is columns.METRICS else [_header(c)]
    ordered = board.best_first(runs)
    fixed = _rows([c for c in shown if c not in (columns.METRICS, columns.PROBE)], ordered, root)
    rows = []
    for (_, row), cells in zip(ordered.iterrows(), fixed):
        detail, rest, line = data.details.get(row["run_id"]), iter(cells), []
        for c in shown:
            if c is columns.METRICS:
                line += [_e(_metric_text(detail, name)) for name in metrics]
            elif c is columns.PROBE:
                line.append(_e(board.probe_cell(board.probe_of(data.probes, row["model"]))))
            else:
                line.append(next(rest))
        rows.append(line)
    return _table(header, rows, "runs", prose=tuple(prose))


def _metric_text(detail: board.RunDetail | None, name: str) -> str:
    if detail is None or name not in detail.metrics:
        return ""
    spec = detail.specs.get(name) or board.MetricSpec(name=name, label=name, unit="score")
    value = detail.metrics[name]
    return f"{spec.format(value.value)} [{spec.format(value.ci_low)}, {spec.format(value.ci_high)}]"


def _floors_table(task: str, variant: str, runs: pd.DataFrame, data: _Board) -> str:
    floors = data.floors[(data.floors["task"] == task) & (data.floors["scoring_variant"] == variant)]
    if floors.empty:
        return "<p>No floors for this kind of answer.</p>"
    specs = {
        name: spec
        for run_id in runs["run_id"]
        if run_id in data.details
        for name, spec in data.details[run_id].specs.items()
    }
    names = list(dict.fromkeys(name for metrics in floors["metrics"] for name in metrics))
    header = ["floor", "what it answers", *(_e(specs[n].title() if n in specs else n) for n in names)]
    rows = []
    for floor in floors.itertuples():
        values = [board.fmt(specs[n].unit if n in specs else "score", floor.metrics.get(n)) for n in names]
        rows.append([_e(floor_title(floor.name)), _e(floor.note), *map(_e, values)])
    return _table(header, rows, "floors", prose=(1,))


def _published_table(numbers: pd.DataFrame, with_task: bool = True) -> str:
    """The papers' numbers, one line each: (task,) method, the model its name carries, value, metric, paper
    (linked where its citation has an arXiv id); the source and how the comparison differs folded under 'source'."""
    if numbers.empty:
        return "<p>No published number for this task.</p>"
    shown = [c for c in columns.SITE_PUBLISHED if with_task or c is not columns.PUBLISHED_TASK]
    return _table(_headers(shown), _rows(shown, numbers, root=""), "published-table", prose=(len(shown) - 1,))


def _published_page(data: _Board) -> str:
    numbers = data.shown_published.sort_values(["task", "paper"], kind="stable")
    body = [
        '<h1>Published numbers <span class="tag">not ranked</span></h1>',
        "<p>The papers' own numbers on their own splits and code, converted from percent to each metric's unit. "
        "They are shown for comparison, never ranked with the board's runs; each row's source says how the "
        "comparison differs.</p>",
        _published_table(numbers) if not numbers.empty else "<p>No published number for these tasks.</p>",
    ]
    return _html("published numbers · ddibench", "\n".join(body), root="")


def _run_page(row: pd.Series, detail: board.RunDetail, store: Path, probe: Any = None) -> str:
    manifest = detail.manifest
    note = (
        f'<p class="legend"><strong>{board.PROBE_TITLE}</strong> of {_e(row["model"])}: {_e(board.probe_note(probe))}</p>'
        if probe is not None
        else ""
    )
    body = [
        f"<h1>Run {_e(row['run_id'])}</h1>",
        f"<p>{_e(row['system'])}{_unregistered(row['system'])} on {_e(row['task'])} · {_e(board.value_ci(row))} {_e(row['primary_metric'])}</p>",
        note,
        f'<p class="legend">Marked <span class="tag unchecked">{board.UNCHECKED}</span>: the submitter\'s own words, shown as '
        "written; verify recomputes the metrics, the cost and the identity of a run, not these.</p>",
        "<h2>Provenance</h2>",
        _facts(_run_facts(row, detail)),
        "<h2>Metrics</h2>",
        _table(
            ["metric", "value", "95% CI"],
            [[_e(r["metric"]), _e(r["value"]), _e(r["95% CI"])] for r in detail.metric_rows()],
        ),
        f'<h2>Samples <span class="tag">the first {TRACES_SHOWN}</span></h2>',
        *(_sample_block(item) for item in board.first_samples(store, str(row["run_id"]), TRACES_SHOWN)),
        f"<details><summary>full manifest ({board.UNCHECKED} but for what the page shows unmarked)</summary>"
        + _pre(json.dumps(manifest.dump(), indent=1, sort_keys=True))
        + "</details>",
    ]
    return _html(f"run {row['run_id']} · ddibench", "\n".join(body), root="../")


def _run_facts(row: pd.Series, detail: board.RunDetail) -> list[tuple[str, str]]:
    """A run page's provenance as (label, HTML) pairs: what ran, where and how, then what else its manifest records."""
    manifest = detail.manifest
    task, system = manifest.task, manifest.system
    info = board.system_info(system.name, manifest)
    code = f"ddibench {manifest.ddibench_version}, commit {manifest.git_commit or 'none (no git checkout)'}" + (
        " (dirty)" if manifest.git_dirty else ""
    )
    # the configuration of a registered system is one it accepts (verify checks it); of any other, only its hash
    config = f"<code>{_e(json.dumps(system.config, sort_keys=True))}</code>" + ("" if info.registered else _unchecked())
    profile = f"{manifest.profile.name} (detected: {json.dumps(manifest.profile.detected, sort_keys=True)})"
    facts: list[tuple[str, str]] = [
        (
            "task",
            _link("../" + _page("tasks", task.name), task.name)
            + _e(f" {task.version}, data sha256 {task.data_sha256}"),
        ),
        ("system", _system_link("../", system.name) + _e(f" {system.version}, config {system.config_hash}")),
        ("configuration", config),
        (
            "adapter source",
            (_e(", ".join(f"{k} {v}" for k, v in system.provenance.items())) or "not recorded") + _unchecked(),
        ),
        ("code", _e(code) + _unchecked()),
        ("created", _e(manifest.created) + _unchecked()),
        ("trust tier", _e(detail.tier)),
        ("against the best", _e(columns.verdict(row))),
        ("split", _e(f"{manifest.split}, {manifest.n_samples:,} samples, ids sha256 {manifest.sample_ids_sha256}")),
        ("hardware profile", _e(profile) + _unchecked()),
        ("seeds", _e(json.dumps(manifest.seeds.model_dump(), sort_keys=True))),
        ("cost per item", _e(" · ".join(x for x in (board.cost_label(row), board.per_dollar(row)) if x))),
    ]
    facts[3:3] = [("description", _e(system.description) + _unchecked())] if system.description else []
    return facts + _recorded_facts(detail, info)


def _recorded_facts(detail: board.RunDetail, info: board.SystemInfo) -> list[tuple[str, str]]:
    """The rest of a run page's provenance as (label, HTML) pairs: its models, the system's paper, code and card,
    the scoring options, the reproduction, why it is not submittable, and the deviations."""
    manifest = detail.manifest
    facts = [
        (f"model ({role})", _e(f"{model.spec} — {json.dumps(model.identity, sort_keys=True)}") + _unchecked())
        for role, model in manifest.models.items()
    ]
    facts += [
        (label, _linked(value))
        for label, value in (("paper", info.paper), ("authors' code", info.code if info.registered else ""))
        if value
    ]
    facts += [("card", f"<code>{_e(info.card)}</code>")] if info.card else []
    facts += (
        [("scoring", _e(json.dumps(manifest.scoring.model_dump(), sort_keys=True)))]
        if manifest.scoring.model_dump()
        else []
    )
    facts += [("reproduction", _e(json.dumps(detail.reproduction, sort_keys=True)))] if detail.reproduction else []
    facts += [("not submittable", _e(reason)) for reason in detail.reasons]
    facts += [
        ("deviation", _e(note) + _unchecked()) for note in (*manifest.task.deviations, *manifest.system.deviations)
    ]
    return facts


def _facts(facts: list[tuple[str, str]]) -> str:
    """A list of (label, HTML) pairs as a definition list (labels escaped, values already HTML)."""
    return '<dl class="facts">' + "".join(f"<dt>{_e(k)}</dt><dd>{v}</dd>" for k, v in facts) + "</dl>"


def _sample_block(item: dict[str, Any]) -> str:
    trace = item["trace"] if isinstance(item["trace"], str) else json.dumps(item["trace"], indent=1, ensure_ascii=False)
    cut = f" (the first {TRACE_CHARS:,} of {len(trace):,} characters)" if len(trace) > TRACE_CHARS else ""
    validity = "valid" if item["valid"] else "invalid"
    return (
        f'<section class="sample"><h3>Sample {_e(item["sample_id"])}</h3>'
        f"<p><b>gold:</b> {_e(item['gold'])}</p><p><b>prediction:</b> {_e(item['prediction'])} (score {_e(item['score'])}, {validity})</p>"
        f"<p><b>input:</b></p>{_pre(json.dumps(item['input'], indent=1, ensure_ascii=False))}"
        f"<details open><summary>trace{_e(cut)}, {board.UNCHECKED}</summary>{_pre(trace[:TRACE_CHARS])}</details></section>"
    )


def _system_page(system: str, runs: pd.DataFrame, data: _Board) -> str:
    some_run = data.details.get(str(runs["run_id"].iloc[0]))
    info = board.system_info(system, some_run.manifest if some_run else None)
    if info.registered:
        facts = [
            ("paper", _linked(info.paper) or "—"),
            ("authors' code", _linked(info.code) or "—"),
            ("card", f"<code>{_e(info.card)}</code>" if info.card else "—"),
        ]
    else:
        facts = [
            ("registered here", "no: an outside adapter, its name and its words are the bundle's"),
            (
                "adapter source",
                (_e(", ".join(f"{k} {v}" for k, v in info.provenance.items())) or "not recorded") + _unchecked(),
            ),
        ]
        if some_run is not None and some_run.manifest.system.description:
            facts.append(("description", _e(some_run.manifest.system.description) + _unchecked()))
    body = [
        f"<h1>System {_e(system)}{_unregistered(system)}</h1>",
        _facts(facts),
        "<h2>Runs</h2>",
        _runs_table(runs, data, root="../", by_task=False),
    ]
    return _html(f"{system} · ddibench", "\n".join(body), root="../")


# ---- HTML --------------------------------------------------------------------------------------------

STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; margin: 1.5rem auto; max-width: 1600px; padding: 0 1rem; color: #1b1b1b; }
nav { margin-bottom: 1rem; } h1 { font-size: 1.5rem; } h2 { font-size: 1.2rem; margin-top: 2rem; }
table { border-collapse: collapse; margin: .5rem 0; } th, td { border: 1px solid #ccc; padding: .3rem .5rem; text-align: left; vertical-align: top; }
th { background: #f2f2f2; } td { white-space: nowrap; } td.prose { white-space: normal; min-width: 12rem; }
div.scroll { overflow-x: auto; } table.wrap td, table.wrap .tag { white-space: normal; overflow-wrap: break-word; }
.model { color: #555; font-size: .85em; } details summary { cursor: pointer; color: #444; }
@media (max-width: 600px) { body { font-size: 14px; margin: .5rem auto; padding: 0 .5rem; } th, td { padding: .2rem .3rem; }
  table.leaders .ci, table.leaders td:nth-child(2), table.leaders th:nth-child(2) { display: none; }
  table.leaders .tag.unchecked { white-space: normal; } table.leaders td { overflow-wrap: anywhere; } }
.published { color: #6b4e00; font-style: italic; } .tag { font-size: .75rem; background: #eee; border-radius: 3px; padding: 0 .3rem; font-weight: normal; }
.tag.unchecked, .tag.unregistered { background: #fde8c8; color: #6b3a00; font-style: normal; white-space: nowrap; }
.legend, .summary { color: #444; } dl.facts { display: grid; grid-template-columns: max-content auto; gap: .2rem 1rem; }
dl.facts dt { font-weight: bold; } dl.facts dd { margin: 0; overflow-wrap: anywhere; }
pre { background: #f7f7f7; padding: .5rem; overflow-x: auto; white-space: pre-wrap; overflow-wrap: anywhere; max-height: 30rem; }
section.sample { border-top: 1px solid #ddd; margin-top: 1rem; }
"""


def _html(title: str, body: str, root: str) -> str:
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        # nothing on the page may load or run anything: no script, no request beyond the site's own pages
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">"
        f"<title>{_e(title)}</title><style>{STYLE}</style></head>\n"
        f'<body><nav><a href="{root}index.html">ddibench leaderboard</a></nav>\n{body}\n</body></html>\n'
    )


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _link(href: str, text: object) -> str:
    return f'<a href="{_e(href)}">{_e(text)}</a>'


def _system_link(root: str, name: str) -> str:
    """A link to a system's page, marked when this installation does not register the system."""
    return _link(root + _page("systems", name), name) + _unregistered(name)


def _unregistered(name: str) -> str:
    return "" if board.is_registered(name) else f' <span class="tag unregistered">{board.UNREGISTERED}</span>'


def _unchecked() -> str:
    return f' <span class="tag unchecked">{board.UNCHECKED}</span>'


URL = re.compile(r"https?://[^\s<>\"'(),;]+")


def _linked(text: str) -> str:
    """Text with its http(s) URLs as links, everything escaped (no other scheme ever becomes a link)."""
    out, end = [], 0
    for match in URL.finditer(text):
        out += [_e(text[end : match.start()]), _link(match.group(0), match.group(0))]
        end = match.end()
    return "".join(out) + _e(text[end:])


def _pre(text: str) -> str:
    return f"<pre>{_e(text)}</pre>"


def _table(
    header: list[str], rows: list[list[str]], css: str = "", prose: tuple[int, ...] = (), wrap: bool = False
) -> str:
    """A table of cells that are HTML already (escaped where they hold stored text). Cells keep to one
    line, but for the ``prose`` columns (notes, sources) and in a ``wrap`` table (one that must fit a
    phone's width); a wide table scrolls on its own."""
    css = f"{css} wrap".strip() if wrap else css
    head = "".join(f"<th>{h}</th>" for h in header)
    body = "".join(
        "<tr>"
        + "".join(f'<td class="prose">{c}</td>' if i in prose else f"<td>{c}</td>" for i, c in enumerate(row))
        + "</tr>"
        for row in rows
    )
    return f'<div class="scroll"><table class="{css}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


# the site's own markup of a column: a header more than its title, a cell more than its value
_HEADERS = {columns.SCORE.key: 'score <span class="ci">[95% CI]</span>'}  # the interval leaves a phone's width
_CELLS: dict[str, Callable[[pd.Series], str]] = {
    columns.BEST_SYSTEM.key: lambda r: (
        _system_link("", r["system"]) + (f" [{_e(r['variant'])}]" if r["variant"] else "")
    ),
    columns.SCORE.key: _score,
    columns.SHORT_MODEL.key: lambda r: _model(r["model"]),
    columns.PUBLISHED.key: lambda r: f'<span class="published">{_e(r["shown"])}</span>',
    columns.PAPER.key: lambda r: _link(r["link"], r["paper"]) if r["link"] else _e(r["paper"]),
    columns.SOURCE_AND_NOTE.key: lambda r: (
        f"<details><summary>source</summary>{_linked(r['source'])}. {_e(r['note'])}</details>"
    ),
}


def _header(column: columns.Column) -> str:
    """A column's header; the submitter's words marked as unchecked."""
    mark = _unchecked() if column.shows == "words" else ""
    return _HEADERS.get(column.key) or _e(column.header) + mark


def _headers(shown: Iterable[columns.Column]) -> list[str]:
    return [_header(c) for c in shown]


def _cell(column: columns.Column, value: object, root: str) -> str:
    """A cell as its column shows it: a task's, run's or system's name linked to its page, any other text escaped."""
    text = columns.text(value)
    if column.shows == "task":
        return _link(root + _page("tasks", text), text)
    if column.shows == "run":
        return _link(root + _page("runs", text), text)
    if column.shows == "system":
        return _system_link(root, text)
    return _e(text)


def _rows(shown: list[columns.Column] | tuple[columns.Column, ...], frame: pd.DataFrame, root: str) -> list[list[str]]:
    """The cells of ``frame`` (a run or a published number a row) under the ``shown`` columns, as HTML."""
    values = {c.key: c.cells(frame) for c in shown if c.key not in _CELLS}
    return [
        [(_CELLS[c.key](row) if c.key in _CELLS else _cell(c, values[c.key][i], root)) or c.empty for c in shown]
        for i, (_, row) in enumerate(frame.iterrows())
    ]


def _page(folder: str, name: object) -> str:
    return f"{folder}/{safe_name(str(name))}.html"


def safe_name(text: str) -> str:
    """A file name for a stored name: its letters, digits, '-' and '_' (lower case); anything else, or an
    upper-case letter, adds a hash of the whole name, so two names never share a file."""
    safe = re.sub(r"[^a-z0-9_-]+", "_", text.lower())[:80].strip("_")
    return safe if safe == text else f"{safe or 'x'}-{hashlib.sha256(text.encode('utf-8')).hexdigest()[:12]}"


def _write_whole(out: Path, pages: dict[str, str]) -> None:
    if not out.parent.is_dir():
        raise ConfigError(
            f"cannot write the site to {out}: {out.parent} does not exist", "create the parent directory first"
        )
    if out.exists() and not (out.is_dir() and (not any(out.iterdir()) or (out / SITE_MARKER).exists())):
        raise ConfigError(
            f"{out} exists and is not a site ddibench wrote", "give a new or empty directory, or remove it first"
        )
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        for name, text in pages.items():
            path = staging / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        (staging / SITE_MARKER).write_text(
            "written by ddibench; the next export replaces this directory whole\n", encoding="utf-8"
        )
        staging.chmod(0o755)  # mkdtemp makes it private to its owner
        old = out.with_name(staging.name + ".old") if out.exists() else None
        if old is not None:
            out.rename(old)
        try:
            staging.rename(out)
        except OSError:
            if old is not None:
                old.rename(out)
            raise
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
