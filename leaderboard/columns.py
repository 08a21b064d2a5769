"""The board's columns, declared once: what each is called, what its cells hold and what it means.

The board is shown three ways: the Streamlit app (``app.py``), the static site and the markdown tables of the README
and the docs (``static.py``). Each of their tables is a tuple of :class:`Column` below, in the order shown; a renderer
writes a column's header and cells from it and adds only its own markup, chosen by what the column shows
(:attr:`Column.shows`): escaping for the board's own text, a code span or an "as submitted" mark for the submitter's
words, a link to a task's, run's or system's page. A renderer composes a cell itself only where it is more than one
value (a score linked to its run on the static site, a run's system, variant and score in the README's table).

Adding a column to the board: declare it here and name it in the tables that show it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from numbers import Integral
from typing import Any, Literal

import pandas as pd

from ddibench.leaderboard import data as board

Shows = Literal["text", "words", "task", "run", "system"]


@dataclass(frozen=True)
class Column:
    """A board column: the same header, cells and meaning wherever it is shown."""

    key: str
    """The name code uses for the column; unique among the columns of a table."""
    header: str
    """Its title in every table that shows it."""
    format: Callable[[pd.DataFrame], Sequence[Any]] | None = None
    """Its cells from a frame of runs (the columns of :func:`board.runs`) or of published numbers, one per row in the
    frame's order: text, or a number a sortable table keeps as one. None: a cell each renderer composes."""
    help: str = ""
    """What the column holds, for a reader who wonders (the app's tooltip)."""
    shows: Shows = "text"
    """What its cells are: the board's own ``text``, the submitter's ``words`` (shown as written, marked as
    unchecked), or the name of a ``task``, ``run`` or ``system`` (a link to its page on the static site)."""
    empty: str = ""
    """What a cell with nothing in it shows."""

    def values(self, frame: pd.DataFrame) -> Sequence[Any]:
        """The column's cells of ``frame`` as :attr:`format` makes them (a column of ``frame`` keeps its type)."""
        if self.format is None:
            raise ValueError(f"the board composes the cells of '{self.key}' itself")
        return self.format(frame)

    def cells(self, frame: pd.DataFrame) -> list[Any]:
        """The column's cells of ``frame``, in its row order."""
        return list(self.values(frame))


def text(value: object) -> str:
    """A cell's value as text: a count with thousands separators, anything else as it prints."""
    return f"{value:,}" if isinstance(value, Integral) and not isinstance(value, bool) else str(value)


def _per_run(cell: Callable[[pd.Series], Any]) -> Callable[[pd.DataFrame], list[Any]]:
    """A column's cells made one run (row) at a time."""
    return lambda frame: [cell(row) for _, row in frame.iterrows()]


def verdict(row: pd.Series) -> str:
    """A run against the best run of its task: best, or the paired difference (best minus it) and what it says."""
    preview = board.is_preview(row)
    if row["best"] and not preview:
        return "★ best"
    if preview and (row["best"] or row["diff"] is None or row["diff"] != row["diff"]):
        return "a preview, never ranked"
    if row["diff"] is None or row["diff"] != row["diff"]:
        return "not compared (no shared samples)"
    what = "a preview, never ranked" if preview else ("≈ tied" if row["tied"] else "worse")
    return f"{what}: best − this {row['diff']:+.3f} [{row['diff_low']:+.3f}, {row['diff_high']:+.3f}]"


def _mark(row: pd.Series) -> str:
    """A full run's marks spelled out for a sortable table: ★ best or ≈ tied, and ⚠ collapsed answers."""
    rank = "★ best" if row["best"] else ("≈ tied" if row["tied"] else "")
    return rank + (board.COLLAPSED if row["collapsed"] else "")


# ---- a run's columns ------------------------------------------------------------------------------------

MODEL_HELP = (
    f"the model that wrote the answers; one that only wrote a system's inputs is on its run page ({board.UNCHECKED})"
)

TASK = Column("task", "task", lambda f: f["task"], shows="task")
RANK = Column("rank", "rank", lambda f: f.groupby("task").cumcount() + 1)
SYSTEM = Column("system", "system", lambda f: f["system"], shows="system")
VARIANT = Column("variant", "variant", lambda f: f["variant"].fillna(""), empty="—")
MODEL = Column("model", "model", lambda f: f["model"], help=MODEL_HELP, shows="words", empty="—")
SHORT_MODEL = Column(
    "short_model",
    "model",
    lambda f: f["model"].map(board.short_model),
    help=MODEL_HELP,
    shows="words",
    empty=board.NO_MODEL,
)
PROFILE = Column("profile", "profile", lambda f: f["profile"], shows="words")
TIER = Column("tier", "tier", lambda f: f["tier"])
N = Column("n", "n", lambda f: f["n"])
METRIC = Column("metric", board.METRIC_COLUMN, lambda f: f["primary_metric"])
PRIMARY = Column("primary", "primary metric", _per_run(lambda r: f"{r['primary_metric']} {board.value_ci(r)}"))
VALUE = Column(
    "value",
    "value",
    lambda f: [board.shown_value(u, v) for u, v in zip(f["primary_unit"], f["primary_value"])],
    help="in the metric's unit: a fraction in %",
)
CI = Column(
    "ci",
    "95% CI",
    _per_run(lambda r: f"[{board.fmt(r['primary_unit'], r['ci_low'])}, {board.fmt(r['primary_unit'], r['ci_high'])}]"),
)
MARK = Column("mark", "mark", _per_run(_mark))
VALUE_CI = Column("value_ci", "value [95% CI]", _per_run(board.cell))
# a preview's value and interval: never ★ or ≈ (it is never ranked), and a collapse spelled out
PREVIEW_VALUE = Column(
    "preview_value",
    "value [95% CI]",
    _per_run(lambda r: board.value_ci(r) + (board.COLLAPSED + " collapsed" if r["collapsed"] else "")),
)
RUN = Column("run", "run", lambda f: f["run_id"], shows="run")
RUN_ID = Column("run_id", "run_id", lambda f: f["run_id"])
VERDICT = Column("verdict", "against the best", _per_run(verdict))
COST = Column(
    "cost",
    "cost per item",
    _per_run(lambda r: " · ".join(x for x in (board.cost_label(r), board.per_dollar(r)) if x)),
)
FLOORS = Column("floors", board.FLOORS_COLUMN)  # a task's floors: the board computes them per task
# the static site's runs of a task: a column per metric of the task (titled by the metric), and the memorisation
# probe of the run's model where one ships
METRICS = Column("metrics", "every metric")
PROBE = Column("probe", board.PROBE_TITLE)
# the static site's best run of a task: its system (and variant), its score linked to its page
BEST_SYSTEM = Column("best_system", "best system")
SCORE = Column("score", "score [95% CI]")
# the README's best runs of a task: a run's system, variant and score in one cell
BEST = Column("best", "best")
BEST_LLM = Column("best_llm", "best LLM system")

# ---- the tables -----------------------------------------------------------------------------------------

# the app's list of ranked runs: a frame a reader sorts, so numbers stay numbers and the default variant is empty
RANKED = (TASK, RANK, SYSTEM, replace(VARIANT, empty=""), SHORT_MODEL, METRIC, VALUE, CI, MARK, TIER, N, RUN_ID)
# the previews (made with --limit): listed apart, never ranked
APP_PREVIEWS = (TASK, SYSTEM, VARIANT, SHORT_MODEL, N, METRIC, VALUE_CI, RUN)
SITE_PREVIEWS = (RUN, TASK, SYSTEM, VARIANT, MODEL, N, METRIC, PREVIEW_VALUE)
MARKDOWN_PREVIEWS = (TASK, SYSTEM, VARIANT, MODEL, N, METRIC, PREVIEW_VALUE)
# the static site: the best run of each task (narrow enough for a phone), and a task's or a system's runs
LEADERS = (TASK, METRIC, BEST_SYSTEM, SCORE, SHORT_MODEL)
SITE_RUNS = (RUN, SYSTEM, TASK, PRIMARY, METRICS, MODEL, PROBE, PROFILE, TIER, N, VERDICT, COST)
SITE_RUNS_ACROSS_TASKS = ("task", "primary")  # where runs of several tasks meet (a system's page); else the metrics
SITE_RUNS_PROSE = ("model", "verdict", "cost")  # cells that may wrap
# the task x system matrix: a column per system (and variant) between these
MATRIX_HEAD = (TASK, METRIC)
MATRIX_TAIL = (FLOORS,)
# the README's compact table: one line per task
COMPACT = (TASK, METRIC, BEST, BEST_LLM, FLOORS)

# ---- the papers' published numbers (a frame of :func:`board.published`) ---------------------------------

PUBLISHED_TASK = Column("task", "task", lambda f: f["task"], shows="task")
METHOD = Column("method", "method", lambda f: f["method"])
READER = Column("model", "model", lambda f: f["model"], empty="—")  # the reader a method's name gives
PUBLISHED = Column("shown", "published", lambda f: f["shown"])
METRIC_LABEL = Column("metric_label", "metric", lambda f: f["metric_label"])
PAPER = Column("paper", "paper", lambda f: f["paper"])
LINK = Column("link", "link", lambda f: f["link"])  # the paper's page where its citation has an arXiv id
SOURCE = Column("source", "source", lambda f: f["source"])
NOTE = Column("note", "note", lambda f: f["note"])
SOURCE_AND_NOTE = Column("source_and_note", "source and note")  # the static site folds both under 'source'

APP_PUBLISHED = (PUBLISHED_TASK, METHOD, READER, PUBLISHED, METRIC_LABEL, PAPER, LINK, SOURCE, NOTE)
SITE_PUBLISHED = (PUBLISHED_TASK, METHOD, READER, PUBLISHED, METRIC_LABEL, PAPER, SOURCE_AND_NOTE)


# ---- frames the app shows as they are -------------------------------------------------------------------


def frame_of(columns: Sequence[Column], frame: pd.DataFrame) -> pd.DataFrame:
    """A table as a frame: a column per :class:`Column` under its header, empty cells as the column shows them, and
    each column of ``frame`` it takes as it is keeps its type (a count stays the store's integer)."""
    cells: dict[str, Sequence[Any]] = {}
    for c in columns:
        values = c.values(frame)
        cells[c.header] = [c.empty if isinstance(v, str) and not v else v for v in values] if c.empty else values
    return pd.DataFrame(cells, columns=[c.header for c in columns]).reset_index(drop=True)


def ranked(frame: pd.DataFrame) -> pd.DataFrame:
    """The ranking, one row per task and system (and variant and model): the best full run of each, best
    first within its task, with its rank, the variant it ran in ('' for the default), the short name of its
    model ('—' without an LLM), its value in the metric's unit (a number, so that a table sorts it), its
    interval and its mark. Never a preview."""
    frame, _ = board.split_previews(frame)
    best = board.best_first(frame).drop_duplicates(["task", "system", "variant", "model"])
    best = best.sort_values("task", kind="stable")  # best first within each task, tasks by name
    return frame_of(RANKED, best)


def preview_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """The previews of ``frame`` as the app lists them, one row each (task, then the better value first), under
    the headers of :data:`APP_PREVIEWS`: their value and interval in the metric's unit and never a ★ or ≈ (⚠ stays:
    it says what the answers did, not a rank). Cells are as the columns make them, before any markup."""
    _, previews = board.split_previews(frame)
    previews = board.best_first(previews).sort_values("task", kind="stable")
    return pd.DataFrame({c.header: c.cells(previews) for c in APP_PREVIEWS}, columns=[c.header for c in APP_PREVIEWS])
