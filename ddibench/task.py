"""Tasks: versioned, checksummed definitions with a strict evaluator.

A :class:`Task` names its pinned source files, its label space and its splits; ``load()`` builds the
samples (verifying what the task promises, such as split sizes and the S0/S1/S2 property) and
``evaluator()`` scores predictions. ``data_sha256`` hashes the pinned sources and the recipe version,
so every result names exactly the data it was computed on.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import BaseModel

from ddibench.data.sources import SourceFile
from ddibench.errors import ConfigError
from ddibench.hashing import sha256_text, stable_json
from ddibench.metrics.bootstrap import BootstrapSpec
from ddibench.schema import LabelSpace, Prediction, Sample


@dataclass(frozen=True, slots=True)
class Check:
    """One verification a task performs on its data when it loads."""

    name: str
    ok: bool
    detail: str


@dataclass
class TaskData:
    """The loaded splits of a task, the resources built with them, and the checks they passed."""

    splits: dict[str, tuple[Sample, ...]]
    resources: dict[str, Any] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)

    def split(self, name: str) -> tuple[Sample, ...]:
        if name not in self.splits:
            from ddibench.errors import UnknownNameError

            raise UnknownNameError("split", name, self.splits)
        return self.splits[name]


class MetricValue(BaseModel):
    value: float
    ci_low: float | None = None
    ci_high: float | None = None


class EvaluationResult(BaseModel):
    """Metrics of one set of predictions, with confidence intervals and the counts behind them."""

    n: int
    n_invalid: int
    metrics: dict[str, MetricValue]
    primary_metric: str
    bootstrap: dict[str, Any]
    breakdown: dict[str, dict[str, Any]] = {}
    per_label: dict[str, float | None] = {}
    invalid_examples: list[dict[str, str]] = []
    per_sample: dict[str, dict[str, Any]] = {}  # scores of each sample, for drill-down


class EvaluationInputError(ValueError):
    """Predictions that do not match the evaluator's expected format (a bug in the system)."""


class Evaluator(Protocol):
    expected_format: str

    def evaluate(
        self,
        samples: Sequence[Sample],
        predictions: Mapping[str, Prediction],
        bootstrap: BootstrapSpec,
        extras: Mapping[str, Any] | None = None,
    ) -> EvaluationResult: ...


class Task(ABC):
    """A benchmark task. Subclasses set the class attributes and implement ``load``/``evaluator``."""

    name: str
    version: str
    family: str
    setting: str
    title: str
    recipe_version: int = 1
    eval_split: str = "test"
    llm_scored: bool = False  # answers are also graded by an LLM judge and SelfCheckGPT after prediction

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

    @abstractmethod
    def load(self) -> TaskData: ...

    @abstractmethod
    def evaluator(self) -> Evaluator: ...

    def scoring_evaluator(self, encoder: str | None = None) -> Evaluator:
        """The evaluator with a non-default text encoder for the similarity scorers (free-text tasks only)."""
        if encoder is None:
            return self.evaluator()
        if not self.llm_scored:
            raise ConfigError(f"--scorer-encoder does not apply to {self.name}: its answers are labels, not free text",
                              "drop --scorer-encoder, or use it with a question-answering task")  # fmt: skip
        return self._evaluator_with_encoder(encoder)

    def _evaluator_with_encoder(self, encoder: str) -> Evaluator:
        raise ConfigError(f"{self.name} has no text-encoder scorer", "drop --scorer-encoder")

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
        }
