"""``zero-shot``: the LLM picks one of the 86 DrugBank interaction types for a named drug pair.

No retrieval, no examples: the baseline every retrieval-augmented system is compared with. The
system prompt lists the interaction types (numbered 1..86, with "Drug A"/"Drug B" in place of the
template's #Drug1/#Drug2, so the direction is explicit); the user message names the pair. The
answer is requested as JSON ``{"type": N}``, constrained to the 86 numbers where the server supports
it, and parsed robustly (JSON, a bare number, or the type's text); the raw answer is kept in the trace.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ddibench.hashing import sha256_text
from ddibench.parsing import parse_choice
from ddibench.schema import DrugPair, LabelSpace, Prediction, Sample
from ddibench.system import BaseSystem, RunContext, SystemConfig, TrainingView, llm_trace

SYSTEM_PROMPT = """You are an expert clinical pharmacologist.
Classify the drug-drug interaction between Drug A and Drug B as exactly one of the interaction types below. In every type, "Drug A" and "Drug B" are the two drugs in the order given.

{types}

Answer with JSON only, in the form {{"type": N}}, where N is the number of the interaction type."""

USER_PROMPT = """Drug A: {head}
Drug B: {tail}
Which interaction type describes what happens when Drug A is combined with Drug B?"""


def option_texts(labels: LabelSpace) -> list[str]:
    return [lb.render("Drug A", "Drug B") for lb in labels]


def describe_drug(drug: Any, include_smiles: bool) -> str:
    text = f"{drug.name} (DrugBank {drug.drugbank_id})"
    return f"{text}, SMILES {drug.smiles}" if include_smiles and drug.smiles else text


class ZeroShotConfig(SystemConfig):
    temperature: float = 0.0
    max_tokens: int = 24
    constrained: bool = True  # ask the server to constrain the answer to {"type": 1..86}
    include_smiles: bool = False  # add each drug's SMILES to the question


class ZeroShotSystem(BaseSystem):
    name = "zero-shot"
    version = "1.0.0"
    description = "LLM picks one of the 86 interaction types for the named pair; no retrieval, no examples"
    Config = ZeroShotConfig
    families = ("drugbank_ddi",)
    llm_roles = ("generator",)
    batch_size = 1
    config: ZeroShotConfig

    def __init__(self, config: ZeroShotConfig | None = None) -> None:
        super().__init__(config)
        self._options: list[str] = []
        self._system_prompt = ""
        self._schema: dict[str, Any] | None = None

    async def prepare(self, view: TrainingView, ctx: RunContext) -> None:
        self._options = option_texts(view.task.label_space)
        types = "\n".join(f"{i}. {text}" for i, text in enumerate(self._options, 1))
        self._system_prompt = SYSTEM_PROMPT.format(types=types)
        n = len(self._options)
        self._schema = {
            "type": "object",
            "properties": {"type": {"type": "integer", "enum": list(range(1, n + 1))}},
            "required": ["type"],
        }
        ctx.remember_text(self._system_prompt)

    def messages(self, pair: DrugPair) -> list[dict[str, str]]:
        user = USER_PROMPT.format(
            head=describe_drug(pair.head, self.config.include_smiles),
            tail=describe_drug(pair.tail, self.config.include_smiles),
        )
        return [{"role": "system", "content": self._system_prompt}, {"role": "user", "content": user}]

    async def predict(self, samples: Sequence[Sample], ctx: RunContext) -> list[Prediction]:
        out = []
        for sample in samples:
            messages = self.messages(sample.input)
            result = await ctx.model("generator").chat(
                messages,
                temperature=self.config.temperature,
                max_tokens=self.config.max_tokens,
                json_schema=self._schema if self.config.constrained else None,
                seed=ctx.seed,
            )
            parsed = parse_choice(result.text, self._options)
            trace = {
                "llm": [llm_trace("generator", messages, result)],
                "parse": {"method": parsed.method, "detail": parsed.detail},
                "system_prompt_sha256": sha256_text(self._system_prompt),
            }
            if parsed.index is None:
                out.append(Prediction.invalid(sample.id, parsed.detail or "unparsable answer", text=result.text, trace=trace))
            else:
                out.append(Prediction(sample_id=sample.id, label=parsed.index, text=result.text, trace=trace))
        return out
