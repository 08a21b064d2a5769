"""CLADD's leak audit: which answers had the gold label, verbatim, in their retrieved context.

Every CLADD trace lists the texts it retrieved (``retrieved``: annotations, the captioning tool's text,
related-drug lines, KG paths). After a run, with the gold labels at hand, an answer *leaked* when, by the kind of
answer the task declares (``task.answer.kind``),

* ``yes_no`` (toxicity) — the gold label's text (e.g. "blocks hERG", "is not carcinogenic") occurs in the context
  (case-insensitively);
* ``top_k`` (drug targets) — one of its gold label names (HGNC symbols) occurs in the context as a whole word (as
  written);
* ``text`` (captioning) — not audited: its labels are property columns, with no text a context could state.

``scripts/cladd_leak_audit.py RUN_DIR`` prints the count for a run. The same rule over every label, not
only the gold, gives :func:`stated_labels`: the labels a context states, which CLADD records in each trace
(``context_labels``) so that ``ddibench report --ceilings`` can score what an ideal reader of it could.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from ddibench.schema import LabelSpace, Sample
from ddibench.task import AnswerKind, Task

_WORD = re.compile(r"(?<![A-Za-z0-9-])[A-Za-z0-9][A-Za-z0-9-]*(?![A-Za-z0-9-])")


def stated_labels(kind: AnswerKind, labels: LabelSpace, retrieved: Iterable[str]) -> list[int] | None:
    """The label ids the context states, in label order, or None when answers of ``kind`` are not audited:
    yes/no — each label whose text ("blocks hERG", "does not block hERG") occurs, case-insensitively;
    top-k — each label name (HGNC symbol) that occurs as a whole word, as written."""
    context = "\n".join(retrieved)
    if kind == "yes_no":  # a label's name is only "yes"/"no": its text is what a context can state
        lowered = context.lower()
        return [i for i, lb in enumerate(labels) if lb.template.lower() in lowered]
    if kind == "top_k":  # one pass over the context's words instead of a search per name
        words = set(_WORD.findall(context))
        return [i for i, lb in enumerate(labels) if lb.name in words]
    return None


def leaked(kind: AnswerKind, labels: LabelSpace, sample: Sample, retrieved: Iterable[str]) -> list[str] | None:
    """The gold texts the context states (empty: no leak), or None when answers of ``kind`` are not audited."""
    stated = stated_labels(kind, labels, retrieved)
    if stated is None:
        return None
    gold = [sample.label] if kind == "yes_no" else list(sample.label_ids)
    hit = set(stated)
    return [labels[i].template if kind == "yes_no" else labels[i].name for i in gold if i in hit]


def leak_audit(task: Task, samples: Mapping[str, Sample], traces: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    """Counts over the answered samples of ``task``: audited, leaked, and the leaked sample ids with their gold texts."""
    kind, labels = task.answer.kind, task.label_space
    out: dict[str, Any] = {"family": task.family, "answers": len(traces), "audited": 0, "leaked": 0, "samples": {}}
    for sid, trace in traces.items():
        found = leaked(kind, labels, samples[sid], trace.get("retrieved", ()))
        if found is None:
            continue
        out["audited"] += 1
        if found:
            out["leaked"] += 1
            out["samples"][sid] = found
    return out
