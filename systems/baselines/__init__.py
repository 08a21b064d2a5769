"""The floors every system is compared with: ``majority`` and ``popularity``. No model, no LLM.

* ``majority`` — every sample gets the most frequent label of the training split (ties: the smaller
  label id), and as class scores the training frequency of every label, so AUROC-scored tasks get
  the floor of 0.5. Serves every task whose targets are single labels.
* ``popularity`` — every sample gets the ``k`` labels that occur in the most training targets, most
  frequent first (ties: the smaller label id). Serves every task whose targets are label sets
  (top-k ranking: TWOSIDES side effects, drug targets).
* ``only-smiles`` — an empty caption for every molecule of a task answered in text about a molecule
  (captioning): the probe then learns from the structure alone (the CLADD paper's "Only SMILES" row), the floor
  of captioning systems.
* ``top-passage`` — for a question, the passage of the shared QA corpus (drug monographs, MedQuAD
  corpus documents, the training pairs' interaction sentences; :func:`ddibench.toolkit.corpus.qa_corpus`) that
  a BM25 keyword search ranks first, verbatim: what retrieval gives with no model reading it, the floor
  of question answering. A free-text answer has no label to count, so this is its majority.

``majority`` and ``popularity`` read only the training targets (``prepare`` sees the training view), so
they are the floor a system must clear before its numbers mean anything.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from pydantic import Field

from ddibench import BaseSystem, Prediction, RunContext, Sample, SystemConfig, Task, TrainingView, families
from ddibench.errors import ConfigError
from ddibench.schema import Question


def _single_labels(task: Task) -> bool:
    return task.input_kind != "question" and task.evaluator().kind == "classification"


def _label_sets(task: Task) -> bool:
    return task.evaluator().kind == "ranking"


class MajorityConfig(SystemConfig):
    pass


class MajoritySystem(BaseSystem):
    name = "majority"
    constant_answer = True
    version = "1.0.0"
    description = "the most frequent training label for every sample (class scores: training frequencies)"
    Config = MajorityConfig
    batch_size = 4096
    max_concurrency = 1

    def __init__(self, config: MajorityConfig | None = None) -> None:
        super().__init__(config)
        self.label = 0
        self.frequencies: dict[str, float] = {}
        self.info: dict[str, Any] = {}

    def supports(self, task: Task) -> bool:
        return _single_labels(task)

    async def prepare(self, view: TrainingView, ctx: RunContext) -> None:
        counts = Counter(s.label for s in view.train)
        if not counts:
            raise ConfigError(
                f"task {view.task.name} has no training labels to count", "majority needs a training split"
            )
        n = sum(counts.values())
        self.label = min(counts, key=lambda k: (-counts[k], k))
        self.frequencies = {str(k): counts.get(k, 0) / n for k in range(len(view.task.label_space))}
        self.info = {"label": self.label, "share": round(counts[self.label] / n, 5), "n_train": n}

    def run_info(self) -> dict[str, Any]:
        return self.info

    async def predict(self, samples: Sequence[Sample], ctx: RunContext) -> list[Prediction]:
        return [Prediction(sample_id=s.id, label=self.label, scores=dict(self.frequencies)) for s in samples]


class PopularityConfig(SystemConfig):
    k: int = 5


class PopularitySystem(BaseSystem):
    name = "popularity"
    constant_answer = True
    version = "1.0.0"
    description = "the k labels most frequent in the training targets, for every sample"
    Config = PopularityConfig
    batch_size = 4096
    max_concurrency = 1
    config: PopularityConfig

    def __init__(self, config: PopularityConfig | None = None) -> None:
        super().__init__(config)
        self.ranked: list[int] = []
        self.info: dict[str, Any] = {}

    def supports(self, task: Task) -> bool:
        return _label_sets(task)

    async def prepare(self, view: TrainingView, ctx: RunContext) -> None:
        if self.config.k <= 0:
            raise ConfigError(f"popularity config k must be positive, got {self.config.k}", "use e.g. --config k=5")
        counts: Counter[int] = Counter()
        for s in view.train:
            counts.update(set(s.label_ids))
        if not counts:
            raise ConfigError(
                f"task {view.task.name} has no training labels to count", "popularity needs a training split"
            )
        self.ranked = sorted(counts, key=lambda k: (-counts[k], k))[: self.config.k]
        self.info = {"ranked": self.ranked, "counts": [counts[k] for k in self.ranked], "n_train": len(view.train)}

    def run_info(self) -> dict[str, Any]:
        return self.info

    async def predict(self, samples: Sequence[Sample], ctx: RunContext) -> list[Prediction]:
        return [Prediction(sample_id=s.id, ranked=list(self.ranked)) for s in samples]


class OnlySmilesConfig(SystemConfig):
    pass


class OnlySmilesSystem(BaseSystem):
    name = "only-smiles"
    version = "1.0.0"
    description = "an empty caption for every molecule: the captioning probe learns from the structure alone (the paper's 'Only SMILES')"
    Config = OnlySmilesConfig
    batch_size = 4096
    max_concurrency = 1

    def supports(self, task: Task) -> bool:
        """Every task that asks for text about a molecule (captioning): an empty text is its floor."""
        return task.input_kind == "molecule" and task.answer.kind == "text"

    async def predict(self, samples: Sequence[Sample], ctx: RunContext) -> list[Prediction]:
        return [Prediction(sample_id=s.id, text="") for s in samples]


class TopPassageConfig(SystemConfig):
    # the corpus parts searched, each capped at its count (None: all); text-rag's keys, so one override names both
    interaction_chunks: int | None = Field(None, ge=0)
    monograph_chunks: int | None = Field(None, ge=0)
    medquad_chunks: int | None = Field(None, ge=0)


class TopPassageSystem(BaseSystem):
    name = "top-passage"
    version = "1.0.0"
    description = (
        "the QA floor: the corpus passage a BM25 keyword search ranks first for the question, verbatim (no model)"
    )
    Config = TopPassageConfig
    families = (families.DDI_QA, families.MEDICAL_QA)
    batch_size = 256
    max_concurrency = 1
    config: TopPassageConfig

    def __init__(self, config: TopPassageConfig | None = None) -> None:
        super().__init__(config)
        self.index: Any = None
        self.info: dict[str, Any] = {}

    async def prepare(self, view: TrainingView, ctx: RunContext) -> None:
        from ddibench.toolkit import corpus

        chunks = corpus.qa_corpus(
            view.train,
            view.task.label_space,
            interactions=self.config.interaction_chunks,
            monographs=self.config.monograph_chunks,
            medquad=self.config.medquad_chunks,
            seed=ctx.seed,
        )
        if not chunks:
            raise ConfigError(
                f"top-passage has no corpus passage to search on {view.task.name}",
                "leave monograph_chunks and medquad_chunks unset, or set one above 0",
            )
        self.index = corpus.BM25Index(chunks)
        self.info = {"corpus": dict(Counter(c.source for c in chunks)), "no_match": 0}

    def run_info(self) -> dict[str, Any]:
        return self.info

    async def predict(self, samples: Sequence[Sample], ctx: RunContext) -> list[Prediction]:
        out = []
        for s in samples:
            if not isinstance(s.input, Question):
                raise TypeError(f"{self.name} answers questions, not {type(s.input).__name__}")
            found = self.index.search(s.input.text, 1)
            if not found:  # no word of the question is in the corpus: no answer, scored as an invalid one
                self.info["no_match"] += 1
                out.append(Prediction.invalid(s.id, "no corpus passage shares a word with the question"))
                continue
            chunk, score = found[0]
            trace = {"passage": {"id": chunk.id, "source": chunk.source, "score": round(score, 4)}}
            out.append(Prediction(sample_id=s.id, text=chunk.text, trace=trace))
        return out
