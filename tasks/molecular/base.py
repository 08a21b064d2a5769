"""What every molecular task shares: samples of one molecule, deduplication, splits and their checks.

A task reads its rows (:meth:`MolecularTask.read`), deduplicates them by canonical SMILES
(:mod:`ddibench.tasks.molecular.molecules`), splits them (the upstream split files, or the
deterministic Bemis-Murcko scaffold split 80/10/10 of :func:`ddibench.chem.scaffold_split`) and
verifies, every time it loads, what ``tasks.toml`` declares: the counts before and after deduplication,
the split sizes, and that no scaffold (scaffold splits) or molecule crosses splits.

A sample's input is a :class:`~ddibench.schema.Molecule` (canonical SMILES, InChIKey, name, source id);
its cluster key is its scaffold (molecules without a ring are their own cluster), so the bootstrap
resamples scaffolds; ``meta["split"]`` names its split.
"""

from __future__ import annotations

from abc import abstractmethod
from collections import Counter
from types import MappingProxyType
from typing import Any, Literal

from ddibench.chem import scaffold_split
from ddibench.data import SourceFile, fetch, source
from ddibench.schema import Molecule, Sample, Target, sample_id
from ddibench.task import Check, FamilySpec, Task, TaskData, TaskSpec, require
from ddibench.tasks.molecular.molecules import SPLITS, DedupeStats, Entry

DEDUPE_RULE = (
    "deduplicated by RDKit canonical SMILES: duplicate rows that agree on the label are kept once, "
    "structures whose rows disagree are dropped"
)


class MolecularFamilySpec(FamilySpec):
    """The ``[family]`` table: how a Drug Repurposing Hub MoA term gets a direction (the target tasks)."""

    target_polarity: dict[str, tuple[str, ...]]  # direction -> the term endings that give it ("neither" first)


class MolecularSpec(TaskSpec):
    """What every molecular ``[tasks.NAME]`` table declares: where the rows come from, how they are split, and the
    counts every load checks. Each kind of task (``kind``) adds its own keys."""

    dataset: str = ""  # the pinned dataset of ``file``/``files`` (empty where the family module names its sources)
    file: str | None = None  # one file, split here by scaffold
    files: dict[str, str] | None = None  # upstream's split files, kept as published
    fractions: tuple[float, float, float] = (0.8, 0.1, 0.1)  # train/valid/test shares of the scaffold split
    scaffold_order: Literal["balanced", "deepchem"] = "balanced"
    instruction: str  # what a system is asked, in words
    dedupe: dict[str, int]  # counts before and after deduplication (checked)
    sizes: dict[str, int]  # molecules per split (checked)
    paper: int | None = None  # the size the CLADD paper reports
    paper_note: str = ""  # why ours differs from the paper's, or "equal"
    deviations: tuple[str, ...] = ()


class MolecularTask(Task):
    input_kind = "molecule"
    cluster_unit = "scaffolds"
    merge = "agree"  # how duplicate rows of one structure combine (see molecules.deduplicate)

    spec: MolecularSpec

    def __init__(self, name: str, spec: MolecularSpec, recipe_version: int) -> None:
        self.name = name
        self.spec = spec
        self.version = spec.version
        self.setting = spec.setting
        self.title = spec.title
        self.recipe_version = recipe_version

    # -- definition --------------------------------------------------------------------------

    def files(self) -> list[str]:
        if self.spec.files is not None:
            return [self.spec.files[s] for s in SPLITS]
        return [self.spec.file] if self.spec.file else []

    @property
    def sources(self) -> tuple[SourceFile, ...]:
        return tuple(source(self.spec.dataset, f) for f in self.files())

    def path(self, rel: str) -> str:
        return str(fetch(source(self.spec.dataset, rel)))

    @property
    def fractions(self) -> tuple[float, float, float]:
        return self.spec.fractions

    @property
    def split_description(self) -> str:
        if self.spec.files is not None:
            return "the upstream split files"
        share = "/".join(f"{round(100 * f)}" for f in self.fractions)
        rule = (
            "DeepChem's order (MoleculeNet/OGB)"
            if self.spec.scaffold_order == "deepchem"
            else "balanced order (large sets first, then by scaffold hash)"
        )
        return f"deterministic Bemis-Murcko scaffold split {share}, {rule}"

    @property
    def instruction(self) -> str:
        return self.spec.instruction

    def dedupe_note(self) -> str:
        d = self.spec.dedupe
        note = f"{DEDUPE_RULE}: {d['rows']:,} rows, {d['unique']:,} distinct structures"
        if d.get("conflicting_groups"):
            note += (
                f", {d['conflicting_groups']} of them labelled both ways in {d['conflicting_rows']} rows and dropped"
            )
        note += f" -> {d['molecules']:,} molecules"
        if self.spec.paper is not None:
            note += f" (the paper: {self.spec.paper:,}; {self.spec.paper_note})"
        return note

    @property
    def deviations(self) -> tuple[str, ...]:
        return (self.dedupe_note(), *self.spec.deviations)

    def card(self) -> dict[str, Any]:
        card = super().card()
        card["expected_sizes"] = dict(self.spec.sizes)
        card["split"] = self.split_description
        card["instruction"] = self.instruction
        return card

    # -- building ------------------------------------------------------------------------------

    @abstractmethod
    def read(self) -> tuple[list[Entry], DedupeStats]:
        """The task's deduplicated molecules and the counts behind them."""

    @abstractmethod
    def target(self, entry: Entry) -> Target:
        """A molecule's target as its evaluator reads it."""

    def keep(self, entry: Entry) -> bool:
        """Whether a deduplicated molecule becomes a sample (all by default)."""
        return True

    def meta(self, entry: Entry) -> dict[str, Any]:
        return {}

    def resources(self, splits: dict[str, tuple[Sample, ...]]) -> dict[str, Any]:
        return {"instruction": self.instruction}

    def extra_checks(self, splits: dict[str, tuple[Sample, ...]]) -> list[Check]:
        return []

    def stats_row(self, stats: DedupeStats) -> dict[str, Any]:
        row: dict[str, Any] = {
            "rows": stats.rows,
            "unparsable": stats.unparsable,
            "unique structures": stats.unique,
            "conflicting (dropped)": f"{stats.conflicting_groups} ({stats.conflicting_rows} rows)"
            if self.merge == "agree"
            else "— (targets merged)",
            "molecules": stats.molecules,
        }
        row.update(stats.extra)
        if self.spec.paper is not None:
            row["paper"] = self.spec.paper
        return row

    def build(self) -> TaskData:
        entries, stats = self.read()
        entries = [e for e in entries if self.keep(e)]
        if self.spec.files is not None:
            assigned = [e.split or "" for e in entries]
        else:
            assigned = scaffold_split([e.std.scaffold for e in entries], self.fractions, order=self.spec.scaffold_order)
        grouped: dict[str, list[Sample]] = {s: [] for s in SPLITS}
        for entry, split in zip(entries, assigned):
            grouped[split].append(self.sample(entry, split))
        splits = {s: tuple(v) for s, v in grouped.items()}
        checks = self.checks(stats, splits)
        require(self.name, checks, "tasks/molecular/tasks.toml")
        return TaskData(splits=splits, resources=self.resources(splits), checks=checks, stats=self.stats_row(stats))

    def sample(self, entry: Entry, split: str) -> Sample:
        return Sample(
            id=sample_id("mol", [self.name, entry.std.canonical]),
            input=Molecule(
                smiles=entry.std.canonical, inchikey=entry.std.inchikey, name=entry.name, id=entry.source_id
            ),
            target=self.target(entry),
            clusters=(entry.cluster,),
            meta=MappingProxyType({"split": split, **self.meta(entry)}),
        )

    def checks(self, stats: DedupeStats, splits: dict[str, tuple[Sample, ...]]) -> list[Check]:
        declared = dict(self.spec.dedupe)
        found = {k: v for k, v in stats.as_dict().items() if k in declared}
        sizes = {s: len(v) for s, v in splits.items()}
        out = [
            Check(
                "deduplication",
                found == declared,
                ", ".join(f"{k} {v:,}" for k, v in found.items())
                + ("" if found == declared else f" (declared {declared})"),
            ),
            Check(
                "split sizes",
                sizes == self.spec.sizes,
                ", ".join(f"{s} {sizes[s]:,} (expected {self.spec.sizes[s]:,})" for s in SPLITS),
            ),
        ]
        molecules = Counter(s.molecule.smiles for v in splits.values() for s in v)
        repeated = sum(1 for n in molecules.values() if n > 1)
        out.append(Check("each molecule in one split", repeated == 0, f"{repeated} molecules in more than one split"))
        if self.spec.files is None:
            owners: dict[str, set[str]] = {}
            for split, samples in splits.items():
                for s in samples:
                    owners.setdefault(s.clusters[0], set()).add(split)
            shared = sum(1 for v in owners.values() if len(v) > 1)
            out.append(
                Check("scaffold split", shared == 0, f"{len(owners):,} scaffolds, {shared} in more than one split")
            )
        return out + self.extra_checks(splits)
