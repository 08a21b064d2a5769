"""Readers of the pinned MedQuAD collections and of MedicationQA (question, answer, focus, type, document).

The ``medquad`` task asks some collections and the question-answering systems search others; both read
them here, so neither reaches into the other.
"""

from __future__ import annotations

from collections.abc import Iterable
from xml.etree import ElementTree

from ddibench.data.resolve import fetch
from ddibench.data.sources import SourceFile, all_datasets, source
from ddibench.data.xlsx import read_first_sheet

MEDICATIONQA = ("medicationqa", "MedInfo2019-QA-Medications.xlsx")


def medquad_pairs(files: Iterable[SourceFile]) -> list[dict[str, str]]:
    """Answered question-answer pairs of MedQuAD XML files, with their collection and document."""
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
            out.append(
                {
                    "question": " ".join((q.text or "").split()),
                    "answer": answer,
                    "qid": q.get("qid", ""),
                    "qtype": q.get("qtype", ""),
                    "focus": focus,
                    "doc": doc,
                    "collection": src.path.split("/")[0],
                }
            )
    return out


def medquad_documents(dataset: str = "medquad-corpus") -> list[dict[str, str]]:
    """Answered MedQuAD pairs of a pinned collection (the systems' search corpus by default)."""
    return medquad_pairs(all_datasets()[dataset].files)


def medicationqa_rows() -> list[dict[str, str]]:
    """Answered MedicationQA questions (the sheet's rows with a question and an answer)."""
    rows = read_first_sheet(fetch(source(*MEDICATIONQA)))
    out = []
    for i, row in enumerate(rows[1:], 2):
        answer = " ".join((row.get("D") or "").split())
        question = " ".join((row.get("A") or "").split())
        if not answer or not question:
            continue
        out.append(
            {
                "question": question,
                "answer": answer,
                "qid": f"medicationqa-{i}",
                "qtype": (row.get("C") or "").strip(),
                "focus": (row.get("B") or "").strip(),
                "doc": f"medicationqa:{(row.get('B') or '').strip().lower()}",
                "collection": "MedicationQA",
            }
        )
    return out
