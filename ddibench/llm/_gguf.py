"""The metadata of a GGUF file: what a weights file says it is, read before a server is started on it.

A GGUF file starts with ``GGUF``, a version, the tensor and key counts, then typed key-value pairs
(``general.architecture``, ``general.name``, ``tokenizer.chat_template``, ...) before the tensors. A pinned
model is checked against the keys it must carry, so a file with the right bytes but the wrong
expectations (or a renamed file of another model) is refused with a line that says which key differs;
any other path given as ``embedded:PATH`` is checked to be a GGUF file at all.

Hand-written rather than taken from the ``gguf`` package (llama.cpp's own reader): that package maps and
parses every tensor's description with numpy, where this needs a few strings from the header, stops
reading once it has them, and bounds every length it reads, so a damaged file costs milliseconds and
a clear error rather than memory.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from pathlib import Path
from typing import Any, BinaryIO

from ddibench.errors import DataError

MAGIC = b"GGUF"
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
_MAX_KEYS = 100_000  # real files hold tens of keys; a count beyond this is damage
_MAX_STRING = 1 << 24  # 16 MiB: chat templates are kilobytes, vocabularies are arrays of short strings
_MAX_ARRAY = 1 << 24


class _Reader:
    def __init__(self, fh: BinaryIO, path: Path) -> None:
        self.fh = fh
        self.path = path

    def take(self, n: int) -> bytes:
        data = self.fh.read(n)
        if len(data) != n:
            raise DataError(f"{self.path} is cut short inside its GGUF header", "fetch the model file again")
        return data

    def scalar(self, fmt: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        n = self.scalar("<Q")
        if n > _MAX_STRING:
            raise DataError(f"{self.path} has a GGUF string of {n} bytes", "the file is damaged; fetch it again")
        return self.take(n).decode("utf-8", "replace")

    def value(self, kind: int) -> Any:
        if kind in _SCALARS:
            return self.scalar(_SCALARS[kind])
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            item, count = self.scalar("<I"), self.scalar("<Q")
            if count > _MAX_ARRAY or (item not in _SCALARS and item != _STRING):
                raise DataError(
                    f"{self.path} has a GGUF array of {count} items of type {item}",
                    "the file is damaged; fetch it again",
                )
            if item == _STRING:
                for _ in range(count):  # skipped, never kept: a vocabulary is 150,000 strings
                    self.fh.seek(self.scalar("<Q"), 1)
            else:
                self.fh.seek(count * struct.calcsize(_SCALARS[item]), 1)
            return {"array_of": count}
        raise DataError(
            f"{self.path} has a GGUF value of unknown type {kind}", "the file is damaged or of a newer GGUF version"
        )


def read_metadata(path: Path, want: Iterable[str] | None = None) -> dict[str, Any]:
    """The header's key-value pairs (arrays as ``{"array_of": n}``), with ``gguf.version`` and the tensor
    count added; with ``want``, reading stops once all those keys are found."""
    wanted = set(want) if want is not None else None
    try:
        with open(path, "rb") as fh:
            head = fh.read(4)
            if head != MAGIC:
                raise DataError(
                    f"{path} is not a GGUF file (it starts with {head!r}, not b'GGUF')",
                    "give the path of a .gguf model file",
                )
            reader = _Reader(fh, path)
            version = reader.scalar("<I")
            if version not in (2, 3):
                raise DataError(
                    f"{path} is GGUF version {version}; this reader knows versions 2 and 3",
                    "convert the model with a current llama.cpp",
                )
            tensors, n_keys = reader.scalar("<Q"), reader.scalar("<Q")
            if n_keys > _MAX_KEYS:
                raise DataError(f"{path} claims {n_keys} GGUF metadata keys", "the file is damaged; fetch it again")
            meta: dict[str, Any] = {"gguf.version": version, "gguf.tensor_count": tensors}
            for _ in range(n_keys):
                key = reader.string()
                meta[key] = reader.value(reader.scalar("<I"))
                if wanted is not None and wanted <= meta.keys():
                    break
            return meta
    except OSError as exc:
        raise DataError(f"cannot read {path}: {exc.strerror or exc}", "check the path and its permissions") from None


def check_metadata(path: Path, expected: dict[str, Any]) -> dict[str, Any]:
    """Refuse a file whose header lacks a key of ``expected`` or holds another value; returns the metadata read."""
    meta = read_metadata(path, expected)
    for key, value in expected.items():
        if meta.get(key) != value:
            found = "no such key" if key not in meta else repr(meta[key])
            raise DataError(
                f"{path}: GGUF key {key} is {found}, expected {value!r}",
                "the file is not the pinned model; delete it and fetch it again",
            )
    return meta
