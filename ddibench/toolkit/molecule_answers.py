"""LLM systems that answer about one molecule: the question, the constrained answer and the strict parser.

What a molecule's answer looks like is the task's declaration (:class:`ddibench.task.AnswerSpec`, ``task.answer``):
its kind, its k, the token budget of the answer and the system prompt it is asked under. This module reads it (what
``zero-shot`` uses, and what a multi-agent system's final agent can reuse); it names no task family, so a new family
whose tasks declare one of these answers is answered with no edit here:

* ``yes_no`` — JSON ``{"answer": "yes" | "no"}`` where the server constrains output, else the first standalone
  yes/no of the text. Anything else is invalid.
* ``top_k`` — ``k`` label names, most likely first: JSON ``{"targets": [...]}`` (each item constrained to the
  task's label names where the server can, at most ``k``; the task's system prompt asks for this form). Parsing is
  strict: a name counts only when it equals one of the label space's names (JSON items case-insensitively, words of
  free text as written; no fuzzy matching), unknown ones are kept in the trace; an answer with no known name is
  invalid.
* ``text`` — free text, as written (the task's ``closing`` paragraph bounds it). An empty answer is invalid.

The budget of each answer (``max_tokens``) is recorded in each call's trace.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ddibench.llm import ChatResult
from ddibench.schema import LabelSpace, Molecule, Prediction, Sample
from ddibench.task import AnswerSpec, Task

KINDS = ("yes_no", "top_k", "text")  # the answers about a molecule this module asks for and reads


def can_answer(task: Task) -> bool:
    """Whether this module can ask and read ``task``'s answer: a molecule in, one of :data:`KINDS` out, with the
    answer's budget and system prompt declared, and an instruction among the task's resources."""
    answer = task.answer
    return (
        task.input_kind == "molecule"
        and answer.kind in KINDS
        and answer.max_tokens is not None
        and bool(answer.system_prompt)
        and "instruction" in task.resource_keys
    )


def answer_budget(answer: AnswerSpec) -> int:
    """The answer's token budget (a task :func:`can_answer` accepts declares one)."""
    if answer.max_tokens is None:
        raise ValueError(f"a {answer.kind} answer about a molecule needs a declared max_tokens")
    return answer.max_tokens


_YES_NO = re.compile(r"\b(yes|no)\b", re.IGNORECASE)
_SYMBOL = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]*")


def describe_molecule(molecule: Molecule) -> str:
    """The molecule as a question names it: its name when the source gives one, and its SMILES."""
    lines = [f"Name: {molecule.name}"] if molecule.name else []
    lines.append(f"SMILES: {molecule.smiles}")
    return "\n".join(lines)


def question(answer: AnswerSpec, molecule: Molecule, instruction: str, context: Sequence[str] = ()) -> str:
    """The user message: retrieved context (if any), the molecule, the task's instruction, the answer's closing."""
    parts = []
    if context:
        parts.append("Relevant knowledge:\n" + "\n".join(f"- {line}" for line in context))
    parts.append(describe_molecule(molecule))
    parts.append(instruction)
    if answer.closing:
        parts.append(answer.closing)
    return "\n\n".join(parts)


def messages(
    answer: AnswerSpec, molecule: Molecule, instruction: str, context: Sequence[str] = ()
) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": answer.system_prompt},
        {"role": "user", "content": question(answer, molecule, instruction, context)},
    ]


def answer_schema(
    answer: AnswerSpec, labels: LabelSpace | None = None, constrain_symbols: bool = True
) -> dict[str, Any] | None:
    """The JSON schema the answer is constrained to (None for free text)."""
    if answer.kind == "yes_no":
        return {
            "type": "object",
            "properties": {"answer": {"type": "string", "enum": ["yes", "no"]}},
            "required": ["answer"],
        }
    if answer.kind == "top_k":
        item: dict[str, Any] = {"type": "string"}
        if constrain_symbols and labels is not None:
            item["enum"] = [label.name for label in labels]
        return {
            "type": "object",
            "properties": {"targets": {"type": "array", "items": item, "minItems": 1, "maxItems": answer.k}},
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


def parse_targets(text: str, labels: LabelSpace, k: int | None = None) -> tuple[list[int], list[str], str]:
    """Label ids of the known symbols the answer names, in its order (at most ``k``; None: all of them), the
    unknown symbols, and how it was read. A JSON ``targets`` list is read first, else every symbol-like token."""
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
    answer: AnswerSpec, sample: Sample, result: ChatResult, labels: LabelSpace | None, trace: dict[str, Any]
) -> Prediction:
    """A prediction from the model's raw answer (invalid, with the reason, when it cannot be used); ``labels``: the
    task's label space, which a ``top_k`` answer is read against."""
    text = result.text
    cut = result.finish_reason == "length"
    if answer.kind == "yes_no":
        label, how = parse_yes_no(text)
        trace["parse"] = {"method": how}
        if label is None:
            return Prediction.invalid(sample.id, ("answer cut off: " if cut else "") + how, text=text, trace=trace)
        return Prediction(sample_id=sample.id, label=label, text=text, trace=trace)
    if answer.kind == "top_k":
        assert labels is not None
        ranked, unknown, how = parse_targets(text, labels, answer.k)
        trace["parse"] = {"method": how, "unknown_symbols": unknown}
        if not ranked:
            return Prediction.invalid(
                sample.id,
                ("answer cut off: " if cut else "") + "no known HGNC symbol of the task in the answer",
                text=text,
                trace=trace,
            )
        return Prediction(sample_id=sample.id, ranked=ranked, text=text, trace=trace)
    if answer.kind == "text":
        caption = text.strip()
        trace["parse"] = {"cut_off": cut, "chars": len(caption)}
        if not caption:
            return Prediction.invalid(sample.id, "empty caption", text=text, trace=trace)
        return Prediction(sample_id=sample.id, text=caption, trace=trace)
    raise ValueError(f"no answer about a molecule of kind {answer.kind!r} (one of {', '.join(KINDS)})")


def instruction_of(resources: Mapping[str, Any], task_name: str) -> str:
    """The task's instruction (its ``instruction`` resource)."""
    if "instruction" not in resources:
        from ddibench.errors import ConfigError

        raise ConfigError(
            f"task {task_name} offers no instruction for a molecule question", "run this system on a molecular task"
        )
    return str(resources["instruction"])
