"""Plan a run before anything is written: the task, the system and its configuration, the evaluator
and its scoring options, the samples (``--limit`` draws a stratified, seeded subset), the models by
role, and the run's identity and directory.

Every mistake a user can make in a command (an unknown name, a bad option, a system that does not
serve the task, a missing model) is found here, as a one-line :class:`~ddibench.errors.DdibenchError`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ddibench.errors import ConfigError
from ddibench.evaluation import Evaluator
from ddibench.hashing import config_hash, sha256_text
from ddibench.llm import LLMPool, RoleModels, parse_model_options
from ddibench.metrics.bootstrap import BootstrapSpec
from ddibench.profiles import Profile, get_profile
from ddibench.registry import get_system_class, get_task
from ddibench.runner.records import RunIdentity, SystemRef, TaskRef
from ddibench.schema import Sample
from ddibench.system import BaseSystem, System, system_config_hash
from ddibench.task import Task, TaskData


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
    score_with_models: bool = True  # False: skip the evaluator's model-based scores (a reproduction compares predictions only)
    executor: str = "local"  # "local" (asyncio in this process) or "ray" (see runner/distributed.py)
    ray_address: str | None = None  # an existing Ray cluster (default: start a local one)
    workers: int | None = None  # Ray actors (default: the cluster's CPUs)
    shard: tuple[int, int] | None = None  # (i, n): predict every n-th sample into shards/i-of-n, score nothing

    def role_models(self) -> RoleModels:
        return self.models if self.models is not None else parse_model_options([])


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


def stratified_subset(samples: Sequence[Sample], n: int, seed: int) -> list[Sample]:
    """``n`` samples with label proportions kept (largest-remainder allocation), seeded, in split order."""
    if n >= len(samples):
        return list(samples)
    rng = np.random.default_rng(seed)
    groups: dict[Any, list[int]] = {}
    for i, s in enumerate(samples):
        groups.setdefault(_stratum(s.target), []).append(i)
    keys = sorted(groups, key=str)
    exact = np.array([n * len(groups[k]) / len(samples) for k in keys])
    quota = np.floor(exact).astype(int)
    remainder = n - int(quota.sum())
    if remainder:
        order = sorted(range(len(keys)), key=lambda j: (-(exact[j] - quota[j]), rng.random()))
        for j in order[:remainder]:
            quota[j] += 1
    chosen: list[int] = []
    for k, q in zip(keys, quota):
        if q:
            chosen.extend(rng.choice(groups[k], size=int(q), replace=False).tolist())
    return [samples[i] for i in sorted(chosen)]


def _stratum(target: Any) -> Any:
    """What --limit stratifies by: the label (a question's interaction type or answer slice)."""
    if isinstance(target, Mapping):
        return target.get("label")
    return tuple(target) if isinstance(target, list) else target


def build_system(name: str, profile: Profile, overrides: dict[str, Any]) -> System:
    cls = get_system_class(name)
    if issubclass(cls, BaseSystem):
        return cls.build(profile.budget_for(name), overrides)
    if overrides:
        raise ConfigError(f"system '{name}' does not take --config options")
    return cls()  # type: ignore[call-arg]


def run_identity(task: Task, system: System, models: dict[str, dict[str, Any]], split: str, seed: int, limit: int | None, ids: list[str]) -> RunIdentity:
    ident = run_identity_from(task, system.name, system.version, system.config.model_dump(mode="json"), models, split, seed, limit, ids)
    assert ident.system.config_hash == system_config_hash(system)
    return ident


def run_identity_from(
    task: Task, system: str, version: str, config: dict[str, Any], models: dict[str, dict[str, Any]], split: str, seed: int, limit: int | None, ids: list[str]
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
            raise StorageError(f"{option} {path} is a file, not a directory", f"give a directory to {option}, or remove the file")
        existing = path
    else:
        existing = path.parent
        while not existing.exists():
            existing = existing.parent
        if not existing.is_dir():
            raise StorageError(f"{existing} is a file, so {option} {path} cannot be created below it", "choose another path")
    if not os.access(existing, os.W_OK):
        raise StorageError(f"{existing} is not writable, so the run cannot be written to {path}", f"choose a writable {option}")


def open_cache():  # noqa: ANN201 - the response cache every run and scorer shares
    from ddibench.data.resolve import cache_root
    from ddibench.llm import ResponseCache

    return ResponseCache(cache_root() / "llm-cache.sqlite")


def plan_run(request: RunRequest) -> RunPlan:
    if request.limit is not None and request.limit <= 0:
        raise ConfigError(f"--limit must be a positive number of samples, got {request.limit}", "omit it to run every sample")
    profile = get_profile(request.profile)
    task = get_task(request.task)
    system = build_system(request.system, profile, request.config)
    if not system.supports(task):
        raise ConfigError(f"system '{system.name}' does not support task '{task.name}' ({task.family})", "run 'ddibench list systems'")
    evaluator = task.evaluator().configure(request.scoring, subject=task.name)
    split = request.split or task.eval_split
    if split == "train":
        raise ConfigError("cannot evaluate on the training split", "use --split valid or --split test")
    data = task.load()
    eval_samples = data.split(split)
    if request.limit is not None and request.limit > len(eval_samples):
        raise ConfigError(
            f"--limit {request.limit:,} is more than the {len(eval_samples):,} samples of {task.name}'s {split} split",
            f"give at most {len(eval_samples):,}, or omit --limit to run every sample",
        )
    selected = stratified_subset(eval_samples, request.limit, request.seed) if request.limit else list(eval_samples)
    roles = list(getattr(system, "llm_roles", ()))
    models = request.role_models()
    pool = None
    if roles:
        cache = open_cache() if request.use_cache else None
        if cache is not None:
            cache.check()
        pool = LLMPool(
            models.for_roles(roles),
            cache=cache,
            concurrency=request.concurrency or profile.llm_concurrency,
            n_threads=os.cpu_count(),
            max_retries=request.max_retries,
        )
    model_ids = pool.identities(roles) if pool else {}
    identity = run_identity(task, system, model_ids, split, request.seed, request.limit, [s.id for s in selected])
    run_dir = request.run_dir or request.runs_root / task.name / system.name / identity.run_id
    check_writable_dir(request.run_dir or request.runs_root, "--run-dir" if request.run_dir else "--runs-dir")
    return RunPlan(request, profile, task, system, evaluator, data, split, selected, roles, pool, identity, run_dir)
