"""The data shapes every task, system and run shares.

* :class:`Sample` — immutable; a stable content-hash id, an input (here a :class:`DrugPair`), a target,
  and cluster keys (the drug ids, for clustered statistics).
* :class:`LabelSpace` — the ids, names and templates of a classification task's labels.
* :class:`Prediction` — what a system returns for one sample: a label (or ranked labels, or text),
  whether its output could be parsed, and a trace of how it got there. Predictions are journalled as
  JSON, so their schema is versioned (:data:`PREDICTION_SCHEMA_VERSION`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ddibench.hashing import sha256_text, stable_json

PREDICTION_SCHEMA_VERSION = 1


@dataclass(frozen=True, slots=True)
class Drug:
    """A drug of a task family's id space."""

    node_id: int  # id in the family's id space (DrugBank DDI: EmerGNN/SumGNN node id 0..1709)
    drugbank_id: str
    name: str
    smiles: str

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True, slots=True)
class DrugPair:
    """An ordered drug pair: ``head`` is ``#Drug1`` of the interaction template, ``tail`` is ``#Drug2``."""

    head: Drug
    tail: Drug

    def as_dict(self) -> dict[str, Any]:
        return {"head": self.head.as_dict(), "tail": self.tail.as_dict()}


@dataclass(frozen=True, slots=True)
class Question:
    """A free-text question; ``pair`` names the drugs when it asks about an interaction."""

    text: str
    pair: DrugPair | None = None
    focus: str = ""  # what the question is about (a drug, a disease)
    qtype: str = ""  # question type, e.g. "interaction", "treatment"
    source: str = ""  # the collection it comes from

    def as_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "pair": self.pair.as_dict() if self.pair else None,
            "focus": self.focus,
            "qtype": self.qtype,
            "source": self.source,
        }


SampleInput = DrugPair | Question
# a label id, label ids, or, for questions, {"answer": reference text, "label": interaction type or None}
Target = int | tuple[int, ...] | str | Mapping[str, Any] | None


@dataclass(frozen=True, slots=True)
class Sample:
    id: str
    input: SampleInput
    target: Target
    clusters: tuple[str, ...]
    meta: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def blind(self) -> Sample:
        """The sample as a system sees it at prediction time: no target, no label-derived metadata."""
        return dataclasses.replace(self, target=None, meta=MappingProxyType({}))

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "input": self.input.as_dict(),
            "target": self.target,
            "clusters": list(self.clusters),
            "meta": dict(self.meta),
        }


def sample_id(prefix: str, content: Any) -> str:
    """A stable id from a sample's content (the same content always gives the same id)."""
    return f"{prefix}-{sha256_text(stable_json(content))[:16]}"


@dataclass(frozen=True, slots=True)
class Label:
    id: int
    template: str  # with #Drug1 / #Drug2 placeholders
    name: str = ""

    def render(self, drug1: str, drug2: str) -> str:
        return self.template.replace("#Drug1", drug1).replace("#Drug2", drug2)


@dataclass(frozen=True)
class LabelSpace:
    labels: tuple[Label, ...]

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
        return sha256_text(stable_json([[lb.id, lb.template, lb.name] for lb in self.labels]))


class Prediction(BaseModel):
    """One system output for one sample.

    ``valid`` is False when the system's raw output could not be turned into the expected format (for
    example an LLM answer that names no interaction type); such predictions are scored as wrong and
    counted separately. ``trace`` holds whatever lets a reviewer see why the system answered as it did
    (prompts, raw answers, retrieved context, scores).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    sample_id: str
    label: int | None = None
    ranked: list[int] | None = None
    text: str | None = None
    rationale: str | None = None
    valid: bool = True
    error: str | None = None
    trace: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def invalid(cls, sample_id: str, error: str, **kwargs: Any) -> Prediction:
        return cls(sample_id=sample_id, valid=False, error=error, **kwargs)
