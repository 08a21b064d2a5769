"""CLADD's knowledge-graph side: the anchor drug of a query molecule and the drugs related to the anchor.

* :class:`DrugGraph` — a :class:`ddibench.kg.KnowledgeGraph` whose drugs (ids ``0..n_drugs-1``) carry a
  structure, with their Morgan fingerprints. Two ways to get one: :func:`hetionet_graph` (the project's
  Hetionet in the DrugBank id space, drug SMILES from the DrugBank catalog; the default, standing in
  for the paper's PrimeKG) and :func:`primekg_graph` (a user's PrimeKG ``kg.csv``; drug structures from
  the pinned DrugBank 4.2 table's InChI by DrugBank id; the file's sha256 is recorded).
* :meth:`DrugGraph.anchor` — the KG drug most similar to the query by Morgan-fingerprint Tanimoto,
  leaving out the drugs given in ``exclude`` (the query itself: :meth:`DrugGraph.same_structure`).
* :meth:`DrugGraph.related` — the top-k KG drugs with the most 2-hop paths
  ``anchor - relation - entity - relation - drug`` (the count is over distinct (relation, entity,
  relation) triples), ties by drug id; :meth:`DrugGraph.paths` verbalises those paths, rarest
  intermediate entities first.

The 2-hop search reads a CSR that holds, for every entity, only its drug neighbours (built once), so
one search gathers at most (anchor degree x drugs per entity) entries; ``benchmarks/cladd_search.py``
measures it over every KG drug beside a gather of the full neighbourhoods (on Hetionet the two are
within a factor of two of each other either way: most of Hetionet's edges touch genes, not drugs).
"""

from __future__ import annotations

import csv
import hashlib
from dataclasses import dataclass, field
from functools import cache, cached_property
from pathlib import Path
from typing import Any

import numpy as np

from ddibench.errors import DataError
from ddibench.kg import KnowledgeGraph, gather_rows, skeleton
from ddibench.systems.cladd.userfiles import read_table


@dataclass
class Anchor:
    drug: int
    name: str
    similarity: float


@dataclass
class Related:
    drug: int
    name: str
    paths: int  # number of 2-hop paths to the anchor
    similarity: float  # Tanimoto similarity to the query


@dataclass
class DrugGraph:
    kg: KnowledgeGraph
    smiles: list[str]  # per drug ("" when the drug has no structure: never an anchor)
    identity: dict[str, Any] = field(default_factory=dict)

    @property
    def n_drugs(self) -> int:
        return self.kg.n_drugs

    @cached_property
    def fingerprints(self) -> np.ndarray:
        from ddibench.chem import morgan_matrix

        bits, failed = morgan_matrix(self.smiles)
        self._unparsed = set(failed)
        return bits

    @cached_property
    def skeletons(self) -> list[str]:
        from ddibench.chem import inchikey

        return [skeleton(inchikey(s)) if s else "" for s in self.smiles]

    @cached_property
    def fingerprints32(self) -> np.ndarray:
        """The fingerprints as float32, converted once (tanimoto_matrix would convert them on every query)."""
        return self.fingerprints.astype(np.float32)

    @cached_property
    def has_structure(self) -> np.ndarray:
        return self.fingerprints.sum(axis=1) > 0

    def card(self) -> dict[str, Any]:
        return {
            **self.identity,
            "drugs": self.n_drugs,
            "drugs_with_structure": int(self.has_structure.sum()),
            "edges": len(self.kg),
        }

    def same_structure(self, inchikey: str, name: str = "") -> list[int]:
        """The KG drugs that are the query itself: the same InChIKey skeleton, or (Hetionet) the KG's own
        compound match by skeleton or name (:func:`ddibench.kg.compound_index`), or (PrimeKG) the same name."""
        key = skeleton(inchikey)
        found = {i for i, s in enumerate(self.skeletons) if key and s == key}
        if self.identity.get("kg") == "hetionet":
            from ddibench.kg import compound_index

            found.update(
                i for i in compound_index("drugbank").match(inchikey, [name] if name else []) if i < self.n_drugs
            )
        elif name:
            found.update(i for i in range(self.n_drugs) if self.kg.name(i).lower() == name.strip().lower())
        return sorted(found)

    def same_structure_by_skeleton(self, drug: int) -> list[int]:
        """The KG drugs with the same InChIKey skeleton as KG drug ``drug`` (itself included)."""
        key = self.skeletons[drug]
        return [i for i, s in enumerate(self.skeletons) if key and s == key] or [drug]

    @cached_property
    def bit_counts(self) -> np.ndarray:
        return self.fingerprints32.sum(axis=1)

    def similarities(self, smiles: str) -> np.ndarray:
        """Tanimoto similarity of the query to every KG drug: :func:`ddibench.chem.tanimoto_matrix`'s formula
        as one matrix-vector product with the drugs' bit counts computed once (the general helper recomputes
        them for every query, which made a query 30 times slower)."""
        from ddibench.chem import morgan_matrix

        query, _ = morgan_matrix([smiles])
        q = query[0].astype(np.float32)
        inter = self.fingerprints32 @ q
        union = self.bit_counts + q.sum() - inter
        return np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)

    def anchor(
        self, smiles: str, exclude: list[int] | tuple[int, ...] = (), sims: np.ndarray | None = None
    ) -> Anchor | None:
        sims = self.similarities(smiles) if sims is None else sims
        masked = np.where(self.has_structure, sims, -1.0)
        if len(exclude):
            masked[np.asarray(exclude, dtype=np.int64)] = -1.0
        best = int(np.argmax(masked))
        if masked[best] < 0:
            return None
        return Anchor(best, self.kg.name(best), round(float(masked[best]), 4))

    @cached_property
    def drug_csr(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(indptr, drug neighbour, relation) for every entity: the full CSR restricted to drug neighbours."""
        indptr, nbr, rel = self.kg.csr
        src = np.repeat(np.arange(self.kg.n_entities), np.diff(indptr))
        keep = nbr < self.n_drugs
        src, dst, r = src[keep], nbr[keep], rel[keep]
        out = np.zeros(self.kg.n_entities + 1, dtype=np.int64)
        np.cumsum(np.bincount(src, minlength=self.kg.n_entities), out=out[1:])
        return out, dst, r

    def _two_hop(self, anchor: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Every 2-hop path from the anchor to a drug: (first relation, entity, second relation, drug)."""
        indptr, nbr, rel = self.kg.csr
        lo, hi = indptr[anchor], indptr[anchor + 1]
        mids, first = nbr[lo:hi], rel[lo:hi]
        keep = mids != anchor
        mids, first = mids[keep], first[keep]
        dptr, dnbr, drel = self.drug_csr
        pos, owner = gather_rows(dptr, mids)
        drugs = dnbr[pos]
        ok = drugs != anchor  # the relations are as the CSR reads them: from the anchor, then from the entity
        return first[owner[ok]], mids[owner[ok]], drel[pos[ok]], drugs[ok]

    def related(
        self, anchor: int, k: int, exclude: list[int] | tuple[int, ...] = (), sims: np.ndarray | None = None
    ) -> list[Related]:
        if k <= 0:
            return []
        _, _, _, drugs = self._two_hop(anchor)
        counts = np.bincount(drugs, minlength=self.n_drugs)
        if len(exclude):
            counts[np.asarray(exclude, dtype=np.int64)] = 0
        order = np.lexsort((np.arange(self.n_drugs), -counts))[:k]
        return [
            Related(int(d), self.kg.name(int(d)), int(counts[d]), round(float(sims[d]), 4) if sims is not None else 0.0)
            for d in order.tolist()
            if counts[d] > 0
        ]

    def paths(self, anchor: int, related: list[Related], per_drug: int) -> list[str]:
        """Up to ``per_drug`` verbalised paths from the anchor to each related drug, rarest entity first."""
        if per_drug <= 0 or not related:
            return []
        first, mids, second, drugs = self._two_hop(anchor)
        degree = self.kg.degree
        out = []
        for r in related:
            mask = drugs == r.drug
            idx = np.flatnonzero(mask)
            idx = idx[np.lexsort((mids[idx], degree[mids[idx]]))][:per_drug]
            for i in idx.tolist():
                step2 = self.kg.verbalise(
                    int(mids[i]), int(second[i]), r.drug
                )  # CSR relations are read from the entity
                out.append(f"{self.kg.verbalise(anchor, int(first[i]), int(mids[i]))}; {step2}")
        return out


@cache
def hetionet_graph() -> DrugGraph:
    """The project's Hetionet (DrugBank id space) with the DrugBank catalog's SMILES for its 1,710 drugs."""
    from ddibench.data.drugbank import load_catalog
    from ddibench.kg import load_kg

    kg = load_kg("drugbank")
    smiles = [d.smiles for d in load_catalog().drugs]
    return DrugGraph(kg, smiles, {"kg": "hetionet", "space": "drugbank", "kg_edges": len(kg)})


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


PRIMEKG_COLUMNS = {"relation", "x_id", "x_type", "x_name", "x_source", "y_id", "y_type", "y_name", "y_source"}


@cache
def primekg_graph(path: str) -> DrugGraph:
    """A user's PrimeKG ``kg.csv`` (Chandak et al. 2023) as a :class:`DrugGraph`.

    Drugs are the ``drug`` nodes with a DrugBank id; their structures come from the InChI of the pinned
    DrugBank 4.2 table (drugs it lacks have no structure and are never anchors). Each undirected
    PrimeKG edge, listed in both directions in the file, is kept once.
    """
    from rdkit import Chem

    from ddibench.data import fetch, source

    file, header, rows = read_table(path, "kg", "PrimeKG's kg.csv (or leave kg unset for Hetionet)")
    if not rows or not set(header) >= PRIMEKG_COLUMNS:
        raise DataError(
            f"{file} is not PrimeKG's kg.csv (columns {sorted(PRIMEKG_COLUMNS)} expected)", "pass PrimeKG's kg.csv"
        )
    nodes: dict[tuple[str, str], tuple[str, str]] = {}  # (type, id) -> (name, source)
    for row in rows:
        for side in ("x", "y"):
            nodes.setdefault((row[f"{side}_type"], row[f"{side}_id"]), (row[f"{side}_name"], row[f"{side}_source"]))
    drugs = sorted(k for k, v in nodes.items() if k[0] == "drug")
    others = sorted(k for k in nodes if k[0] != "drug")
    index = {k: i for i, k in enumerate([*drugs, *others])}
    relations = sorted({row["relation"] for row in rows})
    rel_id = {r: i for i, r in enumerate(relations)}
    seen: set[tuple[int, int, int]] = set()
    for row in rows:
        a, b = index[(row["x_type"], row["x_id"])], index[(row["y_type"], row["y_id"])]
        triple = (min(a, b), max(a, b), rel_id[row["relation"]])
        seen.add(triple)
    arr = np.asarray(sorted(seen), dtype=np.int64).reshape(-1, 3)
    inchi: dict[str, str] = {}
    with open(fetch(source("drugbank42", "data/drugbank.tsv")), encoding="utf-8", newline="") as fh:
        for row in csv.DictReader(fh, delimiter="\t"):
            if row.get("inchi"):
                inchi[row["drugbank_id"]] = row["inchi"]
    smiles = []
    for _, ident in drugs:
        mol = Chem.MolFromInchi(inchi[ident]) if ident in inchi else None
        smiles.append(Chem.MolToSmiles(mol) if mol is not None else "")
    keys = [*drugs, *others]
    kg = KnowledgeGraph(
        space="primekg",
        n_drugs=len(drugs),
        n_entities=len(keys),
        n_relations=len(relations),
        head=arr[:, 0],
        tail=arr[:, 1],
        rel=arr[:, 2],
        entity_names=[nodes[k][0] for k in keys],
        entity_kinds=[k[0] for k in keys],
        relation_names=dict(enumerate(relations)),
        relation_verbs={i: r.replace("_", " ") for i, r in enumerate(relations)},
        card={"relation_base": 0},
        symmetric=frozenset(range(len(relations))),
    )
    return DrugGraph(kg, smiles, {"kg": "primekg", "path": str(file), "sha256": _sha256(file), "kg_edges": len(kg)})
