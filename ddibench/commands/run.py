"""``ddibench run``, ``rescore`` and ``report``.

``run --plan`` prints what the run would do (phases, epochs, LLM calls and tokens per role, time and
dollars: :mod:`ddibench.runner.forecast`) and runs nothing; a run projected to take longer than a few
minutes prints the plan's summary before it starts. Every run ends with a ``next:`` line suited to it.

The scoring flags of ``run`` and ``rescore`` (``--no-judge``, ``--selfcheck``, ...) are not written
here: every evaluator declares its own (:class:`~ddibench.evaluation.ScoringOption`), and these
commands offer the flags of every evaluator the installed task families use. A flag given for a task
whose evaluator does not take it is an error naming the flag.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ddibench.commands.common import bootstrap_option, limit_option
from ddibench.commands.common import console as make_console
from ddibench.commands.common import progress as make_progress

if TYPE_CHECKING:
    from rich.console import Console

    from ddibench.runner.plan import RunRequest


def _evaluator_options() -> list[Any]:
    """The scoring options every known evaluator declares, once each (flags must not clash)."""
    import importlib

    import ddibench.evaluation as evaluation
    from ddibench.registry import load_task_families

    for kind in ("classification", "ranking", "text", "probe"):  # the built-in evaluators (loaded lazily elsewhere)
        importlib.import_module(f"ddibench.evaluation.{kind}")
    load_task_families()  # a plug-in family may bring an evaluator of its own
    seen: dict[str, Any] = {}
    stack = [evaluation.BaseEvaluator]
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        for option in cls.options:
            other = seen.get(option.flag)
            if other is not None and other.key != option.key:
                from ddibench.errors import ConfigError

                raise ConfigError(
                    f"two evaluators declare {option.flag} for different options ({other.key}, {option.key})",
                    "rename one",
                )
            seen[option.flag] = option
    return sorted(seen.values(), key=lambda o: o.flag)


class ScoringCommand(click.Command):
    """A command whose scoring flags come from the evaluators' declarations, read when it runs or
    shows its help (so ``ddibench --help`` imports no evaluator)."""

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        if not getattr(self, "_scoring_params", None):
            # a value option gets no flag_value at all: click takes one (even None) to mean the value is optional,
            # and then reads '--probe-epochs -3' as the flag alone followed by an unknown option '-3'
            self._scoring_params = [
                click.Option(
                    [o.flag, o.key],
                    **({"is_flag": True, "flag_value": o.flag_value} if o.is_flag else {"type": o.type}),
                    default=None,
                    help=o.help + ("" if o.is_flag or o.default is None else f"  [default: {o.default}]"),
                )
                for o in _evaluator_options()
            ]
            self.params.extend(self._scoring_params)
        return super().get_params(ctx)


def scoring_given(ctx: click.Context, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The scoring options the user gave (left at their defaults, they stay out of the request)."""
    out = {}
    for param in getattr(ctx.command, "_scoring_params", []):
        value = kwargs.pop(param.name, None)
        if ctx.get_parameter_source(param.name) not in (click.core.ParameterSource.DEFAULT, None):
            out[param.name] = value
    return out


def expand_tasks(text: str) -> list[str]:
    """``-t`` values: task names, task family names and registered groups of families (``molecular``), comma
    separated (a family or group stands for its tasks)."""
    from ddibench.errors import UnknownNameError
    from ddibench.registry import task_groups, task_names

    names = task_names()
    families = task_groups()
    out: list[str] = []
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        if item in families and item not in names:
            out += families[item]
        elif item in names:
            out.append(item)
        else:
            raise UnknownNameError("task", item, [*names, *families])
    return list(dict.fromkeys(out))


@click.command(cls=ScoringCommand)
@click.option(
    "--task",
    "-t",
    "task_name",
    required=True,
    help="Task name, or several comma separated, or a task family (see 'ddibench list tasks').",
)
@click.option("--system", "-s", "system_name", required=True, help="System name (see 'ddibench list systems').")
@click.option(
    "--model",
    "-m",
    "models",
    multiple=True,
    help="Model spec for every role, or ROLE=SPEC for one (any role the system or its scorers use: generator, describer, judge, ...; "
    "another role is an error; unset roles use the generator's). E.g. openai:gpt-4o-mini, vllm:NAME@http://host:8000/v1, embedded:/path/model.gguf. "
    "Default: embedded SmolLM2-135M.",
)
@click.option("--base-url", default=None, help="OpenAI-compatible server URL; --model then names the served model.")
@click.option(
    "--profile",
    "-p",
    default="cpu",
    show_default=True,
    help="Declared hardware profile (see 'ddibench list profiles').",
)
@click.option(
    "--seed", default=0, show_default=True, type=int, help="Run seed (sampling, training, --limit selection)."
)
@limit_option(
    "Evaluate a stratified, seeded subset of N samples (the run is then not submittable).",
    "omit it to run every sample",
)
@click.option(
    "--split",
    type=click.Choice(["test", "valid"]),
    default=None,
    help="Split to evaluate (default: the task's evaluation split).",
)
@click.option(
    "--config", "-C", "config_items", multiple=True, help="System option KEY=VALUE (JSON values), repeatable."
)
@click.option(
    "--runs-dir",
    type=click.Path(path_type=Path),
    default=Path("runs"),
    show_default=True,
    help="Root directory shared by runs.",
)
@click.option(
    "--run-dir", type=click.Path(path_type=Path), default=None, help="Use (or resume) exactly this run directory."
)
@click.option(
    "--concurrency",
    type=int,
    default=None,
    help="Concurrent model requests (default: the profile's). The embedded model answers one request at a time "
    "unless this is given: then its server has N slots that decode together (about 2x the generated tokens per second "
    "at 4 slots on 2 cores; nothing gained on prompt-bound work, see benchmarks/reader_throughput.py).",
)
@click.option("--no-cache", is_flag=True, help="Do not read or write the LLM response cache.")
@click.option(
    "--max-retries", type=int, default=5, show_default=True, help="Retries per model call on 429/5xx/timeouts."
)
@bootstrap_option()
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON instead of a table.")
@click.option("--verbose", "-v", is_flag=True, help="Explain the confidence intervals in full.")
@click.option(
    "--executor",
    type=click.Choice(["local", "ray"]),
    default="local",
    show_default=True,
    help="Where predictions run: this process, or Ray workers (the journal is still written here).",
)
@click.option("--ray-address", default=None, help="An existing Ray cluster (default: start a local one).")
@click.option("--workers", type=int, default=None, help="Ray workers (default: the cluster's CPUs).")
@click.option(
    "--shard",
    default=None,
    help="I/N: predict every N-th sample (shard I, from 1) and score nothing; then 'ddibench merge RUN_DIR'.",
)
@click.option(
    "--plan",
    "plan_only",
    is_flag=True,
    help="Print what the run would do (phases, epochs, LLM calls and tokens per role, projected time and "
    "dollars) and run nothing: no model is started, nothing trained or written.",
)
@click.option(
    "--throughput",
    default=None,
    metavar="PROMPT,GEN",
    help="With --plan: the prompt and generated tokens a second a served or API model gives this run, to time "
    "its calls (they are otherwise untimed: only the embedded models have measured rates).",
)
@click.pass_context
def run(
    ctx: click.Context,
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
    as_json: bool,
    verbose: bool,
    executor: str,
    ray_address: str | None,
    workers: int | None,
    shard: str | None,
    plan_only: bool,
    throughput: str | None,
    **scoring: Any,
) -> None:
    """Run a system on a task (resuming an interrupted run of the same configuration), score it and
    write results with confidence intervals and a full manifest. Several tasks (comma separated, or a
    family name) run one after the other, with one summary table at the end."""
    _check_run_options(concurrency, max_retries, workers, ray_address, executor)
    if throughput is not None and not plan_only:
        raise click.UsageError("--throughput declares a rate for the plan: give it with --plan")
    tasks, shard_spec = _tasks_and_shard(task_name, shard, run_dir)
    requests = _run_requests(
        tasks,
        system_name=system_name,
        models=models,
        base_url=base_url,
        profile=profile,
        seed=seed,
        limit=limit,
        split=split,
        config_items=config_items,
        runs_dir=runs_dir,
        run_dir=run_dir,
        concurrency=concurrency,
        replicates=replicates,
        no_cache=no_cache,
        max_retries=max_retries,
        scoring=scoring_given(ctx, scoring),
        executor=executor,
        ray_address=ray_address,
        workers=workers,
        shard=shard_spec,
    )
    if plan_only:
        _print_plans(requests, make_console(), throughput)
        return
    _execute_all(requests, make_console(stderr=as_json), shard, as_json, verbose)


def _print_plans(requests: Iterable[RunRequest], console: Console, throughput: str | None = None) -> None:
    """Nothing: prints each request's plan (the forecast starts, trains and writes nothing); ``throughput``
    (``PROMPT,GEN``) times the calls of models without a measured rate."""
    from ddibench.prices import load_prices
    from ddibench.runner.forecast import forecast, parse_throughput, render

    declared = parse_throughput(throughput) if throughput is not None else None
    prices = load_prices()  # the shipped table under $DDIBENCH_PRICES, as the board reads them
    for request in requests:
        for line in render(forecast(request, prices, declared)):
            console.print(line, markup=False, highlight=False)


def _announce(request: RunRequest, console: Console) -> None:
    """Nothing: prints the plan's summary when the run is projected to take longer than a few minutes."""
    from ddibench.errors import DdibenchError
    from ddibench.prices import load_prices
    from ddibench.runner.forecast import LONG_RUN_S, forecast, summary

    try:
        planned = forecast(request, load_prices())
    except DdibenchError:
        raise  # the run would stop on the same mistake: say it now
    except Exception as exc:  # noqa: BLE001 - a system's plan that fails must not stop its run
        console.print(f"plan: not available ({type(exc).__name__}: {exc})", markup=False, highlight=False)
        return
    if planned.seconds > LONG_RUN_S:
        for line in summary(planned):
            console.print(line, markup=False, highlight=False)


def next_line(request: RunRequest, run_dir: Path, used_models: bool = True) -> str:
    """What to try after this run, in one or two lines: the full split after a preview, a larger reader after
    the small embedded model (when the run used a model), a rankable profile after the quick one, the board
    after a full run."""
    from ddibench.profiles import get_profile

    steps = []
    if request.limit is not None:
        steps.append(f"drop --limit {request.limit} to run the full split (see its cost first with --plan)")
    if not get_profile(request.profile).rankable:
        steps.append("run with --profile cpu (or your GPU's profile) for a result the board ranks")
    spec = request.role_models().spec("generator")
    if used_models and spec.is_embedded and "smollm2" in spec.model.lower():
        steps.append("try the 1.5B reader with -m embedded:qwen2.5-coder-1.5b (about 10x slower)")
    if request.limit is None and get_profile(request.profile).rankable:
        steps.append(f"pack it for the board with 'ddibench submit {run_dir}', compare with 'ddibench board serve'")
    else:
        steps.append(f"compare runs with 'ddibench report {request.runs_root}' or 'ddibench board serve'")
    return "next: " + "; ".join(steps[:2]) + ("\n      " + "; ".join(steps[2:]) if steps[2:] else "")


def _tasks_and_shard(
    task_name: str, shard: str | None, run_dir: Path | None
) -> tuple[list[str], tuple[int, int] | None]:
    """The tasks ``-t`` names and the parsed ``--shard`` (None without it), or a one-line error when the two
    (or ``--run-dir``) do not go together."""
    from ddibench.errors import ConfigError

    shard_spec = None
    if shard is not None:
        from ddibench.runner.distributed import parse_shard

        shard_spec = parse_shard(shard)
    tasks = expand_tasks(task_name)
    if shard_spec is not None and len(tasks) > 1:
        raise ConfigError("--shard runs one task", "give one task with -t")
    if run_dir is not None and len(tasks) > 1:
        raise ConfigError(
            f"--run-dir names one directory but -t names {len(tasks)} tasks",
            "drop --run-dir (each task gets its own directory under --runs-dir)",
        )
    return tasks, shard_spec


def _run_requests(
    tasks: list[str],
    *,
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
    replicates: int,
    no_cache: bool,
    max_retries: int,
    scoring: dict[str, Any],
    executor: str,
    ray_address: str | None,
    workers: int | None,
    shard: tuple[int, int] | None,
) -> Iterator[RunRequest]:
    """The request of each task in turn, from the options of ``run`` (each built only when its task is reached)."""
    from ddibench.llm import parse_model_options
    from ddibench.metrics.bootstrap import BootstrapSpec
    from ddibench.runner.plan import RunRequest
    from ddibench.system import parse_config_overrides

    for name in tasks:
        yield RunRequest(
            task=name,
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
            scoring=scoring,
            executor=executor,
            ray_address=ray_address,
            workers=workers,
            shard=shard,
        )


def _execute_all(
    requests: Iterable[RunRequest], console: Console, shard: str | None, as_json: bool, verbose: bool
) -> None:
    """Nothing: executes each request and prints its results as it finishes (or, with ``--json``, all of them at
    the end; a summary table after several tasks); one shard of a run prints what it predicted and stops."""
    from ddibench.runner.execute import execute
    from ddibench.runner.records import Results
    from ddibench.runner.report import render_results

    outcomes: list[tuple[Results, Path]] = []
    last: RunRequest | None = None
    for request in requests:
        _announce(request, console)
        with make_progress(console) as progress:
            outcome = execute(request, progress)
        last = request
        if outcome.results is None:
            console.print(
                f"shard {shard}: {outcome.predicted_now:,} predicted now, {outcome.resumed:,} before, in {outcome.run_dir}; "
                f"when every shard is done: ddibench merge {outcome.run_dir.parent.parent}"
            )
            return
        outcomes.append((outcome.results, outcome.run_dir))
        if outcome.resumed:
            console.print(
                f"resumed: {outcome.resumed:,} samples were already done, {outcome.predicted_now:,} predicted now"
                if outcome.predicted_now
                else f"all {outcome.resumed:,} samples were already done; nothing was predicted again"
            )
        if not as_json:
            render_results(outcome.results, console, outcome.run_dir, verbose=verbose)
    if as_json:
        import json

        payload = outcomes[0][0].dump() if len(outcomes) == 1 else [r.dump() for r, _ in outcomes]
        click.echo(json.dumps(payload, indent=2, default=str))
    elif len(outcomes) > 1:
        from ddibench.runner.report import render_summary

        render_summary(outcomes, console)
    if last is not None and outcomes:
        used_models = bool(outcomes[-1][0].manifest.models)  # (an ablation without the LLM starts none)
        console.print(next_line(last, outcomes[-1][1], used_models), markup=False, highlight=False)


def _check_run_options(
    concurrency: int | None, max_retries: int, workers: int | None, ray_address: str | None, executor: str
) -> None:
    """The run options whose values click cannot check alone (one-line errors, before anything starts)."""
    from ddibench.errors import ConfigError

    if concurrency is not None and concurrency <= 0:
        raise ConfigError(
            f"--concurrency must be positive, got {concurrency}", "omit it to use the profile's concurrency"
        )
    if max_retries < 0:
        raise ConfigError(f"--max-retries must be 0 or more, got {max_retries}", "0 tries each call once")
    if workers is not None and workers <= 0:
        raise ConfigError(f"--workers must be positive, got {workers}")
    if (ray_address or workers) and executor != "ray":
        raise ConfigError("--ray-address and --workers apply to --executor ray", "add --executor ray")


@click.command(cls=ScoringCommand)
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option(
    "--model", "-m", "models", multiple=True, help="ROLE=SPEC to change a scoring model, e.g. judge=openai:gpt-4o."
)
@bootstrap_option()
@click.option("--verbose", "-v", is_flag=True, help="Explain the confidence intervals in full.")
@click.pass_context
def rescore(
    ctx: click.Context, run_dir: Path, models: tuple[str, ...], replicates: int, verbose: bool, **scoring: Any
) -> None:
    """Score a finished run again (another judge, SelfCheckGPT, intervals) without new answers;
    scoring options not given keep the values the run was scored with."""
    from ddibench.errors import ConfigError
    from ddibench.llm import ModelSpec, parse_role
    from ddibench.metrics.bootstrap import BootstrapSpec
    from ddibench.runner.report import render_results
    from ddibench.runner.scoring import rescore as do_rescore

    overrides = {}
    for item in models:
        role, spec = parse_role(item)
        if role is None:
            raise ConfigError(f"--model '{item}' is not ROLE=SPEC", "name the role to change, e.g. judge=openai:gpt-4o")
        overrides[role] = ModelSpec.parse(spec)
    console = make_console()
    with make_progress(console) as progress:
        results = do_rescore(
            run_dir, overrides, scoring_given(ctx, scoring), BootstrapSpec(replicates=replicates), progress
        )
    render_results(results, console, run_dir, verbose=verbose)


@click.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--verbose", "-v", is_flag=True, help="Explain the confidence intervals in full.")
def merge(run_dir: Path, verbose: bool) -> None:
    """Merge the shards of a run (made with 'run --shard I/N') into it, and score it once it is complete."""
    from ddibench.errors import RunDirError
    from ddibench.metrics.bootstrap import BootstrapSpec
    from ddibench.runner.distributed import merge_shards
    from ddibench.runner.report import render_results
    from ddibench.runner.scoring import rescore as do_rescore

    counts = merge_shards(run_dir)
    console = make_console()
    console.print(
        f"merged {counts['shards']} shard(s): {counts['added']:,} predictions added, {counts['journalled']:,} of {counts['expected']:,} journalled"
    )
    if counts["journalled"] < counts["expected"]:
        raise RunDirError(
            f"{run_dir} is incomplete: {counts['expected'] - counts['journalled']:,} samples have no prediction yet",
            "run the missing shards, then merge again",
        )
    with make_progress(console) as progress:
        results = do_rescore(
            run_dir, None, {}, BootstrapSpec(), progress, profile=counts["profile"], first_scoring=True
        )
    render_results(results, console, run_dir, verbose=verbose)


@click.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print results.json as JSON.")
@click.option("--verbose", "-v", is_flag=True, help="Explain the confidence intervals in full.")
@click.option(
    "--published",
    is_flag=True,
    help="Print every published number the project compares with, ours beside it (from the runs under RUN_DIR).",
)
@click.option(
    "--ceilings",
    is_flag=True,
    help="Retrieval ceilings: what a vote over the labels each retrieval run's context states scores, and how often it states the gold.",
)
@click.option(
    "--against",
    type=click.Path(path_type=Path),
    default=None,
    help="Another run of the same task (a run directory or a bundle, e.g. one published on the board): each metric of RUN_DIR minus it, with a paired bootstrap interval on the samples both scored. RUN_DIR may be a bundle too.",
)
def report(run_dir: Path, as_json: bool, verbose: bool, published: bool, ceilings: bool, against: Path | None) -> None:
    """Show the results of a run directory or a bundle, or list the runs under a directory of runs."""
    from ddibench.runner.report import render_ceilings, render_comparison, render_published, render_report
    from ddibench.submission import load_finished_or_bundle  # what reads a bundle given as either run

    if against is not None:
        sys.exit(render_comparison(run_dir, against, make_console(), as_json, load=load_finished_or_bundle))
    if ceilings:
        import functools

        load = functools.partial(load_finished_or_bundle, keep_traces=True)  # a compact bundle keeps what they read
        sys.exit(render_ceilings(run_dir, make_console(), as_json, load_bundle=load))
    if published:
        _check_runs_to_publish(run_dir)
        sys.exit(render_published(run_dir, make_console()))
    sys.exit(render_report(run_dir, make_console(), as_json, verbose=verbose, load_bundle=load_finished_or_bundle))


def _check_runs_to_publish(path: Path) -> None:
    """Nothing when ``path`` holds a finished, readable run (``report --published`` then has a number of ours to
    show); else a RunDirError saying what is there and how to make a run (a table of "no run" rows says nothing)."""
    from ddibench.errors import DdibenchError, RunDirError
    from ddibench.runner.records import read_results
    from ddibench.runner.report import find_runs

    if not path.exists():
        return  # render_published names it
    if path.is_file():
        raise RunDirError(
            f"{path} is a file, not a directory of runs",
            "give a run directory or the directory your runs are in (--runs-dir of 'ddibench run', default runs/)",
        )
    runs = find_runs(path)
    make = f"make one with 'ddibench run -s SYSTEM -t TASK --runs-dir {path}', or give the directory your runs are in (default runs/)"
    if not runs:
        raise RunDirError(
            f"no runs were found under {path}, so there is nothing to compare with the published numbers", make
        )
    finished = [run for run in runs if (run / "results.json").exists()]
    for run in finished:
        try:
            read_results(run / "results.json")
            return
        except DdibenchError:
            continue
    if finished:
        raise RunDirError(
            f"none of the {len(runs):,} run(s) under {path} has a readable results.json (first: {finished[0]})",
            f"score them again with 'ddibench rescore RUN_DIR', or {make}",
        )
    raise RunDirError(
        f"none of the {len(runs):,} run(s) under {path} is finished (no results.json; first: {runs[0]})",
        "finish one with the same 'ddibench run' command (it resumes)",
    )
