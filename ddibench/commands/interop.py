"""``ddibench export lm-eval`` and ``ddibench import lm-eval``: ddibench tasks in lm-evaluation-harness, and back."""

from __future__ import annotations

from pathlib import Path

import click

from ddibench.commands.common import console as _console
from ddibench.commands.common import limit_option


@click.group("export")
def export() -> None:
    """Write ddibench tasks in another tool's format (lm-eval)."""


@export.command("lm-eval")
@click.argument("out", type=click.Path(path_type=Path))
@click.option("--task", "-t", "tasks", multiple=True, required=True, help="Task to export (repeatable).")
@limit_option(
    "Export the stratified, seeded subset of N samples that 'ddibench run --limit N' uses.",
    "omit it to export the whole evaluation split",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the --limit subset.")
@click.option(
    "--json-mode",
    type=click.Choice(["none", "schema", "object", "llamacpp"]),
    default="none",
    show_default=True,
    help="Ask the server for constrained JSON as ddibench would (schema: OpenAI/vLLM; llamacpp: llama.cpp's server).",
)
def export_lm_eval(out: Path, tasks: tuple[str, ...], limit: int | None, seed: int, json_mode: str) -> None:
    """Write lm-eval task configs (YAML, documents, glue) that use ddibench's prompts, parser and metrics."""
    from ddibench.interop.lm_eval.export import export as write
    from ddibench.registry import get_task

    written = write([get_task(t) for t in tasks], out, limit, seed, json_mode)
    console = _console()
    for name, info in written.items():
        console.print(f"{name} -> {info['lm_eval_task']} ({info['documents']:,} documents, {info['kind']})")
    names = ",".join(info["lm_eval_task"] for info in written.values())
    console.print(
        f"run: lm_eval --include_path {out} --tasks {names} --model local-chat-completions "
        "--model_args base_url=http://HOST:PORT/v1/chat/completions,model=NAME,tokenized_requests=False "
        "--apply_chat_template --log_samples --output_path OUT",
        markup=False,
    )


@click.group("import")
def import_() -> None:
    """Bring answers made by another tool back as ddibench runs (lm-eval)."""


@import_.command("lm-eval")
@click.argument("samples", type=click.Path(path_type=Path))
@click.option(
    "--runs-dir",
    type=click.Path(path_type=Path),
    default=Path("runs"),
    show_default=True,
    help="Root directory shared by runs.",
)
@click.option("--run-dir", type=click.Path(path_type=Path), default=None, help="Write exactly this run directory.")
def import_lm_eval(samples: Path, runs_dir: Path, run_dir: Path | None) -> None:
    """Turn lm-eval's --log_samples output of an exported task into a ddibench run directory."""
    from ddibench.interop.lm_eval.importing import import_samples
    from ddibench.runner.records import read_results
    from ddibench.runner.report import render_results

    target = import_samples(samples, runs_dir, run_dir)
    render_results(read_results(target / "results.json"), _console(), target)
