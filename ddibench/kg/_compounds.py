"""Which molecules the knowledge graph already holds: every KG compound with its structure keys and names.

The KG's compounds (DrugBank id space) are its 1,710 drugs (ids 0..1709) and the 187 other Hetionet
compounds among its entities (``Compound::DB...``). A molecule *is in the KG* when

* the skeleton of its InChIKey (the first 14 characters: connectivity, without stereochemistry or
  protonation) equals a KG compound's: from RDKit on the drug catalog's SMILES, and from the DrugBank
  4.2 table's InChIKey (which also covers the 187 other compounds, whose SMILES are not pinned); or
* one of its names equals (case-insensitively) a KG compound's DrugBank 4.2 name or one of the DrugBank
  synonyms pinned with the EmerGNN web UI.

Matching on the skeleton and on every synonym errs towards "in the KG": a molecule counted as new
(a drug-target task's "no-overlap" slice) really has neither its structure nor its name in the graph.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache

from ddibench.data import fetch, source
from ddibench.kg._graph import get_space


def skeleton(inchikey: str) -> str:
    """The connectivity block of an InChIKey ("" for an empty key)."""
    return inchikey.strip().upper()[:14] if len(inchikey.strip()) >= 14 else ""


@dataclass(frozen=True)
class CompoundIndex:
    """KG compound entity ids by InChIKey skeleton and by lower-case name."""

    by_skeleton: dict[str, tuple[int, ...]]
    by_name: dict[str, tuple[int, ...]]
    n_compounds: int

    def match(self, inchikey: str = "", names: Iterable[str] = ()) -> tuple[int, ...]:
        """KG entity ids of a molecule, by its InChIKey's skeleton or any of its names (empty: not in the KG)."""
        found: set[int] = set(self.by_skeleton.get(skeleton(inchikey), ())) if inchikey else set()
        for name in names:
            found.update(self.by_name.get(name.strip().lower(), ()))
        return tuple(sorted(found))

    def card(self) -> dict[str, int]:
        return {"compounds": self.n_compounds, "skeletons": len(self.by_skeleton), "names": len(self.by_name)}


@cache
def compound_index(space: str = "drugbank") -> CompoundIndex:
    """The compounds of the KG in an id space (the DrugBank space: its drugs and Compound entities)."""
    from ddibench.chem import inchikey

    id_space = get_space(space)
    entity_of: dict[str, int] = dict(id_space.drug_ids())
    for node, entity in id_space.entity_ids().items():
        kind, _, ident = node.partition("::")
        if kind == "Compound":
            entity_of.setdefault(ident, entity)
    by_skeleton: dict[str, set[int]] = {}
    by_name: dict[str, set[int]] = {}
    if space == "drugbank":
        from ddibench.data.drugbank import load_catalog

        for drug in load_catalog().drugs:
            key = skeleton(inchikey(drug.smiles))
            if key:
                by_skeleton.setdefault(key, set()).add(drug.node_id)
            by_name.setdefault(drug.name.lower(), set()).add(drug.node_id)
    with open(fetch(source("drugbank42", "data/drugbank.tsv")), encoding="utf-8", newline="") as fh:
        for row in csv.DictReader(fh, delimiter="\t"):
            found = entity_of.get(row["drugbank_id"])
            if found is None:
                continue
            key = skeleton(row.get("inchikey", "").removeprefix("InChIKey="))
            if key:
                by_skeleton.setdefault(key, set()).add(found)
            if row.get("name"):
                by_name.setdefault(row["name"].lower(), set()).add(found)
    synonyms: dict[str, str] = json.loads(
        fetch(source("drug-synonyms", "api/emergnn/name2id.json")).read_text(encoding="utf-8")
    )
    for name, drugbank_id in synonyms.items():
        synonym_of = entity_of.get(drugbank_id)
        if synonym_of is not None:
            by_name.setdefault(name.lower(), set()).add(synonym_of)
    return CompoundIndex(
        by_skeleton={k: tuple(sorted(v)) for k, v in by_skeleton.items()},
        by_name={k: tuple(sorted(v)) for k, v in by_name.items()},
        n_compounds=len(set(entity_of.values())),
    )


def compound_sources(space: str = "drugbank") -> list:
    """The pinned files the compound index is read from (their hashes belong in a task's data hash)."""
    from ddibench.data.drugbank import catalog_sources

    return [
        *get_space(space).sources(),
        *catalog_sources(),
        source("drugbank42", "data/drugbank.tsv"),
        source("drug-synonyms", "api/emergnn/name2id.json"),
    ]
