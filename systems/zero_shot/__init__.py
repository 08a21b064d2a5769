"""``zero-shot``: the LLM picks one of the 86 DrugBank interaction types for a named drug pair.

No retrieval, no examples: the baseline every retrieval-augmented system is compared with. Prompt,
constrained JSON answer and robust parsing are the shared ones of :mod:`ddibench.label_choice`; the
raw answer is kept in the trace.
"""

from __future__ import annotations

from ddibench.label_choice import LabelChoiceSystem


class ZeroShotSystem(LabelChoiceSystem):
    name = "zero-shot"
    version = "1.0.0"
    description = "LLM picks one of the 86 interaction types for the named pair; no retrieval, no examples"
