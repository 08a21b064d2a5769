"""Pinned source files and their resolution (mirror, cache, download)."""

from ddibench.data.resolve import cache_root, fetch, locate, mirror_root, verify
from ddibench.data.sources import Dataset, SourceFile, all_datasets, dataset, source

__all__ = [
    "Dataset",
    "SourceFile",
    "all_datasets",
    "cache_root",
    "dataset",
    "fetch",
    "locate",
    "mirror_root",
    "source",
    "verify",
]
