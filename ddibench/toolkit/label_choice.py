"""LLM systems that answer a drug pair with one interaction type, or with the k most likely labels of a
label set (TWOSIDES: five of 200 side effects): the shared prompts, schemas and parsers.

Every label-choosing LLM system (``zero-shot``, ``naive-cbr``, ``kaping``, ``k-paths``, ``cbr-ddi``) uses
the same pieces, so their differences are only the context they retrieve. One label (DrugBank):

* the options are the 86 templates with "Drug A"/"Drug B" in place of #Drug1/#Drug2 (direction explicit),
  numbered from 1; the full list sits in the system prompt, a shared prefix the server can cache;
* the answer is JSON ``{"type": N}`` (optionally with a ``mechanism``), constrained to the option numbers
  where the server supports it;
* :func:`answer_to_prediction` turns the raw answer into a :class:`~ddibench.schema.Prediction`: an answer
  naming no option, naming several, or cut off before it named one is invalid, with the reason recorded.

k labels (a task whose declared answer is the top k of its labels, e.g. TWOSIDES; see "Choosing k labels" below):

* the options are the label names (side effects), listed once in the system prompt;
* the answer is JSON ``{"side_effects": [k names]}``, constrained to exactly k names of the list where the
  server supports it;
* :func:`parse_choices` matches each named item to the list exactly (case, spacing and punctuation aside;
  no fuzzy matching) and :func:`answer_to_ranking` applies an explicit policy: items that name no listed
  label are dropped and counted (``unknown``), repeats are dropped, items beyond the first k are dropped
  (``too_many``), fewer than k known names are kept as a shorter ranking (``too_few``); an answer with no
  known name at all, or with no list, is invalid, with the reason recorded.

:class:`LabelChoiceSystem` is a complete system for both kinds of task (it reads the kind from the task's
declared answer, ``task.answer``): subclasses override :meth:`LabelChoiceSystem.context` to add retrieved knowledge to the question.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BeforeValidator, Field, ValidationInfo
from pydantic_core import PydanticCustomError

from ddibench import families
from ddibench.errors import ConfigError
from ddibench.hashing import sha256_text
from ddibench.llm import ChatResult
from ddibench.schema import Drug, DrugPair, LabelSpace, Prediction, Sample
from ddibench.system import BaseSystem, RunContext, SystemConfig, TrainingView, llm_trace
from ddibench.task import Task
from ddibench.toolkit.parsing import parse_choice

_CLASSIFY = """You are an expert clinical pharmacologist.
Classify the drug-drug interaction between Drug A and Drug B as exactly one of the interaction types below. In every type, "Drug A" and "Drug B" are the two drugs in the order given.

{types}

"""
SYSTEM_PROMPT = (
    _CLASSIFY + """Answer with JSON only, in the form {{"type": N}}, where N is the number of the interaction type."""
)
# answer_mode=likelihood-text: the same list without numbers; the answer copies a type's text
TEXT_SYSTEM_PROMPT = (
    _CLASSIFY
    + """Answer with JSON only, in the form {{"interaction": "..."}}, the interaction type copied exactly from the list."""
)

QUESTION = """Drug A: {head}
Drug B: {tail}
Which interaction type describes what happens when Drug A is combined with Drug B?"""


def option_texts(labels: LabelSpace) -> list[str]:
    return [lb.render("Drug A", "Drug B") for lb in labels]


def describe_drug(drug: Drug, include_smiles: bool = False) -> str:
    text = f"{drug.name} (DrugBank {drug.drugbank_id})" if drug.drugbank_id else drug.name
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
    return Prediction(
        sample_id=sample_id,
        label=int(option_labels[parsed.index]),
        position=parsed.index + 1,
        text=result.text,
        rationale=rationale,
        trace=trace,
    )


def _mechanism(text: str) -> str | None:
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


def _option_seed(value: Any, info: ValidationInfo) -> int | None:
    """An option-order seed as given (``-C KEY=N``): None, or an integer >= 0 (numpy's seeds are non-negative);
    anything else is refused here, where the configuration is read, not by numpy once the run has started."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
        return value
    # what pydantic's lax mode took before: a whole float (3.0) and a string of digits ("3")
    if isinstance(value, float) and value.is_integer() and value >= 0:
        return int(value)
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        return int(value.strip())
    key = info.field_name or "the seed"
    raise PydanticCustomError(
        "option_seed",
        "must be a seed (an integer >= 0) or unset, got {value}: give e.g. -C {key}=1, or omit it for the label order",
        {"value": json.dumps(value) if isinstance(value, (bool, str)) else repr(value), "key": key},
    )


# a seed that shuffles the options shown (None: label order); a negative number, a bool or a string is refused
OptionSeed = Annotated[int | None, BeforeValidator(_option_seed)]


class LabelChoiceConfig(SystemConfig):
    temperature: float = Field(0.0, ge=0, allow_inf_nan=False)
    max_tokens: int = Field(24, gt=0)
    constrained: bool = True  # ask the server to constrain the answer to {"type": 1..86}
    include_smiles: bool = False  # add each drug's SMILES to the question
    # list the options in an order drawn from this seed (None: label order); answers are mapped back to labels.
    # One order for the whole run, so the list stays the cached prompt prefix; position bias then shows as the
    # difference between a run with and one without (the board's paired test on the same samples).
    shuffle_options: OptionSeed = None
    # generate: the model writes its answer (greedy, constrained); likelihood: every option's number is scored by
    # the model's probability of answering it after the same prompt and the most likely is taken; likelihood-text:
    # the same over the options' texts, which the prompt asks the model to copy (as lm-eval scores a choice's text).
    # Both: one-label tasks, endpoints that return token log-probabilities and continue an assistant prefix
    # (llama.cpp, vLLM)
    answer_mode: Literal["generate", "likelihood", "likelihood-text"] = "generate"


def option_order(n: int, seed: int | None) -> list[int]:
    """The label shown at each position (position i shows label ``order[i]``): label order, or a seeded shuffle."""
    if seed is None:
        return list(range(n))
    import numpy as np

    return [int(i) for i in np.random.default_rng(seed).permutation(n)]


class LabelChoiceSystem(BaseSystem):
    """Zero-shot label choice; subclasses add context with :meth:`context`."""

    Config = LabelChoiceConfig
    families: ClassVar[tuple[str, ...]] = (families.DRUGBANK_DDI, families.TWOSIDES)
    llm_roles: ClassVar[tuple[str, ...]] = ("generator",)
    batch_size = 1
    variant_keys = ("answer_mode", "shuffle_options")
    config: LabelChoiceConfig
    context_heading = "Relevant knowledge"

    def __init__(self, config: LabelChoiceConfig | None = None) -> None:
        super().__init__(config)
        self.options: list[str] = []  # as shown: position i (from 0) shows label self.order[i]
        self.order: list[int] = []
        self.positions: dict[int, int] = {}  # label -> its position in self.order
        self.system_prompt = ""
        self.k: int | None = None  # the number of labels to choose; None: one label (a classification task)

    async def prepare(self, view: TrainingView, ctx: RunContext) -> None:
        self.k = choice_count(view.task)
        self.order = option_order(len(view.task.label_space), self.config.shuffle_options)
        self.positions = {label: i for i, label in enumerate(self.order)}
        if self.k is None:
            self.options = [option_texts(view.task.label_space)[i] for i in self.order]
            if self.config.answer_mode == "likelihood-text":
                self.system_prompt = TEXT_SYSTEM_PROMPT.format(types="\n".join(f"- {text}" for text in self.options))
            else:
                types = "\n".join(f"{i}. {text}" for i, text in enumerate(self.options, 1))
                self.system_prompt = SYSTEM_PROMPT.format(types=types)
        else:
            if self.config.answer_mode != "generate":
                raise ConfigError(
                    f"answer_mode={self.config.answer_mode} chooses one label; {view.task.name} asks for {self.k}",
                    "use answer_mode=generate on label-set tasks",
                )
            self.options = [view.task.label_space[i].name for i in self.order]
            self.system_prompt = topk_system_prompt(self.options, self.k)
        ctx.remember_text(self.system_prompt)
        await self.prepare_context(view, ctx)

    async def prepare_context(self, view: TrainingView, ctx: RunContext) -> None:
        """Build what the context needs (indexes) from the training view."""

    async def context(self, sample: Sample, ctx: RunContext) -> tuple[list[str], dict[str, Any]]:
        """Lines of retrieved knowledge for the question, and what to keep in the trace."""
        return [], {}

    def shown_number(self, label: int) -> int:
        """The number the options list shows for ``label`` (1-based): its position in this run's order, so a context
        that names a type by number (Naive-CBR's cases) agrees with the list when the options are shuffled."""
        return self.positions[label] + 1

    def run_info(self) -> dict[str, Any]:
        return {"counters": self.counters.as_dict()}

    def question(self, pair: DrugPair, lines: list[str]) -> str:
        template = QUESTION if self.k is None else TOPK_QUESTION
        text = template.format(
            head=describe_drug(pair.head, self.config.include_smiles),
            tail=describe_drug(pair.tail, self.config.include_smiles),
            k=self.k,
        )
        if lines:
            text = f"{self.context_heading}:\n" + "\n".join(f"- {line}" for line in lines) + "\n\n" + text
        return text

    async def predict(self, samples: Sequence[Sample], ctx: RunContext) -> list[Prediction]:
        out = []
        if self.k is None:
            schema = label_schema(len(self.options)) if self.config.constrained else None
            max_tokens = self.config.max_tokens
        else:
            schema = topk_schema(self.options, self.k) if self.config.constrained else None
            max_tokens = max(self.config.max_tokens, topk_tokens(self.k))
        for sample in samples:
            lines, context_trace = await self.context(sample, ctx)
            assert isinstance(sample.input, DrugPair)
            messages = [
                {"role": "system", "content": self.system_prompt},
                {"role": "user", "content": self.question(sample.input, lines)},
            ]
            if self.config.answer_mode != "generate":
                pred = await self._by_likelihood(sample, messages, context_trace, ctx)
                self.count("invalid" if not pred.valid else "answered")
                out.append(pred)
                continue
            result = await ctx.model("generator").chat(
                messages, temperature=self.config.temperature, max_tokens=max_tokens, json_schema=schema, seed=ctx.seed
            )
            trace: dict[str, Any] = {
                "llm": [llm_trace("generator", messages, result)],
                "system_prompt_sha256": sha256_text(self.system_prompt),
                **({"context": context_trace} if context_trace else {}),
            }
            if self.k is None:
                pred = answer_to_prediction(sample.id, result, self.options, self.order, trace)
            else:
                pred = answer_to_ranking(sample.id, result, self.options, self.order, self.k, trace)
                for flag in trace["parse"].get("flags", []):
                    self.count(flag)
            self.count("invalid" if not pred.valid else "answered")
            out.append(pred)
        return out

    async def _by_likelihood(
        self, sample: Sample, messages: list[dict[str, Any]], context_trace: dict[str, Any], ctx: RunContext
    ) -> Prediction:
        """The option the model finds most likely after the answer's opening: its number after ``{"type": ``, or
        with ``likelihood-text`` its text after ``{"interaction": "`` (see :mod:`ddibench.toolkit.likelihood`)."""
        from ddibench.toolkit.likelihood import NUMBER_CLOSERS, option_likelihoods

        client = ctx.model("generator")
        if self.config.answer_mode == "likelihood-text":
            prefix, shown, closers = TEXT_LIKELIHOOD_PREFIX, self.options, '"'
        else:
            prefix, shown, closers = (
                LIKELIHOOD_PREFIX,
                [str(i) for i in range(1, len(self.options) + 1)],
                NUMBER_CLOSERS,
            )
        scores = await option_likelihoods(client, messages, prefix, shown, seed=ctx.seed, closers=closers)
        trace: dict[str, Any] = {
            "llm": [
                llm_trace("generator", [*messages, {"role": "assistant", "content": p}], r)
                for p, r in zip(scores.prefixes, scores.calls)
            ],
            "system_prompt_sha256": sha256_text(self.system_prompt),
            "likelihood": {
                "prefix": prefix,
                "requests": len(scores.calls),
                "unscored": sum(lp is None for lp in scores.logprobs),
                "top": [[i + 1, lp] for i, lp in scores.ranked()],
            },
            **({"context": context_trace} if context_trace else {}),
        }
        best = scores.best()
        if best is None:
            return Prediction.invalid(sample.id, "no option among the most likely next tokens", trace=trace)
        text = f'{prefix}{shown[best]}"}}' if self.config.answer_mode == "likelihood-text" else f"{prefix}{best + 1}}}"
        return Prediction(sample_id=sample.id, label=self.order[best], position=best + 1, text=text, trace=trace)


LIKELIHOOD_PREFIX = '{"type": '  # how a constrained answer opens; the option's number comes next
TEXT_LIKELIHOOD_PREFIX = '{"interaction": "'  # answer_mode=likelihood-text: the option's text comes next


# ---------------------------------------------------------------------------------------------
# Choosing k labels (label-set tasks scored by ranking: TWOSIDES side effects)

TOPK_SYSTEM_PROMPT = """You are an expert clinical pharmacologist.
Drug A and Drug B are known to interact when taken together. From the side effects listed below, choose the {k} that the combination most likely causes, the most likely first.

{names}

Answer with JSON only, in the form {{"side_effects": ["...", ...]}}: exactly {k} different names, each copied exactly from the list."""

TOPK_QUESTION = """Drug A: {head}
Drug B: {tail}
Which {k} of the listed side effects does taking Drug A together with Drug B most likely cause?"""

ANSWER_KEY = "side_effects"
_LIST_KEYS = (ANSWER_KEY, "side_effect", "effects", "labels", "answer", "answers")


def choice_count(task: Task) -> int | None:
    """How many labels a system answers for ``task``: the k of its declared top-k answer, or None (one label)."""
    return task.answer.k if task.answer.kind == "top_k" else None


def topk_system_prompt(names: Sequence[str], k: int) -> str:
    return TOPK_SYSTEM_PROMPT.format(names="\n".join(names), k=k)


def topk_tokens(k: int) -> int:
    """An answer budget for k names in JSON (the longest side-effect names take about 12 tokens)."""
    return 24 + 16 * k


def topk_schema(names: Sequence[str], k: int, mechanism: bool = False) -> dict[str, Any]:
    """``{"side_effects": [exactly k names of the list]}``, optionally after a ``mechanism`` sentence."""
    items = {"type": "array", "items": {"type": "string", "enum": list(names)}, "minItems": k, "maxItems": k}
    properties: dict[str, Any] = {ANSWER_KEY: items}
    required = [ANSWER_KEY]
    if mechanism:
        properties = {"mechanism": {"type": "string"}, **properties}
        required = ["mechanism", ANSWER_KEY]
    return {"type": "object", "properties": properties, "required": required}


@dataclass(frozen=True)
class ParsedChoices:
    indices: list[int]  # 0-based option indices, in the order named, without repeats
    method: str  # "json", "quoted", "lines" or "none"
    unknown: list[str] = field(default_factory=list)  # items that name no option
    repeats: int = 0
    detail: str = ""


def _normalise_name(text: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9]+", " ", text.lower()).split())


def _json_list(text: str) -> list[Any] | None:
    """The first list under an answer key of a JSON object in ``text`` (or a bare JSON list)."""
    decoder = json.JSONDecoder()
    for start in [m.start() for m in re.finditer(r"[\[{]", text)]:
        try:
            obj, _ = decoder.raw_decode(text[start:])
        except ValueError:
            continue
        if isinstance(obj, list):
            return obj
        if isinstance(obj, dict):
            for key in _LIST_KEYS:
                if isinstance(obj.get(key), list):
                    return obj[key]
    return None


def parse_choices(text: str, options: Sequence[str]) -> ParsedChoices:
    """Parse an answer that names several ``options``; every item must match an option exactly (after
    lower-casing and collapsing punctuation and spaces). A JSON list is read first; without one, quoted
    strings, then lines or comma-separated pieces (list numbering and bullets removed)."""
    index = {_normalise_name(o): i for i, o in enumerate(options)}
    items: list[Any] | None = _json_list(text)
    method = "json"
    if items is None:
        keys = {*_LIST_KEYS, "mechanism"}
        quoted = [q for q in re.findall(r'"([^"\n]+)"', text) if q.strip().lower() not in keys]
        if quoted:
            items, method = quoted, "quoted"
        else:
            pieces = [re.sub(r"^\s*(?:[-*\u2022]|\d+[.)])\s*", "", p) for p in re.split(r"[\n,;]", text)]
            items, method = [p.strip() for p in pieces if p.strip()], "lines"
    found: list[int] = []
    unknown: list[str] = []
    repeats = 0
    for item in items:
        key = _normalise_name(item) if isinstance(item, str) else None
        i = index.get(key) if key else None
        if i is None:
            unknown.append(str(item)[:80])
        elif i in found:
            repeats += 1
        else:
            found.append(i)
    if not found:
        detail = (
            "empty answer"
            if not text.strip()
            else (
                f"none of the {len(items)} named items is a listed option (e.g. {unknown[0]!r})"
                if unknown
                else "no list of options in the answer"
            )
        )
        return ParsedChoices([], "none", unknown, repeats, detail)
    return ParsedChoices(found, method, unknown, repeats)


def answer_to_ranking(
    sample_id: str,
    result: ChatResult,
    options: Sequence[str],
    option_labels: Sequence[int],
    k: int,
    trace: dict[str, Any],
) -> Prediction:
    """The ranked prediction an answer gives (see the module docstring for the policy); option i means
    label ``option_labels[i]``. ``trace["parse"]["flags"]`` names what the policy had to do."""
    parsed = parse_choices(result.text, options)
    flags = []
    if parsed.unknown:
        flags.append("unknown")
    if parsed.repeats:
        flags.append("repeats")
    if len(parsed.indices) > k:
        flags.append("too_many")
    elif parsed.indices and len(parsed.indices) < k:
        flags.append("too_few")
    if result.finish_reason == "length":
        flags.append("cut_off")
    trace["parse"] = {
        "method": parsed.method,
        "named": len(parsed.indices),
        "unknown": parsed.unknown[:10],
        "repeats": parsed.repeats,
        "flags": flags,
        "detail": parsed.detail,
    }
    rationale = _mechanism(result.text)
    if not parsed.indices:
        reason = parsed.detail or "unparsable answer"
        if result.finish_reason == "length":
            reason = f"answer cut off at the token limit before naming an option ({reason})"
        return Prediction.invalid(sample_id, reason, text=result.text, rationale=rationale, trace=trace)
    ranked = [int(option_labels[i]) for i in parsed.indices[:k]]
    return Prediction(
        sample_id=sample_id,
        ranked=ranked,
        position=parsed.indices[0] + 1,
        text=result.text,
        rationale=rationale,
        trace=trace,
    )
