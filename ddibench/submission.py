"""Submission bundles: what a method author sends, and how ddibench checks it.

``ddibench submit RUN_DIR`` packs a finished run into one ``.tar.gz``: the per-sample predictions, the
run's identity and self-reported results, its sessions and LLM-judge scores, and ``bundle.json`` with
the sha256 of every member. ``ddibench verify BUNDLE`` treats the bundle as data, never code: members
are streamed from the archive by a bounded reader of its own (:mod:`ddibench.archive`: regular files
with expected names only, every size capped; predictions are parsed line by line and only what the
checks need is kept), parsed into their record types, and checked —

* every member's hash against ``bundle.json``;
* the run id is the hash of ``run.json``'s identity, and ``bundle.json``, ``run.json`` and
  ``results.json`` name the same task, system, configuration, models and samples;
* the system's configuration hash is the hash of its name, version and configuration; a system
  registered here must be the registered version with a valid configuration and the same LLM roles;
* every LLM call in the traces was made for a role the run declares and answered by the model its
  manifest names (each call records the digest of the model identity); the per-role call, token and
  cost totals in ``results.json`` equal the sums over the traces;
* every label id in the predictions lies in the task's label space;
* the task exists here with the same version and the same data sha256;
* the run evaluated the task's evaluation split, without ``--limit``, with every sample exactly once;
* as many seeds as the task asks for;
* the metrics, recomputed from the predictions against the task's own gold labels, equal the
  self-reported ones.

A passing bundle earns the trust tier ``recomputed`` (``self-reported`` is what it claimed).
``--reproduce`` re-runs the registered system with the bundle's configuration, with empty LLM-answer
and artifact caches (a replay of the submitter's caches would prove nothing), and compares the
predictions sample by sample: every difference is listed, the metrics shown are those of the
reproduced predictions, and the tier rises to ``reproduced`` only when the share of differing samples
is within ``--tolerance`` (default 0: identical), which is recorded with the verdict.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import json
import math
import tarfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddibench._version import __version__
from ddibench.archive import SMALL_MEMBERS
from ddibench.archive import members as bundle_members
from ddibench.errors import ConfigError, DataError, RunDirError, write_error
from ddibench.evaluation import EvaluationResult, Evaluator
from ddibench.hashing import config_hash, sha256_text
from ddibench.runner.records import (
    BUNDLE_FORMAT,
    BundleIndex,
    BundleSystem,
    Compaction,
    Cost,
    Results,
    RunIdentity,
    read_identity,
    read_results,
)
from ddibench.schema import Prediction, Sample

TIERS = ("self-reported", "recomputed", "reproduced")
CALL_FIELDS = ("role", "model", "prompt_tokens", "completion_tokens", "latency_s", "cached")  # what verify keeps of a traced call
CHUNK = 1 << 20
MAX_LINE = 16 * 2**20  # one prediction line; a longer one is refused without being built in memory
MAX_JSON_DEPTH = 64  # bundle.json, run.json and results.json nest a handful of levels deep
WHOLE_TRACES = 5  # samples whose whole trace a compact bundle keeps, for a reader of the run's page
_ALL_FIELDS = set(Prediction.model_fields)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# -- submit ---------------------------------------------------------------------------------------


def submit(run_dir: Path, out: Path | None = None, compact: bool = False, whole_traces: int = WHOLE_TRACES) -> Path:
    """Pack a finished run into a bundle; returns its path. ``compact`` keeps of each prediction only what
    the task's metrics read (:meth:`ddibench.evaluation.BaseEvaluator.reduce`) and the whole trace of
    only the first ``whole_traces`` samples, after checking that the reduced predictions score exactly
    as the run did (the form of the bundles that ship under ``results/``)."""
    results_file = run_dir / "results.json"
    if not results_file.exists():
        raise RunDirError(f"{run_dir} has no results.json", "finish the run with 'ddibench run' before submitting it")
    ident = read_identity(run_dir / "run.json")
    results = read_results(results_file)  # a damaged results.json is refused here, not by the verifier
    out = out or run_dir.parent / f"{ident.task.name}--{ident.system.name}--{ident.run_id}.tar.gz"
    if out.is_dir():
        raise ConfigError(f"--out {out} is a directory", "give the path of the bundle file, e.g. --out run.tar.gz")
    if not out.parent.is_dir():
        raise ConfigError(f"--out {out}: directory {out.parent} does not exist", "create it first, or give a path in an existing directory")
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
        # plain ustar members (no PAX headers): the bounded reader (ddibench.archive) refuses tar's extensions
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
    lines = [json.dumps(p.model_dump(mode="json", exclude_none=False), ensure_ascii=False, separators=(",", ":")) for p in predictions]
    return ("\n".join(lines) + "\n").encode("utf-8")


def _compact_predictions(run_dir: Path, ident: RunIdentity, results: Results, members: dict[str, bytes], whole_traces: int) -> tuple[bytes, Compaction]:
    """The predictions member of a compact bundle, after checking that its predictions score as the run's did."""
    from ddibench.registry import get_task
    from ddibench.runner.plan import select_samples

    task = get_task(ident.task.name)
    evaluator = task.evaluator().configure(results.manifest.scoring.options)
    samples = select_samples(task, task.load(), ident.split, ident.limit, int(ident.seed))
    whole = {s.id for s in samples[:whole_traces]}
    reduced: dict[str, Prediction] = {}
    for pred in _journal_predictions(run_dir / "journal.jsonl"):
        trace = pred.trace if pred.sample_id in whole else _call_trace(pred.trace)
        reduced[pred.sample_id] = evaluator.reduce(pred).model_copy(update={"trace": trace})
    missing = [s.id for s in samples if s.id not in reduced]
    if missing:
        raise RunDirError(
            f"{run_dir} has no prediction for {len(missing):,} of its samples (first: {missing[0]})", "finish the run with 'ddibench run' before submitting it"
        )
    under_declared = (f"the {evaluator.kind} evaluator reads more of a prediction than its answer fields {list(evaluator.answer_fields)}",
                      "submit without --compact, and report this as a bug in ddibench")  # fmt: skip
    try:
        evaluation = evaluator.evaluate(samples, reduced, results.bootstrap_spec, evaluator.read_extras(members))
    except (ValueError, KeyError, TypeError) as exc:  # EvaluationInputError is a ValueError
        raise DataError(f"--compact would change the metrics of {run_dir} ({_first_line(exc)}): {under_declared[0]}", under_declared[1]) from None
    for name, claimed in results.evaluation.metrics.items():
        mine = evaluation.metrics.get(name)
        if mine is None or not (mine.value == claimed.value or (mine.value != mine.value and claimed.value != claimed.value)):
            got = mine.value if mine else "absent"
            raise DataError(f"--compact would change metric {name} of {run_dir} ({claimed.value} -> {got}): {under_declared[0]}", under_declared[1])
    note = "traces of the other samples keep only their LLM call records (role, model, tokens, latency, cached)"
    compaction = Compaction(answer_fields=list(evaluator.answer_fields), whole_traces=len(whole), note=note)
    return _encode(reduced[s.id] for s in samples), compaction


def _call_trace(trace: dict[str, Any]) -> dict[str, Any]:
    """A trace reduced to what ``verify`` reads of it: the LLM call records, each with :data:`CALL_FIELDS`."""
    calls = trace.get("llm") if isinstance(trace, dict) else None
    if not isinstance(calls, list) or not calls:
        return {}
    return {"llm": [{k: call[k] for k in CALL_FIELDS if k in call} for call in calls if isinstance(call, dict)]}


# -- reading a bundle -----------------------------------------------------------------------------


def read_bundle(path: Path) -> dict[str, bytes]:
    """Every member of the bundle, whole, in memory (for tools and tests; :func:`verify` streams). The
    archive is read by a bounded reader of its own (:mod:`ddibench.archive`), not by tarfile."""
    members = {name: handle.read() for name, handle in bundle_members(path)}
    if "bundle.json" not in members:
        raise DataError(f"{path} has no bundle.json")
    return members


@dataclass
class _Streamed:
    """What one pass over a bundle keeps: small members whole, predictions reduced, every member's hash."""

    members: dict[str, bytes] = field(default_factory=dict)
    hashes: dict[str, str] = field(default_factory=dict)
    predictions: dict[str, Prediction] = field(default_factory=dict)
    traces: dict[str, str] = field(default_factory=dict)
    duplicates: int = 0
    problem: str | None = None  # the first prediction line that could not be read


def _stream(path: Path, keep_traces: bool) -> _Streamed:
    out = _Streamed()
    for name, handle in bundle_members(path):
        digest = hashlib.sha256()
        if name != "predictions.jsonl":
            data = handle.read()
            digest.update(data)
            if name in SMALL_MEMBERS:
                _check_depth(name, data)
            out.members[name] = data
        else:
            for lineno, line in enumerate(_lines(handle, digest), 1):
                if line.strip() and out.problem is None:
                    _take_prediction(out, line, lineno, keep_traces)
        out.hashes[name] = digest.hexdigest()
    if "bundle.json" not in out.members:
        raise DataError(f"{path} has no bundle.json", "submit the run again with 'ddibench submit'")
    return out


def _check_depth(name: str, data: bytes) -> None:
    """Refuse a JSON member nested deeper than :data:`MAX_JSON_DEPTH` (a member that is not JSON at all
    is left to its record check, which names what is wrong)."""
    too_deep = DataError(f"bundle member '{name}' nests deeper than {MAX_JSON_DEPTH} levels", "submit the run again with 'ddibench submit'")
    try:
        value = json.loads(data)
    except RecursionError:
        raise too_deep from None
    except ValueError:
        return
    level: list[tuple[Any, int]] = [(value, 1)]
    while level:
        item, depth = level.pop()
        if depth > MAX_JSON_DEPTH:
            raise too_deep
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        level.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))


def _lines(handle: Any, digest: Any) -> Iterator[bytes]:
    """The lines of the predictions member; a line longer than :data:`MAX_LINE` is refused as soon as the
    part read of it is that long (it is never built whole)."""
    rest = b""
    lineno = 0
    while chunk := handle.read(CHUNK):
        digest.update(chunk)
        parts = (rest + chunk).split(b"\n")
        rest = parts.pop()
        for part in parts:
            lineno += 1
            if len(part) > MAX_LINE:
                raise _line_too_long(lineno)
            yield part
        if len(rest) > MAX_LINE:
            raise _line_too_long(lineno + 1)
    if rest:
        yield rest


def _line_too_long(lineno: int) -> DataError:
    return DataError(f"predictions.jsonl line {lineno:,} is longer than {MAX_LINE // 2**20} MiB", "submit the run again with 'ddibench submit'")


def _take_prediction(out: _Streamed, line: bytes, lineno: int, keep_traces: bool) -> None:
    try:
        record = json.loads(line)
        if not isinstance(record, dict):
            raise ValueError("not a JSON object")
        trace = record.get("trace")
        prediction = Prediction.model_validate({**record, "trace": {"llm": _calls(trace)} if trace else {}})
        whole_trace = json.dumps(trace or {}, ensure_ascii=False) if keep_traces else None
    except RecursionError:
        out.problem = f"line {lineno} is not a valid prediction record (nested too deeply)"
        return
    except (ValueError, TypeError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        out.problem = f"line {lineno} is not a valid prediction record ({first[:200]})"
        return
    # every field of a bundle's prediction counts as set: one shared set instead of one per prediction
    # (pydantic keeps a set of set field names on every instance, half the memory of a small prediction)
    object.__setattr__(prediction, "__pydantic_fields_set__", _ALL_FIELDS)
    if prediction.sample_id in out.predictions:
        out.duplicates += 1
    out.predictions[prediction.sample_id] = prediction
    if whole_trace is not None:
        out.traces[prediction.sample_id] = whole_trace


def _calls(trace: Any) -> list[dict[str, Any]]:
    """The LLM calls of a trace, reduced to what the identity and cost checks read."""
    if not isinstance(trace, dict):
        raise ValueError("trace is not an object")
    calls = trace.get("llm", [])
    if not isinstance(calls, list) or not all(isinstance(c, dict) for c in calls):
        raise ValueError("trace.llm is not a list of call records")
    out = []
    for call in calls:
        kept = {k: call[k] for k in CALL_FIELDS if k in call}
        if not isinstance(kept.get("role", ""), str) or not isinstance(kept.get("model", ""), (str, type(None))):
            raise ValueError("trace.llm role or model is not a name")
        for key in ("prompt_tokens", "completion_tokens"):
            value = kept.get(key, 0)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"trace.llm {key} {value!r} is not a token count")
        latency = kept.get("latency_s", 0.0)
        if isinstance(latency, bool) or not isinstance(latency, (int, float)) or not math.isfinite(latency) or latency < 0:
            raise ValueError(f"trace.llm latency_s {latency!r} is not a duration")
        out.append(kept)
    return out


# -- the verdict ----------------------------------------------------------------------------------


@dataclass
class Verdict:
    accepted: bool
    tier: str
    reasons: list[str] = field(default_factory=list)
    checks: list[tuple[str, bool, str]] = field(default_factory=list)
    recomputed: EvaluationResult | None = None
    bundle: BundleIndex | None = None
    run: RunIdentity | None = None
    results: Results | None = None
    predictions: dict[str, Prediction] = field(default_factory=dict)  # answers and traced calls (not whole traces)
    traces: dict[str, str] = field(default_factory=dict)  # sample id -> the whole trace as JSON (verify(keep_traces=True))
    evaluator: Evaluator | None = None
    samples: list[Sample] = field(default_factory=list)
    extras: dict[str, Any] = field(default_factory=dict)
    cost: Cost | None = None  # LLM calls and tokens recomputed from the traces
    reproduction: dict[str, Any] | None = None

    def blocking(self) -> list[str]:
        """The reasons other than --limit: a --limit run whose only reason is that one is a preview, its
        metrics recomputed like any other's, shown on the board but never ranked best."""
        return [r for r in self.reasons if not r.startswith("no --limit")]

    def is_preview(self) -> bool:
        return not self.accepted and bool(self.reasons) and not self.blocking()

    def check(self, name: str, ok: bool, detail: str) -> bool:
        self.checks.append((name, ok, detail))
        if not ok:
            self.reasons.append(f"{name}: {detail}")
        return ok

    @property
    def evaluation(self) -> EvaluationResult:
        """The metrics the board shows: recomputed here when they could be, else the claimed ones."""
        if self.recomputed is not None:
            return self.recomputed
        assert self.results is not None
        return self.results.evaluation


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
            verdict.check(name, False, f"is not a valid {model.__name__} ({'.'.join(str(p) for p in err['loc']) or 'top level'}: {err['msg']})")
        else:
            verdict.check(name, False, "is not JSON")
    return None


def verify(path: Path, tolerance: float = 1e-9, keep_traces: bool = False) -> Verdict:
    """Check a bundle (see the module docstring). Structural problems of the archive (a member outside
    the format, a link, not a .tar.gz) raise :class:`DataError`; everything else is a failed check with
    its reason. ``keep_traces`` keeps every sample's whole trace (for the results store)."""
    from ddibench.errors import DdibenchError
    from ddibench.registry import get_task

    streamed = _stream(path, keep_traces)
    members = streamed.members
    verdict = Verdict(False, "self-reported")
    bundle = _parse(verdict, BundleIndex, members["bundle.json"], "bundle.json")
    if bundle is None:
        return verdict
    verdict.bundle = bundle
    for name, digest in streamed.hashes.items():
        if name != "bundle.json":
            same = bundle.hashes.get(name) == digest
            verdict.check(f"hash of {name}", same, "matches bundle.json" if same else "differs from bundle.json: the file was changed")
    missing = sorted(set(bundle.hashes) - set(streamed.hashes))
    verdict.check("members present", not missing, f"missing {', '.join(missing)}" if missing else "all listed members present")
    for required in ("run.json", "results.json", "predictions.jsonl"):
        if required not in streamed.hashes:
            verdict.check(required, False, "not in the bundle")
            return verdict
    run = _parse(verdict, RunIdentity, members["run.json"], "run.json")
    results = _parse(verdict, Results, members["results.json"], "results.json")
    if run is None or results is None:
        return verdict
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
    verdict.check("adapter", True, describe_provenance(results.manifest.system.provenance))
    if bundle.compact is not None:
        verdict.check("compact", True, f"predictions hold {', '.join(bundle.compact.answer_fields)}; {bundle.compact.whole_traces} whole traces")
    try:
        task = get_task(run.task.name)
    except DdibenchError as exc:
        verdict.check("task", False, str(exc))
        return verdict
    verdict.check("task version", run.task.version == task.version, f"bundle {run.task.version}, this ddibench {task.version}")
    verdict.check("data sha256", run.task.data_sha256 == task.data_sha256, f"bundle {run.task.data_sha256[:12]}…, pinned data {task.data_sha256[:12]}…")
    verdict.check("no --limit", run.limit is None, "the full evaluation split" if run.limit is None else f"--limit {run.limit} was used")
    verdict.check("evaluation split", run.split == task.eval_split, f"{run.split} (expected {task.eval_split})")
    smoke = results.manifest.profile.declared.get("rankable") is False
    verdict.check("profile", not smoke, f"{results.manifest.profile.name}" + (": a smoke budget, never ranked" if smoke else ""))
    evaluator: Evaluator | None = None
    try:
        evaluator = task.evaluator().configure(results.manifest.scoring.options)
    except DdibenchError as exc:
        verdict.check("scoring options", False, f"{exc} (score again with 'ddibench rescore RUN_DIR' and the defaults)")
    if evaluator is not None:
        local = evaluator.non_portable()
        verdict.check("scoring options", not local,
                      "the task's default scorers" if not local and not evaluator.settings() else
                      (f"{', '.join(f'{k}={v}' for k, v in evaluator.settings().items())}" if not local else
                       f"scored with {', '.join(local)} set to something only the submitter's machine has; the board compares runs scored "
                       "with the task's default scorers (score again with 'ddibench rescore RUN_DIR --scorer-encoder minilm')"))  # fmt: skip
    if evaluator is not None:
        claimed_version = int((results.manifest.scoring.evaluator or {}).get("version", 1))
        verdict.check("scorer version", claimed_version == evaluator.version,
                      f"v{evaluator.version}" if claimed_version == evaluator.version else
                      f"scored by {evaluator.kind} scorers v{claimed_version}; this ddibench scores with v{evaluator.version} "
                      "(score the run again with 'ddibench rescore RUN_DIR' and submit it again)")  # fmt: skip
    verdict.evaluator = evaluator
    seeds = 1
    verdict.check("seeds", seeds >= task.required_seeds, f"{seeds} run(s), the task asks for {task.required_seeds}")
    if streamed.problem is not None:
        verdict.check("predictions", False, f"predictions.jsonl {streamed.problem}")
        return verdict
    predictions = streamed.predictions
    verdict.predictions, verdict.traces = predictions, streamed.traces
    _check_labels(verdict, task.label_space, predictions)
    _check_models(verdict, run, results, predictions)
    if verdict.blocking() or evaluator is None:
        return verdict
    from ddibench.runner.plan import select_samples

    # the samples the run was asked about (a task may predict several splits); a preview's metrics are
    # still recomputed, on the subset --limit draws
    samples = select_samples(task, task.load(), task.eval_split, run.limit, int(run.seed))
    verdict.samples = samples
    wanted = {s.id for s in samples}
    absent = len(wanted - set(predictions))
    extra = len(set(predictions) - wanted)
    verdict.check("every sample once", not absent and not extra and not streamed.duplicates,
                  f"{absent} missing, {extra} unknown, {streamed.duplicates} repeated of {len(wanted):,}")  # fmt: skip
    verdict.check("sample ids", run.sample_ids_sha256 == sha256_text("\n".join(s.id for s in samples)),
                  "the run's samples are the task's evaluation split (and the splits it predicts)" if run.limit is None
                  else f"the run's samples are the {len(samples):,} that --limit {run.limit} draws from the evaluation split")  # fmt: skip
    if verdict.blocking():
        return verdict
    _check_cost(verdict, results, [predictions[s.id] for s in samples])
    try:
        verdict.extras = evaluator.read_extras(members)
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        verdict.check("scores", False, f"the bundle's scores/ files cannot be read ({type(exc).__name__}: {_first_line(exc)})")
        return verdict
    evaluation = _recompute(verdict, samples, predictions)
    if evaluation is None:
        return verdict
    verdict.recomputed = evaluation
    claimed = results.evaluation.metrics
    allowed = max(tolerance, evaluator.recompute_tolerance)
    for name, metric in evaluation.metrics.items():
        mine, theirs = metric.value, (claimed[name].value if name in claimed else None)
        same = theirs is not None and (mine == theirs or abs(mine - theirs) <= allowed or (mine != mine and theirs != theirs))
        verdict.check(f"metric {name}", same, f"recomputed {mine:.6f}, claimed {theirs if theirs is None else f'{theirs:.6f}'}")
    verdict.accepted = not verdict.reasons
    verdict.tier = "self-reported" if verdict.blocking() else "recomputed"
    return verdict


def _first_line(exc: BaseException) -> str:
    text = str(exc)
    return text.splitlines()[0] if text else type(exc).__name__


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
        verdict.check("recomputation", False, f"the metrics cannot be recomputed from the bundle ({type(exc).__name__}: {_first_line(exc)})")
    return None


# -- the checks -----------------------------------------------------------------------------------


def _check_agreement(verdict: Verdict, bundle: BundleIndex, run: RunIdentity, results: Results) -> None:
    """bundle.json, run.json and results.json name the same task, system, models, split and samples."""
    man = results.manifest
    problems = []
    if results.task != run.task.name or (man.task.name, man.task.version, man.task.data_sha256) != (run.task.name, run.task.version, run.task.data_sha256):
        problems.append(f"results.json names task {man.task.name} {man.task.version}, run.json {run.task.name} {run.task.version}")
    if bundle.task != run.task:
        problems.append(f"bundle.json names task {bundle.task.name} {bundle.task.version}, run.json {run.task.name} {run.task.version}")
    mine = (run.system.name, run.system.version, run.system.config_hash)
    if results.system != run.system.name or (man.system.name, man.system.version, man.system.config_hash) != mine or man.system.config != run.system.config:
        problems.append(f"results.json names system {man.system.name} {man.system.version} (config {man.system.config_hash}), "
                        f"run.json {run.system.name} {run.system.version} (config {run.system.config_hash})")  # fmt: skip
    if (bundle.system.name, bundle.system.version, bundle.system.config_hash) != mine:
        problems.append(f"bundle.json names system {bundle.system.name} {bundle.system.version}, run.json {run.system.name} {run.system.version}")
    claimed_models = {role: entry.identity for role, entry in man.models.items()}
    if claimed_models != run.models:
        problems.append(f"results.json names models {_models(claimed_models)}, run.json {_models(run.models)}")
    for role, entry in man.models.items():
        if not _spec_matches(entry.spec, entry.identity):
            problems.append(f"results.json's {role} model '{entry.spec}' is not the model its identity names ({_models({role: entry.identity})})")
    settings = (man.split, man.limit, man.n_samples, man.sample_ids_sha256, man.seeds.run)
    if settings != (run.split, run.limit, run.n_samples, run.sample_ids_sha256, run.seed):
        problems.append("results.json and run.json differ in split, --limit, seed or samples")
    verdict.check("identity", not problems,
                  "bundle.json, run.json and results.json name the same task, system, models and samples" if not problems
                  else "; ".join(problems[:3]) + ": the bundle was edited")  # fmt: skip


def _models(models: dict[str, dict[str, Any]]) -> str:
    return ", ".join(f"{role}={ident.get('provider')}:{ident.get('model')}" for role, ident in sorted(models.items())) or "none"


def _spec_matches(spec_text: str, identity: dict[str, Any]) -> bool:
    from ddibench.llm import ModelSpec

    if str(identity.get("provider", "")).startswith("lm-eval:"):  # imported answers: the spec is the text the importer wrote
        return spec_text == f"{identity.get('provider')}:{identity.get('model')}"
    try:
        spec = ModelSpec.parse(spec_text) if not spec_text.startswith("embedded:") else None
    except Exception:  # noqa: BLE001 - a spec this ddibench cannot parse does not name the identity
        return False
    if spec is None:  # embedded: the weights live on the submitter's machine; the identity carries their hash
        return identity.get("provider") == "embedded" and spec_text == f"embedded:{identity.get('model')}"
    return (spec.provider, spec.model, (spec.base_url or "").rstrip("/")) == (identity.get("provider"), identity.get("model"), identity.get("base_url"))


def describe_provenance(provenance: dict[str, Any]) -> str:
    """Where a bundle's adapter code comes from, in one line (what ``verify`` shows)."""
    if not provenance:
        return "the bundle does not say where the adapter's code comes from (made before ddibench recorded it)"
    what = " ".join(str(provenance[k]) for k in ("distribution", "version") if provenance.get(k)) or "an unnamed distribution"
    where = str(provenance.get("source") or "an unknown source")
    if provenance.get("commit"):
        where += f" at commit {str(provenance['commit'])[:12]}" + (" with uncommitted changes" if provenance.get("dirty") else "")
    files = f"; its files hash to {str(provenance['files_sha256'])[:12]}…" if provenance.get("files_sha256") else ""
    return f"{provenance.get('entry_point', '?')} from {what}, {where}{files}"


def install_hint(provenance: dict[str, Any]) -> str:
    """How to get an adapter that is not installed here, from what its bundle records."""
    name, version, source = provenance.get("distribution"), provenance.get("version"), str(provenance.get("source") or "")
    commit = provenance.get("commit")
    if source.startswith(("git+", "https://", "http://", "git@")) and commit:
        url = source if source.startswith("git+") else f"git+{source}"
        return f"install its adapter: pip install '{url}@{commit}' ({name} {version})"
    if provenance.get("index") and name:
        return f"install its adapter: pip install '{name}=={version}' (source: {source})"
    if name:
        return f"install its adapter, {name} {version}, from {source or 'its author'}" + (f" at commit {commit}" if commit else "")
    return "install the package that registers it (the bundle does not say which: ask its submitter)"


def _check_system(verdict: Verdict, run: RunIdentity) -> None:
    """The configuration hash is the hash of the system's identity; a system registered here is the
    registered version, with a configuration it accepts and the LLM roles it declares."""
    from ddibench.errors import UnknownNameError
    from ddibench.registry import get_system_class
    from ddibench.system import BaseSystem

    system = run.system
    expected = config_hash({"system": system.name, "version": system.version, "config": system.config})
    if expected != system.config_hash:
        verdict.check("system", False, f"config hash {system.config_hash} is not the hash of {system.name} {system.version} and its configuration: "
                                       "the system identity was edited")  # fmt: skip
        return
    try:
        cls = get_system_class(system.name)
    except UnknownNameError:
        verdict.check("system", True, f"{system.name} {system.version} is not registered here: its identity is checked by hash only")
        return
    if cls.version != system.version:
        verdict.check("system", False, f"{system.name} {system.version} is not the version registered here ({cls.version}); "
                                       "verify it with the ddibench that has that version")  # fmt: skip
        return
    if isinstance(cls, type) and issubclass(cls, BaseSystem):
        try:
            accepted = cls.Config.model_validate(system.config).model_dump(mode="json") == system.config
        except Exception:  # noqa: BLE001 - any validation failure means: not this system's configuration
            accepted = False
        if not accepted:
            verdict.check("system", False, f"the configuration is not one {system.name} {system.version} accepts: the bundle names another system")
            return
    roles = set(getattr(cls, "llm_roles", ()))
    if roles != set(run.models):
        verdict.check("system", False, f"{system.name} uses LLM roles {sorted(roles) or 'none'}, the run names {sorted(run.models) or 'none'}")
        return
    verdict.check("system", True, f"{system.name} {system.version} as registered here, with a configuration it accepts")


def _check_models(verdict: Verdict, run: RunIdentity, results: Results, predictions: dict[str, Prediction]) -> None:
    """Every traced LLM call was made for a declared role and answered by the model the run names."""
    from ddibench.llm import identity_digest

    digests = {role: identity_digest(identity) for role, identity in run.models.items()}
    calls = foreign = unrecorded = other = 0
    first: str | None = None
    for pred in predictions.values():
        for call in pred.trace.get("llm", []):
            calls += 1
            role, model = call.get("role", "generator"), call.get("model")
            bad = role not in digests or model is None or model != digests.get(role)
            foreign += role not in digests
            unrecorded += role in digests and model is None
            other += role in digests and model is not None and model != digests[role]
            if bad and first is None:
                first = pred.sample_id
    no_tokens = sum(1 for p in predictions.values() for c in p.trace.get("llm", []) if not c.get("prompt_tokens"))
    if foreign:
        detail = f"{foreign} of {calls} traced LLM calls are for roles the run does not declare (first: {first})"
    elif unrecorded:
        detail = f"{unrecorded} of {calls} traced LLM calls do not record which model answered (first: {first}); re-run with this ddibench"
    elif other:
        detail = f"{other} of {calls} traced LLM calls were answered by another model than the manifest names (first: {first})"
    elif no_tokens:
        detail = f"{no_tokens} of {calls} traced LLM calls report no prompt tokens, so their cost cannot be checked"
    else:
        detail = f"all {calls:,} traced LLM calls answered by the models the manifest names" if calls else "no LLM calls"
    verdict.check("models", not (foreign or unrecorded or other or no_tokens), detail)


def _check_cost(verdict: Verdict, results: Results, ordered: list[Prediction]) -> None:
    """The per-role calls, tokens and latency in results.json equal the sums over the traces."""
    from ddibench.runner.scoring import cost_from_predictions

    cost = cost_from_predictions(ordered)
    verdict.cost = cost
    claimed = results.cost
    problems = []
    for role in sorted(set(cost.by_role) | set(claimed.by_role)):
        mine, theirs = cost.by_role.get(role), claimed.by_role.get(role)
        if mine is None or theirs is None:
            problems.append(f"{role}: {'no' if mine is None else mine.calls} traced calls, {'none' if theirs is None else theirs.calls} claimed")
            continue
        for key in ("calls", "prompt_tokens", "completion_tokens", "served_from_cache"):
            if getattr(mine, key) != getattr(theirs, key):
                problems.append(f"{role} {key}: {getattr(mine, key):,} in the traces, {getattr(theirs, key):,} claimed")
        if not math.isclose(mine.latency_s, theirs.latency_s, rel_tol=1e-6, abs_tol=1e-6):
            problems.append(f"{role} latency: {mine.latency_s:.3f} s in the traces, {theirs.latency_s:.3f} s claimed")
    per_item = {role: v.dump() for role, v in cost.per_item.items()} == {role: v.dump() for role, v in claimed.per_item.items()}
    if not problems and not per_item:
        problems.append("the per-item cost differs from the traces")
    verdict.check("cost", not problems, "calls and tokens per role equal the sums over the traces" if not problems else "; ".join(problems[:3]))


def _check_labels(verdict: Verdict, labels: Any, predictions: dict[str, Prediction]) -> None:
    """Every label id a prediction names (its label, ranked labels, score keys) is in the label space."""
    n = len(labels) if labels is not None else 0
    outside = []
    for pred in predictions.values():
        ids: list[Any] = []
        if pred.label is not None:
            ids.append(pred.label)
        ids.extend(pred.ranked or [])
        for key in pred.scores or {}:
            ids.append(int(key) if key.isdigit() else key)
        if any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n for i in ids):
            outside.append(pred.sample_id)
    verdict.check("label space", not outside,
                  f"every label id is one of the task's {n} labels" if not outside
                  else f"{len(outside)} predictions name label ids outside the task's {n} labels (first: {outside[0]})")  # fmt: skip


# -- reproduction ---------------------------------------------------------------------------------


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
    return a.scores.keys() == b.scores.keys() and all(math.isclose(v, b.scores[k], rel_tol=0.0, abs_tol=SCORE_TOLERANCE) for k, v in a.scores.items())


def reproduce(verdict: Verdict, workdir: Path, models: dict[str, Any] | None = None, tolerance: float = 0.0) -> Verdict:
    """Re-run the bundle's system (registered here) with its configuration and compare the predictions
    sample by sample. ``tolerance`` is the share of samples that may differ (0: none); the metrics kept
    are those of the reproduced predictions. The re-run uses no cached LLM answer and trains every
    artifact again (into ``WORKDIR.artifacts``), so a reproduction on the submitter's machine is not a
    replay of its own caches; the verdict records it."""
    from ddibench.llm import ModelSpec, parse_model_options
    from ddibench.runner.execute import execute
    from ddibench.runner.journal import Journal
    from ddibench.runner.plan import RunRequest

    if not 0 <= tolerance < 1:
        raise ConfigError(f"--tolerance {tolerance} is not a share of samples", "give a number from 0 (identical) up to, say, 0.01")
    if not verdict.accepted or verdict.run is None or verdict.results is None:
        return verdict
    run = verdict.run
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
            f"system '{run.system.name}' is not installed here, so it cannot be re-run", install_hint(verdict.results.manifest.system.provenance)
        ) from None
    used = {role: m.spec for role, m in verdict.results.manifest.models.items()}
    specs = parse_model_options([used["generator"]] if "generator" in used else [])
    specs = specs.with_roles({role: ModelSpec.parse(spec) for role, spec in used.items()})
    specs = specs.with_roles(dict(models or {}))
    # fresh caches: the submitter's cached model answers and trained artifacts would make a re-run on
    # their own machine a replay; a reproduction asks every model and trains everything again
    artifacts = workdir.with_name(workdir.name + ".artifacts")
    if artifacts.exists() and any(artifacts.iterdir()):
        raise ConfigError(f"{artifacts} is not empty", "reproduce into a new directory")
    request = RunRequest(
        task=run.task.name, system=run.system.name, models=specs, seed=run.seed, split=run.split,
        config=run.system.config, run_dir=workdir, score_with_models=False, use_cache=False, artifacts_root=artifacts,
    )  # fmt: skip
    outcome = execute(request)
    again = Journal(outcome.run_dir / "journal.jsonl").load(repair=False)
    theirs = verdict.predictions
    order = [s.id for s in verdict.samples] or sorted(theirs)
    compact = verdict.bundle is not None and verdict.bundle.compact is not None and verdict.evaluator is not None
    reduce = verdict.evaluator.reduce if compact and verdict.evaluator is not None else (lambda p: p)
    # a compact bundle holds what the metrics read: the re-run's answers are compared reduced the same way
    differing = [sid for sid in order if not same_answer(theirs.get(sid), reduce(again[sid]) if sid in again else None)]
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
        verdict.predictions = {sid: again[sid] for sid in order if sid in again}
        verdict.traces = {sid: json.dumps(p.trace, ensure_ascii=False) for sid, p in verdict.predictions.items()} if verdict.traces else {}
    else:
        verdict.accepted = False
    return verdict


def verify_all(paths: Iterable[Path], keep_traces: bool = False) -> Iterator[tuple[Path, Verdict | None, str | None]]:
    """Verify bundles one by one, each in a child process with CPU and memory limits
    (:mod:`ddibench.sandbox`): (path, verdict, None), or (path, None, why) when a bundle could not be
    verified at all; one bundle never stops the others."""
    from ddibench.errors import DdibenchError
    from ddibench.sandbox import verify_isolated

    for path in paths:
        try:
            yield path, verify_isolated(path, keep_traces=keep_traces), None
        except DdibenchError as exc:
            yield path, None, str(exc)
        except Exception as exc:  # noqa: BLE001 - a hostile bundle that finds a bug must not stop the batch
            yield path, None, f"could not be verified ({type(exc).__name__}: {_first_line(exc)}); this is a bug in ddibench, please report it"
