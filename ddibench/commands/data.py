"""``ddibench data list|fetch|verify|stats``: the pinned source data and task statistics."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ddibench.commands.common import console as _console
from ddibench.commands.common import progress as _progress
from ddibench.errors import DdibenchError

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from ddibench.task import Check, Task, TaskData


@click.group()
def data() -> None:
    """Pinned source data: list, fetch, verify, and task statistics."""


def _datasets_for(names: tuple[str, ...], task_names: tuple[str, ...]) -> list[Any]:
    from ddibench.data.sources import all_datasets, dataset
    from ddibench.registry import get_task

    if task_names:
        files = {src for t in task_names for src in get_task(t).sources}
        return sorted(files, key=lambda s: s.relpath)
    chosen = [dataset(n) for n in names] if names else list(all_datasets().values())
    return [f for d in chosen for f in d.files]


@data.command("list")
def data_list() -> None:
    """Datasets with their upstream source, licences and local status."""
    from rich.table import Table

    from ddibench.data.resolve import mirror_root, verify
    from ddibench.data.sources import all_datasets

    table = Table(title_justify="left", show_lines=True)
    for col in ("dataset", "upstream (repository @ commit)", "files", "size", "licence(s)", "local"):
        table.add_column(col, overflow="fold")
    for ds in all_datasets().values():
        statuses = [verify(f) for f in ds.files]
        ok = sum(s.status == "ok" for s in statuses)
        bad = sum(s.status == "bad" for s in statuses)
        local = f"{ok}/{len(statuses)} verified" + (f", [red]{bad} bad[/red]" if bad else "")
        table.add_row(
            f"{ds.key}\n[dim]{ds.title}[/dim]",
            f"{ds.upstream}",
            str(len(ds.files)),
            f"{ds.total_bytes / 1e6:.1f} MB",
            "\n".join(ds.licenses),
            local,
        )
    console = _console()
    console.print(table)
    root = mirror_root()
    console.print(f"mirror: {root if root else 'not set (DDIBENCH_MIRROR)'}")
    console.print(
        "Licences: DrugBank-derived files are CC BY-NC 4.0 (non-commercial); 'none-in-repo' means the upstream "
        "repository states no licence. Check the terms before redistributing results that include the data."
    )


@data.command("fetch")
@click.argument("datasets", nargs=-1)
@click.option("--task", "tasks", multiple=True, help="Fetch the files of this task (repeatable).")
@click.option("--refresh", is_flag=True, help="Download again even when a verified copy is cached.")
def data_fetch(datasets: tuple[str, ...], tasks: tuple[str, ...], refresh: bool) -> None:
    """Resolve files (mirror, cache, else download with verification). Default: every pinned file."""
    from ddibench.data.resolve import fetch, locate

    files = _datasets_for(datasets, tasks)
    console = _console()
    with _progress(console) as progress:
        overall = progress.task("files", len(files))
        for src in files:
            if not refresh and locate(src) is not None:
                overall.advance()
                continue
            bar = progress.task(src.path.rsplit("/", 1)[-1], src.bytes)
            done = [0]

            def on_progress(received: int, total: int, bar: Any = bar, done: list[int] = done) -> None:
                bar.advance(received - done[0])
                done[0] = received

            fetch(src, progress=on_progress, refresh=refresh)
            overall.advance()
    console.print(f"{len(files)} files verified")


@data.command("verify")
@click.argument("datasets", nargs=-1)
@click.option("--task", "tasks", multiple=True, help="Verify the files of this task (repeatable).")
def data_verify(datasets: tuple[str, ...], tasks: tuple[str, ...]) -> None:
    """Check the sha256 of every local copy (mirror and cache) against its pin; download nothing."""
    from ddibench.data.resolve import verify

    files = _datasets_for(datasets, tasks)
    console = _console()
    counts = {"ok": 0, "missing": 0, "bad": 0}
    for src in files:
        result = verify(src)
        counts[result.status] += 1
        if result.status == "bad":
            console.print(f"[red]BAD[/red] {src.relpath}: {result.detail}")
        elif result.status == "missing":
            console.print(f"[yellow]missing[/yellow] {src.relpath}")
    console.print(f"{counts['ok']} verified, {counts['missing']} missing, {counts['bad']} bad")
    if counts["bad"]:
        raise DdibenchError(
            f"{counts['bad']} local file(s) do not match their pinned sha256", "run 'ddibench data fetch --refresh'"
        )
    if counts["missing"]:
        sys.exit(1)


@data.command("stats")
@click.argument("tasks", nargs=-1)
def data_stats(tasks: tuple[str, ...]) -> None:
    """Split sizes, cluster keys, source rows before and after deduplication, and the checks each task
    verifies (default: every task)."""
    from ddibench.registry import task_names

    names = list(tasks) or task_names()
    console = _console()
    loads = _load_tasks(names)
    console.print(_split_table(loads))
    source_stats = {name: loaded.stats for name, _, loaded in loads if loaded.stats}
    if source_stats:  # what each task states about its source rows (e.g. counts before and after deduplication)
        console.print(_source_table(source_stats))
    _print_checks({name: loaded.checks for name, _, loaded in loads}, console)
    failed = sum(not c.ok for _, _, loaded in loads for c in loaded.checks)
    if failed:
        raise DdibenchError(f"{failed} data check(s) failed", "see above")


def _load_tasks(names: list[str]) -> list[tuple[str, Task, TaskData]]:
    """Each named task with its loaded (and so checked) data, in order; a progress bar on stderr says which."""
    from ddibench.registry import get_task

    with _progress(_console(stderr=True)) as shown:  # loading every task takes a minute: say which one
        bar = shown.task("loading and checking tasks", total=len(names))
        loads = []
        for name in names:
            bar.update(description=f"loading and checking {name}")
            task = get_task(name)
            loads.append((name, task, task.load()))
            bar.advance()
        bar.update(description="loaded and checked")
        bar.close()
    return loads


def _split_table(loads: list[tuple[str, Task, TaskData]]) -> Table:
    """The table of each task's split sizes, cluster keys per split and checks passed."""
    from rich.table import Table

    table = Table(
        title="split sizes (samples) and cluster keys per split (what the bootstrap resamples)", title_justify="left"
    )
    for col in ("task", "setting", "train", "valid", "test", "clusters train/valid/test", "checks"):
        table.add_column(col, justify="right" if col in ("train", "valid", "test") else "left")
    for name, task, loaded in loads:
        sizes = {s: len(v) for s, v in loaded.splits.items()}
        clusters = {s: len({k for sample in v for k in sample.clusters}) for s, v in loaded.splits.items()}
        n_ok = sum(c.ok for c in loaded.checks)
        table.add_row(
            name,
            task.setting,
            f"{sizes['train']:,}",
            f"{sizes['valid']:,}",
            f"{sizes['test']:,}",
            f"{clusters['train']:,} / {clusters['valid']:,} / {clusters['test']:,} {task.cluster_unit}",
            f"{n_ok}/{len(loaded.checks)} passed",
        )
    return table


def _source_table(source_stats: dict[str, dict[str, Any]]) -> Table:
    """The table of what each task states about its source rows (counts before and after deduplication) or its
    splits (a time split's composition and approval dates), one column per statistic any task gives."""
    from rich.table import Table

    columns = list(dict.fromkeys(k for row in source_stats.values() for k in row))
    extra = Table(
        title="what each task states about its source rows and splits (see the notes below)", title_justify="left"
    )
    extra.add_column("task")
    for col in columns:
        extra.add_column(col, justify="right")
    for name, row in source_stats.items():
        extra.add_row(name, *(f"{row[c]:,}" if isinstance(row.get(c), int) else str(row.get(c, "")) for c in columns))
    return extra


def _print_checks(all_checks: dict[str, list[Check]], console: Console) -> None:
    """Nothing: prints each task's checks with their outcome, and its notes."""
    from ddibench.registry import get_task

    for name, checks in all_checks.items():
        console.print(f"\n[bold]{name}[/bold]")
        for c in checks:
            mark = "[green]ok[/green]" if c.ok else "[red]FAILED[/red]"
            console.print(f"  {mark} {c.name}: {c.detail}")
        for deviation in get_task(name).deviations:
            console.print(f"  [dim]note: {deviation}[/dim]")


@data.command("export")
@click.argument("task_name")
@click.argument("out", type=click.Path(path_type=Path))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["parquet", "hf"]),
    default="parquet",
    show_default=True,
    help="parquet: one file per split (load_dataset('parquet', ...)); hf: DatasetDict.save_to_disk (load_from_disk).",
)
@click.option("--split", "splits", multiple=True, help="Export only this split (repeatable; default: every split).")
def data_export(task_name: str, out: Path, fmt: str, splits: tuple[str, ...]) -> None:
    """Write a task's splits as a Hugging Face dataset with typed features and a dataset card."""
    from ddibench.interop.hf_datasets import export
    from ddibench.registry import get_task

    task = get_task(task_name)
    written = export(task, out, fmt, list(splits) or None)
    sizes = ", ".join(f"{k} {v:,}" for k, v in written["sizes"].items())
    _console().print(
        f"{task_name} -> {out} ({fmt}: {sizes}; {written['bytes'] / 1e6:.1f} MB, data sha256 {task.data_sha256[:12]})"
    )
