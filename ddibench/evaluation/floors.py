"""What each floor is, in a reader's words: the one place the report, the store and the board read it from.

An evaluator's ``floors()`` computes its floors (the majority label, the most popular labels, uniformly random
answers) on the evaluated samples and records each as a dict: ``metrics`` and what the floor answered (``label``,
``labels``, ``draws``, ``from``). A new kind of floor adds its title and its note here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

TITLES = {"majority": "majority", "popularity": "popularity", "uniform_random": "random"}


def floor_title(name: str) -> str:
    """The floor's name in a column header or a list ("random" for ``uniform_random``)."""
    return TITLES.get(name, name)


def floor_note(name: str, floor: Mapping[str, Any], label_name: Callable[[int], str] = str) -> str:
    """What the floor answers; ``label_name`` shows a label id (its name, or "label 48")."""
    source = floor.get("from", "training split")
    if name == "majority":
        return f"the most frequent label of the {source} for every sample ({label_name(int(floor['label']))})"
    if name == "popularity":
        labels = ", ".join(label_name(int(i)) for i in floor["labels"])
        return f"the {len(floor['labels'])} most frequent labels of the {source} for every sample ({labels})"
    if name == "uniform_random":
        return f"uniformly random answers, mean of {floor['draws']} seeded draws"
    return ""
