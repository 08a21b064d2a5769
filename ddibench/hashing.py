"""Stable hashing of configurations and files (the ids every number is traced by)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


def stable_json(obj: Any) -> str:
    """Canonical JSON: sorted keys, no whitespace, UTF-8 kept; the same object gives the same text."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_default)


def _default(obj: Any) -> Any:
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"cannot hash object of type {type(obj).__name__}")


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def config_hash(obj: Any, length: int = 16) -> str:
    """Short hex digest of the canonical JSON of ``obj``."""
    return sha256_text(stable_json(obj))[:length]


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()
