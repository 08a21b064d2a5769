"""ddibench: an evaluation benchmark suite for LLM-based systems on drug-interaction tasks.

The public API a method author needs is re-exported here; everything else is internal. Heavy
libraries (torch, rdkit, llama.cpp, openai) are imported only where they are used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "BaseSystem": "ddibench.system",
    "RunContext": "ddibench.system",
    "System": "ddibench.system",
    "SystemConfig": "ddibench.system",
    "TrainingView": "ddibench.system",
    "llm_trace": "ddibench.system",
    "Drug": "ddibench.schema",
    "DrugPair": "ddibench.schema",
    "Label": "ddibench.schema",
    "LabelSpace": "ddibench.schema",
    "Prediction": "ddibench.schema",
    "Sample": "ddibench.schema",
    "Task": "ddibench.task",
    "TaskData": "ddibench.task",
    "DdibenchError": "ddibench.errors",
}

__all__ = [
    "__version__",
    "BaseSystem",
    "DdibenchError",
    "Drug",
    "DrugPair",
    "Label",
    "LabelSpace",
    "Prediction",
    "RunContext",
    "Sample",
    "System",
    "SystemConfig",
    "Task",
    "TaskData",
    "TrainingView",
    "llm_trace",
]

if TYPE_CHECKING:
    from ddibench.errors import DdibenchError
    from ddibench.schema import Drug, DrugPair, Label, LabelSpace, Prediction, Sample
    from ddibench.system import BaseSystem, RunContext, System, SystemConfig, TrainingView, llm_trace
    from ddibench.task import Task, TaskData


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'ddibench' has no attribute '{name}'")
