"""The task families' names, in one place.

A task's :attr:`~ddibench.task.Task.family`, a system's ``families`` (what it can answer) and the family
names ``ddibench list tasks`` prints and ``-t`` accepts are these strings; code compares with the constants,
never with a literal, so a renamed or misspelt family is an import error rather than a silent mismatch.
"""

from __future__ import annotations

DRUGBANK_DDI = "drugbank_ddi"  # drug pair -> one of 86 DrugBank interaction types
TWOSIDES = "twosides"  # drug pair -> its five most likely TWOSIDES side effects
TOXICITY = "toxicity"  # molecule -> yes/no (TDC toxicity endpoints)
DRUG_TARGETS = "drug_targets"  # molecule -> five target proteins (HGNC symbols)
CAPTIONING = "captioning"  # molecule -> a caption, scored by a probe
DDI_QA = "ddi_qa"  # question about a drug pair's interaction -> free text
MEDICAL_QA = "medical_qa"  # consumer medical question -> free text

ALL: tuple[str, ...] = (DRUGBANK_DDI, TWOSIDES, TOXICITY, DRUG_TARGETS, CAPTIONING, DDI_QA, MEDICAL_QA)
# the one-molecule families (the ``molecular`` group of ``-t`` and of the docs)
MOLECULAR: tuple[str, ...] = (TOXICITY, DRUG_TARGETS, CAPTIONING)
