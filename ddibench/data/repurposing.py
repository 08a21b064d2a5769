"""The Broad Drug Repurposing Hub (2020-03-24 release): drugs with their mechanism of action (MoA),
protein targets (HGNC symbols) and structure.

Two pinned tables: ``repurposing_drugs`` (one row per drug name: clinical phase, MoA terms, targets,
disease area, indication) and ``repurposing_samples`` (one row per physical sample: Broad id, SMILES,
InChIKey, PubChem id). :func:`load_hub` joins them: a drug's structure is its first sample row (file
order) whose SMILES RDKit parses. Both tables begin with ``!`` lines (source, date, terms of use:
non-commercial use only), which are skipped.

The drug-target tasks are built from it, and a system may use its MoA text as an annotation of a
molecule (looked up by InChIKey).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import cache

from ddibench.data.resolve import fetch
from ddibench.data.sources import SourceFile, source
from ddibench.errors import DataError

DATASET = "repurposing-hub"
DRUGS = "metadata/moa/clue/repurposing_drugs_20200324.txt"
SAMPLES = "metadata/moa/clue/repurposing_samples_20200324.txt"


def hub_sources() -> tuple[SourceFile, ...]:
    return (source(DATASET, DRUGS), source(DATASET, SAMPLES))


@dataclass(frozen=True, slots=True)
class HubDrug:
    """One drug of the Repurposing Hub; ``smiles`` is empty when no sample of it has a parsable SMILES."""

    name: str  # pert_iname
    clinical_phase: str
    moa: tuple[str, ...]  # MoA terms, e.g. ("dopamine receptor agonist",)
    targets: tuple[str, ...]  # HGNC symbols
    disease_area: str
    indication: str
    broad_id: str  # the Broad id of the sample whose structure is used
    smiles: str
    inchikey: str  # as the Hub lists it for that sample

    def moa_text(self) -> str:
        """The MoA line as a reader would write it (an annotation of the molecule)."""
        parts = [f"{self.name}: " + "; ".join(self.moa) if self.moa else self.name]
        if self.targets:
            parts.append("targets " + ", ".join(self.targets))
        if self.clinical_phase:
            parts.append(self.clinical_phase.lower())
        if self.indication:
            parts.append("indication: " + self.indication.replace("|", ", "))
        return "; ".join(parts)


def _rows(path: str) -> list[dict[str, str]]:
    with open(path, encoding="utf-8", newline="") as fh:
        lines = [line for line in fh if not line.startswith("!")]
    return list(csv.DictReader(lines, delimiter="\t"))


@cache
def load_hub() -> tuple[HubDrug, ...]:
    """Every drug of the Hub in the drug table's order, joined with its first parsable sample structure."""
    from ddibench.chem import canonical_smiles

    drugs = _rows(str(fetch(source(DATASET, DRUGS))))
    samples = _rows(str(fetch(source(DATASET, SAMPLES))))
    expected = {"pert_iname", "clinical_phase", "moa", "target", "disease_area", "indication"}
    if (
        not drugs
        or not expected <= set(drugs[0])
        or not samples
        or not {"broad_id", "pert_iname", "smiles", "InChIKey"} <= set(samples[0])
    ):
        raise DataError(
            "the Repurposing Hub tables do not have the expected columns",
            "the pinned files are not the 2020-03-24 release",
        )
    structure: dict[str, tuple[str, str, str]] = {}
    for row in samples:
        name = row["pert_iname"]
        if name not in structure and row["smiles"] and canonical_smiles(row["smiles"]) is not None:
            structure[name] = (row["broad_id"], row["smiles"], row["InChIKey"])
    out = []
    for row in drugs:
        broad_id, smiles, key = structure.get(row["pert_iname"], ("", "", ""))
        out.append(
            HubDrug(
                name=row["pert_iname"],
                clinical_phase=row["clinical_phase"],
                moa=tuple(t for t in row["moa"].split("|") if t),
                targets=tuple(t for t in row["target"].split("|") if t),
                disease_area=row["disease_area"],
                indication=row["indication"],
                broad_id=broad_id,
                smiles=smiles,
                inchikey=key,
            )
        )
    return tuple(out)
