"""``zero-shot``: the LLM answers from the question alone: no retrieval, no examples.

The baseline every retrieval-augmented system is compared with, on every family it serves:

* DrugBank DDI — one of the 86 interaction types for the named pair; TWOSIDES — five of the 200 side
  effects (prompt, constrained JSON answer and parsing of :mod:`ddibench.label_choice`);
* toxicity — yes or no; drug targets — five HGNC symbols, parsed strictly against the task's label
  space; captioning — a caption of the molecule aimed at the property the task's instruction names.
  The molecule is given by its name (when the source has one) and SMILES; prompts, constrained JSON
  (where the server supports it) and parsing are those of :mod:`ddibench.molecule_answers`.

The raw answer is kept in the trace. ``max_tokens`` applies to the DDI answer; the molecular answers use
the limits declared in :data:`ddibench.molecule_answers.MAX_TOKENS` (recorded in each trace).
"""

from __future__ import annotations

from collections.abc import Sequence

from ddibench import Prediction, RunContext, Sample, TrainingView, families, llm_trace
from ddibench.errors import ConfigError
from ddibench.hashing import sha256_text
from ddibench.label_choice import LabelChoiceSystem
from ddibench.molecule_answers import (
    FAMILIES,
    MAX_TOKENS,
    SYSTEM_PROMPTS,
    answer_schema,
    instruction_of,
    messages,
    to_prediction,
)
from ddibench.schema import LabelSpace, Molecule


class ZeroShotSystem(LabelChoiceSystem):
    name = "zero-shot"
    version = (
        "1.0.0"  # the DDI answers are unchanged (their run ids too); the molecular families were added beside them
    )
    description = "the LLM answers from the question alone (DDI type, yes/no, five targets or a caption); no retrieval, no examples"
    families = (*LabelChoiceSystem.families, *FAMILIES)

    def __init__(self, config=None) -> None:  # noqa: ANN001 - LabelChoiceConfig
        super().__init__(config)
        self.family: str | None = None
        self.instruction = ""
        self.labels: LabelSpace | None = None

    async def prepare(self, view: TrainingView, ctx: RunContext) -> None:
        if view.task.family not in FAMILIES:
            self.family = None
            await super().prepare(view, ctx)
            return
        if self.config.shuffle_options is not None or self.config.answer_mode != "generate":
            raise ConfigError(
                f"shuffle_options and answer_mode apply to zero-shot's DrugBank and TWOSIDES answers, not to {view.task.name}",
                "drop those options for this task",
            )
        self.family = view.task.family
        self.instruction = instruction_of(view.resources, view.task.name)
        self.labels = view.task.label_space if self.family == families.DRUG_TARGETS else None
        ctx.remember_text(SYSTEM_PROMPTS[self.family])

    async def predict(self, samples: Sequence[Sample], ctx: RunContext) -> list[Prediction]:
        if self.family is None:
            return await super().predict(samples, ctx)
        family = self.family
        schema = answer_schema(family, self.labels) if self.config.constrained else None
        out = []
        for sample in samples:
            assert isinstance(sample.input, Molecule)
            chat = messages(family, sample.input, self.instruction)
            result = await ctx.model("generator").chat(
                chat,
                temperature=self.config.temperature,
                max_tokens=MAX_TOKENS[family],
                json_schema=schema,
                seed=ctx.seed,
            )
            trace = {
                "llm": [llm_trace("generator", chat, result)],
                "system_prompt_sha256": sha256_text(SYSTEM_PROMPTS[family]),
                "max_tokens": MAX_TOKENS[family],
                "constrained": schema is not None,
            }
            pred = to_prediction(family, sample, result, self.labels, trace)
            self.count("invalid" if not pred.valid else "answered")
            out.append(pred)
        return out
