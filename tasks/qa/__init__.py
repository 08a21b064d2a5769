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

import hashlib
import threading
from collections.abc import Iterable
from pathlib import Path
from types import MappingProxyType
from typing import Any
from xml.etree import ElementTree

from ddibench.data import SourceFile, all_datasets, fetch, source
from ddibench.data.xlsx import read_first_sheet
from ddibench.embeddings import DEFAULT_ENCODER
from ddibench.errors import DataError
from ddibench.schema import LabelSpace, Question, Sample, sample_id
from ddibench.task import Check, Evaluator, Task, TaskData

PARAPHRASES = (
    "What happens if {a} is taken with {b}?",
    "Is it safe to combine {a} and {b}?",
    "Are there any interactions between {a} and {b}?",
    "What should I know before taking {a} together with {b}?",
    "Can {a} be used with {b}? What is the interaction?",
    "How does {a} interact with {b}?",
)


def paraphrase(a: str, b: str) -> str:
    digest = int(hashlib.sha256(f"{a}|{b}".encode()).hexdigest()[:8], 16)
    return PARAPHRASES[digest % len(PARAPHRASES)].format(a=a, b=b)


class DDIQATask(Task):
    family = "ddi_qa"
    llm_scored = True

    def __init__(self, name: str, base: str, setting: str) -> None:
        self.name = name
        self.base_name = base
        self.version = "1.0.0"
        self.setting = setting
        self.title = f"DDI question answering over the {base} pairs: free-text answers, DrugBank sentence as reference"
        self._lock = threading.Lock()
        self._data: TaskData | None = None

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
        return self._evaluator_with_encoder(DEFAULT_ENCODER)

    def _evaluator_with_encoder(self, encoder: str) -> Evaluator:
        from ddibench.evaluation import QAEvaluator

        return QAEvaluator(self.label_space, encoder=encoder)

    def load(self) -> TaskData:
        with self._lock:
            if self._data is None:
                base = self.base.load()
                labels = self.label_space
                splits = {}
                for split, samples in base.splits.items():
                    out = []
                    for s in samples:
                        pair, label = s.input, int(s.target)  # type: ignore[arg-type]
                        text = paraphrase(pair.head.name, pair.tail.name)
                        out.append(
                            Sample(
                                id=sample_id("ddiqa", f"{s.id}|{text}"),
                                input=Question(text=text, pair=pair, focus=f"{pair.head.name} + {pair.tail.name}", qtype="interaction", source="DrugBank"),
                                target=MappingProxyType({"answer": labels[label].render(pair.head.name, pair.tail.name), "label": label}),
                                clusters=s.clusters,
                                meta=s.meta,
                            )
                        )
                    splits[split] = tuple(out)
                self._data = TaskData(splits=splits, resources=base.resources, checks=list(base.checks))
            return self._data


def _medquad_pairs(files: Iterable[SourceFile]) -> list[dict[str, str]]:
    out = []
    for src in files:
        if not src.path.endswith(".xml"):
            continue
        root = ElementTree.parse(fetch(src)).getroot()
        doc = f"{src.path.split('/')[0]}/{root.get('id', src.path)}"  # ids restart in every collection
        focus = (root.findtext("Focus") or "").strip()
        for qa in root.iter("QAPair"):
            q = qa.find("Question")
            answer = " ".join((qa.findtext("Answer") or "").split())
            if q is None or not answer:
                continue
            out.append({
                "question": " ".join((q.text or "").split()), "answer": answer, "qid": q.get("qid", ""),
                "qtype": q.get("qtype", ""), "focus": focus, "doc": doc, "collection": src.path.split("/")[0],
            })  # fmt: skip
    return out


def medquad_documents(dataset: str = "medquad-corpus") -> list[dict[str, str]]:
    """Answered MedQuAD pairs of a pinned collection (the search corpus by default)."""
    return _medquad_pairs(all_datasets()[dataset].files)


class MedQuADTask(Task):
    family = "medical_qa"
    setting = "QA"
    version = "1.0.0"
    name = "medquad"
    title = "Medical QA: MedQuAD SeniorHealth + CDC and MedicationQA (interaction questions as their own slice)"
    llm_scored = True
    TEST_FOLDERS = ("7_SeniorHealth_QA", "9_CDC_QA")
    VALID_FOLDERS = ("8_NHLBI_QA_XML",)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._data: TaskData | None = None

    @property
    def sources(self) -> tuple[SourceFile, ...]:
        files = all_datasets()["medquad-questions"].files
        return (*files, source("medicationqa", "MedInfo2019-QA-Medications.xlsx"))

    @property
    def label_space(self) -> LabelSpace:
        return LabelSpace(())

    @property
    def deviations(self) -> tuple[str, ...]:
        return ("MedQuAD folders 10-12 have no answers upstream (copyright) and are not used",)

    def evaluator(self) -> Evaluator:
        return self._evaluator_with_encoder(DEFAULT_ENCODER)

    def _evaluator_with_encoder(self, encoder: str) -> Evaluator:
        from ddibench.evaluation import QAEvaluator

        return QAEvaluator(None, encoder=encoder)

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
                    input=Question(text=row["question"], focus=row["focus"], qtype=row["qtype"], source=row["collection"]),
                    target=MappingProxyType({"answer": row["answer"], "label": None}),
                    clusters=(row["doc"],),
                    meta=MappingProxyType({"split": split, "slice": slice_of(row)}),
                )
            )
        return out

    def load(self) -> TaskData:
        with self._lock:
            if self._data is None:
                files = all_datasets()["medquad-questions"].files
                test_rows = _medquad_pairs(f for f in files if f.path.startswith(self.TEST_FOLDERS))
                valid_rows = _medquad_pairs(f for f in files if f.path.startswith(self.VALID_FOLDERS))
                med_rows = self._medicationqa()
                test = self._samples(test_rows, lambda r: "medquad", "test") + self._samples(
                    med_rows, lambda r: "medicationqa-interaction" if r["qtype"].lower() == "interaction" else "medicationqa", "test"
                )
                valid = self._samples(valid_rows, lambda r: "medquad", "valid")
                slices = {k: sum(1 for s in test if s.meta["slice"] == k) for k in ("medquad", "medicationqa", "medicationqa-interaction")}
                checks = [
                    Check("answered MedQuAD test questions", slices["medquad"] == 1039, f"{slices['medquad']} distinct answered pairs in folders 7 and 9 (expected 1,039)"),
                    Check("answered MedicationQA questions", slices["medicationqa"] == 639, f"{slices['medicationqa']} besides interactions (expected 639)"),
                    Check("MedicationQA interaction slice", slices["medicationqa-interaction"] == 51, f"{slices['medicationqa-interaction']} (expected 51)"),
                    Check("validation (NHLBI) questions", len(valid) == 559, f"{len(valid)} (expected 559)"),
                ]
                if not all(c.ok for c in checks):
                    raise DataError(f"task medquad: data does not match its definition ({[c.detail for c in checks]})")
                self._data = TaskData(splits={"train": (), "valid": tuple(valid), "test": tuple(test)}, checks=checks)
            return self._data

    @staticmethod
    def _medicationqa() -> list[dict[str, str]]:
        rows = read_first_sheet(Path(fetch(source("medicationqa", "MedInfo2019-QA-Medications.xlsx"))))
        out = []
        for i, row in enumerate(rows[1:], 2):
            answer = " ".join((row.get("D") or "").split())
            question = " ".join((row.get("A") or "").split())
            if not answer or not question:
                continue
            out.append({
                "question": question, "answer": answer, "qid": f"medicationqa-{i}", "qtype": (row.get("C") or "").strip(),
                "focus": (row.get("B") or "").strip(), "doc": f"medicationqa:{(row.get('B') or '').strip().lower()}",
                "collection": "MedicationQA",
            })  # fmt: skip
        return out


TASKS: dict[str, Task] = {
    "ddi_qa_s0": DDIQATask("ddi_qa_s0", "drugbank_s0", "S0"),
    "ddi_qa_s1": DDIQATask("ddi_qa_s1", "drugbank_s1", "S1"),
    "ddi_qa_s2": DDIQATask("ddi_qa_s2", "drugbank_s2", "S2"),
    "medquad": MedQuADTask(),
}
