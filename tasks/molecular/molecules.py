"""Reading molecule tables and the one deduplication rule every molecular task follows.

**The rule.** Each row's SMILES is parsed by RDKit and written as its canonical isomeric SMILES; rows
whose SMILES does not parse are dropped (counted). Rows with the same canonical SMILES are one
molecule:

* single-label and label-column tasks (toxicity, captioning): when the rows agree on every label the
  molecule is kept once; when they disagree ("conflicting duplicates": the same structure labelled
  both ways) the structure is dropped altogether, since neither label can be trusted;
* label-set tasks (drug targets): the molecule keeps the union of its rows' target sets (the Hub lists
  the same structure under several names, each with the targets known under that name).

A molecule whose rows sit in different splits of an upstream split file goes to the earliest split
(train, valid, test) and is counted; none of the pinned splits has one.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ddibench.chem import Standardized, standardize

SPLITS = ("train", "valid", "test")


@dataclass(frozen=True)
class Row:
    """One upstream row: its SMILES, labels (a tuple of column values, or a frozenset of targets), name and id."""

    smiles: str
    labels: Any
    name: str = ""
    source_id: str = ""
    split: str | None = None


@dataclass(frozen=True)
class Entry:
    """One deduplicated molecule."""

    std: Standardized
    labels: Any
    name: str
    source_id: str
    split: str | None
    names: tuple[str, ...] = ()  # every name its rows carry

    @property
    def cluster(self) -> str:
        """The bootstrap cluster key: the Bemis-Murcko scaffold, or the molecule itself when it has no ring."""
        return f"scaffold:{self.std.scaffold}" if self.std.scaffold else f"acyclic:{self.std.canonical}"


@dataclass
class DedupeStats:
    rows: int = 0
    unparsable: int = 0
    unique: int = 0  # distinct canonical SMILES among the parsable rows
    duplicate_groups: int = 0  # structures written in more than one row
    conflicting_groups: int = 0  # of those, structures whose rows disagree on a label (dropped)
    conflicting_rows: int = 0
    cross_split: int = 0
    molecules: int = 0  # what the task keeps
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, int]:
        return {
            "rows": self.rows,
            "unparsable": self.unparsable,
            "unique": self.unique,
            "duplicate_groups": self.duplicate_groups,
            "conflicting_groups": self.conflicting_groups,
            "conflicting_rows": self.conflicting_rows,
            "cross_split": self.cross_split,
            "molecules": self.molecules,
        }


def deduplicate(rows: Sequence[Row], merge: str = "agree") -> tuple[list[Entry], DedupeStats]:
    """Apply the rule of the module docstring; ``merge`` is "agree" (drop conflicting duplicates) or
    "union" (a label set's union). Molecules come in the order of their first row."""
    if merge not in ("agree", "union"):
        raise ValueError(f"merge must be 'agree' or 'union', got {merge!r}")
    stats = DedupeStats(rows=len(rows))
    groups: dict[str, list[tuple[Row, Standardized]]] = {}
    for row in rows:
        std = standardize(row.smiles)
        if std is None:
            stats.unparsable += 1
            continue
        groups.setdefault(std.canonical, []).append((row, std))
    stats.unique = len(groups)
    out: list[Entry] = []
    for members in groups.values():
        first, std = members[0]
        if len(members) > 1:
            stats.duplicate_groups += 1
        if merge == "agree":
            if len({r.labels for r, _ in members}) > 1:
                stats.conflicting_groups += 1
                stats.conflicting_rows += len(members)
                continue
            labels = first.labels
        else:
            labels = frozenset().union(*(r.labels for r, _ in members))
        splits = {r.split for r, _ in members}
        if len(splits) > 1:
            stats.cross_split += 1
        split = min(splits, key=lambda s: SPLITS.index(s) if s in SPLITS else -1) if first.split is not None else None
        names = tuple(dict.fromkeys(r.name for r, _ in members if r.name))
        out.append(Entry(std, labels, first.name, first.source_id, split, names))
    stats.molecules = len(out)
    return out, stats


def read_table(path: str, delimiter: str) -> list[dict[str, str]]:
    with open(path, encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh, delimiter=delimiter))


def label_value(text: str) -> int | None:
    """A 0/1 label as written upstream ("1", "0.0", ""); None for a missing value."""
    text = text.strip()
    if not text:
        return None
    value = float(text)
    if value not in (0.0, 1.0):
        raise ValueError(f"expected a 0/1 label, got {text!r}")
    return int(value)


def rows_of(
    table: Iterable[dict[str, str]],
    smiles: str,
    labels: Sequence[str],
    name: str | None,
    ident: str | None,
    split: str | None = None,
) -> list[Row]:
    """Rows of a molecule table: SMILES column, label columns (0/1), optional name and id columns."""
    out = []
    for record in table:
        out.append(
            Row(
                smiles=record[smiles].strip(),
                labels=tuple(label_value(record[c]) for c in labels),
                name=(record.get(name) or "").strip() if name else "",
                source_id=(record.get(ident) or "").strip() if ident else "",
                split=split,
            )
        )
    return out
