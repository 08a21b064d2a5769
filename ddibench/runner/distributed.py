"""Running one run on more than one process: Ray workers, or shards merged afterwards.

* ``--executor ray [--ray-address ADDR] [--workers N]`` — the pending samples of a run go, a batch at a
  time, to N Ray actors. Each actor builds the same system with the same configuration, prepares it
  (trained artifacts come from the shared artifact cache, so on one machine only the first actor
  trains), and predicts the batches it is given, with the run's LLM concurrency inside it. The driver
  is the only writer: it appends each batch to the run's journal as it arrives, so the journal, resume
  and scoring are exactly those of a local run. An actor that dies is replaced and its batch is sent
  again, so no sample is lost; a batch whose model calls failed for good is recorded as failed, as
  locally.
* ``--shard i/n`` — for schedulers without Ray (a slurm array): invocation i predicts every n-th
  sample (indices ≡ i-1 mod n of the run's selection) into ``<run dir>/shards/i-of-n/`` and scores
  nothing; ``ddibench merge RUN_DIR`` then appends every shard's predictions to the run's journal,
  keeps their sessions, and scores the run once it is complete.

Ray is an optional extra (``pip install 'ddibench[ray]'``) and imported only here.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections import deque
from pathlib import Path
from typing import Any

from ddibench.errors import ConfigError, ModelEndpointError, RunDirError
from ddibench.runner.journal import Journal
from ddibench.runner.plan import RunPlan, RunRequest, plan_run, run_context, training_view
from ddibench.runner.selection import run_samples
from ddibench.schema import Prediction, Sample
from ddibench.system import Progress

WORKERS_FILE = "ray-workers.jsonl"  # one line per actor started: host and pid (provenance, and for tests)


class _Worker:
    """A Ray actor: one system, prepared once, predicting the batches the driver sends it."""

    def __init__(self, request: RunRequest, env: dict[str, str]) -> None:
        os.environ.update(env)
        self.request = request
        self.plan: RunPlan | None = None
        self.ctx: Any = None
        self.by_id: dict[str, Sample] = {}

    async def prepare(self) -> dict[str, Any]:
        plan = plan_run(self.request)
        self.plan = plan
        self.by_id = {s.id: s for s in plan.selected}
        self.ctx = run_context(plan)
        if plan.pool is not None:
            await plan.pool.start(plan.roles)
        view = training_view(plan)
        started = time.perf_counter()
        await plan.system.prepare(view, self.ctx)
        info = {"host": socket.gethostname(), "pid": os.getpid(), "prepare_s": round(time.perf_counter() - started, 3)}
        with open(plan.run_dir / WORKERS_FILE, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(info) + "\n")
        return info

    async def predict(self, ids: list[str]) -> dict[str, Any]:
        """``{"predictions": [...]}``, or ``{"failed": reason}`` when the model calls failed for good."""
        from ddibench.llm import LLMCallError

        assert self.plan is not None
        batch = [self.by_id[i].blind() for i in ids]
        try:
            predictions = await self.plan.system.predict(batch, self.ctx)
        except LLMCallError as exc:
            return {"failed": str(exc)}
        return {"predictions": [p.model_dump(mode="json") for p in predictions]}

    async def usage(self) -> dict[str, Any]:
        pool = self.plan.pool if self.plan else None
        return pool.ledger.as_dict() if pool else {}

    async def close(self) -> None:
        if self.plan is not None and self.plan.pool is not None:
            await self.plan.pool.close()


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ConfigError("--executor ray needs Ray", "pip install 'ddibench[ray]'") from None
    return ray


RAY_CONNECT_TIMEOUT_S = 5.0


def check_ray(address: str | None) -> None:
    """Before anything is written: Ray is installed and, when ``--ray-address`` names HOST:PORT, something
    answers there (``ray.init`` retries an address where nothing listens for minutes, printing warnings)."""
    _ray()
    if not address or address in ("auto", "local"):
        return
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(
            f"--ray-address '{address}' is not HOST:PORT",
            "write e.g. --ray-address 10.0.0.5:6379 (the head node's GCS port), or auto",
        )
    try:
        with socket.create_connection((host, int(port)), timeout=RAY_CONNECT_TIMEOUT_S):
            pass
    except OSError as exc:
        reason = exc.strerror or str(exc) or type(exc).__name__
        raise ConfigError(
            f"no Ray cluster answers at --ray-address {address} ({reason})",
            "start one there ('ray start --head'), correct the address, or omit --ray-address to start a local cluster",
        ) from None


def predict_with_ray(
    plan: RunPlan,
    pending: list[Sample],
    journal: Journal,
    progress: Progress,
    resumed: int,
    counter: dict[str, int],
    failures: dict[str, str],
    timing: dict[str, float],
) -> dict[str, Any]:
    """Predict ``pending`` on Ray actors, journalling every batch in this process; returns what ran where."""
    ray = _ray()
    request = plan.request
    started_ray = _init_ray(ray, request.ray_address)
    env = {k: v for k, v in os.environ.items() if k.startswith(("DDIBENCH_", "HF_"))}
    n_workers = request.workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
    per_worker = max(1, min(request.concurrency or plan.profile.llm_concurrency, plan.system.max_concurrency))
    actor_class = ray.remote(num_cpus=1, max_concurrency=per_worker)(_Worker)
    queue = _id_batches(pending, plan.system.batch_size)
    bar = progress.task(f"{plan.system.name} on {plan.task.name} (ray, {n_workers} workers)", len(plan.selected))
    bar.advance(resumed, cached=True)  # resumed samples: done before, not counted in the rate
    info: dict[str, Any] = {
        "executor": "ray",
        "workers": n_workers,
        "replaced_workers": 0,
        "address": request.ray_address or "local",
    }
    t0 = time.perf_counter()
    fleet = _Fleet(ray, actor_class, request, env, n_workers, per_worker, info)
    consecutive_failures = 0
    try:
        while queue or fleet.busy():
            fleet.take_prepared(timing, t0)
            fleet.dispatch(queue)
            answered = fleet.next_answer(queue)
            if answered is None:
                continue
            ids, result = answered
            if "failed" in result:
                consecutive_failures = _failed_batch(ids, result["failed"], failures, consecutive_failures)
                continue
            consecutive_failures = 0
            journalled = _journal_batch(journal, ids, result["predictions"])
            counter["predicted"] += journalled
            bar.advance(journalled)
        timing["predict_s"] = round(time.perf_counter() - t0, 3)
        info["usage"] = fleet.usage()
        return info
    finally:
        bar.close()
        journal.sync()
        fleet.close()
        if started_ray:
            ray.shutdown()


def _init_ray(ray: Any, address: str | None) -> bool:
    """Start (or join, at ``address``) a Ray cluster unless this process is connected to one already; returns
    whether it did, so that the run shuts it down at its end."""
    if ray.is_initialized():
        return False
    env = {k: v for k, v in os.environ.items() if k.startswith(("DDIBENCH_", "HF_", "OPENAI_", "DEEPSEEK_", "VLLM_"))}
    kwargs: dict[str, Any] = {
        "include_dashboard": False,
        "logging_level": "ERROR",
        "log_to_driver": False,
        "runtime_env": {"env_vars": env},
    }
    if address:
        kwargs["address"] = address
    try:
        ray.init(**kwargs)
    except ConnectionError as exc:  # something listens there, but no Ray cluster
        raise ConfigError(
            f"no Ray cluster answers at --ray-address {address} ({' '.join(str(exc).split())[:200]})",
            "correct the address (the head node's GCS port, 6379 by default), or omit --ray-address",
        ) from None
    return True


def _id_batches(pending: list[Sample], batch_size: int) -> deque[list[str]]:
    """The ids of the pending samples in batches of the system's batch size (at least 1), in order."""
    chunk = max(1, int(batch_size))
    return deque([s.id for s in pending[i : i + chunk]] for i in range(0, len(pending), chunk))


class _Fleet:
    """The Ray actors of one run and the batches they hold. Each actor prepares first, then is given up to
    ``per_worker`` batches at a time; an actor that dies is replaced by a new one and its batches are queued again."""

    def __init__(
        self,
        ray: Any,
        actor_class: Any,
        request: RunRequest,
        env: dict[str, str],
        n_workers: int,
        per_worker: int,
        info: dict[str, Any],
    ) -> None:
        self.ray, self.actor_class, self.request, self.env = ray, actor_class, request, env
        self.per_worker, self.info = per_worker, info
        self.actors = [actor_class.remote(request, env) for _ in range(n_workers)]
        self.ready = {a: a.prepare.remote() for a in self.actors}
        self.in_flight: dict[Any, tuple[Any, list[str]]] = {}
        self.prepared: set[Any] = set()

    def busy(self) -> bool:
        """Whether a batch is out or an actor is still preparing."""
        return bool(self.in_flight) or any(a not in self.prepared for a in self.actors if a in self.ready)

    def take_prepared(self, timing: dict[str, float], t0: float) -> None:
        """Take in the actors that finished preparing (one that died doing it is replaced); returns nothing. The
        first sets ``timing["prepare_s"]``, the seconds since ``t0``."""
        ray = self.ray
        for actor in [a for a in self.actors if a in self.ready and a not in self.prepared]:
            done, _ = ray.wait([self.ready[actor]], timeout=0)
            if not done:
                continue
            try:
                ray.get(self.ready[actor])
            except ray.exceptions.RayActorError:
                self._replace_actor(actor)
                continue
            except ray.exceptions.RayTaskError as exc:
                raise _unwrap(exc) from None
            self.prepared.add(actor)
            timing.setdefault("prepare_s", round(time.perf_counter() - t0, 3))

    def dispatch(self, queue: deque[list[str]]) -> None:
        """Give every prepared actor batches from ``queue`` until it holds ``per_worker``; returns nothing."""
        for actor in [a for a in self.actors if a in self.prepared]:
            while queue and sum(1 for a, _ in self.in_flight.values() if a is actor) < self.per_worker:
                ids = queue.popleft()
                self.in_flight[actor.predict.remote(ids)] = (actor, ids)

    def next_answer(self, queue: deque[list[str]]) -> tuple[list[str], dict[str, Any]] | None:
        """The next batch an actor answered within a second: its ids and the answer (``{"predictions": [...]}`` or
        ``{"failed": reason}``). None when no batch is out (after a short sleep), none was answered in time, or the
        actor died: then every batch it held goes back to ``queue`` and a new actor takes its place."""
        ray = self.ray
        if not self.in_flight:
            time.sleep(0.05)
            return None
        done, _ = ray.wait(list(self.in_flight), num_returns=1, timeout=1.0)
        if not done:  # num_returns=1: one answer at most
            return None
        actor, ids = self.in_flight.pop(done[0])
        try:
            return ids, ray.get(done[0])
        except ray.exceptions.RayActorError:  # the worker died: its batches go to a new one
            queue.appendleft(ids)
            for other, (a, other_ids) in list(self.in_flight.items()):
                if a is actor:
                    queue.appendleft(other_ids)
                    del self.in_flight[other]
            self.prepared.discard(actor)
            self._replace_actor(actor)
            return None
        except ray.exceptions.RayTaskError as exc:
            raise _unwrap(exc) from None

    def usage(self) -> list[dict[str, Any]]:
        """The LLM usage ledger of every prepared actor."""
        return [self.ray.get(a.usage.remote()) for a in self.actors if a in self.prepared]

    def close(self) -> None:
        """Close every actor's model pool (30 s at most each) and end the actor; returns nothing."""
        for actor in self.actors:
            try:
                self.ray.get(actor.close.remote(), timeout=30)
            except Exception:  # noqa: BLE001 - closing must not mask the run's own error
                pass
            self.ray.kill(actor)

    def _replace_actor(self, actor: Any) -> None:
        """Put a new actor, preparing, in the place of ``actor``; returns nothing."""
        self.actors[self.actors.index(actor)] = _replace(
            self.actor_class, self.request, self.env, self.ready, self.info
        )


def _failed_batch(ids: list[str], reason: str, failures: dict[str, str], consecutive: int) -> int:
    """Record the samples of a batch whose model calls failed for good; returns the number of consecutive failed
    batches, this one included. ModelEndpointError at the fifth."""
    failures.update(dict.fromkeys(ids, reason))
    consecutive += 1
    if consecutive >= 5:
        raise ModelEndpointError(
            f"stopped after 5 consecutive failed batches ({reason})",
            "the other samples are saved; fix the endpoint and re-run the same command to resume",
        )
    return consecutive


def _journal_batch(journal: Journal, ids: list[str], answers: list[dict[str, Any]]) -> int:
    """Append a worker's predictions for the batch ``ids`` to the journal; returns how many. RunDirError when they
    are not for exactly the samples it was given."""
    predictions = [Prediction.model_validate(p) for p in answers]
    if sorted(p.sample_id for p in predictions) != sorted(ids):
        raise RunDirError(
            f"a worker returned predictions for other samples than it was given ({len(predictions)} for {len(ids)})"
        )
    journal.append(predictions)
    return len(predictions)


def _replace(
    actor_class: Any, request: RunRequest, env: dict[str, str], ready: dict[Any, Any], info: dict[str, Any]
) -> Any:
    actor = actor_class.remote(request, env)
    ready[actor] = actor.prepare.remote()
    info["replaced_workers"] += 1
    return actor


def _unwrap(exc: Any) -> BaseException:
    """The user-facing error a worker raised (a DdibenchError travels as the task error's cause)."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, BaseException) else exc


# -- shards ---------------------------------------------------------------------------------------


def parse_shard(text: str) -> tuple[int, int]:
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise ConfigError(
            f"--shard '{text}' is not I/N", "write e.g. --shard 2/8 (shard 2 of 8, counted from 1)"
        ) from None
    if n < 1 or not 1 <= i <= n:
        raise ConfigError(f"--shard {text}: shard must be between 1 and {max(n, 1)}", "write e.g. --shard 2/8")
    return i, n


def shard_dir(run_dir: Path, shard: tuple[int, int]) -> Path:
    return run_dir / "shards" / f"{shard[0]}-of-{shard[1]}"


def merge_shards(run_dir: Path) -> dict[str, Any]:
    """Append every shard's predictions and sessions to the run; returns counts (nothing is scored here)."""
    from ddibench.runner.records import read_identity
    from ddibench.runner.rundir import RunLock, append_session, read_sessions

    if not (run_dir / "run.json").exists():
        raise RunDirError(f"{run_dir} holds no run.json", "give the run directory the shards were run for")
    shards = (
        sorted(p for p in (run_dir / "shards").glob("*-of-*") if p.is_dir()) if (run_dir / "shards").is_dir() else []
    )
    if not shards:
        raise RunDirError(f"{run_dir} has no shards", "run 'ddibench run ... --shard I/N' for every shard first")
    identity = read_identity(run_dir / "run.json")
    with RunLock(run_dir):
        journal = Journal(run_dir / "journal.jsonl")
        done = journal.load()
        known_sessions = {s.session_id for s in read_sessions(run_dir) if s.session_id}
        added = 0
        for folder in shards:
            with RunLock(folder):
                predictions = Journal(folder / "journal.jsonl").load(repair=False)
                new = [p for sid, p in predictions.items() if sid not in done]
                journal.append(new)
                done.update({p.sample_id: p for p in new})
                added += len(new)
                for session in read_sessions(folder):
                    if session.session_id not in known_sessions:
                        append_session(run_dir, session)
                        known_sessions.add(session.session_id)
        journal.close()
    profile = next((s.profile for s in read_sessions(run_dir) if s.profile), "cpu")
    return {
        "shards": len(shards),
        "added": added,
        "journalled": len(done),
        "expected": identity.n_samples,
        "profile": profile,
    }


def run_shard(plan: RunPlan, shard: tuple[int, int], predict: Any) -> tuple[Path, int, int]:
    """Predict one shard's samples into its own directory; ``predict(journal_dir, pending, journal, resumed)``
    does the predicting. Returns the shard directory, how many were predicted now and how many before."""
    from ddibench.runner.rundir import RunLock, claim

    plan.run_dir.mkdir(parents=True, exist_ok=True)
    with RunLock(plan.run_dir):
        claim(plan.run_dir, plan.identity)
        merged = Journal(plan.run_dir / "journal.jsonl").load(repair=False)
    folder = shard_dir(plan.run_dir, shard)
    folder.mkdir(parents=True, exist_ok=True)
    with RunLock(folder):
        claim(folder, plan.identity)
        journal = Journal(folder / "journal.jsonl")
        done = journal.load()
        mine = run_samples(plan.task, plan.identity.selection.sharded(shard), plan.data)
        pending = [s for s in mine if s.id not in done and s.id not in merged]
        predicted = predict(folder, pending, journal, len(mine) - len(pending)) if pending else 0
    return folder, predicted, len(mine) - len(pending)
