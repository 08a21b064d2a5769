"""Plan a run before anything is written: the task, the system and its configuration, the evaluator
and its scoring options, the samples (:func:`ddibench.runner.selection.run_samples`: the evaluated split, plus
the other splits a task asks systems to answer; ``--limit`` draws a stratified, seeded subset), the models by
role, and the run's identity and directory.

Every mistake a user can make in a command (an unknown name, a bad option, a system that does not
serve the task, a missing model) is found here, as a one-line :class:`~ddibench.errors.DdibenchError`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddibench.errors import ConfigError
from ddibench.evaluation import Evaluator
from ddibench.hashing import config_hash, sha256_text
from ddibench.llm import EMBEDDED_SLOTS, LLMPool, RoleModels, parse_model_options
from ddibench.metrics.bootstrap import BootstrapSpec
from ddibench.profiles import Profile, get_profile
from ddibench.registry import get_system_class, get_task
from ddibench.runner.records import RunIdentity, SystemRef, TaskRef
from ddibench.runner.selection import Selection, run_samples
from ddibench.schema import Sample
from ddibench.system import (
    BaseSystem,
    NullProgress,
    Progress,
    RunContext,
    System,
    TrainingView,
    configured_roles,
    system_config_hash,
)
from ddibench.task import Lazy, Task, TaskData


@dataclass
class RunRequest:
    task: str
    system: str
    models: RoleModels | None = None  # None: the embedded default for every role
    profile: str = "cpu"
    seed: int = 0
    limit: int | None = None
    split: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    runs_root: Path = Path("runs")
    run_dir: Path | None = None
    concurrency: int | None = None
    bootstrap: BootstrapSpec = field(default_factory=BootstrapSpec)
    use_cache: bool = True
    max_retries: int = 5
    scoring: dict[str, Any] = field(default_factory=dict)  # the evaluator's options given on the command line
    score_with_models: bool = (
        True  # False: skip the evaluator's model-based scores (a reproduction compares predictions only)
    )
    executor: str = "local"  # "local" (asyncio in this process) or "ray" (see runner/distributed.py)
    ray_address: str | None = None  # an existing Ray cluster (default: start a local one)
    workers: int | None = None  # Ray actors (default: the cluster's CPUs)
    shard: tuple[int, int] | None = None  # (i, n): predict every n-th sample into shards/i-of-n, score nothing
    artifacts_root: Path | None = (
        None  # trained models etc.; None: the user cache (a reproduction starts from an empty one)
    )

    def artifact_dir(self) -> Path:
        from ddibench.data.resolve import cache_root

        return self.artifacts_root if self.artifacts_root is not None else cache_root() / "artifacts"

    def role_models(self) -> RoleModels:
        return self.models if self.models is not None else parse_model_options([])

    def selection(self, task: Task) -> Selection:
        """What picks the run's samples from ``task``: its split (default: the task's evaluation split), --limit, seed."""
        return Selection(self.split or task.eval_split, self.limit, self.seed)


@dataclass
class RunPlan:
    """Everything decided before anything is written: what runs, on which samples, where."""

    request: RunRequest
    profile: Profile
    task: Task
    system: System
    evaluator: Evaluator
    data: TaskData
    split: str
    selected: list[Sample]
    roles: list[str]
    pool: LLMPool | None
    identity: RunIdentity
    run_dir: Path


def training_view(plan: RunPlan) -> TrainingView:
    """What ``prepare`` sees: the training split and, unless it is the evaluated one, the validation split;
    blinded when the task keeps its labels from systems (captioning: the labels are the probe's)."""
    return training_view_of(plan.task, plan.data, plan.split)


def training_view_of(task: Task, data: TaskData, evaluated: str) -> TrainingView:
    """The training view of ``task`` when ``evaluated`` is the split a run answers (see :func:`training_view`)."""
    blind = not task.training_labels_visible

    def split(name: str) -> Lazy:  # built when the system first reads it
        return Lazy(lambda: tuple(s.blind() for s in data.split(name)) if blind else data.split(name))

    return TrainingView(
        task=task,
        train=split("train"),
        valid=split("valid") if evaluated != "valid" else (),
        resources=data.resources,
    )


def run_context(plan: RunPlan, progress: Progress | None = None) -> RunContext:
    """The context a system prepares and predicts in, the same for the local executor and each Ray worker; the
    run's models write their logs into the run directory."""
    from ddibench.artifacts import ArtifactStore

    if plan.pool is not None:
        plan.pool.log_dir = plan.run_dir
    return RunContext(
        task=plan.task,
        profile=plan.profile,
        seed=plan.request.seed,
        artifacts=ArtifactStore(plan.request.artifact_dir()),
        llm=plan.pool,
        progress=progress if progress is not None else NullProgress(),
        run_dir=plan.run_dir,
        resources=plan.data.resources,
    )


def build_system(name: str, profile: Profile, overrides: dict[str, Any], task: str | None = None) -> System:
    cls = get_system_class(name)
    if issubclass(cls, BaseSystem):
        return cls.build(profile.budget_for(name, task), overrides)
    if overrides:
        raise ConfigError(f"system '{name}' does not take --config options")
    return cls()  # type: ignore[call-arg]


def run_identity(
    task: Task,
    system: System,
    models: dict[str, dict[str, Any]],
    split: str,
    seed: int,
    limit: int | None,
    ids: list[str],
) -> RunIdentity:
    ident = run_identity_from(
        task, system.name, system.version, system.config.model_dump(mode="json"), models, split, seed, limit, ids
    )
    assert ident.system.config_hash == system_config_hash(system)
    return ident


def run_identity_from(
    task: Task,
    system: str,
    version: str,
    config: dict[str, Any],
    models: dict[str, dict[str, Any]],
    split: str,
    seed: int,
    limit: int | None,
    ids: list[str],
) -> RunIdentity:
    """A run's identity from the names of what ran (also for runs made elsewhere and imported)."""
    config_id = config_hash({"system": system, "version": version, "config": config})
    return RunIdentity(
        task=TaskRef(name=task.name, version=task.version, data_sha256=task.data_sha256),
        system=SystemRef(name=system, version=version, config=config, config_hash=config_id),
        models=models,
        split=split,
        seed=seed,
        limit=limit,
        n_samples=len(ids),
        sample_ids_sha256=sha256_text("\n".join(ids)),
    ).with_id()


def check_writable_dir(path: Path, option: str) -> None:
    """A directory that exists or can be made: no file in its place or on its way, a writable ancestor."""
    from ddibench.errors import StorageError

    if path.exists():
        if not path.is_dir():
            raise StorageError(
                f"{option} {path} is a file, not a directory", f"give a directory to {option}, or remove the file"
            )
        existing = path
    else:
        existing = path.parent
        while not existing.exists():
            existing = existing.parent
        if not existing.is_dir():
            raise StorageError(
                f"{existing} is a file, so {option} {path} cannot be created below it", "choose another path"
            )
    if not os.access(existing, os.W_OK):
        raise StorageError(
            f"{existing} is not writable, so the run cannot be written to {path}", f"choose a writable {option}"
        )


def open_cache():  # noqa: ANN201 - the response cache every run and scorer shares
    from ddibench.data.resolve import cache_root
    from ddibench.llm import ResponseCache

    return ResponseCache(cache_root() / "llm-cache.sqlite")


def embedded_threads() -> int:
    """Threads for the embedded model server: the CPUs other work leaves free (:func:`other_work`), at least one;
    every CPU on an idle machine. llama.cpp's threads wait on each other at every step, so a thread that is not
    scheduled stalls the rest: under a load of 9-10 on 2 cores, SmolLM2 with 2 threads generated 0.8-1.4 tokens a
    second and with 1 thread 15-18 (prompts 16-20 vs 55-67 tok/s), 2026-11-28. Niced work counts as well: beside
    two ``nice -n 19`` spinners, SmolLM2 answered 12 zero-shot items in 103 s with 2 threads and in 29 s with 1
    (19 s with 2 on idle cores), 2026-12-01. ``$DDIBENCH_THREADS`` sets the
    number instead (a benchmark timing runs one after another, a machine whose load is not its own)."""
    cpus = os.cpu_count() or 1
    pinned = os.environ.get("DDIBENCH_THREADS", "").strip()
    if pinned:
        if not pinned.isdigit() or int(pinned) < 1:
            raise ConfigError(
                f"DDIBENCH_THREADS must be a positive whole number of threads, got {pinned!r}",
                "unset it to let ddibench choose from the machine's load",
            )
        return int(pinned)
    return max(1, min(cpus, cpus - round(other_work())))


OTHER_WORK_WINDOW_S = 0.3  # long enough for 30 clock ticks a CPU at Linux's 100 Hz accounting
OTHER_WORK_KEPT_S = 5.0  # a plan asks several times within a second or two: one measurement serves them
_other_work: tuple[float, float] | None = None  # (when, CPUs busy with other work)


def other_work() -> float:
    """How many CPUs other processes keep busy now: the machine's busy CPU time over a short window (/proc/stat)
    less this process's own. Not the 1-minute load average, which counts this process's own start-up (loading the
    task's data) as other work and holds a burst that has ended (the pip install just before a first run) for
    minutes: on a fresh machine it gave the first run one server thread of two, and a plan four times too long.
    Where /proc/stat cannot be read, the 1-minute load average less this process. Measured at most once every
    :data:`OTHER_WORK_KEPT_S` seconds."""
    global _other_work
    import time

    now = time.monotonic()
    if _other_work is not None and now - _other_work[0] < OTHER_WORK_KEPT_S:
        return _other_work[1]
    try:
        busy_before, mine_before = _busy_ticks(), _own_seconds()
        time.sleep(OTHER_WORK_WINDOW_S)
        busy_after, mine_after = _busy_ticks(), _own_seconds()
        ticks = os.sysconf("SC_CLK_TCK")
        window = time.monotonic() - now
        value = ((busy_after - busy_before) / ticks - (mine_after - mine_before)) / window
    except (OSError, ValueError, IndexError):
        try:
            value = os.getloadavg()[0] - 1.0  # this process, running while it asks
        except OSError:
            value = 0.0
    value = max(0.0, value)
    _other_work = (time.monotonic(), value)
    return value


def _busy_ticks() -> int:
    """Clock ticks every CPU spent on anything but idling and waiting for I/O since boot (/proc/stat's cpu line)."""
    with open("/proc/stat", encoding="ascii") as fh:
        fields = [int(x) for x in fh.readline().split()[1:]]
    return sum(fields) - fields[3] - fields[4] - sum(fields[8:])  # guest time is in user time already


def _own_seconds() -> float:
    times = os.times()
    return times.user + times.system


def plan_run(request: RunRequest, system: System | None = None) -> RunPlan:
    """What a run will do; ``system`` stands in for the installed one (a rescore plans with the system its results recorded)."""
    if request.limit is not None and request.limit <= 0:
        raise ConfigError(
            f"--limit must be a positive number of samples, got {request.limit}", "omit it to run every sample"
        )
    profile = get_profile(request.profile)
    task = get_task(request.task)
    if system is None:
        system = build_system(request.system, profile, request.config, task.name)
    if not system.supports(task):
        raise ConfigError(
            f"system '{system.name}' does not support task '{task.name}' ({task.family})", "run 'ddibench list systems'"
        )
    evaluator = task.evaluator().configure(request.scoring, subject=task.name)
    roles = list(configured_roles(system))  # an ablation without the LLM starts no model
    models = request.role_models()
    models.check_roles(
        f"system '{system.name}'", roles, evaluator.model_roles()
    )  # a misspelt role, before any model starts
    selection = request.selection(task)
    split = selection.split
    if split == "train":
        raise ConfigError("cannot evaluate on the training split", "use --split valid or --split test")
    data = task.load()
    total = sum(len(data.split(s)) for s in task.predicted_splits(split))
    if request.limit is not None and request.limit > total:
        raise ConfigError(
            f"--limit {request.limit:,} is more than the {total:,} samples of {task.name}'s {split} split",
            f"give at most {total:,}, or omit --limit to run every sample",
        )
    selected = run_samples(task, selection, data)
    pool = None
    if roles:
        cache = open_cache() if request.use_cache else None
        if cache is not None:
            cache.check()
        pool = LLMPool(
            models.for_roles(roles),
            cache=cache,
            concurrency=request.concurrency or profile.llm_concurrency,
            # an explicit --concurrency N gives the embedded server N slots, each filled by any role; by default
            # it has EMBEDDED_SLOTS, filled by the system's generation roles, the others' requests one at a time
            embedded_slots=request.concurrency or EMBEDDED_SLOTS,
            generation_roles=None if request.concurrency else tuple(getattr(system, "generation_roles", ())),
            n_threads=embedded_threads(),
            max_retries=request.max_retries,
        )
    model_ids = pool.identities(roles) if pool else {}
    identity = run_identity(task, system, model_ids, split, selection.seed, selection.limit, [s.id for s in selected])
    run_dir = request.run_dir or request.runs_root / task.name / system.name / identity.run_id
    check_writable_dir(request.run_dir or request.runs_root, "--run-dir" if request.run_dir else "--runs-dir")
    return RunPlan(request, profile, task, system, evaluator, data, split, selected, roles, pool, identity, run_dir)
