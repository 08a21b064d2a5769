"""The append-only per-sample journal of a run (``journal.jsonl``).

One JSON line per finished sample, written and flushed as soon as the sample is done, so a run killed
at any moment (even by SIGKILL) keeps every finished sample. Each line carries its prediction schema
version; journals written by earlier versions still read. A torn last line (a kill in the middle of
a write) is cut off when the journal is reopened; any other unreadable line is an error, never skipped.
A write that fails part-way (a full disk) is cut back off at once and stops the run with a one-line
error: the journal never ends in a half-written line that a later run would silently drop.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from ddibench.errors import RunDirError, write_error
from ddibench.schema import PREDICTION_SCHEMA_VERSION, READABLE_PREDICTION_VERSIONS, Prediction


class _Record(BaseModel):
    """One journal line, parsed and validated in one step by pydantic (a third of the cost of json.loads
    and then validating the prediction: a resume of a 38,419-sample run reads every line)."""

    model_config = ConfigDict(extra="ignore")

    v: Any = None
    prediction: Prediction


class Journal:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self._size = 0  # the file's size after our last write (one writer: the run directory is locked)

    def load(self, repair: bool = True) -> dict[str, Prediction]:
        """Predictions already journalled, by sample id (a later record of a sample wins)."""
        if not self.path.exists():
            return {}
        try:
            data = self.path.read_bytes()
        except OSError as exc:
            raise RunDirError(
                f"cannot read {self.path}: {exc.strerror or exc}", "check the path and its permissions"
            ) from None
        if data and not data.endswith(b"\n"):
            cut = data.rfind(b"\n") + 1
            if repair:
                try:
                    with open(self.path, "r+b") as fh:
                        fh.truncate(cut)
                except OSError as exc:
                    raise write_error(exc, self.path) from None
                self._size = cut
            data = data[:cut]
        out: dict[str, Prediction] = {}
        for lineno, line in enumerate(data.splitlines(), 1):
            if not line.strip():
                continue
            try:
                fast = _Record.model_validate_json(line)
                if fast.v in READABLE_PREDICTION_VERSIONS:
                    out[fast.prediction.sample_id] = fast.prediction
                    continue
            except ValueError:
                pass  # read again below, where what is wrong with the line is named
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
        # {"v": version, "t": time, "prediction": {...}}, compact, UTF-8; the prediction serialised by pydantic
        # directly (a fifth of the cost of model_dump + json.dumps, on every sample's path)
        head = f'{{"v":{PREDICTION_SCHEMA_VERSION},"t":{round(time.time(), 3)!r},"prediction":'.encode()
        data = memoryview(b"".join(head + pred.model_dump_json().encode() + b"}\n" for pred in predictions))
        try:
            if self._fd is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                self._size = os.fstat(self._fd).st_size
        except OSError as exc:
            raise write_error(exc, self.path) from None
        size, total = self._size, len(data)
        try:
            while data:  # in the OS's hands once written: survives the process being killed
                data = data[os.write(self._fd, data) :]
            self._size = size + total
        except OSError as exc:
            try:
                os.ftruncate(self._fd, size)  # no torn line: the samples of this write are predicted again
            except OSError:
                pass
            raise write_error(
                exc, self.path, "free some space and re-run the same command; the samples journalled so far are kept"
            ) from None

    def sync(self) -> None:
        if self._fd is not None:
            try:
                os.fsync(self._fd)
            except OSError as exc:
                raise write_error(exc, self.path) from None

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                os.fsync(fd)
            except OSError as exc:
                raise write_error(exc, self.path) from None
            finally:
                os.close(fd)
