"""Verifying a bundle (``ddibench verify``): hashes, identities and the agreement of its records, the task
and its samples, and the metrics recomputed from the predictions; :func:`verify_all` verifies a batch, each
bundle in a sandboxed child process."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ddibench.evaluation import EvaluationResult, Evaluator
from ddibench.hashing import sha256_text
from ddibench.runner.records import BundleIndex, Results, RunIdentity
from ddibench.schema import Prediction, Sample
from ddibench.submission.checks import (
    LOCAL_ADAPTER,
    _check_cost,
    _check_labels,
    _check_models,
    _check_system,
    _models,
    _spec_matches,
    describe_provenance,
    is_local,
)
from ddibench.submission.stream import _stream, _Streamed
from ddibench.submission.verdict import Verdict

if TYPE_CHECKING:
    from ddibench.task import Task


def _parse(verdict: Verdict, model: Any, data: bytes, name: str) -> Any:
    """A bundle member as its record type, or a failed check naming what is wrong."""
    from pydantic import ValidationError

    try:
        return model.model_validate(json.loads(data))
    except UnicodeDecodeError:
        verdict.check(name, False, "is not UTF-8 text")
    except ValueError as exc:
        if isinstance(exc, ValidationError):
            err = exc.errors()[0]
            verdict.check(
                name,
                False,
                f"is not a valid {model.__name__} ({'.'.join(str(p) for p in err['loc']) or 'top level'}: {err['msg']})",
            )
        else:
            verdict.check(name, False, "is not JSON")
    return None


def verify(path: Path, tolerance: float = 1e-9, keep_traces: bool = False) -> Verdict:
    """Check a bundle (see :mod:`ddibench.submission`). Structural problems of the archive (a member outside
    the format, a link, not a .tar.gz) raise :class:`DataError`; everything else is a failed check with
    its reason. ``keep_traces`` keeps every sample's whole trace (for the results store).

    The checks run in order, each phase only when the one before left something to check: the archive's
    members, the run's identity, the task and its scorers, the predictions and the samples, then the
    recomputed metrics."""
    from ddibench.errors import DdibenchError
    from ddibench.registry import get_task

    streamed = _stream(path, keep_traces)
    verdict = Verdict(False, "self-reported")
    records = _check_members(verdict, streamed)
    if records is None:
        return verdict
    bundle, run, results = records
    try:
        task = get_task(run.task.name)
    except DdibenchError as exc:
        verdict.check("task", False, str(exc))
        return verdict
    evaluator = _check_task(verdict, task, run, results)
    if streamed.problem is not None:
        verdict.check("predictions", False, f"predictions.jsonl {streamed.problem}")
        return verdict
    predictions = streamed.predictions
    verdict.predictions, verdict.traces = predictions, streamed.traces
    _check_labels(verdict, task.label_space, predictions)
    _check_models(verdict, run, results, predictions)
    if verdict.blocking() or evaluator is None:
        return verdict
    samples = _check_samples(verdict, task, run, streamed)
    if verdict.blocking():
        return verdict
    _check_cost(verdict, results, [predictions[s.id] for s in samples])
    _check_constant_answer(verdict, results, [predictions[s.id] for s in samples])
    try:
        verdict.extras = evaluator.read_extras(streamed.members)
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        verdict.check(
            "scores", False, f"the bundle's scores/ files cannot be read ({type(exc).__name__}: {_first_line(exc)})"
        )
        return verdict
    evaluation = _recompute(verdict, samples, predictions)
    if evaluation is None:
        return verdict
    verdict.recomputed = evaluation
    _check_metrics(verdict, evaluation, results, max(tolerance, evaluator.recompute_tolerance))
    verdict.accepted = not verdict.reasons
    verdict.tier = "self-reported" if verdict.blocking() else "recomputed"
    return verdict


def load_finished_or_bundle(
    path: Path, keep_traces: bool = False
) -> tuple[RunIdentity, Results, dict[str, Prediction]]:
    """What ``report --against`` compares: a finished run directory's identity, results and predictions, or
    a bundle's once it verifies (its metrics recomputed from its predictions); RunDirError otherwise. A bundle's
    predictions keep only their LLM calls' identities unless ``keep_traces`` (what the ceilings read: the labels
    a context stated)."""
    from ddibench.errors import RunDirError
    from ddibench.runner.rundir import load_finished

    if path.is_dir():
        return load_finished(path)
    if not path.is_file():
        raise RunDirError(f"{path} does not exist", "give a finished run directory or a bundle (.tar.gz)")
    verdict = verify(path, keep_traces=keep_traces)
    if verdict.blocking() or verdict.run is None or verdict.results is None:
        reason = "; ".join(verdict.blocking()) or "it holds no run"
        raise RunDirError(f"{path} does not verify ({reason})", f"see 'ddibench verify {path}'")
    predictions = verdict.predictions
    if keep_traces:
        predictions = {
            sid: p.model_copy(update={"trace": json.loads(verdict.traces[sid])}) if sid in verdict.traces else p
            for sid, p in predictions.items()
        }
    return verdict.run, verdict.results, predictions


def _check_members(verdict: Verdict, streamed: _Streamed) -> tuple[BundleIndex, RunIdentity, Results] | None:
    """The archive's members against bundle.json's hashes, then the run's identity and its agreement with the
    results: the records the other checks read, or None when they cannot be read."""
    members = streamed.members
    bundle = _parse(verdict, BundleIndex, members["bundle.json"], "bundle.json")
    if bundle is None:
        return None
    verdict.bundle = bundle
    for name, digest in streamed.hashes.items():
        if name != "bundle.json":
            same = bundle.hashes.get(name) == digest
            verdict.check(
                f"hash of {name}",
                same,
                "matches bundle.json" if same else "differs from bundle.json: the file was changed",
            )
    missing = sorted(set(bundle.hashes) - set(streamed.hashes))
    verdict.check(
        "members present", not missing, f"missing {', '.join(missing)}" if missing else "all listed members present"
    )
    for required in ("run.json", "results.json", "predictions.jsonl"):
        if required not in streamed.hashes:
            verdict.check(required, False, "not in the bundle")
            return None
    run = _parse(verdict, RunIdentity, members["run.json"], "run.json")
    results = _parse(verdict, Results, members["results.json"], "results.json")
    if run is None or results is None:
        return None
    verdict.run, verdict.results = run, results
    run_id_ok = run.run_id == bundle.run_id == results.run_id == run.with_id().run_id
    verdict.check(
        "run id",
        run_id_ok,
        "bundle.json, run.json and results.json agree, and the id is the hash of the run's identity"
        if run_id_ok
        else "run.json's run id is not the hash of its identity: the identity was edited"
        if run.run_id != run.with_id().run_id
        else "bundle.json, run.json and results.json name different runs",
    )
    _check_agreement(verdict, bundle, run, results)
    _check_system(verdict, run)
    provenance = results.manifest.system.provenance
    local = is_local(provenance)
    verdict.check("adapter", True, describe_provenance(provenance) + (f"; warning: {LOCAL_ADAPTER}" if local else ""))
    if bundle.compact is not None:
        verdict.check(
            "compact",
            True,
            f"predictions hold {', '.join(bundle.compact.answer_fields)}; {bundle.compact.whole_traces} whole traces"
            + (
                f" (drawn with seed {bundle.compact.whole_trace_seed})"
                if bundle.compact.whole_trace_ids is not None
                else " (the first samples)"
            ),
        )
    return bundle, run, results


def _check_task(verdict: Verdict, task: Task, run: RunIdentity, results: Results) -> Evaluator | None:
    """The run against this ddibench's task (version, data, split, --limit, profile, seeds) and its scorers
    (options, version): the evaluator that recomputes the metrics, or None when the run's scoring cannot be
    reproduced here."""
    from ddibench.errors import DdibenchError

    verdict.check(
        "task version", run.task.version == task.version, f"bundle {run.task.version}, this ddibench {task.version}"
    )
    verdict.check(
        "data sha256",
        run.task.data_sha256 == task.data_sha256,
        f"bundle {run.task.data_sha256[:12]}…, pinned data {task.data_sha256[:12]}…",
    )
    verdict.check(
        "no --limit",
        run.limit is None,
        "the full evaluation split" if run.limit is None else f"--limit {run.limit} was used",
    )
    verdict.check("evaluation split", run.split == task.eval_split, f"{run.split} (expected {task.eval_split})")
    smoke = results.manifest.profile.declared.get("rankable") is False
    verdict.check(
        "profile", not smoke, f"{results.manifest.profile.name}" + (": a smoke budget, never ranked" if smoke else "")
    )
    evaluator: Evaluator | None = None
    try:
        evaluator = task.evaluator().configure(results.manifest.scoring.options)
    except DdibenchError as exc:
        verdict.check("scoring options", False, f"{exc} (score again with 'ddibench rescore RUN_DIR' and the defaults)")
    if evaluator is not None:
        local = evaluator.non_portable()
        verdict.check(
            "scoring options",
            not local,
            "the task's default scorers"
            if not local and not evaluator.settings()
            else (
                f"{', '.join(f'{k}={v}' for k, v in evaluator.settings().items())}"
                if not local
                else f"scored with {', '.join(local)} set to something only the submitter's machine has; the board compares runs scored "
                "with the task's default scorers (score again with 'ddibench rescore RUN_DIR --scorer-encoder minilm')"
            ),
        )
        claimed_version = int((results.manifest.scoring.evaluator or {}).get("version", 1))
        verdict.check(
            "scorer version",
            claimed_version == evaluator.version,
            f"v{evaluator.version}"
            if claimed_version == evaluator.version
            else f"scored by {evaluator.kind} scorers v{claimed_version}; this ddibench scores with v{evaluator.version} "
            "(score the run again with 'ddibench rescore RUN_DIR' and submit it again)",
        )
    verdict.evaluator = evaluator
    seeds = 1
    verdict.check("seeds", seeds >= task.required_seeds, f"{seeds} run(s), the task asks for {task.required_seeds}")
    return evaluator


def _check_samples(verdict: Verdict, task: Task, run: RunIdentity, streamed: _Streamed) -> list[Sample]:
    """The samples the run was asked about (a task may predict several splits; a preview's metrics are still
    recomputed, on the subset --limit draws), each answered once."""
    from ddibench.runner.selection import run_samples

    samples = run_samples(task, run.selection)
    verdict.samples = samples
    wanted = {s.id for s in samples}
    absent = len(wanted - set(streamed.predictions))
    extra = len(set(streamed.predictions) - wanted)
    verdict.check(
        "every sample once",
        not absent and not extra and not streamed.duplicates,
        f"{absent} missing, {extra} unknown, {streamed.duplicates} repeated of {len(wanted):,}",
    )
    verdict.check(
        "sample ids",
        run.sample_ids_sha256 == sha256_text("\n".join(s.id for s in samples)),
        "the run's samples are the task's evaluation split (and the splits it predicts)"
        if run.limit is None
        else f"the run's samples are the {len(samples):,} that --limit {run.limit} draws from the evaluation split",
    )
    return samples


def _check_metrics(verdict: Verdict, evaluation: EvaluationResult, results: Results, allowed: float) -> None:
    """Every recomputed metric against the claimed one, within ``allowed`` (float noise)."""
    claimed = results.evaluation.metrics
    for name, metric in evaluation.metrics.items():
        mine, theirs = metric.value, (claimed[name].value if name in claimed else None)
        same = theirs is not None and (
            mine == theirs or abs(mine - theirs) <= allowed or (mine != mine and theirs != theirs)
        )
        verdict.check(
            f"metric {name}", same, f"recomputed {mine:.6f}, claimed {theirs if theirs is None else f'{theirs:.6f}'}"
        )


def _first_line(exc: BaseException) -> str:
    text = str(exc)
    return text.splitlines()[0] if text else type(exc).__name__


def _check_constant_answer(verdict: Verdict, results: Results, predictions: list[Prediction]) -> None:
    """A run whose card says its system answers the same for every sample on purpose (a floor) is not flagged for
    collapsed answers on the board, so the claim is checked against what it answered: one answer for every valid
    prediction. Without this check a bundle could declare itself constant to hide the flag."""
    if not results.manifest.system.constant_answer:
        return
    answers = {(p.label, tuple(p.ranked or ()), p.text) for p in predictions if p.valid}
    verdict.check(
        "constant answer",
        len(answers) <= 1,
        "the system is declared to answer the same for every sample, and does"
        if len(answers) <= 1
        else f"results.json declares a constant answer (a floor, never flagged for collapsed answers), "
        f"but the predictions hold {len(answers)} distinct answers",
    )


def _recompute(verdict: Verdict, samples: list[Sample], predictions: dict[str, Prediction]) -> EvaluationResult | None:
    """The metrics of ``predictions`` on ``samples``, or None with a failed check saying why."""
    from ddibench.evaluation import EvaluationInputError

    assert verdict.evaluator is not None and verdict.results is not None
    try:
        spec = verdict.results.bootstrap_spec  # the interval method the bundle records (percentile before BCa)
        if not 100 <= spec.replicates <= 100_000:
            raise ValueError(f"bootstrap {spec.replicates} replicates by '{spec.method}'")
        return verdict.evaluator.evaluate(samples, predictions, spec, verdict.extras)
    except EvaluationInputError as exc:
        verdict.check("prediction format", False, str(exc))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        verdict.check(
            "recomputation",
            False,
            f"the metrics cannot be recomputed from the bundle ({type(exc).__name__}: {_first_line(exc)})",
        )
    return None


def _check_agreement(verdict: Verdict, bundle: BundleIndex, run: RunIdentity, results: Results) -> None:
    """bundle.json, run.json and results.json name the same task, system, models, split and samples."""
    man = results.manifest
    problems = []
    if results.task != run.task.name or (man.task.name, man.task.version, man.task.data_sha256) != (
        run.task.name,
        run.task.version,
        run.task.data_sha256,
    ):
        problems.append(
            f"results.json names task {man.task.name} {man.task.version}, run.json {run.task.name} {run.task.version}"
        )
    if bundle.task != run.task:
        problems.append(
            f"bundle.json names task {bundle.task.name} {bundle.task.version}, run.json {run.task.name} {run.task.version}"
        )
    mine = (run.system.name, run.system.version, run.system.config_hash)
    if (
        results.system != run.system.name
        or (man.system.name, man.system.version, man.system.config_hash) != mine
        or man.system.config != run.system.config
    ):
        problems.append(
            f"results.json names system {man.system.name} {man.system.version} (config {man.system.config_hash}), "
            f"run.json {run.system.name} {run.system.version} (config {run.system.config_hash})"
        )
    if (bundle.system.name, bundle.system.version, bundle.system.config_hash) != mine:
        problems.append(
            f"bundle.json names system {bundle.system.name} {bundle.system.version}, run.json {run.system.name} {run.system.version}"
        )
    claimed_models = {role: entry.identity for role, entry in man.models.items()}
    if claimed_models != run.models:
        problems.append(f"results.json names models {_models(claimed_models)}, run.json {_models(run.models)}")
    for role, entry in man.models.items():
        if not _spec_matches(entry.spec, entry.identity):
            problems.append(
                f"results.json's {role} model '{entry.spec}' is not the model its identity names ({_models({role: entry.identity})})"
            )
    settings = (man.split, man.limit, man.n_samples, man.sample_ids_sha256, man.seeds.run)
    if settings != (run.split, run.limit, run.n_samples, run.sample_ids_sha256, run.seed):
        problems.append("results.json and run.json differ in split, --limit, seed or samples")
    verdict.check(
        "identity",
        not problems,
        "bundle.json, run.json and results.json name the same task, system, models and samples"
        if not problems
        else "; ".join(problems[:3]) + ": the bundle was edited",
    )


def verify_all(paths: Iterable[Path], keep_traces: bool = False) -> Iterator[tuple[Path, Verdict | None, str | None]]:
    """Verify bundles one by one, each in a child process with CPU and memory limits
    (:mod:`ddibench.submission.sandbox`): (path, verdict, None), or (path, None, why) when a bundle could not be
    verified at all; one bundle never stops the others."""
    from ddibench.errors import DdibenchError
    from ddibench.submission.sandbox import verify_isolated

    for path in paths:
        try:
            yield path, verify_isolated(path, keep_traces=keep_traces), None
        except DdibenchError as exc:
            yield path, None, str(exc)
        except Exception as exc:  # noqa: BLE001 - a hostile bundle that finds a bug must not stop the batch
            yield (
                path,
                None,
                f"could not be verified ({type(exc).__name__}: {_first_line(exc)}); this is a bug in ddibench, please report it",
            )
