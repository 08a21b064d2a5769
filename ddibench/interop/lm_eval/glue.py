"""What lm-eval calls in an exported task (through ``ddibench_utils.py``, which imports it from
:mod:`ddibench.interop.lm_eval`): the documents, the prompt, the parser and per-sample scores, and the
aggregations, all ddibench's own."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from ddibench.schema import Molecule, Prediction
from ddibench.task import Task


def load_documents(folder: Path, ddibench_data_file: str, **_: Any) -> Any:
    """An exported task's documents as a ``datasets.DatasetDict`` with a ``test`` split. ``folder`` is the
    exported folder and ``ddibench_data_file`` the task's documents in it (from the YAML's
    ``dataset_kwargs``); lm-eval also passes the task's metadata and the model's arguments, ignored here."""
    import datasets

    return datasets.load_dataset("json", data_files={"test": str(folder / ddibench_data_file)})


@cache
def task_named(name: str) -> Task:
    from ddibench.registry import get_task

    return get_task(name)


@cache
def _options(name: str) -> tuple[str, ...]:
    from ddibench.toolkit.label_choice import option_texts

    return tuple(option_texts(task_named(name).label_space))


def _doc_kind(doc: Mapping[str, Any]) -> str:
    """An exported document's kind (see :func:`kind_of`), from the fields it carries."""
    if "question" in doc:
        return "text"
    if "smiles" in doc:
        return "yes_no"
    return "ranking" if "k" in doc else "classification"


def doc_to_text(doc: Mapping[str, Any]) -> str:
    task = task_named(doc["ddibench_task"])
    kind = _doc_kind(doc)
    if kind == "yes_no":  # the zero-shot system's molecule prompt, its system text first
        from ddibench.toolkit.molecule_answers import question as molecule_question

        molecule = Molecule(
            smiles=str(doc["smiles"]),
            inchikey=str(doc.get("inchikey", "")),
            name=str(doc.get("name", "")),
            id=str(doc.get("molecule_id", "")),
        )
        answer = task.answer
        return answer.system_prompt + "\n\n" + molecule_question(answer, molecule, str(doc["instruction"]))
    if kind == "ranking":
        from ddibench.toolkit.label_choice import TOPK_QUESTION, topk_system_prompt

        k = int(doc["k"])
        system = topk_system_prompt([lb.name for lb in task.label_space], k)
        return system + "\n\n" + TOPK_QUESTION.format(head=_drug(doc, "head"), tail=_drug(doc, "tail"), k=k)
    if kind == "classification":
        from ddibench.toolkit.label_choice import QUESTION, SYSTEM_PROMPT

        types = "\n".join(f"{i}. {text}" for i, text in enumerate(_options(task.name), 1))
        asked = QUESTION.format(
            head=f"{doc['head']} (DrugBank {doc['head_id']})", tail=f"{doc['tail']} (DrugBank {doc['tail_id']})"
        )
        return SYSTEM_PROMPT.format(types=types) + "\n\n" + asked
    from ddibench.toolkit.answering import ANSWER_SYSTEM

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
        from ddibench.toolkit.molecule_answers import parse_yes_no

        label, how = parse_yes_no(text)
        if label is None:
            return Prediction.invalid(str(doc["id"]), how, text=text, trace={"parse": {"method": how}})
        return Prediction(sample_id=str(doc["id"]), label=label, text=text, trace={"parse": {"method": how}})
    if kind == "ranking":
        from ddibench.llm import ChatResult
        from ddibench.toolkit.label_choice import answer_to_ranking

        names = [lb.name for lb in task_named(doc["ddibench_task"]).label_space]
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
    from ddibench.toolkit.parsing import parse_choice

    parsed = parse_choice(text, _options(doc["ddibench_task"]))
    trace = {"parse": {"method": parsed.method, "detail": parsed.detail}}
    if parsed.index is None:
        return Prediction.invalid(str(doc["id"]), parsed.detail or "unparsable answer", text=text, trace=trace)
    return Prediction(sample_id=str(doc["id"]), label=parsed.index, text=text, trace=trace)


def process_results(doc: Mapping[str, Any], results: Sequence[str]) -> dict[str, Any]:
    pred = parse_answer(doc, results[0] if results else "")
    task = task_named(doc["ddibench_task"])
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
