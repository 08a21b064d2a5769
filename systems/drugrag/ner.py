"""Dictionary- and rule-based entity recognition for DrugRAG's ingestion and keyword fallback.

Drug names and synonyms come from the pinned DrugBank name tables (the 1,710 task drugs, DrugBank 4.2
names, and the lower-case name/synonym -> DrugBank id table); side-effect names from SIDER 4.1.
Matching is case-insensitive over tokens (letters, digits, hyphens, apostrophes), longest name first,
so "acetylsalicylic acid" wins over "acid"; names shorter than 4 characters are left out (too
ambiguous). Lookup is by token n-grams in a dict, so a sentence costs microseconds.
"""

from __future__ import annotations

import csv
import json
import re
from dataclasses import dataclass
from functools import cache

from ddibench.data import fetch, source


@dataclass(frozen=True, slots=True)
class Entity:
    kind: str  # "Drug" (a task drug), "Compound" (another DrugBank entry) or "SideEffect"
    key: str  # DrugBank id or UMLS CUI
    name: str  # canonical name
    start: int
    end: int


_TOKEN = re.compile(r"[a-z0-9][a-z0-9'\-]*")


def _key(text: str) -> str:
    return " ".join(_TOKEN.findall(text.lower()))


@dataclass
class Dictionary:
    names: dict[str, tuple[str, str, str]]  # normalised surface form -> (kind, key, canonical name)
    longest: dict[str, int]  # first token -> most tokens of a surface form starting with it

    def find(self, text: str) -> list[Entity]:
        lowered = text.lower()
        spans = [(m.group(0), m.start(), m.end()) for m in _TOKEN.finditer(lowered)]
        out, i = [], 0
        while i < len(spans):
            for n in range(min(self.longest.get(spans[i][0], 0), len(spans) - i), 0, -1):
                surface = " ".join(tok for tok, _, _ in spans[i : i + n])
                hit = self.names.get(surface)
                if hit is not None:
                    out.append(Entity(hit[0], hit[1], hit[2], spans[i][1], spans[i + n - 1][2]))
                    i += n
                    break
            else:
                i += 1
        return out


@cache
def dictionary() -> Dictionary:
    from ddibench.data.drugbank import load_catalog

    names: dict[str, tuple[str, str, str]] = {}
    catalog = load_catalog()
    task_drugs = {d.drugbank_id: d.name for d in catalog.drugs}
    canonical: dict[str, str] = dict(task_drugs)
    with open(fetch(source("drugbank42", "data/drugbank.tsv")), encoding="utf-8", newline="") as fh:
        for row in csv.DictReader(fh, delimiter="\t"):
            canonical.setdefault(row["drugbank_id"], row["name"])
    synonyms = json.loads(fetch(source("drug-synonyms", "api/emergnn/name2id.json")).read_text(encoding="utf-8"))

    def add(surface: str, kind: str, key: str, name: str) -> None:
        surface = _key(surface)
        if len(surface) >= 4 and surface not in names:
            names[surface] = (kind, key, name)

    for db, name in canonical.items():
        add(name, "Drug" if db in task_drugs else "Compound", db, name)
    for surface, db in synonyms.items():
        if db in canonical:
            add(surface, "Drug" if db in task_drugs else "Compound", db, canonical[db])
    with open(fetch(source("sider4-terms", "data/side-effect-terms.tsv")), encoding="utf-8", newline="") as fh:
        for row in csv.DictReader(fh, delimiter="\t"):
            add(row["side_effect_name"], "SideEffect", row["umls_cui_from_meddra"], row["side_effect_name"])
    longest: dict[str, int] = {}
    for surface in names:
        parts = surface.split()
        longest[parts[0]] = max(longest.get(parts[0], 0), len(parts))
    return Dictionary(names, longest)
