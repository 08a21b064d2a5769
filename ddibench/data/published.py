"""The published numbers ddibench compares with (``ddibench/data/published.toml``).

One row per (paper, table, setting, method, metric), in percent as the paper prints it, with our
counterpart (task, system, metric; empty where we have none) and a note on how the comparison differs.
``ddibench report --published`` prints our number beside each row. The rows are the papers' own
numbers, transcribed by hand; each paper's citation is in the file.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources

import tomllib

from ddibench.errors import DdibenchError


@dataclass(frozen=True, slots=True)
class PublishedRow:
    paper: str
    table: str
    setting: str
    dataset: str
    method: str
    metric: str
    value: float  # percent, as published
    std: float | None  # the paper's standard deviation over runs, where it gives one
    task: str  # our task ("" when we have no counterpart)
    system: str  # our system ("" when we have none)
    our_metric: str  # our metric name ("" when we do not compute the paper's metric)
    note: str


@dataclass(frozen=True, slots=True)
class Paper:
    key: str
    cite: str
    where: str


def load_published() -> tuple[list[PublishedRow], dict[str, Paper]]:
    """Every published row, and the papers they come from (by key)."""
    text = resources.files("ddibench.data").joinpath("published.toml").read_text(encoding="utf-8")
    data = tomllib.loads(text)
    papers = {
        key: Paper(key=key, cite=str(p["cite"]), where=str(p.get("where", "")))
        for key, p in data.get("papers", {}).items()
    }
    rows = []
    for i, raw in enumerate(data.get("rows", [])):
        try:
            row = PublishedRow(
                paper=str(raw["paper"]),
                table=str(raw["table"]),
                setting=str(raw["setting"]),
                dataset=str(raw["dataset"]),
                method=str(raw["method"]),
                metric=str(raw["metric"]),
                value=float(raw["value"]),
                std=float(raw["std"]) if "std" in raw else None,
                task=str(raw.get("task", "")),
                system=str(raw.get("system", "")),
                our_metric=str(raw.get("our_metric", "")),
                note=str(raw.get("note", "")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise DdibenchError(
                f"published.toml row {i + 1} is malformed ({type(exc).__name__}: {exc})",
                "fix the row in ddibench/data/published.toml",
            ) from None
        if row.paper not in papers:
            raise DdibenchError(
                f"published.toml row {i + 1} names paper '{row.paper}', which has no [papers.{row.paper}] entry",
                "add the paper's citation to ddibench/data/published.toml",
            )
        rows.append(row)
    return rows, papers
