"""The append-only per-sample journal of a run (``journal.jsonl``).

One JSON line per finished sample, written and flushed as soon as the sample is done, so a run killed
at any moment (even by SIGKILL) keeps every finished sample. Each line carries its prediction schema
version; journals written by earlier versions still read. A torn last line (a kill in the middle of
a write) is cut off when the journal is reopened; any other unreadable line is an error, never skipped.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TextIO

from ddibench.errors import RunDirError
from ddibench.schema import PREDICTION_SCHEMA_VERSION, READABLE_PREDICTION_VERSIONS, Prediction


class Journal:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh: TextIO | None = None

    def load(self, repair: bool = True) -> dict[str, Prediction]:
        """Predictions already journalled, by sample id (a later record of a sample wins)."""
        if not self.path.exists():
            return {}
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):
            cut = data.rfind(b"\n") + 1
            if repair:
                with open(self.path, "r+b") as fh:
                    fh.truncate(cut)
            data = data[:cut]
        out: dict[str, Prediction] = {}
        for lineno, line in enumerate(data.splitlines(), 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                if record.get("v") not in READABLE_PREDICTION_VERSIONS:
                    raise ValueError(f"schema version {record.get('v')}")
                pred = Prediction.model_validate(record["prediction"])
            except (ValueError, KeyError, TypeError) as exc:
                raise RunDirError(
                    f"{self.path}:{lineno} is not a readable journal record ({exc})",
                    "the journal was edited or written by another version; start a fresh run directory",
                ) from None
            out[pred.sample_id] = pred
        return out

    def append(self, predictions: Iterable[Prediction]) -> None:
        if self._fh is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = open(self.path, "a", encoding="utf-8")
        fh = self._fh
        now = round(time.time(), 3)
        lines = []
        for pred in predictions:
            record = {"v": PREDICTION_SCHEMA_VERSION, "t": now, "prediction": pred.model_dump(mode="json")}
            lines.append(json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n")
        fh.write("".join(lines))
        fh.flush()  # in the OS's hands now: survives the process being killed

    def sync(self) -> None:
        if self._fh is not None:
            self._fh.flush()
            os.fsync(self._fh.fileno())

    def close(self) -> None:
        if self._fh is not None:
            self.sync()
            self._fh.close()
            self._fh = None
