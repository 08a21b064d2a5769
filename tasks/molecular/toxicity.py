"""Toxicity: molecule -> yes/no (hERG blockade, drug-induced liver injury, skin reaction, carcinogenicity).

Rows come from TDC's datasets as Ersilia ships them (``Drug_ID``, ``Drug`` = SMILES, ``Y`` = 0/1): the
whole set with a deterministic scaffold split 70/10/20 (TDC's ADMET-group fractions; ``tox_herg``,
``tox_dili``, ``tox_skin``, ``tox_carcinogens``) in the balanced order of
:func:`ddibench.chem.scaffold_split` (the tables list one class first, so DeepChem's order would give a
one-class test split), or TDC's own ADMET-group split (seed-1 train/valid fold, fixed test) for hERG
and DILI (``tox_herg_tdc``, ``tox_dili_tdc``). Labels: 0 = "no", 1 = "yes". Scored by macro-F1 (the CLADD
paper's metric), accuracy, Cohen's kappa and, for systems that give the probability of "yes", AUROC.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Literal

from ddibench import families
from ddibench.schema import Label, LabelSpace, Sample, Target
from ddibench.task import AnswerSpec, Check
from ddibench.tasks.molecular.base import MolecularSpec, MolecularTask
from ddibench.tasks.molecular.molecules import SPLITS, DedupeStats, Entry, deduplicate, read_table, rows_of

if TYPE_CHECKING:
    from ddibench.evaluation import Evaluator

# yes or no, in JSON where the server constrains output; the budget fits the JSON with room to spare
ANSWER = AnswerSpec(
    kind="yes_no",
    max_tokens=24,
    system_prompt='You are an expert medicinal chemist and toxicologist. Answer with JSON only, in the form {"answer": "yes"} or {"answer": "no"}.',
)
_PLACEHOLDER = re.compile(r"^(drug[ _]?\d+|[\d.]+)$", re.IGNORECASE)  # "Drug_12", "Drug 3", "187.0": ids, not names


class ToxicitySpec(MolecularSpec):
    """A toxicity ``[tasks.NAME]`` table: the yes/no question and the words for its two answers."""

    kind: Literal["toxicity"]
    dataset: str
    question: str  # the question a system is asked (the ``question`` resource)
    label_texts: tuple[str, str]  # what "no" and "yes" mean for this endpoint


class ToxicityTask(MolecularTask):
    family = families.TOXICITY
    resource_keys = ("instruction", "question")
    answer = ANSWER
    spec: ToxicitySpec

    @property
    def label_space(self) -> LabelSpace:
        no, yes = self.spec.label_texts
        return LabelSpace((Label(0, no, "no"), Label(1, yes, "yes")))

    def evaluator(self) -> Evaluator:
        from ddibench.evaluation import ClassificationEvaluator

        return ClassificationEvaluator(self.label_space, breakdown_key=None, positive_label=1)

    def read(self) -> tuple[list[Entry], DedupeStats]:
        if self.spec.files is not None:
            rows = [
                row
                for split in SPLITS
                for row in rows_of(
                    read_table(self.path(self.spec.files[split]), ","), "Drug", ["Y"], "Drug_ID", "Drug_ID", split
                )
            ]
        else:
            rows = rows_of(read_table(self.path(str(self.spec.file)), "\t"), "Drug", ["Y"], "Drug_ID", "Drug_ID")
        rows = [
            r if not _PLACEHOLDER.match(r.name) else type(r)(r.smiles, r.labels, "", r.source_id, r.split) for r in rows
        ]
        return deduplicate(rows, "agree")

    def target(self, entry: Entry) -> Target:
        return int(entry.labels[0])

    def resources(self, splits: dict[str, tuple[Sample, ...]]) -> dict[str, Any]:
        return {**super().resources(splits), "question": self.spec.question}

    def extra_checks(self, splits: dict[str, tuple[Sample, ...]]) -> list[Check]:
        counts = {
            s: (sum(1 for x in splits[s] if x.target == 0), sum(1 for x in splits[s] if x.target == 1)) for s in SPLITS
        }
        return [
            Check(
                "both labels in every split",
                all(min(c) > 0 for c in counts.values()),
                ", ".join(f"{s} {no} no / {yes} yes" for s, (no, yes) in counts.items()),
            )
        ]
