"""The names of the shipped task families, in one place.

A task's :attr:`~ddibench.task.Task.family` is a name of its own (``-t FAMILY`` selects all tasks of a family by
it, and ``ddibench list tasks`` prints it); a new family needs no entry here. The shipped families name theirs
with these constants, and so do the systems that serve a family because they need its data (DrugBank's drug
catalog, the knowledge graph's id space) in their ``families``. What a system answers never hangs on a family's
name: a task declares how it is answered (:attr:`~ddibench.task.Task.answer`), and systems read that.
"""

from __future__ import annotations

DRUGBANK_DDI = "drugbank_ddi"  # drug pair -> one of 86 DrugBank interaction types
TWOSIDES = "twosides"  # drug pair -> its five most likely TWOSIDES side effects
TOXICITY = "toxicity"  # molecule -> yes/no (TDC toxicity endpoints)
DRUG_TARGETS = "drug_targets"  # molecule -> five target proteins (HGNC symbols)
CAPTIONING = "captioning"  # molecule -> a caption, scored by a probe
DDI_QA = "ddi_qa"  # question about a drug pair's interaction -> free text
MEDICAL_QA = "medical_qa"  # consumer medical question -> free text
