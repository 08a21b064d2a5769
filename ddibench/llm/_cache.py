"""A persistent LLM response cache (SQLite, safe across processes).

The key hashes everything that can change an answer: the model's identity (provider, base URL, model
name, weights hash or revision), the full messages, every generation parameter, how JSON output was
constrained, and the index of the sample when several stochastic samples are drawn. One model's answer
is never served for another.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from ddibench.hashing import sha256_text, stable_json


def cache_key(identity: dict[str, Any], messages: list[dict[str, Any]], params: dict[str, Any], sample_index: int) -> str:
    return sha256_text(
        stable_json({"model": identity, "messages": messages, "params": params, "sample_index": sample_index})
    )


class ResponseCache:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(path, timeout=60, isolation_level=None, check_same_thread=False)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.execute(
            "CREATE TABLE IF NOT EXISTS responses ("
            " key TEXT PRIMARY KEY, created REAL NOT NULL, model TEXT NOT NULL,"
            " request TEXT NOT NULL, response TEXT NOT NULL)"
        )

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._conn.execute("SELECT response FROM responses WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def put(self, key: str, identity: dict[str, Any], request: dict[str, Any], response: dict[str, Any]) -> None:
        with self._lock:
            self._conn.execute(
                "INSERT OR REPLACE INTO responses (key, created, model, request, response) VALUES (?, ?, ?, ?, ?)",
                (key, time.time(), stable_json(identity), stable_json(request), stable_json(response)),
            )

    def stats(self) -> dict[str, int]:
        with self._lock:
            rows = self._conn.execute("SELECT model, COUNT(*) FROM responses GROUP BY model").fetchall()
        return {model: count for model, count in rows}

    def close(self) -> None:
        with self._lock:
            self._conn.close()
