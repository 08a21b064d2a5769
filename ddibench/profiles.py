"""Declared hardware profiles, and detection of the hardware a run really had.

A profile says what a run may assume (accelerators, memory, LLM concurrency) and the budgets that fit
it: per-system configuration defaults, for example fewer MLP epochs on ``cpu``, and beside each figure its
source (``Profile.sources``: the paper's table or section behind a GPU profile's budget, the measurement behind a
CPU one), which ``ddibench list profiles`` prints. The runner records the
declared profile and the detected hardware side by side in every manifest; the ``cpu`` profile is the
one CI exercises.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from ddibench.errors import ConfigError, UnknownNameError


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    accelerator: str | None  # e.g. "NVIDIA A100 80GB"
    accelerator_count: int
    accelerator_memory_gb: int
    llm_concurrency: int  # concurrent requests per model endpoint
    budgets: dict[str, dict[str, Any]] = field(default_factory=dict)  # system name -> config defaults
    rankable: bool = True  # False: a smoke budget; its runs are never submittable or ranked
    # system name -> task name -> config defaults over the system's budget, where one budget does not fit every task
    task_budgets: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    # system name -> budget key (or a task name of task_budgets) -> where the figure comes from: a paper and its table
    # or section, or the measurement behind a CPU budget ("paper, table/section" or "measured: ...")
    sources: dict[str, dict[str, str]] = field(default_factory=dict)

    def budget_for(self, system: str, task: str | None = None) -> dict[str, Any]:
        """The configuration defaults ``system`` gets under this profile; with ``task``, that task's own budget over them."""
        budget = dict(self.budgets.get(system, {}))
        if task is not None:
            budget.update(self.task_budgets.get(system, {}).get(task, {}))
        return budget

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "accelerator": self.accelerator,
            "accelerator_count": self.accelerator_count,
            "accelerator_memory_gb": self.accelerator_memory_gb,
            "llm_concurrency": self.llm_concurrency,
            "budgets": self.budgets,
            "task_budgets": self.task_budgets,
            "rankable": self.rankable,
        }  # not the sources: they say where the figures come from, and a reworded one changes no run

    def source_of(self, system: str, key: str) -> str | None:
        """Where ``system``'s budget figure ``key`` (a config key, or a task name of its task budgets) comes from."""
        return self.sources.get(system, {}).get(key)


def torch_device(device: str, owner: str, key: str = "device") -> Any:
    """``torch.device(device)`` for ``owner``'s config ``key``; a one-line configuration error when it asks for CUDA
    where torch sees none (a GPU profile on a machine without one)."""
    import torch

    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(
            f"{owner} config {key}={device}, but torch sees no CUDA device",
            f"use --config {key}=cpu, a CPU profile (--profile cpu) or a GPU machine",
        )
    return torch.device(device)


CBR_DDI = "Liu et al. 2025, CBR-DDI (arXiv 2505.23034)"
DRUGRAG = "DrugRAG paper, Table II"

_CORPUS_KEYS = ("interaction_chunks", "monograph_chunks", "medquad_chunks")
# GPU profiles train in full, with the papers' schedules, and build the papers' repositories and indexes
_GPU_BUDGETS: dict[str, dict[str, Any]] = {
    "mlp": {"max_epochs": 100, "device": "cuda"},
    "emergnn": {"max_epochs": 100, "epoch_per_test": 5, "device": "cuda"},
    "gin": {"max_epochs": 300, "patience": 30, "device": "cuda"},
    "cbr-ddi": {
        "repository_size": None,
        "refine_cases": None,
        "lam": None,
        "lambda_valid_pairs": None,
        "encoder_device": "cuda",
    },
    "text-rag": {**dict.fromkeys(_CORPUS_KEYS), "encoder_device": "cuda"},
    "agentic-rag": {**dict.fromkeys(_CORPUS_KEYS), "encoder_device": "cuda"},
}
_ACCELERATOR = "the profile's accelerator"
_ENCODER_ON_ACCELERATOR = (
    "the profile's accelerator: the text encoder (MiniLM) embeds there, as the GNNs train there (on 2 host cores "
    "it takes ~40 ms a 250-token text: 2.2 h for the 2 x 99,283 case texts of the paper's repository; "
    "docs/paper-scale.md)"
)
_WHOLE_CORPUS = f"{DRUGRAG}: retrieval over the whole corpus (text RAG: top-5 chunks; agentic GraphRAG: 2 iterations)"
_GPU_SOURCES: dict[str, dict[str, str]] = {
    "mlp": {
        "max_epochs": "ddibench's full budget (no paper states one): early stopping on validation ends training",
        "device": _ACCELERATOR,
    },
    "emergnn": {
        "max_epochs": "Zhang et al. 2024, EmerGNN: trains for up to 100 epochs (docs/systems/emergnn.md)",
        "epoch_per_test": "ddibench's full budget: validation every 5 epochs",
        "device": _ACCELERATOR,
    },
    "gin": {
        "max_epochs": "ddibench's full budget (no paper states one): at most 300 epochs",
        "patience": "ddibench's full budget: early stopping after 30 epochs without a better validation loss",
        "device": _ACCELERATOR,
    },
    "cbr-ddi": {
        "repository_size": f"{CBR_DDI}, repository construction: every training pair is a case (DrugBank 35,255), "
        "then representative sampling (sampling=True, at least 10 or 5% of each type; Table 4: 35,255 -> 2,139)",
        "refine_cases": f"{CBR_DDI}, repository refinement: every case is checked",
        "lam": f"{CBR_DDI}, hybrid retrieval: lambda chosen on the validation set",
        "lambda_valid_pairs": f"{CBR_DDI}, hybrid retrieval: lambda chosen on the whole validation set",
        "encoder_device": _ENCODER_ON_ACCELERATOR,
    },
    "text-rag": dict.fromkeys(_CORPUS_KEYS, _WHOLE_CORPUS) | {"encoder_device": _ENCODER_ON_ACCELERATOR},
    "agentic-rag": dict.fromkeys(_CORPUS_KEYS, _WHOLE_CORPUS) | {"encoder_device": _ENCODER_ON_ACCELERATOR},
}

_CPU_EMBED = "measured: embedding ~150-token chunks runs at tens per second on 2 cores: a declared share of the corpus"
_QUICK = "smoke budget: every stage once, small, in about a minute (`ddibench run --plan -p quick` counts the calls)"

PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        Profile(
            "cpu",
            "CPU only (CI and laptops): embedded 135M model, trained baselines on a declared epoch budget",
            None,
            0,
            0,
            llm_concurrency=4,
            budgets={
                "mlp": {"max_epochs": 30, "device": "cpu"},
                "gin": {"max_epochs": 60, "patience": 10, "device": "cpu"},
                "emergnn": {"max_epochs": 10, "epoch_per_test": 1, "valid_pairs": 3000, "device": "cpu"},
                "cbr-ddi": {"repository_size": 60, "refine_cases": 20, "lambda_valid_pairs": 20},
                "text-rag": {"interaction_chunks": 5000, "monograph_chunks": 3000, "medquad_chunks": 3000},
                "agentic-rag": {"interaction_chunks": 5000, "monograph_chunks": 3000, "medquad_chunks": 3000},
            },
            task_budgets={
                "text-rag": {"ddi_qa_lookup": {"interaction_chunks": None}},
                "agentic-rag": {"ddi_qa_lookup": {"interaction_chunks": None}},
                "emergnn": {
                    "drugbank_s2": {"max_epochs": 100, "epoch_per_test": 5},
                    "twosides_s1": {"max_epochs": 120, "epoch_per_test": 2, "lr": 1e-2},
                    "twosides_s2": {"max_epochs": 100, "epoch_per_test": 5},
                    # the approval-time windows are S2 splits over 12,786-16,049 training pairs
                    **dict.fromkeys(
                        ("drugbank_time", "drugbank_time_1", "drugbank_time_2"),
                        {"max_epochs": 100, "epoch_per_test": 5},
                    ),
                },
            },
            sources={
                "mlp": {"max_epochs": "measured: minutes on 2 cores", "device": "no accelerator"},
                "gin": dict.fromkeys(
                    ("max_epochs", "patience"),
                    "measured: a few minutes per molecular task on 2 cores (full test sets)",
                )
                | {"device": "no accelerator"},
                "emergnn": dict.fromkeys(
                    ("max_epochs", "epoch_per_test", "valid_pairs"),
                    "measured: about 15 minutes of training on 2 cores (DrugBank S1, with validation): 10 epochs "
                    "instead of 100, model selection on a seeded 3,000 validation pairs after every epoch; the full "
                    "test set is scored (benchmarks/emergnn_step.py)",
                )
                | {
                    "device": "no accelerator",
                    "drugbank_s2": "measured: an S2 epoch trains only the pairs whose two drugs are pseudo-new "
                    "(2,688 on drugbank_s2, against about 30,000 in S1), so the paper's 100 epochs fit the same "
                    "time (921 s on 2 cores)",
                    "twosides_s1": "measured: an epoch has 2,112 pairs; 120 epochs at lr 1e-2 (2,037 s) are where "
                    "validation recall@5 flattens (docs/systems/emergnn.md)",
                    "twosides_s2": "measured: as drugbank_s2, an S2 epoch is small enough for the paper's 100 epochs",
                    **dict.fromkeys(
                        ("drugbank_time", "drugbank_time_1", "drugbank_time_2"),
                        "as drugbank_s2: the approval-time windows are S2 splits with fewer training pairs "
                        "(12,786-16,049), so the paper's 100 epochs fit",
                    ),
                },
                "cbr-ddi": dict.fromkeys(
                    ("repository_size", "refine_cases", "lambda_valid_pairs"),
                    "measured: the 135M embedded model writes about 2 insights a minute: a small repository",
                ),
                "text-rag": dict.fromkeys(_CORPUS_KEYS, _CPU_EMBED)
                | {
                    "ddi_qa_lookup": "the look-up task's knowledge is 20,000 training pairs, every asked pair among "
                    "them: all of it is indexed"
                },
                "agentic-rag": dict.fromkeys(_CORPUS_KEYS, _CPU_EMBED)
                | {
                    "ddi_qa_lookup": "the look-up task's knowledge is 20,000 training pairs, every asked pair among "
                    "them: all of it is indexed"
                },
            },
        ),
        Profile(
            "quick",
            "a minute on any CPU: trained systems on a smoke budget, to see them work (runs never submittable or ranked)",
            None,
            0,
            0,
            llm_concurrency=4,
            budgets={
                "mlp": {"max_epochs": 1, "max_train": 5000, "hidden": [128], "patience": 1, "device": "cpu"},
                "emergnn": {
                    "max_epochs": 1,
                    "epoch_per_test": 1,
                    "train_pairs_per_epoch": 2000,
                    "valid_pairs": 300,
                    "device": "cpu",
                },
                # every stage once, small: 5 cases (10 drugs described), 1 refined, lam chosen on 2 validation pairs,
                # 2 cases a prompt, short descriptions and insights (`ddibench run --plan -p quick` counts the calls)
                "cbr-ddi": {
                    "repository_size": 5,
                    "refine_cases": 1,
                    "lambda_valid_pairs": 2,
                    "sampling": False,
                    "k_cases": 2,
                    "description_tokens": 48,
                    "insight_tokens": 64,
                },
                "text-rag": {"interaction_chunks": 300, "monograph_chunks": 300, "medquad_chunks": 300},
                "agentic-rag": {"interaction_chunks": 300, "monograph_chunks": 300, "medquad_chunks": 300},
            },
            rankable=False,
            sources={
                "mlp": dict.fromkeys(("max_epochs", "max_train", "hidden", "patience", "device"), _QUICK),
                "emergnn": dict.fromkeys(
                    ("max_epochs", "epoch_per_test", "train_pairs_per_epoch", "valid_pairs", "device"), _QUICK
                ),
                "cbr-ddi": dict.fromkeys(
                    (
                        "repository_size",
                        "refine_cases",
                        "lambda_valid_pairs",
                        "sampling",
                        "k_cases",
                        "description_tokens",
                        "insight_tokens",
                    ),
                    "smoke budget: every stage once, small: 5 cases (10 drugs described), 1 refined, lam chosen on 2 "
                    "validation pairs, 2 cases a prompt, short descriptions and insights "
                    "(`ddibench run --plan -p quick` counts the calls)",
                ),
                "text-rag": dict.fromkeys(_CORPUS_KEYS, _QUICK),
                "agentic-rag": dict.fromkeys(_CORPUS_KEYS, _QUICK),
            },
        ),
        Profile(
            "rtx3090-24g",
            "one NVIDIA RTX 3090 (24 GB)",
            "NVIDIA GeForce RTX 3090",
            1,
            24,
            16,
            _GPU_BUDGETS,
            sources=_GPU_SOURCES,
        ),
        Profile(
            "a100-80g", "one NVIDIA A100 (80 GB)", "NVIDIA A100 80GB", 1, 80, 32, _GPU_BUDGETS, sources=_GPU_SOURCES
        ),
        Profile(
            "2xa100-80g", "two NVIDIA A100 (80 GB)", "NVIDIA A100 80GB", 2, 80, 64, _GPU_BUDGETS, sources=_GPU_SOURCES
        ),
        Profile(
            "h100-80g", "one NVIDIA H100 (80 GB)", "NVIDIA H100 80GB", 1, 80, 64, _GPU_BUDGETS, sources=_GPU_SOURCES
        ),
        Profile("h200-141g", "one NVIDIA H200 (141 GB)", "NVIDIA H200", 1, 141, 64, _GPU_BUDGETS, sources=_GPU_SOURCES),
    )
}


def get_profile(name: str) -> Profile:
    if name not in PROFILES:
        raise UnknownNameError("profile", name, PROFILES)
    return PROFILES[name]


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gb() -> float | None:
    try:
        with open("/proc/meminfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return None


def _gpus() -> list[dict[str, str]]:
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = []
    for line in out.strip().splitlines():
        name, memory, driver = (part.strip() for part in line.split(","))
        gpus.append({"name": name, "memory": memory, "driver": driver})
    return gpus


@cache
def detect_hardware() -> dict[str, Any]:
    return {
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "memory_gb": _memory_gb(),
        "gpus": _gpus(),
        "platform": platform.platform(),
        "python": platform.python_version(),
    }


def profile_mismatch(profile: Profile, hardware: dict[str, Any]) -> str | None:
    """A warning when the declared profile promises accelerators the machine does not have."""
    gpus = hardware.get("gpus") or []
    if profile.accelerator_count > len(gpus):
        return (
            f"profile '{profile.name}' declares {profile.accelerator_count} x {profile.accelerator}, "
            f"but {len(gpus)} GPU(s) were detected"
        )
    return None
