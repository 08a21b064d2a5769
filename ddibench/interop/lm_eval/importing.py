"""``ddibench import lm-eval``: lm-eval's logged samples of an exported task (and the ``results_*.json`` beside
them) into a ddibench run directory, with a manifest that names lm-eval's version, model and model arguments."""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ddibench.errors import DataError
from ddibench.interop.lm_eval.export import kind_of
from ddibench.interop.lm_eval.glue import parse_answer, task_named
from ddibench.schema import Prediction, Sample
from ddibench.task import Task

if TYPE_CHECKING:
    from ddibench.evaluation import EvaluationResult, Evaluator
    from ddibench.runner.records import Results, RunIdentity, SessionRecord

SECRET_KEYS = re.compile(r"key|token|secret|password", re.IGNORECASE)


def _results_file(samples: Path) -> Path | None:
    """lm-eval writes ``samples_<task>_<timestamp>.jsonl`` beside ``results_<timestamp>.json``."""
    match = re.match(r"samples_.+_(\d{4}-\d\d-\d\dT[\d.-]+)\.jsonl$", samples.name)
    if match:
        candidate = samples.parent / f"results_{match.group(1)}.json"
        if candidate.exists():
            return candidate
    return None


def _redacted(args: Mapping[str, Any]) -> dict[str, Any]:
    return {k: ("<redacted>" if SECRET_KEYS.search(k) else v) for k, v in args.items()}


SAMPLES_FIX = "give the samples_<task>_<date>.jsonl file lm-eval wrote with --log_samples"


def _text_of(path: Path, what: str, fix: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise DataError(f"{path} is not UTF-8 text, so not {what}", fix) from None
    except OSError as exc:
        raise DataError(f"cannot read {path}: {exc.strerror or exc}", fix) from None


def _samples_file(path: Path) -> Path:
    """The samples file given, or the one samples file of lm-eval's output folder given instead."""
    if path.is_dir():
        found = sorted(p for p in path.rglob("samples_*.jsonl") if p.is_file())
        if len(found) == 1:
            return found[0]
        if not found:
            raise DataError(f"{path} is a folder that holds no samples_*.jsonl file", SAMPLES_FIX)
        raise DataError(
            f"{path} is a folder that holds {len(found)} samples files (e.g. {found[0].name})", "give the one to import"
        )
    if not path.is_file():
        raise DataError(f"{path} does not exist", SAMPLES_FIX)
    return path


def _response(record: Mapping[str, Any]) -> str | None:
    """The answer of one logged sample (the filtered one, else the raw one); None when it has no such shape."""
    filtered, raw = record.get("filtered_resps"), record.get("resps")
    if filtered:
        return str(filtered[0]) if isinstance(filtered, list) else None
    if raw:
        return str(raw[0][0]) if isinstance(raw, list) and isinstance(raw[0], list) and raw[0] else None
    return ""


def _generation(record: Mapping[str, Any]) -> Any:
    """The generation arguments of a logged sample's first request ({} when it logged none)."""
    arguments = record.get("arguments") or {}
    if not isinstance(arguments, dict):
        return None
    first: Any = next(iter(arguments.values()), {})
    return first.get("arg_1", {}) if isinstance(first, dict) else None


def _read_samples(path: Path) -> list[dict[str, Any]]:
    """lm-eval's logged samples of an exported task, each checked for the fields the import reads."""
    records = []
    text = _text_of(path, "an lm-eval samples file", SAMPLES_FIX)
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        doc = record.get("doc") if isinstance(record, dict) else None
        ok = (
            isinstance(doc, dict)
            and isinstance(doc.get("ddibench_task"), str)
            and isinstance(doc.get("id"), (str, int))
        )
        if not ok or _response(record) is None or _generation(record) is None:
            raise DataError(
                f"{path}:{lineno} is not an lm-eval sample of a ddibench task",
                "import the samples of a task written by 'ddibench export lm-eval'",
            )
        records.append(record)
    if not records:
        raise DataError(f"{path} holds no samples", "run lm-eval with --log_samples")
    return records


@dataclass
class _Meta:
    """What the import takes from lm-eval's ``results_<date>.json`` (all of it optional)."""

    model: str = "unknown"
    model_args: dict[str, Any] = field(default_factory=dict)
    model_name: str | None = None
    lm_version: str = "unknown"
    chat_template: bool = False
    started: str | None = None
    wall_s: float = 0.0
    env_info: str = ""


def _read_meta(path: Path) -> _Meta:
    fix = "move it away (the samples then import without lm-eval's run details), or put lm-eval's own file back"
    try:
        meta = json.loads(_text_of(path, "lm-eval's results file", fix))
    except ValueError:
        raise DataError(f"{path} is not valid JSON, so not lm-eval's results file", fix) from None

    def wrong(key: str, value: Any, expected: str) -> DataError:
        return DataError(
            f"{path} is not lm-eval's results file: '{key}' is {json.dumps(value)[:60]}, not {expected}", fix
        )

    if not isinstance(meta, dict):
        raise DataError(
            f"{path} is not lm-eval's results file: it holds a JSON {type(meta).__name__}, not an object", fix
        )
    config = meta.get("config") or {}
    if not isinstance(config, dict):
        raise wrong("config", config, "an object")
    model_args = config.get("model_args") or {}
    if isinstance(model_args, str):
        model_args = dict(part.split("=", 1) for part in model_args.split(",") if "=" in part)
    if not isinstance(model_args, dict):
        raise wrong("config.model_args", model_args, "an object or a 'key=value,...' string")

    def number(key: str) -> float | None:
        value = meta.get(key)
        if value is None or value == "":
            return None
        try:
            out = float(value) if not isinstance(value, bool) else math.nan
        except (TypeError, ValueError):
            out = math.nan
        if not math.isfinite(out) or out < 0:
            raise wrong(key, value, "a number of seconds")
        return out

    date = number("date")
    try:
        started = dt.datetime.fromtimestamp(date, dt.timezone.utc).isoformat() if date else None
    except (OverflowError, OSError, ValueError):
        raise wrong("date", date, "a time (seconds since 1970)") from None
    return _Meta(
        model=str(config.get("model") or "unknown"),
        model_args=model_args,
        model_name=str(meta["model_name"]) if meta.get("model_name") else None,
        lm_version=str(meta.get("lm_eval_version") or "unknown"),
        chat_template=bool(meta.get("chat_template")),
        started=started,
        wall_s=number("total_evaluation_time_seconds") or 0.0,
        env_info=str(meta.get("pretty_env_info") or ""),
    )


def import_samples(samples_path: Path, runs_root: Path = Path("runs"), run_dir: Path | None = None) -> Path:
    """Write a ddibench run directory from lm-eval's logged samples of an exported task; returns it."""
    from ddibench.evaluation import EvaluationInputError
    from ddibench.metrics.bootstrap import BootstrapSpec
    from ddibench.runner.plan import run_identity_from
    from ddibench.runner.rundir import RunLock, append_session, claim, write_json_atomic

    samples_path = _samples_file(samples_path)
    answers = _read_answers(samples_path)
    task, samples, limit = answers.task, answers.samples, answers.limit
    results_file = _results_file(samples_path)
    meta = _read_meta(results_file) if results_file else _Meta()
    system_config = _system_config(meta, answers.records[0])
    model_identity = _model_identity(meta)
    identity = run_identity_from(
        task,
        "lm-eval",
        meta.lm_version,
        system_config,
        {"generator": model_identity},
        task.eval_split,
        answers.seed,
        None if limit is None else int(limit),
        [s.id for s in samples],
    )
    target = run_dir or runs_root / task.name / "lm-eval" / identity.run_id
    evaluator = task.evaluator()
    try:
        evaluation = evaluator.evaluate(samples, answers.predictions, BootstrapSpec())
    except EvaluationInputError as exc:
        raise DataError(f"cannot score the imported answers: {exc}") from None
    target.mkdir(parents=True, exist_ok=True)
    with RunLock(target):
        claim(target, identity)
        _rewrite_journal(target / "journal.jsonl", (answers.predictions[s.id] for s in samples))
        session = _import_session(meta, samples_path, results_file, len(samples))
        if not (target / "sessions.jsonl").exists():
            append_session(target, session)
        results = _imported_results(
            answers, evaluator, evaluation, identity, meta, system_config, model_identity, session
        )
        write_json_atomic(target / "results.json", results.dump())
    return target


@dataclass
class _Answers:
    """lm-eval's answers to the documents of one exported task, checked against the task as this ddibench has it."""

    task: Task
    records: list[dict[str, Any]]  # lm-eval's logged samples, as read
    samples: list[Sample]  # the exported documents' samples, in the export's order
    predictions: dict[str, Prediction]  # by sample id, lm-eval's response in each trace
    limit: Any  # the export's --limit (None: the whole split) and seed, as its documents record them
    seed: Any


def _read_answers(samples_path: Path) -> _Answers:
    """The answers in a samples file of one exported task; returns them once they are of this ddibench's version of
    the task and data, with a valid --limit and seed, and answer every exported document."""
    records = _read_samples(samples_path)
    task = _exported_task(samples_path, records)
    first = records[0]["doc"]
    limit, seed = first.get("ddibench_limit"), first.get("ddibench_seed", 0)
    for key, value, least in (("ddibench_limit", limit, 1), ("ddibench_seed", seed, 0)):
        if value is not None and not (isinstance(value, int) and not isinstance(value, bool) and value >= least):
            raise DataError(
                f"{samples_path}: the documents' {key} is {json.dumps(value)}, not a whole number of {least} or more",
                "import the samples of a task written by 'ddibench export lm-eval', unedited",
            )
    samples = _exported_samples(samples_path, task, limit, seed)
    return _Answers(task, records, samples, _predictions(samples_path, records, samples), limit, seed)


def _exported_task(samples_path: Path, records: list[dict[str, Any]]) -> Task:
    """The one task the logged samples answer; DataError when they mix tasks or were exported from another version
    of it or of its data."""
    names = {r["doc"]["ddibench_task"] for r in records}
    if len(names) != 1:
        raise DataError(
            f"{samples_path} mixes tasks ({', '.join(sorted(names))})", "import one task's samples file at a time"
        )
    first = records[0]["doc"]
    task = task_named(first["ddibench_task"])
    if first.get("ddibench_data_sha256") != task.data_sha256 or first.get("ddibench_version") != task.version:
        raise DataError(
            f"{samples_path} was exported from {task.name} {first.get('ddibench_version')} with other data than this ddibench's",
            "export the task again with this ddibench and rerun lm-eval",
        )
    return task


def _exported_samples(samples_path: Path, task: Task, limit: Any, seed: Any) -> list[Sample]:
    """The samples the export chose: the evaluation split, or its stratified subset of ``limit`` samples."""
    from ddibench.runner.selection import stratified_subset

    samples = list(task.load().split(task.eval_split))
    if limit is not None:
        if limit > len(samples):
            raise DataError(
                f"{samples_path}: the documents' ddibench_limit {limit:,} is more than the {len(samples):,} samples of {task.name}",
                "export the task again with 'ddibench export lm-eval' and rerun lm-eval",
            )
        samples = stratified_subset(samples, limit, seed)
    return samples


def _predictions(samples_path: Path, records: list[dict[str, Any]], samples: list[Sample]) -> dict[str, Prediction]:
    """Each sample's prediction, parsed from lm-eval's response with lm-eval's record in its trace; DataError unless
    the records answer exactly the exported samples."""
    by_id = {str(r["doc"]["id"]): r for r in records}
    missing = [s.id for s in samples if s.id not in by_id]
    if missing or len(by_id) != len(samples):
        raise DataError(
            f"{samples_path} answers {len(by_id):,} of the {len(samples):,} exported documents",
            "run lm-eval on every exported document (no lm-eval --limit; export with 'ddibench export lm-eval --limit N' for a preview)",
        )
    predictions = {}
    for s in samples:
        r = by_id[s.id]
        text = _response(r) or ""  # never None: _read_samples refused those
        pred = parse_answer(r["doc"], text)
        trace = {
            **pred.trace,
            "lm_eval": {"doc_id": r.get("doc_id"), "prompt_hash": r.get("prompt_hash"), "response": text},
        }
        predictions[s.id] = pred.model_copy(update={"trace": trace})
    return predictions


def _system_config(meta: _Meta, record: Mapping[str, Any]) -> dict[str, Any]:
    """The imported run's system configuration: lm-eval's model, its arguments (keys redacted), the generation
    arguments of ``record`` (the first logged sample) and the export's version."""
    return {
        "model": meta.model,
        "model_args": _redacted(meta.model_args),
        "generation_kwargs": _generation(record),
        "chat_template": meta.chat_template,
        "export_version": record["doc"].get("ddibench_export"),
    }


def _model_identity(meta: _Meta) -> dict[str, str]:
    """The generator's identity: lm-eval's model type as provider, the model it loaded, and its endpoint if any."""
    model_args = meta.model_args
    return {
        "provider": f"lm-eval:{meta.model}",
        "model": str(model_args.get("model") or model_args.get("pretrained") or meta.model_name or "unknown"),
        "base_url": str(model_args.get("base_url", "")),
    }


def _rewrite_journal(path: Path, predictions: Iterable[Prediction]) -> None:
    """Write the journal anew with ``predictions``; returns nothing."""
    from ddibench.runner.journal import Journal

    if path.exists():
        path.unlink()  # an import is rewritten whole: it has no partial state to resume
    journal = Journal(path)
    journal.append(predictions)
    journal.close()


def _import_session(meta: _Meta, samples_path: Path, results_file: Path | None, n_samples: int) -> SessionRecord:
    """The one session of an imported run: lm-eval's start time and duration, and the files it was read from."""
    from ddibench.runner.records import SessionRecord

    return SessionRecord(
        started=meta.started or dt.datetime.now(dt.timezone.utc).isoformat(),
        wall_s=meta.wall_s,
        predicted=n_samples,
        profile="lm-eval",
        system_info={
            "lm_eval": {
                "version": meta.lm_version,
                "samples_file": samples_path.name,
                "results_file": results_file.name if results_file else None,
            }
        },
    )


def _imported_results(
    answers: _Answers,
    evaluator: Evaluator,
    evaluation: EvaluationResult,
    identity: RunIdentity,
    meta: _Meta,
    system_config: dict[str, Any],
    model_identity: dict[str, str],
    session: SessionRecord,
) -> Results:
    """The imported run's results: lm-eval as the system, its model as the generator, cost not recorded."""
    from ddibench.runner.manifest import make_results
    from ddibench.runner.records import Cost, ModelEntry, ProfileRecord, Seeds, SystemCard

    task, samples, limit, seed, lm_version = answers.task, answers.samples, answers.limit, answers.seed, meta.lm_version
    return make_results(
        task=task,
        evaluator=evaluator,
        evaluation=evaluation,
        identity=identity,
        system=SystemCard(
            name="lm-eval",
            version=lm_version,
            description=f"ddibench's {'zero-shot' if kind_of(task) == 'classification' else 'no-rag'} prompt and parser, run by lm-evaluation-harness {lm_version}",
            config=system_config,
            config_hash=identity.system.config_hash,
            variant="",  # ddibench's own prompt and parser, as the reference system's default
            constant_answer=False,
            deviations=[
                "answers were generated by lm-evaluation-harness and imported; token counts are not in its samples, so cost is not recorded",
                "the prompt's system text and question are one user turn (lm-eval's chat path has no per-task system message)",
            ],
        ),
        models={
            "generator": ModelEntry(
                spec=f"{model_identity['provider']}:{model_identity['model']}", identity=model_identity
            )
        },
        profile=ProfileRecord(declared={"name": "lm-eval"}, detected={"lm_eval_env": meta.env_info[:2000]}),
        seeds=Seeds(run=seed, bootstrap=0, limit_sampling=seed if limit is not None else None),
        scoring_info={},
        sessions=[session],
        cost=Cost(recorded=False, n_items=len(samples)),
        # the floors on the same samples, as every run has them (the training split's most frequent label, random)
        floors=evaluator.floors(samples, task.load().split("train") if "train" in task.load().splits else ()),
    )
