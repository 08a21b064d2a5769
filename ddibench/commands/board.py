"""``ddibench submit``, ``verify`` and ``board add|serve``: submissions and the leaderboard."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import click

from ddibench.commands.common import console as _console

if TYPE_CHECKING:
    from rich.console import Console


@click.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option(
    "--out", type=click.Path(path_type=Path), default=None, help="Bundle path (default: beside the run directory)."
)
@click.option(
    "--compact",
    is_flag=True,
    help="Keep of each prediction only what the task's metrics read, and the whole trace of the first 5 samples "
    "(checked: the compact predictions must score exactly as the run did). The form of the bundles under results/.",
)
def submit(run_dir: Path, out: Path | None, compact: bool) -> None:
    """Pack a finished run into a submission bundle (predictions, manifest, hashes)."""
    from ddibench.runner.records import read_results
    from ddibench.submission import submit as make_bundle

    results = read_results(run_dir / "results.json") if (run_dir / "results.json").exists() else None
    console = _console()
    if results is not None and not results.manifest.submittable:
        reason = results.manifest.not_submittable_reason
        kind = (
            "a preview (metrics recomputed on its samples, shown apart, never ranked)"
            if reason == "--limit was used"
            else "not submittable"
        )
        console.print(f"[yellow]warning: this run will be {kind}: {reason}[/yellow]")
    path = make_bundle(run_dir, out, compact=compact)
    console.print(f"bundle: {path}")


SHOWN_CHARS = 2000


def escape(text: str) -> str:
    """Text from a bundle, shown as it is (never read as console markup), on one line of at most
    :data:`SHOWN_CHARS` characters: a refusal never floods the terminal."""
    from rich.markup import escape as rich_escape

    text = " ".join(text.splitlines())
    return rich_escape(text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + " …")


def _print_verdict(verdict: Any, console: Console) -> None:
    for name, ok, detail in verdict.checks:
        mark = "[green]ok[/green]" if ok else "[red]FAILED[/red]"
        console.print(f"  {mark} {escape(name)}: {escape(detail)}")
    if verdict.accepted:
        console.print(f"[green]accepted[/green]: trust tier {verdict.tier}")
    else:
        console.print(f"[red]rejected[/red]: {escape('; '.join(verdict.reasons))}")


def _check_tolerance(tolerance: float, reproduce: bool) -> None:
    from ddibench.errors import ConfigError

    if not 0 <= tolerance < 1:
        raise ConfigError(
            f"--tolerance {tolerance} is not a share of samples", "give a number from 0 (identical) up to, say, 0.01"
        )
    if tolerance and not reproduce:
        raise ConfigError("--tolerance applies to --reproduce only", "add --reproduce, or drop --tolerance")


@click.command()
@click.argument("bundle", type=click.Path(path_type=Path))
@click.option(
    "--reproduce", is_flag=True, help="Also re-run the system here and compare its predictions sample by sample."
)
@click.option(
    "--tolerance",
    type=float,
    default=0.0,
    show_default=True,
    help="With --reproduce: the share of samples whose re-run prediction may differ (recorded with the verdict).",
)
@click.option(
    "--add",
    "store",
    type=click.Path(path_type=Path),
    default=None,
    help="Add an accepted bundle to this results store.",
)
def verify(bundle: Path, reproduce: bool, tolerance: float, store: Path | None) -> None:
    """Check a bundle: hashes, identity, traces and cost, task version and data, full split, no --limit,
    recomputed metrics."""
    import tempfile

    from ddibench.submission import reproduce as rerun
    from ddibench.submission.sandbox import verify_isolated

    _check_tolerance(tolerance, reproduce)
    # in a child process with CPU and memory limits; the predictions come back only when they are used
    verdict = verify_isolated(bundle, keep_traces=store is not None, predictions=store is not None or reproduce)
    if reproduce and verdict.accepted:
        with tempfile.TemporaryDirectory() as tmp:
            verdict = rerun(verdict, Path(tmp) / "run", tolerance=tolerance)
    console = _console()
    _print_verdict(verdict, console)
    if verdict.accepted and store is not None:
        from ddibench.results.store import add_run

        add_run(store, verdict)
        console.print(f"added to {store}")
    sys.exit(0 if verdict.accepted else 1)


_Command = TypeVar("_Command", bound=Callable[..., Any])
StoreUse = Literal["write", "shipped", "show"]
_STORE_HELP = {
    "write": "Results store (default: $DDIBENCH_BOARD or board.duckdb).",
    "show": "Results store (default: $DDIBENCH_BOARD, else the shipped results).",
}
_RESULTS_HELP = {
    "shipped": "Results folder (default: results/ of this checkout).",
    "show": "Shipped results folder (default: results/ of this checkout).",
}


def store_options(use: StoreUse) -> Callable[[_Command], _Command]:
    """The --store (parameter ``store``) and --results (parameter ``root``) options of a board command, by what it
    does with results: ``write`` adds to or upgrades a DuckDB store (--store), ``shipped`` writes or checks the
    shipped results folder (--results), ``show`` shows a store, or else the one built from the shipped results
    (both)."""

    def decorate(command: _Command) -> _Command:
        if use in _RESULTS_HELP:
            command = click.option(
                "--results", "root", type=click.Path(path_type=Path), default=None, help=_RESULTS_HELP[use]
            )(command)
        if use in _STORE_HELP:
            command = click.option("--store", type=click.Path(path_type=Path), default=None, help=_STORE_HELP[use])(
                command
            )
        return command

    return decorate


@click.group()
def board() -> None:
    """The leaderboard: add bundles to a results store, serve the Streamlit app."""


@board.command("add")
@click.argument("bundles", nargs=-1, type=click.Path(path_type=Path))
@store_options("write")
@click.option(
    "--previews",
    is_flag=True,
    help="Also add runs that fail only because they are not submittable (--limit), as previews.",
)
@click.option(
    "--reproduce",
    is_flag=True,
    help="Also re-run each accepted bundle's system here with empty caches; a bundle whose predictions come out the same "
    "is stored with the tier 'reproduced', one that differs is rejected.",
)
@click.option(
    "--tolerance",
    type=float,
    default=0.0,
    show_default=True,
    help="With --reproduce: the share of samples that may differ.",
)
def board_add(bundles: tuple[Path, ...], store: Path | None, previews: bool, reproduce: bool, tolerance: float) -> None:
    """Verify bundles and add the accepted ones to the results store; each bundle gets its own verdict,
    and one that cannot be read or verified never stops the others."""
    import tempfile

    from ddibench.errors import DdibenchError
    from ddibench.results.store import add_run, store_path
    from ddibench.submission import reproduce as rerun
    from ddibench.submission import verify_all

    _check_tolerance(tolerance, reproduce)

    path = store_path(store)
    from ddibench.results.store import connect

    connect(path).close()  # a store that cannot be opened is refused before any bundle is read
    console = _console()
    rejected = 0
    for bundle, verdict, problem in verify_all(bundles, keep_traces=True):
        if reproduce and verdict is not None and verdict.accepted:
            try:
                with tempfile.TemporaryDirectory() as tmp:
                    verdict = rerun(verdict, Path(tmp) / "run", tolerance=tolerance)
            except DdibenchError as exc:  # e.g. the adapter is not installed here: this bundle only
                verdict, problem = None, f"not reproduced: {exc}"
        if verdict is None:
            rejected += 1
            console.print(f"{bundle.name}: [red]rejected[/red]: {escape(problem or '')}")
        elif verdict.accepted or (previews and verdict.is_preview()):
            add_run(path, verdict)
            console.print(f"{bundle.name}: added ({verdict.tier}{', preview' if not verdict.accepted else ''})")
        else:
            rejected += 1
            console.print(f"{bundle.name}: [red]rejected[/red]: {escape('; '.join(verdict.reasons))}")
    sys.exit(1 if rejected else 0)


@board.command("upgrade")
@store_options("write")
def board_upgrade(store: Path | None) -> None:
    """Bring a results store written by an earlier ddibench to this one's layout, in place (the board reads
    only the current layout; adding a bundle upgrades a store too)."""
    from ddibench.errors import ConfigError
    from ddibench.results.store import connect, store_path

    path = store_path(store)
    if not path.is_file():
        raise ConfigError(f"no results store at {path}", "give --store the DuckDB file to upgrade")
    connect(path).close()
    _console().print(f"{path}: upgraded to this ddibench's layout")


def _report(outcome: Any) -> None:
    console = _console()
    name = outcome.bundle.name if outcome.entry is None else outcome.entry["path"]
    if outcome.problem is not None:
        console.print(f"{escape(name)}: [red]FAILED[/red]: {escape(outcome.problem)}")
        return
    e = outcome.entry
    interval = f"[{e['ci_low']:.4f}, {e['ci_high']:.4f}]" if e["ci_low"] is not None else ""
    reproduced = (
        f", {e['reproduction']['identical']:,} of {e['reproduction']['n']:,} predictions reproduced"
        if e.get("reproduction")
        else ""
    )
    console.print(
        f"{escape(name)}: [green]ok[/green] {e['tier']}{reproduced}; {e['primary_metric']} {e['value']:.4f} {interval} on n={e['n']:,}"
    )


@board.command("publish")
@click.argument("bundles", nargs=-1, required=True, type=click.Path(path_type=Path))
@store_options("shipped")
@click.option("--previews", is_flag=True, help="Also publish --limit previews (shown apart, never ranked).")
@click.option(
    "--reproduce/--no-reproduce",
    default=None,
    help="Re-run every bundle's system here (--reproduce) or none (--no-reproduce); by default those whose run took under 5 seconds (CI re-runs those on every commit).",
)
def board_publish(bundles: tuple[Path, ...], root: Path | None, previews: bool, reproduce: bool | None) -> None:
    """Verify bundles and add the accepted ones to the shipped results (results/<task>/<system>/<run>.tar.gz),
    with results/index.json and the results tables (results/README.md, README.md, docs/results.md) regenerated:
    all written together once every check passed, or nothing. The new bundles are verified in full; the shipped ones are
    checked by hash against the index (CI recomputes them all: 'ddibench board check')."""
    import time

    from ddibench.results.shipped import publish

    folder = root or _default_results()
    started = time.perf_counter()
    with _BuildProgress(folder) as building:
        outcomes = publish(
            folder,
            bundles,
            previews=previews,
            reproduce=reproduce,
            progress=_report,
            tables=lambda store: tables(folder, store),
            store_progress=building,
        )
    failed = sum(o.problem is not None for o in outcomes)
    _console().print(
        f"{len(outcomes) - failed} of {len(outcomes)} bundles published to {folder} in {time.perf_counter() - started:.0f} s"
        + ("; the index and the results tables were regenerated" if failed < len(outcomes) else "; nothing was written")
    )
    sys.exit(1 if failed else 0)


def _default_results() -> Path:
    """$DDIBENCH_RESULTS, else results/ of this checkout (created on the first publish)."""
    import os

    from ddibench.results.shipped import RESULTS_ENV, checkout_results

    value = os.environ.get(RESULTS_ENV, "").strip()
    return Path(value) if value else checkout_results()


RESULTS_MARKERS = (
    "<!-- results:start (generated by 'ddibench board publish'; do not edit) -->",
    "<!-- results:end -->",
)


RESULTS_PAGE = Path("docs") / "results.md"  # in a checkout, beside results/: the full table on the docs site


def tables(folder: Path, store: Path) -> dict[Path, str]:
    """The results tables of a results store (path: text, for :func:`ddibench.results.shipped.publish` to write with the
    rest): results/README.md with the full table and, when the folder is a checkout's results/, the results sections
    of the README (the compact ranked table) and of docs/results.md (the full table)."""
    from ddibench.leaderboard.static import markdown_table, ranked_table

    table = markdown_table(store)
    texts = {folder / "README.md": results_readme(table)}
    for page, shown in ((folder.parent / "README.md", ranked_table), (folder.parent / RESULTS_PAGE, None)):
        if page.is_file() and RESULTS_MARKERS[0] in (text := page.read_text(encoding="utf-8")):
            texts[page] = replace_section(text, shown(store) if shown is not None else table)
    return texts


def results_readme(table: str) -> str:
    return (
        "# Shipped results\n\n"
        "Every run below is a bundle in this folder (`<task>/<system>/<run id>.tar.gz`), verified by recomputing its metrics "
        "from its per-sample predictions; `index.json` lists them. Both files are generated by `ddibench board publish`; "
        "CI verifies every bundle again (`ddibench board check`). Browse them with `ddibench board serve`, or write a "
        "static site with `ddibench board export --html DIR`.\n\n" + table
    )


def replace_section(text: str, table: str) -> str:
    start, end = RESULTS_MARKERS
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{start}\n{table}{end}{tail}"


@board.command("check")
@store_options("shipped")
@click.option("--no-reproduce", is_flag=True, help="Recompute only; do not re-run the runs the index calls reproduced.")
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=None,
    help="Bundles checked at once, each in its own sandboxed process (default: one per CPU, at most 4).",
)
def board_check(root: Path | None, no_reproduce: bool, workers: int | None) -> None:
    """Verify every shipped bundle against results/index.json (recomputed numbers, hashes, reproductions, size budget)."""
    import time

    from ddibench.results.shipped import check, results_root

    folder = results_root(root)
    started = time.perf_counter()
    report = check(folder, reproduce=not no_reproduce, progress=_report, workers=workers)
    console = _console()
    for problem in report.problems:
        if not any(o.problem == problem for o in report.outcomes):
            console.print(f"[red]FAILED[/red]: {escape(problem)}")
    verified = sum(o.problem is None for o in report.outcomes)
    console.print(
        f"{verified} of {len(report.outcomes)} shipped bundles verified in {time.perf_counter() - started:.0f} s; "
        f"results/ holds {report.total_bytes / 2**20:.1f} MiB"
    )
    sys.exit(0 if report.ok else 1)


def streamlit_command(app: Path, port: int, host: str = "127.0.0.1") -> list[str]:
    """The Streamlit server of the board: on one interface, headless, no usage stats, no Deploy button."""
    return [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(app),
        "--server.port",
        str(port),
        "--server.address",
        host,
        "--server.headless",
        "true",
        "--browser.gatherUsageStats",
        "false",
        "--browser.serverAddress",
        host,
        "--client.toolbarMode",
        "viewer",
        "--server.showEmailPrompt",
        "false",
    ]


def board_store(store: Path | None, root: Path | None) -> Path:
    """The store to show: --store or $DDIBENCH_BOARD when given, else one built from the shipped results
    (once per results index, then cached)."""
    import os

    from ddibench.results.shipped import results_root, shipped_store
    from ddibench.results.store import store_path

    if store is not None or (root is None and os.environ.get("DDIBENCH_BOARD")):
        path = store_path(store)
        if not path.is_file():
            from ddibench.errors import ConfigError

            raise ConfigError(
                f"no results store at {path}",
                "add bundles with 'ddibench board add --store PATH BUNDLE', or drop --store to show the shipped results",
            )
        return path
    folder = results_root(root)
    with _BuildProgress(folder) as building:
        return shipped_store(folder, progress=building)


class _BuildProgress:
    """The progress of building the board's store from the shipped results in ``folder``, shown only when one
    is built (it is cached per index): bundles read of the index's total, and a line for each one left out."""

    def __init__(self, folder: Path) -> None:
        from ddibench.results.shipped import read_index

        self.folder = folder
        self.total = len(read_index(folder)["runs"]) if folder.is_dir() else 0
        self.bar: Any = None
        self.task: Any = None

    def __enter__(self) -> _BuildProgress:
        return self

    def __call__(self, outcome: Any) -> None:
        if self.bar is None:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            _console().print(
                f"building the board of the shipped results in {self.folder} (once per results index; each bundle's "
                "sha256 checked against the index, its recorded results read: CI's 'board check' recomputed them)"
            )
            self.bar = Progress(
                TextColumn("bundles"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=_console()
            )
            self.bar.start()
            self.task = self.bar.add_task("bundles", total=self.total or None)
        if outcome.problem is not None:
            self.bar.console.print(f"{escape(outcome.bundle.name)}: [red]{escape(outcome.problem)}[/red]")
        self.bar.advance(self.task)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()


@board.command("serve")
@store_options("show")
@click.option("--port", type=int, default=8501, show_default=True)
@click.option(
    "--host", default="127.0.0.1", show_default=True, help="Interface to listen on (0.0.0.0 to serve other machines)."
)
def board_serve(store: Path | None, root: Path | None, port: int, host: str) -> None:
    """Serve the leaderboard on http://HOST:PORT (stops the whole server on Ctrl-C or SIGTERM); with no
    --store, the results that ship with ddibench."""
    import os
    import signal
    import subprocess

    import ddibench.leaderboard

    path = board_store(store, root)
    app = Path(ddibench.leaderboard.__file__).parent / "app.py"
    env = {**os.environ, "DDIBENCH_BOARD": str(path.resolve())}
    if root is not None:  # the app reads the memorisation probes of the same results folder
        env["DDIBENCH_RESULTS"] = str(root.resolve())
    child = subprocess.Popen(
        streamlit_command(app, port, host), env=env, start_new_session=True
    )  # its own process group: stopped as a whole

    def stop(signum: int, frame: object) -> None:
        try:
            os.killpg(child.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    _console().print(f"leaderboard of {path} on http://{host}:{port} (Ctrl-C stops it)")
    try:
        code = child.wait()
    finally:
        stop(signal.SIGTERM, None)
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
    sys.exit(0 if code in (0, -signal.SIGTERM) else code)


@board.command("export")
@click.option(
    "--html",
    "html_dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Write a static site (opens from the file system, no server) into this directory.",
)
@click.option(
    "--markdown",
    "markdown_file",
    type=click.Path(path_type=Path),
    default=None,
    help="Write the results table as GitHub markdown to this file ('-': standard output).",
)
@store_options("show")
def board_export(html_dir: Path | None, markdown_file: Path | None, store: Path | None, root: Path | None) -> None:
    """Export the leaderboard: a self-contained static site (--html DIR) and/or a markdown table (--markdown FILE)."""
    from ddibench.errors import ConfigError

    if html_dir is None and markdown_file is None:
        raise ConfigError("nothing to export", "give --html DIR and/or --markdown FILE")
    path = board_store(store, root)
    console = _console()
    if html_dir is not None:
        from ddibench.leaderboard.data import read_probes
        from ddibench.leaderboard.static import write_site

        summary = write_site(path, html_dir, read_probes(root))
        console.print(f"static site in {html_dir}: {summary}; open {html_dir / 'index.html'}")
    if markdown_file is not None:
        from ddibench.leaderboard.static import markdown_table

        table = markdown_table(path)
        if str(markdown_file) == "-":
            click.echo(table, nl=False)
        else:
            markdown_file.write_text(table, encoding="utf-8")
            console.print(f"results table in {markdown_file}")
