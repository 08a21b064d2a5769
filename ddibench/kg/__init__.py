"""The biomedical knowledge graph every KG-based system shares (Hetionet in EmerGNN id spaces).

``load_kg("drugbank")`` builds Hetionet from the pinned sources once (cached as an artifact keyed by
the recipe version and the sources' hashes), maps it into the id space, and returns a
:class:`KnowledgeGraph`. Pass ``full_edges`` (Hetionet's ``hetionet-v1.0-edges.sif.gz``) to include the
metaedges the pinned sources cannot rebuild.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from ddibench.kg.graph import KnowledgeGraph, get_space, map_to_space, split_visibility
from ddibench.kg.hetionet import Hetionet, build_hetionet, hetionet_key

__all__ = ["Hetionet", "KnowledgeGraph", "load_hetionet", "load_kg", "split_visibility"]


@cache
def load_hetionet(full_edges: Path | None = None) -> Hetionet:
    from ddibench.artifacts import ArtifactStore
    from ddibench.data.resolve import cache_root

    store = ArtifactStore(cache_root() / "artifacts")
    path, _ = store.get_or_build(
        "hetionet", hetionet_key(full_edges), lambda tmp: build_hetionet(full_edges).save(tmp)
    )
    return Hetionet.load(path)


@cache
def load_kg(space: str = "drugbank", full_edges: Path | None = None) -> KnowledgeGraph:
    drug_names = None
    if space == "drugbank":
        from ddibench.tasks.drugbank import load_catalog

        drug_names = [d.name for d in load_catalog().drugs]
    return map_to_space(load_hetionet(full_edges), get_space(space), drug_names)
