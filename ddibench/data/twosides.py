"""The TWOSIDES id space of EmerGNN, KnowDDI (BioSNAP) and TextDDI: 604 drugs and 200 side effects.

* :func:`load_labels` — the 200 side effects (index -> UMLS CUI from EmerGNN's ``id2relation.json``,
  index -> name from TextDDI's ``id2relation.json``; the two are joined on the index). EmerGNN's TWOSIDES
  ``relation2id.json`` does not describe these labels and is not read.
* :func:`load_catalog` — the 604 drugs (node ids 0..603): PubChem CID, DrugBank id (335 drugs have one)
  and SMILES from EmerGNN's ``id2drug.json``, the PubChem name and summary from TextDDI's
  ``twosides_dict_revised.json`` (keyed by the CID as an integer). The join is checked and the checks
  travel with the catalog.

These are source data, read from pinned files; the tasks built on them live in ``ddibench.tasks.twosides``
and the knowledge graph uses the names (``ddibench.kg.load_kg("twosides")``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache

from ddibench.data.drugbank import CatalogCheck
from ddibench.data.resolve import fetch
from ddibench.data.sources import SourceFile, source
from ddibench.errors import DataError
from ddibench.schema import Drug, Label, LabelSpace

N_DRUGS = 604
N_LABELS = 200
N_WITH_DRUGBANK_ID = 335

LABEL_CUIS = ("emergnn-twosides-ddi", "id2relation.json")
LABEL_NAMES = ("textddi-twosides", "data/twosides/id2relation.json")
DRUG_IDS = ("emergnn-twosides", "data/id2drug.json")
DRUG_NAMES = ("textddi-twosides", "data/twosides/twosides_dict_revised.json")

# how a side effect reads as the label of a drug pair (#Drug1 / #Drug2 as in the DrugBank templates)
TEMPLATE = "#Drug1 and #Drug2 taken together are associated with the side effect {name}."


def catalog_sources() -> tuple[SourceFile, ...]:
    """The pinned files the label space and the drug catalog are read from."""
    return tuple(source(*ref) for ref in (LABEL_CUIS, LABEL_NAMES, DRUG_IDS, DRUG_NAMES))


def _json(ref: tuple[str, str]) -> dict:
    return json.loads(fetch(source(*ref)).read_text(encoding="utf-8"))


@cache
def load_cuis() -> tuple[str, ...]:
    """The UMLS CUI of each side effect, by label id."""
    raw = _json(LABEL_CUIS)
    if sorted(raw, key=int) != [str(i) for i in range(N_LABELS)]:
        raise DataError(
            f"id2relation.json: expected side-effect ids 0..{N_LABELS - 1}",
            "the pinned file is not EmerGNN's TWOSIDES label list",
        )
    return tuple(raw[str(i)] for i in range(N_LABELS))


@cache
def load_labels() -> LabelSpace:
    names = _json(LABEL_NAMES)
    load_cuis()  # the CUI list must cover the same ids
    if sorted(names, key=int) != [str(i) for i in range(N_LABELS)] or not all(str(v).strip() for v in names.values()):
        raise DataError(
            f"TextDDI id2relation.json: expected a name for side effects 0..{N_LABELS - 1}",
            "the pinned file is not TextDDI's",
        )
    labels = []
    for i in range(N_LABELS):
        name = " ".join(names[str(i)].split())
        labels.append(Label(id=i, template=TEMPLATE.format(name=name), name=name))
    return LabelSpace(tuple(labels))


@dataclass(frozen=True)
class TwosidesCatalog:
    """The 604 drugs of the TWOSIDES id space (index = node id). ``drugbank_id`` is "" for 269 of them."""

    drugs: tuple[Drug, ...]
    cids: tuple[str, ...]  # PubChem CID as EmerGNN writes it ("CID000002173"); the drug's stable key
    summaries: tuple[str, ...]  # PubChem summary ("" when PubChem has none)
    checks: tuple[CatalogCheck, ...]

    def __len__(self) -> int:
        return len(self.drugs)

    def __getitem__(self, node_id: int) -> Drug:
        return self.drugs[node_id]


@cache
def load_catalog() -> TwosidesCatalog:
    ids = _json(DRUG_IDS)
    pubchem = _json(DRUG_NAMES)
    if sorted(ids, key=int) != [str(i) for i in range(N_DRUGS)]:
        raise DataError(
            f"id2drug.json: expected node ids 0..{N_DRUGS - 1}", "the pinned file is not EmerGNN's TWOSIDES drug list"
        )
    drugs, cids, summaries = [], [], []
    unnamed, no_smiles = [], []
    for node in range(N_DRUGS):
        entry = ids[str(node)]
        cid = str(entry["cid"])
        if not cid.startswith("CID") or not cid[3:].isdigit():
            raise DataError(
                f"id2drug.json: node {node} has CID {cid!r}", "the pinned file is not EmerGNN's TWOSIDES drug list"
            )
        info = pubchem.get(str(int(cid[3:]))) or {}
        name = " ".join(str(info.get("name") or "").split())
        if not name:
            unnamed.append(cid)
            name = cid
        smiles = str(entry.get("smiles") or "").strip()
        if not smiles:
            no_smiles.append(cid)
        drugs.append(Drug(node_id=node, drugbank_id=str(entry.get("db") or ""), name=name, smiles=smiles))
        cids.append(cid)
        summaries.append(" ".join(str(info.get("summary") or "").split()))
    with_db = sum(1 for d in drugs if d.drugbank_id)
    checks = (
        CatalogCheck(
            "catalog size",
            len(drugs) == N_DRUGS and len(set(cids)) == N_DRUGS,
            f"{len(drugs)} drugs, {len(set(cids))} distinct CIDs",
        ),
        CatalogCheck(
            "PubChem names (TextDDI) for every CID", not unnamed, f"{N_DRUGS - len(unnamed)} of {N_DRUGS} named"
        ),
        CatalogCheck("SMILES present", not no_smiles, f"{N_DRUGS - len(no_smiles)} of {N_DRUGS} drugs"),
        CatalogCheck(
            "DrugBank ids", with_db == N_WITH_DRUGBANK_ID, f"{with_db} drugs have one (expected {N_WITH_DRUGBANK_ID})"
        ),
    )
    return TwosidesCatalog(tuple(drugs), tuple(cids), tuple(summaries), checks)
