"""``ddibench cache``: the response cache's answers by model, and as a file another machine can import.

An answer a model wrote once (a drug description, an insight) need not be asked again on another machine: ``export``
writes the cache's rows of one model to a file, ``import`` adds a file's rows to this machine's cache after checking
every row (:mod:`ddibench.llm._cache_files`). CBR-DDI's describer descriptions of the whole DrugBank catalogue take
about two hours of the 1.5B reader on two CPU cores; imported, a run answers them from the cache in seconds.
"""

from __future__ import annotations

from pathlib import Path

import click

from ddibench.commands.common import console as _console


def _cache_path() -> Path:
    from ddibench.runner.plan import open_cache  # the one cache every run and scorer shares

    return open_cache().path


@click.group()
def cache() -> None:
    """The LLM response cache: what it holds, and its answers as a file to import elsewhere."""


@cache.command("list")
def list_() -> None:
    """The cache's answers counted by model."""
    from ddibench.llm._cache_files import list_models

    path = _cache_path()
    console = _console()
    for model, count in list_models(path).items():
        console.print(f"{count:>9,}  {model}")
    console.print(f"in {path}")


@cache.command("export")
@click.argument("out", type=click.Path(path_type=Path, dir_okay=False))
@click.option(
    "--model", "-m", "model", default=None, help="Only this model's answers (its name, as 'cache list' shows it)."
)
def export(out: Path, model: str | None) -> None:
    """Write the cache's answers (of one model, with --model) to OUT, gzip-compressed JSON lines."""
    from ddibench.llm._cache_files import export_responses

    n = export_responses(_cache_path(), out, model)
    _console().print(f"wrote {n:,} answers to {out} ({out.stat().st_size / 1e6:.1f} MB)")


@cache.command("import")
@click.argument("file", type=click.Path(path_type=Path, dir_okay=False, exists=True))
def import_(file: Path) -> None:
    """Add FILE's answers (written by 'ddibench cache export') to this machine's cache, keeping those it holds.
    Every row's key is computed again from its model and request; one bad row imports nothing."""
    from ddibench.llm._cache_files import import_responses
    from ddibench.runner.plan import open_cache

    target = open_cache()
    target.check()
    try:
        done = import_responses(target, file)
    finally:
        target.close()
    _console().print(
        f"imported {done.added:,} of {done.rows:,} answers ({done.rows - done.added:,} were cached already) "
        f"of {', '.join(done.models)} into {target.path}"
    )
