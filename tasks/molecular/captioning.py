"""Property-specific captioning: molecule -> a caption aimed at the property the task's instruction names.

Systems write a caption for *every* molecule (training, validation and test: ``predict_splits``) and
never see a label, not even a training one. The probe of :mod:`ddibench.evaluation.probe` then learns
the property from the training molecules' SMILES and captions and is scored on the test molecules
(AUROC, mean and standard deviation over 5 probe seeds, averaged over the dataset's label columns:
BBBP 1, SIDER 27, ClinTox 2, BACE 1). Data: MoleculeNet's BBBP, SIDER, ClinTox and BACE as chemprop
ships them, split by DeepChem's deterministic Bemis-Murcko scaffold split 80/10/10 (the MoleculeNet and OGB
split; the files keep MoleculeNet's row order).
"""

from __future__ import annotations

import csv
from functools import cached_property
from types import MappingProxyType
from typing import TYPE_CHECKING, ClassVar, Literal

from ddibench import families
from ddibench.schema import Label, LabelSpace, Sample, Target
from ddibench.task import AnswerSpec, Check
from ddibench.tasks.molecular.base import MolecularSpec, MolecularTask
from ddibench.tasks.molecular.molecules import SPLITS, DedupeStats, Entry, deduplicate, read_table, rows_of

if TYPE_CHECKING:
    from ddibench.evaluation import Evaluator

# a caption in free text, of bounded length (the probe reads the captions of every split)
ANSWER = AnswerSpec(
    kind="text",
    max_tokens=256,
    system_prompt="You are an expert medicinal chemist. Write a short, factual paragraph about the molecule, as the request asks.",
    closing="Write the description as one paragraph of at most 120 words.",
)


class CaptioningSpec(MolecularSpec):
    """A captioning ``[tasks.NAME]`` table: the CSV's SMILES column and the label columns the probe learns."""

    kind: Literal["captioning"]
    dataset: str
    file: str
    smiles: str  # the SMILES column
    labels: tuple[str, ...] | Literal["*"]  # the label columns, or "*": every column but the SMILES column


class CaptioningTask(MolecularTask):
    family = families.CAPTIONING
    spec: CaptioningSpec
    resource_keys = ("instruction",)
    answer = ANSWER
    predict_splits: ClassVar[tuple[str, ...]] = SPLITS
    training_labels_visible: ClassVar[bool] = False

    @cached_property
    def columns(self) -> tuple[str, ...]:
        """The label columns: as declared, or every column but the SMILES column ("*")."""
        declared = self.spec.labels
        if declared != "*":
            return tuple(declared)
        with open(self.path(self.spec.file), encoding="utf-8", newline="") as fh:
            header = next(csv.reader(fh))
        return tuple(c for c in header if c != self.spec.smiles)

    @property
    def label_space(self) -> LabelSpace:
        return LabelSpace(tuple(Label(i, col, col) for i, col in enumerate(self.columns)))

    def evaluator(self) -> Evaluator:
        from ddibench.evaluation import ProbeEvaluator

        return ProbeEvaluator(self.columns)

    def read(self) -> tuple[list[Entry], DedupeStats]:
        rows = rows_of(read_table(self.path(self.spec.file), ","), self.spec.smiles, self.columns, None, None)
        return deduplicate(rows, "agree")

    def target(self, entry: Entry) -> Target:
        return MappingProxyType(dict(zip(self.columns, entry.labels)))

    @property
    def deviations(self) -> tuple[str, ...]:
        return (
            *super().deviations,
            "the paper's probe fine-tunes SciBERT on 'SMILES [SEP] caption'; SciBERT is not available offline: the default probe is "
            "'linear' (Morgan fingerprint + frozen MiniLM caption embedding), '--probe finetune' fine-tunes MiniLM unless "
            "'--probe-encoder' names a local SciBERT (the probe and encoder that scored a run are in its manifest's scoring)",
            "systems and the probe see RDKit canonical SMILES, not the file's own notation",
        )

    def extra_checks(self, splits: dict[str, tuple[Sample, ...]]) -> list[Check]:
        def both_classes(c: str, s: str) -> bool:
            return len({x.target[c] for x in splits[s]} - {None}) == 2  # type: ignore[index, call-overload]

        scorable = {s: sum(1 for c in self.columns if both_classes(c, s)) for s in SPLITS}
        return [
            Check(
                "label columns with both classes",
                all(n > 0 for n in scorable.values()),
                ", ".join(f"{s} {n} of {len(self.columns)}" for s, n in scorable.items()),
            )
        ]

    def card(self) -> dict:  # type: ignore[type-arg]
        card = super().card()
        card["label_columns"] = list(self.columns)
        card["predicted_splits"] = list(self.predict_splits)
        return card
