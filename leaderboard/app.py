"""ddibench leaderboard (Streamlit). Run with ``ddibench board serve [--store board.duckdb]``.

Every number comes from the results store, where it was recomputed from submitted per-sample
predictions; each run links to its provenance (manifest, data hashes, judge, deviations) and to a
per-sample drill-down. URL parameters ``?run=RUN_ID&sample=SAMPLE_ID`` open a run or a sample directly;
``?view=`` names the open tab. Only the open tab's code runs, so the first page costs one matrix.

Streamlit renders markdown (st.markdown, st.info, st.table cells) and links any URL in its text, so a
bundle's own words reach it only in code spans (:func:`board.md_code`) or through st.text: shown as
written, never as emphasis, a link or an image. They are marked as the submitter's own words, and an
unregistered system's name is marked wherever it appears.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from ddibench.leaderboard import columns
from ddibench.leaderboard import data as board
from ddibench.registry import scoring_provenance

st.set_page_config(page_title="ddibench leaderboard", layout="wide")
STORE = Path(os.environ.get("DDIBENCH_BOARD", "board.duckdb"))
NBSP = "\u00a0"  # between the words of a table cell: a row keeps to one line, the table scrolls sideways
WORD_JOINER = "\u2060"  # after each '-' of a cell (names such as naive-cbr): a line would break there


@st.cache_data(show_spinner=False)
def load_runs(path: str, mtime: float) -> pd.DataFrame:
    return board.runs(Path(path))


@st.cache_data(show_spinner=False)
def load_references(path: str, mtime: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The floors and the published numbers of the store's tasks."""
    return board.floors(Path(path)), board.published(board.metric_specs(Path(path)))


@st.cache_data(show_spinner=False)
def load_probes(folder: str, mtime: float) -> dict[str, object]:
    """The shipped memorisation probes by model spec (none without a shipped results folder), read once for
    each folder and state of it (:func:`~leaderboard.data.probes_stamp`)."""
    return board.read_probes(Path(folder)) if folder else {}


@st.cache_data(show_spinner=False)
def load_system_info(name: str) -> board.SystemInfo:
    return board.system_info(name)


def matrix_view(runs: pd.DataFrame, show_previews: bool) -> None:
    """The ranked runs (full runs only): the matrix, one line a task; the same runs as a sortable list with
    their models; the heatmap; then, when asked for, the previews apart, unranked and unmarked."""
    full, previews = board.split_previews(runs)
    if full.empty:
        st.info("No full run matches the filters.")
    else:
        ranked_view(full)
    if show_previews and not previews.empty:
        st.subheader("Previews (--limit runs, never ranked)")
        st.table(preview_table(previews))
        st.caption("Metrics recomputed on the samples --limit drew; never ranked, never marked ★ or ≈.")
    systems_view(sorted(runs["system"].unique()))


def ranked_view(full: pd.DataFrame) -> None:
    floors, _ = load_references(str(STORE), STORE.stat().st_mtime)
    # value and marks (the interval is in the ranked list below), with the model: short enough for one line
    table = board.matrix(full, floors, models=True, intervals=False)
    # st.table renders markdown in every cell and header: a bundle's name is escaped, a model sits in a code span
    names = {board.entry(s, v): (s, v) for s, v in zip(full["system"], full["variant"])}
    systems = [c for c in table.columns if c in names]
    table[systems] = table[systems].map(_model_in_code)
    table = table.map(_one_line)
    table = table.rename(
        columns={
            c: board.system_md(names[c][0]) + (f" \\[{board.md_text(names[c][1])}\\]" if names[c][1] else "")
            for c in systems
        }
    )
    st.subheader("Tasks × systems")
    st.table(table)  # a real HTML table: small, and readable by screen readers and browser tests
    st.caption(
        "Each system's best full run (its interval is in the ranked list below); after ' · ', the model an LLM "
        "system ran on. floors: what answers without skill "
        "scores on the task's evaluation split (the training split's most frequent label or labels, and uniformly "
        "random answers), recomputed by the board. The papers' published numbers are in the 'Published' tab."
    )
    st.subheader("Ranked runs")
    ranking = columns.ranked(full)
    ranking = ranking.assign(system=ranking["system"].map(board.system_label))
    st.dataframe(ranking, width="stretch", hide_index=True, column_config=column_help(columns.RANKED, ranking))
    st.caption("Click a column's name to sort. Rank: within the task, best first.")
    best = labelled(board.cells(full, ("task", "system")))
    st.vega_lite_chart(spec=board.heatmap_spec(best), width="stretch", height=board.heatmap_height(best))


def column_help(shown: tuple[columns.Column, ...], frame: pd.DataFrame) -> dict[str, Any]:
    """st.dataframe's settings of the columns that say what they hold: a tooltip on their header."""
    config: dict[str, Any] = {}
    for column in shown:
        if column.help:
            numeric = pd.api.types.is_numeric_dtype(frame[column.header])
            kind = st.column_config.NumberColumn if numeric else st.column_config.TextColumn
            config[column.header] = kind(column.header, help=column.help)
    return config


def markdown_cell(column: columns.Column, value: object) -> str:
    """A cell for st.table, which renders markdown: the board's own text escaped, a submitter's words and a run id
    in a code span (shown as written), a system's name marked when this installation does not register it."""
    text = columns.text(value)
    if column.shows == "system":
        shown = board.system_md(text)
    elif column.shows in ("words", "run"):
        shown = board.md_code(text)
    else:
        shown = board.md_text(text)
    return shown or column.empty


def _one_line(text: object) -> object:
    """A table cell that never wraps (a row keeps to one line; a wide table scrolls sideways), as it reads."""
    return text.replace(" ", NBSP).replace("-", "-" + WORD_JOINER) if isinstance(text, str) else text


def _model_in_code(text: object) -> object:
    """A matrix cell's model (after ' · ', the submitter's word) in a code span: shown as written."""
    if not isinstance(text, str) or " · " not in text:
        return text
    value, _, model = text.partition(" · ")
    return f"{value} · {board.md_code(model)}"


def preview_table(previews: pd.DataFrame) -> pd.DataFrame:
    """The previews as st.table renders them (markdown): every stored word escaped or in a code span."""
    rows = columns.preview_rows(previews)
    table = pd.DataFrame(
        {c.header: [markdown_cell(c, v) for v in rows[c.header]] for c in columns.APP_PREVIEWS}
    ).set_index(columns.TASK.header)
    return table.map(_one_line)


def published_view(runs: pd.DataFrame) -> None:
    st.subheader("Published numbers (never ranked)")
    _, published = load_references(str(STORE), STORE.stat().st_mtime)
    shown = published[published["task"].isin(runs["task"])]
    if shown.empty:
        st.info("No published number for the tasks that match the filters.")
        return
    st.dataframe(
        pd.DataFrame({c.header: c.cells(shown) for c in columns.APP_PUBLISHED}),
        width="stretch",
        hide_index=True,
        column_config={columns.LINK.header: st.column_config.LinkColumn(columns.LINK.header, display_text="paper")},
    )
    st.caption(
        "The papers' own numbers on their own splits and code, converted from percent to each metric's unit; "
        "shown beside the board's runs, never ranked with them. The model is the reader a method's name gives."
    )


def labelled(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows for a chart or a plain-text table: an unregistered system's name marked as such."""
    return frame.assign(system=frame["system"].map(board.system_label))


def systems_view(names: list[str]) -> None:
    """Each system's paper, code and card, one line each (a data frame shows a bundle's words as plain text)."""
    st.subheader("Systems")
    rows = []
    for name in names:
        info = load_system_info(name)
        if info.registered:
            rows.append(
                {"system": name, "paper": info.paper or "—", "code": info.code or "—", "card": info.card or "—"}
            )
        else:  # an outside adapter: what its bundles say of it, marked
            code = f"{info.code} ({board.UNCHECKED})" if info.code else "—"
            rows.append({"system": board.system_label(name), "paper": "—", "code": code, "card": "—"})
    st.dataframe(pd.DataFrame(rows), width="stretch", hide_index=True)


def cost_view(runs: pd.DataFrame) -> None:
    st.subheader("Cost per item against quality")
    best = board.cells(runs)  # one point per task x system x model: its best run
    if best.empty:
        st.info("No runs match the filters.")
        return
    best = labelled(best)
    for unit in board.units(best):  # one chart per unit of the primary metric: an axis never mixes them
        points = best[best["primary_unit"] == unit]
        if len(board.units(best)) > 1:
            st.markdown(f"**Primary metric in {board.md_text(board.UNIT_TITLES.get(unit, unit))}**")
        st.vega_lite_chart(spec=board.cost_spec(points, board.pareto(points)), width="stretch")
    st.dataframe(board.cost_table(best), width="stretch", hide_index=True)
    st.caption(
        "One point per task × system × model (its best run); dashed: the cost-quality Pareto front of each task. "
        "The y axis is the primary metric in its unit (a fraction in %; a chart per unit). "
        "US dollars appear where $DDIBENCH_PRICES gives the model's price."
    )


def pick_run(all_runs: pd.DataFrame, runs: pd.DataFrame, wanted: str | None) -> pd.Series | None:
    """Task, then system, then run: short lists however many runs the store holds."""
    match = all_runs[all_runs["run_id"] == wanted]
    start = match.iloc[0] if len(match) else (runs.iloc[0] if len(runs) else None)
    if start is None:
        return None
    task_col, system_col, run_col = st.columns([2, 2, 5])
    tasks = sorted(all_runs["task"].unique())
    task = task_col.selectbox("task", tasks, index=tasks.index(start["task"]))
    in_task = all_runs[all_runs["task"] == task]
    systems = sorted(in_task["system"].unique())
    system = system_col.selectbox(
        "system",
        systems,
        index=systems.index(start["system"]) if start["system"] in systems else 0,
        format_func=board.system_label,
    )
    choices = in_task[in_task["system"] == system].sort_values("primary_value", ascending=False)
    run_ids = list(choices["run_id"])
    shown = {
        r.run_id: f"{r.run_id} · {r.model} · {r.tier} · {board.fmt(r.primary_unit, r.primary_value)}"
        + (" · preview" if not r.submittable else "")
        for r in choices.itertuples()
    }
    run_id = run_col.selectbox(
        "run",
        run_ids,
        index=run_ids.index(start["run_id"]) if start["run_id"] in run_ids else 0,
        format_func=lambda run: shown.get(run, run),
    )
    return choices[choices["run_id"] == run_id].iloc[0]


def fact(label: str, text: object, unchecked: bool = False) -> None:
    """A line of the run's provenance, its value shown as written; marked when it is the submitter's word."""
    mark = f" *({board.UNCHECKED})*" if unchecked else ""
    st.markdown(f"**{label}:** {board.md_code(text)}{mark}")


def prose(label: str, notes: list[str]) -> None:
    """A submitter's paragraphs (a description, deviations) as plain text under a marked heading."""
    if notes:
        st.markdown(f"**{label}** *({board.UNCHECKED})*")
        for note in notes:
            st.text(note)  # no markdown at all


def provenance(summary: pd.Series, detail: board.RunDetail) -> None:
    manifest = detail.manifest
    task, system = manifest.task, manifest.system
    st.markdown(f"**Trust tier:** {detail.tier}")
    against(summary)
    for reason in detail.reasons:
        st.info(
            f"Not submittable: {board.md_code(reason)}"
        )  # a code span: a reason may quote a bundle's text, and Streamlit links URLs
    fact("Task", f"{task.name} {task.version} — data {task.data_sha256[:16]}…")
    info = board.system_info(system.name, manifest)
    registered = "" if info.registered else f" ({board.UNREGISTERED}: its name and its words are the bundle's)"
    st.markdown(
        f"**System:** {board.md_code(f'{system.name} {system.version} — config {system.config_hash}')}{registered}"
    )
    for label, value in (
        ("Paper", info.paper),
        ("Authors' code", info.code if info.registered else ""),
        ("Card", info.card),
    ):
        if value:  # this installation's own words on a system it registers
            st.markdown(f"**{label}:** {value}")
    if not info.registered:
        fact("Configuration", json.dumps(system.config, sort_keys=True), unchecked=True)
    prose("Description", [system.description] if system.description else [])
    if info.provenance:
        fact(
            "Adapter source",
            ", ".join(f"{k} {v}" for k, v in info.provenance.items() if k != "files_sha256"),
            unchecked=True,
        )
    fact("Code", f"ddibench {manifest.ddibench_version} {(manifest.git_commit or 'no git')[:12]}", unchecked=True)
    fact(
        "Hardware profile",
        f"{manifest.profile.name} (detected: {manifest.profile.detected.get('cpu')})",
        unchecked=True,
    )
    for role, model in manifest.models.items():
        fact(f"Model ({role})", model.spec, unchecked=True)
    probe = board.probe_of(load_probes(*board.probes_stamp()), summary["model"])
    if probe is not None:
        st.warning(f"**{board.PROBE_TITLE.capitalize()}** of this model: {board.md_code(board.probe_note(probe))}")
    for label, text in scoring_provenance(manifest.task.name, manifest.scoring.model_dump()):
        fact(label[0].upper() + label[1:], text)
    if manifest.scoring.options:
        fact("Scoring", ", ".join(f"{k}={v}" for k, v in manifest.scoring.options.items()))
    prose("Deviations", task.deviations + system.deviations)


def against(summary: pd.Series) -> None:
    """The run against the best full run of its task; a preview is never ranked: its difference is shown
    for information, with no ★ or ≈."""
    preview = board.is_preview(summary)
    known = summary["diff"] is not None and summary["diff"] == summary["diff"] and not summary["best"]
    if summary["best"] and not preview:
        st.markdown("**Against the task's best:** this is the best run (★)")
    elif known:
        verdict = (
            "a preview (--limit), never ranked"
            if preview
            else ("tied (≈)" if summary["tied"] else "significantly worse")
        )
        st.markdown(
            f"**Against the task's best:** {summary['diff']:+.3f} [{summary['diff_low']:+.3f}, {summary['diff_high']:+.3f}] "
            f"(best minus this run, paired bootstrap on shared samples): {verdict}"
        )
    elif preview:
        st.markdown("**Against the task's best:** a preview (--limit), never ranked")


def drilldown(run_id: str, wanted: str | None) -> None:
    st.subheader("Samples")
    wrong = st.checkbox("only wrong or low-scoring samples")
    table = board.samples(STORE, run_id, wrong)
    st.dataframe(table, width="stretch", height=260)
    ids = list(table["sample_id"])
    if wanted and wanted not in ids:
        ids.insert(0, wanted)
    if not ids:
        return
    sample_id = st.selectbox("sample", ids, index=ids.index(wanted) if wanted in ids else 0)
    item = board.sample(STORE, run_id, sample_id)
    if not item:
        st.info(f"Run {board.md_code(run_id)} has no sample {board.md_code(sample_id)}.")  # both may come from the URL
        return
    st.markdown(f"**Sample** {board.md_code(sample_id)}")
    st.markdown(f"**Gold:** {board.md_text(item['gold'])}")
    st.markdown(f"**Prediction:** (score {item['score']}, {'valid' if item['valid'] else 'invalid'})")
    st.text(item["prediction"])  # the system's answer, as written
    st.markdown("**Input**")
    st.json(item["input"], expanded=False)
    st.markdown(f"**Trace** *({board.UNCHECKED})*")
    st.json(item["trace"], expanded=True)


def run_view(all_runs: pd.DataFrame, runs: pd.DataFrame, params) -> None:
    summary = pick_run(all_runs, runs, params.get("run"))
    if summary is None:
        st.info("No runs match the filters.")
        return
    run_id = summary["run_id"]
    detail = board.run_detail(STORE, run_id)
    if detail is None:
        st.info(f"Run {board.md_code(run_id)} is not in the store.")
        return
    st.subheader(f"Run {board.md_text(run_id)}")
    left, right = st.columns(2)
    with left:
        provenance(summary, detail)
    with right:
        st.markdown("**Metrics**")
        st.dataframe(pd.DataFrame(detail.metric_rows()), width="stretch", hide_index=True)
        with st.expander("full manifest"):
            st.json(detail.manifest.dump(), expanded=False)
    drilldown(run_id, params.get("sample"))


if not STORE.exists():
    st.error(f"No results store at {STORE}. Add runs with `ddibench board add BUNDLE` or set DDIBENCH_BOARD.")
    st.stop()

all_runs = load_runs(str(STORE), STORE.stat().st_mtime)
st.title("ddibench leaderboard")
st.caption(
    f"{board.plural(len(all_runs), 'run')} · ★ best in the task · ≈ not significantly different from the best · "
    "⚠ answers collapsed onto one label · after ' · ': the model an LLM system ran on · previews (--limit) and the "
    "papers' published numbers apart, never ranked"
)
with st.expander("How to read the board"):
    st.markdown(
        "Scores: the primary metric of full runs [95% CI, clustered by drug or source document]; ≈ by a paired "
        "bootstrap on the samples two runs share. Previews (runs made with --limit) are hidden unless 'show previews' "
        "is on in the sidebar; then they are listed apart, never ranked and never marked. Unregistered: a system "
        f"this ddibench does not have, known from its bundles alone. Marked ({board.UNCHECKED}): a submitter's own "
        "words, which verify does not recompute."
    )
with st.sidebar:
    st.header("Filters")
    filters = {
        column: st.multiselect(label, sorted(all_runs[column].dropna().unique()))
        for column, label in (
            ("family", "task family"),
            ("setting", "setting"),
            ("model", "model"),
            ("profile", "hardware profile"),
            ("tier", "trust tier"),
        )
    }
    n_previews = len(board.split_previews(all_runs)[1])
    previews = st.checkbox(
        f"show previews ({n_previews} --limit runs, never ranked)",
        value=False,
        help="Runs made with --limit: metrics on the samples it drew. Listed apart, never ranked or marked.",
    )
runs = board.filtered(all_runs, filters, previews)
params = st.query_params
matrix_tab, published_tab, cost_tab, run_tab = st.tabs(
    ["Matrix", "Published", "Cost vs quality", "Run details"],
    default="Run details" if params.get("run") else "Matrix",
    key="view",
    bind="query-params",
)
if matrix_tab.open:
    with matrix_tab:
        matrix_view(runs, previews)
if published_tab.open:
    with published_tab:
        published_view(runs)
if cost_tab.open:
    with cost_tab:
        cost_view(runs)
if run_tab.open:
    with run_tab:
        run_view(all_runs, runs, params)
