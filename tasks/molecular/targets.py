"""Drug targets: molecule -> the five human proteins (HGNC symbols) it most likely inhibits / activates.

The CLADD paper builds this benchmark from ChemPert, which is not available here; the Broad Drug
Repurposing Hub (2020-03-24, :mod:`ddibench.data.repurposing`) stands in, and every manifest says so.

**Direction from the MoA text.** Each MoA term of a drug has a polarity by how it ends: "inhibitor"
or "blocker" inhibit; "agonist", "activator" or "positive allosteric modulator" activate;
"inverse agonist", "antagonist", "modulator" and every other term have none (receptor-level or
ambiguous). A drug belongs to ``targets_inhibit`` when at least one of its terms inhibits and none
activates, to ``targets_activate`` the other way round; drugs with terms of both polarities, without a
listed target or without a parsable structure are left out. Gold = the Hub's target list of the drug.
Drugs with the same structure (canonical SMILES) are one molecule with the union of their targets.

**Slices.** A molecule is "overlap" when the project's knowledge graph already holds it (its
InChIKey skeleton or one of its names matches a KG compound: :func:`ddibench.kg.compound_index`), so
its target edges may be retrievable there; otherwise "no-overlap", the headline. Metrics: precision@5
(the paper's) and recall@5, each beside its ceiling, on the no-overlap molecules (primary), on all and
on the overlap ones; answers that name no known symbol are invalid and counted apart.

Split: the deterministic Bemis-Murcko scaffold split 80/10/10 (trained baselines learn from the
training molecules; the paper's systems are zero-shot).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal

from ddibench import families
from ddibench.data import SourceFile
from ddibench.schema import Label, LabelSpace, Sample, Target
from ddibench.task import AnswerSpec, Check
from ddibench.tasks.molecular.base import MolecularSpec, MolecularTask
from ddibench.tasks.molecular.molecules import SPLITS, DedupeStats, Entry, Row, deduplicate

if TYPE_CHECKING:
    from ddibench.evaluation import Evaluator

SLICES = ("no-overlap", "overlap")
# five HGNC symbols, most likely first, as JSON {"targets": [...]} (the form ddibench.toolkit.molecule_answers reads)
ANSWER = AnswerSpec(
    kind="top_k",
    k=5,
    max_tokens=96,
    system_prompt=(
        'You are an expert pharmacologist. Answer with JSON only, in the form {"targets": ["SYMBOL1", "SYMBOL2", "SYMBOL3", "SYMBOL4", "SYMBOL5"]}, '
        "using official HGNC gene symbols of human proteins, most likely first."
    ),
)


def polarity(term: str, rules: Mapping[str, Sequence[str]]) -> str | None:
    """ "inhibit", "activate" or None for one MoA term: the first rule whose ending (whole words: "antagonist"
    does not end with the word "agonist") the term has, "neither" first."""
    text = " ".join(term.strip().lower().split())
    for direction in ("neither", "inhibit", "activate"):
        if any(text == ending or text.endswith(" " + ending) for ending in rules.get(direction, [])):
            return None if direction == "neither" else direction
    return None


class TargetSpec(MolecularSpec):
    """A drug-target ``[tasks.NAME]`` table: the direction of the Hub's MoA terms and the counts every load checks."""

    kind: Literal["targets"]
    direction: Literal["inhibit", "activate"]
    kg_slices: dict[str, tuple[int, int]]  # molecules per split the KG lacks / holds (checked)
    n_labels: int  # target symbols in the label space (checked)


class TargetTask(MolecularTask):
    family = families.DRUG_TARGETS
    resource_keys = ("instruction", "kg_overlap")
    answer = ANSWER
    merge = "union"
    spec: TargetSpec

    def __init__(self, name: str, spec: TargetSpec, recipe_version: int, rules: dict[str, tuple[str, ...]]) -> None:
        super().__init__(name, spec, recipe_version)
        self.rules = rules
        self.direction = spec.direction

    @property
    def sources(self) -> tuple[SourceFile, ...]:
        from ddibench.data.repurposing import hub_sources
        from ddibench.kg import compound_sources

        return (*hub_sources(), *compound_sources("drugbank"))

    @cached_property
    def _read(self) -> tuple[list[Entry], DedupeStats]:
        from ddibench.data.repurposing import load_hub

        hub = load_hub()
        directed = with_targets = 0
        rows = []
        for drug in hub:
            directions = {polarity(t, self.rules) for t in drug.moa} - {None}
            if directions != {self.direction}:
                continue
            directed += 1
            if not drug.targets:
                continue
            with_targets += 1
            rows.append(Row(drug.smiles, frozenset(drug.targets), drug.name, drug.broad_id))
        entries, stats = deduplicate(rows, "union")
        stats.extra = {"Hub drugs": len(hub), f"{self.direction} by MoA": directed, "with targets": with_targets}
        return entries, stats

    def read(self) -> tuple[list[Entry], DedupeStats]:
        return self._read

    @cached_property
    def _labels(self) -> LabelSpace:
        symbols = sorted({t for e in self._read[0] for t in e.labels})
        return LabelSpace(tuple(Label(i, s, s) for i, s in enumerate(symbols)))

    @property
    def label_space(self) -> LabelSpace:
        return self._labels

    @cached_property
    def _label_ids(self) -> dict[str, int]:
        return {label.name: label.id for label in self._labels}

    def evaluator(self) -> Evaluator:
        from ddibench.evaluation import RankingEvaluator

        return RankingEvaluator(
            self.label_space,
            k=self.answer.k,
            metrics=("precision", "recall"),
            primary="precision",
            slice_key="kg",
            slices=SLICES,
            primary_slice="no-overlap",
        )

    def target(self, entry: Entry) -> Target:
        return tuple(sorted(self._label_ids[t] for t in entry.labels))

    def kg_entities(self, entry: Entry) -> tuple[int, ...]:
        from ddibench.kg import compound_index

        return compound_index("drugbank").match(entry.std.inchikey, entry.names)

    def meta(self, entry: Entry) -> dict[str, Any]:
        return {"kg": "overlap" if self.kg_entities(entry) else "no-overlap"}

    def resources(self, splits: dict[str, tuple[Sample, ...]]) -> dict[str, Any]:
        overlap: dict[str, tuple[int, ...]] = {}
        for entry in self._read[0]:
            found = self.kg_entities(entry)
            if found and entry.std.inchikey:
                overlap[entry.std.inchikey] = found
        # the KG entities each molecule matches (by InChIKey), so a system can tell what the KG holds about it
        return {**super().resources(splits), "kg_overlap": overlap}

    def dedupe_note(self) -> str:
        d = self.spec.dedupe
        return (
            f"drugs whose MoA terms {self.direction} (see polarity_rules) and that list a target: {d['rows']:,}, {d['unparsable']} of them "
            f"without a parsable structure; deduplicated by RDKit canonical SMILES, the targets of one structure merged -> {d['molecules']:,} molecules"
        )

    @property
    def deviations(self) -> tuple[str, ...]:
        return (
            "ChemPert (the CLADD paper's drug-target source) is not available here: the Broad Drug Repurposing Hub 2020-03-24 stands in; "
            "direction from its MoA text, gold = its target list (HGNC symbols)",
            *super().deviations,
        )

    def extra_checks(self, splits: dict[str, tuple[Sample, ...]]) -> list[Check]:
        found = {s: [sum(1 for x in splits[s] if x.meta["kg"] == name) for name in SLICES] for s in SPLITS}
        declared = {s: list(v) for s, v in self.spec.kg_slices.items()}
        return [
            Check(
                "KG overlap (no-overlap, overlap) per split",
                found == declared,
                ", ".join(f"{s} {found[s]}" for s in SPLITS) + ("" if found == declared else f" (declared {declared})"),
            ),
            Check(
                "label space",
                len(self.label_space) == self.spec.n_labels,
                f"{len(self.label_space):,} target symbols (declared {self.spec.n_labels:,})",
            ),
        ]

    def card(self) -> dict[str, Any]:
        card = super().card()
        card["direction"] = self.direction
        card["polarity_rules"] = self.rules
        card["n_labels"] = self.spec.n_labels
        return card
