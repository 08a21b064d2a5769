"""Retrieval ceilings: what the context a retrieval system handed its reader could score, with no LLM.

A system that retrieves labelled knowledge (similar solved pairs, KG facts, paths) records in each
prediction's trace the labels its context states, in the order shown: ``context_labels`` (at the top of
the trace or under ``context``; label ids of the task's label space). From those, on the run's own
samples and with the task's own evaluator and bootstrap:

* **vote reader** — answers the label the context states most often (ties: the one shown first); on a
  label-set task, the k labels stated most often; on a question about a pair (``ddi_qa_*``), the sentence of
  the type stated most often, with the question's two drugs, scored by the task's own text scorers. A plain
  reader any LLM could match: a system scoring below it loses information its context holds.
* **coverage** — the share of samples whose gold label the context states at all (label sets: the share
  of the gold labels stated, averaged). No reader that answers from the context alone can beat it.

A sample whose context states no label counts as wrong for the vote reader. The ceilings say whether a
low score comes from the retrieval (the answer is not in the context) or from the reader (it is, and
the model did not use it); they are diagnostics read from the journal, not part of the run's results.

A system whose first stage ranks labels and offers the reader the best few (CBR-DDI's GNN module) records
them too: ``candidates`` at the top of the trace, best first (label ids, or ``[id, score]`` pairs). From them:

* **candidate coverage** — the share of samples whose gold is among the candidates (label sets: of the gold
  labels), and the share whose first candidate is gold: what the first stage alone would score;
* **the reader's moves** (one-label tasks) — of the reader's answers, those that left the first candidate:
  fixing a wrong first candidate, breaking a right one, or trading one wrong label for another.

:func:`evidence` is what all of this reads of a trace: a compact bundle keeps it for every sample.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddibench.schema import Prediction, Question, Sample

KEY = "context_labels"
CANDIDATES = "candidates"
BY_SETTING = "context_labels_by_lambda"  # the labels the context would state at each setting of a retrieval knob


def context_labels(trace: dict[str, Any]) -> list[int] | None:
    """The labels a prediction's context stated, or None when its system records none."""
    for where in (trace, trace.get("context")):
        if isinstance(where, dict) and isinstance(where.get(KEY), list):
            return [int(x) for x in where[KEY]]
    return None


def candidates(trace: dict[str, Any]) -> list[int] | None:
    """The label ids a first stage offered the reader, best first, or None when its system records none."""
    found = trace.get(CANDIDATES)
    if not isinstance(found, list):
        return None
    return [int(c[0]) if isinstance(c, (list, tuple)) else int(c) for c in found]


def evidence(trace: dict[str, Any]) -> dict[str, Any]:
    """What the ceilings read of a trace, as a trace holding only that (the context's labels; the candidates' ids)."""
    out: dict[str, Any] = {}
    labels = context_labels(trace)
    if labels is not None:
        out[KEY] = labels
    offered = candidates(trace)
    if offered is not None:
        out[CANDIDATES] = offered
    settings = labels_by_setting(trace)
    if settings is not None:
        out[BY_SETTING] = settings
        if isinstance(trace.get("lambda"), (int, float)):  # the run's own setting among them
            out["lambda"] = trace["lambda"]
    return out


def labels_by_setting(trace: dict[str, Any]) -> dict[str, list[int]] | None:
    """The labels the context would have stated at each setting of the system's retrieval knob (CBR-DDI: each
    lam of its grid), or None when its system records none."""
    found = trace.get(BY_SETTING)
    if not isinstance(found, dict):
        return None
    return {str(k): [int(x) for x in v] for k, v in found.items() if isinstance(v, list)}


def coverage_by_setting(samples: Sequence[Sample], predictions: Mapping[str, Prediction]) -> dict[str, float] | None:
    """At each recorded setting (CBR-DDI: lam), the share of samples whose gold the context would state (label sets:
    of the gold labels, averaged); None unless every answered prediction records them. An invalid prediction's
    trace counts when it records them, and as not covered when it does not."""
    recorded = {s.id: labels_by_setting(predictions[s.id].trace) if s.id in predictions else None for s in samples}
    if not any(v is not None for v in recorded.values()) or any(
        recorded[s.id] is None for s in samples if s.id in predictions and predictions[s.id].valid
    ):
        return None
    settings = sorted({k for v in recorded.values() if v for k in v}, key=_setting_order)
    out = {}
    for setting in settings:
        covered = []
        for s in samples:
            labels, gold = (recorded[s.id] or {}).get(setting, []), _gold(s)
            covered.append(len(gold & set(labels)) / len(gold) if gold else 0.0)
        out[setting] = sum(covered) / max(1, len(covered))
    return out


def _setting_order(setting: str) -> tuple[int, float, str]:
    try:
        return (0, float(setting), setting)
    except ValueError:
        return (1, 0.0, setting)


def vote(labels: Sequence[int], k: int | None) -> list[int]:
    """The labels stated most often, ties broken by first mention; ``k`` of them (None: one)."""
    counts = Counter(labels)
    first = {label: i for i, label in reversed(list(enumerate(labels)))}
    order = sorted(counts, key=lambda label: (-counts[label], first[label]))
    return order[: k or 1]


@dataclass(frozen=True)
class CandidateCoverage:
    """What the first stage offered (``candidates``): how often it held the gold, and what the reader did with it."""

    n: float  # candidates per sample, on average
    coverage: float  # the share of samples whose gold is among them (label sets: of the gold labels, averaged)
    first: float  # the share whose first candidate is gold (label sets: one of the gold labels)
    # one-label tasks: the reader's answers against the first candidate (None on label-set and text tasks):
    # kept (answered it), fixed (left a wrong one for the gold), broke (left the gold), other (one wrong for another),
    # invalid (no answer)
    moves: dict[str, int] | None

    def as_dict(self) -> dict[str, Any]:
        return {"n": self.n, "coverage": self.coverage, "first": self.first, "moves": self.moves}


def candidate_coverage(
    samples: Sequence[Sample], predictions: Mapping[str, Prediction], one_label: bool
) -> CandidateCoverage | None:
    """:class:`CandidateCoverage` over ``samples``, or None unless every answered prediction records candidates
    (a compact bundle packed before ddibench kept them has them for its whole traces only)."""
    offered = {s.id: candidates(predictions[s.id].trace) if s.id in predictions else None for s in samples}
    if not any(v is not None for v in offered.values()) or any(
        offered[s.id] is None for s in samples if s.id in predictions and predictions[s.id].valid
    ):
        return None
    covered, first = [], []
    moves = dict.fromkeys(("kept", "fixed", "broke", "other", "invalid"), 0)
    for s in samples:
        listed, gold = offered[s.id] or [], _gold(s)
        covered.append(len(gold & set(listed)) / len(gold) if gold else 0.0)
        top_right = bool(listed) and listed[0] in gold
        first.append(float(top_right))
        pred = predictions.get(s.id)
        if not one_label or not listed or pred is None:
            continue
        if not pred.valid or pred.label is None:
            moves["invalid"] += 1
        elif pred.label == listed[0]:
            moves["kept"] += 1
        elif top_right:
            moves["broke"] += 1
        else:
            moves["fixed" if pred.label in gold else "other"] += 1
    n = len(samples) or 1
    return CandidateCoverage(
        n=sum(len(offered[s.id] or []) for s in samples) / n,
        coverage=sum(covered) / n,
        first=sum(first) / n,
        moves=moves if one_label else None,
    )


@dataclass(frozen=True)
class Ceilings:
    run_dir: Path
    system: str
    task: str
    n: int
    with_context: int  # samples whose trace records context labels (the others: wrong for the vote reader)
    metric: str  # the task's primary metric
    reader: tuple[float, float | None, float | None]  # the run's own value and interval
    vote: tuple[float, float | None, float | None]
    coverage: float
    mean_labels: float  # labels stated per sample, on average
    spec: Any
    candidates: CandidateCoverage | None = None  # where the system records a first stage's candidates
    by_setting: dict[str, float] | None = None  # coverage at each setting of the retrieval knob (CBR-DDI: lam)
    setting: str | None = None  # the run's own setting (CBR-DDI: its lam), where it records one

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_dir": str(self.run_dir),
            "system": self.system,
            "task": self.task,
            "n": self.n,
            "with_context": self.with_context,
            "metric": self.metric,
            "reader": list(self.reader),
            "vote_reader": list(self.vote),
            "coverage": self.coverage,
            "mean_context_labels": self.mean_labels,
            "candidates": self.candidates.as_dict() if self.candidates is not None else None,
            "coverage_by_lambda": self.by_setting,
            "lambda": self.setting,
        }


def _gold(sample: Sample) -> set[int]:
    if isinstance(sample.target, Mapping):  # a question about a pair: its reference answer and interaction type
        return {int(sample.target["label"])} if sample.target.get("label") is not None else set()
    return set(sample.label_ids) if isinstance(sample.target, (tuple, list)) else {sample.label}


def _voted(sample: Sample, labels: list[int], k: int | None, label_space: Any, text: bool) -> Prediction:
    if not labels:
        return Prediction.invalid(sample.id, "the context states no label")
    if k is not None:
        return Prediction(sample_id=sample.id, ranked=vote(labels, k))
    label = vote(labels, None)[0]
    if not text:
        return Prediction(sample_id=sample.id, label=label)
    question = sample.input
    pair = question.pair if isinstance(question, Question) else None
    if pair is None:  # a text task whose questions name no pair states no interaction types either
        raise ValueError(f"sample {sample.id}: a context that states interaction types needs a question about a pair")
    # the vote reader writes the voted type's sentence about the question's drugs
    return Prediction(sample_id=sample.id, label=label, text=label_space[label].render(pair.head.name, pair.tail.name))


def compute(
    run_dir: Path, load: Callable[[Path], tuple[Any, Any, dict[str, Prediction]]] | None = None
) -> Ceilings | None:
    """The ceilings of a finished run, or None when its system records no context labels. ``load`` reads the run
    (default: a finished run directory); ``ddibench.submission.load_finished_or_bundle`` also reads a bundle.
    RunDirError when some answered predictions record their context's labels and others do not: a compact bundle
    packed before ddibench kept every sample's labels has them for its first few samples only, and ceilings over
    those would not be the run's."""
    from ddibench.evaluation.ranking import RankingEvaluator
    from ddibench.evaluation.text import TextEvaluator
    from ddibench.registry import get_task
    from ddibench.runner.rundir import load_finished
    from ddibench.runner.selection import run_samples

    ident, results, predictions = (load or load_finished)(run_dir)
    stated = {sid: context_labels(p.trace) for sid, p in predictions.items()}
    if not any(v is not None for v in stated.values()):
        return None
    unrecorded = sum(1 for sid, p in predictions.items() if p.valid and stated[sid] is None)
    if unrecorded:
        from ddibench.errors import RunDirError

        raise RunDirError(
            f"{run_dir}: {unrecorded} of {len(predictions)} answered predictions do not record their context's labels"
            " (a compact bundle packed before ddibench kept them has whole traces for its first few samples only)",
            "compute the ceilings from the run directory, or from a bundle packed without --compact",
        )
    task = get_task(ident.task.name)
    evaluator = task.evaluator().configure(results.manifest.scoring.options)
    samples = run_samples(task, ident.selection)
    k = evaluator.k if isinstance(evaluator, RankingEvaluator) else None
    text = isinstance(evaluator, TextEvaluator)
    voted: dict[str, Prediction] = {}
    covered: list[float] = []
    for s in samples:
        labels = stated.get(s.id) or []
        gold = _gold(s)
        covered.append(len(gold & set(labels)) / len(gold) if gold else 0.0)
        voted[s.id] = _voted(s, labels, k, task.label_space, text)
    evaluation = evaluator.evaluate(samples, voted, results.bootstrap_spec, {})
    name = results.evaluation.primary_metric
    own, mine = results.evaluation.metrics[name], evaluation.metrics[name]
    return Ceilings(
        run_dir=run_dir,
        system=ident.system.name,
        task=ident.task.name,
        n=len(samples),
        with_context=sum(1 for s in samples if stated.get(s.id)),
        metric=name,
        reader=(own.value, own.ci_low, own.ci_high),
        vote=(mine.value, mine.ci_low, mine.ci_high),
        coverage=sum(covered) / len(covered) if covered else 0.0,
        mean_labels=sum(len(stated.get(s.id) or []) for s in samples) / max(1, len(samples)),
        spec=results.evaluation.spec(name),
        candidates=candidate_coverage(samples, predictions, one_label=k is None and not text),
        by_setting=coverage_by_setting(samples, predictions),
        setting=_own_setting(predictions),
    )


def _own_setting(predictions: Mapping[str, Prediction]) -> str | None:
    """The lam the run's traces record (the one its retrieval used), when they record one."""
    for p in predictions.values():
        lam = p.trace.get("lambda")
        if isinstance(lam, (int, float)) and not isinstance(lam, bool):
            return str(float(lam))
    return None
