"""LLM systems that answer a DrugBank pair with one interaction type: the shared prompt, schema and parser.

Every label-choosing LLM system (``zero-shot``, ``naive-cbr``, ``kaping``, ``k-paths``, ``cbr-ddi``) uses
the same pieces, so their differences are only the context they retrieve:

* the options are the 86 templates with "Drug A"/"Drug B" in place of #Drug1/#Drug2 (direction explicit),
  numbered from 1; the full list sits in the system prompt, a shared prefix the server can cache;
* the answer is JSON ``{"type": N}`` (optionally with a ``mechanism``), constrained to the option numbers
  where the server supports it;
* :func:`answer_to_prediction` turns the raw answer into a :class:`~ddibench.schema.Prediction`: an answer
  naming no option, naming several, or cut off before it named one is invalid, with the reason recorded.

:class:`LabelChoiceSystem` is a complete system: subclasses override :meth:`LabelChoiceSystem.context` to
add retrieved knowledge to the question.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import Field

from ddibench.hashing import sha256_text
from ddibench.llm import ChatResult
from ddibench.parsing import parse_choice
from ddibench.schema import Drug, DrugPair, LabelSpace, Prediction, Sample
from ddibench.system import BaseSystem, RunContext, SystemConfig, TrainingView, llm_trace

SYSTEM_PROMPT = """You are an expert clinical pharmacologist.
Classify the drug-drug interaction between Drug A and Drug B as exactly one of the interaction types below. In every type, "Drug A" and "Drug B" are the two drugs in the order given.

{types}

Answer with JSON only, in the form {{"type": N}}, where N is the number of the interaction type."""

QUESTION = """Drug A: {head}
Drug B: {tail}
Which interaction type describes what happens when Drug A is combined with Drug B?"""


def option_texts(labels: LabelSpace) -> list[str]:
    return [lb.render("Drug A", "Drug B") for lb in labels]


def describe_drug(drug: Drug, include_smiles: bool = False) -> str:
    text = f"{drug.name} (DrugBank {drug.drugbank_id})"
    return f"{text}, SMILES {drug.smiles}" if include_smiles and drug.smiles else text


def label_schema(n_options: int, mechanism: bool = False) -> dict[str, Any]:
    properties: dict[str, Any] = {"type": {"type": "integer", "enum": list(range(1, n_options + 1))}}
    required = ["type"]
    if mechanism:
        properties = {"mechanism": {"type": "string"}, **properties}
        required = ["mechanism", "type"]
    return {"type": "object", "properties": properties, "required": required}


def answer_to_prediction(
    sample_id: str, result: ChatResult, options: Sequence[str], option_labels: Sequence[int], trace: dict[str, Any]
) -> Prediction:
    """The prediction an answer gives: option k (1-based) means label ``option_labels[k - 1]``."""
    parsed = parse_choice(result.text, options)
    trace["parse"] = {"method": parsed.method, "detail": parsed.detail}
    rationale = _mechanism(result.text)
    if parsed.index is None:
        reason = parsed.detail or "unparsable answer"
        if result.finish_reason == "length":
            reason = f"answer cut off at the token limit before naming an option ({reason})"
        return Prediction.invalid(sample_id, reason, text=result.text, rationale=rationale, trace=trace)
    if result.finish_reason == "length":
        trace["parse"]["cut_off"] = True
    return Prediction(sample_id=sample_id, label=int(option_labels[parsed.index]), text=result.text, rationale=rationale, trace=trace)


def _mechanism(text: str) -> str | None:
    import json
    import re

    if "mechanism" not in text:
        return None
    for blob in re.findall(r"\{.*\}", text, re.DOTALL):
        try:
            obj = json.loads(blob)
        except ValueError:
            continue
        if isinstance(obj, dict) and isinstance(obj.get("mechanism"), str):
            return obj["mechanism"].strip() or None
    return None


class LabelChoiceConfig(SystemConfig):
    temperature: float = Field(0.0, ge=0, allow_inf_nan=False)
    max_tokens: int = Field(24, gt=0)
    constrained: bool = True  # ask the server to constrain the answer to {"type": 1..86}
    include_smiles: bool = False  # add each drug's SMILES to the question


class LabelChoiceSystem(BaseSystem):
    """Zero-shot label choice; subclasses add context with :meth:`context`."""

    Config = LabelChoiceConfig
    families = ("drugbank_ddi",)
    llm_roles = ("generator",)
    batch_size = 1
    config: LabelChoiceConfig
    context_heading = "Relevant knowledge"

    def __init__(self, config: LabelChoiceConfig | None = None) -> None:
        super().__init__(config)
        self.options: list[str] = []
        self.system_prompt = ""
        self.counters: dict[str, int] = {}

    async def prepare(self, view: TrainingView, ctx: RunContext) -> None:
        self.options = option_texts(view.task.label_space)
        types = "\n".join(f"{i}. {text}" for i, text in enumerate(self.options, 1))
        self.system_prompt = SYSTEM_PROMPT.format(types=types)
        ctx.remember_text(self.system_prompt)
        await self.prepare_context(view, ctx)

    async def prepare_context(self, view: TrainingView, ctx: RunContext) -> None:
        """Build what the context needs (indexes) from the training view."""

    async def context(self, sample: Sample, ctx: RunContext) -> tuple[list[str], dict[str, Any]]:
        """Lines of retrieved knowledge for the question, and what to keep in the trace."""
        return [], {}

    def count(self, name: str, n: int = 1) -> None:
        self.counters[name] = self.counters.get(name, 0) + n

    def run_info(self) -> dict[str, Any]:
        return {"counters": dict(self.counters)}

    def question(self, pair: DrugPair, lines: list[str]) -> str:
        text = QUESTION.format(
            head=describe_drug(pair.head, self.config.include_smiles), tail=describe_drug(pair.tail, self.config.include_smiles)
        )
        if lines:
            text = f"{self.context_heading}:\n" + "\n".join(f"- {line}" for line in lines) + "\n\n" + text
        return text

    async def predict(self, samples: Sequence[Sample], ctx: RunContext) -> list[Prediction]:
        out = []
        schema = label_schema(len(self.options)) if self.config.constrained else None
        for sample in samples:
            lines, context_trace = await self.context(sample, ctx)
            assert isinstance(sample.input, DrugPair)
            messages = [{"role": "system", "content": self.system_prompt}, {"role": "user", "content": self.question(sample.input, lines)}]
            result = await ctx.model("generator").chat(
                messages, temperature=self.config.temperature, max_tokens=self.config.max_tokens, json_schema=schema, seed=ctx.seed
            )
            trace = {
                "llm": [llm_trace("generator", messages, result)],
                "system_prompt_sha256": sha256_text(self.system_prompt),
                **({"context": context_trace} if context_trace else {}),
            }
            pred = answer_to_prediction(sample.id, result, self.options, range(len(self.options)), trace)
            self.count("invalid" if not pred.valid else "answered")
            out.append(pred)
        return out
