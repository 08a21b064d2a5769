"""Score a run: the evaluator's model-based scores (if it has any), its metrics with intervals and the LLM
cost from the traces, written with the manifest that ties every number to code, data, system, models and
hardware (built by :mod:`ddibench.runner.manifest`). ``rescore`` does the same for a finished run without
predicting anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ddibench.errors import DdibenchError, RunDirError
from ddibench.evaluation import EvaluationInputError, ScoringJob
from ddibench.llm import ModelSpec, RoleModels, parse_model_options
from ddibench.metrics.bootstrap import BootstrapSpec
from ddibench.profiles import detect_hardware, profile_mismatch
from ddibench.runner.journal import Journal
from ddibench.runner.manifest import RecordedSystem, code_version, make_results, package_versions, system_card
from ddibench.runner.plan import RunPlan, RunRequest, open_cache, plan_run
from ddibench.runner.records import (
    Cost,
    ModelEntry,
    PerItemCost,
    ProfileRecord,
    Results,
    RoleCost,
    RunIdentity,
    Seeds,
    read_identity,
    read_results,
)
from ddibench.runner.rundir import RunLock, read_sessions, write_json_atomic
from ddibench.runner.signals import run_async
from ddibench.schema import Prediction
from ddibench.system import NullProgress, Progress


def cost_from_predictions(predictions: Sequence[Prediction]) -> Cost:
    """LLM calls and tokens per role, summed over the traces of every journalled prediction."""
    roles: dict[str, RoleCost] = {}
    for pred in predictions:
        for call in pred.trace.get("llm", []):
            r = roles.setdefault(call.get("role", "generator"), RoleCost())
            r.calls += 1
            r.prompt_tokens += call.get("prompt_tokens", 0)
            r.completion_tokens += call.get("completion_tokens", 0)
            r.latency_s += call.get("latency_s", 0.0)
            r.served_from_cache += 1 if call.get("cached") else 0
    n = max(1, len(predictions))
    per_item = {
        role: PerItemCost(
            calls=round(r.calls / n, 3),
            prompt_tokens=round(r.prompt_tokens / n, 3),
            completion_tokens=round(r.completion_tokens / n, 3),
        )
        for role, r in roles.items()
    }
    return Cost(by_role=roles, per_item=per_item, n_items=len(predictions))


def collect_extras(plan: RunPlan, predictions: dict[str, Prediction], progress: Progress) -> dict[str, Any]:
    """The evaluator's model-based scores (judge grades, SelfCheckGPT samples), kept under ``scores/``."""
    request = plan.request
    if not plan.evaluator.model_roles() or not request.score_with_models:
        return {}
    job = ScoringJob(
        run_dir=plan.run_dir,
        samples=plan.selected,
        predictions=predictions,
        models=request.role_models(),
        cache=open_cache() if request.use_cache else None,
        concurrency=request.concurrency or plan.profile.llm_concurrency,
        max_retries=request.max_retries,
        progress=progress,
    )
    return run_async(plan.evaluator.collect(job))


def score_run(plan: RunPlan, predictions: dict[str, Prediction], extras: dict[str, Any] | None = None) -> Results:
    task, identity, request, pool = plan.task, plan.identity, plan.request, plan.pool
    extras = extras or {}
    try:
        evaluation = plan.evaluator.evaluate(plan.selected, predictions, request.bootstrap, extras)
    except EvaluationInputError as exc:
        raise DdibenchError(
            f"cannot score {plan.run_dir}: {exc}", "this is a bug in the system's predict(); report it"
        ) from None
    sessions = read_sessions(plan.run_dir)
    hardware = detect_hardware()
    results = make_results(
        task=task,
        evaluator=plan.evaluator,
        evaluation=evaluation,
        identity=identity,
        system=system_card(plan),
        models={
            role: ModelEntry(spec=pool.specs[role].display(), identity=ident, output=pool.output(role))
            for role, ident in identity.models.items()
        }
        if pool
        else {},
        profile=ProfileRecord(
            declared=plan.profile.as_dict(), detected=hardware, warning=profile_mismatch(plan.profile, hardware)
        ),
        seeds=Seeds(
            run=request.seed, bootstrap=request.bootstrap.seed, limit_sampling=request.seed if request.limit else None
        ),
        scoring_info=extras.get("info", {}),
        sessions=sessions,
        cost=cost_from_predictions([predictions[s.id] for s in plan.selected]),
        floors=cached_floors(plan),
    )
    results.scored_from = scoring_inputs(plan)
    return results


def scoring_inputs(plan: RunPlan) -> str:
    """sha256 of everything a run's results are computed from: the journal and session log as they are on
    disk, the run identity, the evaluator's settings, the bootstrap, every model role (a judge's too), the
    declared profile, the task and system cards, the scoring code and the tracked package versions.

    A finished run whose ``results.json`` records the same digest is not scored again when the same
    command is run once more (:func:`already_scored`): scoring is deterministic, so it would write the
    same numbers, and for drugbank_s0's 38,419 pairs it costs most of a resume (the journal read, the
    BCa bootstrap). Only the creation time and the detected hardware are not in the digest: reused
    results keep those of the invocation that scored them."""
    import dataclasses
    import hashlib

    from ddibench.hashing import stable_json

    digest = hashlib.sha256()
    for name in ("journal.jsonl", "sessions.jsonl"):
        path = plan.run_dir / name
        digest.update(name.encode() + b"\0" + (path.read_bytes() if path.exists() else b"-") + b"\0")
    pool = plan.pool
    described = {
        "identity": plan.identity.run_id,
        "settings": plan.evaluator.settings(),
        "evaluator": [f"{type(plan.evaluator).__module__}.{type(plan.evaluator).__qualname__}", plan.evaluator.version],
        "bootstrap": dataclasses.asdict(plan.request.bootstrap),
        "models": {role: spec.display() for role, spec in sorted(pool.specs.items())} if pool else {},
        "profile": plan.profile.as_dict(),
        "task": plan.task.card(),
        "system": system_card(plan, provenance=False).model_dump(
            mode="json", exclude={"provenance"}
        ),  # a commit elsewhere changes no number
        "code": [code_version()["ddibench_version"], _scoring_code_digest(type(plan.evaluator))],
        "packages": package_versions(),
    }
    digest.update(stable_json(described).encode("utf-8"))
    return digest.hexdigest()


def already_scored(plan: RunPlan) -> Results | None:
    """The run's results when they were computed from exactly what is there now (:func:`scoring_inputs`)."""
    path = plan.run_dir / "results.json"
    if not path.exists():
        return None
    try:
        results = read_results(path)
    except DdibenchError:  # damaged: scored again and rewritten
        return None
    if results.run_id != plan.identity.run_id or not results.scored_from:
        return None
    return results if results.scored_from == scoring_inputs(plan) else None


def _scoring_code_digest(evaluator_class: type) -> str:
    """sha256 of the code floors are computed by: ddibench's evaluators and metrics, and the module of
    the evaluator's own class (an evaluator from a plugin family lives outside ddibench)."""
    import hashlib
    import inspect

    import ddibench.evaluation
    import ddibench.metrics

    files = {
        p
        for package in (ddibench.evaluation, ddibench.metrics)
        for folder in package.__path__
        for p in Path(folder).glob("*.py")
    }
    here = Path(__file__)
    files |= {here, here.with_name("records.py"), here.with_name("manifest.py")}  # how results are assembled
    try:
        files.add(Path(inspect.getfile(evaluator_class)))
    except (TypeError, OSError):
        pass
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def cached_floors(plan: RunPlan) -> dict[str, Any]:
    """The evaluator's floors (majority, uniform random) on the run's samples, computed once per data,
    selection, evaluator settings and scoring code (:func:`_scoring_code_digest`) and kept in the
    artifact store: they never depend on the predictions, and the random floor's seeded draws are most
    of the cost of scoring a large run (about 10 s for the 38,419 pairs of drugbank_s0), which a resume
    would otherwise pay again."""
    import hashlib
    import json

    from ddibench.artifacts import ArtifactStore

    evaluator = plan.evaluator
    ids = hashlib.sha256("\n".join(s.id for s in plan.selected).encode("utf-8")).hexdigest()
    key = {
        "task": plan.task.name,
        "task_version": plan.task.version,
        "data": plan.task.data_sha256,
        "split": plan.split,
        "ids": ids,
        "evaluator": f"{type(evaluator).__module__}.{type(evaluator).__qualname__}",
        "settings": evaluator.settings(),
        "code": [code_version()["ddibench_version"], _scoring_code_digest(type(evaluator))],
    }

    def compute() -> dict[str, Any]:
        return plan.evaluator.floors(plan.selected, plan.data.split("train") if "train" in plan.data.splits else ())

    store = ArtifactStore(plan.request.artifact_dir())  # a reproduction (empty artifact store) computes them again

    def build(tmp: Path) -> None:
        (tmp / "floors.json").write_text(json.dumps(compute()), encoding="utf-8")

    try:
        folder, _ = store.get_or_build("floors", key, build)
        return dict(json.loads((folder / "floors.json").read_text(encoding="utf-8")))
    except (OSError, ValueError):  # an unwritable or damaged cache: compute them here
        return compute()


def rescore(
    run_dir: Path,
    models: dict[str, ModelSpec] | None,
    scoring: dict[str, Any],
    bootstrap: BootstrapSpec,
    progress: Progress | None = None,
    profile: str | None = None,
    first_scoring: bool = False,
) -> Results:
    """Score a finished run again (new judge, more SelfCheckGPT samples, other intervals) without
    predicting anything: the journal is read, never written. ``scoring`` holds the scoring options given
    now; options the run was scored with before are kept unless given again."""
    run_file, results_file = run_dir / "run.json", run_dir / "results.json"
    if not run_file.exists():
        raise RunDirError(f"{run_dir} holds no run.json", "give a run directory printed by 'ddibench run'")
    with RunLock(run_dir):  # first: a run still writing this directory is named as the reason, not its half-state
        ident = read_identity(run_file)
        if not results_file.exists() and not first_scoring:  # a merge of shards scores a run for the first time
            raise RunDirError(
                f"{run_dir} has not been scored yet (an unfinished run)",
                "finish it with the same 'ddibench run' command first",
            )
        previous = read_results(results_file) if results_file.exists() else None
        request = _rescore_request(run_dir, ident, previous, models, scoring, bootstrap, profile)
        # scored before: the system its results recorded (it predicts nothing here, so it need not be installed)
        recorded = RecordedSystem.of(previous.manifest.system, list(ident.models)) if previous is not None else None
        plan = plan_run(request, recorded)
        if plan.identity.run_id != ident.run_id:
            raise RunDirError(
                f"{run_dir} cannot be rescored by this ddibench: {ident.mismatch(plan.identity)}",
                "rescore with the ddibench version that made the run",
            )
        done = _complete_journal(plan)
        extras = collect_extras(plan, done, progress or NullProgress())
        results = score_run(plan, done, extras)
        write_json_atomic(results_file, results.dump())
    return results


def _rescore_request(
    run_dir: Path,
    ident: RunIdentity,
    previous: Results | None,
    models: dict[str, ModelSpec] | None,
    scoring: dict[str, Any],
    bootstrap: BootstrapSpec,
    profile: str | None,
) -> RunRequest:
    """The request a rescore plans with: the run's identity, the models and profile it was scored with (or, never
    scored, those its sessions recorded) unless given now, and its scoring options updated by those given now."""
    if previous is not None:
        used = {role: m.spec for role, m in previous.manifest.models.items()}
    else:  # never scored (shards merged): the models and profile the sessions recorded
        sessions = read_sessions(run_dir)
        used = next((dict(s.models) for s in sessions if s.models), {})
        profile = profile or next((s.profile for s in sessions if s.profile), "cpu")
    specs: RoleModels = parse_model_options([used["generator"]] if "generator" in used else [])
    specs = specs.with_roles({role: ModelSpec.parse(spec) for role, spec in used.items()})
    specs = specs.with_roles(dict(models or {}))
    before = dict(previous.manifest.scoring.options) if previous else {}
    return RunRequest(
        task=ident.task.name,
        system=ident.system.name,
        models=specs,
        profile=profile or (previous.manifest.profile.name if previous else "cpu"),
        seed=ident.seed,
        limit=ident.limit,
        split=ident.split,
        config=ident.system.config,
        run_dir=run_dir,
        bootstrap=bootstrap,
        scoring={**before, **scoring},
    )


def _complete_journal(plan: RunPlan) -> dict[str, Prediction]:
    """The run's journalled predictions, read without repair; RunDirError when a selected sample has none."""
    run_dir = plan.run_dir
    done = Journal(run_dir / "journal.jsonl").load(repair=False)
    missing = [s.id for s in plan.selected if s.id not in done]
    if missing:
        raise RunDirError(
            f"{run_dir} is incomplete ({len(missing)} samples without a prediction)",
            "finish it with 'ddibench run' first",
        )
    return done
