"""The DrugBank DDI id space shared by the DrugBank tasks, the knowledge graph and the systems.

* :func:`load_labels` — the 86 interaction types (EmerGNN's ``relation2id.json`` templates; ``#Drug1``
  is the first (head) drug of a triple, ``#Drug2`` the second).
* :func:`load_catalog` — the 1,710 drugs (EmerGNN/SumGNN node ids 0..1709): EmerGNN's ``node2id.json``
  (DrugBank ids) joined with DDI-Ben's approval-date sheet and DDI-GPT names, and DDI-Ben-code's
  SMILES; the join is checked (sizes, node ids, names, SMILES) and the checks travel with the catalog.

These are source data, read from pinned files; the task definitions built on them live in
``ddibench.tasks.drugbank``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import date
from functools import cache

from ddibench.data.resolve import fetch
from ddibench.data.sources import SourceFile, source
from ddibench.data.xlsx import read_first_sheet
from ddibench.errors import DataError
from ddibench.schema import Drug, Label, LabelSpace

N_DRUGS = 1710
N_LABELS = 86

LABELS = ("emergnn-drugbank", "DrugBank/data/relation2id.json")
DRUG_IDS = ("emergnn-drugbank", "DrugBank/data/node2id.json")
DRUG_NAMES = ("ddiben-drugbank", "DDI_Ben/DDI-GPT/data/drugbank/drug_DDI_GPT.json")
APPROVAL_SHEET = ("ddiben-drugbank", "Real Scene/drug_info_with_approval_date.xlsx")
SMILES = ("ddiben-code-smiles", "DDI_Ben/DDI_ben/data/initial/drugbank/DB2SMILES.json")


def catalog_sources() -> tuple[SourceFile, ...]:
    """The pinned files the label space and the drug catalog are read from."""
    return tuple(source(*ref) for ref in (LABELS, DRUG_IDS, DRUG_NAMES, APPROVAL_SHEET, SMILES))


@dataclass(frozen=True, slots=True)
class CatalogCheck:
    """One verification of the catalog join (tasks report it with their own checks)."""

    name: str
    ok: bool
    detail: str


@cache
def load_labels() -> LabelSpace:
    path = fetch(source(*LABELS))
    raw = json.loads(path.read_text(encoding="utf-8"))
    # ids 0..85 are the DDI types; EmerGNN's file continues with the KG metaedges (86 GiG .. 108 AeG)
    if any("#Drug" not in raw.get(str(i), "") for i in range(N_LABELS)):
        raise DataError(
            f"{path.name}: expected DDI templates for relation ids 0..{N_LABELS - 1}",
            "the pinned file is not EmerGNN's",
        )
    return LabelSpace(
        tuple(Label(id=i, template=raw[str(i)].strip(), name=raw[str(i)].strip()) for i in range(N_LABELS))
    )


_EXACT_DATE = re.compile(r"(\d{4})/(\d{2})/(\d{2})")


def approval_date(text: str) -> date | None:
    """A date of DDI-Ben's approval sheet ("2000/04/12") as a date; None where the sheet gives none
    ("Not Found", "Approved Prior to Jan 1, 1982", "--", empty): DDI-Ben's approval-time split leaves those
    drugs out."""
    m = _EXACT_DATE.fullmatch(text.strip())
    return date(int(m[1]), int(m[2]), int(m[3])) if m else None


@dataclass(frozen=True)
class DrugCatalog:
    """The 1,710 drugs of the DrugBank DDI id space (index = node id)."""

    drugs: tuple[Drug, ...]
    approval_dates: tuple[str, ...]  # as written in DDI-Ben's sheet ("2000/04/12", "Approved Prior to ...")
    checks: tuple[CatalogCheck, ...]

    def __len__(self) -> int:
        return len(self.drugs)

    def __getitem__(self, node_id: int) -> Drug:
        return self.drugs[node_id]

    @property
    def by_drugbank_id(self) -> dict[str, Drug]:
        return {d.drugbank_id: d for d in self.drugs}


@cache
def load_catalog() -> DrugCatalog:
    node2id: dict[str, int] = json.loads(fetch(source(*DRUG_IDS)).read_text(encoding="utf-8"))
    gpt: dict[str, dict[str, str]] = json.loads(fetch(source(*DRUG_NAMES)).read_text(encoding="utf-8"))
    smiles: dict[str, str] = json.loads(fetch(source(*SMILES)).read_text(encoding="utf-8"))
    sheet = read_first_sheet(fetch(source(*APPROVAL_SHEET)))[1:]  # skip the header row

    if sorted(node2id.values()) != list(range(N_DRUGS)):
        raise DataError(f"node2id.json: expected node ids 0..{N_DRUGS - 1}", "the pinned file is not EmerGNN's")
    by_node = {node: db_id for db_id, node in node2id.items()}
    rows = {row.get("A"): row for row in sheet if row.get("A")}

    drugs: list[Drug] = []
    dates: list[str] = []
    sheet_node_mismatch = 0
    sheet_name_differs = 0
    missing_smiles = []
    for node in range(N_DRUGS):
        db_id = by_node[node]
        row = rows.get(db_id, {})
        if row and row.get("B") is not None and int(float(row["B"])) != node:
            sheet_node_mismatch += 1
        gpt_name = (gpt.get(str(node)) or {}).get("name", "").strip()
        name = (row.get("C") or "").strip() or gpt_name
        if gpt_name and name != gpt_name:
            sheet_name_differs += 1
        if not name:
            raise DataError(f"drug {db_id} (node {node}) has no name in the pinned sources", "report it")
        smi = smiles.get(db_id, "").strip()
        if not smi:
            missing_smiles.append(db_id)
        drugs.append(Drug(node_id=node, drugbank_id=db_id, name=name, smiles=smi))
        dates.append((row.get("D") or "").strip())

    checks = (
        CatalogCheck("catalog size", len(drugs) == N_DRUGS, f"{len(drugs)} drugs"),
        CatalogCheck(
            "approval sheet node ids",
            sheet_node_mismatch == 0 and len(rows) == N_DRUGS,
            f"{len(rows)} sheet rows, {sheet_node_mismatch} whose node id differs from node2id.json",
        ),
        CatalogCheck("names agree (sheet vs DDI-GPT)", sheet_name_differs == 0, f"{sheet_name_differs} differ"),
        CatalogCheck("SMILES present", not missing_smiles, f"{N_DRUGS - len(missing_smiles)} of {N_DRUGS} drugs"),
    )
    return DrugCatalog(tuple(drugs), tuple(dates), checks)


def find_drug(text: str) -> Drug | None:
    """A catalog drug by DrugBank id, exact name (any case), node id or a synonym
    (:func:`find_drug_by_synonym`); None when nothing matches."""
    catalog = load_catalog()
    by_db = catalog.by_drugbank_id
    if text.upper() in by_db:
        return by_db[text.upper()]
    lowered = text.strip().lower()
    for drug in catalog.drugs:
        if drug.name.lower() == lowered:
            return drug
    if text.isdigit() and int(text) < len(catalog):
        return catalog[int(text)]
    found = find_drug_by_synonym(text)
    return found[0] if found else None


def find_drug_by_synonym(text: str) -> tuple[Drug, str] | None:
    """A catalog drug through another name for it, and how it was found; None when nothing matches.

    The catalog holds one name per drug (DrugBank's: "Acetylsalicylic acid"); the pinned Drug
    Repurposing Hub names drugs as clinicians do ("aspirin") and gives each a structure. A Hub name
    (any case) leads to its InChIKey, and that to the catalog drug with the same key, or failing that
    the same first block (the connectivity: a salt or another stereo form of the same compound).
    Needs RDKit (the ``ml`` extra) for the catalog's keys; without it, or without the Hub's files, no
    synonym is found.
    """
    from ddibench.data.repurposing import load_hub
    from ddibench.errors import DdibenchError

    wanted = text.strip().lower()
    try:
        hub = [d for d in load_hub() if d.name.lower() == wanted and d.inchikey]
        if not hub:
            return None
        by_key, by_block = _catalog_inchikeys()
    except (ImportError, DdibenchError):
        return None
    for entry in hub:
        if entry.inchikey in by_key:
            return by_key[
                entry.inchikey
            ], f"the Drug Repurposing Hub's '{entry.name}' has its InChIKey {entry.inchikey}"
    for entry in hub:
        block = entry.inchikey.split("-")[0]
        if block in by_block:
            return by_block[
                block
            ], f"the Drug Repurposing Hub's '{entry.name}' has its InChIKey skeleton {block} (a salt or stereo form)"
    return None


@cache
def _catalog_inchikeys() -> tuple[dict[str, Drug], dict[str, Drug]]:
    """The catalog's drugs by the InChIKey of their SMILES and by its first block (the first drug wins)."""
    from ddibench.chem import inchikey

    by_key: dict[str, Drug] = {}
    by_block: dict[str, Drug] = {}
    for drug in load_catalog().drugs:
        key = inchikey(drug.smiles) if drug.smiles else ""
        if key:
            by_key.setdefault(key, drug)
            by_block.setdefault(key.split("-")[0], drug)
    return by_key, by_block
