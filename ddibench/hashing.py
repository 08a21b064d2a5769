"""Stable hashing of configurations and files (the ids every number is traced by)."""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Any

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


def keep_text(folder: Path, text: str, digest: str | None = None) -> str:
    """Keep ``text`` once as ``<folder>/texts/<sha256>.txt`` (written whole or not at all) and return its sha256:
    a long text shared by many samples, such as a system prompt, that traces refer to by hash.

    Several writers (threads, Ray workers) may keep the same new text at once: each writes its own temporary
    file and renames it into place, and the last rename wins with the same bytes."""
    digest = digest or sha256_text(text)
    path = folder / "texts" / f"{digest}.txt"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    return digest


def stable_json(obj: Any) -> str:
    """Canonical JSON: sorted keys, no whitespace, UTF-8 kept; the same object gives the same text."""
    return _ENCODER.encode(obj)


def _default(obj: Any) -> Any:
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"cannot hash object of type {type(obj).__name__}")


# what json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_default) builds on
# every call, built once (the encoder keeps no state between calls); building it was half the cost of hashing
# a task's sample ids
_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_default)

_LONG = 1024  # texts at least this long are hashed once per process (a system prompt is hashed on every call)
_MEMO_SIZE = 64
_memo: dict[str, str] = {}


def sha256_text(text: str) -> str:
    """Hex sha256 of ``text`` in UTF-8. Long texts are remembered (a few dozen), because the same
    system prompt is hashed for every call that sends it: traces, the run's texts and the cache."""
    if len(text) < _LONG:
        return hashlib.sha256(text.encode("utf-8")).hexdigest()
    digest = _memo.get(text)
    if digest is None:
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
        if len(_memo) >= _MEMO_SIZE:
            _memo.clear()
        _memo[text] = digest
    return digest


def config_hash(obj: Any, length: int = 16) -> str:
    """Short hex digest of the canonical JSON of ``obj``."""
    return sha256_text(stable_json(obj))[:length]


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()
