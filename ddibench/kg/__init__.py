"""The biomedical knowledge graph every KG-based system shares (Hetionet in EmerGNN id spaces).

``load_kg("drugbank")`` builds Hetionet from the pinned sources once (cached as an artifact keyed by
the recipe version and the sources' hashes), maps it into the id space, and returns a
:class:`KnowledgeGraph`. Pass ``full_edges`` (Hetionet's ``hetionet-v1.0-edges.sif.gz``) to include the
metaedges the pinned sources cannot rebuild.

The public API (what a system imports): :class:`KnowledgeGraph` and its queries, :func:`load_kg`,
:func:`interaction_graph` (and :func:`interaction_triples`), :func:`touches_pair`, :func:`split_visibility`, path search
(:func:`yen_paths`, :func:`shortest_path`, :class:`KGPath`), CSR helpers (:func:`gather_rows`,
:func:`gather_neighbours`), the id spaces (:func:`get_space`), and which molecules the KG holds
(:func:`compound_index`: its compounds by InChIKey skeleton and name).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

from ddibench.kg._compounds import CompoundIndex, compound_index, compound_sources, skeleton
from ddibench.kg._graph import (
    IdSpace,
    KnowledgeGraph,
    gather_neighbours,
    gather_rows,
    get_space,
    map_to_space,
    split_visibility,
)
from ddibench.kg._hetionet import METAEDGES, Hetionet, build_hetionet, check_full_edge_file, hetionet_key
from ddibench.kg._paths import Path as KGPath
from ddibench.kg._paths import shortest_path, yen_paths

__all__ = [
    "METAEDGES",
    "CompoundIndex",
    "Hetionet",
    "IdSpace",
    "KGPath",
    "KnowledgeGraph",
    "build_hetionet",
    "check_full_edge_file",
    "compound_index",
    "compound_sources",
    "gather_neighbours",
    "gather_rows",
    "get_space",
    "interaction_graph",
    "interaction_label",
    "interaction_triples",
    "load_hetionet",
    "load_kg",
    "map_to_space",
    "shortest_path",
    "skeleton",
    "split_visibility",
    "touches_pair",
    "yen_paths",
]


@cache
def load_hetionet(full_edges: Path | None = None) -> Hetionet:
    from ddibench.artifacts import ArtifactStore
    from ddibench.data.resolve import cache_root

    store = ArtifactStore(cache_root() / "artifacts")
    path, _ = store.get_or_build("hetionet", hetionet_key(full_edges), lambda tmp: build_hetionet(full_edges).save(tmp))
    return Hetionet.load(path)


def load_kg(space: str = "drugbank", full_edges: str | Path | None = None) -> KnowledgeGraph:
    """The KG in an id space; ``full_edges`` as a system's ``kg_edges`` option gives it (``~`` expanded)."""
    return _load_kg(space, Path(full_edges).expanduser() if full_edges else None)


@cache
def _load_kg(space: str, full_edges: Path | None) -> KnowledgeGraph:
    drug_names = None
    if space == "drugbank":
        from ddibench.data.drugbank import load_catalog

        drug_names = [d.name for d in load_catalog().drugs]
    elif space == "twosides":
        from ddibench.data.twosides import load_catalog as load_twosides_catalog

        drug_names = [d.name for d in load_twosides_catalog().drugs]
    return map_to_space(load_hetionet(full_edges), get_space(space), drug_names)


def interaction_triples(samples: Sequence[Any]) -> list[tuple[int, int, int]]:
    """(head, tail, label) of each sample; a sample whose target is a label set gives one triple per label."""
    out: list[tuple[int, int, int]] = []
    for s in samples:
        h, t = s.pair.head.node_id, s.pair.tail.node_id
        labels = s.target if isinstance(s.target, (tuple, list)) else (s.target,)
        out.extend((h, t, int(label)) for label in labels)
    return out


def interaction_graph(
    samples: Sequence[Any],
    label_templates: Sequence[str],
    full_edges: str | Path | None = None,
    space: str = "drugbank",
) -> KnowledgeGraph:
    """The KG of an id space plus the interactions of ``samples`` (pass the training split only, so no
    retrieval index holds a validation or test pair), verbalised with the label templates. A task names
    its space in ``resources["kg_space"]`` (DrugBank when it names none)."""
    return load_kg(space, full_edges).with_interactions(
        interaction_triples(samples), templates=label_templates, note="training interactions"
    )


def interaction_label(kg: KnowledgeGraph, step: tuple[int, int, int]) -> int | None:
    """The interaction label id a step states (an edge added by :func:`interaction_graph`, read either
    way), or None for a KG relation. What a retrieval system's context says about labels: recorded as
    ``context_labels`` in its traces, from which ``ddibench report --ceilings`` scores an ideal reader."""
    relation = kg.canonical_relation(step[1]) % kg.n_relations
    return relation if relation < kg.card["relation_base"] else None


def touches_pair(kg: KnowledgeGraph, step: tuple[int, int, int], u: int, v: int) -> bool:
    """Whether a step is an interaction edge between u and v themselves (it would state their label)."""
    a, r, b = step
    return {a, b} == {u, v} and kg.canonical_relation(r) % kg.n_relations < kg.card["relation_base"]
