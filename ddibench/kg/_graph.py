"""The knowledge graph in a model's id space, and the queries systems share.

Hetionet edges are mapped into the EmerGNN/SumGNN/KnowDDI id spaces: in the DrugBank space drugs are
0..1709 (EmerGNN ``node2id.json``), other entities 1710..34123 (``entity_drug.json``) and relations
86 + the metaedge's index in KnowDDI's ``relation_type_drug.json`` (the DDI types are 0..85); the
TWOSIDES space is built the same way (drugs 0..603, entities 604..34047, relations 200 + index).

:class:`KnowledgeGraph` holds ``(head, tail, relation)`` arrays and answers the queries systems need:
entity names and kinds, verbalised triples, neighbours by relation, k-hop neighbourhoods, diverse
paths (``ddibench.kg.yen_paths``) and EmerGNN's per-split visibility (:meth:`without_entities`,
:func:`split_visibility`). Traversal uses a CSR over every edge and its inverse (relation ``r`` read
backwards is ``r + n_relations``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from ddibench.data import fetch, source
from ddibench.errors import DataError, UnknownNameError
from ddibench.kg._hetionet import METAEDGES, Hetionet

_VERBS = {
    "associates": "is associated with",
    "localizes": "localizes to",
    "covaries": "covaries with",
    "interacts": "interacts with",
    "participates": "participates in",
    "presents": "presents",
}


def metaedge_verb(abbrev: str) -> str:
    middle = METAEDGES[abbrev][0].replace(">", "-").split(" - ")[1].strip()
    return _VERBS.get(middle, middle)


@dataclass(frozen=True)
class IdSpace:
    name: str
    n_drugs: int
    relation_base: int  # first KG relation id (after the DDI label ids)
    drugs: tuple[str, str]  # (dataset, path) of the drug id map
    entities: tuple[str, str]
    relation_types: tuple[str, str]

    def drug_ids(self) -> dict[str, int]:
        """DrugBank id -> drug id."""
        raw = json.loads(fetch(source(*self.drugs)).read_text(encoding="utf-8"))
        if self.name == "drugbank":
            return {db: int(i) for db, i in raw.items()}
        return {v["db"]: int(k) for k, v in raw.items() if v.get("db")}

    def entity_ids(self) -> dict[str, int]:
        return {k: int(v) for k, v in json.loads(fetch(source(*self.entities)).read_text(encoding="utf-8")).items()}

    def relation_index(self) -> dict[str, int]:
        return {
            k: int(v) for k, v in json.loads(fetch(source(*self.relation_types)).read_text(encoding="utf-8")).items()
        }

    def sources(self) -> list[Any]:
        return [source(*self.drugs), source(*self.entities), source(*self.relation_types)]


SPACES = {
    "drugbank": IdSpace(
        "drugbank",
        1710,
        86,
        ("emergnn-drugbank", "DrugBank/data/node2id.json"),
        ("emergnn-drugbank-kg", "DrugBank/data/entity_drug.json"),
        ("knowddi", "raw_data/Drugbank/relation_type_drug.json"),
    ),
    "twosides": IdSpace(
        "twosides",
        604,
        200,
        ("emergnn-twosides", "data/id2drug.json"),
        ("emergnn-twosides", "data/entity2id.json"),
        ("knowddi", "raw_data/BioSNAP/relation_type_drug.json"),
    ),
}


def get_space(name: str) -> IdSpace:
    if name not in SPACES:
        raise UnknownNameError("KG id space", name, SPACES)
    return SPACES[name]


@dataclass
class KnowledgeGraph:
    """Triples in one id space. Entity ids ``< n_drugs`` are drugs."""

    space: str
    n_drugs: int
    n_entities: int
    n_relations: int  # relation ids are 0..n_relations-1; r + n_relations is r read backwards
    head: np.ndarray
    tail: np.ndarray
    rel: np.ndarray
    entity_names: list[str]
    entity_kinds: list[str]
    relation_names: dict[int, str]
    relation_verbs: dict[int, str]
    card: dict[str, Any] = field(default_factory=dict)
    symmetric: frozenset[int] = frozenset()  # undirected relations (e.g. resembles): their direction is arbitrary

    def __len__(self) -> int:
        return int(self.head.size)

    # -- construction ------------------------------------------------------------------------

    def _derive(
        self,
        keep: np.ndarray | None = None,
        extra: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
        note: str | None = None,
    ) -> KnowledgeGraph:
        head, tail, rel = self.head, self.tail, self.rel
        if keep is not None:
            head, tail, rel = head[keep], tail[keep], rel[keep]
        if extra is not None:
            head = np.concatenate([head, extra[0]])
            tail = np.concatenate([tail, extra[1]])
            rel = np.concatenate([rel, extra[2]])
        order = np.lexsort((rel, tail, head))
        card = dict(self.card)
        if note:
            card["views"] = [*card.get("views", []), note]
        return KnowledgeGraph(
            self.space,
            self.n_drugs,
            self.n_entities,
            self.n_relations,
            head[order],
            tail[order],
            rel[order],
            self.entity_names,
            self.entity_kinds,
            self.relation_names,
            self.relation_verbs,
            card,
            self.symmetric,
        )

    def with_interactions(
        self, triples: Iterable[tuple[int, int, int]], templates: Sequence[str] | None = None, note: str = "DDI edges"
    ) -> KnowledgeGraph:
        """Add drug-drug interaction edges (label ids are relation ids below the KG relations);
        ``templates`` (with #Drug1/#Drug2) make them verbalise as sentences."""
        arr = np.asarray(list(triples), dtype=np.int64).reshape(-1, 3)
        if arr.size and (arr[:, :2].max() >= self.n_drugs or arr[:, 2].max() >= self.card["relation_base"]):
            raise DataError(
                "interaction edges must join drugs and use DDI label ids", "pass (head drug, tail drug, label) triples"
            )
        graph = self._derive(extra=(arr[:, 0], arr[:, 1], arr[:, 2]), note=f"+{len(arr):,} {note}")
        if templates is not None:
            graph.relation_names = {
                **self.relation_names,
                **{i: f"interaction type {i}" for i in range(len(templates))},
            }
            graph.relation_verbs = {**self.relation_verbs, **dict(enumerate(templates))}
        return graph

    def without_entities(self, entities: Iterable[int], note: str = "") -> KnowledgeGraph:
        """The graph without every edge that touches one of ``entities`` (e.g. drugs a split hides)."""
        hidden = np.zeros(self.n_entities, dtype=bool)
        hidden[np.fromiter(entities, dtype=np.int64)] = True
        keep = ~(hidden[self.head] | hidden[self.tail])
        return self._derive(keep=keep, note=note or f"-{int(hidden.sum())} hidden entities")

    # -- lookups ---------------------------------------------------------------------------

    def canonical_relation(self, relation: int) -> int:
        """A relation as a path pattern sees it: a symmetric relation read backwards is the relation itself."""
        if relation >= self.n_relations and relation - self.n_relations in self.symmetric:
            return relation - self.n_relations
        return relation

    def is_drug(self, entity: int) -> bool:
        return entity < self.n_drugs

    def name(self, entity: int) -> str:
        return self.entity_names[entity]

    def relation_name(self, relation: int) -> str:
        if relation >= self.n_relations:
            return self.relation_names.get(relation - self.n_relations, str(relation)) + " (reverse)"
        return self.relation_names.get(relation, str(relation))

    def verbalise(self, head: int, relation: int, tail: int) -> str:
        """A triple as a sentence ("Fosphenytoin binds CYP3A4"); reverse relations are read forwards."""
        if relation >= self.n_relations:
            head, tail, relation = tail, head, relation - self.n_relations
        verb = self.relation_verbs.get(relation)
        if verb is None:
            return f"{self.name(head)} {self.relation_name(relation)} {self.name(tail)}"
        if "#Drug1" in verb:
            return verb.replace("#Drug1", self.name(head)).replace("#Drug2", self.name(tail))
        return f"{self.name(head)} {verb} {self.name(tail)}"

    @cached_property
    def csr(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(indptr, neighbour, relation) over every edge and its inverse, neighbours sorted per node."""
        src = np.concatenate([self.head, self.tail])
        dst = np.concatenate([self.tail, self.head])
        rel = np.concatenate([self.rel, self.rel + self.n_relations])
        order = np.lexsort((rel, dst, src))
        src, dst, rel = src[order], dst[order], rel[order]
        indptr = np.zeros(self.n_entities + 1, dtype=np.int64)
        np.cumsum(np.bincount(src, minlength=self.n_entities), out=indptr[1:])
        return indptr, dst.astype(np.int64), rel.astype(np.int64)

    @cached_property
    def degree(self) -> np.ndarray:
        indptr = self.csr[0]
        return np.diff(indptr)

    def neighbours(self, entity: int, relations: Sequence[int] | None = None) -> list[tuple[int, int]]:
        """(relation, neighbour) pairs; reverse relations are ``r + n_relations``."""
        indptr, nbr, rel = self.csr
        lo, hi = indptr[entity], indptr[entity + 1]
        rels, nbrs = rel[lo:hi], nbr[lo:hi]
        if relations is not None:
            mask = np.isin(rels, np.asarray(relations))
            rels, nbrs = rels[mask], nbrs[mask]
        return list(zip(rels.tolist(), nbrs.tolist()))

    def k_hop(self, entity: int, k: int) -> np.ndarray:
        """Entities within ``k`` hops (either direction), the entity itself included, sorted."""
        indptr, nbr, _ = self.csr
        seen = np.zeros(self.n_entities, dtype=bool)
        seen[entity] = True
        frontier = np.array([entity], dtype=np.int64)
        for _ in range(k):
            if frontier.size == 0:
                break
            reached = gather_neighbours(indptr, nbr, frontier)
            reached = np.unique(reached[~seen[reached]])
            seen[reached] = True
            frontier = reached
        return np.flatnonzero(seen)

    def triples_of(self, entity: int) -> list[tuple[int, int, int]]:
        """Every triple with ``entity`` as head or tail, as stored (forward relations)."""
        out = [
            (entity, r, n) if r < self.n_relations else (n, r - self.n_relations, entity)
            for r, n in self.neighbours(entity)
        ]
        return out


def gather_neighbours(indptr: np.ndarray, values: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """Concatenated CSR rows of ``nodes`` (vectorised)."""
    starts, ends = indptr[nodes], indptr[nodes + 1]
    lengths = ends - starts
    total = int(lengths.sum())
    if total == 0:
        return values[:0]
    offsets = np.repeat(starts - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
    return values[np.arange(total) + offsets]


def gather_rows(indptr: np.ndarray, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions of the CSR entries of ``nodes`` and, for each, the index into ``nodes`` it came from."""
    starts, ends = indptr[nodes], indptr[nodes + 1]
    lengths = ends - starts
    total = int(lengths.sum())
    owner = np.repeat(np.arange(nodes.size), lengths)
    if total == 0:
        return np.zeros(0, dtype=np.int64), owner
    offsets = np.repeat(starts - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
    return np.arange(total) + offsets, owner


def map_to_space(hetionet: Hetionet, space: IdSpace, drug_names: Sequence[str] | None = None) -> KnowledgeGraph:
    """Hetionet in a model's id space; every edge must map (an unknown node or relation is an error)."""
    drugs = space.drug_ids()
    entities = space.entity_ids()
    rel_index = space.relation_index()
    n_entities = max(max(entities.values()) + 1, space.n_drugs)
    node_map = _node_map(hetionet, drugs, entities)
    head, tail, rel, counts = _mapped_edges(hetionet, space, node_map, rel_index)
    order = np.lexsort((rel, tail, head))
    names, kinds = _entity_labels(hetionet, space, node_map, n_entities, drug_names)
    relation_names = {space.relation_base + i: METAEDGES[a][0] for a, i in rel_index.items()}
    relation_verbs = {space.relation_base + i: metaedge_verb(a) for a, i in rel_index.items()}
    n_relations = space.relation_base + len(rel_index)
    card = _space_card(hetionet, space, rel_index, counts, n_entities, n_relations, int(head.size))
    symmetric = frozenset(
        space.relation_base + i
        for a, i in rel_index.items()
        if " - " in METAEDGES[a][0] and METAEDGES[a][1] == METAEDGES[a][2]
    )
    return KnowledgeGraph(
        space.name,
        space.n_drugs,
        n_entities,
        n_relations,
        head[order],
        tail[order],
        rel[order],
        names,
        kinds,
        relation_names,
        relation_verbs,
        card,
        symmetric,
    )


def _node_map(hetionet: Hetionet, drugs: dict[str, int], entities: dict[str, int]) -> np.ndarray:
    """Each Hetionet node's id in the space (a compound by its DrugBank id first), -1 where it has none."""
    node_map = np.full(len(hetionet.node_ids), -1, dtype=np.int64)
    for i, node in enumerate(hetionet.node_ids):
        kind, _, ident = node.partition("::")
        if kind == "Compound" and ident in drugs:
            node_map[i] = drugs[ident]
        elif node in entities:
            node_map[i] = entities[node]
    return node_map


def _mapped_edges(
    hetionet: Hetionet, space: IdSpace, node_map: np.ndarray, rel_index: dict[str, int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, int]]:
    """(head, tail, relation) of every Hetionet edge in the space, unsorted, and the edge count of each
    metaedge; raises where an edge's metaedge or endpoint has no id in the space."""
    heads, tails, rels = [], [], []
    counts: dict[str, int] = {}
    for abbrev, edges in hetionet.edges.items():
        if abbrev not in rel_index:
            if abbrev == "GpBP":
                continue  # EmerGNN/KnowDDI leave Biological Process edges out of the KG
            raise DataError(
                f"metaedge {abbrev} has no relation id in {space.relation_types[1]}", "use Hetionet v1.0 metaedges"
            )
        mapped = node_map[edges]
        bad = (mapped < 0).any(axis=1)
        if bad.any():
            (src, dst), (msrc, _) = edges[bad][0], mapped[bad][0]
            example = hetionet.node_ids[int(src if msrc < 0 else dst)]
            raise DataError(
                f"{int(bad.sum())} {abbrev} edges have an endpoint outside the {space.name} id space (e.g. {example})",
                "the KG sources and the id-space files do not belong together",
            )
        heads.append(mapped[:, 0])
        tails.append(mapped[:, 1])
        rels.append(np.full(len(mapped), space.relation_base + rel_index[abbrev], dtype=np.int64))
        counts[abbrev] = int(len(mapped))
    return np.concatenate(heads), np.concatenate(tails), np.concatenate(rels), counts


def _entity_labels(
    hetionet: Hetionet,
    space: IdSpace,
    node_map: np.ndarray,
    n_entities: int,
    drug_names: Sequence[str] | None,
) -> tuple[list[str], list[str]]:
    """Every entity's name and kind: Hetionet's, with drugs of kind "Drug" named by ``drug_names`` when
    given (else by Hetionet, else "drug N")."""
    names = [""] * n_entities
    kinds = [""] * n_entities
    for i in np.flatnonzero(node_map >= 0).tolist():
        names[node_map[i]] = hetionet.node_names[i]
        kinds[node_map[i]] = hetionet.node_kinds[i]
    for drug in range(space.n_drugs):
        kinds[drug] = "Drug"
        if drug_names is not None:
            names[drug] = drug_names[drug]
        elif not names[drug]:
            names[drug] = f"drug {drug}"
    return names, kinds


def _space_card(
    hetionet: Hetionet,
    space: IdSpace,
    rel_index: dict[str, int],
    counts: dict[str, int],
    n_entities: int,
    n_relations: int,
    n_edges: int,
) -> dict[str, Any]:
    """The mapped graph's card: its size, its edges by metaedge, the metaedges it lacks and its sources."""
    missing = {a: hetionet.published_counts.get(a, 0) for a in rel_index if a not in counts}
    return {
        "space": space.name,
        "entities": n_entities,
        "relations": n_relations,
        "kg_edges": n_edges,
        "edges_by_metaedge": counts,
        "missing_metaedges": missing,
        "deviation": (
            f"{sum(missing.values()):,} edges of {', '.join(missing)} are not in this KG (their Hetionet inputs are "
            "not among the pinned sources); pass Hetionet's full edge file to include them"
            if missing
            else None
        ),
        "relation_base": space.relation_base,
        "hetionet": hetionet.card(),
        "id_space_sources": [s.describe() for s in space.sources()],
    }


def split_visibility(
    train: Iterable[tuple[int, int]], valid: Iterable[tuple[int, int]], test: Iterable[tuple[int, int]]
) -> dict[str, set[int]]:
    """EmerGNN's rule for which drugs each split's graph hides.

    New drugs are those absent from training pairs: valid-new drugs appear in validation pairs, test-new
    drugs appear only in test pairs. The training graph hides both, the validation graph hides the
    test-new drugs, the test graph hides nothing.
    """
    train_drugs = {d for pair in train for d in pair}
    valid_new = {d for pair in valid for d in pair} - train_drugs
    test_new = {d for pair in test for d in pair} - train_drugs - valid_new
    return {"train": valid_new | test_new, "valid": test_new, "test": set()}
