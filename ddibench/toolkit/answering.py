"""Systems that answer in free text (SQL agent, DrugRAG, the RAG baselines).

:class:`AnswerSystem` runs on the question-answering tasks (``ddi_qa_*``, ``medquad``) and also on the
DrugBank classification tasks: there the pair becomes the question "What happens if A is taken with
B?" and the answer is mapped back to one of the 86 interaction types by the same label recovery the
QA scorer uses (template sentence, string similarity, then embeddings), so free-text systems sit in
the same DDI matrix as the label-choosing ones. Subclasses implement :meth:`AnswerSystem.answer`.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

from pydantic import Field

from ddibench import families
from ddibench.schema import DrugPair, Prediction, Question, Sample, interaction_question
from ddibench.system import BaseSystem, RunContext, SystemConfig, TrainingView, llm_trace

ANSWER_SYSTEM = (
    "You are a careful clinical pharmacist. Answer the question in two or three sentences. "
    "When information is provided, base the answer on it and do not invent facts."
)
CONTEXT_LABELS = "context_labels"  # ddibench.runner.ceilings.KEY (the runner sits above this module)
ANSWER_WITH_CONTEXT = """Information:
{context}

Question: {question}"""


def training_interactions(view: TrainingView) -> tuple[Sequence[Sample], Any]:
    """The interaction pairs a knowledge base may hold, with their label space: the task's
    ``interactions`` resource (its training split, or DrugBank S0's for tasks without drug pairs of
    their own, such as ``medquad``)."""
    if "interactions" not in view.resources:
        from ddibench.errors import ConfigError

        raise ConfigError(
            f"task {view.task.name} offers no interactions a knowledge base could hold",
            "run this system on a DDI or QA task",
        )
    samples, labels = view.resources["interactions"]
    return samples, labels


class AnswerConfig(SystemConfig):
    temperature: float = Field(0.3, ge=0, allow_inf_nan=False)
    max_tokens: int = Field(160, gt=0)
    encoder: str = "minilm"  # for mapping answers to interaction types on the DrugBank tasks


class AnswerSystem(BaseSystem):
    Config = AnswerConfig
    families: ClassVar[tuple[str, ...]] = (families.DDI_QA, families.MEDICAL_QA, families.DRUGBANK_DDI)
    llm_roles: ClassVar[tuple[str, ...]] = ("generator",)
    batch_size = 1
    max_concurrency = 4
    retrieves: ClassVar[bool] = True  # its answer prompt shows retrieved context (False: the model alone)
    config: AnswerConfig

    def __init__(self, config: AnswerConfig | None = None) -> None:
        super().__init__(config)
        self._recovery: Any = None
        self._stated: Any = None

    def run_info(self) -> dict[str, Any]:
        return {"counters": self.counters.as_dict()}

    async def prepare(self, view: TrainingView, ctx: RunContext) -> None:
        from ddibench.evaluation.text_scorers import StatedTypes

        stated = StatedTypes(view.task.label_space)  # falsy where the labels are no interaction types (MedQuAD)
        self._stated = stated if self.retrieves and stated else None
        if view.task.answer.kind == "label":  # the answer text is mapped back to one of the task's labels
            from ddibench.embeddings import shared_encoder
            from ddibench.evaluation.text_scorers import LabelRecovery

            self._recovery = LabelRecovery(view.task.label_space, shared_encoder(self.config.encoder))
        await self.prepare_knowledge(view, ctx)

    async def prepare_knowledge(self, view: TrainingView, ctx: RunContext) -> None:
        """Build what answering needs (databases, indexes) from the training split."""

    @abstractmethod
    async def answer(self, question: Question, ctx: RunContext) -> tuple[str, dict[str, Any]]:
        """The answer text and the trace of how it was reached (LLM calls under ``"llm"``)."""

    async def write(
        self, question: str, context: Sequence[str], ctx: RunContext, role: str = "generator"
    ) -> tuple[str, dict[str, Any]]:
        """The answer-writing call: the question, with the retrieved information when there is some. On a task with
        interaction types, a retrieving system's call records the types its context states (``context_labels``,
        lifted to the prediction's trace by :meth:`predict`), so that ``ddibench report --ceilings`` can score an
        ideal reader of exactly what the prompt showed."""
        user = (
            ANSWER_WITH_CONTEXT.format(context="\n".join(f"- {c}" for c in context), question=question)
            if context
            else question
        )
        messages = [{"role": "system", "content": ANSWER_SYSTEM}, {"role": "user", "content": user}]
        result = await ctx.model(role).chat(
            messages, temperature=self.config.temperature, max_tokens=self.config.max_tokens, seed=ctx.seed
        )
        call = llm_trace(role, messages, result)
        if self._stated is not None:
            call[CONTEXT_LABELS] = self._stated(context)
        return " ".join(result.text.split()), call

    async def predict(self, samples: Sequence[Sample], ctx: RunContext) -> list[Prediction]:
        out = []
        for sample in samples:
            if isinstance(sample.input, DrugPair):
                pair = sample.input
                question = Question(
                    interaction_question(pair.head.name, pair.tail.name, variant=0), pair=pair, qtype="interaction"
                )
            elif isinstance(sample.input, Question):
                question = sample.input
            else:
                raise TypeError(f"{self.name} answers questions and drug pairs, not {type(sample.input).__name__}")
            text, trace = await self.answer(question, ctx)
            for call in trace.get("llm", []):
                if isinstance(call, dict) and CONTEXT_LABELS in call:
                    trace[CONTEXT_LABELS] = call.pop(CONTEXT_LABELS)  # the answer call's: the last that records them
            if not text.strip():
                self.count("empty_answers")
                out.append(Prediction.invalid(sample.id, "empty answer", text=text, trace=trace))
            elif isinstance(sample.input, DrugPair):
                label, how = self._recovery.recover(text, sample.pair.head.name, sample.pair.tail.name)
                trace["label_recovery"] = how
                out.append(Prediction(sample_id=sample.id, label=label, text=text, trace=trace))
            else:
                out.append(Prediction(sample_id=sample.id, text=text, trace=trace))
        return out
