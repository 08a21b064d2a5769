"""Execute a run: prepare the system, predict with bounded concurrency, journal every sample, resume
what was interrupted, then score (:mod:`ddibench.runner.scoring`).

A run is planned first (:mod:`ddibench.runner.plan`: nothing is written for a bad command), then its
directory is locked and claimed (:mod:`ddibench.runner.rundir`). Samples already in the journal are
skipped, so running the same command again resumes it; the system sees only blinded samples (no
targets) and only the training view in ``prepare`` (blinded too when the task keeps its labels from systems).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from dataclasses import dataclass
from pathlib import Path

from ddibench.artifacts import ArtifactStore
from ddibench.data.resolve import cache_root
from ddibench.errors import ModelEndpointError, RunDirError
from ddibench.evaluation import EvaluationInputError
from ddibench.llm import LLMCallError
from ddibench.profiles import detect_hardware
from ddibench.runner.journal import Journal
from ddibench.runner.manifest import code_version
from ddibench.runner.plan import RunPlan, RunRequest, plan_run
from ddibench.runner.records import Results, SessionRecord
from ddibench.runner.rundir import RunLock, append_session, claim, write_json_atomic
from ddibench.runner.scoring import collect_extras, score_run
from ddibench.schema import Sample
from ddibench.system import NullProgress, Progress, RunContext, System, TrainingView

MAX_CONSECUTIVE_FAILURES = 5


@dataclass
class RunOutcome:
    run_dir: Path
    results: Results
    predicted_now: int
    resumed: int


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


def execute(request: RunRequest, progress: Progress | None = None) -> RunOutcome:
    """Run (or resume) a system on a task and write its results. Raises DdibenchError on bad input."""
    plan = plan_run(request)
    run_dir = plan.run_dir
    progress = progress or NullProgress()
    is_new = not (run_dir / "run.json").exists()
    if is_new and plan.pool is not None:
        plan.pool.preflight()  # an unreachable endpoint fails before anything is written
    run_dir.mkdir(parents=True, exist_ok=True)
    with RunLock(run_dir):
        claim(run_dir, plan.identity)
        journal = Journal(run_dir / "journal.jsonl")
        done = journal.load()
        selected_ids = {s.id for s in plan.selected}
        stray = [sid for sid in done if sid not in selected_ids]
        if stray:
            raise RunDirError(f"{run_dir}/journal.jsonl holds {len(stray)} predictions for samples outside this run", "start a fresh run directory")
        pending = [s for s in plan.selected if s.id not in done]
        resumed = len(done)
        predicted, failures = 0, list[str]()
        if pending:
            if not is_new and plan.pool is not None:
                plan.pool.preflight()
            predicted, failures = _predict_pending(plan, pending, journal, progress, resumed)
            done = journal.load()
        if failures:
            raise ModelEndpointError(
                f"{len(failures)} of {len(plan.selected)} samples got no answer from the model endpoint",
                "the other samples are saved; re-run the same command to retry the failed ones",
            )
        extras = collect_extras(plan, done, progress)
        results = score_run(plan, done, extras)
        write_json_atomic(run_dir / "results.json", results.dump())
    return RunOutcome(run_dir=run_dir, results=results, predicted_now=predicted, resumed=resumed)


def training_view(plan: RunPlan) -> TrainingView:
    """What ``prepare`` sees: the training split and, unless it is the evaluated one, the validation split;
    blinded when the task keeps its labels from systems (captioning: the labels are the probe's)."""
    train, valid = plan.data.split("train"), plan.data.split("valid") if plan.split != "valid" else ()
    if not plan.task.training_labels_visible:
        train, valid = tuple(s.blind() for s in train), tuple(s.blind() for s in valid)
    return TrainingView(task=plan.task, train=train, valid=valid, resources=plan.data.resources)


def _predict_pending(plan: RunPlan, pending: list[Sample], journal: Journal, progress: Progress, resumed: int) -> tuple[int, list[str]]:
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
    view = training_view(plan)
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
        append_session(
            plan.run_dir,
            SessionRecord(
                started=dt.datetime.fromtimestamp(started, dt.timezone.utc).isoformat(),
                wall_s=round(time.time() - started, 3),
                cpu_s=round(time.process_time() - cpu_start, 3),
                predicted=counter["predicted"],
                profile=plan.profile.name,
                hardware=detect_hardware(),
                code=code_version(),
                timing=timing,
                concurrency=concurrency,
                llm_usage=pool.ledger.as_dict() if pool else {},
                served_models=pool.served if pool else {},
                system_info=system.run_info() if hasattr(system, "run_info") else {},
            ),
        )
    return counter["predicted"], failures
