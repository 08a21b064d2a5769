"""The ``ddibench`` command line.

Only click is imported at start-up; each command imports what it needs, so ``ddibench --help`` is
fast. Errors the user can fix are printed as one line (``error: ...``) with a non-zero exit code.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ddibench.errors import DdibenchError, UnknownNameError

if TYPE_CHECKING:
    from rich.console import Console


def _console(stderr: bool = False) -> Console:
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=True)


class _RichProgress:
    """The runner's Progress protocol on top of rich progress bars (with ETA)."""

    def __init__(self, console: Console) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TaskProgressColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._progress = Progress(
            TextColumn("[progress.description]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TaskProgressColumn(),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=console,
            transient=False,
        )

    def __enter__(self) -> _RichProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def task(self, description: str, total: int | None) -> Any:
        progress = self._progress
        task_id = progress.add_task(description, total=total)

        class Handle:
            def advance(self, n: int = 1) -> None:
                progress.advance(task_id, n)

            def update(self, *, total: int | None = None, description: str | None = None) -> None:
                kwargs: dict[str, Any] = {}
                if total is not None:
                    kwargs["total"] = total
                if description is not None:
                    kwargs["description"] = description
                progress.update(task_id, **kwargs)

            def close(self) -> None:
                progress.refresh()

        return Handle()


class _LineProgress:
    """Progress for logs and pipes: a plain line per task every ``every`` seconds and when it ends."""

    def __init__(self, console: Console, every: float = 30.0) -> None:
        self.console = console
        self.every = every

    def __enter__(self) -> _LineProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def task(self, description: str, total: int | None) -> Any:
        import time

        console, every = self.console, self.every

        class Handle:
            def __init__(self) -> None:
                self.done, self.total, self.description = 0, total, description
                self.start = self.last = time.monotonic()

            def _line(self) -> str:
                elapsed = time.monotonic() - self.start
                if self.total:
                    eta = elapsed / self.done * (self.total - self.done) if self.done else float("nan")
                    return f"{self.description}: {self.done:,}/{self.total:,} ({100 * self.done / self.total:.0f}%) {elapsed:.0f}s elapsed, ETA {eta:.0f}s"
                return f"{self.description}: {self.done:,} {elapsed:.0f}s elapsed"

            def advance(self, n: int = 1) -> None:
                self.done += n
                if time.monotonic() - self.last >= every:
                    self.last = time.monotonic()
                    console.print(self._line(), markup=False, highlight=False)

            def update(self, *, total: int | None = None, description: str | None = None) -> None:
                self.total = total if total is not None else self.total
                self.description = description or self.description

            def close(self) -> None:
                console.print(self._line(), markup=False, highlight=False)

        return Handle()


def _progress(console: Console) -> Any:
    """Live bars with ETA on a terminal; periodic plain lines in logs and pipes."""
    return _RichProgress(console) if console.is_terminal else _LineProgress(console)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="ddibench")
def cli() -> None:
    """ddibench: evaluate LLM-based systems on drug-drug-interaction tasks.

    \b
    Quickstart:
      ddibench list tasks
      ddibench run --system zero-shot --task drugbank_s2 --limit 50
      ddibench report runs/
    """


# ---------------------------------------------------------------------------------------------
# run / report


@cli.command()
@click.option("--task", "-t", "task_name", required=True, help="Task name (see 'ddibench list tasks').")
@click.option("--system", "-s", "system_name", required=True, help="System name (see 'ddibench list systems').")
@click.option(
    "--model",
    "-m",
    "models",
    multiple=True,
    help="Model spec for every role, or ROLE=SPEC for one (roles: generator, describer, judge). "
    "E.g. openai:gpt-4o-mini, vllm:NAME@http://host:8000/v1, embedded:/path/model.gguf. Default: embedded SmolLM2-135M.",
)
@click.option("--base-url", default=None, help="OpenAI-compatible server URL; --model then names the served model.")
@click.option(
    "--profile", "-p", default="cpu", show_default=True, help="Declared hardware profile (see 'ddibench list profiles')."
)
@click.option("--seed", default=0, show_default=True, type=int, help="Run seed (sampling, training, --limit selection).")
@click.option(
    "--limit", type=int, default=None, help="Evaluate a stratified, seeded subset of N samples (the run is then not submittable)."
)
@click.option(
    "--split",
    type=click.Choice(["test", "valid"]),
    default=None,
    help="Split to evaluate (default: the task's evaluation split).",
)
@click.option("--config", "-C", "config_items", multiple=True, help="System option KEY=VALUE (JSON values), repeatable.")
@click.option(
    "--runs-dir", type=click.Path(path_type=Path), default=Path("runs"), show_default=True, help="Root directory shared by runs."
)
@click.option("--run-dir", type=click.Path(path_type=Path), default=None, help="Use (or resume) exactly this run directory.")
@click.option("--concurrency", type=int, default=None, help="Concurrent model requests (default: the profile's).")
@click.option("--no-cache", is_flag=True, help="Do not read or write the LLM response cache.")
@click.option("--max-retries", type=int, default=5, show_default=True, help="Retries per model call on 429/5xx/timeouts.")
@click.option(
    "--bootstrap", "replicates", type=int, default=1000, show_default=True, help="Bootstrap replicates for confidence intervals."
)
@click.option(
    "--selfcheck",
    "selfcheck",
    type=int,
    default=3,
    show_default=True,
    help="SelfCheckGPT samples per answer on QA tasks (0: none).",
)
@click.option("--no-judge", is_flag=True, help="Do not grade QA answers with the judge model.")
@click.option("--scorer-encoder", default=None, help="Text encoder of the QA similarity scorers: a sentence-transformers path (default: MiniLM).")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON instead of a table.")
def run(
    task_name: str,
    system_name: str,
    models: tuple[str, ...],
    base_url: str | None,
    profile: str,
    seed: int,
    limit: int | None,
    split: str | None,
    config_items: tuple[str, ...],
    runs_dir: Path,
    run_dir: Path | None,
    concurrency: int | None,
    no_cache: bool,
    max_retries: int,
    replicates: int,
    selfcheck: int,
    no_judge: bool,
    scorer_encoder: str | None,
    as_json: bool,
) -> None:
    """Run a system on a task (resuming an interrupted run of the same configuration), score it and
    write results with confidence intervals and a full manifest."""
    from ddibench.errors import ConfigError
    from ddibench.llm.spec import parse_model_options
    from ddibench.metrics.bootstrap import BootstrapSpec
    from ddibench.runner.report import render_results
    from ddibench.runner.run import RunRequest, execute
    from ddibench.system import parse_config_overrides

    if limit is not None and limit <= 0:
        raise ConfigError(f"--limit must be a positive number of samples, got {limit}", "omit it to run every sample")
    if concurrency is not None and concurrency <= 0:
        raise ConfigError(f"--concurrency must be positive, got {concurrency}")
    if max_retries < 0:
        raise ConfigError(f"--max-retries must be 0 or more, got {max_retries}")
    if replicates < 100:
        raise ConfigError(f"--bootstrap {replicates} is too few replicates for a 95% interval", "use at least 100 (default 1000)")
    request = RunRequest(
        task=task_name,
        system=system_name,
        models=parse_model_options(models, base_url),
        profile=profile,
        seed=seed,
        limit=limit,
        split=split,
        config=parse_config_overrides(config_items),
        runs_root=runs_dir,
        run_dir=run_dir,
        concurrency=concurrency,
        bootstrap=BootstrapSpec(replicates=replicates),
        use_cache=not no_cache,
        max_retries=max_retries,
        judge=not no_judge,
        selfcheck_samples=selfcheck,
        scorer_encoder=scorer_encoder,
    )
    console = _console(stderr=as_json)
    with _progress(console) as progress:
        outcome = execute(request, progress)
    if outcome.resumed and outcome.predicted_now:
        console.print(f"resumed: {outcome.resumed:,} samples were already done, {outcome.predicted_now:,} predicted now")
    elif outcome.resumed and not outcome.predicted_now:
        console.print(f"all {outcome.resumed:,} samples were already done; nothing was predicted again")
    if as_json:
        import json

        click.echo(json.dumps(outcome.results, indent=2, default=str))
    else:
        render_results(outcome.results, console, outcome.run_dir)


@cli.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--model", "-m", "models", multiple=True, help="ROLE=SPEC to change a scoring model, e.g. judge=openai:gpt-4o.")
@click.option("--second-judge", default=None, help="A second judge model; agreement with the first is reported.")
@click.option("--selfcheck", "selfcheck", type=int, default=None, help="SelfCheckGPT samples per answer (default: as before).")
@click.option("--no-judge", is_flag=True, help="Do not grade answers with the judge.")
@click.option("--scorer-encoder", default=None, help="Text encoder of the similarity scorers (default: as before).")
@click.option("--bootstrap", "replicates", type=int, default=1000, show_default=True)
def rescore(
    run_dir: Path, models: tuple[str, ...], second_judge: str | None, selfcheck: int | None, no_judge: bool,
    scorer_encoder: str | None, replicates: int,
) -> None:
    """Score a finished run again (another judge, SelfCheckGPT, intervals) without new answers."""
    from ddibench.errors import ConfigError
    from ddibench.llm.spec import ROLES, ModelSpec
    from ddibench.metrics.bootstrap import BootstrapSpec
    from ddibench.runner.report import render_results
    from ddibench.runner.run import rescore as do_rescore

    overrides = {}
    for item in models:
        role, sep, spec = item.partition("=")
        if not sep or role not in ROLES:
            raise ConfigError(f"--model '{item}' is not ROLE=SPEC", f"roles: {', '.join(ROLES)}")
        overrides[role] = ModelSpec.parse(spec)
    if second_judge:
        overrides["second_judge"] = ModelSpec.parse(second_judge)
    console = _console()
    with _progress(console) as progress:
        results = do_rescore(run_dir, overrides, not no_judge, selfcheck, BootstrapSpec(replicates=replicates), progress, scorer_encoder)
    render_results(results, console, run_dir)


@cli.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print results.json as JSON.")
def report(run_dir: Path, as_json: bool) -> None:
    """Show the results of a run directory, or list the runs under a directory of runs."""
    from ddibench.runner.report import render_report

    code = render_report(run_dir, _console(), as_json)
    sys.exit(code)


# ---------------------------------------------------------------------------------------------
# list


@cli.command("list")
@click.argument("kind")
@click.option("--verbose", "-v", is_flag=True, help="Show more detail (system options, task sources).")
def list_(kind: str, verbose: bool) -> None:
    """List tasks, systems or profiles."""
    kinds = {"tasks": _list_tasks, "systems": _list_systems, "profiles": _list_profiles}
    if kind not in kinds:
        raise UnknownNameError("list kind", kind, kinds)
    kinds[kind](verbose)


def _list_tasks(verbose: bool) -> None:
    from rich.table import Table

    from ddibench.registry import get_task, task_names

    table = Table(title_justify="left")
    for col in ("task", "version", "setting", "family", "title"):
        table.add_column(col)
    for name in task_names():
        task = get_task(name)
        table.add_row(name, task.version, task.setting, task.family, task.title)
    console = _console()
    console.print(table)
    if verbose:
        for name in task_names():
            task = get_task(name)
            console.print(f"\n[bold]{name}[/bold] sources:")
            for src in task.sources:
                console.print(f"  {src.url}  sha256 {src.sha256[:12]}…  {src.license}")
            for deviation in task.deviations:
                console.print(f"  note: {deviation}")


def _list_systems(verbose: bool) -> None:
    from rich.table import Table

    from ddibench.registry import get_system_class, system_names

    table = Table(title_justify="left")
    for col in ("system", "version", "LLM roles", "description"):
        table.add_column(col)
    classes = [get_system_class(name) for name in system_names()]
    for cls in classes:
        table.add_row(cls.name, cls.version, ", ".join(cls.llm_roles) or "—", getattr(cls, "description", ""))
    console = _console()
    console.print(table)
    if verbose:
        for cls in classes:
            config = getattr(cls, "Config", None)
            if config is None:
                continue
            console.print(f"\n[bold]{cls.name}[/bold] options (--config KEY=VALUE):")
            for key, field in config.model_fields.items():
                default = field.get_default(call_default_factory=True)
                console.print(f"  {key} = {default!r}")


def _list_profiles(verbose: bool) -> None:
    from rich.table import Table

    from ddibench.profiles import PROFILES, detect_hardware

    table = Table(title_justify="left")
    for col in ("profile", "accelerators", "LLM concurrency", "budgets", "description"):
        table.add_column(col)
    for p in PROFILES.values():
        acc = f"{p.accelerator_count} x {p.accelerator}" if p.accelerator else "none"
        budgets = "; ".join(f"{s}: {', '.join(f'{k}={v}' for k, v in b.items())}" for s, b in p.budgets.items())
        table.add_row(p.name, acc, str(p.llm_concurrency), budgets, p.description)
    console = _console()
    console.print(table)
    hw = detect_hardware()
    gpus = ", ".join(g["name"] for g in hw["gpus"]) or "no GPU"
    console.print(f"this machine: {hw['cpu']}, {hw['cpu_count']} CPUs, {hw['memory_gb']} GB RAM, {gpus}")


# ---------------------------------------------------------------------------------------------
# data


@cli.group()
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
    """Split sizes, drugs and the checks each task verifies (default: every task)."""
    from rich.table import Table

    from ddibench.registry import get_task, task_names

    names = list(tasks) or task_names()
    console = _console()
    table = Table(title="split sizes (pairs) and drugs per split", title_justify="left")
    for col in ("task", "setting", "train", "valid", "test", "drugs train/valid/test", "checks"):
        table.add_column(col, justify="right" if col in ("train", "valid", "test") else "left")
    failed_checks = []
    all_checks = {}
    for name in names:
        task = get_task(name)
        loaded = task.load()
        sizes = {s: len(v) for s, v in loaded.splits.items()}
        drugs = {s: len({k for sample in v for k in sample.clusters}) for s, v in loaded.splits.items()}
        n_ok = sum(c.ok for c in loaded.checks)
        failed_checks += [(name, c) for c in loaded.checks if not c.ok]
        all_checks[name] = loaded.checks
        table.add_row(
            name, task.setting, f"{sizes['train']:,}", f"{sizes['valid']:,}", f"{sizes['test']:,}",
            f"{drugs['train']:,} / {drugs['valid']:,} / {drugs['test']:,}", f"{n_ok}/{len(loaded.checks)} passed",
        )  # fmt: skip
    console.print(table)
    for name, checks in all_checks.items():
        console.print(f"\n[bold]{name}[/bold]")
        for c in checks:
            mark = "[green]ok[/green]" if c.ok else "[red]FAILED[/red]"
            console.print(f"  {mark} {c.name}: {c.detail}")
        for deviation in get_task(name).deviations:
            console.print(f"  [dim]note: {deviation}[/dim]")
    if failed_checks:
        raise DdibenchError(f"{len(failed_checks)} data check(s) failed", "see above")


# ---------------------------------------------------------------------------------------------
# submissions and the board


@cli.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), default=None, help="Bundle path (default: beside the run directory).")
def submit(run_dir: Path, out: Path | None) -> None:
    """Pack a finished run into a submission bundle (predictions, manifest, hashes)."""
    from ddibench.submission import submit as make_bundle

    path = make_bundle(run_dir, out)
    _console().print(f"bundle: {path}")


def _print_verdict(verdict: Any, console: Console) -> None:
    for name, ok, detail in verdict.checks:
        mark = "[green]ok[/green]" if ok else "[red]FAILED[/red]"
        console.print(f"  {mark} {name}: {detail}")
    if verdict.accepted:
        console.print(f"[green]accepted[/green]: trust tier {verdict.tier}")
    else:
        console.print(f"[red]rejected[/red]: {'; '.join(verdict.reasons)}")


@cli.command()
@click.argument("bundle", type=click.Path(path_type=Path))
@click.option("--reproduce", is_flag=True, help="Also re-run the system here and compare its predictions.")
@click.option(
    "--add", "store", type=click.Path(path_type=Path), default=None, help="Add an accepted bundle to this results store."
)
def verify(bundle: Path, reproduce: bool, store: Path | None) -> None:
    """Check a bundle: hashes, task version and data, full split, no --limit, recomputed metrics."""
    import tempfile

    from ddibench.submission import reproduce as rerun
    from ddibench.submission import verify as check

    verdict = check(bundle)
    if reproduce and verdict.accepted:
        with tempfile.TemporaryDirectory() as tmp:
            verdict = rerun(verdict, Path(tmp) / "run")
    console = _console()
    _print_verdict(verdict, console)
    if verdict.accepted and store is not None:
        from ddibench.store import add_run

        add_run(store, verdict)
        console.print(f"added to {store}")
    sys.exit(0 if verdict.accepted else 1)


@cli.group()
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
def board_add(bundles: tuple[Path, ...], store: Path | None, previews: bool) -> None:
    """Verify bundles and add the accepted ones to the results store."""
    from ddibench.store import add_run, store_path
    from ddibench.submission import verify as check

    path = store_path(store)
    console = _console()
    rejected = 0
    for bundle in bundles:
        verdict = check(bundle)
        if verdict.accepted or (previews and verdict.is_preview()):
            add_run(path, verdict)
            console.print(f"{bundle.name}: added ({verdict.tier}{', preview' if not verdict.accepted else ''})")
        else:
            rejected += 1
            console.print(f"{bundle.name}: [red]rejected[/red]: {'; '.join(verdict.reasons)}")
    sys.exit(1 if rejected else 0)


@board.command("serve")
@click.option(
    "--store", type=click.Path(path_type=Path), default=None, help="Results store (default: $DDIBENCH_BOARD or board.duckdb)."
)
@click.option("--port", type=int, default=8501, show_default=True)
def board_serve(store: Path | None, port: int) -> None:
    """Serve the leaderboard on http://localhost:PORT."""
    import os
    import subprocess

    import ddibench.leaderboard
    from ddibench.store import store_path

    app = Path(ddibench.leaderboard.__file__).parent / "app.py"
    env = {**os.environ, "DDIBENCH_BOARD": str(store_path(store).resolve())}
    cmd = [sys.executable, "-m", "streamlit", "run", str(app), "--server.port", str(port), "--server.headless", "true",
           "--browser.gatherUsageStats", "false"]  # fmt: skip
    sys.exit(subprocess.call(cmd, env=env))


# ---------------------------------------------------------------------------------------------
# kg


@cli.group()
def kg() -> None:
    """The biomedical knowledge graph (Hetionet in the EmerGNN DrugBank id space)."""


def _drug_id(text: str) -> int:
    from ddibench.tasks.drugbank import load_catalog

    catalog = load_catalog()
    by_db = catalog.by_drugbank_id
    if text.upper() in by_db:
        return by_db[text.upper()].node_id
    by_name = {d.name.lower(): d.node_id for d in catalog.drugs}
    if text.lower() in by_name:
        return by_name[text.lower()]
    if text.isdigit() and int(text) < len(catalog):
        return int(text)
    raise UnknownNameError("drug", text, [d.name for d in catalog.drugs])


@kg.command("info")
@click.option(
    "--edges", "full_edges", type=click.Path(path_type=Path), default=None, help="Hetionet's full hetionet-v1.0-edges.sif.gz."
)
def kg_info(full_edges: Path | None) -> None:
    """Entities, relations, edges per metaedge, and what is missing."""
    from rich.table import Table

    from ddibench.kg import load_kg

    graph = load_kg("drugbank", full_edges)
    card = graph.card
    table = Table(
        title=f"KG ({card['space']} id space): {card['entities']:,} entities, {card['kg_edges']:,} edges", title_justify="left"
    )
    for col in ("metaedge", "relation id", "edges", "published", "source"):
        table.add_column(col)
    het = card["hetionet"]
    from ddibench.kg.graph import get_space

    index = get_space("drugbank").relation_index()
    for abbrev, idx in sorted(index.items(), key=lambda x: x[1]):
        table.add_row(
            abbrev, str(card["relation_base"] + idx), f"{card['edges_by_metaedge'].get(abbrev, 0):,}",
            f"{het['published_edges_by_metaedge'].get(abbrev, 0):,}", het["provenance"].get(abbrev, ""),
        )  # fmt: skip
    console = _console()
    console.print(table)
    if card["deviation"]:
        console.print(f"[yellow]{card['deviation']}[/yellow]")


@kg.command("paths")
@click.argument("drug_a")
@click.argument("drug_b")
@click.option("-k", default=10, show_default=True, help="Number of paths.")
@click.option("--max-hops", default=3, show_default=True)
@click.option("--all-patterns", is_flag=True, help="Do not filter paths with a repeated relation sequence.")
def kg_paths(drug_a: str, drug_b: str, k: int, max_hops: int, all_patterns: bool) -> None:
    """Diverse shortest paths between two drugs (DrugBank id, name or node id)."""
    import time

    from ddibench.kg import load_kg
    from ddibench.kg.paths import yen_paths

    graph = load_kg("drugbank")
    u, v = _drug_id(drug_a), _drug_id(drug_b)
    t0 = time.perf_counter()
    paths = yen_paths(graph, u, v, k=k, max_hops=max_hops, diverse=not all_patterns)
    elapsed = time.perf_counter() - t0
    console = _console()
    if not paths:
        console.print(f"no path of at most {max_hops} hops between {graph.name(u)} and {graph.name(v)}")
    for i, path in enumerate(paths, 1):
        console.print(f"{i:2d}. {path.verbalise(graph)}", markup=False)
    console.print(f"[dim]{len(paths)} paths in {1000 * elapsed:.0f} ms[/dim]")


# ---------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    try:
        cli.main(args=argv, prog_name="ddibench", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except DdibenchError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        click.echo("interrupted; finished samples are saved, re-run the same command to resume", err=True)
        sys.exit(130)


if __name__ == "__main__":
    main()
