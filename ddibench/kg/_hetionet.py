"""Hetionet v1.0, rebuilt by ddibench from pinned sources.

Nodes come from hetio/hetionet's node table (47,031 nodes). Edges, per metaedge:

* 16 metaedges verbatim from chizy7/HetioNet's neo4j-import files (``:START_ID(Kind)`` /
  ``:END_ID(Kind)`` headers, bare ids that get their ``Kind::`` prefix back);
* DpS from dhimmel/integrate's 5,000-edges-per-metaedge sample, which holds all 3,357 DpS edges;
* GpPW, PCiC and CcSE rebuilt by Hetionet's own recipe from dhimmel/pathways (pathways with more
  than one coding gene), dhimmel/drugcentral (classes of type Physiologic Effect, Mechanism of
  Action or Chemical/Ingredient) and SIDER 4.1 joined to DrugBank through PubChem ids.

Every metaedge is de-duplicated and restricted to edges whose endpoints are Hetionet nodes. Four
metaedges cannot be rebuilt from what is pinned: AeG, GpCC, GpMF (their inputs are not available)
and GpBP (which EmerGNN drops anyway). Users with Hetionet's full ``hetionet-v1.0-edges.sif.gz``
(sha256 ``611f0411…``) can pass it and get every metaedge.
"""

from __future__ import annotations

import csv
import gzip
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ddibench.data import SourceFile, fetch, source
from ddibench.errors import DataError
from ddibench.hashing import sha256_file

RECIPE_VERSION = 1
FULL_EDGES_SHA256 = "611f0411ac666be4e0270e54bbca67407e14720bfc3099311f0f5eec25c5a947"
FULL_EDGES_BYTES = 12401407

# abbreviation -> (metaedge name, source kind, target kind)
METAEDGES: dict[str, tuple[str, str, str]] = {
    "AdG": ("Anatomy - downregulates - Gene", "Anatomy", "Gene"),
    "AeG": ("Anatomy - expresses - Gene", "Anatomy", "Gene"),
    "AuG": ("Anatomy - upregulates - Gene", "Anatomy", "Gene"),
    "CbG": ("Compound - binds - Gene", "Compound", "Gene"),
    "CcSE": ("Compound - causes - Side Effect", "Compound", "Side Effect"),
    "CdG": ("Compound - downregulates - Gene", "Compound", "Gene"),
    "CpD": ("Compound - palliates - Disease", "Compound", "Disease"),
    "CrC": ("Compound - resembles - Compound", "Compound", "Compound"),
    "CtD": ("Compound - treats - Disease", "Compound", "Disease"),
    "CuG": ("Compound - upregulates - Gene", "Compound", "Gene"),
    "DaG": ("Disease - associates - Gene", "Disease", "Gene"),
    "DdG": ("Disease - downregulates - Gene", "Disease", "Gene"),
    "DlA": ("Disease - localizes - Anatomy", "Disease", "Anatomy"),
    "DpS": ("Disease - presents - Symptom", "Disease", "Symptom"),
    "DrD": ("Disease - resembles - Disease", "Disease", "Disease"),
    "DuG": ("Disease - upregulates - Gene", "Disease", "Gene"),
    "GcG": ("Gene - covaries - Gene", "Gene", "Gene"),
    "GiG": ("Gene - interacts - Gene", "Gene", "Gene"),
    "GpBP": ("Gene - participates - Biological Process", "Gene", "Biological Process"),
    "GpCC": ("Gene - participates - Cellular Component", "Gene", "Cellular Component"),
    "GpMF": ("Gene - participates - Molecular Function", "Gene", "Molecular Function"),
    "GpPW": ("Gene - participates - Pathway", "Gene", "Pathway"),
    "Gr>G": ("Gene > regulates > Gene", "Gene", "Gene"),
    "PCiC": ("Pharmacologic Class - includes - Compound", "Pharmacologic Class", "Compound"),
}

CHIZY7_FILES = {
    "AdG": "Anatomy_Downregulates_Gene",
    "AuG": "Anatomy_Upregulates_Gene",
    "CbG": "Compound_Binds_Gene",
    "CdG": "Compound_Downregulates_Gene",
    "CpD": "Compound_Palliates_Disease",
    "CrC": "Compound_Resembles_Compund",
    "CtD": "Compound_Treats_Disease",
    "CuG": "Compound_Upregulates_Gene",
    "DaG": "Disease_Associates_Gene",
    "DdG": "Disease_Downregulates_Gene",
    "DlA": "Disease_Localizes_Anatomy",
    "DrD": "Disease_Resembles_Disease",
    "DuG": "Disease_Upregulates_Gene",
    "GcG": "Gene_Covaries_Gene",
    "GiG": "Gene_Interacts_Gene",
    "Gr>G": "Gene_Regulates_Gene",
}
NOT_REBUILDABLE = ("AeG", "GpBP", "GpCC", "GpMF")
PCIC_CLASS_TYPES = {"Physiologic Effect", "Mechanism of Action", "Chemical/Ingredient"}


def _chizy7(abbrev: str) -> SourceFile:
    return source("hetionet-edges-chizy7", f"data/edges/{CHIZY7_FILES[abbrev]}.tsv")


def build_sources() -> tuple[SourceFile, ...]:
    """Every pinned file the build reads."""
    return (
        source("hetionet", "hetnet/tsv/hetionet-v1.0-nodes.tsv"),
        source("hetionet", "describe/edges/metaedges.tsv"),
        *(_chizy7(a) for a in CHIZY7_FILES),
        source("hetionet-integrate", "data/edges-5k.sif.gz"),
        source("hetionet-pathways", "data/pathways.tsv"),
        source("hetionet-drugcentral", "rephetio/classes.tsv"),
        source("hetionet-drugcentral", "rephetio/drug-to-class.tsv"),
        source("hetionet-sider4", "download/meddra_all_se.tsv.gz"),
        source("hetionet-drugbank-pubchem", "data/mapping/pubchem.tsv"),
    )


@dataclass
class Hetionet:
    """Hetionet nodes and the edges of each metaedge as (source, target) node-index arrays."""

    node_ids: list[str]  # "Kind::identifier", in the node table's order
    node_names: list[str]
    node_kinds: list[str]
    edges: dict[str, np.ndarray]  # abbreviation -> int32 array (n, 2) of node indices
    provenance: dict[str, str]
    published_counts: dict[str, int]
    dropped: dict[str, int] = field(default_factory=dict)  # edges dropped for an endpoint outside the node table
    full_edges_sha256: str | None = None

    @property
    def missing(self) -> list[str]:
        return [a for a in METAEDGES if a not in self.edges]

    def index(self) -> dict[str, int]:
        return {node: i for i, node in enumerate(self.node_ids)}

    def n_edges(self) -> int:
        return sum(len(e) for e in self.edges.values())

    def sorted_edge_ids(self, abbrev: str) -> list[tuple[str, str]]:
        """Edges of one metaedge as (source id, target id), sorted as strings (the reference files' order)."""
        ids = self.node_ids
        return sorted((ids[s], ids[t]) for s, t in self.edges[abbrev])

    def card(self) -> dict[str, object]:
        return {
            "recipe_version": RECIPE_VERSION,
            "nodes": len(self.node_ids),
            "edges": self.n_edges(),
            "edges_by_metaedge": {a: int(len(e)) for a, e in sorted(self.edges.items())},
            "published_edges_by_metaedge": self.published_counts,
            "missing_metaedges": {a: self.published_counts.get(a, 0) for a in self.missing},
            "provenance": self.provenance,
            "full_edge_file_sha256": self.full_edges_sha256,
        }

    # -- persistence (the build is cached as an artifact) ----------------------------------

    def save(self, directory: Path) -> None:
        np.savez_compressed(directory / "edges.npz", **{_safe(a): e for a, e in self.edges.items()})  # type: ignore[arg-type]
        meta = {
            "node_ids": self.node_ids,
            "node_names": self.node_names,
            "node_kinds": self.node_kinds,
            "provenance": self.provenance,
            "published_counts": self.published_counts,
            "dropped": self.dropped,
            "full_edges_sha256": self.full_edges_sha256,
            "metaedges": list(self.edges),
        }
        (directory / "hetionet.json").write_text(json.dumps(meta), encoding="utf-8")

    @classmethod
    def load(cls, directory: Path) -> Hetionet:
        meta = json.loads((directory / "hetionet.json").read_text(encoding="utf-8"))
        with np.load(directory / "edges.npz") as npz:
            edges = {a: npz[_safe(a)] for a in meta["metaedges"]}
        return cls(
            meta["node_ids"],
            meta["node_names"],
            meta["node_kinds"],
            edges,
            meta["provenance"],
            meta["published_counts"],
            meta["dropped"],
            meta["full_edges_sha256"],
        )


def _safe(abbrev: str) -> str:
    return abbrev.replace(">", "_")


def _tsv_rows(path: Path) -> Iterator[list[str]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8", newline="") as fh:  # type: ignore[operator]
        yield from csv.reader(fh, delimiter="\t")


def _read_nodes() -> tuple[list[str], list[str], list[str]]:
    rows = _tsv_rows(fetch(source("hetionet", "hetnet/tsv/hetionet-v1.0-nodes.tsv")))
    header = next(rows)
    if header != ["id", "name", "kind"]:
        raise DataError(f"hetionet-v1.0-nodes.tsv: unexpected header {header}")
    ids, names, kinds = [], [], []
    for row in rows:
        ids.append(row[0])
        names.append(row[1])
        kinds.append(row[2])
    return ids, names, kinds


def _published_counts() -> dict[str, int]:
    rows = _tsv_rows(fetch(source("hetionet", "describe/edges/metaedges.tsv")))
    header = next(rows)
    col = {name: i for i, name in enumerate(header)}
    return {row[col["abbreviation"]]: int(row[col["edges"]]) for row in rows}


def _chizy7_edges(abbrev: str) -> Iterator[tuple[str, str]]:
    rows = _tsv_rows(fetch(_chizy7(abbrev)))
    header = next(rows)
    kinds = [h[h.index("(") + 1 : h.index(")")] for h in header]
    _, src_kind, dst_kind = METAEDGES[abbrev]
    if kinds != [src_kind, dst_kind]:
        raise DataError(f"{CHIZY7_FILES[abbrev]}.tsv: header kinds {kinds}, expected {[src_kind, dst_kind]}")
    for row in rows:
        if row:
            yield f"{src_kind}::{row[0]}", f"{dst_kind}::{row[1]}"


def _sample_edges(abbrev: str) -> Iterator[tuple[str, str]]:
    rows = _tsv_rows(fetch(source("hetionet-integrate", "data/edges-5k.sif.gz")))
    next(rows)
    for src, metaedge, dst in rows:
        if metaedge == abbrev:
            yield src, dst


def _pathway_edges() -> Iterator[tuple[str, str]]:
    rows = _tsv_rows(fetch(source("hetionet-pathways", "data/pathways.tsv")))
    header = next(rows)
    col = {name: i for i, name in enumerate(header)}
    for row in rows:
        if int(row[col["n_coding_genes"]]) > 1:
            for gene in filter(None, row[col["coding_genes"]].split("|")):
                yield f"Gene::{int(gene)}", f"Pathway::{row[col['identifier']]}"


def _pharmacologic_class_edges() -> Iterator[tuple[str, str]]:
    rows = _tsv_rows(fetch(source("hetionet-drugcentral", "rephetio/classes.tsv")))
    header = next(rows)
    col = {name: i for i, name in enumerate(header)}
    keep = {row[col["class_id"]] for row in rows if row[col["class_type"]] in PCIC_CLASS_TYPES}
    rows = _tsv_rows(fetch(source("hetionet-drugcentral", "rephetio/drug-to-class.tsv")))
    header = next(rows)
    col = {name: i for i, name in enumerate(header)}
    for row in rows:
        if row[col["class_id"]] in keep:
            yield f"Pharmacologic Class::{row[col['class_id']]}", f"Compound::{row[col['drugbank_id']]}"


def _side_effect_edges() -> Iterator[tuple[str, str]]:
    rows = _tsv_rows(fetch(source("hetionet-drugbank-pubchem", "data/mapping/pubchem.tsv")))
    next(rows)
    by_cid: dict[int, list[str]] = {}
    for drugbank_id, pubchem_id in rows:
        if drugbank_id and pubchem_id:
            by_cid.setdefault(int(pubchem_id), []).append(drugbank_id)
    # columns: stitch_id_flat, stitch_id_stereo, umls_cui_from_label, meddra_type, umls_cui_from_meddra, name
    for row in _tsv_rows(fetch(source("hetionet-sider4", "download/meddra_all_se.tsv.gz"))):
        if len(row) < 6 or not row[1] or not row[4]:
            continue
        for drugbank_id in by_cid.get(int(row[1][3:]), ()):
            yield f"Compound::{drugbank_id}", f"Side Effect::{row[4]}"


def _full_file_edges(path: Path) -> dict[str, list[tuple[str, str]]]:
    out: dict[str, list[tuple[str, str]]] = {}
    rows = _tsv_rows(path)
    next(rows)
    for src, metaedge, dst in rows:
        out.setdefault(metaedge, []).append((src, dst))
    return out


def _as_array(pairs: Iterable[tuple[str, str]], index: dict[str, int]) -> tuple[np.ndarray, int]:
    """Unique (source, target) node-index pairs sorted as strings; and how many were dropped as unknown."""
    unique = sorted(set(pairs))
    kept = [(index[s], index[t]) for s, t in unique if s in index and t in index]
    return np.asarray(kept, dtype=np.int32).reshape(-1, 2), len(unique) - len(kept)


def build_hetionet(full_edges: Path | None = None) -> Hetionet:
    """Build Hetionet from the pinned sources (or from a user's full edge file)."""
    ids, names, kinds = _read_nodes()
    index = {node: i for i, node in enumerate(ids)}
    published = _published_counts()
    edges: dict[str, np.ndarray] = {}
    provenance: dict[str, str] = {}
    dropped: dict[str, int] = {}
    full_sha = None
    if full_edges is not None:
        full_sha = check_full_edge_file(full_edges)
        for abbrev, pairs in _full_file_edges(full_edges).items():
            if abbrev not in METAEDGES:
                raise DataError(
                    f"{full_edges}: unknown metaedge {abbrev!r}", "pass Hetionet v1.0's hetionet-v1.0-edges.sif.gz"
                )
            edges[abbrev], dropped[abbrev] = _as_array(pairs, index)
            provenance[abbrev] = f"user's full Hetionet edge file (sha256 {full_sha[:12]}…)"
    else:
        builders: dict[str, tuple[Any, str]] = {
            **{
                a: (lambda a=a: _chizy7_edges(a), "chizy7/HetioNet data/edges (verbatim Hetionet subset)")
                for a in CHIZY7_FILES
            },
            "DpS": (lambda: _sample_edges("DpS"), "dhimmel/integrate data/edges-5k.sif.gz (complete for DpS)"),
            "GpPW": (_pathway_edges, "rebuilt from dhimmel/pathways data/pathways.tsv (n_coding_genes > 1)"),
            "PCiC": (_pharmacologic_class_edges, "rebuilt from dhimmel/drugcentral rephetio classes"),
            "CcSE": (_side_effect_edges, "rebuilt from SIDER 4.1 via DrugBank-PubChem mapping"),
        }
        for abbrev, (make, where) in builders.items():
            edges[abbrev], dropped[abbrev] = _as_array(make(), index)
            provenance[abbrev] = where
        for abbrev in NOT_REBUILDABLE:
            provenance[abbrev] = "missing: its inputs are not among the pinned sources"
    for abbrev, array in edges.items():
        if len(array) == 0:
            raise DataError(f"Hetionet metaedge {abbrev} came out empty", "the sources changed; report it")
        if not _kinds_match(array, kinds, abbrev):
            raise DataError(
                f"Hetionet metaedge {abbrev} joins nodes of the wrong kinds", "the sources changed; report it"
            )
    return Hetionet(ids, names, kinds, dict(sorted(edges.items())), provenance, published, dropped, full_sha)


def _kinds_match(array: np.ndarray, kinds: list[str], abbrev: str) -> bool:
    _, src_kind, dst_kind = METAEDGES[abbrev]
    src = {kinds[i] for i in np.unique(array[:, 0])}
    dst = {kinds[i] for i in np.unique(array[:, 1])}
    return src == {src_kind} and dst == {dst_kind}


def check_full_edge_file(path: Path) -> str:
    if not path.is_file():
        raise DataError(f"Hetionet edge file {path} does not exist", "give the path of hetionet-v1.0-edges.sif.gz")
    digest = sha256_file(path)
    if digest != FULL_EDGES_SHA256:
        raise DataError(
            f"{path} has sha256 {digest[:12]}…, not Hetionet v1.0's hetionet-v1.0-edges.sif.gz ({FULL_EDGES_SHA256[:12]}…)",
            "use the file from hetio/hetionet hetnet/tsv (Git LFS object, 12,401,407 bytes)",
        )
    return digest


def hetionet_key(full_edges: Path | None) -> dict[str, object]:
    return {
        "recipe": RECIPE_VERSION,
        "sources": sorted((s.relpath, s.sha256) for s in build_sources()),
        "full_edges_sha256": FULL_EDGES_SHA256 if full_edges is not None else None,
    }
