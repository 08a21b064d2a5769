"""Reproducing a bundle (``ddibench verify --reproduce``): re-run its system here with empty caches and
compare the answers sample by sample."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ddibench.errors import ConfigError
from ddibench.runner.records import Results, RunIdentity
from ddibench.schema import Prediction
from ddibench.submission.checks import install_hint
from ddibench.submission.verdict import Verdict
from ddibench.submission.verification import _recompute

SCORE_TOLERANCE = 1e-6  # scores this close are the same answer: what float order in BLAS kernels changes


def same_answer(a: Prediction | None, b: Prediction | None) -> bool:
    """What reproduction compares: the answer itself (validity, label, ranking, text, the scores of the same
    labels), not its trace (timings differ from run to run). Scores match within ``SCORE_TOLERANCE``: a
    retrained model whose kernels summed in another order differs around the 7th decimal, and rounding
    both to 6 decimals (as this did before) tells 0.12345649 from 0.12345651 apart."""
    if a is None or b is None:
        return a is b
    if (a.valid, a.label, a.ranked, a.text) != (b.valid, b.label, b.ranked, b.text):
        return False
    if not a.scores or not b.scores:
        return not a.scores and not b.scores
    return a.scores.keys() == b.scores.keys() and all(
        math.isclose(v, b.scores[k], rel_tol=0.0, abs_tol=SCORE_TOLERANCE) for k, v in a.scores.items()
    )


def reproduce(verdict: Verdict, workdir: Path, models: dict[str, Any] | None = None, tolerance: float = 0.0) -> Verdict:
    """Re-run the bundle's system (registered here) with its configuration and compare the predictions
    sample by sample. ``tolerance`` is the share of samples that may differ (0: none); the metrics kept
    are those of the reproduced predictions. The re-run uses no cached LLM answer and trains every
    artifact again (into ``WORKDIR.artifacts``), so a reproduction on the submitter's machine is not a
    replay of its own caches; the verdict records it."""
    if not 0 <= tolerance < 1:
        raise ConfigError(
            f"--tolerance {tolerance} is not a share of samples", "give a number from 0 (identical) up to, say, 0.01"
        )
    if not verdict.accepted or verdict.run is None or verdict.results is None:
        return verdict
    _check_rerunnable(verdict.run, verdict.results)
    again = _rerun(verdict.run, verdict.results, workdir, models)
    order = [s.id for s in verdict.samples] or sorted(verdict.predictions)
    differing = _differing_answers(verdict, again, order)
    _record_reproduction(verdict, again, order, differing, tolerance)
    return verdict


def _check_rerunnable(run: RunIdentity, results: Results) -> None:
    """Nothing, or a :class:`ConfigError` saying why this run cannot be re-run here (an imported lm-eval run,
    or a system not installed)."""
    from ddibench.errors import UnknownNameError
    from ddibench.registry import get_system_class

    if any(str(ident.get("provider", "")).startswith("lm-eval:") for ident in run.models.values()):
        raise ConfigError(
            f"run {run.run_id} was made by lm-evaluation-harness and imported: ddibench has no system to re-run it with "
            "(its metrics were recomputed from its answers: that is the 'recomputed' tier)",
            "to reproduce it, run lm-eval again on the exported task and import its samples with 'ddibench import lm-eval', "
            "then compare the two runs' answers",
        )

    try:
        get_system_class(run.system.name)
    except UnknownNameError:
        raise ConfigError(
            f"system '{run.system.name}' is not installed here, so it cannot be re-run",
            install_hint(results.manifest.system.provenance),
        ) from None


def _rerun(run: RunIdentity, results: Results, workdir: Path, models: dict[str, Any] | None) -> dict[str, Prediction]:
    """The predictions of the run made again into ``workdir``, with the models it used (``models`` overriding
    roles) and empty caches, by sample id."""
    from ddibench.llm import ModelSpec, parse_model_options
    from ddibench.registry import get_system_class
    from ddibench.runner.execute import execute
    from ddibench.runner.journal import Journal
    from ddibench.runner.plan import RunRequest
    from ddibench.system import BaseSystem

    used = {role: m.spec for role, m in results.manifest.models.items()}
    specs = parse_model_options([used["generator"]] if "generator" in used else [])
    specs = specs.with_roles({role: ModelSpec.parse(spec) for role, spec in used.items()})
    specs = specs.with_roles(dict(models or {}))
    # fresh caches: the submitter's cached model answers and trained artifacts would make a re-run on
    # their own machine a replay; a reproduction asks every model and trains everything again
    artifacts = workdir.with_name(workdir.name + ".artifacts")
    if artifacts.exists() and any(artifacts.iterdir()):
        raise ConfigError(f"{artifacts} is not empty", "reproduce into a new directory")
    cls = get_system_class(run.system.name)
    config = dict(run.system.config)
    if isinstance(cls, type) and issubclass(cls, BaseSystem):  # keys added since the run read as what it did
        config = cls.Config.as_run(config)
    request = RunRequest(
        task=run.task.name,
        system=run.system.name,
        models=specs,
        seed=run.seed,
        split=run.split,
        config=config,
        run_dir=workdir,
        score_with_models=False,
        use_cache=False,
        artifacts_root=artifacts,
    )
    outcome = execute(request)
    return Journal(outcome.run_dir / "journal.jsonl").load(repair=False)


def _differing_answers(verdict: Verdict, again: dict[str, Prediction], order: list[str]) -> list[str]:
    """The ids, in ``order``, of the samples whose re-run answer is not the bundle's."""
    theirs = verdict.predictions
    compact = verdict.bundle is not None and verdict.bundle.compact is not None and verdict.evaluator is not None
    reduce = verdict.evaluator.reduce if compact and verdict.evaluator is not None else (lambda p: p)
    # a compact bundle holds what the metrics read: the re-run's answers are compared reduced the same way
    return [sid for sid in order if not same_answer(theirs.get(sid), reduce(again[sid]) if sid in again else None)]


def _record_reproduction(
    verdict: Verdict, again: dict[str, Prediction], order: list[str], differing: list[str], tolerance: float
) -> None:
    """Nothing: writes the comparison into ``verdict`` (its counts, the check, and on success the 'reproduced'
    tier with the re-run's predictions and metrics)."""
    allowed = math.floor(tolerance * len(order) + 1e-9)
    ok = len(differing) <= allowed
    verdict.reproduction = {
        "n": len(order),
        "identical": len(order) - len(differing),
        "differing": len(differing),
        "differing_ids": differing[:50],
        "tolerance": tolerance,
        "fresh_caches": True,  # no cached LLM answer, no cached trained artifact
    }
    shown = ", ".join(differing[:5]) + (", …" if len(differing) > 5 else "")
    allowance = "any difference fails" if tolerance == 0 else f"tolerance {tolerance:g} allows {allowed}"
    detail = f"{len(order) - len(differing):,} of {len(order):,} predictions identical when re-run here with empty caches ({allowance})"
    if differing:
        detail += f"; differing: {shown}"
    if verdict.samples and verdict.evaluator is not None:
        reproduced = _recompute(verdict, verdict.samples, {sid: again[sid] for sid in order if sid in again})
        if reproduced is not None:
            verdict.recomputed = reproduced
            detail += "; the metrics shown are the reproduced predictions'"
    if verdict.check("reproduction", ok, detail):
        verdict.tier = "reproduced"
        # the re-run's answers (identical within the tolerance), with the bundle's own traces: the board shows the
        # traces the bundle holds (a compact one keeps a few whole), whether or not a check re-ran it
        submitted = verdict.predictions
        verdict.predictions = {
            sid: again[sid].model_copy(update={"trace": submitted[sid].trace}) if sid in submitted else again[sid]
            for sid in order
            if sid in again
        }
    else:
        verdict.accepted = False
