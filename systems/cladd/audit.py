"""CLADD's leak audit: which answers had the gold label, verbatim, in their retrieved context.

Every CLADD trace lists the texts it retrieved (``retrieved``: annotations, the captioning tool's text,
related-drug lines, KG paths). After a run, with the gold labels at hand, an answer *leaked* when

* toxicity — the gold label's text (e.g. "blocks hERG", "is not carcinogenic") occurs in the context
  (case-insensitively);
* drug targets — one of its gold HGNC symbols occurs in the context as a whole word (as written);
* captioning — not audited: its labels are property columns, with no text a context could state.

``scripts/cladd_leak_audit.py RUN_DIR`` prints the count for a run.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from ddibench.schema import LabelSpace, Sample


def leaked(family: str, labels: LabelSpace, sample: Sample, retrieved: Iterable[str]) -> list[str] | None:
    """The gold texts the context states (empty: no leak), or None when the family is not audited."""
    context = "\n".join(retrieved)
    if family == "toxicity":
        # the label's text ("blocks hERG"); its name is only "yes"/"no"
        gold = labels[int(sample.target)].template  # type: ignore[arg-type]
        return [gold] if gold.lower() in context.lower() else []
    if family == "drug_targets":
        symbols = [labels[i].name for i in sample.target]  # type: ignore[union-attr]
        return [s for s in symbols if re.search(rf"(?<![A-Za-z0-9-]){re.escape(s)}(?![A-Za-z0-9-])", context)]
    return None


def leak_audit(family: str, labels: LabelSpace, samples: Mapping[str, Sample], traces: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
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
