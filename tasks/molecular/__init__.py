"""Molecular task families: one molecule per sample (the families the CLADD paper evaluates).

* **toxicity** (``tox_herg``, ``tox_dili``, ``tox_skin``, ``tox_carcinogens``, and ``tox_herg_tdc``,
  ``tox_dili_tdc`` on TDC's split): molecule -> yes/no; macro-F1 (primary), accuracy, kappa, AUROC.
* **captioning** (``caption_bbbp``, ``caption_sider``, ``caption_clintox``, ``caption_bace``): a
  caption of every molecule, scored by a probe that learns the property from the training captions.
* **drug_targets** (``targets_inhibit``, ``targets_activate``): molecule -> five HGNC symbols, from the
  Drug Repurposing Hub (standing in for ChemPert); precision@5 / recall@5 on molecules the KG lacks.

The definitions live in ``tasks.toml`` (files, label columns, instructions, and the counts every load
verifies); :mod:`.molecules` holds the deduplication rule, :mod:`.base` the shared building and checks.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from ddibench.task import load_task_specs
from ddibench.tasks.molecular.base import MolecularFamilySpec, MolecularTask
from ddibench.tasks.molecular.captioning import CaptioningSpec, CaptioningTask
from ddibench.tasks.molecular.targets import TargetSpec, TargetTask
from ddibench.tasks.molecular.toxicity import ToxicitySpec, ToxicityTask

# a table's ``kind`` says which spec it is, and which task class it builds
AnySpec = Annotated[ToxicitySpec | CaptioningSpec | TargetSpec, Field(discriminator="kind")]
FAMILY_SPEC, SPECS = load_task_specs(__name__, MolecularFamilySpec, AnySpec)


def _task(name: str, spec: ToxicitySpec | CaptioningSpec | TargetSpec) -> MolecularTask:
    recipe = FAMILY_SPEC.recipe_version
    if isinstance(spec, ToxicitySpec):
        return ToxicityTask(name, spec, recipe)
    if isinstance(spec, CaptioningSpec):
        return CaptioningTask(name, spec, recipe)
    return TargetTask(name, spec, recipe, FAMILY_SPEC.target_polarity)


TASKS: dict[str, MolecularTask] = {name: _task(name, spec) for name, spec in SPECS.items()}

__all__ = ["TASKS", "CaptioningTask", "MolecularTask", "TargetTask", "ToxicityTask"]
