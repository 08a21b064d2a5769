"""Human-readable views of run results (``ddibench run`` and ``ddibench report``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ddibench.errors import RunDirError

METRIC_LABELS = {
    "accuracy": "accuracy (%)",
    "macro_f1": "macro-F1 (%)",
    "kappa": "Cohen's kappa (%)",
    "embedding_similarity": "embedding similarity",
    "bertscore_f1": "BERTScore F1",
    "label_recovery": "label recovery (%)",
    "judge_correctness": "judge correctness (1-5)",
    "judge_clarity": "judge clarity (1-5)",
    "judge_overall": "judge overall (1-5)",
    "selfcheck": "SelfCheckGPT (0-1, lower better)",
}
PERCENT = {"accuracy", "macro_f1", "kappa", "label_recovery"}


def _fmt(name: str, value: float | None) -> str:
    if value is None or value != value:
        return "—"
    return f"{100 * value:.1f}" if name in PERCENT else f"{value:.3f}" if value < 1.0001 and not name.startswith("judge_") else f"{value:.2f}"


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f}"


def render_results(results: dict[str, Any], console: Console, run_dir: Path | None = None) -> None:
    ev = results["evaluation"]
    man = results["manifest"]
    boot = ev["bootstrap"]
    title = f"{results['system']} on {results['task']} ({man['split']}, n={ev['n']:,})"
    table = Table(title=title, title_justify="left")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_column(f"{int(boot['level'] * 100)}% CI", justify="right")
    for name, m in ev["metrics"].items():
        primary = " *" if name == ev["primary_metric"] else ""
        table.add_row(METRIC_LABELS.get(name, name) + primary, _fmt(name, m["value"]), f"[{_fmt(name, m['ci_low'])}, {_fmt(name, m['ci_high'])}]")
    console.print(table)
    console.print(
        f"invalid (unparsable) predictions: {ev['n_invalid']:,} of {ev['n']:,}, scored as wrong"
        + (f"; e.g. {ev['invalid_examples'][0]['error']}" if ev["invalid_examples"] else "")
    )
    console.print(f"CI: {boot['description']}, {boot['replicates']} replicates, seed {boot['seed']}")
    if ev.get("breakdown") and len(ev["breakdown"]) > 1:
        parts = []
        for key, values in ev["breakdown"].items():
            shown = ", ".join(f"{m}={_fmt(m, v)}" for m, v in values.items() if m not in ("n", "n_invalid"))
            parts.append(f"{key}: n={values['n']:,} {shown}")
        console.print("breakdown: " + "; ".join(parts))
    cost = results.get("cost", {})
    for role, per in cost.get("per_item", {}).items():
        totals = cost["by_role"][role]
        console.print(
            f"LLM {role}: {per['calls']} calls, {per['prompt_tokens']:.0f} prompt + {per['completion_tokens']:.0f} "
            f"completion tokens per item ({int(totals['calls']):,} calls in all, {int(totals['served_from_cache']):,} from cache)"
        )
    timing = results.get("timing", {})
    console.print(
        f"time: {timing.get('wall_s_total', 0):.1f} s over {man['sessions']} session(s) "
        f"(prepare {timing.get('prepare_s_total', 0):.1f} s, predict {timing.get('predict_s_total', 0):.1f} s)"
    )
    code = f"{man['git_commit'][:12]}{' (dirty)' if man['git_dirty'] else ''}" if man.get("git_commit") else "no git checkout"
    models = ", ".join(f"{r}={m['spec']} ({_short_identity(m['identity'])})" for r, m in man.get("models", {}).items())
    console.print(
        escape(f"provenance: ddibench {man['ddibench_version']} [{code}], task {man['task']['name']} {man['task']['version']} "
        f"data {man['task']['data_sha256'][:12]}, system {man['system']['name']} {man['system']['version']} "
        f"config {man['system']['config_hash']}" + (f", {models}" if models else "")
        + f", profile {man['profile']['declared']['name']}")
    )
    scoring = man.get("scoring", {})
    if "judge" in scoring:
        console.print(escape(f"judge: {_short_identity(scoring['judge']['identity'])} {scoring['judge']['identity'].get('model')}, rubric {scoring['judge']['rubric_sha256'][:12]}"))
    if "judge_agreement" in scoring:
        console.print(f"judge agreement: {scoring['judge_agreement']}")
    if "selfcheck" in scoring:
        console.print(f"SelfCheckGPT: n={scoring['selfcheck']['n']} samples at temperature {scoring['selfcheck']['temperature']}, seeds {scoring['selfcheck']['seeds']}")
    if man["profile"].get("warning"):
        console.print(f"[yellow]warning: {escape(man['profile']['warning'])}[/yellow]")
    for deviation in man["task"].get("deviations", []):
        console.print(f"[dim]task note: {escape(deviation)}[/dim]")
    for deviation in man["system"].get("deviations", []):
        console.print(f"[dim]system note: {escape(deviation)}[/dim]")
    if not man["submittable"]:
        console.print(f"[yellow]not submittable: {man['not_submittable_reason']}[/yellow]")
    if run_dir is not None:
        console.print(f"run directory: {run_dir}")


def _short_identity(identity: dict[str, Any]) -> str:
    if "weights_sha256" in identity:
        return f"weights {identity['weights_sha256'][:12]}"
    if "revision" in identity:
        return f"revision {identity['revision']}"
    return identity.get("base_url", "")


def find_runs(root: Path) -> list[Path]:
    return sorted(p.parent for p in root.rglob("run.json"))


def render_report(path: Path, console: Console, as_json: bool = False) -> int:
    """Report one run directory, or list every run under a directory of runs. Returns an exit code."""
    if not path.exists():
        raise RunDirError(f"{path} does not exist", "give a run directory printed by 'ddibench run'")
    results_file = path / "results.json"
    if results_file.exists():
        results = json.loads(results_file.read_text(encoding="utf-8"))
        if as_json:
            console.print_json(json.dumps(results))
        else:
            render_results(results, console, path)
        return 0
    if (path / "run.json").exists():
        ident = json.loads((path / "run.json").read_text(encoding="utf-8"))
        journal = path / "journal.jsonl"
        done = sum(1 for line in journal.open(encoding="utf-8") if line.strip()) if journal.exists() else 0
        console.print(
            f"{path}: incomplete run of {ident['system']['name']} on {ident['task']['name']}: "
            f"{done:,} of {ident['n_samples']:,} samples journalled; re-run the same 'ddibench run' command to finish it"
        )
        return 1
    runs = find_runs(path)
    if not runs:
        raise RunDirError(f"{path} holds no ddibench runs", "give a run directory printed by 'ddibench run'")
    table = Table(title=f"runs under {path}", title_justify="left")
    for col in ("task", "system", "run id", "n", "macro-F1 (%)", "accuracy (%)", "status"):
        table.add_column(col)
    for run in runs:
        ident = json.loads((run / "run.json").read_text(encoding="utf-8"))
        res_file = run / "results.json"
        if res_file.exists():
            res = json.loads(res_file.read_text(encoding="utf-8"))
            metrics = res["evaluation"]["metrics"]
            status = "complete" if res["manifest"]["submittable"] else f"complete ({res['manifest']['not_submittable_reason']})"
            table.add_row(
                ident["task"]["name"], ident["system"]["name"], ident["run_id"], f"{ident['n_samples']:,}",
                _pct(metrics.get("macro_f1", {}).get("value")), _pct(metrics.get("accuracy", {}).get("value")), status,
            )  # fmt: skip
        else:
            table.add_row(ident["task"]["name"], ident["system"]["name"], ident["run_id"], f"{ident['n_samples']:,}", "—", "—", "incomplete")
    console.print(table)
    return 0
