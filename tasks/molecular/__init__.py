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

from functools import cache
from importlib import resources
from typing import Any

import tomllib

from ddibench.tasks.molecular.base import MolecularTask
from ddibench.tasks.molecular.captioning import CaptioningTask
from ddibench.tasks.molecular.targets import TargetTask
from ddibench.tasks.molecular.toxicity import ToxicityTask


@cache
def _definitions() -> dict[str, Any]:
    return tomllib.loads(resources.files(__name__).joinpath("tasks.toml").read_text(encoding="utf-8"))


def _task(name: str, spec: dict[str, Any]) -> MolecularTask:
    family = _definitions()["family"]
    recipe = int(family["recipe_version"])
    kind = spec["kind"]
    if kind == "toxicity":
        return ToxicityTask(name, spec, recipe)
    if kind == "captioning":
        return CaptioningTask(name, spec, recipe)
    return TargetTask(name, spec, recipe, family["target_polarity"])


TASKS: dict[str, MolecularTask] = {name: _task(name, spec) for name, spec in _definitions()["tasks"].items()}

__all__ = ["TASKS", "CaptioningTask", "MolecularTask", "TargetTask", "ToxicityTask"]
