"""Turn an LLM's free-text answer into one of a numbered list of options.

Used by every LLM system that picks a label (zero-shot, and the retrieval systems after it). The
answer may be JSON (``{"type": 12}``), a bare number, or the option's text; anything else is
unparsable and is reported as an invalid prediction rather than guessed.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

_JSON_OBJECT = re.compile(r"\{.*?\}", re.DOTALL)
_NUMBER = re.compile(r"(?<![\w.])(\d{1,4})(?!\w|\.\d)")
_KEYS = ("type", "label", "answer", "interaction_type", "choice", "id")


@dataclass(frozen=True, slots=True)
class ParsedChoice:
    index: int | None  # 0-based option index, None when unparsable
    method: str  # "json", "number", "text", "ambiguous" (names several options) or "none"
    detail: str = ""


def _normalise(text: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9 ]+", " ", text.lower()).split())


def parse_choice(text: str, options: Sequence[str], *, first: int = 1, text_threshold: float = 0.8) -> ParsedChoice:
    """Parse ``text`` as one of ``options``, numbered from ``first`` (1 by default) in the prompt."""
    n = len(options)
    cleaned = text.strip().strip("`").strip()
    if cleaned.startswith("json"):
        cleaned = cleaned[4:]
    for blob in _JSON_OBJECT.findall(cleaned):
        try:
            obj = json.loads(blob)
        except ValueError:
            continue
        if isinstance(obj, dict):
            for key in _KEYS:
                value = obj.get(key)
                if isinstance(value, bool):
                    continue
                if isinstance(value, list):
                    return ParsedChoice(None, "ambiguous", f"the answer names {len(value)} options: {value}")
                if isinstance(value, (int, float)) or (isinstance(value, str) and value.strip().isdigit()):
                    number = int(value)
                    if first <= number < first + n:
                        return ParsedChoice(number - first, "json")
                    return ParsedChoice(None, "none", f"number {number} is not an option ({first}..{first + n - 1})")
                if isinstance(value, str) and value.strip():
                    by_text = _match_text(value, options, text_threshold)
                    if by_text is not None:
                        return ParsedChoice(by_text, "text")
    numbers = [int(m) for m in _NUMBER.findall(cleaned)]
    in_range = list(dict.fromkeys(k for k in numbers if first <= k < first + n))
    if len(in_range) > 1:
        return ParsedChoice(None, "ambiguous", f"the answer names {len(in_range)} options: {in_range[:5]}")
    if in_range:
        return ParsedChoice(in_range[0] - first, "number")
    by_text = _match_text(cleaned, options, text_threshold)
    if by_text is not None:
        return ParsedChoice(by_text, "text")
    if not cleaned:
        return ParsedChoice(None, "none", "empty answer")
    if numbers:
        return ParsedChoice(None, "none", f"number {numbers[0]} is not an option ({first}..{first + n - 1})")
    return ParsedChoice(None, "none", "no option number or option text in the answer")


def _match_text(text: str, options: Sequence[str], threshold: float) -> int | None:
    target = _normalise(text)
    if not target:
        return None
    best, best_ratio = None, 0.0
    for i, option in enumerate(options):
        candidate = _normalise(option)
        if candidate and candidate in target:
            ratio = 1.0
        else:
            ratio = difflib.SequenceMatcher(None, target, candidate, autojunk=False).ratio()
        if ratio > best_ratio:
            best, best_ratio = i, ratio
    return best if best_ratio >= threshold else None
