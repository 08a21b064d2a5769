"""The data shapes every task, system and run shares.

* :class:`Sample` — immutable; a stable content-hash id, an input (a :class:`DrugPair`, a :class:`Molecule`
  or a :class:`Question`), a target, and cluster keys (drug ids or scaffolds, for clustered statistics).
* :class:`LabelSpace` — the ids, names and templates of a classification task's labels.
* :class:`Prediction` — what a system returns for one sample: a label, class scores, ranked labels or
  text, whether its output could be parsed, and a trace of how it got there. Predictions are journalled
  as JSON, so their schema is versioned (:data:`PREDICTION_SCHEMA_VERSION`; journals of every earlier
  version still read, see :data:`READABLE_PREDICTION_VERSIONS`).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from numbers import Integral
from types import MappingProxyType
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from ddibench.hashing import sha256_text, stable_json

PREDICTION_SCHEMA_VERSION = 2  # 2 added ``scores``; a version-1 record is a valid version-2 record
READABLE_PREDICTION_VERSIONS = (1, 2)


@dataclass(frozen=True, slots=True)
class Drug:
    """A drug of a task family's id space."""

    node_id: int  # id in the family's id space (DrugBank DDI: EmerGNN/SumGNN node id 0..1709)
    drugbank_id: str  # DrugBank accession (DB00001); '' for a drug without one (TWOSIDES' PubChem compounds)
    name: str  # the drug's name, as a model is shown it
    smiles: str  # its structure ('' when unknown)

    def as_dict(self) -> dict[str, Any]:
        """The fields as plain JSON values (written out: ``dataclasses.asdict`` deep-copies, and the board
        converts every sample of every shipped run)."""
        return {"node_id": self.node_id, "drugbank_id": self.drugbank_id, "name": self.name, "smiles": self.smiles}


@dataclass(frozen=True, slots=True)
class DrugPair:
    """An ordered drug pair: ``head`` is ``#Drug1`` of the interaction template, ``tail`` is ``#Drug2``."""

    head: Drug  # the interaction template's #Drug1 ("Drug A" in the prompts)
    tail: Drug  # its #Drug2 ("Drug B"); the types are directional, so the order matters

    def as_dict(self) -> dict[str, Any]:
        """The pair as plain JSON values."""
        return {"head": self.head.as_dict(), "tail": self.tail.as_dict()}


@dataclass(frozen=True, slots=True)
class Molecule:
    """One molecule: its SMILES, and its InChIKey, name and source id when known."""

    smiles: str  # canonical SMILES (RDKit), as the task's sources give the structure
    inchikey: str = ""  # standard InChIKey, the key annotation databases are looked up by
    name: str = ""  # a name, when the source has one (a model may be shown it)
    id: str = ""  # the molecule's id in its source (e.g. a Drug Repurposing Hub broad id), when it has one

    def as_dict(self) -> dict[str, Any]:
        """The fields as plain JSON values."""
        return dataclasses.asdict(self)


# Ways of asking about the interaction of two drugs ({a}, {b}: their names); the DDI QA tasks choose one
# by a hash of the pair, and free-text systems asked to classify a pair use the first.
PARAPHRASES = (
    "What happens if {a} is taken with {b}?",
    "Is it safe to combine {a} and {b}?",
    "Are there any interactions between {a} and {b}?",
    "What should I know before taking {a} together with {b}?",
    "Can {a} be used with {b}? What is the interaction?",
    "How does {a} interact with {b}?",
)


def interaction_question(a: str, b: str, variant: int | None = None) -> str:
    """A question about the interaction of drugs ``a`` and ``b``: paraphrase ``variant``, or one chosen by
    a hash of the two names (the same pair always gets the same wording)."""
    if variant is None:
        variant = int(hashlib.sha256(f"{a}|{b}".encode()).hexdigest()[:8], 16) % len(PARAPHRASES)
    return PARAPHRASES[variant].format(a=a, b=b)


@dataclass(frozen=True, slots=True)
class Question:
    """A free-text question; ``pair`` names the drugs when it asks about an interaction."""

    text: str  # the question as asked
    pair: DrugPair | None = None  # the two drugs a DDI question is about (None for other questions)
    focus: str = ""  # what the question is about (a drug, a disease)
    qtype: str = ""  # question type, e.g. "interaction", "treatment"
    source: str = ""  # the collection it comes from

    def as_dict(self) -> dict[str, Any]:
        """The question as plain JSON values."""
        return {
            "text": self.text,
            "pair": self.pair.as_dict() if self.pair else None,
            "focus": self.focus,
            "qtype": self.qtype,
            "source": self.source,
        }


SampleInput = DrugPair | Molecule | Question
# a label id, label ids, or a mapping (a question's {"answer": reference text, "label": type or None},
# a molecule's label columns)
Target = int | tuple[int, ...] | str | Mapping[str, Any] | None


_NO_META: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Sample:
    id: str  # stable: a hash of the sample's content (the same content always gets the same id)
    input: SampleInput  # a DrugPair, a Molecule or a Question, by the task's input_kind
    # the gold: a label id (DrugBank, yes/no tasks), a tuple of label ids (TWOSIDES, targets), a mapping (a
    # question's {"answer", "label"}, a molecule's property columns); None in the samples predict() is given
    target: Target
    clusters: tuple[
        str, ...
    ]  # what the bootstrap resamples: the pair's drug ids, the molecule's scaffold, the question's document
    meta: Mapping[str, Any] = field(
        default_factory=lambda: MappingProxyType({})
    )  # the family's extra facts (e.g. n_unseen drugs), empty in predict()

    # typed access to the input, by the task's input_kind: a drug-pair system reads ``sample.pair.head``, and a
    # sample of another kind raises TypeError naming what it holds instead of failing later on a missing attribute
    @property
    def pair(self) -> DrugPair:
        """The input of a drug-pair task (DrugBank, TWOSIDES)."""
        return _input_of(self, DrugPair)

    @property
    def molecule(self) -> Molecule:
        """The input of a molecular task (toxicity, targets, captioning)."""
        return _input_of(self, Molecule)

    @property
    def question(self) -> Question:
        """The input of a question-answering task."""
        return _input_of(self, Question)

    # typed access to the gold, by the task's kind of target: a single-label task reads ``sample.label``, a label-set
    # task ``sample.label_ids``; a target of another kind raises TypeError naming what it holds
    @property
    def label(self) -> int:
        """The gold of a single-label task (DrugBank, yes/no tasks): one label id."""
        if isinstance(self.target, Integral):
            return int(self.target)
        raise TypeError(f"sample {self.id} has a target of type {type(self.target).__name__}, not one label id")

    @property
    def label_ids(self) -> tuple[int, ...]:
        """The gold of a label-set task (TWOSIDES, drug targets): label ids."""
        if isinstance(self.target, (tuple, list)) and all(isinstance(t, Integral) for t in self.target):
            return tuple(int(t) for t in self.target)
        raise TypeError(f"sample {self.id} has a target of type {type(self.target).__name__}, not a tuple of label ids")

    def blind(self) -> Sample:
        """The sample as a system sees it at prediction time: no target, no label-derived metadata."""
        return Sample(self.id, self.input, None, self.clusters, _NO_META)

    def as_dict(self) -> dict[str, Any]:
        """The sample as plain JSON values."""
        return {
            "id": self.id,
            "input": self.input.as_dict(),
            "target": self.target,
            "clusters": list(self.clusters),
            "meta": dict(self.meta),
        }


InputT = TypeVar("InputT", DrugPair, Molecule, Question)


def _input_of(sample: Sample, kind: type[InputT]) -> InputT:
    if not isinstance(sample.input, kind):
        raise TypeError(
            f"sample {sample.id} holds a {type(sample.input).__name__}, not a {kind.__name__}: this system does not serve its task"
        )
    return sample.input


def sample_id(prefix: str, content: Any) -> str:
    """A stable id from a sample's content (the same content always gives the same id)."""
    return f"{prefix}-{sha256_text(stable_json(content))[:16]}"


@dataclass(frozen=True, slots=True)
class Label:
    id: int  # its place in the label space: 0..n-1 (a prediction's label, the ids of a ranking)
    template: str  # with #Drug1 / #Drug2 placeholders; a yes/no task's text of the answer ("blocks hERG")
    name: str = ""  # a short name: a side effect, an HGNC symbol, "yes"/"no"

    def render(self, drug1: str, drug2: str) -> str:
        """The template with the two drugs' names in place of #Drug1 and #Drug2."""
        return self.template.replace("#Drug1", drug1).replace("#Drug2", drug2)


@dataclass(frozen=True)
class LabelSpace:
    labels: tuple[Label, ...]  # in id order; a LabelSpace is indexed, iterated and measured like this tuple

    def __post_init__(self) -> None:
        ids = [label.id for label in self.labels]
        if ids != list(range(len(ids))):
            raise ValueError("label ids must be 0..n-1 in order")

    def __len__(self) -> int:
        return len(self.labels)

    def __iter__(self) -> Iterator[Label]:
        return iter(self.labels)

    def __getitem__(self, label_id: int) -> Label:
        return self.labels[label_id]

    def fingerprint(self) -> str:
        """A hash of every label's id, template and name (recorded with results)."""
        return sha256_text(stable_json([[lb.id, lb.template, lb.name] for lb in self.labels]))


class Prediction(BaseModel):
    """One system output for one sample.

    What a task's evaluator reads depends on the kind of answer: ``label`` (one label id), ``scores``
    (label id as a string -> probability or score, for AUROC), ``ranked`` (label ids, best first, for
    top-k metrics) or ``text`` (free text). ``position`` is where the chosen option (the first-ranked one
    of a ranking) stood in the list of options the system was shown, from 1, for systems that answer from
    a listed choice: the position-bias check of :mod:`ddibench.evaluation.answers` reads it. ``valid`` is
    False when the system's raw output could not be turned into the expected format (for example an LLM
    answer that names no interaction type); such predictions are scored as wrong and counted separately.
    ``trace`` holds whatever lets a reviewer see why the system answered as it did (prompts, raw answers,
    retrieved context, scores).
    """

    # non-finite scores are written as NaN/Infinity, as json.dumps writes them (and json.loads reads them back)
    model_config = ConfigDict(frozen=True, extra="forbid", ser_json_inf_nan="constants")

    sample_id: str  # the Sample's id
    label: int | None = None  # one label id (classification tasks: DrugBank, yes/no tasks where 0 = no, 1 = yes)
    scores: dict[str, float] | None = None  # str(label id) -> score; AUROC reads the positive label's, {"1": p(yes)}
    ranked: list[int] | None = None  # label ids, most likely first (TWOSIDES, targets: the first k distinct count)
    text: str | None = None  # the answer as text (QA, captions), or the raw model output of a label answer
    position: int | None = None  # where the chosen option stood in the list the system was shown, from 1
    rationale: str | None = None  # the system's stated reason, when it gives one
    valid: bool = True  # False: the output could not be turned into an answer (scored as wrong, counted apart)
    error: str | None = None  # why an invalid prediction is invalid
    trace: dict[str, Any] = Field(
        default_factory=dict
    )  # how the answer came about; each LLM call under "llm" (llm_trace)

    @classmethod
    def invalid(cls, sample_id: str, error: str, **kwargs: Any) -> Prediction:
        """A prediction whose output could not be used, with the reason."""
        return cls(sample_id=sample_id, valid=False, error=error, **kwargs)
