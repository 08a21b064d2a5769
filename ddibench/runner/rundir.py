"""The run directory: who may write it (a lock), whose it is (``run.json``), and how files are written.

Run directory (``<runs root>/<task>/<system>/<run id>/``; many runs share one root)::

    run.json         the run's identity: task + data hash, system + config hash, model identities,
                     split, seed, limit, the hash of the selected sample ids (written first)
    journal.jsonl    one prediction per finished sample (append-only, flushed per write)
    sessions.jsonl   two lines per invocation: one when it starts, one when it ends (when, where, what it
                     did, its LLM usage); an invocation that was killed keeps only its first line
    results.json     metrics with confidence intervals, cost, timing and the manifest (written last)
    scores/          what model-based scorers (the judge, SelfCheckGPT) recorded per sample
    texts/           long prompts shared by many samples, once each, named by their sha256
    llm-server.log   the embedded llama.cpp server's log, when one was used

The run id hashes the identity, so the same command finds the same directory and resumes it; a
directory that belongs to another run is refused. Whole files are written to a temporary name and
renamed into place, so a reader never sees half a file; a write that fails (a full disk) removes its
temporary file and leaves the previous version in place.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
import re
from pathlib import Path
from typing import Any

from ddibench.errors import RunDirError, write_error
from ddibench.runner.records import RunIdentity, SessionRecord, parse_record, read_identity


class RunLock:
    """An exclusive lock on a run directory for the lifetime of one invocation."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / ".lock"
        self._fh: Any = None

    def __enter__(self) -> RunLock:
        try:
            self._fh = open(self.path, "a+")
        except OSError as exc:
            raise write_error(exc, self.path.parent) from None
        try:
            fcntl.flock(self._fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._fh.seek(0)
            holder = self._fh.read().strip() or "another process"
            self._fh.close()
            raise RunDirError(
                f"run directory {self.path.parent} is in use by {holder}",
                "wait for it to finish, or use another --run-dir",
            ) from None
        self._fh.seek(0)
        self._fh.truncate()
        self._fh.write(f"pid {os.getpid()}")
        self._fh.flush()
        return self

    def __exit__(self, *exc: object) -> None:
        try:  # an idle lock file is empty: a finished command leaves the directory as it found it
            self._fh.seek(0)
            self._fh.truncate()
            self._fh.flush()
        except OSError:
            pass
        fcntl.flock(self._fh, fcntl.LOCK_UN)
        self._fh.close()


def write_json_atomic(path: Path, payload: dict[str, Any]) -> None:
    write_bytes_atomic(path, (json.dumps(payload, indent=2, ensure_ascii=False, default=str) + "\n").encode("utf-8"))


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write a whole file under a temporary name, then rename it into place; on failure nothing changes."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise write_error(exc, path) from None


def claim(run_dir: Path, identity: RunIdentity) -> None:
    """Check that the run directory holds this run (or nothing) and record the run's identity."""
    run_file = run_dir / "run.json"
    if run_file.exists():
        stored = read_identity(run_file)
        if stored.run_id != identity.run_id:
            raise RunDirError(
                f"{run_dir} belongs to another run ({stored.mismatch(identity)})",
                "use another --run-dir, or omit --run-dir to get one directory per configuration",
            )
        return
    if any(p.name != ".lock" for p in run_dir.iterdir()):
        raise RunDirError(f"{run_dir} is not empty and holds no run.json", "use an empty or new --run-dir")
    write_json_atomic(run_file, identity.dump())


def append_session(run_dir: Path, record: SessionRecord) -> None:
    """Append one session line; a line a full disk cut short is removed again (see :func:`append_line`)."""
    append_line(run_dir / "sessions.jsonl", (json.dumps(record.dump(), default=str) + "\n").encode("utf-8"))


def append_line(path: Path, data: bytes) -> None:
    """Append whole lines to a file, or nothing: a write that fails part-way (a full disk) is cut back off,
    so the file never ends in a torn line; the error names the file and the fix."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        except OSError as exc:
            try:
                os.ftruncate(fd, size)
            except OSError:
                pass
            raise write_error(exc, path) from None
    finally:
        os.close(fd)


def load_finished(run_dir: Path) -> tuple[RunIdentity, Any, dict[str, Any]]:
    """A finished run's identity, results and journalled predictions (what report --against and --ceilings
    read); RunDirError when it has no results yet."""
    from ddibench.runner.journal import Journal
    from ddibench.runner.records import read_results

    if not (run_dir / "results.json").exists():
        raise RunDirError(f"{run_dir} holds no finished run", "finish it with 'ddibench run' first")
    ident = read_identity(run_dir / "run.json")
    results = read_results(run_dir / "results.json")
    journal = Journal(run_dir / "journal.jsonl")
    try:
        predictions = journal.load(repair=False)
    finally:
        journal.close()
    return ident, results, predictions


def read_sessions(run_dir: Path) -> list[SessionRecord]:
    """The run's sessions in order, one record each: a session's end line replaces its start line; a
    session that never wrote its end is ``killed``, its samples and time estimated from the journal."""
    path = run_dir / "sessions.jsonl"
    if not path.exists():
        return []
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise RunDirError(f"{path} is not UTF-8 text", "the file is damaged; start a fresh run directory") from None
    merged: dict[str, SessionRecord] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except ValueError:
            if lineno == len(text.splitlines()) and not text.endswith("\n"):
                continue  # a last line torn by a kill in the middle of a write
            raise RunDirError(
                f"{path}:{lineno} is not JSON", "the file was edited; remove the line or start a fresh run directory"
            ) from None
        record = parse_record(SessionRecord, data, f"{path}:{lineno}")
        merged[record.session_id or f"line {lineno}"] = record
    sessions = list(merged.values())
    if any(not s.ended for s in sessions):
        _estimate_killed(run_dir, sessions)
    return sessions


_T = re.compile(rb'"t":\s*([0-9.]+)')


def _estimate_killed(run_dir: Path, sessions: list[SessionRecord]) -> None:
    """Give each killed session the samples journalled while it ran and the time up to its last one."""
    journal = run_dir / "journal.jsonl"
    times = []
    if journal.exists():
        with open(journal, "rb") as fh:
            for line in fh:
                found = _T.search(line, 0, 64)
                if found:
                    times.append(float(found.group(1)))
    starts = [_timestamp(s.started) for s in sessions]
    for i, session in enumerate(sessions):
        if session.ended:
            continue
        start, end = starts[i], starts[i + 1] if i + 1 < len(starts) else float("inf")
        mine = [t for t in times if start <= t < end]
        session.state = "killed"
        session.predicted = len(mine)
        session.wall_s = round(max(mine) - start, 3) if mine else 0.0


def _timestamp(iso: str) -> float:
    try:
        return dt.datetime.fromisoformat(iso).timestamp()
    except ValueError:
        return 0.0
