"""lm-evaluation-harness: run ddibench tasks in lm-eval, and bring lm-eval's answers back as ddibench runs.

``ddibench export lm-eval DIR --task drugbank_s2`` writes, for each task:

* ``DIR/ddibench_<task>.yaml`` — an lm-eval task (``generate_until``) over the task's evaluation split;
* ``DIR/ddibench_data/<task>.jsonl`` — its documents (sample id, inputs, gold, and the task's version
  and data sha256, so an answer can always be traced to the exact data);
* ``DIR/ddibench_utils.py`` — a few lines of glue that call this module: the documents (lm-eval's
  ``custom_dataset``, read from ``ddibench_data/`` beside the glue), the prompt (``doc_to_text``), the
  parser and per-sample scores (``process_results``) and the aggregations are ddibench's own.

The folder holds no absolute path (lm-eval resolves ``dataset_kwargs.data_files`` from its current
directory, so the documents are found from the glue's own place instead): it can be moved or shared,
and lm-eval (0.4.9 or newer, for ``custom_dataset``) runs it from any directory.

Prompts: a classification task (DrugBank) gets the prompt of ddibench's ``zero-shot`` system (its system
text and question in one user turn: lm-eval's chat path has no per-task system message) and, with
``--json-mode``, the same constrained-JSON request ddibench would send; a free-text task (DDI QA,
MedQuAD) gets the question after the answering instruction of ``no-rag``. Answers are parsed with
ddibench's parser and scored with ddibench's metrics (macro-F1, kappa; embedding similarity and
BERTScore), so lm-eval prints the numbers ddibench would.

``ddibench import lm-eval SAMPLES.jsonl`` reads lm-eval's ``--log_samples`` output of such a task (and the
``results_*.json`` beside it) and writes a ddibench run directory: identity, journal (one prediction
per document, with lm-eval's raw response in the trace), session and results with a manifest that
names lm-eval's version, model and model arguments (keys redacted). The run can then be verified,
recomputed and put on the board like any other. Token counts are not in lm-eval's samples, so the
imported run's cost is marked as not recorded.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ddibench.errors import ConfigError, DataError
from ddibench.schema import DrugPair, Molecule, Prediction, Question, Sample
from ddibench.task import Task

if TYPE_CHECKING:
    from ddibench.evaluation import EvaluationResult, Evaluator
    from ddibench.runner.records import Results, RunIdentity, SessionRecord

EXPORT_VERSION = 1
JSON_MODES = ("none", "schema", "object", "llamacpp")
SECRET_KEYS = re.compile(r"key|token|secret|password", re.IGNORECASE)

UTILS = '''"""Glue for lm-evaluation-harness, written by `ddibench export lm-eval`: prompts, parsing and metrics are
ddibench's own (ddibench must be installed in the environment that runs lm-eval)."""

from pathlib import Path

from ddibench.interop.lm_eval import (  # noqa: F401
    agg_accuracy,
    agg_kappa,
    agg_macro_f1,
    agg_mean,
    doc_to_target,
    doc_to_text,
    load_documents,
    process_results,
)


def dataset(**kwargs):
    """lm-eval's custom_dataset: the documents in ddibench_data/ beside this file, wherever the folder is."""
    return load_documents(Path(__file__).absolute().parent, **kwargs)
'''


# -- export -------------------------------------------------------------------------------------


def kind_of(task: Task) -> str:
    """How a task is exported, by the answer it declares: "classification" (pairs -> one label, the label-choice
    prompt), "ranking" (pairs -> k labels of a label set: TWOSIDES), "yes_no" (molecules -> yes or no: toxicity) or
    "text" (questions -> free text). Not exported: a task whose primary metric is the mean over one slice of the
    samples (drug targets: those the knowledge graph does not hold), which lm-eval's per-task aggregation cannot
    select; and one scored by a probe trained on the answers of every split (captioning), not answer by answer."""
    evaluator = task.evaluator()
    kind, answer = evaluator.kind, task.answer.kind
    sliced = getattr(evaluator, "primary_slice", None) is not None
    if answer == "label" and kind == "classification" and task.input_kind == "drug_pair":
        return "classification"
    if answer == "top_k" and kind == "ranking" and task.input_kind == "drug_pair" and not sliced:
        return "ranking"
    if answer == "yes_no" and kind == "classification" and task.input_kind == "molecule":
        return "yes_no"
    if kind == "text":
        return "text"
    raise ConfigError(
        f"task {task.name} ({task.family}, {kind} answers) has no lm-eval export: "
        + (
            "its primary metric is the mean over one slice of the samples, which lm-eval cannot aggregate"
            if sliced
            else "it is scored by a probe over every split's captions, not answer by answer"
            if kind == "probe"
            else "no export is written for this kind of task"
        ),
        "export a DrugBank, TWOSIDES, toxicity or question-answering task",
    )


def _doc(task: Task, sample: Sample, limit: int | None, seed: int) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "ddibench_task": task.name,
        "ddibench_version": task.version,
        "ddibench_data_sha256": task.data_sha256,
        "ddibench_export": EXPORT_VERSION,
        "ddibench_limit": limit,
        "ddibench_seed": seed,
        "id": sample.id,
    }
    inp = sample.input
    if isinstance(inp, DrugPair) and isinstance(
        sample.target, tuple
    ):  # a label set: the gold labels, k of them asked for
        doc.update(
            head=inp.head.name,
            head_id=inp.head.drugbank_id,
            tail=inp.tail.name,
            tail_id=inp.tail.drugbank_id,
            gold=[int(t) for t in sample.target],
            k=int(getattr(task.evaluator(), "k", 5)),
        )
    elif isinstance(inp, DrugPair):
        doc.update(
            head=inp.head.name,
            head_id=inp.head.drugbank_id,
            tail=inp.tail.name,
            tail_id=inp.tail.drugbank_id,
            gold=sample.label,
        )
    elif isinstance(inp, Molecule):
        from ddibench.molecule_answers import instruction_of

        doc.update(
            smiles=inp.smiles,
            inchikey=inp.inchikey,
            name=inp.name,
            molecule_id=inp.id,
            gold=sample.label,
            instruction=instruction_of(task.load().resources, task.name),
        )
    elif isinstance(inp, Question):
        target = sample.target
        assert isinstance(target, Mapping)
        doc.update(question=inp.text, answer=str(target["answer"]), gold=target.get("label"))
        if inp.pair is not None:
            doc.update(head=inp.pair.head.name, tail=inp.pair.tail.name)
    return doc


def _yaml(task: Task, data_file: str, kind: str, json_mode: str) -> str:
    """The task's lm-eval config; ``data_file`` is relative to the exported folder."""
    generation: dict[str, Any] = {"until": [], "do_sample": False, "temperature": 0.0}
    if kind == "classification":
        from ddibench.label_choice import LabelChoiceConfig, label_schema
        from ddibench.llm import response_format  # the same request ddibench's client would send

        generation["max_gen_toks"] = LabelChoiceConfig().max_tokens
        if json_mode != "none":
            generation["response_format"] = response_format(json_mode, label_schema(len(task.label_space)))
        metrics = [("accuracy", "agg_accuracy"), ("macro_f1", "agg_macro_f1"), ("kappa", "agg_kappa")]
    elif kind == "yes_no":
        from ddibench.llm import response_format
        from ddibench.molecule_answers import answer_budget, answer_schema

        generation["max_gen_toks"] = answer_budget(task.answer)
        if json_mode != "none":
            generation["response_format"] = response_format(json_mode, answer_schema(task.answer))
        metrics = [("accuracy", "agg_accuracy"), ("macro_f1", "agg_macro_f1"), ("kappa", "agg_kappa")]
    elif kind == "ranking":
        from ddibench.label_choice import topk_schema, topk_tokens
        from ddibench.llm import response_format

        k = int(getattr(task.evaluator(), "k", 5))
        generation["max_gen_toks"] = topk_tokens(k)
        if json_mode != "none":
            generation["response_format"] = response_format(
                json_mode, topk_schema([lb.name for lb in task.label_space], k)
            )
        metrics = [
            (spec.name, "agg_mean") for spec in task.evaluator().metrics
        ]  # per-answer scores, averaged (recall@5, ndcg@5)
    else:
        from ddibench.answering import AnswerConfig

        generation.update(max_gen_toks=AnswerConfig().max_tokens, temperature=AnswerConfig().temperature)
        metrics = [("embedding_similarity", "agg_mean"), ("bertscore_f1", "agg_mean")]
        if task.label_space and len(task.label_space):
            metrics.append(("label_recovery", "agg_mean"))
    config = {
        "task": f"ddibench_{task.name}",
        "custom_dataset": "!function ddibench_utils.dataset",
        "dataset_kwargs": {"ddibench_data_file": data_file},
        "test_split": "test",
        "output_type": "generate_until",
        "doc_to_text": "!function ddibench_utils.doc_to_text",
        "doc_to_target": "!function ddibench_utils.doc_to_target",
        "process_results": "!function ddibench_utils.process_results",
        "generation_kwargs": generation,
        "metric_list": [
            {"metric": name, "aggregation": f"!function ddibench_utils.{agg}", "higher_is_better": True}
            for name, agg in metrics
        ],
        "metadata": {
            "version": float(EXPORT_VERSION),
            "ddibench_task_version": task.version,
            "ddibench_data_sha256": task.data_sha256,
        },
    }
    return "\n".join(_yaml_lines(config)) + "\n"


def _yaml_lines(value: Any, indent: int = 0) -> list[str]:
    """Block-style YAML for dicts, lists and JSON scalars (lm-eval's loader resolves '!function' tags only
    in block style). Hand-written: a few lines, and no YAML library is needed to export."""
    pad = "  " * indent

    def scalar(v: Any) -> str:
        if isinstance(v, str) and v.startswith("!function "):
            return v
        return json.dumps(v)

    def flat(v: Any) -> bool:
        return (
            not isinstance(v, (dict, list))
            or not v
            or (isinstance(v, list) and all(not isinstance(x, (dict, list)) for x in v))
        )

    lines: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            if not flat(item):
                lines.append(f"{pad}{key}:")
                lines += _yaml_lines(item, indent + 1)
            else:
                lines.append(f"{pad}{key}: {scalar(item) if not isinstance(item, (dict, list)) else json.dumps(item)}")
    else:
        for item in value:
            if flat(item):
                lines.append(f"{pad}- {scalar(item) if not isinstance(item, (dict, list)) else json.dumps(item)}")
                continue
            nested = _yaml_lines(item, indent + 1)
            lines.append(f"{pad}- {nested[0].strip()}")
            lines += nested[1:]
    return lines


def export(
    tasks: Sequence[Task], out: Path, limit: int | None = None, seed: int = 0, json_mode: str = "none"
) -> dict[str, Any]:
    """Write lm-eval task configs for ``tasks`` into ``out``; returns what was written."""
    from ddibench.runner.selection import stratified_subset

    if json_mode not in JSON_MODES:
        raise ConfigError(f"unknown --json-mode '{json_mode}'", f"use one of: {', '.join(JSON_MODES)}")
    if limit is not None and limit <= 0:
        raise ConfigError(
            f"--limit must be a positive number of samples, got {limit}", "omit it to export the whole evaluation split"
        )
    kinds = {task.name: kind_of(task) for task in tasks}
    chosen: dict[str, list[Sample]] = {}
    for task in tasks:  # every task's documents are chosen (and --limit checked) before anything is written
        samples = list(task.load().split(task.eval_split))
        if limit is not None and limit > len(samples):  # as 'ddibench run --limit' refuses it
            raise ConfigError(
                f"--limit {limit:,} is more than the {len(samples):,} samples of {task.name}'s {task.eval_split} split",
                f"give at most {len(samples):,}, or omit --limit to export every sample",
            )
        chosen[task.name] = stratified_subset(samples, limit, seed) if limit is not None else samples
    out.mkdir(parents=True, exist_ok=True)
    (out / "ddibench_data").mkdir(exist_ok=True)
    written: dict[str, Any] = {}
    for task in tasks:
        samples = chosen[task.name]
        data_file = out / "ddibench_data" / f"{task.name}.jsonl"
        data_file.write_text(
            "".join(json.dumps(_doc(task, s, limit, seed), sort_keys=True) + "\n" for s in samples), encoding="utf-8"
        )
        yaml = _yaml(task, data_file.relative_to(out).as_posix(), kinds[task.name], json_mode)
        (out / f"ddibench_{task.name}.yaml").write_text(yaml, encoding="utf-8")
        written[task.name] = {
            "lm_eval_task": f"ddibench_{task.name}",
            "documents": len(samples),
            "kind": kinds[task.name],
        }
    (out / "ddibench_utils.py").write_text(UTILS, encoding="utf-8")
    return written


# -- what lm-eval calls --------------------------------------------------------------------------


def load_documents(folder: Path, ddibench_data_file: str, **_: Any) -> Any:
    """An exported task's documents as a ``datasets.DatasetDict`` with a ``test`` split. ``folder`` is the
    exported folder and ``ddibench_data_file`` the task's documents in it (from the YAML's
    ``dataset_kwargs``); lm-eval also passes the task's metadata and the model's arguments, ignored here."""
    import datasets

    return datasets.load_dataset("json", data_files={"test": str(folder / ddibench_data_file)})


@cache
def _task(name: str) -> Task:
    from ddibench.registry import get_task

    return get_task(name)


@cache
def _options(name: str) -> tuple[str, ...]:
    from ddibench.label_choice import option_texts

    return tuple(option_texts(_task(name).label_space))


def _doc_kind(doc: Mapping[str, Any]) -> str:
    """An exported document's kind (see :func:`kind_of`), from the fields it carries."""
    if "question" in doc:
        return "text"
    if "smiles" in doc:
        return "yes_no"
    return "ranking" if "k" in doc else "classification"


def doc_to_text(doc: Mapping[str, Any]) -> str:
    task = _task(doc["ddibench_task"])
    kind = _doc_kind(doc)
    if kind == "yes_no":  # the zero-shot system's molecule prompt, its system text first
        from ddibench.molecule_answers import question as molecule_question

        molecule = Molecule(
            smiles=str(doc["smiles"]),
            inchikey=str(doc.get("inchikey", "")),
            name=str(doc.get("name", "")),
            id=str(doc.get("molecule_id", "")),
        )
        answer = task.answer
        return answer.system_prompt + "\n\n" + molecule_question(answer, molecule, str(doc["instruction"]))
    if kind == "ranking":
        from ddibench.label_choice import TOPK_QUESTION, topk_system_prompt

        k = int(doc["k"])
        system = topk_system_prompt([lb.name for lb in task.label_space], k)
        return system + "\n\n" + TOPK_QUESTION.format(head=_drug(doc, "head"), tail=_drug(doc, "tail"), k=k)
    if kind == "classification":
        from ddibench.label_choice import QUESTION, SYSTEM_PROMPT

        types = "\n".join(f"{i}. {text}" for i, text in enumerate(_options(task.name), 1))
        asked = QUESTION.format(
            head=f"{doc['head']} (DrugBank {doc['head_id']})", tail=f"{doc['tail']} (DrugBank {doc['tail_id']})"
        )
        return SYSTEM_PROMPT.format(types=types) + "\n\n" + asked
    from ddibench.answering import ANSWER_SYSTEM

    return ANSWER_SYSTEM + "\n\n" + str(doc["question"])


def _drug(doc: Mapping[str, Any], which: str) -> str:
    """A drug as the zero-shot prompt names it: its name, and its DrugBank id where it has one."""
    ident = doc.get(f"{which}_id")
    return f"{doc[which]} (DrugBank {ident})" if ident else str(doc[which])


def doc_to_target(doc: Mapping[str, Any]) -> str:
    return str(doc["answer"]) if "question" in doc else str(doc["gold"])


def parse_answer(doc: Mapping[str, Any], text: str) -> Prediction:
    """The ddibench prediction an lm-eval response gives (the same parser as ddibench's own systems)."""
    kind = _doc_kind(doc)
    if kind == "text":
        answer = " ".join(text.split())
        if not answer:
            return Prediction.invalid(str(doc["id"]), "empty answer", text=text)
        return Prediction(sample_id=str(doc["id"]), text=answer)
    if kind == "yes_no":
        from ddibench.molecule_answers import parse_yes_no

        label, how = parse_yes_no(text)
        if label is None:
            return Prediction.invalid(str(doc["id"]), how, text=text, trace={"parse": {"method": how}})
        return Prediction(sample_id=str(doc["id"]), label=label, text=text, trace={"parse": {"method": how}})
    if kind == "ranking":
        from ddibench.label_choice import answer_to_ranking
        from ddibench.llm import ChatResult

        names = [lb.name for lb in _task(doc["ddibench_task"]).label_space]
        result = ChatResult(
            text=text,
            finish_reason=None,
            prompt_tokens=0,
            completion_tokens=0,
            latency_s=0.0,
            cached=False,
            model_reported=None,
        )
        return answer_to_ranking(str(doc["id"]), result, names, range(len(names)), int(doc["k"]), {})
    from ddibench.parsing import parse_choice

    parsed = parse_choice(text, _options(doc["ddibench_task"]))
    trace = {"parse": {"method": parsed.method, "detail": parsed.detail}}
    if parsed.index is None:
        return Prediction.invalid(str(doc["id"]), parsed.detail or "unparsable answer", text=text, trace=trace)
    return Prediction(sample_id=str(doc["id"]), label=parsed.index, text=text, trace=trace)


def process_results(doc: Mapping[str, Any], results: Sequence[str]) -> dict[str, Any]:
    pred = parse_answer(doc, results[0] if results else "")
    task = _task(doc["ddibench_task"])
    kind = _doc_kind(doc)
    if kind in ("classification", "yes_no"):
        unit = (pred.label if pred.valid and pred.label is not None else -1, int(doc["gold"]), len(task.label_space))
        return {"accuracy": unit, "macro_f1": unit, "kappa": unit}
    if kind == "ranking":  # the task's own per-sample scores (an invalid answer ranks nothing: 0)
        from ddibench.evaluation import ranking_scores

        scores = ranking_scores({int(g) for g in doc["gold"]}, (pred.ranked or []) if pred.valid else [], int(doc["k"]))
        return {
            spec.name: float(scores[spec.name.split("@")[0]]) for spec in task.evaluator().metrics
        }  # "recall@5" -> recall
    from ddibench.embeddings import shared_encoder
    from ddibench.evaluation.text import _bert_scorer
    from ddibench.evaluation.text_scorers import LabelRecovery, embedding_similarity

    encoder = shared_encoder()
    answer, reference = pred.text or "", str(doc["answer"])
    out: dict[str, Any] = {
        "embedding_similarity": float(embedding_similarity(encoder, [answer], [reference])[0]),
        "bertscore_f1": float(_bert_scorer(encoder, 6).score([answer], [reference])[0, 2]),
    }
    if len(task.label_space):
        recovered = (
            LabelRecovery(task.label_space, encoder).recover(answer, doc.get("head", ""), doc.get("tail", ""))[0]
            if "head" in doc
            else None
        )
        out["label_recovery"] = float(recovered is not None and recovered == doc.get("gold"))
    return out


def _classification(items: Sequence[Sequence[int]], metric: str) -> float:
    import numpy as np

    from ddibench.metrics.classification import classification_scores

    n_labels = int(items[0][2])
    scores = classification_scores(np.array([i[1] for i in items]), np.array([i[0] for i in items]), n_labels)
    return float(scores.as_dict()[metric])


def agg_accuracy(items: Sequence[Sequence[int]]) -> float:
    return _classification(items, "accuracy")


def agg_macro_f1(items: Sequence[Sequence[int]]) -> float:
    return _classification(items, "macro_f1")


def agg_kappa(items: Sequence[Sequence[int]]) -> float:
    return _classification(items, "kappa")


def agg_mean(items: Sequence[float]) -> float:
    return float(sum(items) / len(items)) if items else float("nan")


# -- import -------------------------------------------------------------------------------------


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
    task = _task(first["ddibench_task"])
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
