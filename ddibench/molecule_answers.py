"""LLM systems that answer about one molecule: the question, the constrained answer and the strict parser.

Three kinds of answer, by the task's family (what ``zero-shot`` uses, and what a multi-agent system's
final agent can reuse):

* ``toxicity`` — yes or no: JSON ``{"answer": "yes" | "no"}`` where the server constrains output, else
  the first standalone yes/no of the text. Anything else is invalid.
* ``drug_targets`` — five HGNC symbols, most likely first: JSON ``{"targets": [...]}`` (each item
  constrained to the task's symbols where the server can, at most five). Parsing is strict: a symbol
  counts only when it equals one of the label space's symbols (JSON items case-insensitively, words of
  free text as written; no fuzzy matching), unknown ones are kept in the trace; an answer with no known
  symbol is invalid.
* ``captioning`` — free text: the caption, as written. An empty answer is invalid (scored as an empty
  caption).

Generation limits per kind are declared here (:data:`MAX_TOKENS`) and recorded in each call's trace.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ddibench import families
from ddibench.llm import ChatResult
from ddibench.schema import LabelSpace, Molecule, Prediction, Sample

FAMILIES = families.MOLECULAR
MAX_TOKENS = {families.TOXICITY: 24, families.DRUG_TARGETS: 96, families.CAPTIONING: 256}
N_TARGETS = 5

SYSTEM_PROMPTS = {
    families.TOXICITY: 'You are an expert medicinal chemist and toxicologist. Answer with JSON only, in the form {"answer": "yes"} or {"answer": "no"}.',
    families.DRUG_TARGETS: (
        'You are an expert pharmacologist. Answer with JSON only, in the form {"targets": ["SYMBOL1", "SYMBOL2", "SYMBOL3", "SYMBOL4", "SYMBOL5"]}, '
        "using official HGNC gene symbols of human proteins, most likely first."
    ),
    families.CAPTIONING: "You are an expert medicinal chemist. Write a short, factual paragraph about the molecule, as the request asks.",
}

_YES_NO = re.compile(r"\b(yes|no)\b", re.IGNORECASE)
_SYMBOL = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]*")


def describe_molecule(molecule: Molecule) -> str:
    """The molecule as a question names it: its name when the source gives one, and its SMILES."""
    lines = [f"Name: {molecule.name}"] if molecule.name else []
    lines.append(f"SMILES: {molecule.smiles}")
    return "\n".join(lines)


def question(family: str, molecule: Molecule, instruction: str, context: Sequence[str] = ()) -> str:
    """The user message: retrieved context (if any), the molecule, the task's instruction."""
    parts = []
    if context:
        parts.append("Relevant knowledge:\n" + "\n".join(f"- {line}" for line in context))
    parts.append(describe_molecule(molecule))
    parts.append(instruction)
    if family == families.CAPTIONING:
        parts.append("Write the description as one paragraph of at most 120 words.")
    return "\n\n".join(parts)


def messages(family: str, molecule: Molecule, instruction: str, context: Sequence[str] = ()) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": SYSTEM_PROMPTS[family]},
        {"role": "user", "content": question(family, molecule, instruction, context)},
    ]


def answer_schema(
    family: str, labels: LabelSpace | None = None, constrain_symbols: bool = True
) -> dict[str, Any] | None:
    """The JSON schema the answer is constrained to (None for free text)."""
    if family == families.TOXICITY:
        return {
            "type": "object",
            "properties": {"answer": {"type": "string", "enum": ["yes", "no"]}},
            "required": ["answer"],
        }
    if family == families.DRUG_TARGETS:
        item: dict[str, Any] = {"type": "string"}
        if constrain_symbols and labels is not None:
            item["enum"] = [label.name for label in labels]
        return {
            "type": "object",
            "properties": {"targets": {"type": "array", "items": item, "minItems": 1, "maxItems": N_TARGETS}},
            "required": ["targets"],
        }
    return None


def _json_objects(text: str) -> list[Any]:
    out = []
    for blob in re.findall(r"\{.*\}", text, re.DOTALL) + re.findall(r"\{.*?\}", text, re.DOTALL):
        try:
            out.append(json.loads(blob))
        except ValueError:
            continue
    return out


def parse_yes_no(text: str) -> tuple[int | None, str]:
    """1 for yes, 0 for no, or None; and how it was read."""
    for obj in _json_objects(text):
        if isinstance(obj, dict):
            value = obj.get("answer")
            if isinstance(value, str) and value.strip().lower() in ("yes", "no"):
                return int(value.strip().lower() == "yes"), "json"
    found = {m.lower() for m in _YES_NO.findall(text)}
    if len(found) == 1:
        return int(found.pop() == "yes"), "text"
    return None, "both yes and no in the answer" if found else "no yes/no in the answer"


def parse_targets(text: str, labels: LabelSpace, k: int = N_TARGETS) -> tuple[list[int], list[str], str]:
    """Label ids of the known symbols the answer names, in its order (at most ``k``), the unknown
    symbols, and how it was read. A JSON ``targets`` list is read first, else every symbol-like token."""
    index = {label.name.upper(): label.id for label in labels}
    candidates: list[str] | None = None
    method = "json"
    for obj in _json_objects(text):
        if isinstance(obj, dict) and isinstance(obj.get("targets"), list):
            candidates = [str(x) for x in obj["targets"]]
            break
    if candidates is None:
        method = "text"
        candidates = _SYMBOL.findall(text)
    known: list[int] = []
    unknown: list[str] = []
    exact = {label.name: label.id for label in labels}
    for item in candidates:
        # JSON items match case-insensitively; words of free text only as written (HGNC symbols are upper
        # case, so the prose word "kit" is not the gene KIT)
        symbol = item.strip().upper() if method == "json" else item.strip()
        if method == "text" and symbol not in exact:
            continue
        if symbol in index:
            if index[symbol] not in known:
                known.append(index[symbol])
        elif method == "json" and symbol:
            unknown.append(item.strip())
    return known[:k], unknown, method


def to_prediction(
    family: str, sample: Sample, result: ChatResult, labels: LabelSpace | None, trace: dict[str, Any]
) -> Prediction:
    """A prediction from the model's raw answer (invalid, with the reason, when it cannot be used)."""
    text = result.text
    cut = result.finish_reason == "length"
    if family == families.TOXICITY:
        label, how = parse_yes_no(text)
        trace["parse"] = {"method": how}
        if label is None:
            return Prediction.invalid(sample.id, ("answer cut off: " if cut else "") + how, text=text, trace=trace)
        return Prediction(sample_id=sample.id, label=label, text=text, trace=trace)
    if family == families.DRUG_TARGETS:
        assert labels is not None
        ranked, unknown, how = parse_targets(text, labels)
        trace["parse"] = {"method": how, "unknown_symbols": unknown}
        if not ranked:
            return Prediction.invalid(
                sample.id,
                ("answer cut off: " if cut else "") + "no known HGNC symbol of the task in the answer",
                text=text,
                trace=trace,
            )
        return Prediction(sample_id=sample.id, ranked=ranked, text=text, trace=trace)
    if family == families.CAPTIONING:
        caption = text.strip()
        trace["parse"] = {"cut_off": cut, "chars": len(caption)}
        if not caption:
            return Prediction.invalid(sample.id, "empty caption", text=text, trace=trace)
        return Prediction(sample_id=sample.id, text=caption, trace=trace)
    raise ValueError(f"no molecular answer for family {family!r} (one of {', '.join(FAMILIES)})")


def instruction_of(resources: Mapping[str, Any], task_name: str) -> str:
    """The task's instruction (its ``instruction`` resource)."""
    if "instruction" not in resources:
        from ddibench.errors import ConfigError

        raise ConfigError(
            f"task {task_name} offers no instruction for a molecule question", "run this system on a molecular task"
        )
    return str(resources["instruction"])
