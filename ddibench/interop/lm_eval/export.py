"""``ddibench export lm-eval``: each task as an lm-eval task config (YAML), its documents (JSONL) and the glue
(``ddibench_utils.py``) that calls :mod:`ddibench.interop.lm_eval.glue` through the package's path."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ddibench.errors import ConfigError
from ddibench.schema import DrugPair, Molecule, Question, Sample
from ddibench.task import Task

EXPORT_VERSION = 1
JSON_MODES = ("none", "schema", "object", "llamacpp")

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
        from ddibench.toolkit.molecule_answers import instruction_of

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
        from ddibench.llm import response_format  # the same request ddibench's client would send
        from ddibench.toolkit.label_choice import LabelChoiceConfig, label_schema

        generation["max_gen_toks"] = LabelChoiceConfig().max_tokens
        if json_mode != "none":
            generation["response_format"] = response_format(json_mode, label_schema(len(task.label_space)))
        metrics = [("accuracy", "agg_accuracy"), ("macro_f1", "agg_macro_f1"), ("kappa", "agg_kappa")]
    elif kind == "yes_no":
        from ddibench.llm import response_format
        from ddibench.toolkit.molecule_answers import answer_budget, answer_schema

        generation["max_gen_toks"] = answer_budget(task.answer)
        if json_mode != "none":
            generation["response_format"] = response_format(json_mode, answer_schema(task.answer))
        metrics = [("accuracy", "agg_accuracy"), ("macro_f1", "agg_macro_f1"), ("kappa", "agg_kappa")]
    elif kind == "ranking":
        from ddibench.llm import response_format
        from ddibench.toolkit.label_choice import topk_schema, topk_tokens

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
        from ddibench.toolkit.answering import AnswerConfig

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
