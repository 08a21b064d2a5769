"""What the board shows, computed from the results store (kept apart from the Streamlit code, so it is
testable and fast: one small query at start-up, per-sample rows only when a run is opened).

A bundle is written by its submitter. ``verify`` recomputes its metrics, cost and ties and checks its
identity, but not its words: descriptions, deviations, the adapter's source, hardware, code version,
dates, model names. Every view shows those as plain text (for a markdown renderer, :func:`md_code`),
marked :data:`UNCHECKED`, and a system that this installation does not register as ``unregistered``
(:func:`system_label`): its name is whatever the bundle says.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ddibench.evaluation import MetricSpec, MetricValue
from ddibench.evaluation.floors import floor_title
from ddibench.results.store import connect
from ddibench.runner.records import Manifest

RUN_COLUMNS = (
    "run_id, task, family, setting, system, system_version, model, profile, tier, submittable, n, primary_metric, "
    "primary_value, ci_low, ci_high, calls_per_item, tokens_per_item, usd_per_item, best, tied, diff, diff_low, diff_high, "
    "primary_unit, higher_is_better, scoring_variant, collapsed, variant"
)


def runs(path: Path) -> pd.DataFrame:
    with connect(path, read_only=True) as conn:
        return conn.execute(f"SELECT {RUN_COLUMNS} FROM runs ORDER BY task, primary_value DESC, run_id").df()


UNCHECKED = "as submitted, not checked"
UNREGISTERED = "unregistered"
# ASCII punctuation that makes markup inside a line (CommonMark escapes any ASCII punctuation with a
# backslash); '-', '+', '=' and '1.' only make a list, a rule or a heading at the start of a line: escaped there
_MD_SPECIAL = re.compile(r"([!#$&(-*:<>?\[-`{-~]|^[-+=]|(?<=^\d)[.)]|(?<=^\d\d)[.)])")


def md_text(value: object) -> str:
    """This board's own words (and ids) for a markdown renderer: one line, its markup characters escaped,
    so no emphasis, link, image, HTML, heading, list, table cell break, formula or coloured directive
    comes out of it. Not for a submitter's words: GitHub's and Streamlit's renderers turn a URL in text
    into a link however it is escaped (use :func:`md_code`)."""
    return _MD_SPECIAL.sub(r"\\\1", " ".join(str(value).split()))


def md_code(value: object) -> str:
    """A submitter's words for a markdown renderer: one line in a code span, which every renderer shows
    as written (no emphasis, link, autolink, image or HTML inside it); '' for none."""
    text = " ".join(str(value).split())
    if not text:
        return ""
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def is_registered(name: str) -> bool:
    """Whether this installation registers a system of that name (else its runs are known from bundles alone)."""
    from ddibench.registry import system_names

    return name in system_names()


def system_label(name: str) -> str:
    """A system's name as plain text, marked when this installation does not register it."""
    return name if is_registered(name) else f"{name} ({UNREGISTERED})"


def system_md(name: str) -> str:
    """A system's name for a markdown renderer: a registered name as it is, any other escaped and marked."""
    return name if is_registered(name) else f"{md_code(name)} ({UNREGISTERED})"


UNIT_TITLES = {"fraction": "%", "score": "score", "scale": "1-5"}  # how a table or an axis names each unit


def fmt(unit: str, value: float | None) -> str:
    """A metric value in its declared unit (see :class:`ddibench.evaluation.MetricSpec`)."""
    return MetricSpec(name="", label="", unit=unit if unit in ("fraction", "score", "scale") else "score").format(value)


def value_ci(row: pd.Series) -> str:
    """A run's primary metric as 'value [95% CI]' in its unit, unmarked."""
    unit = row["primary_unit"]
    return f"{fmt(unit, row['primary_value'])} [{fmt(unit, row['ci_low'])}, {fmt(unit, row['ci_high'])}]"


COLLAPSED = " ⚠"  # the run's answers collapsed onto one label (see ddibench.evaluation.answers)


def is_preview(row: pd.Series | dict[str, Any]) -> bool:
    """The one rule every view follows: a run that is not submittable (made with ``--limit``, the only refusal
    ``board add --previews`` admits) is a preview: shown apart, never ranked, never marked ★ or ≈ (the store
    compares it with the best full run, and its ``best`` and ``tied`` columns are ignored here)."""
    return not bool(row.get("submittable", True))


def split_previews(frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The ranked (full) runs and the previews of ``frame``, by :func:`is_preview`."""
    preview = ~frame["submittable"].fillna(False).astype(bool)
    return frame[~preview], frame[preview]


def marks(row: pd.Series | dict[str, Any]) -> str:
    """A run's marks after its value: ★ best, ≈ tied with the best (a full run only), ⚠ collapsed answers."""
    rank = "" if is_preview(row) else (" ★" if row["best"] else (" ≈" if row["tied"] else ""))
    return rank + (COLLAPSED if row.get("collapsed") else "")


def cell(row: pd.Series) -> str:
    """A run's primary metric as 'value [95% CI]' in its unit, with its :func:`marks`."""
    return value_ci(row) + marks(row)


NO_MODEL = "—"  # the store's model of a run without LLM calls
MODEL_CHARS = 40


def short_model(spec: object) -> str:
    """The model a run's LLM calls went to, short enough to stand beside a score: its name without the
    provider, the endpoint or a path ('embedded:qwen2.5-coder-1.5b-instruct' -> 'qwen2.5-coder-1.5b-instruct',
    'openai:gpt-4o@https://api.openai.com/v1' -> 'gpt-4o'); '' for a run without an LLM. The submitter's word."""
    text = " ".join(str(spec if spec is not None else "").split())
    if text in ("", NO_MODEL, "nan"):
        return ""
    name = text.split("@", 1)[0]
    name = name.split(":", 1)[1] if ":" in name else name
    name = name.rstrip("/").rsplit("/", 1)[-1] or text
    return name if len(name) <= MODEL_CHARS else name[: MODEL_CHARS - 1] + "…"


def read_probes(root: Path | None = None) -> dict[str, Any]:
    """The memorisation probes that ship with the results (``results/probes``, validated), by model spec;
    none where there is no shipped results folder. A malformed probe file is refused (one-line DataError)."""
    from ddibench.errors import ConfigError
    from ddibench.results.shipped import results_root, shipped_probes

    try:
        folder = results_root(root)
    except ConfigError:
        return {}
    return shipped_probes(folder)


def probes_stamp() -> tuple[str, float]:
    """Which probes :func:`read_probes` would read now: the results folder and its ``probes/`` folder's mtime
    (``("", 0.0)`` where there is none). A cache of the probes is keyed by it, so another folder or a newly
    published probe is read afresh."""
    from ddibench.errors import ConfigError
    from ddibench.results.shipped import results_root

    try:
        folder = results_root()
    except ConfigError:
        return "", 0.0
    probes = folder / "probes"
    return str(folder.resolve()), probes.stat().st_mtime if probes.is_dir() else 0.0


def probe_of(probes: dict[str, Any], model: object) -> Any | None:
    """The memorisation probe of the model a run names (its spec as the run records it), or None."""
    return probes.get(str(model)) if probes else None


PROBE_TITLE = "memorisation probe"


def probe_cell(probe: Any | None) -> str:
    """A runs table's probe column: the model's recall of DrugBank's type for training pairs against the
    control's, and the pair-specific difference; '' without a probe."""
    if probe is None:
        return ""
    train, control, d = probe.slice("s2_train"), probe.slice("control"), probe.pair_specific
    return f"{train.rate.value:.2f} vs control {control.rate.value:.2f} ({d.value:+.2f} [{d.ci_low:+.2f}, {d.ci_high:+.2f}])"


def probe_note(probe: Any) -> str:
    """A run page's probe note: what the probe found, and why it is there."""
    return (
        f"{probe.summary()}. A score of this model on DrugBank pairs may be recall of DrugBank rather than inference "
        f"where the pair-specific share is above zero (probe of {probe.created[:10]}, ddibench {probe.ddibench_version})"
    )


def entry(system: str, variant: object) -> str:
    """A board column: the system, and the variant its run was made in when not the default (``answer_mode=likelihood``)."""
    return f"{system} [{variant}]" if isinstance(variant, str) and variant else system


def filtered(frame: pd.DataFrame, filters: dict[str, list[str]], previews: bool) -> pd.DataFrame:
    """The runs the filters allow (a column's allowed values; none: any), previews only when asked for."""
    out = frame if previews else split_previews(frame)[0]
    for column, allowed in filters.items():
        if allowed:
            out = out[out[column].isin(allowed)]
    return out


METRIC_COLUMN = "metric"
FLOORS_COLUMN = "floors"


def matrix(
    frame: pd.DataFrame, floors: pd.DataFrame | None = None, models: bool = False, intervals: bool = True
) -> pd.DataFrame:
    """Task x system, one short line per task: the best full run of each cell, shown as 'value [CI]' (without
    ``intervals``, the value alone) with ★ best, ≈ tied with best and ⚠ when its answers collapsed onto one label
    (and, with ``models``, the short name of the model an LLM system ran on, after ' · '); a system's runs in
    another variant (an answer mode)
    in a column of their own, named ``system [variant]``; with ``floors`` (:func:`floors`), a column of them
    after the systems, in the primary metric of the task. Previews are never in it (:func:`is_preview`), and
    the papers' published numbers have a table of their own (:func:`published`)."""
    frame, _ = split_previews(frame)
    if frame.empty:
        return pd.DataFrame()
    best = best_first(frame).drop_duplicates(["task", "system", "variant"])
    best = best.assign(
        cell=[
            (cell(row) if intervals else fmt(row["primary_unit"], row["primary_value"]) + marks(row))
            + (f" · {short_model(row['model'])}" if models and short_model(row["model"]) else "")
            for _, row in best.iterrows()
        ],
        entry=[entry(s, v) for s, v in zip(best["system"], best["variant"])],
    )
    table = best.pivot(index="task", columns="entry", values="cell")
    # a system may be called anything (an outside adapter's name is data): one named like a column of
    # the table's own is shown as '<name> (system)' rather than break the table
    table = table.rename(
        columns={name: f"{name} (system)" for name in (METRIC_COLUMN, FLOORS_COLUMN) if name in table.columns}
    )
    table.insert(0, METRIC_COLUMN, task_heads(frame)["primary_metric"].reindex(table.index))
    if floors is not None:
        table[FLOORS_COLUMN] = floor_labels(frame, floors).reindex(table.index)
    return table.fillna("")


def shown_value(unit: str, value: float | None) -> float | None:
    """A metric value as a number in the unit a table writes it in (a fraction in %), for sorting and charts."""
    if value is None or value != value:
        return None
    return round(100 * value, 1) if unit == "fraction" else round(value, 3 if unit == "score" else 2)


def task_heads(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per task: its ranked scoring variant, primary metric and unit (those of its best run)."""
    return (
        best_first(frame)
        .drop_duplicates("task")
        .set_index("task")[["scoring_variant", "primary_metric", "primary_unit"]]
    )


def pareto(frame: pd.DataFrame) -> pd.DataFrame:
    """Runs on the cost-quality Pareto front of each task (fewer tokens per item, better primary metric).

    Within a task, sorted by cost (and by quality, best first, at equal cost), a run is on the front when
    it beats every cheaper run.
    """
    signed = frame.assign(_q=_signed(frame))
    ordered = signed.sort_values(["task", "tokens_per_item", "_q"], ascending=[True, True, False])
    before = ordered.groupby("task")["_q"].transform(lambda v: v.cummax().shift(fill_value=float("-inf")))
    return ordered[ordered["_q"] > before].drop(columns="_q")


def best_first(frame: pd.DataFrame) -> pd.DataFrame:
    """Full runs before ``--limit`` previews, then the better primary value first (by the metric's direction);
    equal runs in run id order, so every view of the same store is the same."""
    ordered = frame.assign(_signed=_signed(frame)).sort_values(
        ["submittable", "_signed", "run_id"], ascending=[False, False, True], kind="stable"
    )
    return ordered.drop(columns="_signed")


def _signed(frame: pd.DataFrame) -> pd.Series:
    """The primary value oriented so that larger is better (metrics such as SelfCheckGPT are lower-better)."""
    if "higher_is_better" not in frame:
        return frame["primary_value"]
    return frame["primary_value"].where(frame["higher_is_better"].fillna(True).astype(bool), -frame["primary_value"])


def cells(frame: pd.DataFrame, by: tuple[str, ...] = ("task", "system", "model")) -> pd.DataFrame:
    """The best run of each group (full runs before ``--limit`` previews), for charts that would drown in every run."""
    return best_first(frame).drop_duplicates(list(by))


def floors(path: Path) -> pd.DataFrame:
    """The floors of each task and scoring variant (task, scoring_variant, name, metrics as a dict, note),
    recomputed by the store from the task data; none in a store written before floors were stored."""
    columns = ["task", "scoring_variant", "name", "metrics", "note"]
    with connect(path, read_only=True) as conn:
        if not conn.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = 'floors'").fetchone()[0]:
            return pd.DataFrame(columns=columns)
        rows = conn.execute(f"SELECT {', '.join(columns)} FROM floors ORDER BY task, scoring_variant, name").fetchall()
    return pd.DataFrame([(*row[:3], json.loads(row[3]), row[4]) for row in rows], columns=columns)


def floor_labels(frame: pd.DataFrame, floor_rows: pd.DataFrame) -> pd.Series:
    """Per task: each floor's value of the task's primary metric, e.g. 'majority 1.0 · random 0.4'."""
    out = {}
    for task, head in task_heads(frame).iterrows():
        mine = floor_rows[(floor_rows["task"] == task) & (floor_rows["scoring_variant"] == head["scoring_variant"])]
        shown = [
            f"{floor_title(f.name)} {fmt(head['primary_unit'], f.metrics[head['primary_metric']])}"
            for f in mine.itertuples()
            if head["primary_metric"] in f.metrics
        ]
        out[task] = " · ".join(shown)
    return pd.Series(out, dtype=object)


def metric_specs(path: Path) -> dict[str, dict[str, MetricSpec]]:
    """Each task's metric declarations as its runs recorded them."""
    with connect(path, read_only=True) as conn:
        rows = conn.execute("SELECT task, metric_specs FROM runs ORDER BY task, run_id").fetchall()
    out: dict[str, dict[str, MetricSpec]] = {}
    for task, declared in rows:
        specs = out.setdefault(task, {})
        for raw in json.loads(declared):
            spec = MetricSpec.model_validate(raw)
            specs.setdefault(spec.name, spec)
    return out


PUBLISHED_COLUMNS = [
    "task",
    "system",
    "paper",
    "link",
    "method",
    "model",
    "metric",
    "metric_label",
    "value",
    "std",
    "shown",
    "source",
    "note",
]
# a reader model named in a published method, as the papers write them: 'CBR-DDI (Llama3.1-70B)'
_READER = re.compile(r"^(?P<method>.+?) \((?P<model>(?:Llama|DeepSeek|GPT|Qwen|Claude|Gemini|Mistral)[^()]*)\)$")
_ARXIV = re.compile(r"\barXiv (\d{4}\.\d{4,5})\b")


def paper_link(cite: str) -> str:
    """The page of a paper that its citation names by arXiv id; '' for a citation without one."""
    found = _ARXIV.search(cite)
    return f"https://arxiv.org/abs/{found.group(1)}" if found else ""


def method_model(method: str) -> tuple[str, str]:
    """A published method and the reader model its name carries ('KAPING (Llama3.1-8B)' -> 'KAPING',
    'Llama3.1-8B'); the method whole and '' when it names none."""
    found = _READER.match(method)
    return (found.group("method"), found.group("model")) if found else (method, "")


def published(specs: dict[str, dict[str, MetricSpec]]) -> pd.DataFrame:
    """The papers' numbers (ddibench/data/published.toml) for the tasks and metrics in ``specs`` (see
    :func:`metric_specs`), converted from percent to each metric's unit, one row each with the paper's key
    and page (``link``, where its citation has an arXiv id), the method and the reader model its name
    carries. They are the papers' claims on their own splits and code: shown in a table of their own,
    marked as published, never ranked with the board's runs."""
    from ddibench.data.published import load_published

    rows, papers = load_published()
    out = []
    for row in rows:
        spec = specs.get(row.task, {}).get(row.our_metric)
        if spec is None or spec.unit == "scale":  # a 1-5 judge scale has no percent to convert from
            continue
        value, std = row.value / 100, (row.std / 100 if row.std is not None else None)
        shown = spec.format(value) + (f" ± {spec.format(std)}" if std is not None else "")
        source = f"{papers[row.paper].cite}; {row.table}, {row.setting}, {row.dataset}"
        method, model = method_model(row.method)
        out.append(
            [
                row.task,
                row.system,
                row.paper,
                paper_link(papers[row.paper].cite),
                method,
                model,
                row.our_metric,
                spec.title(),
                value,
                std,
                shown,
                source,
                row.note,
            ]
        )
    return pd.DataFrame(out, columns=PUBLISHED_COLUMNS)


DOCS = Path(__file__).resolve().parent.parent / "docs"  # the repository's docs (absent from an installed wheel)


@dataclass(frozen=True)
class SystemInfo:
    """Where a system comes from: the paper it follows, its authors' code, its documentation page."""

    name: str
    registered: bool  # registered in this installation; else an outside adapter known from its runs alone
    paper: str = ""  # citation with a URL
    code: str = ""  # the authors' code; for an outside adapter, its source as the run's manifest records it
    card: str = ""  # the docs page that documents it (a path in the repository)
    provenance: dict[str, Any] = field(default_factory=dict)  # the adapter's source, as a run's manifest records it


def system_info(name: str, manifest: Manifest | None = None, docs: Path = DOCS) -> SystemInfo:
    """Paper, code and card of a registered system; for a system this installation does not register,
    what ``manifest`` (one of its runs) records of the adapter's source: distribution, version, URL, commit."""
    from ddibench.errors import DdibenchError
    from ddibench.registry import get_system_class

    provenance = dict(manifest.system.provenance) if manifest is not None else {}
    if is_registered(name):
        try:
            cls = get_system_class(name)
        except DdibenchError:  # a broken plug-in: shown as an outside system
            cls = None
        if cls is not None:
            paper, code = getattr(cls, "paper", ""), getattr(cls, "code", "")
            return SystemInfo(name, True, paper, code, system_card(name, docs), provenance)
    return SystemInfo(name, False, code=str(provenance.get("source", "")), provenance=provenance)


def system_card(name: str, docs: Path = DOCS) -> str:
    """The docs page that documents ``name`` (the page that embeds its ``ddibench:system`` block), '' if none."""
    marker = f"<!-- ddibench:system {name} -->"
    for page in sorted((docs / "systems").glob("*.md")):
        if marker in page.read_text(encoding="utf-8"):
            return page.relative_to(docs.parent).as_posix()
    return ""


@dataclass(frozen=True)
class RunDetail:
    """What the run page shows: metrics with their declarations, the manifest, the verdict."""

    metrics: dict[str, MetricValue]
    specs: dict[str, MetricSpec]
    manifest: Manifest
    reasons: list[str]
    tier: str
    reproduction: dict[str, Any] | None = (
        None  # what a re-run reproduced ('ddibench board add --reproduce'), if one ran
    )

    def metric_rows(self) -> list[dict[str, str]]:
        """Each metric in its own unit, the way the command line prints it."""
        rows = []
        for name, value in self.metrics.items():
            spec = self.specs.get(name) or MetricSpec(name=name, label=name, unit="score")
            rows.append(
                {
                    "metric": spec.title(),
                    "value": spec.format(value.value),
                    "95% CI": f"[{spec.format(value.ci_low)}, {spec.format(value.ci_high)}]",
                }
            )
        return rows


def run_detail(path: Path, run_id: str) -> RunDetail | None:
    with connect(path, read_only=True) as conn:
        row = conn.execute(
            "SELECT metrics, manifest, reasons, tier, metric_specs, reproduction FROM runs WHERE run_id = ?", [run_id]
        ).fetchone()
    if row is None:
        return None
    specs = {m.name: m for m in (MetricSpec.model_validate(raw) for raw in json.loads(row[4]))}
    metrics = {k: MetricValue.model_validate(v) for k, v in json.loads(row[0]).items()}
    manifest = Manifest.model_validate(json.loads(row[1]))
    return RunDetail(
        metrics, specs, manifest, json.loads(row[2] or "[]"), row[3], json.loads(row[5]) if row[5] else None
    )


def samples(path: Path, run_id: str, wrong_only: bool = False, limit: int = 500) -> pd.DataFrame:
    where = "AND score IS NOT NULL AND score < 1" if wrong_only else ""
    with connect(path, read_only=True) as conn:
        return conn.execute(
            f"SELECT sample_id, gold, prediction, score, valid FROM samples WHERE run_id = ? {where} ORDER BY sample_id LIMIT ?",
            [run_id, limit],
        ).df()


SAMPLE_COLUMNS = "sample_id, input, gold, prediction, score, valid, trace"


def sample(path: Path, run_id: str, sample_id: str) -> dict[str, Any]:
    with connect(path, read_only=True) as conn:
        row = conn.execute(
            f"SELECT {SAMPLE_COLUMNS} FROM samples WHERE run_id = ? AND sample_id = ?", [run_id, sample_id]
        ).fetchone()
    return _sample(row) if row is not None else {}


def first_samples(path: Path, run_id: str, n: int = 5) -> list[dict[str, Any]]:
    """``n`` of the run's samples with input, gold, prediction and trace: those whose whole trace the store holds
    first (a compact bundle keeps a few whole), each group in the order the run asked them (by id after them
    where a run was stored before that order was kept)."""
    with connect(path, read_only=True) as conn:
        rows = conn.execute(
            f"SELECT {SAMPLE_COLUMNS} FROM samples WHERE run_id = ?"
            " ORDER BY whole_trace DESC NULLS LAST, position NULLS LAST, sample_id LIMIT ?",
            [run_id, n],
        ).fetchall()
    return [_sample(row) for row in rows]


def _sample(row: tuple[Any, ...]) -> dict[str, Any]:
    sample_id, inputs, gold, prediction, score, valid, trace = row
    return {
        "sample_id": sample_id,
        "input": json.loads(inputs),
        "gold": gold,
        "prediction": prediction,
        "score": score,
        "valid": valid,
        "trace": _json_or_text(trace),
    }


def _json_or_text(text: str) -> Any:
    """A stored trace as JSON; as its text when the store cut it short (at 200,000 characters)."""
    try:
        return json.loads(text)
    except ValueError:
        return text


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
    return "primary metric (" + ", ".join(UNIT_TITLES.get(u, u) for u in units(best)) + ")"


def heatmap_spec(best: pd.DataFrame) -> dict[str, Any]:
    """Vega-Lite spec: task x system, coloured by the primary metric of each cell's best run, each cell
    labelled with its value in the metric's unit. Rendered as SVG, so every label is text in the page."""
    tooltip = ["task", "system", "model", "tier", "value", "ci", "mark"]
    low, high = best["primary_value"].min(), best["primary_value"].max()
    spread = (high - low) or 1.0
    frame = best.assign(
        # the colour scale reads in the cells' unit (fractions in %), so the legend and the labels agree
        shown=[100 * v if u == "fraction" else v for u, v in zip(best["primary_unit"], best["primary_value"])],
        bright=((best["primary_value"] - low) / spread > 0.55),  # viridis' bright end: dark text there
        value=[fmt(u, v) for u, v in zip(best["primary_unit"], best["primary_value"])],
        ci=[
            f"[{fmt(u, lo)}, {fmt(u, hi)}]" for u, lo, hi in zip(best["primary_unit"], best["ci_low"], best["ci_high"])
        ],
        mark=[marks(row).strip() for _, row in best.iterrows()],  # never one on a preview
    )
    # Vega-Lite hides axis labels that overlap a neighbour (at 1,400 px it dropped 4 of 9 system names):
    # every label is kept, unclipped, and the system names are slanted so that neighbours do not collide
    axis = {"labelLimit": 0, "labelFontSize": 12, "titleFontSize": 12, "labelOverlap": False}
    x = {"field": "system", "type": "nominal", "title": "system", "axis": {**axis, "labelAngle": -40}}
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
                    "x": x,
                    "y": y,
                    "color": {
                        "field": "shown",
                        "type": "quantitative",
                        "title": legend_title(best),
                        "scale": {"scheme": "viridis"},
                        "legend": {"format": ".3~f"},
                    },
                    "tooltip": [{"field": f} for f in tooltip],
                },
            },
            {
                "mark": {"type": "text", "fontSize": 12},
                "encoding": {
                    "x": x,
                    "y": y,
                    "text": {"field": "value"},
                    "color": {"condition": {"test": "datum.bright", "value": "black"}, "value": "white"},
                },
            },
        ],
    }


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


def per_dollar(row: pd.Series) -> str:
    """The primary metric bought per US dollar spent on each item (its value as the tables write it, over the
    dollars per item), where the run's models have a price; '' otherwise (no price, or free)."""
    usd, value = row.get("usd_per_item"), shown_value(str(row.get("primary_unit", "")), row.get("primary_value"))
    if usd is None or usd != usd or usd <= 0 or value is None:
        return ""
    unit = "points" if row.get("primary_unit") == "fraction" else "units"
    return f"{value / usd:,.0f} {row.get('primary_metric', '')} {unit} per $ an item"


def cost_table(best: pd.DataFrame) -> pd.DataFrame:
    """The rows under the cost chart, every number in its unit."""
    return pd.DataFrame(
        {
            "task": best["task"],
            "system": best["system"],
            "model": best["model"],
            "tier": best["tier"],
            "primary metric": [fmt(u, v) for u, v in zip(best["primary_unit"], best["primary_value"])],
            "cost per item": best.apply(cost_label, axis=1),
            "metric per dollar": best.apply(per_dollar, axis=1) if len(best) else [],
        }
    )


def plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def units(frame: pd.DataFrame) -> list[str]:
    """The units of the primary metrics in ``frame``, in a fixed order: one chart axis each."""
    return sorted(set(frame["primary_unit"]))


def cost_spec(points: pd.DataFrame, front: pd.DataFrame) -> dict[str, Any]:
    """Vega-Lite spec: tokens per item against the primary metric, with each task's Pareto front dashed.

    Every point's metric is in one unit (:func:`units`; a chart per unit), written as the tables write it
    (a fraction in %): the y axis says which, and never mixes fractions with scores."""
    kinds = units(pd.concat([points, front]))
    if len(kinds) != 1:
        raise ValueError(f"a cost chart shows one unit of primary metric, not {kinds}: draw one chart per unit")
    unit = kinds[0]
    fields = ["task", "system", "model", "metric", "calls_per_item", "tokens_per_item", "usd_per_item", "value"]

    def rows(frame: pd.DataFrame) -> list[dict[str, Any]]:
        shown = frame.assign(
            metric=frame["primary_metric"],
            value=[shown_value(u, v) for u, v in zip(frame["primary_unit"], frame["primary_value"])],
        )
        return _records(shown, fields)

    x = {"field": "tokens_per_item", "type": "quantitative", "title": "LLM tokens per item", "axis": {"format": ",.0f"}}
    y = {"field": "value", "type": "quantitative", "title": f"primary metric ({UNIT_TITLES.get(unit, unit)})"}
    color = {"field": "task", "type": "nominal"}
    return {
        "layer": [
            {
                "data": {"values": rows(points)},
                "mark": {"type": "circle", "size": 90},
                "encoding": {"x": x, "y": y, "color": color, "tooltip": [{"field": f} for f in fields]},
            },
            {
                "data": {"values": rows(front)},
                "mark": {"type": "line", "strokeDash": [4, 3]},
                "encoding": {"x": x, "y": y, "color": color},
            },
        ]
    }
