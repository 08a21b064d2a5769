"""A bundle verified before, read back as a verdict without recomputing it.

The board opens from the shipped results, every bundle of which CI verified against ``results/index.json``
(``ddibench board check`` recomputes every metric with its bootstrap). Opening them need not repeat that:
once a bundle's sha256 matches the index (the caller checks it), its bytes are the ones CI verified, and its
recorded evaluation is what CI recomputed (the index holds CI's primary metric and interval; the caller
compares them). :func:`recorded_verdict` reads such a bundle as :func:`ddibench.submission.verify` would, its
records and their agreement checked, the samples selected again, and its evaluation taken as recorded, with
what a scorer adds without the bootstrap (the answer spread, which older bundles did not record).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ddibench.errors import DataError
from ddibench.submission.stream import _stream
from ddibench.submission.verdict import Verdict
from ddibench.submission.verification import _check_members


def recorded_verdict(path: Path, tier: str, reproduction: dict[str, Any] | None, preview: bool) -> Verdict:
    """The verdict of a bundle that was verified before at ``tier`` (with its ``reproduction`` record): its
    recorded metrics, every prediction and whole trace, its samples. Raises :class:`DataError` when its
    records cannot be read or disagree (then it is not the bundle that was verified)."""
    from ddibench.registry import get_task
    from ddibench.runner.selection import run_samples

    streamed = _stream(path, keep_traces=True)
    verdict = Verdict(False, tier)
    records = _check_members(verdict, streamed)
    if records is None or verdict.blocking() or streamed.problem is not None:
        reason = "; ".join(verdict.blocking()) or streamed.problem or "its records cannot be read"
        raise DataError(f"{path.name}: {reason}", "verify it with 'ddibench verify BUNDLE'")
    _, run, results = records
    task = get_task(run.task.name)
    evaluator = task.evaluator().configure(results.manifest.scoring.options)
    samples = run_samples(task, run.selection)
    missing = [s.id for s in samples if s.id not in streamed.predictions]
    if missing:
        raise DataError(
            f"{path.name}: no prediction for {len(missing):,} of its samples", "verify it with 'ddibench verify BUNDLE'"
        )
    verdict.predictions, verdict.traces, verdict.samples = streamed.predictions, streamed.traces, samples
    verdict.evaluator = evaluator
    verdict.extras = evaluator.read_extras(streamed.members)
    spread = evaluator.answer_spread(samples, streamed.predictions)
    recorded = results.evaluation
    verdict.recomputed = recorded.model_copy(update={"answers": spread if spread is not None else recorded.answers})
    if preview:
        verdict.check("no --limit", False, f"--limit {run.limit} was used")
    verdict.accepted = not verdict.reasons
    verdict.tier, verdict.reproduction = tier, reproduction
    return verdict
