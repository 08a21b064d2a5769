"""The run directory: who may write it (a lock), whose it is (``run.json``), and how files are written.

Run directory (``<runs root>/<task>/<system>/<run id>/``; many runs share one root)::

    run.json         the run's identity: task + data hash, system + config hash, model identities,
                     split, seed, limit, the hash of the selected sample ids (written first)
    journal.jsonl    one prediction per finished sample (append-only, flushed per write)
    sessions.jsonl   one line per invocation: when, where, what it did, its LLM usage
    results.json     metrics with confidence intervals, cost, timing and the manifest (written last)
    scores/          what model-based scorers (the judge, SelfCheckGPT) recorded per sample
    texts/           long prompts shared by many samples, once each, named by their sha256
    llm-server.log   the embedded llama.cpp server's log, when one was used

The run id hashes the identity, so the same command finds the same directory and resumes it; a
directory that belongs to another run is refused. Whole files are written to a temporary name and
renamed into place, so a reader never sees half a file.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path
from typing import Any

from ddibench.errors import RunDirError
from ddibench.runner.records import RunIdentity, SessionRecord, parse_record, read_identity


class RunLock:
    """An exclusive lock on a run directory for the lifetime of one invocation."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / ".lock"
        self._fh: Any = None

    def __enter__(self) -> RunLock:
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


def write_json_atomic(path: Path, payload: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(payload, indent=2, ensure_ascii=False, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


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
    with open(run_dir / "sessions.jsonl", "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record.dump(), default=str) + "\n")


def read_sessions(run_dir: Path) -> list[SessionRecord]:
    path = run_dir / "sessions.jsonl"
    if not path.exists():
        return []
    out = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except ValueError:
            raise RunDirError(f"{path}:{lineno} is not JSON", "the file was edited; remove the line or start a fresh run directory") from None
        out.append(parse_record(SessionRecord, data, f"{path}:{lineno}"))
    return out
