"""Free-text answers against reference answers.

Always: embedding similarity and BERTScore F1 to the reference; for questions about a drug pair, label
recovery (the answer mapped back to an interaction type, scored as accuracy). With models (collected
after prediction, kept under ``<run>/scores/`` so ``ddibench rescore`` can redo them): the LLM judge's
correctness, clarity and overall (1-5), and SelfCheckGPT. Each mean has a bootstrap interval, clustered
by the samples' cluster keys (drugs, or source documents).

Scoring options (``ddibench run`` / ``rescore`` flags): ``--no-judge``, ``--selfcheck N``,
``--scorer-encoder PATH`` (a local sentence-transformers model; recorded, and kept off the board) and,
for ``rescore``, ``--second-judge SPEC``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from ddibench.embeddings import DEFAULT_ENCODER, TextEncoder
from ddibench.errors import ConfigError
from ddibench.evaluation.base import (
    BaseEvaluator,
    EvaluationInputError,
    EvaluationResult,
    MetricSpec,
    MetricValue,
    ScoringJob,
    ScoringOption,
    check_coverage,
)
from ddibench.metrics.bootstrap import BootstrapSpec
from ddibench.schema import LabelSpace, Prediction, Sample

TEXT_METRICS = (
    MetricSpec(
        name="embedding_similarity",
        label="embedding similarity",
        unit="score",
        primary=True,
        description="cosine of the sentence embeddings of answer and reference",
    ),
    MetricSpec(
        name="bertscore_f1",
        label="BERTScore F1",
        unit="score",
        description="greedy token matching of contextual embeddings",
    ),
    MetricSpec(
        name="label_recovery", label="label recovery", description="answers mapped back to the pair's interaction type"
    ),
    MetricSpec(name="judge_correctness", label="judge correctness", unit="scale"),
    MetricSpec(name="judge_clarity", label="judge clarity", unit="scale"),
    MetricSpec(
        name="judge_overall", label="judge overall", unit="scale", description="mean of correctness and clarity"
    ),
    MetricSpec(
        name="selfcheck",
        label="SelfCheckGPT",
        unit="score",
        higher_is_better=False,
        heading="SelfCheckGPT (0-1, lower better)",
        description="inconsistency of the answer with stochastic resamples (higher = more likely hallucinated)",
    ),
)


class TextEvaluator(BaseEvaluator):
    """Free-text answers (see the module docstring)."""

    kind = "text"
    answer_fields: ClassVar[tuple[str, ...]] = ("text",)
    recompute_tolerance = 1e-6  # MiniLM similarities and BERTScore are float32: the thread count moves them by ~1e-7
    version = 2  # 2: BERTScore from the bert-score library (1: a hand-written variant that dropped [CLS]/[SEP])
    metrics: tuple[MetricSpec, ...] = TEXT_METRICS
    options: ClassVar[tuple[ScoringOption, ...]] = (
        ScoringOption(
            "judge",
            "--no-judge",
            "Do not grade answers with the judge model.",
            type=bool,
            default=True,
            is_flag=True,
            flag_value=False,
            variant=False,
        ),
        ScoringOption(
            "selfcheck", "--selfcheck", "SelfCheckGPT samples per answer (0: none).", type=int, default=3, variant=False
        ),
        ScoringOption(
            "scorer_encoder",
            "--scorer-encoder",
            "Text encoder of the similarity scorers: a local sentence-transformers path (default: MiniLM).",
            default=DEFAULT_ENCODER,
            portable=False,
        ),
        ScoringOption(
            "second_judge",
            "--second-judge",
            "A second judge model (SPEC); agreement with the first is reported.",
            default=None,
            variant=False,
        ),
    )
    expected_format = (
        "one Prediction per evaluated sample with the answer in text (valid=False or empty text counts as no answer)"
    )

    def __init__(self, label_space: LabelSpace | None, bertscore_layers: int = 6, primary: str | None = None) -> None:
        """``primary`` names the task's primary metric when it is not embedding similarity (a look-up task's is
        label recovery, the measure of the papers that answer from a knowledge base)."""
        super().__init__()
        self.label_space = label_space
        self.bertscore_layers = bertscore_layers
        if primary is not None:
            if primary not in {m.name for m in TEXT_METRICS}:
                raise ValueError(f"unknown primary metric {primary!r}")
            self.metrics = tuple(m.model_copy(update={"primary": m.name == primary}) for m in TEXT_METRICS)

    @property
    def encoder_spec(self) -> str:
        return self.setting("scorer_encoder") or DEFAULT_ENCODER

    def _validate(self) -> None:
        from ddibench.embeddings import encoder_path

        if self.setting("selfcheck") is not None and int(self.setting("selfcheck")) < 0:
            raise ConfigError(
                f"--selfcheck must be 0 or more, got {self.setting('selfcheck')}",
                "0 turns SelfCheckGPT off; omit it for 3 samples",
            )
        if self.encoder_spec != DEFAULT_ENCODER:
            encoder_path(self.encoder_spec)  # refuses a path that holds no model, before any prediction
        if self.setting("second_judge"):
            from ddibench.llm import ModelSpec

            ModelSpec.parse(str(self.setting("second_judge")))

    def describe(self) -> dict[str, Any]:
        from ddibench.embeddings import shared_encoder

        encoder = shared_encoder(self.encoder_spec)
        return {
            "scorers": {
                "version": self.version,
                "embedding": encoder.identity,
                "bertscore": _bert_scorer(encoder, self.bertscore_layers).describe(),
            }
        }

    # -- models: the judge and SelfCheckGPT ------------------------------------------------------------

    def model_roles(self) -> tuple[str, ...]:
        roles = []
        if self.setting("judge"):
            roles.append("judge")
            if self.setting("second_judge"):
                roles.append("second_judge")
        if int(self.setting("selfcheck") or 0) > 0:
            roles.append("generator")
        return tuple(roles)

    async def collect(self, job: ScoringJob) -> dict[str, Any]:
        from ddibench.evaluation import judge as judging
        from ddibench.llm import LLMPool, ModelSpec

        roles = self.model_roles()
        predictions = {s.id: job.predictions[s.id] for s in job.samples}
        if not any(p.trace.get("llm") for p in predictions.values()):
            # no answer came from a model (the top-passage floor): SelfCheckGPT has no prompt to sample again
            roles = tuple(r for r in roles if r != "generator")
        if not roles:
            return {}
        specs = job.models.for_roles([r for r in roles if r != "second_judge"])
        if "second_judge" in roles:
            specs["second_judge"] = ModelSpec.parse(str(self.setting("second_judge")))
        pool = LLMPool(
            specs, cache=job.cache, concurrency=job.concurrency, max_retries=job.max_retries, log_dir=job.run_dir
        )
        n = int(self.setting("selfcheck") or 0)
        out: dict[str, Any] = {"info": {}}
        try:
            pool.preflight()
            await pool.start(list(roles))
            folder = judging.scores_dir(job.run_dir)
            for role in ("judge", "second_judge"):
                if role in roles:
                    path = folder / f"{judging.judge_key(pool.identity(role))}.jsonl"
                    out["info"][role] = await judging.judge(pool, role, job.samples, predictions, path, job.progress)
                    out[role] = judging.read_scores(path)
            if "second_judge" in out:
                out["info"]["judge_agreement"] = judging.agreement(out["judge"], out["second_judge"])
            if "generator" in roles:
                path = folder / f"{judging.selfcheck_key(pool.identity('generator'), n)}.jsonl"
                out["info"]["selfcheck"] = await judging.selfcheck_samples(
                    pool, "generator", job.run_dir, predictions, n, path, job.progress
                )
                out["selfcheck"] = judging.read_scores(path)
        finally:
            await pool.close()
        return out

    def provenance(self, scoring: Mapping[str, Any]) -> list[tuple[str, str]]:
        from ddibench.llm import identity_summary

        lines = []
        for role in ("judge", "second_judge"):
            if scoring.get(role):
                identity, rubric = scoring[role]["identity"], scoring[role]["rubric_sha256"]
                label = role.replace("_", " ")
                lines.append((label, f"{identity_summary(identity)} {identity.get('model')}, rubric {rubric[:12]}"))
        if scoring.get("judge_agreement"):
            lines.append(("judge agreement", str(scoring["judge_agreement"])))
        if scoring.get("selfcheck"):
            sc = scoring["selfcheck"]
            lines.append(
                ("SelfCheckGPT", f"n={sc['n']} samples at temperature {sc['temperature']}, seeds {sc['seeds']}")
            )
        return lines

    def read_extras(self, files: Mapping[str, bytes]) -> dict[str, Any]:
        """The judge's grades and SelfCheckGPT's samples under ``scores/``, each only where this scoring asks for
        it: a run scored again with ``--no-judge`` or ``--selfcheck 0`` keeps the earlier files in its folder."""
        extras: dict[str, Any] = {}
        wanted = {"judge": bool(self.setting("judge")), "selfcheck": int(self.setting("selfcheck") or 0) > 0}
        for name, data in sorted(files.items()):
            for prefix, key in (("scores/judge-", "judge"), ("scores/selfcheck-", "selfcheck")):
                if name.startswith(prefix) and wanted[key] and key not in extras:
                    records = [json.loads(x) for x in data.decode("utf-8").splitlines() if x.strip()]
                    extras[key] = {r["sample_id"]: r for r in records}
        return extras

    # -- scoring -----------------------------------------------------------------------------------

    def evaluate(
        self,
        samples: Sequence[Sample],
        predictions: Mapping[str, Prediction],
        bootstrap: BootstrapSpec,
        extras: Mapping[str, object] | None = None,
    ) -> EvaluationResult:
        from ddibench.embeddings import shared_encoder
        from ddibench.evaluation.text_scorers import embedding_similarity

        check_coverage(samples, predictions)
        extras = extras or {}
        encoder = shared_encoder(self.encoder_spec)
        answers = [(predictions[s.id].text or "").strip() if predictions[s.id].valid else "" for s in samples]
        targets = [_reference(s) for s in samples]
        references = [str(t["answer"]) for t in targets]
        per: dict[str, np.ndarray] = {"embedding_similarity": embedding_similarity(encoder, answers, references)}
        scorer = _bert_scorer(encoder, self.bertscore_layers)
        per["bertscore_f1"] = scorer.score(answers, references)[:, 2]
        labels = [t.get("label") for t in targets]
        recovered = _recovered_labels(self.label_space, encoder, samples, answers, labels)
        if recovered:
            per["label_recovery"] = np.array([float(r is not None and r == lb) for r, lb in zip(recovered, labels)])
        per.update(_model_scores(samples, answers, scorer, extras))
        # point values and intervals from the unrounded values (the per-sample records are rounded for display),
        # both by the statistic: float64 means of the float32 similarities
        units = [{k: float(v[i]) for k, v in per.items()} for i in range(len(samples))]
        intervals = self.intervals(units, [s.clusters for s in samples], bootstrap)
        point = self.point(units)
        metrics = {
            name: MetricValue(
                value=point.get(name, float("nan")), ci_low=intervals[name][0], ci_high=intervals[name][1]
            )
            for name in per
        }
        invalid = [s.id for s, a in zip(samples, answers) if not a]
        return EvaluationResult(
            n=len(samples),
            n_invalid=len(invalid),
            metrics=metrics,
            primary_metric=self.primary_metric,
            bootstrap=bootstrap.describe(),
            metric_specs=[m for m in self.metrics if m.name in per],
            breakdown=_slice_breakdown(samples, per),
            invalid_examples=[
                {"sample_id": sid, "error": predictions[sid].error or "empty answer"} for sid in invalid[:5]
            ],
            per_sample=_per_sample(samples, per, recovered),
        )


def _recovered_labels(
    label_space: LabelSpace | None,
    encoder: TextEncoder,
    samples: Sequence[Sample],
    answers: Sequence[str],
    labels: Sequence[object],
) -> list[int | None]:
    """The interaction type each answer maps back to (None for a question not about a pair, or an answer
    that names none); empty when there is no label space or no sample has a label."""
    from ddibench.evaluation.text_scorers import LabelRecovery

    recovered: list[int | None] = []
    if label_space is not None and any(lb is not None for lb in labels):
        recovery = LabelRecovery(label_space, encoder)
        for s, answer in zip(samples, answers):
            pair = s.question.pair
            recovered.append(recovery.recover(answer, pair.head.name, pair.tail.name)[0] if pair else None)
    return recovered


def _model_scores(
    samples: Sequence[Sample], answers: Sequence[str], scorer: Any, extras: Mapping[str, object]
) -> dict[str, np.ndarray]:
    """Per-sample scores from the collected model outputs: the judge's grades and SelfCheckGPT's
    inconsistency, each only when collected (nan where a sample has none)."""
    from ddibench.evaluation.text_scorers import selfcheck_bertscore

    per: dict[str, np.ndarray] = {}
    judge: Mapping[str, Any] = extras.get("judge") or {}  # type: ignore[assignment]
    if judge:
        for key in ("correctness", "clarity", "overall"):
            per[f"judge_{key}"] = np.array([_num(judge.get(s.id, {}).get(key)) for s in samples])
    selfcheck: Mapping[str, Any] = extras.get("selfcheck") or {}  # type: ignore[assignment]
    if selfcheck:
        per["selfcheck"] = np.array(
            [
                _num(selfcheck_bertscore(scorer, a, selfcheck.get(s.id, {}).get("samples", [])) if a else None)
                for s, a in zip(samples, answers)
            ]
        )
    return per


def _per_sample(
    samples: Sequence[Sample], per: Mapping[str, np.ndarray], recovered: Sequence[int | None]
) -> dict[str, dict[str, Any]]:
    """Each sample's scores rounded for display (None where nan), with its recovered label when there are any."""
    return {
        s.id: {name: (None if np.isnan(arr[i]) else round(float(arr[i]), 4)) for name, arr in per.items()}
        | ({"recovered_label": recovered[i]} if recovered else {})
        for i, s in enumerate(samples)
    }


def _slice_breakdown(samples: Sequence[Sample], per: Mapping[str, np.ndarray]) -> dict[str, dict]:
    """The count and mean embedding similarity of each slice named by the samples' ``meta["slice"]``, and its
    label recovery where answers were mapped back to labels."""
    keys = [str(s.meta.get("slice", "")) for s in samples]
    breakdown: dict[str, dict] = {}
    for key in dict.fromkeys(k for k in keys if k):
        rows = [i for i, k in enumerate(keys) if k == key]
        # summed one by one in float64, in sample order (as the shipped bundles' breakdowns were computed)
        b: dict[str, Any] = {
            "n": len(rows),
            "embedding_similarity": sum(float(per["embedding_similarity"][i]) for i in rows) / len(rows),
        }
        if "label_recovery" in per:
            b["label_recovery"] = sum(float(per["label_recovery"][i]) for i in rows) / len(rows)
        breakdown[f"slice={key}"] = b
    return breakdown


@functools.cache
def _bert_scorer(encoder: Any, num_layers: int) -> Any:
    """One BERTScore scorer per encoder and layer in a process (loading the model takes a second)."""
    from ddibench.evaluation.text_scorers import BertScorer

    return BertScorer(encoder, num_layers)


def _reference(sample: Sample) -> Mapping[str, Any]:
    if not isinstance(sample.target, Mapping) or "answer" not in sample.target:
        raise EvaluationInputError(
            f"sample {sample.id} has no reference answer; a free-text task's target is {{'answer': ..., 'label': ...}}"
        )
    return sample.target


def _num(value: object) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else float("nan")


def scoring_encoder_of(scoring: Mapping[str, Any]) -> str | None:
    """The non-default text encoder a run's free-text scorers used, from its manifest's ``scoring``."""
    options = scoring.get("options") or {}
    if options.get("scorer_encoder"):
        return str(options["scorer_encoder"]) if options["scorer_encoder"] != DEFAULT_ENCODER else None
    spec = ((scoring.get("scorers") or {}).get("embedding") or {}).get("encoder")
    return spec if spec and spec != DEFAULT_ENCODER else None
