"""LLM-scored metrics of free-text answers: the rubric judge and SelfCheckGPT's stochastic samples.

Both run after the answers exist, so ``ddibench rescore RUN_DIR`` can redo them without regenerating
answers, and both record who scored: the judge model's identity and the rubric prompt's hash, and for
SelfCheckGPT the number of samples, their temperature and seed.

* **Judge** — a rubric prompt asks for correctness and clarity from 1 to 5 (constrained JSON where the
  server supports it); the overall score is their mean, on the same 1–5 scale. With a second judge,
  exact agreement, agreement within one point and quadratic-weighted Cohen's kappa are reported.
* **SelfCheckGPT** — the system's own final prompt (the last LLM call in each prediction's trace, with
  its system prompt read back from the run's ``texts/``) is asked ``n`` more times at temperature 1; the
  BERTScore variant in :mod:`ddibench.evaluation.text_scorers` compares the answer with these samples.

Results live in ``<run>/scores/<judge-or-sampler key>.jsonl``, one line per sample.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ddibench.hashing import config_hash, sha256_text
from ddibench.llm import LLMCallError, LLMPool
from ddibench.schema import Prediction, Sample

JUDGE_SYSTEM = (
    "You are a meticulous clinical pharmacist grading answers to medical questions against a reference answer."
)
JUDGE_PROMPT = """Question: {question}

Reference answer: {reference}

Answer to grade: {answer}

Grade the answer on two criteria, each from 1 (worst) to 5 (best):
- correctness: does it state the same facts as the reference, without contradicting it or adding false claims?
- clarity: is it clear, direct and easy for a patient or clinician to act on?
Answer with JSON only: {{"correctness": N, "clarity": N}}"""
JUDGE_SCHEMA = {
    "type": "object",
    "properties": {
        "correctness": {"type": "integer", "enum": [1, 2, 3, 4, 5]},
        "clarity": {"type": "integer", "enum": [1, 2, 3, 4, 5]},
    },
    "required": ["correctness", "clarity"],
}
RUBRIC_SHA256 = sha256_text(JUDGE_SYSTEM + "\n" + JUDGE_PROMPT)


def parse_grades(text: str) -> tuple[int | None, int | None]:
    import re

    grades: dict[str, int] = {}
    for key in ("correctness", "clarity"):
        match = re.search(rf'"?{key}"?\s*[:=]\s*"?([1-5])', text, re.IGNORECASE)
        if match:
            grades[key] = int(match.group(1))
    return grades.get("correctness"), grades.get("clarity")


def scores_dir(run_dir: Path) -> Path:
    path = run_dir / "scores"
    path.mkdir(exist_ok=True)
    return path


def read_scores(path: Path) -> dict[str, dict[str, Any]]:
    if not path.exists():
        return {}
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            record = json.loads(line)
            out[record["sample_id"]] = record
    return out


def question_of(sample: Sample) -> tuple[str, str]:
    target = sample.target if isinstance(sample.target, dict) else {}
    question = getattr(sample.input, "text", "")
    return question, str(target.get("answer", ""))


async def _append_records(out: Path, jobs: list[Any], bar: Any, batch: int = 16) -> None:
    """Await ``jobs`` (coroutines returning records) a batch at a time, appending each batch to ``out``
    as JSON lines and flushing, so an interrupted scoring keeps what it finished."""
    try:
        with open(out, "a", encoding="utf-8") as fh:
            for start in range(0, len(jobs), batch):
                records = await asyncio.gather(*jobs[start : start + batch])
                fh.writelines(json.dumps(record) + "\n" for record in records)
                fh.flush()
                if bar:
                    bar.advance(len(records))
    finally:
        for job in jobs:
            job.close()  # never-started coroutines of an interrupted scoring: no "never awaited" warnings
        if bar:
            bar.close()


async def judge(
    pool: LLMPool,
    role: str,
    samples: Sequence[Sample],
    predictions: dict[str, Prediction],
    out: Path,
    progress: Any = None,
) -> dict[str, Any]:
    """Grade every answer not graded yet into ``out``; returns the judge's description."""
    done = read_scores(out)
    client = pool.client(role)
    todo = [s for s in samples if s.id not in done]
    bar = progress.task(f"judging ({role})", len(todo)) if progress else None

    async def grade(sample: Sample) -> dict[str, Any]:
        question, reference = question_of(sample)
        pred = predictions[sample.id]
        answer = (pred.text or "").strip()
        record: dict[str, Any] = {"sample_id": sample.id}
        if not pred.valid or not answer:
            record.update(correctness=1, clarity=1, overall=1.0, note="no answer")
            return record
        messages = [
            {"role": "system", "content": JUDGE_SYSTEM},
            {"role": "user", "content": JUDGE_PROMPT.format(question=question, reference=reference, answer=answer)},
        ]
        result = await client.chat(messages, temperature=0.0, max_tokens=32, json_schema=JUDGE_SCHEMA)
        correctness, clarity = parse_grades(result.text)
        record.update(raw=result.text, correctness=correctness, clarity=clarity)
        record["overall"] = (correctness + clarity) / 2 if correctness and clarity else None
        return record

    await _append_records(out, [grade(s) for s in todo], bar)
    return {
        "identity": pool.identity(role),
        "rubric_sha256": RUBRIC_SHA256,
        "combined": "overall = mean(correctness, clarity)",
    }


def judge_key(identity: dict[str, Any]) -> str:
    return f"judge-{config_hash({'judge': identity, 'rubric': RUBRIC_SHA256}, 12)}"


def agreement(first: dict[str, dict[str, Any]], second: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Agreement of two judges on the samples both graded (overall scores rounded to integers)."""
    shared = [
        sid for sid in first if sid in second and first[sid].get("correctness") and second[sid].get("correctness")
    ]
    if not shared:
        return {"n": 0}
    a = np.array([first[s]["correctness"] for s in shared])
    b = np.array([second[s]["correctness"] for s in shared])
    return {
        "n": len(shared),
        "criterion": "correctness",
        "exact": float(np.mean(a == b)),
        "within_one": float(np.mean(np.abs(a - b) <= 1)),
        "quadratic_weighted_kappa": weighted_kappa(a, b, 5),
    }


def weighted_kappa(a: np.ndarray, b: np.ndarray, k: int) -> float | None:
    observed = np.zeros((k, k))
    for x, y in zip(a - 1, b - 1):
        observed[x, y] += 1
    n = observed.sum()
    if n == 0:
        return None
    expected = np.outer(observed.sum(1), observed.sum(0)) / n
    weights = np.array([[(i - j) ** 2 for j in range(k)] for i in range(k)]) / (k - 1) ** 2
    denominator = (weights * expected).sum()
    return None if denominator == 0 else float(1 - (weights * observed).sum() / denominator)


async def selfcheck_samples(
    pool: LLMPool, role: str, run_dir: Path, predictions: dict[str, Prediction], n: int, out: Path, progress: Any = None
) -> dict[str, Any]:
    """Draw ``n`` stochastic samples of each answer's final prompt (temperature 1) into ``out``."""
    done = read_scores(out)
    client = pool.client(role)
    todo = [p for sid, p in predictions.items() if sid not in done]
    bar = progress.task(f"SelfCheckGPT samples (n={n})", len(todo)) if progress else None

    def final_messages(pred: Prediction) -> list[dict[str, Any]] | None:
        calls = pred.trace.get("llm") or []
        if not calls:
            return None
        messages = []
        for m in calls[-1]["messages"]:
            if "sha256" in m:
                path = run_dir / "texts" / f"{m['sha256']}.txt"
                if not path.exists():
                    return None
                messages.append({"role": m["role"], "content": path.read_text(encoding="utf-8")})
            else:
                messages.append(m)
        return messages

    async def sample(pred: Prediction) -> dict[str, Any]:
        messages = final_messages(pred)
        if messages is None or not pred.valid:
            return {"sample_id": pred.sample_id, "samples": [], "note": "no final LLM prompt in the trace"}
        texts: list[str] = []
        for i in range(n):
            try:
                result = await client.chat(messages, temperature=1.0, max_tokens=256, seed=1000 + i, sample_index=i + 1)
            except LLMCallError as exc:
                return {"sample_id": pred.sample_id, "samples": texts, "note": f"sampling failed: {exc}"}
            texts.append(result.text)
        return {"sample_id": pred.sample_id, "samples": texts}

    await _append_records(out, [sample(p) for p in todo], bar)
    return {
        "identity": pool.identity(role),
        "n": n,
        "temperature": 1.0,
        "seeds": [1000 + i for i in range(n)],
        "max_tokens": 256,
    }


def selfcheck_key(identity: dict[str, Any], n: int) -> str:
    return f"selfcheck-{config_hash({'model': identity, 'n': n, 'temperature': 1.0}, 12)}"
