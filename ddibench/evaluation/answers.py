"""How a run's answers are spread over the labels, beside the gold's spread: the check that a low score
is not a model answering one thing whatever it is asked.

A reader that ignores its input answers the same label for most items (SmolLM2-135M answers one DrugBank
type on every task; a 1.5B reader picked the first listed option for 29 of 30 pairs while its context
held sensible paths). A broken retrieval gives a low score too, so the score alone cannot tell them
apart; the spread of the answers can. From the valid answers (the first-ranked label of a ranking):

* ``top_share`` — the share of the most frequent answer; ``gold_top_share`` the same for the gold (on a
  label-set task: the share of samples whose gold set holds its most frequent label);
* ``entropy`` — the answers' entropy divided by its largest possible value on these samples,
  ``log(min(labels, answers))`` (1: spread as evenly as possible; 0: one answer); ``gold_entropy`` alike;
* ``first_position_share`` — the share of answers that were the first option in the list the system was
  shown (``Prediction.position == 1``), for the systems that record positions;
* ``collapsed`` — at least :data:`MIN_ANSWERS` valid answers, the most frequent answer at least half of them,
  and the answers' entropy at most half the gold's: the answers say less than half of what the gold varies
  by. DrugBank (gold entropy 0.51): 97% one type (0.03) and 72% one type (0.17) are flagged, a run spread
  like the gold is not; yes/no with a 60/40 gold (0.97): 95% "no" (0.29) is flagged, 85% (0.61) — a
  classifier leaning to the majority — is not. ``message`` says it in one line.

These are diagnostics of the answers, computed by the evaluators from the predictions alone (no trace),
so a compact bundle recomputes them; they rank nothing.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence

from pydantic import BaseModel

MIN_ANSWERS = 10


class AnswerDistribution(BaseModel):
    n_answers: int  # valid answers
    top_label: int | None
    top_share: float
    entropy: float
    gold_top_label: int | None
    gold_top_share: float
    gold_entropy: float
    first_position_share: float | None = None  # None: the system records no option positions
    n_positions: int = 0  # valid answers with a recorded position
    collapsed: bool = False
    message: str = ""


def _spread(values: Sequence[int], n_labels: int) -> tuple[int | None, float, float]:
    """The most frequent value (ties: the lowest), its share, and the normalised entropy."""
    if not values:
        return None, 0.0, 0.0
    counts = Counter(values)
    top = min(counts, key=lambda k: (-counts[k], k))
    total = len(values)
    entropy = max(0.0, -sum(c / total * math.log(c / total) for c in counts.values()))  # never -0.0
    most = math.log(min(n_labels, total)) if min(n_labels, total) > 1 else 0.0
    return top, counts[top] / total, (entropy / most if most > 0 else 0.0)


def answer_distribution(
    answers: Sequence[int],
    gold: Sequence[Iterable[int]],
    n_labels: int,
    label_name: str = "label",
    names: Sequence[str] | None = None,
    positions: Sequence[int | None] = (),
) -> AnswerDistribution:
    """The spread of ``answers`` (one label per valid answer) beside the ``gold`` of all samples (each a set
    of labels: one for a classification task); ``positions`` are the valid answers' option positions."""
    top, share, entropy = _spread(list(answers), n_labels)
    gold_sets = [set(g) for g in gold]
    if all(len(g) == 1 for g in gold_sets):
        gold_top, gold_share, gold_entropy = _spread([next(iter(g)) for g in gold_sets], n_labels)
    else:  # label sets: the share of samples holding the most frequent label; entropy of all gold labels
        counts = Counter(label for g in gold_sets for label in g)
        gold_top = min(counts, key=lambda k: (-counts[k], k)) if counts else None
        gold_share = counts[gold_top] / len(gold_sets) if gold_top is not None else 0.0
        _, _, gold_entropy = _spread([label for g in gold_sets for label in g], n_labels)
    known = [p for p in positions if p is not None]
    first = sum(1 for p in known if p == 1) / len(known) if known else None
    collapsed = len(answers) >= MIN_ANSWERS and share >= 0.5 and entropy <= gold_entropy / 2

    def shown(label: int | None) -> str:
        if label is None:
            return "none"
        return (
            f"{label_name} {names[label]!r}"
            if names is not None and 0 <= label < len(names)
            else f"{label_name} {label}"
        )

    message = ""
    if collapsed:
        message = (
            f"answers {shown(top)} for {share:.0%} of {len(answers):,} valid answers; the gold's most frequent "
            f"{label_name} is {gold_share:.0%} of the samples (spread {entropy:.2f}, the gold's {gold_entropy:.2f})"
        )
        if first is not None and first >= 0.5:
            message += f"; {first:.0%} of answers are the first option listed"
    return AnswerDistribution(
        n_answers=len(answers),
        top_label=top,
        top_share=round(share, 4),
        entropy=round(entropy, 4),
        gold_top_label=gold_top,
        gold_top_share=round(gold_share, 4),
        gold_entropy=round(gold_entropy, 4),
        first_position_share=None if first is None else round(first, 4),
        n_positions=len(known),
        collapsed=collapsed,
        message=message,
    )
