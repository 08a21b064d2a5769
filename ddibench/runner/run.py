"""Execute a run: select samples, prepare the system, predict with bounded concurrency, journal every
sample, resume what was interrupted, score, and write results with their manifest.

Run directory (``<runs root>/<task>/<system>/<run id>/``; many runs share one root)::

    run.json         the run's identity: task + data hash, system + config hash, model identities,
                     split, seed, limit, the hash of the selected sample ids (written first)
    journal.jsonl    one prediction per finished sample (append-only, flushed per write)
    sessions.jsonl   one line per invocation: when, where, what it did, its LLM usage
    results.json     metrics with confidence intervals, cost, timing and the manifest (written last)
    llm-server.log   the embedded llama.cpp server's log, when one was used

The run id hashes the identity, so the same command finds the same directory and resumes it; a
directory that belongs to another run is refused.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import fcntl
import json
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ddibench.artifacts import ArtifactStore
from ddibench.data.resolve import cache_root
from ddibench.errors import ConfigError, DdibenchError, ModelEndpointError, RunDirError
from ddibench.hashing import config_hash, sha256_text, stable_json
from ddibench.llm.client import LLMCallError, LLMPool
from ddibench.llm.spec import ModelSpec
from ddibench.metrics.bootstrap import BootstrapSpec
from ddibench.profiles import Profile, detect_hardware, get_profile, profile_mismatch
from ddibench.registry import get_system_class, get_task
from ddibench.runner.journal import Journal
from ddibench.runner.manifest import code_version, package_versions
from ddibench.schema import Prediction, Sample
from ddibench.system import (
    BaseSystem,
    NullProgress,
    Progress,
    RunContext,
    System,
    TrainingView,
    system_config_hash,
)
from ddibench.task import EvaluationInputError, Task, TaskData

RUN_SCHEMA_VERSION = 1
MAX_CONSECUTIVE_FAILURES = 5


@dataclass
class RunRequest:
    task: str
    system: str
    models: dict[str, ModelSpec] = field(default_factory=dict)
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
    judge: bool = True  # grade answers of LLM-scored (QA) tasks with the judge model
    selfcheck_samples: int = 3  # SelfCheckGPT samples per answer on LLM-scored tasks (0: none)
    scorer_encoder: str | None = None  # text encoder of the similarity scorers of free-text tasks (None: the task's default)


@dataclass
class RunOutcome:
    run_dir: Path
    results: dict[str, Any]
    predicted_now: int
    resumed: int


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


def _identity(
    task: Task, system: System, models: dict[str, dict[str, Any]], split: str, seed: int, limit: int | None, ids: list[str]
) -> dict[str, Any]:
    ident = {
        "schema": RUN_SCHEMA_VERSION,
        "task": {"name": task.name, "version": task.version, "data_sha256": task.data_sha256},
        "system": {
            "name": system.name,
            "version": system.version,
            "config": system.config.model_dump(mode="json"),
            "config_hash": system_config_hash(system),
        },
        "models": models,
        "split": split,
        "seed": seed,
        "limit": limit,
        "n_samples": len(ids),
        "sample_ids_sha256": sha256_text("\n".join(ids)),
    }
    ident["run_id"] = config_hash(ident, 16)
    return ident


def _summary(key: str, value: Any) -> str:
    if key == "task" and isinstance(value, dict):
        return f"{value.get('name')} {value.get('version')} (data {str(value.get('data_sha256'))[:12]})"
    if key == "system" and isinstance(value, dict):
        return f"{value.get('name')} {value.get('version')} (config {value.get('config_hash')})"
    return json.dumps(value, sort_keys=True)


def _describe_mismatch(stored: dict[str, Any], wanted: dict[str, Any]) -> str:
    for key in ("task", "system", "models", "split", "seed", "limit"):
        if stable_json(stored.get(key)) != stable_json(wanted.get(key)):
            return f"{key}: the directory has {_summary(key, stored.get(key))}, this command asks for {_summary(key, wanted.get(key))}"
    return "the selected samples differ"


class _RunLock:
    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / ".lock"
        self._fh: Any = None

    def __enter__(self) -> _RunLock:
        self._fh = open(self.path, "a+")
        try:
            fcntl.flock(self._fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._fh.seek(0)
            holder = self._fh.read().strip() or "another process"
            self._fh.close()
            raise RunDirError(f"run directory {self.path.parent} is in use by {holder}", "wait for it to finish, or use another --run-dir") from None
        self._fh.seek(0)
        self._fh.truncate()
        self._fh.write(f"pid {os.getpid()}")
        self._fh.flush()
        return self

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self._fh, fcntl.LOCK_UN)
        self._fh.close()


def _write_json_atomic(path: Path, payload: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(payload, indent=2, ensure_ascii=False, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def build_system(name: str, profile: Profile, overrides: dict[str, Any]) -> System:
    cls = get_system_class(name)
    if issubclass(cls, BaseSystem):
        return cls.build(profile.budget_for(name), overrides)
    if overrides:
        raise ConfigError(f"system '{name}' does not take --config options")
    return cls()  # type: ignore[call-arg]


def cost_from_predictions(predictions: Sequence[Prediction]) -> dict[str, Any]:
    """LLM calls and tokens per role, summed over the traces of every journalled prediction."""
    roles: dict[str, dict[str, float]] = {}
    for pred in predictions:
        for call in pred.trace.get("llm", []):
            r = roles.setdefault(call.get("role", "generator"), {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "latency_s": 0.0, "served_from_cache": 0})
            r["calls"] += 1
            r["prompt_tokens"] += call.get("prompt_tokens", 0)
            r["completion_tokens"] += call.get("completion_tokens", 0)
            r["latency_s"] += call.get("latency_s", 0.0)
            r["served_from_cache"] += 1 if call.get("cached") else 0
    n = max(1, len(predictions))
    per_item = {
        role: {k: round(v / n, 3) for k, v in r.items() if k in ("calls", "prompt_tokens", "completion_tokens")}
        for role, r in roles.items()
    }
    return {"by_role": roles, "per_item": per_item, "n_items": len(predictions)}


async def predict_samples(
    system: System,
    pending: list[Sample],
    ctx: RunContext,
    journal: Journal,
    concurrency: int,
    progress: Progress,
    total: int,
    already: int,
    counter: dict[str, int],
) -> list[str]:
    """Predict every pending sample; returns the ids whose model calls failed for good."""
    chunk = max(1, int(getattr(system, "batch_size", 1)))
    chunks = [pending[i : i + chunk] for i in range(0, len(pending), chunk)]
    queue: asyncio.Queue[list[Sample]] = asyncio.Queue()
    for c in chunks:
        queue.put_nowait(c)
    bar = progress.task(f"{system.name} on {ctx.task.name}", total)
    bar.advance(already)
    failures: list[str] = []
    consecutive = 0
    abort: list[BaseException] = []

    async def worker() -> None:
        nonlocal consecutive
        while not queue.empty() and not abort:
            batch = queue.get_nowait()
            blinded = [s.blind() for s in batch]
            try:
                preds = await system.predict(blinded, ctx)
            except LLMCallError as exc:
                failures.extend(s.id for s in batch)
                consecutive += 1
                ctx.log.warning("%d sample(s) failed: %s", len(batch), exc)
                if consecutive >= MAX_CONSECUTIVE_FAILURES:
                    abort.append(exc)
                continue
            consecutive = 0
            wanted = {s.id for s in batch}
            got = [p.sample_id for p in preds]
            if sorted(got) != sorted(wanted):
                raise EvaluationInputError(
                    f"system {system.name} returned predictions for {len(set(got) & wanted)} of {len(wanted)} samples "
                    f"(and {len(set(got) - wanted)} unknown ids); predict() must return one prediction per sample"
                )
            journal.append(preds)
            counter["predicted"] += len(preds)
            bar.advance(len(preds))

    try:
        await asyncio.gather(*(worker() for _ in range(max(1, min(concurrency, len(chunks))))))
    finally:
        bar.close()
        journal.sync()
    if abort:
        raise ModelEndpointError(
            f"stopped after {MAX_CONSECUTIVE_FAILURES} consecutive failed calls ({abort[0]})",
            f"{already + counter['predicted']} of {total} samples are saved; fix the endpoint and re-run the same command to resume",
        )
    return failures


@dataclass
class RunPlan:
    """Everything decided before anything is written: what runs, on which samples, where."""

    request: RunRequest
    profile: Profile
    task: Task
    system: System
    data: TaskData
    split: str
    selected: list[Sample]
    roles: list[str]
    pool: LLMPool | None
    identity: dict[str, Any]
    run_dir: Path


def plan_run(request: RunRequest) -> RunPlan:
    if request.limit is not None and request.limit <= 0:
        raise ConfigError(f"--limit must be a positive number of samples, got {request.limit}", "omit it to run every sample")
    profile = get_profile(request.profile)
    task = get_task(request.task)
    system = build_system(request.system, profile, request.config)
    if not system.supports(task):
        raise ConfigError(f"system '{system.name}' does not support task '{task.name}' ({task.family})", "run 'ddibench list systems'")
    if request.scorer_encoder is not None:
        from ddibench.embeddings import encoder_path

        task.scoring_evaluator(request.scorer_encoder)  # refuses tasks without free-text scorers
        encoder_path(request.scorer_encoder)  # refuses paths that hold no sentence-transformers model, before any prediction
    split = request.split or task.eval_split
    if split == "train":
        raise ConfigError("cannot evaluate on the training split", "use --split valid or --split test")
    data = task.load()
    eval_samples = data.split(split)
    selected = stratified_subset(eval_samples, request.limit, request.seed) if request.limit else list(eval_samples)
    roles = list(getattr(system, "llm_roles", ()))
    missing = [r for r in roles if r not in request.models]
    if missing:
        raise ConfigError(f"system '{system.name}' needs a model for role(s) {', '.join(missing)}", "pass --model")
    pool = None
    if roles:
        pool = LLMPool(
            {r: request.models[r] for r in roles},
            cache=_open_cache() if request.use_cache else None,
            concurrency=request.concurrency or profile.llm_concurrency,
            n_threads=os.cpu_count(),
            max_retries=request.max_retries,
        )
    model_ids = pool.identities(roles) if pool else {}
    identity = _identity(task, system, model_ids, split, request.seed, request.limit, [s.id for s in selected])
    run_dir = request.run_dir or request.runs_root / task.name / system.name / identity["run_id"]
    return RunPlan(request, profile, task, system, data, split, selected, roles, pool, identity, run_dir)


def _claim_run_dir(plan: RunPlan) -> None:
    """Check that the run directory holds this run (or nothing) and record the run's identity."""
    run_file = plan.run_dir / "run.json"
    if run_file.exists():
        stored = json.loads(run_file.read_text(encoding="utf-8"))
        if stored.get("run_id") != plan.identity["run_id"]:
            raise RunDirError(
                f"{plan.run_dir} belongs to another run ({_describe_mismatch(stored, plan.identity)})",
                "use another --run-dir, or omit --run-dir to get one directory per configuration",
            )
        return
    if any(p.name != ".lock" for p in plan.run_dir.iterdir()):
        raise RunDirError(f"{plan.run_dir} is not empty and holds no run.json", "use an empty or new --run-dir")
    _write_json_atomic(run_file, plan.identity)


def execute(request: RunRequest, progress: Progress | None = None) -> RunOutcome:
    """Run (or resume) a system on a task and write its results. Raises DdibenchError on bad input."""
    plan = plan_run(request)
    run_dir = plan.run_dir
    is_new = not (run_dir / "run.json").exists()
    if is_new and plan.pool is not None:
        plan.pool.preflight()  # an unreachable endpoint fails before anything is written
    run_dir.mkdir(parents=True, exist_ok=True)
    with _RunLock(run_dir):
        _claim_run_dir(plan)
        journal = Journal(run_dir / "journal.jsonl")
        done = journal.load()
        stray = [sid for sid in done if sid not in {s.id for s in plan.selected}]
        if stray:
            raise RunDirError(
                f"{run_dir}/journal.jsonl holds {len(stray)} predictions for samples outside this run",
                "start a fresh run directory",
            )
        pending = [s for s in plan.selected if s.id not in done]
        resumed = len(done)
        predicted, failures = 0, []
        if pending:
            if not is_new and plan.pool is not None:
                plan.pool.preflight()
            predicted, failures = _predict_pending(plan, pending, journal, progress or NullProgress(), resumed)
            done = journal.load()
        if failures:
            raise ModelEndpointError(
                f"{len(failures)} of {len(plan.selected)} samples got no answer from the model endpoint",
                "the other samples are saved; re-run the same command to retry the failed ones",
            )
        extras = score_with_llms(plan, done, progress or NullProgress()) if plan.task.llm_scored else {}
        results = score_run(plan, done, extras)
        _write_json_atomic(run_dir / "results.json", results)
    return RunOutcome(run_dir=run_dir, results=results, predicted_now=predicted, resumed=resumed)


def _predict_pending(
    plan: RunPlan, pending: list[Sample], journal: Journal, progress: Progress, resumed: int
) -> tuple[int, list[str]]:
    request, pool, system = plan.request, plan.pool, plan.system
    if pool is not None:
        pool.log_dir = plan.run_dir
    ctx = RunContext(
        task=plan.task,
        profile=plan.profile,
        seed=request.seed,
        artifacts=ArtifactStore(cache_root() / "artifacts"),
        llm=pool,
        progress=progress,
        run_dir=plan.run_dir,
        resources=plan.data.resources,
    )
    view = TrainingView(
        task=plan.task,
        train=plan.data.split("train"),
        valid=plan.data.split("valid") if plan.split != "valid" else (),
        resources=plan.data.resources,
    )
    timing: dict[str, float] = {}
    concurrency = min(request.concurrency or plan.profile.llm_concurrency, getattr(system, "max_concurrency", 64))

    counter = {"predicted": 0}

    async def go() -> list[str]:
        try:
            if pool is not None:
                t0 = time.perf_counter()
                await pool.start(plan.roles)
                timing["model_start_s"] = round(time.perf_counter() - t0, 3)
            t0 = time.perf_counter()
            await system.prepare(view, ctx)
            timing["prepare_s"] = round(time.perf_counter() - t0, 3)
            t0 = time.perf_counter()
            failed = await predict_samples(system, pending, ctx, journal, concurrency, progress, len(plan.selected), resumed, counter)
            timing["predict_s"] = round(time.perf_counter() - t0, 3)
            return failed
        finally:
            if pool is not None:
                await pool.close()

    started, cpu_start = time.time(), time.process_time()
    try:
        failures = asyncio.run(go())
    finally:
        journal.close()
        record = {
            "started": dt.datetime.fromtimestamp(started, dt.timezone.utc).isoformat(),
            "wall_s": round(time.time() - started, 3),
            "cpu_s": round(time.process_time() - cpu_start, 3),
            "predicted": counter["predicted"],
            "profile": plan.profile.name,
            "hardware": detect_hardware(),
            "code": code_version(),
            "timing": timing,
            "concurrency": concurrency,
            "llm_usage": pool.ledger.as_dict() if pool else {},
            "served_models": pool.served if pool else {},
            "system_info": system.run_info() if hasattr(system, "run_info") else {},
        }
        with open(plan.run_dir / "sessions.jsonl", "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record, default=str) + "\n")
    return counter["predicted"], failures


def _scorer_description(task: Task, encoder: str | None) -> dict[str, Any]:
    describe = getattr(task.scoring_evaluator(encoder), "describe", None)
    return {"scorers": describe()} if describe else {}


def _open_cache():  # noqa: ANN202 - small factory kept apart so tests can see where the cache lives
    from ddibench.llm.cache import ResponseCache

    return ResponseCache(cache_root() / "llm-cache.sqlite")


def read_sessions(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "sessions.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def score_with_llms(plan: RunPlan, predictions: dict[str, Prediction], progress: Progress) -> dict[str, Any]:
    """Judge grades and SelfCheckGPT samples of free-text answers (kept per run in ``scores/``)."""
    from ddibench.qa import judge as judging

    request = plan.request
    roles: dict[str, ModelSpec] = {}
    if request.judge:
        roles["judge"] = request.models["judge"]
        if "second_judge" in request.models:
            roles["second_judge"] = request.models["second_judge"]
    if request.selfcheck_samples > 0:
        roles["generator"] = request.models["generator"]
    if not roles:
        return {}
    pool = LLMPool(roles, cache=_open_cache() if request.use_cache else None, concurrency=request.concurrency or plan.profile.llm_concurrency,
                   n_threads=os.cpu_count(), max_retries=request.max_retries, log_dir=plan.run_dir)  # fmt: skip
    selected = {s.id: predictions[s.id] for s in plan.selected}
    out: dict[str, Any] = {"info": {}}

    async def go() -> None:
        try:
            pool.preflight()
            await pool.start(list(roles))
            folder = judging.scores_dir(plan.run_dir)
            for role in ("judge", "second_judge"):
                if role in roles:
                    path = folder / f"{judging.judge_key(pool.identity(role))}.jsonl"
                    out["info"][role] = await judging.judge(pool, role, plan.selected, selected, path, progress)
                    out[role] = judging.read_scores(path)
            if "second_judge" in out:
                out["info"]["judge_agreement"] = judging.agreement(out["judge"], out["second_judge"])
            if "generator" in roles:
                path = folder / f"{judging.selfcheck_key(pool.identity('generator'), request.selfcheck_samples)}.jsonl"
                out["info"]["selfcheck"] = await judging.selfcheck_samples(pool, "generator", plan.run_dir, selected, request.selfcheck_samples, path, progress)
                out["selfcheck"] = judging.read_scores(path)
        finally:
            await pool.close()

    asyncio.run(go())
    return out


def score_run(plan: RunPlan, predictions: dict[str, Prediction], extras: dict[str, Any] | None = None) -> dict[str, Any]:
    task, system, identity, request, pool = plan.task, plan.system, plan.identity, plan.request, plan.pool
    selected, profile, run_dir = plan.selected, plan.profile, plan.run_dir
    extras = extras or {}
    try:
        evaluation = task.scoring_evaluator(request.scorer_encoder).evaluate(selected, predictions, request.bootstrap, extras)
    except EvaluationInputError as exc:
        raise DdibenchError(f"cannot score {run_dir}: {exc}", "this is a bug in the system's predict(); report it") from None
    sessions = read_sessions(run_dir)
    hardware = detect_hardware()
    preds = [predictions[s.id] for s in selected]
    manifest = {
        "created": dt.datetime.now(dt.timezone.utc).isoformat(),
        **code_version(),
        "task": task.card(),
        "system": {
            "name": system.name,
            "version": system.version,
            "description": getattr(system, "description", ""),
            "config": system.config.model_dump(mode="json"),
            "config_hash": identity["system"]["config_hash"],
            "deviations": system.deviations() if hasattr(system, "deviations") else [],
        },
        "models": {
            role: {"spec": pool.specs[role].display(), "identity": ident}
            for role, ident in identity["models"].items()
        }
        if pool
        else {},
        "profile": {
            "declared": profile.as_dict(),
            "detected": hardware,
            "warning": profile_mismatch(profile, hardware),
        },
        "packages": package_versions(),
        "seeds": {"run": request.seed, "bootstrap": request.bootstrap.seed, "limit_sampling": request.seed if request.limit else None},
        "split": identity["split"],
        "limit": request.limit,
        "submittable": request.limit is None and identity["split"] == task.eval_split,
        "not_submittable_reason": (
            "--limit was used" if request.limit is not None else ("not the task's evaluation split" if identity["split"] != task.eval_split else None)
        ),
        "n_samples": len(selected),
        "sample_ids_sha256": identity["sample_ids_sha256"],
        "scoring": {**extras.get("info", {}), **_scorer_description(task, request.scorer_encoder)},
        "sessions": len(sessions),
    }
    timing = {
        "wall_s_total": round(sum(s.get("wall_s", 0) for s in sessions), 3),
        "predict_s_total": round(sum(s.get("timing", {}).get("predict_s", 0) for s in sessions), 3),
        "prepare_s_total": round(sum(s.get("timing", {}).get("prepare_s", 0) for s in sessions), 3),
    }
    system_info = next((s["system_info"] for s in reversed(sessions) if s.get("system_info")), {})
    return {
        "schema": RUN_SCHEMA_VERSION,
        "run_id": identity["run_id"],
        "task": task.name,
        "system": system.name,
        "evaluation": evaluation.model_dump(mode="json"),
        "cost": cost_from_predictions(preds),
        "timing": timing,
        "system_info": system_info,
        "manifest": manifest,
    }


def rescore(run_dir: Path, models: dict[str, ModelSpec] | None, judge: bool, selfcheck_samples: int | None,
            bootstrap: BootstrapSpec, progress: Progress | None = None, scorer_encoder: str | None = None) -> dict[str, Any]:  # fmt: skip
    """Score a finished run again (new judge, more SelfCheckGPT samples, other intervals) without
    predicting anything: the journal is read, never written."""
    from ddibench.evaluation import scoring_encoder_of
    from ddibench.llm.spec import parse_model_options

    run_file, results_file = run_dir / "run.json", run_dir / "results.json"
    if not run_file.exists():
        raise RunDirError(f"{run_dir} holds no run.json", "give a run directory printed by 'ddibench run'")
    ident = json.loads(run_file.read_text(encoding="utf-8"))
    previous = json.loads(results_file.read_text(encoding="utf-8")) if results_file.exists() else {}
    used = {role: m["spec"] for role, m in previous.get("manifest", {}).get("models", {}).items()}
    specs = parse_model_options([used["generator"]] if "generator" in used else [])
    for role, spec in used.items():
        specs[role] = ModelSpec.parse(spec)
    specs.update(models or {})
    old_scoring = previous.get("manifest", {}).get("scoring", {})
    request = RunRequest(
        task=ident["task"]["name"], system=ident["system"]["name"], models=specs,
        profile=previous.get("manifest", {}).get("profile", {}).get("declared", {}).get("name", "cpu"),
        seed=ident["seed"], limit=ident["limit"], split=ident["split"], config=ident["system"]["config"],
        run_dir=run_dir, bootstrap=bootstrap, judge=judge,
        selfcheck_samples=selfcheck_samples if selfcheck_samples is not None else old_scoring.get("selfcheck", {}).get("n", 0),
        scorer_encoder=scorer_encoder or scoring_encoder_of(previous.get("manifest", {})),
    )  # fmt: skip
    plan = plan_run(request)
    if plan.identity["run_id"] != ident["run_id"]:
        raise RunDirError(
            f"{run_dir} cannot be rescored by this ddibench: {_describe_mismatch(ident, plan.identity)}",
            "rescore with the ddibench version that made the run",
        )
    with _RunLock(run_dir):
        done = Journal(run_dir / "journal.jsonl").load(repair=False)
        missing = [s.id for s in plan.selected if s.id not in done]
        if missing:
            raise RunDirError(f"{run_dir} is incomplete ({len(missing)} samples without a prediction)", "finish it with 'ddibench run' first")
        extras = score_with_llms(plan, done, progress or NullProgress()) if plan.task.llm_scored else {}
        results = score_run(plan, done, extras)
        _write_json_atomic(results_file, results)
    return results
