"""Tasks: versioned, checksummed definitions with a strict evaluator.

A :class:`Task` names its pinned source files, its label space, its sample input type and its splits;
``load()`` builds the samples once per process (the family writes only :meth:`Task.build`, which also
verifies what the task promises, such as split sizes and the S0/S1/S2 property) and ``evaluator()``
scores predictions. ``data_sha256`` hashes the pinned sources and the recipe version, so every result
names exactly the data it was computed on.

What a family hands to systems besides the splits travels in :attr:`TaskData.resources` (a drug
catalog, the interactions a knowledge base may hold), never as an import of the family's module.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from ddibench.data.sources import SourceFile
from ddibench.errors import UnknownNameError
from ddibench.hashing import sha256_text, stable_json
from ddibench.schema import LabelSpace, Sample

if TYPE_CHECKING:
    from ddibench.evaluation.base import Evaluator

InputKind = Literal["drug_pair", "molecule", "question"]


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


@dataclass
class TaskData:
    """The loaded splits of a task, the resources built with them, and the checks they passed."""

    splits: dict[str, tuple[Sample, ...]]
    resources: dict[str, Any] = field(default_factory=Resources)
    checks: list[Check] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not isinstance(self.resources, Resources):
            self.resources = Resources(self.resources)

    def split(self, name: str) -> tuple[Sample, ...]:
        if name not in self.splits:
            raise UnknownNameError("split", name, self.splits)
        return self.splits[name]


_LOAD_LOCK = threading.RLock()  # loading is rare and may nest (a family built on another family's task)


class Task(ABC):
    """A benchmark task. Subclasses set the class attributes and implement ``sources``,
    ``label_space``, ``build`` and ``evaluator``."""

    name: str
    version: str
    family: str
    setting: str
    title: str
    input_kind: ClassVar[InputKind] = "drug_pair"
    cluster_unit: ClassVar[str] = "drugs"  # what the samples' cluster keys are (the bootstrap resamples them)
    recipe_version: int = 1
    eval_split: str = "test"
    required_seeds: int = 1

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
