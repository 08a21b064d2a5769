"""The registry of pinned source files (``sources.toml``).

A :class:`SourceFile` is one upstream file pinned by repository, full commit and path (which give
its raw-GitHub url and its place in a mirror), its sha256, its size and its licence. Files are
grouped into :class:`Dataset` entries for listing and fetching.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources
from urllib.parse import quote

import tomllib

from ddibench.errors import DataError, UnknownNameError
from ddibench.hashing import EMPTY_SHA256


@dataclass(frozen=True, slots=True)
class SourceFile:
    dataset: str
    repo: str
    commit: str
    path: str
    sha256: str
    bytes: int
    license: str

    @property
    def url(self) -> str:
        encoded = "/".join(quote(seg, safe="") for seg in self.path.split("/"))
        return f"https://raw.githubusercontent.com/{self.repo}/{self.commit}/{encoded}"

    @property
    def relpath(self) -> str:
        """Location under a mirror or cache root: ``<owner>/<repo>/<commit>/<path>``."""
        return f"{self.repo}/{self.commit}/{self.path}"

    @property
    def expected_empty(self) -> bool:
        """A few upstream files are legitimately empty; their pin is the empty-file hash."""
        return self.sha256 == EMPTY_SHA256

    def describe(self) -> dict[str, object]:
        return {"url": self.url, "sha256": self.sha256, "bytes": self.bytes, "license": self.license}


@dataclass(frozen=True, slots=True)
class Dataset:
    key: str
    title: str
    repo: str
    commit: str
    files: tuple[SourceFile, ...]

    @property
    def licenses(self) -> list[str]:
        return sorted({f.license for f in self.files})

    @property
    def total_bytes(self) -> int:
        return sum(f.bytes for f in self.files)

    @property
    def upstream(self) -> str:
        return f"https://github.com/{self.repo}/tree/{self.commit}"

    def file(self, path: str) -> SourceFile:
        for f in self.files:
            if f.path == path:
                return f
        raise DataError(
            f"dataset '{self.key}' pins no file '{path}'",
            "add it to ddibench/data/sources.toml with scripts/pin_sources.py",
        )


@cache
def all_datasets() -> dict[str, Dataset]:
    text = resources.files("ddibench.data").joinpath("sources.toml").read_text(encoding="utf-8")
    raw = tomllib.loads(text)["datasets"]
    out: dict[str, Dataset] = {}
    for key, entry in raw.items():
        files = tuple(
            SourceFile(
                dataset=key,
                repo=entry["repo"],
                commit=entry["commit"],
                path=f["path"],
                sha256=f["sha256"],
                bytes=int(f["bytes"]),
                license=f["license"],
            )
            for f in entry["files"]
        )
        out[key] = Dataset(key, entry["title"], entry["repo"], entry["commit"], files)
    return out


def dataset(key: str) -> Dataset:
    datasets = all_datasets()
    if key not in datasets:
        raise UnknownNameError("dataset", key, datasets)
    return datasets[key]


def source(dataset_key: str, path: str) -> SourceFile:
    return dataset(dataset_key).file(path)
