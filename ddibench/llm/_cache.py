"""A persistent LLM response cache (SQLite, safe across processes).

The key hashes everything that can change an answer: the model's identity (provider, base URL, model
name, weights hash or revision), the full messages, every generation parameter, how JSON output was
constrained, and the index of the sample when several stochastic samples are drawn. One model's answer
is never served for another.

Only usable completions are ever put here (see :func:`ddibench.llm.unusable_reason`). The database is
opened on first use, so a command that fails before its first call creates nothing; :meth:`check`
finds a damaged cache file, or a file standing where its directory belongs, before a run starts. A
cache that cannot be read or written is a one-line error naming the file and the fix.

Cost per call (the cache sits on every request's path):

* **keys are computed once**, from one serialisation of the messages that also becomes the request
  body (:class:`Encoded`); a system prompt shared by every call is encoded and hashed once per process
  (:func:`encode_messages` memoises it). The key is exactly :func:`cache_key` of the same inputs.
* **shared texts are stored once**: the content of a system message goes into the ``texts`` table
  under its sha256 and each row's stored request refers to it (``{"role": "system", "sha256": ...}``),
  so a 7 KB system prompt costs 7 KB once, not in every row.
* **writes leave the event loop**: :meth:`ResponseCache.put` queues the row; a writer thread commits
  the queue in one transaction every ``FLUSH_S`` seconds (or ``FLUSH_ROWS`` rows), and :meth:`flush`
  (called when a pool closes, and at exit) commits the rest. A queued answer is served by :meth:`get`
  before it is committed. A process killed before a flush loses at most the last fraction of a second
  of answers, which are asked again; the run's journal, not the cache, is what a resume trusts. A write
  that fails (a full disk) is raised by the next :meth:`put` or :meth:`flush`.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import sqlite3
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddibench.errors import StorageError
from ddibench.hashing import sha256_text, stable_json

FIX = "delete it (its answers will be asked again) or run with --no-cache"
WRITE_FIX = "free some space, or run with --no-cache"
FLUSH_S = 0.25  # queued rows are committed at least this often...
FLUSH_ROWS = 512  # ...or as soon as this many are queued
IDLE_S = 5.0  # a writer thread with nothing to write for this long ends (the next put starts one)
_MEMO_LIMIT = 64  # distinct shared texts kept encoded in memory (a run has a handful of system prompts)


def cache_key(
    identity: dict[str, Any], messages: list[dict[str, Any]], params: dict[str, Any], sample_index: int
) -> str:
    """The cache key: sha256 of the canonical JSON of the identity, the messages, the parameters and the sample index."""
    return sha256_text(
        stable_json({"model": identity, "messages": messages, "params": params, "sample_index": sample_index})
    )


@dataclass(frozen=True, slots=True)
class Encoded:
    """Messages serialised once: the canonical JSON (cache key and request body), the same with every
    shared text replaced by its sha256 (what a cache row stores), and those texts by hash. When the
    first message is a shared system prompt, ``head`` is the sha256 state after the key's text up to and
    including that message (computed once per process), and ``rest`` is the canonical text after it."""

    canonical: str
    stored: str
    texts: tuple[tuple[str, str], ...]
    head: Any = None
    rest: str = ""


_KEY_OPEN = '{"messages":['
_memo: dict[
    str, tuple[str, str, str, Any]
] = {}  # system prompt -> (canonical JSON, stored JSON, sha256, key head state)


def shared_text(content: str) -> tuple[str, str, str, Any]:
    """A system message's canonical JSON, its by-reference JSON, its sha256, and the sha256 state of a
    cache key's text that starts with it; computed once per process."""
    hit = _memo.get(content)
    if hit is None:
        digest = sha256_text(content)
        full = stable_json({"role": "system", "content": content})
        head = hashlib.sha256((_KEY_OPEN + full).encode("utf-8"))
        hit = (full, stable_json({"role": "system", "sha256": digest}), digest, head)
        if len(_memo) >= _MEMO_LIMIT:
            _memo.clear()
        _memo[content] = hit
    return hit


def encode_messages(messages: list[dict[str, Any]]) -> Encoded:
    """Serialise ``messages`` once; ``canonical`` equals ``stable_json(messages)`` exactly."""
    canonical: list[str] = []
    stored: list[str] = []
    texts: list[tuple[str, str]] = []
    head = None
    for i, message in enumerate(messages):
        content = message.get("content")
        if message.get("role") == "system" and isinstance(content, str):
            if len(message) == 2:
                full, ref, digest, state = shared_text(content)
                if i == 0:
                    head = state
            else:  # a system message with more fields (a name): not memoised
                digest = sha256_text(content)
                full = stable_json(message)
                ref = stable_json({**{k: v for k, v in message.items() if k != "content"}, "sha256": digest})
            canonical.append(full)
            stored.append(ref)
            texts.append((digest, content))
        else:
            text = stable_json(message)
            canonical.append(text)
            stored.append(text)
    text = "[" + ",".join(canonical) + "]"
    rest = text[1 + len(canonical[0]) :] if head is not None else ""
    return Encoded(text, "[" + ",".join(stored) + "]", tuple(texts), head, rest)


def key_of(identity_json: str, messages: Encoded, params_json: str, sample_index: int) -> str:
    """:func:`cache_key` from parts already in canonical JSON (the text stable_json would give, keys in
    sorted order: messages, model, params, sample_index), resuming the hash after a shared system prompt."""
    tail = f',"model":{identity_json},"params":{params_json},"sample_index":{int(sample_index)}}}'
    if messages.head is not None:
        digest = messages.head.copy()
        digest.update((messages.rest + tail).encode("utf-8"))
        return digest.hexdigest()
    return hashlib.sha256(('{"messages":' + messages.canonical + tail).encode("utf-8")).hexdigest()


class ResponseCache:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()  # guards the reader connection
        self._conn: sqlite3.Connection | None = None
        self._cond = threading.Condition()  # guards everything below
        self._queue: dict[str, tuple[float, str, str, str]] = {}  # key -> (created, model, request, response)
        self._texts: dict[str, str] = {}  # sha256 -> text, queued
        self._stored_texts: set[str] = set()  # hashes known to be in the database
        self._writer: threading.Thread | None = None
        self._inflight: dict[str, tuple[float, str, str, str]] = {}  # rows the writer is committing
        self._flush_now = False
        self._error: StorageError | None = None

    def check(self) -> None:
        """Refuse a cache that could not be used, without creating anything."""
        if self.path.exists():
            if not self.path.is_file():
                raise StorageError(f"LLM cache {self.path} is not a file", FIX)
            try:
                # immutable: no lock, no shared-memory index; checking the file leaves it exactly as it was
                with sqlite3.connect(f"file:{self.path}?mode=ro&immutable=1", uri=True) as conn:
                    conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
            except sqlite3.Error as exc:
                raise StorageError(f"LLM cache {self.path} is not a readable SQLite database ({exc})", FIX) from None
            return
        parent = self.path.parent
        while not parent.exists():
            parent = parent.parent
        if not parent.is_dir():
            raise StorageError(
                f"{parent} is in the way: the LLM cache needs a directory there",
                "remove the file, or point $DDIBENCH_CACHE elsewhere",
            )
        if not os.access(parent, os.W_OK):
            raise StorageError(
                f"cannot create the LLM cache under {parent}: not writable",
                "point $DDIBENCH_CACHE to a writable directory, or run with --no-cache",
            )

    def _open(self) -> sqlite3.Connection:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=60, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(
                "CREATE TABLE IF NOT EXISTS responses ("
                " key TEXT PRIMARY KEY, created REAL NOT NULL, model TEXT NOT NULL,"
                " request TEXT NOT NULL, response TEXT NOT NULL)"
            )
            # texts many requests share (system prompts), once each; a request refers to them by sha256
            conn.execute("CREATE TABLE IF NOT EXISTS texts (sha256 TEXT PRIMARY KEY, text TEXT NOT NULL)")
        except (sqlite3.Error, OSError) as exc:
            raise StorageError(f"cannot open the LLM cache {self.path} ({exc})", FIX) from None
        return conn

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            self._conn = self._open()
        return self._conn

    # -- reads ---------------------------------------------------------------------------------

    def get(self, key: str) -> dict[str, Any] | None:
        queued = self._queue.get(key) or self._inflight.get(key)  # answered, not yet committed
        if queued is not None:
            raw = queued[3]
        else:
            with self._lock:
                try:
                    row = self._connection().execute("SELECT response FROM responses WHERE key = ?", (key,)).fetchone()
                except sqlite3.Error as exc:
                    raise StorageError(f"cannot read the LLM cache {self.path} ({exc})", FIX) from None
            if not row:
                return None
            raw = row[0]
        try:
            hit = json.loads(raw)
        except ValueError:
            return None  # a damaged entry is asked again, and overwritten
        return hit if isinstance(hit, dict) else None

    def text(self, sha256: str) -> str | None:
        """A shared text a stored request refers to."""
        self.flush()
        with self._lock:
            row = self._connection().execute("SELECT text FROM texts WHERE sha256 = ?", (sha256,)).fetchone()
        return row[0] if row else None

    # -- writes --------------------------------------------------------------------------------

    def put(self, key: str, identity: dict[str, Any], request: dict[str, Any], response: dict[str, Any]) -> None:
        """Queue an answer (see :meth:`put_encoded`); ``request`` holds ``messages``, ``params``, ``sample_index``."""
        encoded = encode_messages(list(request.get("messages") or []))
        rest = {k: v for k, v in request.items() if k != "messages"}
        self.put_encoded(key, stable_json(identity), encoded, stable_json(rest), stable_json(response))

    def put_encoded(self, key: str, identity_json: str, messages: Encoded, rest_json: str, response_json: str) -> None:
        """Queue an answer whose parts are already canonical JSON; the writer thread commits it."""
        request = '{"messages":' + messages.stored + ("," + rest_json[1:] if rest_json != "{}" else "}")
        with self._cond:
            if self._error is not None:
                error, self._error = self._error, None
                raise error
            self._queue[key] = (time.time(), identity_json, request, response_json)
            for digest, text in messages.texts:
                if digest not in self._stored_texts:
                    self._texts[digest] = text
            if self._writer is None:
                self._writer = threading.Thread(target=self._write_loop, name="ddibench-llm-cache", daemon=True)
                self._writer.start()
                _open_caches.add(self)
            elif len(self._queue) >= FLUSH_ROWS:
                self._cond.notify_all()

    def _write_loop(self) -> None:
        """Commit the queue in one transaction whenever rows wait; end after ``IDLE_S`` seconds without any."""
        conn: sqlite3.Connection | None = None
        idle_since = time.monotonic()
        try:
            while True:
                with self._cond:
                    self._cond.wait_for(lambda: self._flush_now or len(self._queue) >= FLUSH_ROWS, timeout=FLUSH_S)
                    self._flush_now = False
                    if not self._queue:
                        if time.monotonic() - idle_since > IDLE_S:
                            return
                        continue
                    rows = self._inflight = self._queue  # still served by get() until committed
                    self._queue = {}
                    texts, self._texts = self._texts, {}
                error: StorageError | None = None
                try:
                    conn = conn or self._open()
                    conn.execute("BEGIN IMMEDIATE")
                    conn.executemany("INSERT OR IGNORE INTO texts (sha256, text) VALUES (?, ?)", texts.items())
                    _insert_rows(conn, rows)
                    conn.execute("COMMIT")
                except StorageError as exc:
                    error = exc
                except (sqlite3.Error, OSError) as exc:  # a full disk, most likely
                    try:
                        if conn is not None and conn.in_transaction:
                            conn.execute("ROLLBACK")
                    except sqlite3.Error:
                        pass
                    error = StorageError(f"cannot write the LLM cache {self.path} ({exc})", WRITE_FIX)
                with self._cond:
                    self._inflight = {}
                    if error is None:
                        self._stored_texts.update(texts)
                    else:
                        self._error = error
                    self._cond.notify_all()
                idle_since = time.monotonic()
        finally:
            with self._cond:
                if self._writer is threading.current_thread():
                    self._writer = None
                self._cond.notify_all()
            if conn is not None:
                conn.close()

    def flush(self) -> None:
        """Commit every queued answer now (raises the error of a write that failed)."""
        with self._cond:
            if self._writer is not None:
                self._flush_now = True
                self._cond.notify_all()
                self._cond.wait_for(
                    lambda: (not self._queue and not self._inflight) or self._error is not None or self._writer is None
                )
            if self._error is not None:
                error, self._error = self._error, None
                self._queue.clear()
                self._texts.clear()
                raise error

    def stats(self) -> dict[str, int]:
        self.flush()
        with self._lock:
            rows = self._connection().execute("SELECT model, COUNT(*) FROM responses GROUP BY model").fetchall()
        return {model: count for model, count in rows}

    def close(self) -> None:
        try:
            self.flush()
        finally:
            with self._lock:
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None


def _insert_rows(conn: sqlite3.Connection, rows: dict[str, tuple[float, str, str, str]]) -> None:
    """``INSERT OR REPLACE`` the rows, many per statement. ``executemany`` steps once per row, and the
    sqlite3 module lets go of the GIL around every step, so the writer and the event loop handed the GIL
    to and fro for every row: measured in ``benchmarks/runner_throughput.py``, the writes cost the process
    about 60 microseconds of CPU per row that way and about 20 now (SQLite's own work is about 5)."""
    per = max(1, min(_ROWS_PER_INSERT, conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) // 5))
    flat = [(key, *row) for key, row in rows.items()]
    for start in range(0, len(flat), per):
        chunk = flat[start : start + per]
        conn.execute(_INSERT_HEAD + ",".join(["(?,?,?,?,?)"] * len(chunk)), [value for row in chunk for value in row])


_INSERT_HEAD = "INSERT OR REPLACE INTO responses (key, created, model, request, response) VALUES "
_ROWS_PER_INSERT = 256

_open_caches: weakref.WeakSet[ResponseCache] = weakref.WeakSet()


@atexit.register
def _flush_at_exit() -> None:
    for cache in list(_open_caches):
        try:
            cache.flush()
        except StorageError:
            pass  # the command has ended; its own error (if any) was already shown
