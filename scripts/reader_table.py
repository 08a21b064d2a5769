#!/usr/bin/env python3
"""The reader-model previews as one markdown table: every finished run under RUNS_DIR, grouped by task.

    python scripts/reader_table.py RUNS_DIR [--baseline zero-shot] [--reference BUNDLE] [--published]
        [--model NAME] [--modes]

RUNS_DIR holds run directories, bundles (``.tar.gz``, read once they verify), or both: ``results/drugbank_s1``
rebuilds the tables from the published previews.

For each run: its system and variant (answer mode, option order), n, the primary metric (and accuracy where
the task has it) with its interval, the answer spread (the most frequent answer's share and the share of
first-listed options; "collapsed" where the run is flagged), the retrieval ceilings of its context (the
vote reader and the coverage, ``ddibench report --ceilings``), the task's floors, and the paired difference
of the primary metric against the baseline system's run on the same samples and in the same variant, and, for
a variant, against the same system's plain run (what shuffling the options or choosing by likelihood changed;
``ddibench report A --against B``), and against a ``--reference`` run of the same task (a run directory or a
published bundle, e.g. the trained EmerGNN whose top types CBR-DDI lists first). ``--published`` adds the papers'
own numbers for the same task, system and primary metric (``ddibench/data/published.toml``, by paper, one per
reader LLM the paper tried), beside each plain run: the papers' orderings next to ours. ``--model NAME`` keeps only
the runs whose manifest names NAME in one of its models (e.g. ``qwen2.5-coder-1.5b``): ``results`` then gives the
reader previews of every task, without the trained systems and floors published beside them.

Question answering has no label to count and no zero-shot system: its floor is the ``top-passage`` run on the
same samples (kept under ``--model``, since it names no model), and its baseline the model alone, ``no-rag``.

``--modes`` prints the same numbers as one row per task and system and one column per variant (the generated
answer, the shuffled options, each likelihood mode): a cell is the primary metric with its interval, the share
of first-listed options, and for a variant its paired difference from the plain run.

Every number is read from the runs' own records; nothing is typed in.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

QA_FLOOR = "top-passage"  # the floor of a question-answering task (a run of its own)
QA_BASELINE = "no-rag"  # the model alone: a question-answering task's zero-shot


@dataclass(frozen=True)
class Row:
    """One finished run and the cells both tables print, formatted with its primary metric's spec."""

    task: str
    system: str
    variant: str  # '' for the generated answer with the options in their usual order
    n: int
    primary: str  # value [low, high]
    accuracy: str
    spread: str  # most frequent answer / first option (and "collapsed")
    first: str  # the share of first-listed options, "—" where the task lists none
    collapsed: bool
    vote: str
    coverage: str
    floors: str
    against_baseline: str
    baseline_system: str  # the system against_baseline pairs with: a QA task's is the model alone
    against_plain: str
    against_reference: str | None  # None: no --reference for this run's task
    published: str  # the papers' numbers for this task, system and primary metric ("—" for a variant or none)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs_dir", type=Path)
    parser.add_argument("--baseline", default="zero-shot", help="the system every run is compared with, pair by pair")
    parser.add_argument(
        "--reference",
        type=Path,
        action="append",
        default=[],
        help="a run directory or bundle (e.g. results/drugbank_s1/emergnn/*.tar.gz) every run of its task is compared with",
    )
    parser.add_argument(
        "--published",
        action="store_true",
        help="a column with the papers' numbers for each plain run's task, system and primary metric",
    )
    parser.add_argument(
        "--model", help="only the runs whose manifest names this model (a part of its spec) in one of its roles"
    )
    parser.add_argument(
        "--modes", action="store_true", help="one column per variant (answer mode, option order) instead of a row each"
    )
    args = parser.parse_args()
    rows = collect(args.runs_dir, args.baseline, args.reference, args.model)
    if args.modes:
        print(modes_table(rows))
    else:
        print(runs_table(rows, args.baseline, bool(args.reference), args.published))
    print("\n* the paired 95% interval of the difference excludes 0.")


def collect(runs_dir: Path, baseline: str, reference_paths: list[Path], model: str | None = None) -> list[Row]:
    """Every finished run under ``runs_dir`` (with ``model``: those whose manifest names it in one of its roles),
    sorted by task, variant and system, with its paired differences."""
    from ddibench.registry import get_task
    from ddibench.runner.records import read_results
    from ddibench.runner.report import find_runs
    from ddibench.submission import load_finished_or_bundle

    # each run and bundle is read (and a bundle verified) once, a bundle's traces kept for the ceilings
    load = functools.cache(functools.partial(load_finished_or_bundle, keep_traces=True))
    finished = []
    for run_dir in find_runs(runs_dir):
        if (run_dir / "results.json").exists():
            results = read_results(run_dir / "results.json")
            variant = results.manifest.system.variant  # as the run recorded it
            finished.append((results.task, results.system, variant, run_dir, results))
    # published bundles too (e.g. results/drugbank_s1), each read once it verifies: the tables of the docs can be
    # rebuilt from what the repository ships, without the runs that made them
    references_here = {p.resolve() for p in reference_paths}  # a reference is a column, not a row
    for bundle in sorted(runs_dir.rglob("*.tar.gz")):
        if bundle.resolve() in references_here:
            continue
        _, results, _ = load(bundle)
        variant = results.manifest.system.variant  # as the run recorded it
        finished.append((results.task, results.system, variant, bundle, results))
    # a QA task's floor is a run of its own (top-passage, no model), read beside each run of the same size
    qa_floors = {(f[0], f[4].evaluation.n): f[4] for f in finished if f[1] == QA_FLOOR}
    if model is not None:
        finished = [f for f in finished if any(model in m.spec for m in f[4].manifest.models.values())]
    by_key: dict[tuple[str, str, str], Path] = {}
    for task, system, variant, path, _ in finished:
        if (task, system, variant) in by_key:  # which of the two a pairing should use would be a guess
            raise SystemExit(
                f"error: {runs_dir} holds more than one run of {task} {system}{' ' + variant if variant else ''}"
                f" ({by_key[task, system, variant]} and {path}); give a folder with one run of each"
            )
        by_key[task, system, variant] = path
    references = {}  # task -> (system, path)
    for path in reference_paths:
        ident, results, _ = load(path)
        references[ident.task.name] = (results.system, path)
    rows = []
    for task, system, variant, run_dir, results in sorted(finished, key=lambda r: (r[0], r[2], r[1])):
        name = results.evaluation.primary_metric
        spec = results.evaluation.spec(name)
        reference = references.get(task)
        against_reference = None  # no column without --reference
        if references:
            against_reference = (
                f"{reference[0]} {_paired(run_dir, reference[1], name, spec, load)}" if reference else "—"
            )
        against = QA_BASELINE if baseline == "zero-shot" and get_task(task).input_kind == "question" else baseline
        rows.append(
            _row(
                task,
                system,
                variant,
                run_dir,
                results,
                load,
                qa_floor=qa_floors.get((task, results.evaluation.n)),
                against_baseline=_paired(run_dir, by_key.get((task, against, variant)), name, spec, load),
                baseline_system=against,
                against_plain=_paired(run_dir, by_key.get((task, system, "")), name, spec, load) if variant else "—",
                against_reference=against_reference,
            )
        )
    return rows


def _paired(run_dir: Path, other: Path | None, name: str, spec: Any, load: Callable) -> str:
    from ddibench.runner.compare import compare

    if other is None or other == run_dir:
        return "—"
    m = next(m for m in compare(run_dir, other, load=load).metrics if m.name == name)
    return f"{spec.format(m.diff)} [{spec.format(m.low)}, {spec.format(m.high)}]" + (" *" if m.significant else "")


@functools.cache
def _published_rows() -> tuple[Any, ...]:
    """``published.toml``'s rows, read once for every row of the table."""
    from ddibench.data.published import load_published

    return tuple(load_published()[0])


def _row(
    task: str,
    system: str,
    variant: str,
    run_dir: Path,
    results: Any,
    load: Callable,
    qa_floor: Any = None,
    **against: Any,
) -> Row:
    from ddibench.errors import RunDirError
    from ddibench.runner.ceilings import compute as ceilings

    ev = results.evaluation
    name = ev.primary_metric
    spec = ev.spec(name)
    metric = ev.metrics[name]
    accuracy = "—"
    if "accuracy" in ev.metrics and name != "accuracy":
        accuracy = ev.spec("accuracy").format(ev.metrics["accuracy"].value)
    spread, first, collapsed = "—", "—", False
    if ev.answers is not None and ev.answers.n_answers:
        first = "—" if ev.answers.first_position_share is None else f"{ev.answers.first_position_share:.0%}"
        collapsed = bool(ev.answers.collapsed)
        spread = f"{ev.answers.top_share:.0%} / {first}" + (" collapsed" if collapsed else "")
    try:
        found = ceilings(run_dir, load=load)
    except RunDirError:  # a compact bundle: its context labels are kept for a few samples only
        found = None
    floors = ", ".join(
        f"{kind.split('_')[0]} {spec.format(f['metrics'][name])}"
        for kind, f in results.floors.items()
        if name in f.get("metrics", {})
    )
    if qa_floor is not None and not floors:
        floors = f"{QA_FLOOR} {spec.format(qa_floor.evaluation.metrics[name].value)}"
    published = "—"
    if not variant:  # the papers report each system in its usual configuration
        by_paper: dict[str, list[str]] = {}
        for p in _published_rows():
            if (p.task, p.system, p.our_metric) == (task, system, name):
                by_paper.setdefault(p.paper, []).append(f"{p.method} {p.value:.2f}")
        published = "; ".join(f"{paper}: {', '.join(found)}" for paper, found in by_paper.items()) or "—"
    return Row(
        task=task,
        system=system,
        variant=variant,
        n=ev.n,
        primary=f"{spec.format(metric.value)} [{spec.format(metric.ci_low)}, {spec.format(metric.ci_high)}]",
        accuracy=accuracy,
        spread=spread,
        first=first,
        collapsed=collapsed,
        vote=found.spec.format(found.vote[0]) if found else "—",
        coverage=f"{found.coverage:.0%}" if found else "—",
        floors=floors,
        published=published,
        **against,
    )


def runs_table(rows: list[Row], baseline: str, with_reference: bool, with_published: bool = False) -> str:
    """A row per run."""
    others = sorted({r.baseline_system for r in rows} - {baseline})  # QA rows pair with the model alone
    against = f"{baseline} (QA: {', '.join(others)})" if others else baseline
    lines = [
        "| task | system | variant | n | primary [95% CI] | accuracy | top answer / first option | vote reader | coverage"
        f" | floors | vs {against} (paired) | vs its plain run (paired) |"
        + (" vs reference (paired) |" * with_reference)
        + (" the papers (same metric) |" * with_published),
        "|---|---|---|---|---|---|---|---|---|---|---|---|" + "---|" * (with_reference + with_published),
    ]
    for r in rows:
        cells = [r.task, r.system, r.variant or "—", str(r.n), r.primary, r.accuracy, r.spread, r.vote, r.coverage]
        cells += [r.floors, r.against_baseline, r.against_plain]
        cells += [r.against_reference] if r.against_reference is not None else []
        cells += [r.published] if with_published else []
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def modes_table(rows: list[Row]) -> str:
    """A row per task and system, a column per variant (the plain run first, then the variants as they sort)."""
    variants = [""] + sorted({r.variant for r in rows} - {""})
    cell = {(r.task, r.system, r.variant): r for r in rows}
    heads = [v or "generated" for v in variants]
    lines = ["| task | system | n | " + " | ".join(heads) + " |", "|---|---|---|" + "---|" * len(variants)]
    for task, system in sorted({(r.task, r.system) for r in rows}):
        runs = [cell.get((task, system, v)) for v in variants]
        sizes = "/".join(sorted({str(r.n) for r in runs if r is not None}))
        texts = []
        for r in runs:
            if r is None:
                texts.append("—")
                continue
            text = f"{r.primary}, first {r.first}" + (" ⚠" if r.collapsed else "")
            texts.append(text + (f"; vs plain {r.against_plain}" if r.against_plain != "—" else ""))
        lines.append(f"| {task} | {system} | {sizes} | " + " | ".join(texts) + " |")
    lines.append("\n⚠ the run's answers are flagged collapsed (one answer or one position for most items).")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
