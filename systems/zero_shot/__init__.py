"""``zero-shot``: the LLM answers from the question alone: no retrieval, no examples.

The baseline every retrieval-augmented system is compared with, on every task it serves:

* DrugBank DDI — one of the 86 interaction types for the named pair; TWOSIDES — five of the 200 side
  effects (prompt, constrained JSON answer and parsing of :mod:`ddibench.toolkit.label_choice`);
* any task about one molecule whose answer :mod:`ddibench.toolkit.molecule_answers` can ask for and read, as the task
  declares it (``task.answer``): toxicity — yes or no; drug targets — five HGNC symbols, parsed strictly against
  the task's label space; captioning — a caption of the molecule aimed at the property the task's instruction
  names. The molecule is given by its name (when the source has one) and SMILES; the system prompt and the
  answer's token budget are the task's, constrained JSON (where the server supports it) and parsing are those
  of :mod:`ddibench.toolkit.molecule_answers`.

The raw answer is kept in the trace. ``max_tokens`` applies to the DDI answer; a molecule's answer uses the
budget its task declares (recorded in each trace).
"""

from __future__ import annotations

from collections.abc import Sequence

from ddibench import AnswerSpec, Prediction, RunContext, Sample, Task, TrainingView, llm_trace
from ddibench.errors import ConfigError
from ddibench.hashing import sha256_text
from ddibench.schema import LabelSpace, Molecule
from ddibench.toolkit.label_choice import LabelChoiceSystem
from ddibench.toolkit.molecule_answers import (
    answer_budget,
    answer_schema,
    can_answer,
    instruction_of,
    messages,
    to_prediction,
)


class ZeroShotSystem(LabelChoiceSystem):
    name = "zero-shot"
    version = (
        "1.0.0"  # the DDI answers are unchanged (their run ids too); the molecular families were added beside them
    )
    description = "the LLM answers from the question alone (DDI type, yes/no, five targets or a caption); no retrieval, no examples"
    # every family it serves is found by supports(): the label-choice ones, and every molecule task it can answer
    families = ()

    def __init__(self, config=None) -> None:  # noqa: ANN001 - LabelChoiceConfig
        super().__init__(config)
        self.answer: AnswerSpec | None = None  # the task's answer when it is about a molecule
        self.instruction = ""
        self.labels: LabelSpace | None = None

    def supports(self, task: Task) -> bool:
        return task.family in LabelChoiceSystem.families or can_answer(task)

    async def prepare(self, view: TrainingView, ctx: RunContext) -> None:
        if not can_answer(view.task):
            self.answer = None
            await super().prepare(view, ctx)
            return
        if self.config.shuffle_options is not None or self.config.answer_mode != "generate":
            raise ConfigError(
                f"shuffle_options and answer_mode apply to zero-shot's DrugBank and TWOSIDES answers, not to {view.task.name}",
                "drop those options for this task",
            )
        self.answer = view.task.answer
        self.instruction = instruction_of(view.resources, view.task.name)
        self.labels = view.task.label_space if self.answer.kind == "top_k" else None
        ctx.remember_text(self.answer.system_prompt)

    async def predict(self, samples: Sequence[Sample], ctx: RunContext) -> list[Prediction]:
        if self.answer is None:
            return await super().predict(samples, ctx)
        answer = self.answer
        schema = answer_schema(answer, self.labels) if self.config.constrained else None
        budget = answer_budget(answer)
        out = []
        for sample in samples:
            assert isinstance(sample.input, Molecule)
            chat = messages(answer, sample.input, self.instruction)
            result = await ctx.model("generator").chat(
                chat,
                temperature=self.config.temperature,
                max_tokens=budget,
                json_schema=schema,
                seed=ctx.seed,
            )
            trace = {
                "llm": [llm_trace("generator", chat, result)],
                "system_prompt_sha256": sha256_text(answer.system_prompt),
                "max_tokens": budget,
                "constrained": schema is not None,
            }
            pred = to_prediction(answer, sample, result, self.labels, trace)
            self.count("invalid" if not pred.valid else "answered")
            out.append(pred)
        return out
