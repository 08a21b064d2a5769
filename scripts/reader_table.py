#!/usr/bin/env python3
"""The reader-model previews as one markdown table: every finished run under RUNS_DIR, grouped by task.

    python scripts/reader_table.py RUNS_DIR [--baseline zero-shot] [--reference BUNDLE]

For each run: its system and variant (answer mode, option order), n, the primary metric (and accuracy where
the task has it) with its interval, the answer spread (the most frequent answer's share and the share of
first-listed options; "collapsed" where the run is flagged), the retrieval ceilings of its context (the
vote reader and the coverage, ``ddibench report --ceilings``), the task's floors, and the paired difference
of the primary metric against the baseline system's run on the same samples and in the same variant, and, for
a variant, against the same system's plain run (what shuffling the options or choosing by likelihood changed;
``ddibench report A --against B``), and against a ``--reference`` run of the same task (a run directory or a
published bundle, e.g. the trained EmerGNN whose top types CBR-DDI lists first). Every number is read from the
runs' own records; nothing is typed in.
"""

from __future__ import annotations

import argparse
import functools
from pathlib import Path
from typing import Any


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
    args = parser.parse_args()

    from ddibench.registry import run_variant
    from ddibench.runner.ceilings import compute as ceilings
    from ddibench.runner.compare import compare
    from ddibench.runner.records import read_results
    from ddibench.runner.report import find_runs
    from ddibench.submission import load_finished_or_bundle

    load = functools.cache(load_finished_or_bundle)  # each run and bundle is read (and a bundle verified) once

    rows = []
    for run_dir in find_runs(args.runs_dir):
        if not (run_dir / "results.json").exists():
            continue
        results = read_results(run_dir / "results.json")
        rows.append(
            (
                results.task,
                results.system,
                run_variant(results.system, results.manifest.system.config),
                run_dir,
                results,
            )
        )
    by_key = {(task, system, variant): run_dir for task, system, variant, run_dir, _ in rows}
    references = {}  # task -> (system, path)
    for path in args.reference:
        ident, results, _ = load(path)
        references[ident.task.name] = (results.system, path)
    print(
        "| task | system | variant | n | primary [95% CI] | accuracy | top answer / first option | vote reader | coverage | floors | vs "
        f"{args.baseline} (paired) | vs its plain run (paired) |" + (" vs reference (paired) |" if references else "")
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if references else ""))

    def paired(run_dir: Path, other: Path | None, name: str, spec: Any) -> str:
        if other is None or other == run_dir:
            return "—"
        m = next(m for m in compare(run_dir, other, load=load).metrics if m.name == name)
        return f"{spec.format(m.diff)} [{spec.format(m.low)}, {spec.format(m.high)}]" + (" *" if m.significant else "")

    for task, system, variant, run_dir, results in sorted(rows, key=lambda r: (r[0], r[2], r[1])):
        ev = results.evaluation
        name = ev.primary_metric
        spec = ev.spec(name)
        primary = f"{spec.format(ev.metrics[name].value)} [{spec.format(ev.metrics[name].ci_low)}, {spec.format(ev.metrics[name].ci_high)}]"
        accuracy = (
            ev.spec("accuracy").format(ev.metrics["accuracy"].value)
            if "accuracy" in ev.metrics and name != "accuracy"
            else "—"
        )
        spread = "—"
        if ev.answers is not None and ev.answers.n_answers:
            first = "—" if ev.answers.first_position_share is None else f"{ev.answers.first_position_share:.0%}"
            spread = f"{ev.answers.top_share:.0%} / {first}" + (" collapsed" if ev.answers.collapsed else "")
        found = ceilings(run_dir)
        vote = f"{found.spec.format(found.vote[0])}" if found else "—"
        coverage = f"{found.coverage:.0%}" if found else "—"
        floors = ", ".join(
            f"{kind.split('_')[0]} {spec.format(f['metrics'][name])}"
            for kind, f in results.floors.items()
            if name in f.get("metrics", {})
        )
        against = paired(run_dir, by_key.get((task, args.baseline, variant)), name, spec)
        plain = paired(run_dir, by_key.get((task, system, "")), name, spec) if variant else "—"
        line = f"| {task} | {system} | {variant or '—'} | {ev.n} | {primary} | {accuracy} | {spread} | {vote} | {coverage} | {floors} | {against} | {plain} |"
        if references:
            reference = references.get(task)
            line += f" {reference[0]} {paired(run_dir, reference[1], name, spec)} |" if reference else " — |"
        print(line)
    print(
        f"\n* the paired 95% interval of the difference excludes 0. Floors: {', '.join(sorted({k for *_, r in rows for k in r.floors}))}."
    )


if __name__ == "__main__":
    main()
