"""Question-answering tasks: free-text answers scored against reference answers.

* ``ddi_qa_s0`` / ``ddi_qa_s1`` / ``ddi_qa_s2`` — a question about each pair of the matching DrugBank task
  (``drugbank_s0`` / ``_s1`` / ``_s2``), in one of six paraphrases chosen by a hash of the pair; the
  reference answer is the DrugBank interaction sentence with the drugs' names. The training split
  keeps the DrugBank training pairs (the knowledge systems may build their databases from); scored
  by label recovery, embedding similarity, BERTScore, the LLM judge and SelfCheckGPT.
* ``ddi_qa_lookup`` — the look-up setting of the SQL agent's and DrugRAG's papers: the asked pair's interaction
  *is* in the knowledge the systems are given (the DrugBank S0 training pairs, as for ``ddi_qa_s0``). One training
  pair of each of the 86 types, and 24 pairs of training drugs with no interaction recorded in any DrugBank split
  (their reference answer says so, a label of its own: a look-up system must not invent one). Primary metric:
  label recovery (the papers' type accuracy); the two kinds of question are scored as their own slices. It measures
  retrieval and faithful reading, not prediction: the held-out ``ddi_qa_s*`` tasks stay the prediction test.
* ``medquad`` — a fixed test set: every answered question of MedQuAD's SeniorHealth and CDC
  collections (MedQuAD folders 7 and 9), and every answered MedicationQA question; MedicationQA's 51
  interaction questions form their own slice (``slice=medicationqa-interaction``), the rest
  ``slice=medicationqa`` and ``slice=medquad``. Validation: MedQuAD's NHLBI collection (folder 8).
  MedQuAD's NIDDK and NINDS collections (5, 6) are the systems' search corpus and are never asked.
  MedQuAD folders 10-12 carry no answers (removed upstream for copyright) and are not used.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ddibench import families
from ddibench.data import SourceFile, all_datasets, source
from ddibench.data.medquad import MEDICATIONQA, medicationqa_rows, medquad_pairs
from ddibench.schema import DrugPair, Label, LabelSpace, Question, Sample, interaction_question, sample_id
from ddibench.task import AnswerSpec, Check, Lazy, Task, TaskData, require

if TYPE_CHECKING:
    from ddibench.evaluation import Evaluator


class DDIQATask(Task):
    family = families.DDI_QA
    resource_keys = ("drugs", "labels", "train_drugs", "interactions")
    input_kind = "question"
    answer = AnswerSpec(kind="text")  # an answer in words, scored by similarity, a judge and label recovery

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
        splits = {split: tuple(question_sample(s, labels) for s in samples) for split, samples in base.splits.items()}
        resources = {k: base.resources[k] for k in ("drugs", "labels", "train_drugs")}
        resources["interactions"] = Lazy(lambda: (splits["train"], labels))
        return TaskData(splits=splits, resources=resources, checks=list(base.checks))


def question_sample(
    s: Sample, labels: LabelSpace, slice_name: str | None = None, prefix: str = "ddiqa", split: str | None = None
) -> Sample:
    """The question about a DrugBank sample's pair, with the interaction sentence (or, for the look-up task's
    pairs without one, the sentence that says so) as its reference answer; ``slice_name`` and ``split`` go to
    its meta (the look-up task asks training pairs in its test split)."""
    pair, label = s.pair, s.label
    text = interaction_question(pair.head.name, pair.tail.name)
    meta = s.meta
    if slice_name is not None:
        meta = MappingProxyType({**s.meta, "slice": slice_name, "split": split or s.meta.get("split")})
    return Sample(
        id=sample_id(prefix, f"{s.id}|{text}"),
        input=Question(
            text=text, pair=pair, focus=f"{pair.head.name} + {pair.tail.name}", qtype="interaction", source="DrugBank"
        ),
        target=MappingProxyType({"answer": labels[label].render(pair.head.name, pair.tail.name), "label": label}),
        clusters=s.clusters,
        meta=meta,
    )


N_TYPES = 86  # DrugBank's interaction types; the look-up task's label 86 is "no interaction recorded"
NO_INTERACTION = "No interaction between #Drug1 and #Drug2 is recorded in DrugBank."
RECORDED_SLICE, UNRECORDED_SLICE = "recorded", "no-interaction"


def _ids(s: Sample) -> tuple[int, int]:
    """The (head, tail) node ids of a question's pair."""
    pair = s.question.pair
    assert pair is not None
    return pair.head.node_id, pair.tail.node_id


def _rank(key: str) -> str:
    """A fixed, seed-free order of the look-up task's draws (the same questions on every machine)."""
    return hashlib.sha256(f"ddi_qa_lookup/1|{key}".encode()).hexdigest()


class DDIQALookupTask(DDIQATask):
    """Questions whose answer is in the knowledge base (see the module docstring)."""

    UNRECORDED = {"test": 24, "valid": 12}  # pairs of training drugs that DrugBank records no interaction for
    # the training split every system is given as its knowledge (the ddi table, the graph's edges, the text corpus):
    # every asked pair and a fixed draw of the other training pairs. Not all 134,641: text RAG embeds every sentence
    # of its corpus on this CPU (tens a second), so the whole split would cut it (the cpu profile indexes 5,000).
    KNOWLEDGE_PAIRS = 20_000

    def __init__(self) -> None:
        super().__init__("ddi_qa_lookup", "drugbank_s0", "lookup")
        self.title = (
            "DDI question answering, look-up: the asked pair's interaction is in the knowledge base (one training pair "
            "per type) or no interaction is recorded for it; free-text answers, label recovery primary"
        )

    @property
    def deviations(self) -> tuple[str, ...]:
        return (
            "'no interaction recorded' means none among the 191,878 pairs of the 86-type DrugBank data the systems are "
            "given (EmerGNN's files, a subset of DrugBank): such a pair may still interact in the clinic; the questions "
            "ask what the knowledge base holds",
        )

    @property
    def label_space(self) -> LabelSpace:
        base = self.base.label_space
        return LabelSpace((*base.labels, Label(N_TYPES, NO_INTERACTION, "no interaction recorded")))

    def evaluator(self) -> Evaluator:
        from ddibench.evaluation import TextEvaluator

        return TextEvaluator(self.label_space, primary="label_recovery")

    def build(self) -> TaskData:
        base = self.base.load()
        labels = self.label_space
        train = base.splits["train"]
        recorded = {(s.pair.head.node_id, s.pair.tail.node_id) for samples in base.splits.values() for s in samples}
        recorded |= {(t, h) for h, t in recorded}
        ranked = sorted(train, key=lambda s: _rank(s.id))
        by_type: dict[int, list[Sample]] = {}
        for sample in ranked:
            by_type.setdefault(sample.label, []).append(sample)
        unrecorded = _unrecorded_pairs(train, recorded)
        # the knowledge: every pair asked (the first two of each type) and a fixed draw of the others, in file order
        asked_ids = {samples[k].id for samples in by_type.values() for k in range(2) if k < len(samples)}
        others = (s.id for s in ranked if s.id not in asked_ids)
        keep = asked_ids | set(itertools.islice(others, self.KNOWLEDGE_PAIRS - len(asked_ids)))
        splits: dict[str, tuple[Sample, ...]] = {
            "train": tuple(question_sample(s, labels) for s in train if s.id in keep)
        }
        for start, split in enumerate(
            ("test", "valid")
        ):  # the first pair of each type is asked in test, the next in valid
            asked = [
                question_sample(samples[start], labels, RECORDED_SLICE, "ddiqa-lookup", split)
                for _, samples in sorted(by_type.items())
                if start < len(samples)
            ]
            none = [
                question_sample(next(unrecorded), labels, UNRECORDED_SLICE, "ddiqa-lookup", split)
                for _ in range(self.UNRECORDED[split])
            ]
            splits[split] = tuple(asked + none)
        knowledge = [s for s in train if s.id in keep]
        checks = [*base.checks, *_lookup_checks(splits, knowledge, recorded, len(labels) - 1)]
        checks.append(
            Check(
                "the knowledge base's size",
                len(knowledge) == self.KNOWLEDGE_PAIRS,
                f"{len(knowledge):,} of {len(train):,} training pairs (expected {self.KNOWLEDGE_PAIRS:,})",
            )
        )
        require(self.name, checks, "tasks/qa/__init__.py")
        resources = {k: base.resources[k] for k in ("drugs", "labels", "train_drugs")}
        base_labels = self.base.label_space  # the knowledge holds the 86 types; "no interaction" is only an answer
        resources["interactions"] = Lazy(lambda: (splits["train"], base_labels))
        return TaskData(splits=splits, resources=resources, checks=checks)


def _unrecorded_pairs(train: Sequence[Sample], recorded: set[tuple[int, int]]) -> Iterator[Sample]:
    """Pairs of training drugs with no interaction recorded in either order, in a fixed drawn order, each pair
    once (as DrugBank samples whose label is the look-up task's "no interaction" label, 86)."""
    drugs = {d.node_id: d for s in train for d in (s.pair.head, s.pair.tail)}
    ids = sorted(drugs)
    chosen: set[frozenset[int]] = set()
    for i in itertools.count():
        a, b = ids[int(_rank(f"h{i}"), 16) % len(ids)], ids[int(_rank(f"t{i}"), 16) % len(ids)]
        if a == b or (a, b) in recorded or frozenset((a, b)) in chosen:
            continue
        chosen.add(frozenset((a, b)))
        pair = DrugPair(drugs[a], drugs[b])
        yield Sample(
            id=sample_id("ddi-none", [a, b]),
            input=pair,
            target=N_TYPES,
            clusters=(pair.head.drugbank_id, pair.tail.drugbank_id),
            meta=MappingProxyType({"n_unseen": 0}),
        )


def _lookup_checks(
    splits: Mapping[str, Sequence[Sample]], train: Sequence[Sample], recorded: set[tuple[int, int]], n_types: int
) -> list[Check]:
    """What the look-up task promises, checked on every load (``train``: the knowledge the systems are given)."""
    test, valid = splits["test"], splits["valid"]
    asked = [s for s in test if s.meta["slice"] == RECORDED_SLICE]
    none = [s for s in test if s.meta["slice"] == UNRECORDED_SLICE]
    types = {s.target["label"] for s in asked if isinstance(s.target, Mapping)}
    train_pairs = {(s.pair.head.node_id, s.pair.tail.node_id) for s in train}
    return [
        Check(
            "look-up questions: one per type",
            len(types) == n_types == len(asked),
            f"{len(asked)} questions over {len(types)} types (expected {n_types} over {n_types})",
        ),
        Check(
            "every look-up pair is in the knowledge (the task's training split)",
            all(_ids(s) in train_pairs for s in asked),
            "the asked pairs are training pairs",
        ),
        Check(
            "no 'no interaction' pair is recorded in any DrugBank split",
            not any(_ids(s) in recorded for s in none),
            f"{len(none)} pairs of training drugs, none among the {len({frozenset(p) for p in recorded}):,} recorded pairs",
        ),
        Check(
            "test and validation ask different pairs",
            not ({frozenset(_ids(s)) for s in test} & {frozenset(_ids(s)) for s in valid}),
            f"{len(test)} test and {len(valid)} validation questions",
        ),
    ]


class MedQuADTask(Task):
    family = families.MEDICAL_QA
    resource_keys = ("interactions",)
    answer = AnswerSpec(kind="text")
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
    "ddi_qa_lookup": DDIQALookupTask(),
    "medquad": MedQuADTask(),
}
