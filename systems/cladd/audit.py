"""CLADD's leak audit: which answers had the gold label, verbatim, in their retrieved context.

Every CLADD trace lists the texts it retrieved (``retrieved``: annotations, the captioning tool's text,
related-drug lines, KG paths). After a run, with the gold labels at hand, an answer *leaked* when

* toxicity — the gold label's text (e.g. "blocks hERG", "is not carcinogenic") occurs in the context
  (case-insensitively);
* drug targets — one of its gold HGNC symbols occurs in the context as a whole word (as written);
* captioning — not audited: its labels are property columns, with no text a context could state.

``scripts/cladd_leak_audit.py RUN_DIR`` prints the count for a run. The same rule over every label, not
only the gold, gives :func:`stated_labels`: the labels a context states, which CLADD records in each trace
(``context_labels``) so that ``ddibench report --ceilings`` can score what an ideal reader of it could.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from ddibench import families
from ddibench.schema import LabelSpace, Sample

_WORD = re.compile(r"(?<![A-Za-z0-9-])[A-Za-z0-9][A-Za-z0-9-]*(?![A-Za-z0-9-])")


def stated_labels(family: str, labels: LabelSpace, retrieved: Iterable[str]) -> list[int] | None:
    """The label ids the context states, in label order, or None when the family is not audited:
    toxicity — each label whose text ("blocks hERG", "does not block hERG") occurs, case-insensitively;
    drug targets — each HGNC symbol that occurs as a whole word, as written."""
    context = "\n".join(retrieved)
    if family == families.TOXICITY:  # a label's name is only "yes"/"no": its text is what a context can state
        lowered = context.lower()
        return [i for i, lb in enumerate(labels) if lb.template.lower() in lowered]
    if family == families.DRUG_TARGETS:  # one pass over the context's words instead of a search per symbol
        words = set(_WORD.findall(context))
        return [i for i, lb in enumerate(labels) if lb.name in words]
    return None


def leaked(family: str, labels: LabelSpace, sample: Sample, retrieved: Iterable[str]) -> list[str] | None:
    """The gold texts the context states (empty: no leak), or None when the family is not audited."""
    stated = stated_labels(family, labels, retrieved)
    if stated is None:
        return None
    gold = [sample.label] if family == families.TOXICITY else list(sample.label_ids)
    hit = set(stated)
    return [labels[i].template if family == families.TOXICITY else labels[i].name for i in gold if i in hit]


def leak_audit(
    family: str, labels: LabelSpace, samples: Mapping[str, Sample], traces: Mapping[str, dict[str, Any]]
) -> dict[str, Any]:
    """Counts over the answered samples: audited, leaked, and the leaked sample ids with their gold texts."""
    out: dict[str, Any] = {"family": family, "answers": len(traces), "audited": 0, "leaked": 0, "samples": {}}
    for sid, trace in traces.items():
        found = leaked(family, labels, samples[sid], trace.get("retrieved", ()))
        if found is None:
            continue
        out["audited"] += 1
        if found:
            out["leaked"] += 1
            out["samples"][sid] = found
    return out
