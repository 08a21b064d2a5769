"""Robust parsing of an LLM's answer into one of the 86 interaction types."""

from __future__ import annotations

import pytest

from ddibench.tasks.drugbank import load_labels
from ddibench.toolkit.label_choice import option_texts
from ddibench.toolkit.parsing import parse_choice

OPTIONS = option_texts(load_labels())


@pytest.mark.parametrize(
    ("answer", "index", "method"),
    [
        ('{"type": 12}', 11, "json"),
        ('```json\n{"type": "5"}\n```', 4, "json"),
        ('{"label": 86}', 85, "json"),
        ("The answer is 3.", 2, "number"),
        ("Interaction type 47 applies here", 46, "number"),
        (OPTIONS[20], 20, "text"),
        (f'{{"type": "{OPTIONS[7]}"}}', 7, "text"),
        ("drug a may increase the photosensitizing activities of drug b", 0, "text"),
    ],
)
def test_parses_json_numbers_and_text(answer: str, index: int, method: str) -> None:
    parsed = parse_choice(answer, OPTIONS)
    assert (parsed.index, parsed.method) == (index, method)


@pytest.mark.parametrize(
    ("answer", "detail"),
    [
        ("", "empty answer"),
        ("I cannot say.", "no option number"),
        ('{"type": 0}', "not an option"),
        ("type 912", "not an option"),
        ("<<<>>> ???", "no option number"),
        ("Either 3 or 17 could apply.", "names 2 options"),
        ('{"type": [3, 5]}', "names 2 options"),
    ],
)
def test_unparsable_answers_are_invalid_with_a_reason(answer: str, detail: str) -> None:
    parsed = parse_choice(answer, OPTIONS)
    assert parsed.index is None and parsed.method in ("none", "ambiguous")
    assert detail in parsed.detail
