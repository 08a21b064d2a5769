"""Human-readable views of run results (``ddibench run`` and ``ddibench report``).

Metric names, units and directions come from the evaluator's declarations recorded in the results
(:class:`~ddibench.evaluation.MetricSpec`), so a new kind of task needs nothing here.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ddibench.errors import RunDirError
from ddibench.evaluation.answers import AnswerDistribution
from ddibench.evaluation.floors import floor_note, floor_title
from ddibench.llm import identity_summary
from ddibench.registry import scoring_provenance
from ddibench.runner.records import Results, read_identity, read_results

if TYPE_CHECKING:
    from ddibench.data.published import PublishedRow
    from ddibench.runner.ceilings import Ceilings
    from ddibench.runner.compare import Finished


def render_results(results: Results, console: Console, run_dir: Path | None = None, verbose: bool = False) -> None:
    """A run's report: its metrics beside the floors, its answers, its intervals, its cost and where it came from."""
    _metrics_table(results, console)
    _answer_lines(results, console)
    _interval_lines(results, console, verbose)
    _cost_lines(results, console)
    _provenance_lines(results, console)
    if run_dir is not None:
        console.print(f"run directory: {run_dir}")


def _metrics_table(results: Results, console: Console) -> None:
    ev = results.evaluation
    title = f"{results.system} on {results.task} ({results.manifest.split}, n={ev.n:,})"
    table = Table(title=title, title_justify="left")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_column(f"{int(ev.bootstrap['level'] * 100)}% CI", justify="right")
    floors = {
        name: floor["metrics"]
        for name, floor in results.floors.items()
        if isinstance(floor, dict) and "metrics" in floor
    }
    for name in floors:
        table.add_column(f"{floor_title(name)} floor", justify="right", style="dim")
    if ev.ceilings:
        table.add_column("ceiling", justify="right")
    for name, m in ev.metrics.items():
        spec = ev.spec(name)
        primary = " *" if name == ev.primary_metric else ""
        row = [spec.title() + primary, spec.format(m.value), f"[{spec.format(m.ci_low)}, {spec.format(m.ci_high)}]"]
        row += [spec.format(values.get(name)) for values in floors.values()]
        if ev.ceilings:
            row.append(spec.format(ev.ceilings.get(name)))
        table.add_row(*row)
    console.print(table)
    notes = ["* primary metric (it ranks the board)"]
    if floors:
        notes.append(
            "floors: what answers without skill score on the same samples (" + _floor_notes(results.floors) + ")"
        )
    if ev.ceilings:
        notes.append(
            "ceiling: what a perfect answer scores on these samples (fewer gold labels than the cut-off caps precision)"
        )
    for note in notes:
        console.print(f"[dim]{escape(note)}[/dim]")


def _answer_lines(results: Results, console: Console) -> None:
    ev = results.evaluation
    console.print(
        f"invalid (unparsable) predictions: {ev.n_invalid:,} of {ev.n:,}, scored as wrong"
        + (f"; e.g. {ev.invalid_examples[0]['error']}" if ev.invalid_examples else "")
    )
    if ev.answers is not None and ev.answers.n_answers:
        console.print(escape(answers_line(ev.answers)))
        if ev.answers.collapsed and not results.manifest.system.constant_answer:  # a floor is not flagged
            console.print(f"[yellow]warning: collapsed answers: {escape(ev.answers.message)}[/yellow]")


def _interval_lines(results: Results, console: Console, verbose: bool) -> None:
    ev, boot = results.evaluation, results.evaluation.bootstrap
    if verbose:
        interval = boot.get("interval_description") or "percentile interval of the replicates"
        console.print(f"CI: {boot['description']}, {boot['replicates']} replicates, seed {boot['seed']}; {interval}")
    else:
        unit = results.manifest.task.cluster_unit
        how = f"{unit} resampled" if boot.get("method") == "cluster" else "samples resampled i.i.d."
        kind = "BCa" if boot.get("interval") == "bca" else "percentile"
        console.print(
            f"CI: {kind} bootstrap, {how}, {boot['replicates']:,} replicates, seed {boot['seed']} (--verbose for details)"
        )
    if ev.breakdown and len(ev.breakdown) > 1:
        parts = []
        for key, values in ev.breakdown.items():
            shown = ", ".join(
                f"{m}={v:,}" if isinstance(v, int) and not isinstance(v, bool) else f"{m}={ev.spec(m).format(v)}"
                for m, v in values.items()
                if m not in ("n", "n_invalid")
            )
            parts.append(f"{key}: n={values['n']:,} {shown}")
        console.print("breakdown: " + "; ".join(parts))


def _cost_lines(results: Results, console: Console) -> None:
    man, cost = results.manifest, results.cost
    if not cost.recorded:
        console.print("LLM cost: not recorded (the answers were made elsewhere and imported)")
    outputs: dict[str, list[str]] = {}
    for role, entry in man.models.items():
        if entry.output:
            outputs.setdefault(entry.output, []).append(role)
    for output, roles in outputs.items():
        # how the server holds an answer the system asks as JSON; a free-text answer (QA) is never constrained
        console.print(escape(f"JSON answers ({', '.join(roles)}): {output}"))
    for role, per in cost.per_item.items():
        totals = cost.by_role[role]
        calls = f"{per.calls:g} call{'' if per.calls == 1 else 's'} per item"
        console.print(
            f"LLM {role}: {calls}, {per.prompt_tokens:,.0f} prompt + {per.completion_tokens:,.0f} "
            f"completion tokens per item ({totals.calls:,} calls in all, {totals.served_from_cache:,} from cache)"
        )
    timing = results.timing
    killed = f", {man.sessions_killed} killed (timed up to their last journalled sample)" if man.sessions_killed else ""
    console.print(
        f"time: {timing.wall_s_total:.1f} s over {man.sessions} session(s){killed} "
        f"(prepare {timing.prepare_s_total:.1f} s, predict {timing.predict_s_total:.1f} s)"
    )


def _provenance_lines(results: Results, console: Console) -> None:
    man = results.manifest
    code = f"{man.git_commit[:12]}{' (dirty)' if man.git_dirty else ''}" if man.git_commit else "no git checkout"
    models = ", ".join(f"{r}={m.spec} ({identity_summary(m.identity)})" for r, m in man.models.items())
    console.print(
        escape(
            f"provenance: ddibench {man.ddibench_version} [{code}], task {man.task.name} {man.task.version} "
            f"data {man.task.data_sha256[:12]}, system {man.system.name} {man.system.version} "
            f"config {man.system.config_hash}" + (f", {models}" if models else "") + f", profile {man.profile.name}"
        )
    )
    for label, text in scoring_provenance(man.task.name, man.scoring.model_dump()):
        console.print(escape(f"{label}: {text}"))
    if man.profile.warning:
        console.print(f"[yellow]warning: {escape(man.profile.warning)}[/yellow]")
    for deviation in man.task.deviations:
        console.print(f"[dim]task note: {escape(deviation)}[/dim]")
    for deviation in man.system.deviations:
        console.print(f"[dim]system note: {escape(deviation)}[/dim]")
    if not man.submittable:
        console.print(f"[yellow]not submittable: {man.not_submittable_reason}[/yellow]")


def answers_line(answers: AnswerDistribution) -> str:
    """One line on how the answers spread over the labels, beside the gold."""
    a = answers
    line = (
        f"answers: the most frequent (label {a.top_label}) is {a.top_share:.0%} of {a.n_answers:,} valid answers, the gold's "
        f"most frequent {a.gold_top_share:.0%}; spread (normalised entropy) {a.entropy:.2f}, gold {a.gold_entropy:.2f}"
    )
    if a.first_position_share is not None:
        line += f"; first option listed: {a.first_position_share:.0%}"
    return line


def _floor_notes(floors: dict[str, Any]) -> str:
    return "; ".join(
        f"{floor_title(name)}: {floor_note(name, floor, lambda i: f'label {i}')}"
        for name, floor in floors.items()
        if isinstance(floor, dict) and "metrics" in floor
    )


def find_runs(root: Path) -> list[Path]:
    return sorted(p.parent for p in root.rglob("run.json"))


def render_summary(rows: list[tuple[Results, Path]], console: Console) -> None:
    """One table for several runs (``ddibench run -t a,b``): each task's primary metric, its floors."""
    table = Table(title="summary", title_justify="left")
    for col in ("task", "system", "n", "primary metric", "value [95% CI]", "floors", "run directory"):
        table.add_column(col, overflow="fold")
    for results, run_dir in rows:
        name, value, low, high = results.primary
        spec = results.evaluation.spec(name)
        floors = ", ".join(
            f"{k.replace('uniform_random', 'random')} {spec.format(f['metrics'].get(name))}"
            for k, f in results.floors.items()
            if "metrics" in f
        )
        table.add_row(
            results.task,
            results.system,
            f"{results.evaluation.n:,}",
            spec.title(),
            f"{spec.format(value)} [{spec.format(low)}, {spec.format(high)}]",
            floors or "—",
            str(run_dir),
        )
    console.print(table)


def render_report(
    path: Path,
    console: Console,
    as_json: bool = False,
    verbose: bool = False,
    load_bundle: Callable[[Path], tuple[Any, Any, dict[str, Any]]] | None = None,
) -> int:
    """Report one run directory or a bundle read by ``load_bundle`` (the CLI passes
    ``ddibench.submission.load_finished_or_bundle``, which verifies it first), or list every run under a directory
    of runs. Returns an exit code."""
    if not path.exists():
        raise RunDirError(f"{path} does not exist", "give a run directory printed by 'ddibench run'")
    if _render_one(path, console, as_json, verbose, load_bundle):
        return 0
    if (path / "run.json").exists():
        ident = read_identity(path / "run.json")
        journal = path / "journal.jsonl"
        done = sum(1 for line in journal.open(encoding="utf-8") if line.strip()) if journal.exists() else 0
        console.print(
            f"{path}: incomplete run of {ident.system.name} on {ident.task.name}: "
            f"{done:,} of {ident.n_samples:,} samples journalled; re-run the same 'ddibench run' command to finish it"
        )
        return 1
    runs = find_runs(path)
    if not runs:
        raise RunDirError(f"{path} holds no ddibench runs", "give a run directory printed by 'ddibench run'")
    table = Table(title=f"runs under {path}", title_justify="left")
    for col in ("task", "system", "run id", "n", "primary metric", "value", "status"):
        table.add_column(col)
    unreadable = 0
    for run in runs:
        try:
            ident = read_identity(run / "run.json")
            res_file = run / "results.json"
            res = read_results(res_file) if res_file.exists() else None
        except RunDirError as exc:  # one damaged run does not hide the others
            table.add_row("?", "?", run.name, "—", "—", "—", escape(f"unreadable: {exc.problem}"))
            unreadable += 1
            continue
        if res is not None:
            name, value, _, _ = res.primary
            spec = res.evaluation.spec(name)
            status = "complete" if res.manifest.submittable else f"complete ({res.manifest.not_submittable_reason})"
            table.add_row(
                ident.task.name,
                ident.system.name,
                ident.run_id,
                f"{ident.n_samples:,}",
                spec.title(),
                spec.format(value),
                status,
            )
        else:
            table.add_row(
                ident.task.name, ident.system.name, ident.run_id, f"{ident.n_samples:,}", "—", "—", "incomplete"
            )
    console.print(table)
    return 1 if unreadable else 0


def _render_one(
    path: Path,
    console: Console,
    as_json: bool,
    verbose: bool,
    load_bundle: Callable[[Path], tuple[Any, Any, dict[str, Any]]] | None,
) -> bool:
    """Show the results of a finished run directory or of a bundle; False when ``path`` is neither."""
    if path.is_file() and load_bundle is not None:
        _, results, _ = load_bundle(path)
    elif (path / "results.json").exists():
        results = read_results(path / "results.json")
    else:
        return False
    if as_json:
        console.print_json(json.dumps(results.dump()))
    elif path.is_file():
        render_results(results, console, verbose=verbose)
        console.print(f"bundle: {path} (verified: its metrics recomputed from its predictions)")
    else:
        render_results(results, console, path, verbose=verbose)
    return True


def render_ceilings(
    path: Path,
    console: Console,
    as_json: bool = False,
    load_bundle: Callable[[Path], tuple[Any, Any, dict[str, Any]]] | None = None,
) -> int:
    """The retrieval ceilings (:mod:`ddibench.runner.ceilings`) of one finished run, of every finished run under
    a directory whose system records the labels its context states, or of a bundle read by ``load_bundle``
    (the CLI passes ``ddibench.submission.load_finished_or_bundle``, which verifies it first)."""
    from ddibench.runner.ceilings import compute

    if not path.exists():
        raise RunDirError(f"{path} does not exist", "give a run directory printed by 'ddibench run', or a bundle")
    if path.is_file():  # a bundle: a compact one keeps what the ceilings read for every sample
        if load_bundle is None:
            raise RunDirError(f"{path} is not a run directory", "give a run directory printed by 'ddibench run'")
        bundle = compute(path, load_bundle)
        found = [bundle] if bundle is not None else []
    else:
        runs = [path] if (path / "run.json").exists() else [r for r in find_runs(path) if (r / "results.json").exists()]
        found = [c for c in (compute(r) for r in runs) if c is not None]
    if as_json:
        console.print_json(json.dumps([c.as_dict() for c in found]))
        return 0 if found else 1
    if not found:
        console.print(
            f"{path}: no finished run records context labels (only retrieval systems do: naive-cbr, kaping, k-paths, cbr-ddi)"
        )
        return 1
    table = Table(
        title="retrieval ceilings: the reader's score beside what its context could give", title_justify="left"
    )
    for col in ("task", "system", "n", "metric", "reader (the run)", "vote reader", "coverage", "labels / sample"):
        table.add_column(col, justify="left" if col in ("task", "system", "metric") else "right")
    for c in sorted(found, key=lambda c: (c.task, c.system, str(c.run_dir))):
        fmt = c.spec.format
        table.add_row(
            c.task,
            c.system,
            f"{c.n:,}",
            c.spec.title(),
            f"{fmt(c.reader[0])} [{fmt(c.reader[1])}, {fmt(c.reader[2])}]",
            f"{fmt(c.vote[0])} [{fmt(c.vote[1])}, {fmt(c.vote[2])}]",
            f"{100 * c.coverage:.1f}%" + (f" ({c.with_context} with context)" if c.with_context < c.n else ""),
            f"{c.mean_labels:.1f}",
        )
    console.print(table)
    console.print(
        "[dim]vote reader: answers the label its context states most often (no LLM); coverage: the share of samples whose gold "
        "label the context states at all (label sets: of gold labels), which no reader of that context alone can beat[/dim]"
    )
    for c in found:
        if c.candidates is not None:
            console.print(candidates_line(c), markup=False, highlight=False)
        if c.by_setting:
            console.print(by_setting_line(c), markup=False, highlight=False)
    return 0


def by_setting_line(c: Ceilings) -> str:
    """How often the gold is among the labels the top-K cases carry, at each lam of the grid (the run's own
    marked), on the same samples: the retrieval alone, without insights or answers."""
    assert c.by_setting is not None
    cells = [f"{lam} {100 * v:.1f}%" + (" (the run's)" if lam == c.setting else "") for lam, v in c.by_setting.items()]
    return f"{c.task} {c.system}: gold among the retrieved cases' labels by lambda: " + ", ".join(cells)


def candidates_line(c: Ceilings) -> str:
    """A run's first-stage candidates (CBR-DDI's GNN module) beside its context, and what the reader did with them."""
    offered = c.candidates
    assert offered is not None
    line = (
        f"{c.task} {c.system}: gold among the {offered.n:.3g} candidates offered {100 * offered.coverage:.1f}%, "
        f"gold = candidate 1 {100 * offered.first:.1f}%; gold among the context's labels {100 * c.coverage:.1f}%"
    )
    moves = offered.moves
    if moves is not None:
        left = moves["fixed"] + moves["broke"] + moves["other"]
        answered = left + moves["kept"]
        line += (
            f"; the reader left candidate 1 on {left} of {answered} answers: fixed {moves['fixed']} wrong, "
            f"broke {moves['broke']} right, {moves['other']} other"
            + (f" ({moves['invalid']} invalid)" if moves["invalid"] else "")
        )
    return line


def render_published(path: Path, console: Console) -> int:
    """Every published row the project compares with, our number beside it from the runs under ``path``
    (a run directory or a directory of runs). For each (task, system) the run shown is a submittable one
    when there is one, then the one with the most samples, then the newest. Returns an exit code."""
    from ddibench.data.published import load_published

    if not path.exists():
        raise RunDirError(
            f"{path} does not exist",
            "give a run directory, or a directory of runs, to compare with the published numbers",
        )
    rows, papers = load_published()
    found = _best_runs(path)
    table = Table(title=f"published numbers beside ours (runs under {path})", title_justify="left")
    for col in (
        "paper",
        "table",
        "setting",
        "dataset",
        "method",
        "metric",
        "published (%)",
        "ours [95% CI]",
        "ours - published",
        "our run",
        "note",
    ):
        table.add_column(col, overflow="fold")
    compared = 0
    used: dict[tuple[str, str], Path] = {}
    for row in rows:
        ours, delta, where, run = _ours_beside(row, found)
        if run is not None:
            used[(row.task, row.system)] = run
            compared += 1
        table.add_row(
            row.paper,
            row.table,
            row.setting,
            row.dataset,
            row.method,
            row.metric,
            _as_published(row),
            ours,
            delta,
            escape(where),
            escape(row.note),
        )
    console.print(table)
    console.print(f"{compared} of {len(rows)} published rows have a number of ours under {path}")
    for (task, system), run in sorted(used.items()):
        console.print(f"  {system} on {task}: {escape(str(run))}")
    for paper in papers.values():
        console.print(f"[dim]{escape(paper.key)}: {escape(paper.cite)} — {escape(paper.where)}[/dim]")
    return 0


def _best_runs(path: Path) -> dict[tuple[str, str], tuple[Results, Path]]:
    """The finished run shown for each (task, system) under ``path``, with its directory: a submittable one when
    there is one, then the one with the most samples, then the newest (unreadable runs are skipped)."""
    found: dict[tuple[str, str], tuple[Results, Path]] = {}
    for run in find_runs(path):
        try:
            res = read_results(run / "results.json") if (run / "results.json").exists() else None
        except RunDirError:
            continue
        if res is None:
            continue
        key = (res.task, res.system)
        rank = (res.manifest.submittable, res.evaluation.n, res.manifest.created)
        if key not in found or rank > (
            found[key][0].manifest.submittable,
            found[key][0].evaluation.n,
            found[key][0].manifest.created,
        ):
            found[key] = (res, run)
    return found


def _as_published(row: PublishedRow) -> str:
    """The published value as the paper prints it (its digits, its ± std when given)."""
    digits = 1 if abs(row.value * 10 - round(row.value * 10)) < 1e-9 else 2  # as the paper prints it
    return f"{row.value:.{digits}f}" + (f" ± {row.std:.1f}" if row.std is not None else "")


def _ours_beside(
    row: PublishedRow, found: dict[tuple[str, str], tuple[Results, Path]]
) -> tuple[str, str, str, Path | None]:
    """Our number beside a published row, the difference, what the 'our run' column says, and the run used
    (None, with '—' for the numbers, where there is nothing to compare)."""
    if not row.task or not row.system:
        return "—", "—", "no counterpart here", None
    if not row.our_metric:
        return "—", "—", f"{row.task}: metric not computed", None
    if (row.task, row.system) not in found:
        return "—", "—", f"no {row.system} run on {row.task}", None
    res, run = found[(row.task, row.system)]
    metric = res.evaluation.metrics.get(row.our_metric)
    if metric is None:
        return "—", "—", f"{run.name}: no {row.our_metric}", None
    spec = res.evaluation.spec(row.our_metric)
    ours = f"{spec.format(metric.value)} [{spec.format(metric.ci_low)}, {spec.format(metric.ci_high)}]"
    delta = f"{100 * metric.value - row.value:+.1f}" if spec.unit == "fraction" else "—"
    where = f"{res.manifest.profile.name or '?'} profile" + ("" if res.manifest.submittable else ", preview (--limit)")
    return ours, delta, where, run


def render_comparison(
    run_a: Path, run_b: Path, console: Console, as_json: bool = False, load: Callable[[Path], Finished] | None = None
) -> int:
    """``report RUN_A --against RUN_B``: each metric of A minus B, paired on the samples both scored; ``load``
    reads a side (see :func:`~ddibench.runner.compare.compare`)."""
    from ddibench.runner.compare import compare

    result = compare(run_a, run_b, load=load)
    if as_json:
        rows = [
            {
                "metric": m.name,
                "a": m.a,
                "b": m.b,
                "diff": m.diff,
                "low": m.low,
                "high": m.high,
                "significant": m.significant,
            }
            for m in result.metrics
        ]
        console.print_json(
            json.dumps({"task": result.task, "a": result.a, "b": result.b, "n": result.n, "metrics": rows})
        )
        return 0
    table = Table(title=f"{result.task}: A minus B on the {result.n:,} samples both scored", title_justify="left")
    for column in ("metric", "A", "B", "A - B", f"{int(result.level * 100)}% CI", "A ≠ B"):
        table.add_column(column, justify="left" if column == "metric" else "right")
    for m in result.metrics:
        spec = m.spec
        table.add_row(
            m.title,
            spec.format(m.a),
            spec.format(m.b),
            spec.format(m.diff),
            f"[{spec.format(m.low)}, {spec.format(m.high)}]",
            "yes" if m.significant else "no",
        )
    console.print(table)
    console.print(escape(f"A: {result.a}"))
    console.print(escape(f"B: {result.b}"))
    console.print(
        f"[dim]paired cluster bootstrap of the difference ({result.replicates:,} replicates): both runs resampled with the "
        "same weights; 'yes' where the interval excludes 0[/dim]"
    )
    return 0
