"""Tasks: versioned, checksummed definitions with a strict evaluator.

A :class:`Task` names its pinned source files, its label space, its sample input type and its splits;
``load()`` builds the samples once per process (the family writes only :meth:`Task.build`, which also
verifies what the task promises, such as split sizes and the S0/S1/S2 property) and ``evaluator()``
scores predictions. ``data_sha256`` hashes the pinned sources and the recipe version, so every result
names exactly the data it was computed on.

What a family hands to systems besides the splits travels in :attr:`TaskData.resources` (a drug
catalog, the interactions a knowledge base may hold), never as an import of the family's module.

How a task is answered (one label, yes or no, the top k of its labels, free text; for a language model the
answer's token budget and system prompt where the family fixes them) is declared once, as its
:attr:`Task.answer` (an :class:`AnswerSpec`): systems read it instead of comparing family names, so a new
family is answered by every system that can give its kind of answer, with no edit of the core.

Most tasks ask a system about the evaluation split only. A task whose scorer learns from the systems'
own outputs (captioning: a probe learns the property from the captions of the training molecules)
names the splits a system must answer in :attr:`Task.predict_splits`, and may keep training labels
from systems altogether (:attr:`Task.training_labels_visible`).
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeVar

import tomllib
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from ddibench.data.sources import SourceFile
from ddibench.errors import ConfigError, DataError, UnknownNameError
from ddibench.hashing import sha256_text, stable_json
from ddibench.schema import LabelSpace, Sample

if TYPE_CHECKING:
    from ddibench.evaluation.base import Evaluator

InputKind = Literal["drug_pair", "molecule", "question"]
AnswerKind = Literal["label", "yes_no", "top_k", "text"]


@dataclass(frozen=True, slots=True)
class Check:
    """One verification a task performs on its data when it loads."""

    name: str
    ok: bool
    detail: str


class Lazy:
    """A resource built on first use (e.g. another task's training split), at most once."""

    def __init__(self, build: Callable[[], Any]) -> None:
        self.build = build


class Resources(dict):
    """Resources of a task by name; :class:`Lazy` values are built when first read."""

    _lock = threading.RLock()

    def __getitem__(self, key: str) -> Any:
        value = super().__getitem__(key)
        if isinstance(value, Lazy):
            with self._lock:
                value = super().__getitem__(key)
                if isinstance(value, Lazy):
                    value = value.build()
                    super().__setitem__(key, value)
        return value

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key in self else default  # noqa: SIM401 - resolves Lazy values, dict.get would not

    def values(self) -> list[Any]:  # type: ignore[override]
        return [self[key] for key in self]

    def items(self) -> list[tuple[str, Any]]:  # type: ignore[override]
        return [(key, self[key]) for key in self]


class Splits(Resources):
    """Samples by split name; a :class:`Lazy` split is built when first read, so a run that never reads
    the training split (a resume, a system that trains on nothing) never builds its samples or hashes
    their ids."""

    _lock = threading.RLock()


@dataclass
class TaskData:
    """The loaded splits of a task, the resources built with them, and the checks they passed."""

    splits: dict[str, tuple[Sample, ...]]  # a Splits: values may be given as Lazy
    resources: dict[str, Any] = field(default_factory=Resources)
    checks: list[Check] = field(default_factory=list)
    # what ``ddibench data stats`` prints beside the split sizes, e.g. source rows before and after
    # deduplication ({"rows": 655, "unique canonical SMILES": 648, ...}), in the family's own words
    stats: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.resources, Resources):
            self.resources = Resources(self.resources)
        if not isinstance(self.splits, Splits):
            self.splits = Splits(self.splits)

    def split(self, name: str) -> tuple[Sample, ...]:
        if name not in self.splits:
            raise UnknownNameError("split", name, self.splits)
        return self.splits[name]


_LOAD_LOCK = threading.RLock()  # loading is rare and may nest (a family built on another family's task)


# What a task family may hand to systems in ``TrainingView.resources`` (and ``TaskData.resources``): the key,
# what its value is, and what a system may do with it. A family declares the keys it provides
# (:attr:`Task.resource_keys`); a test loads one task of each family and checks the two agree.
RESOURCES: dict[str, str] = {
    "drugs": "the family's drug catalog (``.drugs``: every :class:`~ddibench.schema.Drug` of its id space, indexed by ``node_id``)",
    "labels": "the task's :class:`~ddibench.schema.LabelSpace` (the same as ``task.label_space``)",
    "train_drugs": "``frozenset`` of the node ids of drugs that occur in training pairs (unseen drugs are the others)",
    "interactions": "the training interactions, built on first use: ``(training samples, label space)``; what a knowledge "
    "base of a system (SQL table, graph, corpus) may hold — never a test pair",
    "kg_space": "the id space of the family's drugs in the knowledge graph (``'drugbank'`` or ``'twosides'``), for ``ddibench.kg``",
    "instruction": "the task's instruction to a model, one sentence (e.g. 'Predict whether the molecule blocks hERG ...')",
    "question": "a toxicity task's yes/no question about one molecule",
    "kg_overlap": "drug targets: ``{InChIKey: KG entity ids}`` of the molecules the knowledge graph holds (the "
    "'overlap' slice, as each sample's ``meta['kg']`` says)",
}


def require(task: str, checks: list[Check], definitions: str) -> None:
    """Raise DataError naming every failed check of ``task`` (``definitions``: the file that declares what they
    expect), so a load never returns data that differs from its definition."""
    failed = [c for c in checks if not c.ok]
    if failed:
        detail = "; ".join(f"{c.name}: {c.detail}" for c in failed)
        raise DataError(
            f"task {task}: data does not match its definition ({detail})",
            f"the sources or the recipe changed; run 'ddibench data stats' and update {definitions} with a new version",
        )


# ---------------------------------------------------------------------------------------------
# How a task is answered


class AnswerSpec(BaseModel):
    """How a task is answered (:attr:`Task.answer`): what a prediction holds and, for a language model, the
    answer's token budget and system prompt where the family fixes them. Systems read it to decide what to answer
    (a ranking or a yes/no, the prompt, the budget), never the family's name."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: AnswerKind
    """``label``: one label of the task's label space (``Prediction.label``); ``yes_no``: 1 (yes) or 0 (no) in
    ``Prediction.label``, with the probability of yes in ``scores`` where a system has one; ``top_k``: ``k`` labels,
    most likely first (``Prediction.ranked``); ``text``: free text (``Prediction.text``)."""
    k: int = Field(1, ge=1)
    """How many labels a ``top_k`` answer names (the k its ranking evaluator scores); 1 for every other kind."""
    max_tokens: int | None = Field(None, gt=0)
    """The token budget of a language model's answer; None: the system's own (its ``max_tokens`` option)."""
    system_prompt: str = ""
    """The system message a language model answers under where the family fixes one (the molecular families: the
    expert and the JSON form of the answer); empty: the system's own."""
    closing: str = ""
    """A last paragraph of the question that bounds the answer (captioning: one paragraph of at most 120 words);
    empty: none."""

    @model_validator(mode="after")
    def _k_only_for_top_k(self) -> AnswerSpec:
        if self.kind != "top_k" and self.k != 1:
            raise ValueError(f"k={self.k} is for a top_k answer; a {self.kind} answer names one")
        return self


# ---------------------------------------------------------------------------------------------
# Task definitions: a family's tasks.toml, validated


class TaskSpec(BaseModel):
    """One ``[tasks.NAME]`` table of a family's ``tasks.toml``: the keys every task declares. A family
    subclasses it with its own keys (files, the sizes its loads check, ...); a key no model declares (a
    typo, a renamed field) fails the load instead of being ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: str  # the task's version: any change to its samples or scoring bumps it
    setting: str  # what the split tests (S0/S1/S2, scaffold, ...)
    title: str  # one line, as 'ddibench list tasks' prints it


class FamilySpec(BaseModel):
    """The ``[family]`` table of a ``tasks.toml``: what all its tasks share."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    recipe_version: int = 1  # the version of the code that turns the sources into samples (in ``data_sha256``)


FamilySpecT = TypeVar("FamilySpecT", bound=FamilySpec)


def load_task_specs(package: str, family_spec: type[FamilySpecT], task_spec: Any) -> tuple[FamilySpecT, dict[str, Any]]:
    """Read and validate the ``tasks.toml`` of ``package``: its ``[family]`` table as ``family_spec`` and each
    ``[tasks.NAME]`` table as ``task_spec`` (a model, or a discriminated union of models). Raises DataError
    naming the task and the key when a table does not match."""
    where = f"{package.replace('.', '/')}/tasks.toml"
    raw = tomllib.loads(resources.files(package).joinpath("tasks.toml").read_text(encoding="utf-8"))
    adapter: TypeAdapter[Any] = TypeAdapter(task_spec)
    table = "[family]"
    try:
        family = family_spec.model_validate(raw.get("family", {}))
        tasks = {}
        for name, spec in raw.get("tasks", {}).items():
            table = f"[tasks.{name}]"
            tasks[name] = adapter.validate_python(spec)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(k) for k in err["loc"])
        raise DataError(
            f"{where}: {table}{' ' + key if key else ''}: {err['msg']}",
            "fix the table: its keys are the fields of the family's spec",
        ) from None
    return family, tasks


class Task(ABC):
    """A benchmark task. Subclasses set the class attributes (``answer`` among them: how it is answered) and
    implement ``sources``, ``label_space``, ``build`` and ``evaluator``."""

    name: str
    version: str
    family: str
    setting: str
    title: str
    input_kind: ClassVar[InputKind] = "drug_pair"
    cluster_unit: ClassVar[str] = (
        "drugs"  # what a sample's cluster keys are (drugs, scaffolds, documents); the bootstrap resamples them
    )
    recipe_version: int = 1
    eval_split: str = "test"
    required_seeds: int = 1
    # splits a system answers besides the evaluated one, in order (empty: the evaluated split only)
    predict_splits: ClassVar[tuple[str, ...]] = ()
    # False: systems see no label at all, not even in the training view (captioning: labels are the probe's)
    training_labels_visible: ClassVar[bool] = True
    # the keys of ``TaskData.resources`` this task hands to systems (each documented in :data:`RESOURCES`)
    resource_keys: ClassVar[tuple[str, ...]] = ()
    # how it is answered (every task declares it; the registry refuses a task without one)
    answer: ClassVar[AnswerSpec]

    @property
    @abstractmethod
    def sources(self) -> tuple[SourceFile, ...]: ...

    @property
    @abstractmethod
    def label_space(self) -> LabelSpace: ...

    @property
    def deviations(self) -> tuple[str, ...]:
        """Known differences from the upstream definition (stated in every manifest)."""
        return ()

    @property
    def data_sha256(self) -> str:
        """Hash of the pinned sources and the recipe that turns them into samples."""
        payload = {
            "sources": sorted((s.relpath, s.sha256) for s in self.sources),
            "recipe": [self.family, self.recipe_version],
        }
        return sha256_text(stable_json(payload))

    def predicted_splits(self, split: str) -> tuple[str, ...]:
        """The splits a run that evaluates ``split`` asks the system about, in order: ``split`` alone,
        or for a task with :attr:`predict_splits` every one of them up to and including ``split``."""
        if not self.predict_splits:
            return (split,)
        if split not in self.predict_splits:
            raise ConfigError(
                f"task {self.name} cannot be evaluated on split '{split}'",
                f"use one of {', '.join(self.predict_splits[1:])}",
            )
        return self.predict_splits[: self.predict_splits.index(split) + 1]

    def load(self) -> TaskData:
        """The task's data, built (and checked) once per process."""
        with _LOAD_LOCK:
            loaded = self.__dict__.get("_loaded")
            if loaded is None:
                loaded = self.build()
                self.__dict__["_loaded"] = loaded
            return loaded

    @abstractmethod
    def build(self) -> TaskData:
        """Read the sources, build the splits and verify them (raise DataError when a check fails)."""

    @abstractmethod
    def evaluator(self) -> Evaluator: ...

    def card(self) -> dict[str, Any]:
        """What a manifest records about the task."""
        return {
            "name": self.name,
            "version": self.version,
            "family": self.family,
            "setting": self.setting,
            "title": self.title,
            "data_sha256": self.data_sha256,
            "recipe_version": self.recipe_version,
            "sources": [s.describe() for s in self.sources],
            "deviations": list(self.deviations),
            "input_kind": self.input_kind,
            "cluster_unit": self.cluster_unit,
        }
