"""Model answers as a file: export rows of the response cache, and import such a file into another machine's cache.

A file is gzip-compressed JSON lines: a header line ``{"ddibench_responses": 1, "rows": N}``, then one row a line,
``{"key", "model", "request", "response"}`` sorted by key, every shared text written out in full, so a file is
readable on its own and the same rows always give the same bytes. ``model`` is the model's identity as the cache
key hashes it (provider, endpoint, name, weights hash, engine), ``request`` the messages, generation parameters and
sample index.

Importing trusts nothing in the file but the answers themselves: every row's key is computed again from its model,
messages and parameters (a row is served only for exactly the request it states, by exactly the model it names),
every answer must be one the cache would keep (:func:`ddibench.llm._completion._usable_cached`), and one bad row
refuses the whole file before anything is written. Rows already in the cache are kept as they are; the rest go in
one transaction, so an import is either whole or absent. What an imported answer says is the file's word that the
named model wrote it: import only files whose source you trust (a run's records count such answers as cached).
"""

from __future__ import annotations

import gzip
import json
import os
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddibench.errors import ConfigError, DataError, StorageError
from ddibench.hashing import stable_json
from ddibench.llm._cache import FIX, ResponseCache, cache_key, encode_messages
from ddibench.llm._completion import _usable_cached

FORMAT = "ddibench_responses"
VERSION = 1
MAX_LINE = 1 << 20  # one row a line; no answer this project asks for comes near a megabyte
_ROW_KEYS = {"key", "model", "request", "response"}
_REQUEST_KEYS = {"messages", "params", "sample_index"}
Row = tuple[str, dict[str, Any], dict[str, Any], dict[str, Any]]  # key, model identity, request, answer


@dataclass(frozen=True)
class Imported:
    rows: int  # rows in the file
    added: int  # rows the cache did not hold
    models: tuple[str, ...]  # the models the rows name (identity "model" fields), sorted


def _connect_read(path: Path) -> sqlite3.Connection:
    if not path.is_file():
        raise StorageError(
            f"there is no response cache at {path}", "run something with an LLM first, or set $DDIBENCH_CACHE"
        )
    try:
        return sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise StorageError(f"cannot read the LLM cache {path} ({exc})", FIX) from None


def _full_messages(messages: list[dict[str, Any]], texts: dict[str, str]) -> list[dict[str, Any]]:
    """A stored request's messages with every shared text (a system prompt stored by reference) written out."""
    out = []
    for message in messages:
        if message.get("role") == "system" and "sha256" in message and "content" not in message:
            text = texts.get(message["sha256"])
            if text is None:
                raise StorageError(f"the LLM cache lacks the shared text {message['sha256'][:12]}", FIX)
            message = {**{k: v for k, v in message.items() if k != "sha256"}, "content": text}
        out.append(message)
    return out


def export_responses(cache_path: Path, out: Path, model: str | None = None) -> int:
    """Write the cache's rows (those of ``model``, matched against the identity's model name, when given) to ``out``;
    the number written. The file appears whole or not at all."""
    conn = _connect_read(cache_path)
    try:
        texts = dict(conn.execute("SELECT sha256, text FROM texts"))
        rows = []
        for key, identity, request, response in conn.execute(
            "SELECT key, model, request, response FROM responses ORDER BY key"
        ):
            ident = json.loads(identity)
            if model is not None and ident.get("model") != model:
                continue
            stored = json.loads(request)
            stored["messages"] = _full_messages(stored.get("messages") or [], texts)
            rows.append(stable_json({"key": key, "model": ident, "request": stored, "response": json.loads(response)}))
    except (sqlite3.Error, ValueError) as exc:
        raise StorageError(f"cannot read the LLM cache {cache_path} ({exc})", FIX) from None
    finally:
        conn.close()
    if not rows:
        names = f" of model '{model}'" if model else ""
        raise ConfigError(
            f"the LLM cache {cache_path} holds no answers{names}", "check --model against 'ddibench cache list'"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    header = stable_json({FORMAT: VERSION, "rows": len(rows)})
    with open(partial, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as gz:
        gz.write(("\n".join([header, *rows]) + "\n").encode("utf-8"))
    os.replace(partial, out)
    return len(rows)


def list_models(cache_path: Path) -> dict[str, int]:
    """The cache's answers counted by model name (the identity's ``model`` field)."""
    conn = _connect_read(cache_path)
    try:
        counts: dict[str, int] = {}
        for (identity,) in conn.execute("SELECT model FROM responses"):
            name = str(json.loads(identity).get("model", "?"))
            counts[name] = counts.get(name, 0) + 1
        return dict(sorted(counts.items()))
    except (sqlite3.Error, ValueError) as exc:
        raise StorageError(f"cannot read the LLM cache {cache_path} ({exc})", FIX) from None
    finally:
        conn.close()


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    try:
        with open(path, "rb") as raw:
            gzipped = raw.read(2) == b"\x1f\x8b"
        stream = gzip.open(path, "rb") if gzipped else open(path, "rb")
        with stream:
            for number, line in enumerate(stream, 1):
                if len(line) > MAX_LINE:
                    raise DataError(f"{path}: line {number} is over {MAX_LINE:,} bytes", "this is not a responses file")
                yield number, line.decode("utf-8")
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise DataError(f"cannot read {path} ({exc})", "give a file written by 'ddibench cache export'") from None


def _row(path: Path, number: int, line: str) -> Row:
    """One row, checked: its fields, its answer, and its key computed again from what it states."""

    def bad(what: str) -> DataError:
        return DataError(f"{path}: line {number} {what}", "nothing was imported; export the file again")

    try:
        row = json.loads(line)
    except ValueError:
        raise bad("is not JSON") from None
    if not isinstance(row, dict) or set(row) != _ROW_KEYS:
        raise bad(f"is not a row (fields {', '.join(sorted(_ROW_KEYS))})")
    key, identity, request, response = row["key"], row["model"], row["request"], row["response"]
    if not (isinstance(identity, dict) and isinstance(request, dict) and set(request) == _REQUEST_KEYS):
        raise bad("has no model identity or request (messages, params, sample_index)")
    messages = request["messages"]
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise bad("has no messages")
    if not isinstance(response, dict) or not _usable_cached(response):
        raise bad("holds no usable answer")
    if key != cache_key(identity, messages, request["params"], request["sample_index"]):
        raise bad("has a key that is not the hash of its model and request")
    return key, identity, request, response


def read_responses(path: Path) -> list[Row]:
    """Every row of a responses file, each checked (:func:`_row`); a one-line :class:`DataError` for the first problem."""
    lines = _lines(path)
    first = next(lines, None)
    try:
        header = json.loads(first[1]) if first else None
    except ValueError:
        header = None
    if not isinstance(header, dict) or header.get(FORMAT) != VERSION or not isinstance(header.get("rows"), int):
        raise DataError(
            f"{path} is not a responses file of version {VERSION}", "give a file written by 'ddibench cache export'"
        )
    rows = [_row(path, number, line) for number, line in lines if line.strip()]
    if len(rows) != header["rows"]:
        raise DataError(
            f"{path} holds {len(rows)} rows, its header says {header['rows']}", "the file is cut short; copy it again"
        )
    if len({key for key, *_ in rows}) != len(rows):
        raise DataError(f"{path} holds a row twice", "nothing was imported; export the file again")
    return rows


def file_model(rows: list[Row]) -> str:
    """The model of a file whose rows are all one model's, as ``provider:name`` ('' when they are not)."""
    names = {f"{identity.get('provider')}:{identity.get('model')}" for _, identity, _, _ in rows}
    return names.pop() if len(names) == 1 else ""


def import_responses(cache: ResponseCache, path: Path) -> Imported:
    """Add the rows of ``path`` that ``cache`` does not hold, all in one transaction, after checking every row."""
    rows = read_responses(path)
    cache.flush()
    conn = cache._connection()
    try:
        added = 0
        now = time.time()
        conn.execute("BEGIN IMMEDIATE")
        for key, identity, request, response in rows:
            encoded = encode_messages(request["messages"])
            rest = {k: v for k, v in request.items() if k != "messages"}
            stored = '{"messages":' + encoded.stored + "," + stable_json(rest)[1:]
            conn.executemany("INSERT OR IGNORE INTO texts (sha256, text) VALUES (?, ?)", encoded.texts)
            added += conn.execute(  # a row the cache holds is kept as it is (rowcount 0)
                "INSERT OR IGNORE INTO responses (key, created, model, request, response) VALUES (?, ?, ?, ?, ?)",
                (key, now, stable_json(identity), stored, stable_json(response)),
            ).rowcount
        conn.execute("COMMIT")
    except (sqlite3.Error, OSError) as exc:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise StorageError(
            f"cannot write the LLM cache {cache.path} ({exc})", "nothing was imported; free some space"
        ) from None
    models = tuple(sorted({str(identity.get("model", "?")) for _, identity, _, _ in rows}))
    return Imported(rows=len(rows), added=added, models=models)
