"""Each bundle is verified in a child process with CPU-time and memory limits.

A bundle is hostile input until verified. :mod:`ddibench.submission.archive` refuses what it can name; this is the
backstop for what nobody named (a bug, a parser further down that a crafted member sends astray): the
check runs in a child Python process under ``RLIMIT_CPU`` (and a loose ``RLIMIT_AS``), its resident
memory watched by the parent, with a wall-clock limit on top, so a bundle that spins, swells or
crashes ends its own check, is reported as one line, and the batch goes on. The limits are generous
for real bundles: the biggest that reads (predictions are capped at 64 MiB; a non-compact drugbank_s0
run, 92 MB of predictions, is refused and packed with ``submit --compact``) took 12 s of CPU and 0.7 GB of
memory in ``verify`` before those caps; the slowest, a captioning run on SIDER (its probe embeds
and learns from every caption again), 105 s of CPU on one core. On a loaded machine that CPU time grows
(threads of the probe's libraries spin while they wait for a core): a limit close to it refused that real
bundle once.

The child is a fresh interpreter (``python -m ddibench.submission.sandbox``), not a fork: a fork of a process
that runs threads (DuckDB's, a thread pool of torch or of the tests' own tools) can hang in the child
on a lock some thread held at the fork, which a board batch saw as a small bundle "taking 300 s". A
fresh interpreter costs about 0.6 s of imports per bundle. It inherits the environment, the working
directory and this process's import path, so it sees the same tasks, systems, mirror and caches.

The verdict comes back pickled through a temporary file written by the child (the parent reads only what
its own code wrote). The task's samples do not pickle and are selected again here, from the task's data
(which the parent loads from its cache); a verdict whose predictions the caller does not need
(``ddibench verify`` without ``--add`` or ``--reproduce``) comes back without them.
"""

from __future__ import annotations

import importlib
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ddibench.errors import DataError

CPU_LIMIT_S = 600  # about 6x the CPU time of the slowest real bundle (caption_sider: 105 s)
MEMORY_LIMIT = 4 * 2**30  # resident memory of the child (bundles within the archive's caps peak under 0.3 GB)
ADDRESS_SPACE = (
    4  # RLIMIT_AS as a multiple of MEMORY_LIMIT: virtual reservations (thread stacks, arenas) are not memory
)
WALL_LIMIT_S = 900  # a child that neither spins nor returns (blocked) is stopped too
CHECK = "ddibench.submission:verify"  # what the child runs: module:function(path, keep_traces=...)


def verify_isolated(
    path: Path,
    keep_traces: bool = False,
    predictions: bool = True,
    check: str | None = None,
    stop: threading.Event | None = None,
) -> Any:
    """:func:`ddibench.submission.verify` of ``path`` in a child process; returns its :class:`Verdict`.
    Raises :class:`DataError` (one line) for a bundle that is refused, or whose check ran out of time or
    memory or ended without a verdict. ``predictions=False`` leaves the predictions and traces out; ``stop``, once
    set, kills the child and raises :class:`DataError` (a batch interrupted while checks run in threads)."""
    verdict, had_samples = verdict_in_child(path, keep_traces, predictions, check, stop)
    if had_samples:
        restore_samples(verdict)
    return verdict


def verdict_in_child(
    path: Path,
    keep_traces: bool = False,
    predictions: bool = True,
    check: str | None = None,
    stop: threading.Event | None = None,
) -> tuple[Any, bool]:
    """The child's part of :func:`verify_isolated`, safe to run in a thread: the verdict without its samples, and
    whether it had any (then :func:`restore_samples` selects them again, in the thread that loads tasks).
    ``check`` is what the child runs (default :data:`CHECK`)."""
    fd, name = tempfile.mkstemp(prefix="ddibench-verdict-", suffix=".pickle")
    os.close(fd)
    out = Path(name)
    try:
        argv = [
            sys.executable,
            "-m",
            "ddibench.submission.sandbox",
            str(path),
            str(out),
            check or CHECK,
            str(int(keep_traces)),
            str(int(predictions)),
            str(CPU_LIMIT_S),
            str(MEMORY_LIMIT),
        ]
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(sys.path),
        }  # the packages (and their entry points) this process sees
        child = subprocess.Popen(
            argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        status, rusage, peak = _wait(child, stop)
        kind, value, had_samples = _result(path, out, status, rusage, peak)
    finally:
        out.unlink(missing_ok=True)
    if kind != "verdict":
        raise DataError(value)
    return value, had_samples


def _wait(child: subprocess.Popen[bytes], stop: threading.Event | None = None) -> tuple[int, Any, int]:
    """The child's wait status (-1: stopped at the wall limit, -2: over the memory limit, -3: ``stop`` was set),
    its resource use, and the peak resident memory seen; the child is killed at either limit and on ``stop``."""
    deadline = time.monotonic() + WALL_LIMIT_S
    pause, peak, verdict = 0.002, 0, 0
    try:
        while True:
            done, status, rusage = os.wait4(child.pid, os.WNOHANG)
            if done:
                child.returncode = os.waitstatus_to_exitcode(status)
                return (verdict or status), rusage, peak
            peak = max(peak, _resident(child.pid))
            if peak > MEMORY_LIMIT:
                verdict = -2
            elif time.monotonic() > deadline:
                verdict = -1
            elif stop is not None and stop.is_set():
                verdict = -3
            if verdict:
                child.kill()
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
    except BaseException:  # Ctrl-C in the parent: the child goes with it
        child.kill()
        child.wait()
        raise


def _resident(pid: int) -> int:
    """The resident memory of ``pid`` in bytes, from /proc; 0 where there is none."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _result(path: Path, out: Path, status: int, rusage: Any, peak: int) -> tuple[str, Any, bool]:
    """("verdict", Verdict, whether it had samples) or ("problem", one line, False)."""
    peak_mb = max(peak, rusage.ru_maxrss * 1024) // 2**20
    if status == -3:
        return "problem", f"{path}: its check was stopped before it ended", False
    if status == -1:
        return (
            "problem",
            f"{path}: its check took longer than {WALL_LIMIT_S} s and was stopped; the bundle is refused",
            False,
        )
    if status == -2:
        return (
            "problem",
            f"{path} needs more than {MEMORY_LIMIT / 2**30:g} GiB of memory to verify; it is refused",
            False,
        )
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig == signal.SIGXCPU or (
            sig == signal.SIGKILL and rusage.ru_utime + rusage.ru_stime >= CPU_LIMIT_S
        ):  # the soft, then the hard limit
            return (
                "problem",
                f"{path}: its check used more than {CPU_LIMIT_S} s of CPU and was stopped; the bundle is refused",
                False,
            )
        return (
            "problem",
            f"{path}: its check ended by signal {signal.Signals(sig).name} (peak memory {peak_mb} MB); the bundle is refused",
            False,
        )
    if os.WEXITSTATUS(status) != 0 or out.stat().st_size == 0:
        return (
            "problem",
            f"{path}: its check ended without a verdict (peak memory {peak_mb} MB); the bundle is refused",
            False,
        )
    with open(out, "rb") as fh:
        kind, value, had_samples = pickle.load(fh)  # written by our own child, from a Verdict or a string
    return kind, value, had_samples


def restore_samples(verdict: Any) -> None:
    """The samples a verdict was checked on, selected again here (as verify selects them)."""
    if verdict.run is None:
        return
    from ddibench.registry import get_task
    from ddibench.runner.selection import run_samples

    run = verdict.run
    task = get_task(run.task.name)
    verdict.samples = run_samples(task, run.selection)


# -- the child ------------------------------------------------------------------------------------


def _child(argv: list[str]) -> int:
    import resource

    path, out, check, keep_traces, predictions, cpu, memory = argv
    resource.setrlimit(resource.RLIMIT_CPU, (int(cpu), int(cpu) + 5))
    limit = ADDRESS_SPACE * int(memory)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    module, _, function = check.partition(":")
    verify: Callable[..., Any] = getattr(importlib.import_module(module), function)
    payload = _verdict_or_problem(verify, Path(path), keep_traces == "1", predictions == "1", int(memory))
    with open(out, "wb") as fh:
        pickle.dump(payload, fh, protocol=pickle.HIGHEST_PROTOCOL)
    return 0


def _verdict_or_problem(
    verify: Callable[..., Any], path: Path, keep_traces: bool, predictions: bool, memory: int
) -> tuple[str, Any, bool]:
    from ddibench.errors import DdibenchError

    try:
        verdict = verify(path, keep_traces=keep_traces)
    except DdibenchError as exc:
        return "problem", str(exc), False
    except MemoryError:
        return "problem", f"{path} needs more than {memory / 2**30:g} GiB of memory to verify; it is refused", False
    except RecursionError:
        return "problem", f"{path} is nested too deeply to verify; it is refused", False
    except Exception as exc:  # noqa: BLE001 - a hostile bundle that finds a bug must not stop the batch
        text = str(exc).splitlines()[0][:300] if str(exc) else ""
        return (
            "problem",
            f"{path} could not be verified ({type(exc).__name__}: {text}); this is a bug in ddibench, please report it",
            False,
        )
    had_samples = bool(verdict.samples)  # selected again by the parent: samples do not pickle
    verdict.samples = []
    if not predictions:
        verdict.predictions, verdict.traces = {}, {}
    return "verdict", verdict, had_samples


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1:]))
