"""Question-answering tasks: free-text answers scored against reference answers.

* ``ddi_qa_s0`` / ``ddi_qa_s1`` / ``ddi_qa_s2`` — a question about each pair of the matching DrugBank task
  (``drugbank_s0`` / ``_s1`` / ``_s2``), in one of six paraphrases chosen by a hash of the pair; the
  reference answer is the DrugBank interaction sentence with the drugs' names. The training split
  keeps the DrugBank training pairs (the knowledge systems may build their databases from); scored
  by label recovery, embedding similarity, BERTScore, the LLM judge and SelfCheckGPT.
* ``medquad`` — a fixed test set: every answered question of MedQuAD's SeniorHealth and CDC
  collections (MedQuAD folders 7 and 9), and every answered MedicationQA question; MedicationQA's 51
  interaction questions form their own slice (``slice=medicationqa-interaction``), the rest
  ``slice=medicationqa`` and ``slice=medquad``. Validation: MedQuAD's NHLBI collection (folder 8).
  MedQuAD's NIDDK and NINDS collections (5, 6) are the systems' search corpus and are never asked.
  MedQuAD folders 10-12 carry no answers (removed upstream for copyright) and are not used.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ddibench import families
from ddibench.data import SourceFile, all_datasets, source
from ddibench.data.medquad import MEDICATIONQA, medicationqa_rows, medquad_pairs
from ddibench.schema import LabelSpace, Question, Sample, interaction_question, sample_id
from ddibench.task import Check, Lazy, Task, TaskData, require

if TYPE_CHECKING:
    from ddibench.evaluation import Evaluator


class DDIQATask(Task):
    family = families.DDI_QA
    resource_keys = ("drugs", "labels", "train_drugs", "interactions")
    input_kind = "question"

    def __init__(self, name: str, base: str, setting: str) -> None:
        self.name = name
        self.base_name = base
        self.version = "1.0.0"
        self.setting = setting
        self.title = f"DDI question answering over the {base} pairs: free-text answers, DrugBank sentence as reference"

    @property
    def base(self) -> Task:
        from ddibench.tasks.drugbank import TASKS

        return TASKS[self.base_name]

    @property
    def sources(self) -> tuple[SourceFile, ...]:
        return self.base.sources

    @property
    def label_space(self) -> LabelSpace:
        return self.base.label_space

    @property
    def deviations(self) -> tuple[str, ...]:
        return self.base.deviations

    def evaluator(self) -> Evaluator:
        from ddibench.evaluation import TextEvaluator

        return TextEvaluator(self.label_space)

    def build(self) -> TaskData:
        base = self.base.load()
        labels = self.label_space
        splits = {}
        for split, samples in base.splits.items():
            out = []
            for s in samples:
                pair, label = s.pair, s.label
                text = interaction_question(pair.head.name, pair.tail.name)
                out.append(
                    Sample(
                        id=sample_id("ddiqa", f"{s.id}|{text}"),
                        input=Question(
                            text=text,
                            pair=pair,
                            focus=f"{pair.head.name} + {pair.tail.name}",
                            qtype="interaction",
                            source="DrugBank",
                        ),
                        target=MappingProxyType(
                            {"answer": labels[label].render(pair.head.name, pair.tail.name), "label": label}
                        ),
                        clusters=s.clusters,
                        meta=s.meta,
                    )
                )
            splits[split] = tuple(out)
        resources = {k: base.resources[k] for k in ("drugs", "labels", "train_drugs")}
        resources["interactions"] = Lazy(lambda: (splits["train"], labels))
        return TaskData(splits=splits, resources=resources, checks=list(base.checks))


class MedQuADTask(Task):
    family = families.MEDICAL_QA
    resource_keys = ("interactions",)
    setting = "QA"
    version = "1.0.0"
    name = "medquad"
    title = "Medical QA: MedQuAD SeniorHealth + CDC and MedicationQA (interaction questions as their own slice)"
    input_kind = "question"
    cluster_unit = "source documents"
    TEST_FOLDERS = ("7_SeniorHealth_QA", "9_CDC_QA")
    VALID_FOLDERS = ("8_NHLBI_QA_XML",)

    @property
    def sources(self) -> tuple[SourceFile, ...]:
        files = all_datasets()["medquad-questions"].files
        return (*files, source(*MEDICATIONQA))

    @property
    def label_space(self) -> LabelSpace:
        return LabelSpace(())

    @property
    def deviations(self) -> tuple[str, ...]:
        return ("MedQuAD folders 10-12 have no answers upstream (copyright) and are not used",)

    def evaluator(self) -> Evaluator:
        from ddibench.evaluation import TextEvaluator

        return TextEvaluator(None)

    def _samples(self, rows: list[dict[str, str]], slice_of: Any, split: str) -> list[Sample]:
        seen: set[str] = set()
        out = []
        for row in rows:
            sid = sample_id("mqa", f"{row['qid']}|{row['question']}|{row['answer'][:200]}")
            if sid in seen:
                continue
            seen.add(sid)
            out.append(
                Sample(
                    id=sid,
                    input=Question(
                        text=row["question"], focus=row["focus"], qtype=row["qtype"], source=row["collection"]
                    ),
                    target=MappingProxyType({"answer": row["answer"], "label": None}),
                    clusters=(row["doc"],),
                    meta=MappingProxyType({"split": split, "slice": slice_of(row)}),
                )
            )
        return out

    def build(self) -> TaskData:
        files = all_datasets()["medquad-questions"].files
        test_rows = medquad_pairs(f for f in files if f.path.startswith(self.TEST_FOLDERS))
        valid_rows = medquad_pairs(f for f in files if f.path.startswith(self.VALID_FOLDERS))
        med_rows = medicationqa_rows()
        test = self._samples(test_rows, lambda r: "medquad", "test") + self._samples(
            med_rows,
            lambda r: "medicationqa-interaction" if r["qtype"].lower() == "interaction" else "medicationqa",
            "test",
        )
        valid = self._samples(valid_rows, lambda r: "medquad", "valid")
        slices = {
            k: sum(1 for s in test if s.meta["slice"] == k)
            for k in ("medquad", "medicationqa", "medicationqa-interaction")
        }
        checks = [
            Check(
                "answered MedQuAD test questions",
                slices["medquad"] == 1039,
                f"{slices['medquad']} distinct answered pairs in folders 7 and 9 (expected 1,039)",
            ),
            Check(
                "answered MedicationQA questions",
                slices["medicationqa"] == 639,
                f"{slices['medicationqa']} besides interactions (expected 639)",
            ),
            Check(
                "MedicationQA interaction slice",
                slices["medicationqa-interaction"] == 51,
                f"{slices['medicationqa-interaction']} (expected 51)",
            ),
            Check("validation (NHLBI) questions", len(valid) == 559, f"{len(valid)} (expected 559)"),
        ]
        require("medquad", checks, "tasks/qa/__init__.py")
        # MedQuAD has no drug pairs of its own: a knowledge base holds DrugBank S0's training interactions
        from ddibench.tasks.drugbank import TASKS as DRUGBANK

        resources = {
            "interactions": Lazy(
                lambda: (DRUGBANK["drugbank_s0"].load().split("train"), DRUGBANK["drugbank_s0"].label_space)
            )
        }
        return TaskData(
            splits={"train": (), "valid": tuple(valid), "test": tuple(test)}, resources=resources, checks=checks
        )


TASKS: dict[str, Task] = {
    "ddi_qa_s0": DDIQATask("ddi_qa_s0", "drugbank_s0", "S0"),
    "ddi_qa_s1": DDIQATask("ddi_qa_s1", "drugbank_s1", "S1"),
    "ddi_qa_s2": DDIQATask("ddi_qa_s2", "drugbank_s2", "S2"),
    "medquad": MedQuADTask(),
}
