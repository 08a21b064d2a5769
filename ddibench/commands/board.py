"""``ddibench submit``, ``verify`` and ``board add|serve``: submissions and the leaderboard."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ddibench.commands.common import console as _console

if TYPE_CHECKING:
    from rich.console import Console


@click.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), default=None, help="Bundle path (default: beside the run directory).")
def submit(run_dir: Path, out: Path | None) -> None:
    """Pack a finished run into a submission bundle (predictions, manifest, hashes)."""
    from ddibench.runner.records import read_results
    from ddibench.submission import submit as make_bundle

    results = read_results(run_dir / "results.json") if (run_dir / "results.json").exists() else None
    console = _console()
    if results is not None and not results.manifest.submittable:
        reason = results.manifest.not_submittable_reason
        kind = "a preview (metrics recomputed on its samples, shown apart, never ranked)" if reason == "--limit was used" else "not submittable"
        console.print(f"[yellow]warning: this run will be {kind}: {reason}[/yellow]")
    path = make_bundle(run_dir, out)
    console.print(f"bundle: {path}")


def escape(text: str) -> str:
    """Text from a bundle, shown as it is (never read as console markup)."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)


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
        raise ConfigError(f"--tolerance {tolerance} is not a share of samples", "give a number from 0 (identical) up to, say, 0.01")
    if tolerance and not reproduce:
        raise ConfigError("--tolerance applies to --reproduce only", "add --reproduce, or drop --tolerance")


@click.command()
@click.argument("bundle", type=click.Path(path_type=Path))
@click.option("--reproduce", is_flag=True, help="Also re-run the system here and compare its predictions sample by sample.")
@click.option(
    "--tolerance",
    type=float,
    default=0.0,
    show_default=True,
    help="With --reproduce: the share of samples whose re-run prediction may differ (recorded with the verdict).",
)
@click.option(
    "--add", "store", type=click.Path(path_type=Path), default=None, help="Add an accepted bundle to this results store."
)
def verify(bundle: Path, reproduce: bool, tolerance: float, store: Path | None) -> None:
    """Check a bundle: hashes, identity, traces and cost, task version and data, full split, no --limit,
    recomputed metrics."""
    import tempfile

    from ddibench.submission import reproduce as rerun
    from ddibench.submission import verify as check

    _check_tolerance(tolerance, reproduce)
    verdict = check(bundle, keep_traces=store is not None)
    if reproduce and verdict.accepted:
        with tempfile.TemporaryDirectory() as tmp:
            verdict = rerun(verdict, Path(tmp) / "run", tolerance=tolerance)
    console = _console()
    _print_verdict(verdict, console)
    if verdict.accepted and store is not None:
        from ddibench.store import add_run

        add_run(store, verdict)
        console.print(f"added to {store}")
    sys.exit(0 if verdict.accepted else 1)


@click.group()
def board() -> None:
    """The leaderboard: add bundles to a results store, serve the Streamlit app."""


@board.command("add")
@click.argument("bundles", nargs=-1, type=click.Path(path_type=Path))
@click.option(
    "--store", type=click.Path(path_type=Path), default=None, help="Results store (default: $DDIBENCH_BOARD or board.duckdb)."
)
@click.option(
    "--previews", is_flag=True, help="Also add runs that fail only because they are not submittable (--limit), as previews."
)
@click.option(
    "--reproduce",
    is_flag=True,
    help="Also re-run each accepted bundle's system here with empty caches; a bundle whose predictions come out the same "
    "is stored with the tier 'reproduced', one that differs is rejected.",
)
@click.option("--tolerance", type=float, default=0.0, show_default=True, help="With --reproduce: the share of samples that may differ.")
def board_add(bundles: tuple[Path, ...], store: Path | None, previews: bool, reproduce: bool, tolerance: float) -> None:
    """Verify bundles and add the accepted ones to the results store; each bundle gets its own verdict,
    and one that cannot be read or verified never stops the others."""
    import tempfile

    from ddibench.errors import DdibenchError
    from ddibench.store import add_run, store_path
    from ddibench.submission import reproduce as rerun
    from ddibench.submission import verify_all

    _check_tolerance(tolerance, reproduce)

    path = store_path(store)
    from ddibench.store import connect

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


def streamlit_command(app: Path, port: int, host: str = "127.0.0.1") -> list[str]:
    """The Streamlit server of the board: on one interface, headless, no usage stats, no Deploy button."""
    return [sys.executable, "-m", "streamlit", "run", str(app), "--server.port", str(port), "--server.address", host,
            "--server.headless", "true", "--browser.gatherUsageStats", "false", "--browser.serverAddress", host,
            "--client.toolbarMode", "viewer", "--server.showEmailPrompt", "false"]  # fmt: skip


@board.command("serve")
@click.option(
    "--store", type=click.Path(path_type=Path), default=None, help="Results store (default: $DDIBENCH_BOARD or board.duckdb)."
)
@click.option("--port", type=int, default=8501, show_default=True)
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on (0.0.0.0 to serve other machines).")
def board_serve(store: Path | None, port: int, host: str) -> None:
    """Serve the leaderboard on http://HOST:PORT (stops the whole server on Ctrl-C or SIGTERM)."""
    import os
    import signal
    import subprocess

    import ddibench.leaderboard
    from ddibench.store import store_path

    path = store_path(store)
    app = Path(ddibench.leaderboard.__file__).parent / "app.py"
    env = {**os.environ, "DDIBENCH_BOARD": str(path.resolve())}
    child = subprocess.Popen(streamlit_command(app, port, host), env=env, start_new_session=True)  # its own process group: stopped as a whole

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
