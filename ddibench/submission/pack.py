"""Packing a finished run into a submission bundle (``ddibench submit``): its members, their hashes in
``bundle.json``, and the compact form that keeps of each prediction only what the task's metrics read."""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import json
import tarfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ddibench._version import __version__
from ddibench.errors import ConfigError, DataError, RunDirError, write_error
from ddibench.runner.records import (
    BUNDLE_FORMAT,
    BundleIndex,
    BundleSystem,
    Compaction,
    Results,
    RunIdentity,
    read_identity,
    read_results,
)
from ddibench.schema import Prediction
from ddibench.submission.stream import CALL_FIELDS
from ddibench.submission.verification import _first_line

WHOLE_TRACES = 5  # samples whose whole trace a compact bundle keeps, for a reader of the run's page


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def submit(run_dir: Path, out: Path | None = None, compact: bool = False, whole_traces: int = WHOLE_TRACES) -> Path:
    """Pack a finished run into a bundle; returns its path. ``compact`` keeps of each prediction only what
    the task's metrics read (:meth:`ddibench.evaluation.BaseEvaluator.reduce`), of its trace the LLM call
    records and what the ceilings read (:func:`ddibench.runner.ceilings.evidence`), and the whole trace of
    ``whole_traces`` samples drawn with the run's seed (:func:`whole_trace_ids`), after checking that the
    reduced predictions score exactly as the run did (the form of the bundles that ship under ``results/``)."""
    results_file = run_dir / "results.json"
    if not results_file.exists():
        raise RunDirError(f"{run_dir} has no results.json", "finish the run with 'ddibench run' before submitting it")
    ident = read_identity(run_dir / "run.json")
    results = read_results(results_file)  # a damaged results.json is refused here, not by the verifier
    out = out or run_dir.parent / f"{ident.task.name}--{ident.system.name}--{ident.run_id}.tar.gz"
    if out.is_dir():
        raise ConfigError(f"--out {out} is a directory", "give the path of the bundle file, e.g. --out run.tar.gz")
    if not out.parent.is_dir():
        raise ConfigError(
            f"--out {out}: directory {out.parent} does not exist",
            "create it first, or give a path in an existing directory",
        )
    members: dict[str, bytes] = {
        "run.json": (run_dir / "run.json").read_bytes(),
        "results.json": results_file.read_bytes(),
        "sessions.jsonl": (run_dir / "sessions.jsonl").read_bytes() if (run_dir / "sessions.jsonl").exists() else b"",
    }
    for path in sorted((run_dir / "scores").glob("*.jsonl")) if (run_dir / "scores").exists() else []:
        members[f"scores/{path.name}"] = path.read_bytes()
    compaction = None
    if compact:
        members["predictions.jsonl"], compaction = _compact_predictions(run_dir, ident, results, members, whole_traces)
    else:
        members["predictions.jsonl"] = _encode(_journal_predictions(run_dir / "journal.jsonl"))
    bundle = BundleIndex(
        format=BUNDLE_FORMAT,
        created=dt.datetime.now(dt.timezone.utc).isoformat(),
        ddibench_version=__version__,
        run_id=ident.run_id,
        task=ident.task,
        system=BundleSystem(name=ident.system.name, version=ident.system.version, config_hash=ident.system.config_hash),
        hashes={name: _sha(data) for name, data in sorted(members.items())},
        compact=compaction,
    )
    members["bundle.json"] = json.dumps(bundle.dump(), indent=2).encode("utf-8")
    tmp = out.with_name(f".{out.name}.tmp")
    try:
        # plain ustar members (no PAX headers): the bounded reader (ddibench.submission.archive) refuses tar's extensions
        with tarfile.open(tmp, "w:gz", format=tarfile.USTAR_FORMAT) as tar:
            for name, data in sorted(members.items()):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                info.mtime = 0
                tar.addfile(info, io.BytesIO(data))
        tmp.replace(out)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise write_error(exc, out) from None
    return out


def _journal_predictions(journal: Path) -> Iterator[Prediction]:
    """The journal's predictions in the order written (a damaged journal is refused with its line)."""
    if not journal.exists():
        raise RunDirError(f"{journal} does not exist", "finish the run with 'ddibench run' before submitting it")
    with open(journal, "rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            if not raw.strip():
                continue
            try:
                record = json.loads(raw)
                yield Prediction.model_validate(record["prediction"])
            except (ValueError, KeyError, TypeError):
                raise RunDirError(
                    f"{journal}:{lineno} is not a readable journal record",
                    "the journal was edited or damaged; run the same 'ddibench run' command again to repair it, or start a fresh run",
                ) from None


def _encode(predictions: Iterable[Prediction]) -> bytes:
    """One JSON object a line, as ``verify`` reads them."""
    lines = [
        json.dumps(p.model_dump(mode="json", exclude_none=False), ensure_ascii=False, separators=(",", ":"))
        for p in predictions
    ]
    return ("\n".join(lines) + "\n").encode("utf-8")


def _compact_predictions(
    run_dir: Path, ident: RunIdentity, results: Results, members: dict[str, bytes], whole_traces: int
) -> tuple[bytes, Compaction]:
    """The predictions member of a compact bundle, after checking that its predictions score as the run's did."""
    from ddibench.registry import get_task
    from ddibench.runner.selection import run_samples

    task = get_task(ident.task.name)
    evaluator = task.evaluator().configure(results.manifest.scoring.options)
    samples = run_samples(task, ident.selection)
    whole_ids = whole_trace_ids([s.id for s in samples], whole_traces, int(ident.seed))
    whole = set(whole_ids)
    reduced: dict[str, Prediction] = {}
    for pred in _journal_predictions(run_dir / "journal.jsonl"):
        trace = pred.trace if pred.sample_id in whole else _reduced_trace(pred.trace)
        reduced[pred.sample_id] = evaluator.reduce(pred).model_copy(update={"trace": trace})
    missing = [s.id for s in samples if s.id not in reduced]
    if missing:
        raise RunDirError(
            f"{run_dir} has no prediction for {len(missing):,} of its samples (first: {missing[0]})",
            "finish the run with 'ddibench run' before submitting it",
        )
    extras = evaluator.read_extras(members)
    try:
        evaluation = evaluator.evaluate(samples, reduced, results.bootstrap_spec, extras)
    except (ValueError, KeyError, TypeError) as exc:  # EvaluationInputError is a ValueError
        _check_journal_scores_as_results(run_dir, samples, evaluator, results, extras)
        problem, fix = _under_declared(evaluator)
        raise DataError(
            f"--compact would change the metrics of {run_dir} ({_first_line(exc)}): {problem}", fix
        ) from None
    changed = _changed_metric(results, evaluation, evaluator.recompute_tolerance)
    if changed is not None:
        # the whole journal first: a journal edited after scoring no longer scores as results.json says either,
        # and then the compaction is not to blame
        _check_journal_scores_as_results(run_dir, samples, evaluator, results, extras)
        name, claimed, got = changed
        problem, fix = _under_declared(evaluator)
        raise DataError(f"--compact would change metric {name} of {run_dir} ({claimed} -> {got}): {problem}", fix)
    note = (
        "traces of the other samples keep only their LLM call records (role, model, tokens, latency, cached)"
        " and what the ceilings read, where the system records it: the labels their context stated and the"
        " candidates a first stage offered"
    )
    compaction = Compaction(
        answer_fields=list(evaluator.answer_fields),
        whole_traces=len(whole),
        note=note,
        whole_trace_ids=whole_ids,
        whole_trace_seed=int(ident.seed),
    )
    return _encode(reduced[s.id] for s in samples), compaction


def whole_trace_ids(sample_ids: Sequence[str], n: int, seed: int) -> list[str]:
    """The ``n`` samples whose whole trace a compact bundle keeps: drawn with ``seed`` (the run's) from all of the
    run's samples, listed in the run's order. Not the first ``n``: a --limit selection lists its samples in split
    order, where the first few share the lowest labels."""
    import numpy as np

    if n >= len(sample_ids):
        return list(sample_ids)
    chosen = np.sort(np.random.default_rng(seed).choice(len(sample_ids), n, replace=False))
    return [sample_ids[i] for i in chosen.tolist()]


def _under_declared(evaluator: Any) -> tuple[str, str]:
    """Why a compaction changed the metrics once the whole journal is known to score as the run did, and the fix."""
    return (
        f"the {evaluator.kind} evaluator reads more of a prediction than its answer fields {list(evaluator.answer_fields)}",
        "submit without --compact, and report this as a bug in ddibench",
    )


def _shown(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def _changed_metric(results: Results, evaluation: Any, tolerance: float) -> tuple[str, float, Any] | None:
    """The first metric of ``results`` that ``evaluation`` does not reproduce (name, claimed, recomputed), or None;
    within the float noise a recomputation may carry (float32 encoders move with the thread count), as
    verification allows."""
    for name, claimed in results.evaluation.metrics.items():
        mine = evaluation.metrics.get(name)
        if mine is None or not (
            abs(mine.value - claimed.value) <= tolerance
            or (mine.value != mine.value and claimed.value != claimed.value)
        ):
            return name, claimed.value, (mine.value if mine else "absent")
    return None


def _check_journal_scores_as_results(
    run_dir: Path, samples: list[Any], evaluator: Any, results: Results, extras: Any
) -> None:
    """Nothing when the run's whole journal scores as its results.json says; else a DataError naming the metric
    (and the samples, where the results keep per-sample scores) on which they disagree: the journal was edited
    after the run was scored (or scores differently with this ddibench), which no compaction can be blamed for,
    and a rescore makes the two agree again."""
    journal, results_file = run_dir / "journal.jsonl", run_dir / "results.json"
    fix = f"run 'ddibench rescore {run_dir}' to score the journal as it is now (or restore the journal as it was scored), then submit again"
    why = "the journal was edited after the run was scored, or scores differently with this ddibench"
    predictions = {p.sample_id: p for p in _journal_predictions(journal)}
    try:
        evaluation = evaluator.evaluate(samples, predictions, results.bootstrap_spec, extras)
    except (ValueError, KeyError, TypeError) as exc:  # EvaluationInputError is a ValueError
        raise DataError(
            f"{journal} no longer scores as {results_file} says ({_first_line(exc).replace(';', ',')}): {why}", fix
        ) from None
    changed = _changed_metric(results, evaluation, evaluator.recompute_tolerance)
    if changed is None:
        return
    name, claimed, got = changed
    differing = [
        s.id
        for s in samples
        if results.evaluation.per_sample.get(s.id) is not None
        and evaluation.per_sample.get(s.id) is not None
        and results.evaluation.per_sample[s.id] != evaluation.per_sample[s.id]
    ]
    which = f", {len(differing):,} sample(s) score differently (first: {differing[0]})" if differing else ""
    raise DataError(
        f"{journal} and {results_file} disagree: the journal scores {name} {_shown(got)}, results.json says "
        f"{_shown(claimed)}{which}, so the packed predictions would change metric {name} ({why})",
        fix,
    )


def _reduced_trace(trace: dict[str, Any]) -> dict[str, Any]:
    """A compact bundle's trace of a sample whose whole trace it does not keep: the LLM call records and what
    the ceilings read (the context's labels, the candidates offered), for every system that records them."""
    from ddibench.runner.ceilings import evidence

    return {**_call_trace(trace), **(evidence(trace) if isinstance(trace, dict) else {})}


def _call_trace(trace: dict[str, Any]) -> dict[str, Any]:
    """A trace reduced to what ``verify`` reads of it: the LLM call records, each with :data:`CALL_FIELDS`."""
    calls = trace.get("llm") if isinstance(trace, dict) else None
    if not isinstance(calls, list) or not calls:
        return {}
    return {"llm": [{k: call[k] for k in CALL_FIELDS if k in call} for call in calls if isinstance(call, dict)]}
