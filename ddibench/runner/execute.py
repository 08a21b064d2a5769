"""Execute a run: prepare the system, predict with bounded concurrency, journal every sample, resume
what was interrupted, then score (:mod:`ddibench.runner.scoring`).

A run is planned first (:mod:`ddibench.runner.plan`: nothing is written for a bad command), then its
directory is locked and claimed (:mod:`ddibench.runner.rundir`). Samples already in the journal are
skipped, so running the same command again resumes it; the system sees only blinded samples (no
targets) and only the training view in ``prepare`` (blinded too when the task keeps its labels from systems).

Every invocation is a session in ``sessions.jsonl``, recorded when it starts and finished when it
ends, so invocations that were killed are still counted. A sample whose model calls fail for good is
not journalled: the session records it with the reason, the run stops with a one-line error, and the
same command predicts it again.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import gc
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddibench.errors import DdibenchError, EndpointGone, ModelEndpointError, RunDirError, write_error
from ddibench.evaluation import EvaluationInputError
from ddibench.llm import LLMCallError
from ddibench.profiles import detect_hardware
from ddibench.runner.journal import Journal
from ddibench.runner.manifest import code_version
from ddibench.runner.plan import RunPlan, RunRequest, plan_run, run_context, training_view
from ddibench.runner.records import Results, SessionRecord
from ddibench.runner.rundir import RunLock, append_session, claim, write_json_atomic
from ddibench.runner.scoring import already_scored, collect_extras, score_run
from ddibench.runner.signals import run_async
from ddibench.schema import Prediction, Sample
from ddibench.system import NullProgress, Progress, RunContext, System

MAX_CONSECUTIVE_FAILURES = 5


@dataclass
class RunOutcome:
    run_dir: Path
    results: Results | None  # None for one shard of a run (scored by 'ddibench merge')
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
    failures: dict[str, str] | None = None,
) -> dict[str, str]:
    """Predict every pending sample; returns the ids whose model calls failed for good, with the reason
    (``failures``, when given, is filled as they happen, so an interrupted session still records them)."""
    queue = _batch_queue(pending, system.batch_size)
    n_batches = queue.qsize()
    bar = progress.task(f"{system.name} on {ctx.task.name}", total)
    bar.advance(already, cached=True)  # resumed samples: done before, not counted in the rate
    failures = {} if failures is None else failures
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
                failures.update({s.id: str(exc) for s in batch})
                consecutive += 1
                ctx.log.warning("%d sample(s) failed: %s", len(batch), exc)
                if consecutive >= MAX_CONSECUTIVE_FAILURES:
                    abort.append(exc)
                continue
            consecutive = 0
            _check_one_per_sample(system, batch, preds)
            journal.append(preds)
            counter["predicted"] += len(preds)
            bar.advance(len(preds))

    # what exists now (the task's samples, the system's prepared indexes) lives until the run ends: frozen, the
    # cyclic collector stops walking it on every collection while the samples are predicted
    gc.freeze()
    try:
        await asyncio.gather(*(worker() for _ in range(max(1, min(concurrency, n_batches)))))
    except EndpointGone as exc:  # the embedded server died: say what is saved, and stop without retrying
        saved = f"{already + counter['predicted']} of {total} samples are saved"
        raise EndpointGone(exc.problem, f"{saved}; {exc.fix}" if exc.fix else saved) from None
    finally:
        gc.unfreeze()
        bar.close()
        journal.sync()
    if abort:
        raise ModelEndpointError(
            f"stopped after {MAX_CONSECUTIVE_FAILURES} consecutive failed calls ({abort[0]})",
            f"{already + counter['predicted']} of {total} samples are saved; fix the endpoint and re-run the same command to resume",
        )
    return failures


def _batch_queue(pending: list[Sample], batch_size: int) -> asyncio.Queue[list[Sample]]:
    """A queue of the pending samples in batches of the system's batch size (at least 1), in order."""
    chunk = max(1, int(batch_size))
    queue: asyncio.Queue[list[Sample]] = asyncio.Queue()
    for i in range(0, len(pending), chunk):
        queue.put_nowait(pending[i : i + chunk])
    return queue


def _check_one_per_sample(system: System, batch: list[Sample], preds: list[Prediction]) -> None:
    """Returns nothing; raises EvaluationInputError unless ``preds`` holds one prediction per sample of ``batch``."""
    wanted = {s.id for s in batch}
    got = [p.sample_id for p in preds]
    if sorted(got) != sorted(wanted):
        raise EvaluationInputError(
            f"system {system.name} returned predictions for {len(set(got) & wanted)} of {len(wanted)} samples "
            f"(and {len(set(got) - wanted)} unknown ids); predict() must return one prediction per sample"
        )


def execute(request: RunRequest, progress: Progress | None = None) -> RunOutcome:
    """Run (or resume) a system on a task and write its results. Raises DdibenchError on bad input."""
    progress = progress or NullProgress()
    progress.note(f"loading and checking the data of {request.task} (pinned sources, split sizes, setting checks)")
    plan = plan_run(request)
    run_dir = plan.run_dir
    is_new = not (run_dir / "run.json").exists()
    if request.executor == "ray":
        from ddibench.runner.distributed import check_ray

        check_ray(request.ray_address)  # Ray installed, and a cluster where --ray-address points
    if is_new and plan.pool is not None:
        plan.pool.preflight()  # an unreachable endpoint fails before anything is written
    if request.shard is not None:
        return _execute_shard(plan, progress)
    if _foreign(run_dir):
        raise RunDirError(f"{run_dir} is not empty and holds no run.json", "use an empty or new --run-dir")
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise write_error(exc, run_dir) from None
    with RunLock(run_dir):
        claim(run_dir, plan.identity)  # checked again under the lock: a run started beside this one is seen whole
        finished = already_scored(plan)  # a finished run asked again: its results, unless what they came from changed
        if finished is not None:
            return RunOutcome(run_dir=run_dir, results=finished, predicted_now=0, resumed=len(plan.selected))
        journal = Journal(run_dir / "journal.jsonl")
        done = journal.load()
        selected_ids = {s.id for s in plan.selected}
        stray = [sid for sid in done if sid not in selected_ids]
        if stray:
            raise RunDirError(
                f"{run_dir}/journal.jsonl holds {len(stray)} predictions for samples outside this run",
                "start a fresh run directory",
            )
        pending = [s for s in plan.selected if s.id not in done]
        resumed = len(done)
        predicted, failures = 0, dict[str, str]()
        if pending:
            if not is_new and plan.pool is not None:
                plan.pool.preflight()
            predicted, failures = _predict_pending(plan, pending, journal, progress, resumed)
            done = journal.load()
        if failures:
            first = next(iter(failures.values()))
            raise ModelEndpointError(
                f"{len(failures)} of {len(plan.selected)} samples got no answer from the model endpoint (e.g. {first})",
                "the other samples are saved and the failed ones listed in sessions.jsonl; re-run the same command to retry them",
            )
        extras = collect_extras(plan, done, progress)
        results = score_run(plan, done, extras)
        write_json_atomic(run_dir / "results.json", results.dump())
    return RunOutcome(run_dir=run_dir, results=results, predicted_now=predicted, resumed=resumed)


def _foreign(run_dir: Path) -> bool:
    """A directory of other files (no run.json, no lock file): refused before a lock file is added to it. One that
    has a lock file is a run directory, perhaps being started by another process this instant: what it holds is
    judged under the lock (:func:`~ddibench.runner.rundir.claim`), so a start that loses the race says 'in use'."""
    if not run_dir.is_dir() or (run_dir / "run.json").exists() or (run_dir / ".lock").exists():
        return False
    return any(True for _ in run_dir.iterdir())


def _execute_shard(plan: RunPlan, progress: Progress) -> RunOutcome:
    """One shard of a run (``--shard i/n``): its samples into its own directory, nothing scored."""
    from ddibench.runner.distributed import run_shard

    assert plan.request.shard is not None

    def predict(folder: Path, pending: list[Sample], journal: Journal, resumed: int) -> int:
        predicted, failures = _predict_pending(plan, pending, journal, progress, resumed, session_dir=folder)
        if failures:
            first = next(iter(failures.values()))
            raise ModelEndpointError(
                f"{len(failures)} samples of this shard got no answer (e.g. {first})",
                "re-run the same command to retry them",
            )
        return predicted

    folder, predicted, resumed = run_shard(plan, plan.request.shard, predict)
    return RunOutcome(run_dir=folder, results=None, predicted_now=predicted, resumed=resumed)


def _predict_pending(
    plan: RunPlan,
    pending: list[Sample],
    journal: Journal,
    progress: Progress,
    resumed: int,
    session_dir: Path | None = None,
) -> tuple[int, dict[str, str]]:
    request, pool, system = plan.request, plan.pool, plan.system
    session_dir = session_dir or plan.run_dir
    if request.executor == "ray":
        return _predict_on_ray(plan, pending, journal, progress, resumed, session_dir)
    ctx = run_context(plan, progress)
    view = training_view(plan)
    concurrency = min(request.concurrency or plan.profile.llm_concurrency, system.max_concurrency)
    book = _Bookkeeping()

    async def go() -> None:
        try:
            if pool is not None:
                t0 = time.perf_counter()
                threads = pool.n_threads or os.cpu_count() or 1  # the CPUs other work left free as the run was planned
                for spec in {pool.specs[r] for r in plan.roles if pool.specs[r].is_embedded}:
                    progress.note(
                        f"starting the embedded model server ({spec.model}, llama.cpp on 127.0.0.1, "
                        f"{threads} thread{'s' if threads > 1 else ''})"
                    )
                await pool.start(plan.roles)
                book.timing["model_start_s"] = round(time.perf_counter() - t0, 3)
            t0 = time.perf_counter()
            progress.note(f"preparing {system.name} from the training split (cached artifacts are reused)")
            await system.prepare(view, ctx)
            book.timing["prepare_s"] = round(time.perf_counter() - t0, 3)
            t0 = time.perf_counter()
            await predict_samples(
                system,
                pending,
                ctx,
                journal,
                concurrency,
                progress,
                len(plan.selected),
                resumed,
                book.counter,
                book.failures,
            )
            book.timing["predict_s"] = round(time.perf_counter() - t0, 3)
        finally:
            if pool is not None:
                await pool.close()

    _in_session(plan, journal, session_dir, lambda: run_async(go()), book, concurrency)
    return book.counter["predicted"], book.failures


def _predict_on_ray(
    plan: RunPlan, pending: list[Sample], journal: Journal, progress: Progress, resumed: int, session_dir: Path
) -> tuple[int, dict[str, str]]:
    """The Ray executor (runner/distributed.py) inside the same session bookkeeping as a local run."""
    from ddibench.runner.distributed import predict_with_ray

    book = _Bookkeeping()

    def work() -> None:
        book.info = predict_with_ray(
            plan, pending, journal, progress, resumed, book.counter, book.failures, book.timing
        )

    _in_session(plan, journal, session_dir, work, book)
    return book.counter["predicted"], book.failures


@dataclass
class _Bookkeeping:
    """What one session's work fills in as it goes (so an interrupted session still records it)."""

    counter: dict[str, int] = field(default_factory=lambda: {"predicted": 0})
    timing: dict[str, float] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)  # sample id -> why its model calls failed for good
    info: dict[str, Any] = field(default_factory=dict)  # the executor's own record (Ray)


def _in_session(
    plan: RunPlan,
    journal: Journal,
    session_dir: Path,
    work: Callable[[], None],
    book: _Bookkeeping,
    concurrency: int | None = None,
) -> None:
    """Run ``work`` as one session of ``sessions.jsonl``: recorded before it starts (an invocation killed from
    then on is still counted) and ended with its state — finished, failed (a DdibenchError, with its message)
    or interrupted (anything else) — after the journal is closed, whatever happened."""
    pool = plan.pool
    started, cpu_start = time.time(), time.process_time()
    session = SessionRecord(
        session_id=uuid.uuid4().hex[:16],
        state="started",
        started=dt.datetime.fromtimestamp(started, dt.timezone.utc).isoformat(),
        profile=plan.profile.name,
        hardware=detect_hardware(),
        code=code_version(),
        concurrency=concurrency,
        models={role: pool.specs[role].display() for role in plan.roles} if pool else {},
    )
    append_session(session_dir, session)
    state, error = "interrupted", None
    try:
        work()
        state = "finished"
    except DdibenchError as exc:
        state, error = "failed", str(exc)
        raise
    except BaseException as exc:
        error = type(exc).__name__
        raise
    finally:
        try:
            journal.close()
        finally:
            _end_session(
                plan,
                session,
                state,
                error,
                started,
                cpu_start,
                book.counter,
                book.timing,
                book.failures,
                session_dir,
                extra_info=book.info or None,
            )


def _end_session(
    plan: RunPlan,
    session: SessionRecord,
    state: str,
    error: str | None,
    started: float,
    cpu_start: float,
    counter: dict[str, int],
    timing: dict[str, float],
    failures: dict[str, str],
    session_dir: Path | None = None,
    extra_info: dict[str, Any] | None = None,
) -> None:
    pool, system = plan.pool, plan.system
    end = session.model_copy(
        update={
            "state": state,
            "error": error,
            "wall_s": round(time.time() - started, 3),
            "cpu_s": round(time.process_time() - cpu_start, 3),
            "predicted": counter["predicted"],
            "timing": timing,
            "llm_usage": pool.ledger.as_dict() if pool else {},
            "served_models": pool.served if pool else {},
            "endpoints": pool.endpoint_stats() if pool else {},
            "system_info": ({"executor": extra_info} if extra_info else {}) | system.run_info(),
            "failed": failures,
        }
    )
    try:
        append_session(session_dir or plan.run_dir, end)
    except DdibenchError:
        if state == "finished":
            raise
        # the session is ending on an error already (a full disk, most likely): that error is the one to show
