"""A content-addressed store for what systems build in ``prepare`` (trained models, indexes).

An artifact lives in ``<cache>/artifacts/<kind>/<key hash>/`` together with ``key.json``, the full key
it was built for (system, version, configuration, task data hash, code version). It is built in a
temporary directory and renamed into place only when complete, under a lock, so concurrent or
interrupted builds never leave a half-written artifact, and a second run finds it and builds nothing.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ddibench.errors import DataError
from ddibench.hashing import config_hash, stable_json


class ArtifactStore:
    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, kind: str, key: dict[str, Any]) -> Path:
        """Where the artifact of ``kind`` built for ``key`` lives (whether or not it exists yet)."""
        return self.root / kind / config_hash(key, 24)

    def get(self, kind: str, key: dict[str, Any]) -> Path | None:
        """The artifact's directory if it was built for exactly ``key``, else None."""
        path = self.path(kind, key)
        key_file = path / "key.json"
        if not key_file.is_file():
            return None
        stored = json.loads(key_file.read_text(encoding="utf-8"))
        if stable_json(stored) != stable_json(key):
            raise DataError(
                f"artifact {path} was built for another configuration (hash collision or edited key.json)",
                f"delete {path} and run again",
            )
        return path

    def get_or_build(self, kind: str, key: dict[str, Any], build: Callable[[Path], None]) -> tuple[Path, bool]:
        """The artifact's directory, building it with ``build(tmpdir)`` if absent; and whether it was built."""
        found = self.get(kind, key)
        if found is not None:
            return found, False
        final = self.path(kind, key)
        final.parent.mkdir(parents=True, exist_ok=True)
        with open(final.parent / f".{final.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            found = self.get(kind, key)  # built by another process while we waited
            if found is not None:
                return found, False
            tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
            try:
                build(tmp)
                (tmp / "key.json").write_text(stable_json(key), encoding="utf-8")
                os.replace(tmp, final)
            finally:
                if tmp.exists():
                    shutil.rmtree(tmp, ignore_errors=True)
        return final, True

    def put(self, kind: str, key: dict[str, Any], built: Path) -> Path:
        """Move a directory built elsewhere (by async code) into place as the artifact for ``key``.

        ``built`` must be on the same file system (use :meth:`scratch`). If another process stored the
        artifact meanwhile, that one is kept and ``built`` is discarded.
        """
        final = self.path(kind, key)
        with open(final.parent / f".{final.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if self.get(kind, key) is not None:
                shutil.rmtree(built, ignore_errors=True)
                return final
            (built / "key.json").write_text(stable_json(key), encoding="utf-8")
            os.replace(built, final)
        return final

    def scratch(self, kind: str, key: dict[str, Any]) -> Path:
        """An empty temporary directory beside where the artifact will go."""
        final = self.path(kind, key)
        final.parent.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
