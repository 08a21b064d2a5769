"""ddibench: an evaluation benchmark suite for LLM-based systems on drug-interaction tasks.

The shapes and base classes a method author needs are re-exported here. The rest of the public API
lives in these modules (what the reference systems import, and all they import):

* ``ddibench.llm`` — model access (``ctx.model(role)`` returns an ``LLMClient``), ``ChatResult``;
* ``ddibench.kg`` — the shared knowledge graph, path search;
* ``ddibench.chem`` — molecular fingerprints; ``ddibench.embeddings`` — sentence encoders;
* ``ddibench.toolkit`` — building blocks of systems: ``label_choice`` (label-choosing), ``answering`` (free text),
  ``molecule_answers`` (one molecule), ``label_sets`` (trained label-set models), ``corpus`` (retrieval corpora);
* ``ddibench.data`` — pinned source data;
* ``ddibench.evaluation`` — evaluators, for task families.

Modules whose name starts with ``_`` are private. Heavy libraries (torch, rdkit, llama.cpp, openai)
are imported only where they are used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ddibench._version import __version__

_EXPORTS = {
    "BaseSystem": "ddibench.system",
    "BestEpoch": "ddibench.system",
    "RunContext": "ddibench.system",
    "System": "ddibench.system",
    "SystemConfig": "ddibench.system",
    "TrainingProgress": "ddibench.system",
    "TrainingView": "ddibench.system",
    "llm_trace": "ddibench.system",
    "Drug": "ddibench.schema",
    "DrugPair": "ddibench.schema",
    "Label": "ddibench.schema",
    "LabelSpace": "ddibench.schema",
    "Molecule": "ddibench.schema",
    "Question": "ddibench.schema",
    "Prediction": "ddibench.schema",
    "Sample": "ddibench.schema",
    "AnswerSpec": "ddibench.task",
    "Task": "ddibench.task",
    "TaskData": "ddibench.task",
    "DdibenchError": "ddibench.errors",
}

__all__ = [
    "__version__",
    "AnswerSpec",
    "BaseSystem",
    "BestEpoch",
    "DdibenchError",
    "Drug",
    "DrugPair",
    "Label",
    "LabelSpace",
    "Molecule",
    "Prediction",
    "Question",
    "RunContext",
    "Sample",
    "System",
    "SystemConfig",
    "Task",
    "TaskData",
    "TrainingProgress",
    "TrainingView",
    "llm_trace",
]

if TYPE_CHECKING:
    from ddibench.errors import DdibenchError
    from ddibench.schema import Drug, DrugPair, Label, LabelSpace, Molecule, Prediction, Question, Sample
    from ddibench.system import (
        BaseSystem,
        BestEpoch,
        RunContext,
        System,
        SystemConfig,
        TrainingProgress,
        TrainingView,
        llm_trace,
    )
    from ddibench.task import AnswerSpec, Task, TaskData


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'ddibench' has no attribute '{name}'")
