"""A persistent LLM response cache (SQLite, safe across processes).

The key hashes everything that can change an answer: the model's identity (provider, base URL, model
name, weights hash or revision), the full messages, every generation parameter, how JSON output was
constrained, and the index of the sample when several stochastic samples are drawn. One model's answer
is never served for another.

Only usable completions are ever put here (see :func:`ddibench.llm.unusable_reason`). The database is
opened on first use, so a command that fails before its first call creates nothing; :meth:`check`
finds a damaged cache file, or a file standing where its directory belongs, before a run starts. A
cache that cannot be read or written is a one-line error naming the file and the fix.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from ddibench.errors import StorageError
from ddibench.hashing import sha256_text, stable_json

FIX = "delete it (its answers will be asked again) or run with --no-cache"


def cache_key(identity: dict[str, Any], messages: list[dict[str, Any]], params: dict[str, Any], sample_index: int) -> str:
    return sha256_text(
        stable_json({"model": identity, "messages": messages, "params": params, "sample_index": sample_index})
    )


class ResponseCache:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None

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
            raise StorageError(f"{parent} is in the way: the LLM cache needs a directory there", "remove the file, or point $DDIBENCH_CACHE elsewhere")
        if not os.access(parent, os.W_OK):
            raise StorageError(f"cannot create the LLM cache under {parent}: not writable", "point $DDIBENCH_CACHE to a writable directory, or run with --no-cache")

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
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
            except (sqlite3.Error, OSError) as exc:
                raise StorageError(f"cannot open the LLM cache {self.path} ({exc})", FIX) from None
            self._conn = conn
        return self._conn

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            try:
                row = self._connection().execute("SELECT response FROM responses WHERE key = ?", (key,)).fetchone()
            except sqlite3.Error as exc:
                raise StorageError(f"cannot read the LLM cache {self.path} ({exc})", FIX) from None
        if not row:
            return None
        try:
            hit = json.loads(row[0])
        except ValueError:
            return None  # a damaged entry is asked again, and overwritten
        return hit if isinstance(hit, dict) else None

    def put(self, key: str, identity: dict[str, Any], request: dict[str, Any], response: dict[str, Any]) -> None:
        with self._lock:
            try:
                self._connection().execute(
                    "INSERT OR REPLACE INTO responses (key, created, model, request, response) VALUES (?, ?, ?, ?, ?)",
                    (key, time.time(), stable_json(identity), stable_json(request), stable_json(response)),
                )
            except sqlite3.Error as exc:  # a full disk, most likely
                raise StorageError(f"cannot write the LLM cache {self.path} ({exc})", "free some space, or run with --no-cache") from None

    def stats(self) -> dict[str, int]:
        with self._lock:
            rows = self._connection().execute("SELECT model, COUNT(*) FROM responses GROUP BY model").fetchall()
        return {model: count for model, count in rows}

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
