"""CLADD's annotation database and captioning tool, from pinned files (standing in for PubChem and MolT5).

**Annotation database** (the paper: PubChem descriptions), looked up by the query's standard InChIKey
(RDKit; every source's structures keyed the same way):

* ``drugbank`` — DrugBank 4.2 descriptions (``dhimmel/drugbank`` ``data/drugbank.tsv``, keyed by the
  table's standard InChIKey);
* ``chebi20`` — ChEBI-20 descriptions (``blender-nlp/MolT5`` validation and test splits; the training
  split is not mirrored), keyed by RDKit from their SMILES;
* ``repurposing-hub`` — the Drug Repurposing Hub MoA line (MoA terms, targets, phase, indication),
  keyed by RDKit from the Hub's SMILES;
* ``pubchem`` — a user's own dump, by path: a TSV with a ``description`` column and an ``inchikey`` or
  ``smiles`` column.

The index (and the ChEBI-20 fingerprints) is built once per set of source hashes and kept as an artifact
(:func:`build_index`, :func:`use_index`).

**Captioning tool** (the paper: MolT5 generating a caption from SMILES; no weights offline): the ChEBI-20
description of the query's nearest Morgan-Tanimoto neighbour among the ChEBI-20 molecules, leaving out
molecules with the query's own InChIKey skeleton (their description would be the query's own
annotation). It is labelled as a neighbour's description wherever it appears.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from ddibench.data import SourceFile, fetch, source
from ddibench.errors import DataError
from ddibench.kg import skeleton
from ddibench.systems.cladd.userfiles import read_table

CHEBI = ("chebi20", ("ChEBI-20_data/validation.txt", "ChEBI-20_data/test.txt"))
SOURCES = ("drugbank", "chebi20", "repurposing-hub")


def annotation_sources() -> tuple[SourceFile, ...]:
    from ddibench.data.repurposing import hub_sources

    return (source("drugbank42", "data/drugbank.tsv"), *(source(CHEBI[0], p) for p in CHEBI[1]), *hub_sources())


@dataclass(frozen=True)
class Annotation:
    source: str
    text: str


@dataclass(frozen=True)
class Caption:
    text: str
    neighbour: str  # ChEBI id of the neighbour whose description is used
    similarity: float


def _key(smiles: str) -> str:
    from ddibench.chem import inchikey

    return inchikey(smiles)


@cache
def _chebi_rows() -> tuple[tuple[str, str, str], ...]:
    """(ChEBI id, SMILES, description) of every ChEBI-20 validation and test row."""
    out = []
    for rel in CHEBI[1]:
        with open(fetch(source(CHEBI[0], rel)), encoding="utf-8", newline="") as fh:
            for row in csv.DictReader(fh, delimiter="\t", quoting=csv.QUOTE_NONE):
                if row.get("SMILES") and row.get("description"):
                    out.append((row["CID"], row["SMILES"], row["description"].strip()))
    if not out:
        raise DataError("the ChEBI-20 files hold no rows", "the pinned files are not MolT5's ChEBI-20 splits")
    return tuple(out)


INDEX_RECIPE = 1
_loaded: dict[str, Any] = {}  # the index as read from its artifact (see use_index)


def index_key() -> dict[str, Any]:
    """What the annotation index is built from (its artifact key)."""
    return {"recipe": INDEX_RECIPE, "sources": sorted((s.relpath, s.sha256) for s in annotation_sources())}


def build_index(directory: Path) -> None:
    """Write the expert index and the ChEBI-20 fingerprints (RDKit work of about 20 CPU seconds) to ``directory``."""
    index = {k: [[a.source, a.text] for a in v] for k, v in expert_index().items()}
    (directory / "expert.json").write_text(json.dumps(index), encoding="utf-8")
    bits, skeletons = _chebi_matrix()
    np.savez_compressed(directory / "chebi.npz", bits=np.packbits(bits, axis=1), skeletons=np.asarray(skeletons))


def use_index(directory: Path) -> None:
    """Answer lookups and captions from an index built by :func:`build_index` (an artifact)."""
    if _loaded.get("path") == str(directory):
        return
    raw = json.loads((directory / "expert.json").read_text(encoding="utf-8"))
    with np.load(directory / "chebi.npz") as data:
        bits = np.unpackbits(data["bits"], axis=1)
        skeletons = tuple(str(x) for x in data["skeletons"])
    _loaded.update(
        path=str(directory),
        expert={k: tuple(Annotation(a, b) for a, b in v) for k, v in raw.items()},
        chebi=(bits, skeletons),
    )


def expert_index() -> dict[str, tuple[Annotation, ...]]:
    """Annotations of the pinned sources by standard InChIKey."""
    if "expert" in _loaded:
        return _loaded["expert"]  # type: ignore[no-any-return]
    return _expert_index()


@cache
def _expert_index() -> dict[str, tuple[Annotation, ...]]:
    from ddibench.data.repurposing import load_hub

    index: dict[str, list[Annotation]] = {}
    with open(fetch(source("drugbank42", "data/drugbank.tsv")), encoding="utf-8", newline="") as fh:
        for row in csv.DictReader(fh, delimiter="\t"):
            key = row.get("inchikey", "").removeprefix("InChIKey=")
            if key and row.get("description"):
                index.setdefault(key, []).append(
                    Annotation("drugbank", f"{row['name']}: {' '.join(row['description'].split())}")
                )
    for _, smiles, text in _chebi_rows():
        key = _key(smiles)
        if key:
            index.setdefault(key, []).append(Annotation("chebi20", text))
    for drug in load_hub():
        key = _key(drug.smiles) if drug.smiles else ""
        if key:
            index.setdefault(key, []).append(Annotation("repurposing-hub", drug.moa_text()))
    return {k: tuple(dict.fromkeys(v)) for k, v in index.items()}


@cache
def user_index(path: str) -> dict[str, tuple[Annotation, ...]]:
    """A user's PubChem-style dump: TSV with ``description`` and ``inchikey`` or ``smiles`` columns."""
    file, header, rows = read_table(
        path, "pubchem", "a TSV with description and inchikey (or smiles) columns", delimiter="\t"
    )
    cols = set(header)
    if "description" not in cols or not cols & {"inchikey", "smiles"}:
        raise DataError(
            f"{file} has no description column and inchikey or smiles column", "write a TSV with those columns"
        )
    index: dict[str, list[Annotation]] = {}
    for row in rows:
        key = (row.get("inchikey") or "").strip() or _key((row.get("smiles") or "").strip())
        if key and (row.get("description") or "").strip():
            index.setdefault(key, []).append(Annotation("pubchem", " ".join(row["description"].split())))
    return {k: tuple(v) for k, v in index.items()}


def lookup(inchikey: str, exclude: tuple[str, ...] = (), pubchem: str | None = None) -> list[Annotation]:
    """The annotations of a molecule (by standard InChIKey), leaving out the sources in ``exclude``."""
    if not inchikey:
        return []
    found = list(expert_index().get(inchikey, ()))
    if pubchem:
        found += user_index(pubchem).get(inchikey, ())
    return [a for a in found if a.source not in exclude]


def _chebi_matrix() -> tuple[np.ndarray, tuple[str, ...]]:
    if "chebi" in _loaded:
        return _loaded["chebi"]  # type: ignore[no-any-return]
    return _chebi_fingerprints()


@cache
def _chebi_fingerprints() -> tuple[np.ndarray, tuple[str, ...]]:
    from ddibench.chem import morgan_matrix

    rows = _chebi_rows()
    bits, _ = morgan_matrix([r[1] for r in rows])
    return bits, tuple(skeleton(_key(r[1])) for r in rows)


def neighbour_caption(smiles: str, inchikey: str) -> Caption | None:
    """The captioning tool's stand-in: the ChEBI-20 description of the nearest other molecule."""
    from ddibench.chem import morgan_matrix, tanimoto_matrix

    bits, skeletons = _chebi_matrix()
    query, failed = morgan_matrix([smiles])
    if failed:
        return None
    sims = np.asarray(tanimoto_matrix(query, bits)[0])
    own = skeleton(inchikey)
    if own:
        sims[np.asarray([s == own for s in skeletons])] = -1.0
    best = int(np.argmax(sims))
    if sims[best] < 0:
        return None
    cid, _, text = _chebi_rows()[best]
    return Caption(text, cid, round(float(sims[best]), 4))


@cache
def _drug_lines() -> dict[str, str]:
    out: dict[str, str] = {}
    with open(fetch(source("drugbank42", "data/drugbank.tsv")), encoding="utf-8", newline="") as fh:
        for row in csv.DictReader(fh, delimiter="\t"):
            text = " ".join((row.get("description") or "").split())
            if row.get("name") and text:
                out.setdefault(row["name"].lower(), text.split(". ")[0].rstrip(".") + ".")
    return out


def drug_line(name: str) -> str:
    """The first sentence of a KG drug's DrugBank 4.2 description, by name ("" when unknown)."""
    return _drug_lines().get(name.strip().lower(), "")
