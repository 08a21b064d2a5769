"""What every evaluator shares: metric declarations, the result record, strict input checks, bootstrap
intervals and paired comparisons.

An evaluator is one kind of answer (classification, ranking, text, probe). It *declares* its metrics
(:class:`MetricSpec`: name, label, unit, primary or not, higher-is-better, how two runs are compared)
and its scoring options (:class:`ScoringOption`, which become ``ddibench run`` flags); the runner, the
report, the store and the board read those declarations instead of knowing metric names.

Every evaluator reduces a sample's prediction to a small *unit* record (a predicted and a gold label,
or a per-sample score) and computes its metrics from units under bootstrap weights
(:meth:`BaseEvaluator.statistic`). The same function gives the intervals of one run and the paired
difference of two runs on their shared samples (:meth:`BaseEvaluator.paired`): both are resampled
with the *same* weights (the same drugs or scaffolds drawn), so sample difficulty cancels out.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

import numpy as np
from pydantic import BaseModel

from ddibench.errors import ConfigError
from ddibench.evaluation.answers import AnswerDistribution
from ddibench.metrics.bootstrap import BootstrapSpec, bootstrap_intervals
from ddibench.schema import Prediction, Sample

if TYPE_CHECKING:
    from ddibench.llm import ResponseCache, RoleModels

Statistic = Callable[[np.ndarray], dict[str, np.ndarray]]

PAIRED_BOOTSTRAP = "paired cluster bootstrap of the difference on the samples both runs scored"


class MetricSpec(BaseModel):
    """One metric an evaluator reports, as the report, the store and the board show and compare it."""

    name: str
    label: str
    unit: Literal["fraction", "score", "scale"] = "fraction"  # fraction: 0-1 shown as %; score: 3 decimals; scale: 1-5
    higher_is_better: bool = True
    primary: bool = False
    description: str = ""
    paired: str = PAIRED_BOOTSTRAP
    heading: str = ""  # the report's row title when the default (label and unit) does not say enough

    def format(self, value: float | None) -> str:
        if value is None or value != value:
            return "—"
        scaled, digits = (100 * value, 1) if self.unit == "fraction" else (value, 2 if self.unit == "scale" else 3)
        text = f"{scaled:.{digits}f}"
        return text[1:] if text.startswith("-") and float(text) == 0 else text  # no "-0.0"

    def title(self) -> str:
        """How a table names the metric: its label with its unit (and direction when lower is better)."""
        if self.heading:
            return self.heading
        notes = {"fraction": ["%"], "score": [], "scale": ["1-5"]}[self.unit] + (
            [] if self.higher_is_better else ["lower better"]
        )
        return f"{self.label} ({', '.join(notes)})" if notes else self.label


class MetricValue(BaseModel):
    value: float
    ci_low: float | None = None
    ci_high: float | None = None


class EvaluationResult(BaseModel):
    """Metrics of one set of predictions, with confidence intervals and the counts behind them."""

    n: int
    n_invalid: int
    metrics: dict[str, MetricValue]
    primary_metric: str
    bootstrap: dict[str, Any]
    metric_specs: list[MetricSpec] = []
    ceilings: dict[str, float] = {}  # the best value any system could reach on these samples, where it is below 1
    breakdown: dict[str, dict[str, Any]] = {}
    per_label: dict[str, float | None] = {}
    invalid_examples: list[dict[str, str]] = []
    per_sample: dict[str, dict[str, Any]] = {}  # scores of each sample, for drill-down
    answers: AnswerDistribution | None = None  # how the answers spread over the labels, beside the gold (label choices)

    def spec(self, name: str) -> MetricSpec:
        for spec in self.metric_specs:
            if spec.name == name:
                return spec
        return MetricSpec(name=name, label=name, unit="score")


class EvaluationInputError(ValueError):
    """Predictions that do not match the evaluator's expected format (a bug in the system)."""


@dataclass(frozen=True)
class ScoringOption:
    """A scoring option an evaluator takes; ``ddibench run`` and ``rescore`` offer it as ``flag``.

    ``portable`` is False for options that name something only the submitter's machine has (a local
    encoder path): ``verify`` cannot recompute such a run and asks for it to be rescored.
    """

    key: str
    flag: str
    help: str
    type: type = str
    default: Any = None
    is_flag: bool = False  # a boolean switch: the flag sets ``key`` to ``flag_value``
    flag_value: Any = True
    portable: bool = True
    # False for an option that adds model-based scores (a judge, SelfCheckGPT) and leaves every other score as
    # it is: runs that differ only in such options share a board variant
    variant: bool = True


@dataclass
class ScoringJob:
    """What an evaluator that scores with LLMs (a judge, SelfCheckGPT) gets from the runner."""

    run_dir: Path
    samples: Sequence[Sample]
    predictions: Mapping[str, Prediction]
    models: RoleModels
    cache: ResponseCache | None
    concurrency: int
    max_retries: int
    progress: Any = None


@dataclass(frozen=True)
class SampleView:
    """A sample's gold and answer as the board's drill-down shows them, with the sample's own score."""

    gold: str
    predicted: str
    gold_label: int | None = None  # the gold's label id, where it has one
    score: float | None = None  # the sample's primary metric (None: not scored alone)


def answer_text(prediction: Prediction, reading: str | None = None) -> str:
    """How an answer reads: why it is not one (then what the system wrote), else ``reading`` (the evaluator's
    reading of its answer fields: a label's sentence, ranked labels' names), else its text."""
    if not prediction.valid:
        return f"(no answer: {prediction.error or 'unparsable'}) {prediction.text or ''}".strip()
    return reading if reading is not None else prediction.text or ""


def pair_names(sample: Sample) -> tuple[str, str]:
    """The names a label's sentence is written with: the pair's drugs, or the placeholders."""
    from ddibench.schema import DrugPair

    if isinstance(sample.input, DrugPair):
        return sample.input.head.name, sample.input.tail.name
    return "#Drug1", "#Drug2"


class Scorer(Protocol):
    """The core of scoring, what a new evaluator writes (as inspect's ``Scorer`` and OGB's ``Evaluator`` are):
    per-sample units, the statistic that turns units into metrics under bootstrap weights (the point value is
    the statistic at equal weights, the intervals are it under resampled ones), and ``evaluate``, which returns
    both with the run's answer spread."""

    metrics: tuple[MetricSpec, ...]

    def evaluate(
        self,
        samples: Sequence[Sample],
        predictions: Mapping[str, Prediction],
        bootstrap: BootstrapSpec,
        extras: Mapping[str, Any] | None = None,
    ) -> EvaluationResult: ...

    def units(
        self, samples: Sequence[Sample], predictions: Mapping[str, Prediction], evaluation: EvaluationResult
    ) -> list[dict[str, Any]]: ...

    def statistic(self, units: Sequence[Mapping[str, Any]]) -> Statistic: ...


class ModelScoring(Protocol):
    """The optional extension of a scorer that scores with LLMs (a judge, SelfCheckGPT): which roles it needs
    under its options, what it collects before :meth:`Scorer.evaluate` (kept under the run's ``scores/``), and
    how it reads that back from a bundle. :class:`BaseEvaluator` gives the model-free defaults."""

    def model_roles(self) -> tuple[str, ...]: ...

    async def collect(self, job: ScoringJob) -> dict[str, Any]: ...

    def read_extras(self, files: Mapping[str, bytes]) -> dict[str, Any]: ...


class Evaluator(Scorer, ModelScoring, Protocol):
    """Everything the runner, the report, the store and the board ask of a task's evaluator. A new evaluator
    subclasses :class:`BaseEvaluator` and writes the :class:`Scorer` part; the rest has defaults there: its
    identity and options (kind, version, options, settings), what its metrics read of an answer
    (``answer_fields``, ``reduce``), how a run's scoring reads in the manifest, the report and the board
    (``describe``, ``provenance``, ``sample_view``), its floors and its paired test."""

    kind: ClassVar[str]
    version: ClassVar[int]
    options: ClassVar[tuple[ScoringOption, ...]]
    answer_fields: ClassVar[tuple[str, ...]]
    recompute_tolerance: ClassVar[float]  # how far a recomputed metric may differ from the claimed one (float noise)

    @property
    def expected_format(self) -> str: ...

    @property
    def primary_metric(self) -> str: ...

    # options
    def configure(self, options: Mapping[str, Any], subject: str = ...) -> Evaluator: ...

    def settings(self) -> dict[str, Any]: ...

    def variant_settings(self) -> dict[str, Any]: ...

    def non_portable(self) -> list[str]: ...

    # how a run's scoring reads
    def describe(self) -> dict[str, Any]: ...

    def provenance(self, scoring: Mapping[str, Any]) -> list[tuple[str, str]]: ...

    def sample_view(self, sample: Sample, prediction: Prediction, evaluation: EvaluationResult) -> SampleView: ...

    def reduce(self, prediction: Prediction) -> Prediction: ...

    def answer_spread(
        self, samples: Sequence[Sample], predictions: Mapping[str, Prediction]
    ) -> AnswerDistribution | None: ...

    # floors and comparisons
    def floors(
        self, samples: Sequence[Sample], train: Sequence[Sample], draws: int = ..., seed: int = ...
    ) -> dict[str, Any]: ...

    def paired(
        self,
        metric: str,
        clusters: Sequence[Sequence[str]],
        a: Sequence[Mapping[str, Any]],
        b: Sequence[Mapping[str, Any]],
        spec: BootstrapSpec | None = None,
    ) -> tuple[float, float, float]: ...


def check_coverage(samples: Sequence[Sample], predictions: Mapping[str, Prediction]) -> None:
    """Every sample has a prediction and every prediction belongs to a sample."""
    ids = [s.id for s in samples]
    wanted = set(ids)
    if len(wanted) != len(ids):
        dup = next(i for i, c in Counter(ids).items() if c > 1)
        raise EvaluationInputError(f"sample id {dup} occurs twice in the evaluated samples")
    missing = [i for i in ids if i not in predictions]
    extra = [i for i in predictions if i not in wanted]
    if missing:
        raise EvaluationInputError(
            f"{len(missing)} of {len(ids)} samples have no prediction (first: {', '.join(missing[:3])})"
        )
    if extra:
        raise EvaluationInputError(f"{len(extra)} predictions name no evaluated sample (first: {', '.join(extra[:3])})")


def mean_statistic(values: Mapping[str, np.ndarray]) -> Statistic:
    """Weighted means of per-sample values (NaN = not scored: left out of its metric's mean)."""

    def statistic(weights: np.ndarray) -> dict[str, np.ndarray]:
        out = {}
        for name, arr in values.items():
            ok = ~np.isnan(arr)
            w = weights[:, ok]
            total = w.sum(axis=1)
            out[name] = np.where(total > 0, (w * arr[ok]).sum(axis=1) / np.where(total > 0, total, 1), np.nan)
        return out

    return statistic


class BaseEvaluator:
    """Defaults every evaluator shares: options, configuration, intervals and paired comparisons."""

    kind: ClassVar[str] = ""
    version: ClassVar[int] = 1  # bump when scores change for the same answers: old and new scores never mix
    # how far a recomputed metric may be from the claimed one and still be the same (verify): exact sums here;
    # float32 model scores (embeddings) move by ~1e-7 with the thread count that computed them
    recompute_tolerance: ClassVar[float] = 1e-9
    options: ClassVar[tuple[ScoringOption, ...]] = ()
    metrics: tuple[MetricSpec, ...] = ()
    answer_fields: ClassVar[tuple[str, ...]] = (
        "label",
        "scores",
        "ranked",
        "text",
    )  # what the metrics read of an answer

    def __init__(self) -> None:
        self._settings: dict[str, Any] = {o.key: o.default for o in self.options}

    @property
    def expected_format(self) -> str:
        raise NotImplementedError

    @property
    def primary_metric(self) -> str:
        return next(m.name for m in self.metrics if m.primary)

    def metric(self, name: str) -> MetricSpec:
        for spec in self.metrics:
            if spec.name == name:
                return spec
        raise KeyError(name)

    # -- options ----------------------------------------------------------------------------------

    def configure(self, options: Mapping[str, Any], subject: str = "this task") -> BaseEvaluator:
        """A copy with scoring options applied; an option this evaluator does not take is an error."""
        known = {o.key: o for o in self.options}
        for key in options:
            if key not in known:
                flag = key.replace("_", "-")
                raise ConfigError(
                    f"--{flag} does not apply to {subject}: its {self.kind} evaluator has no such option",
                    f"drop --{flag}"
                    + (f" (its options: {', '.join(o.flag for o in self.options)})" if self.options else ""),
                )
        out = copy.copy(self)
        out._settings = {**self._settings, **dict(options)}
        out._validate()
        return out

    def _validate(self) -> None:
        """Check the configured options (raise ConfigError); called by :meth:`configure`."""

    def settings(self) -> dict[str, Any]:
        """The options that differ from their defaults (what a manifest records)."""
        defaults = {o.key: o.default for o in self.options}
        return {k: v for k, v in self._settings.items() if v != defaults.get(k)}

    def setting(self, key: str) -> Any:
        return self._settings[key]

    def non_portable(self) -> list[str]:
        """Options set to something only this machine has (``verify`` cannot recompute those runs)."""
        return [o.flag for o in self.options if not o.portable and self._settings.get(o.key) != o.default]

    def variant_settings(self) -> dict[str, Any]:
        """The non-default settings that change scores already there (see :attr:`ScoringOption.variant`): runs
        that differ in them are shown apart on the board."""
        apart = {o.key for o in self.options if o.variant}
        return {k: v for k, v in self.settings().items() if k in apart}

    # -- LLM-based scoring --------------------------------------------------------------------------

    def model_roles(self) -> tuple[str, ...]:
        """LLM roles this evaluator scores with under its current options (none by default)."""
        return ()

    async def collect(self, job: ScoringJob) -> dict[str, Any]:
        """Scores that need models (judge grades, stochastic samples), kept by the evaluator under the
        run directory; returns them as ``extras`` for :meth:`evaluate`, with an ``"info"`` entry that
        goes into the manifest."""
        return {}

    def read_extras(self, files: Mapping[str, bytes]) -> dict[str, Any]:
        """The ``extras`` a submitted bundle carries (its ``scores/`` members), for recomputation."""
        return {}

    def describe(self) -> dict[str, Any]:
        """The identity of the scorers (models, encoders, versions) for the manifest."""
        return {}

    def provenance(self, scoring: Mapping[str, Any]) -> list[tuple[str, str]]:
        """(label, text) lines on how a run was scored, read from its manifest's scoring section (what
        :meth:`describe` and :meth:`collect` put there): the report prints them and the board's provenance
        panel shows them. None by default."""
        return []

    # -- scoring -----------------------------------------------------------------------------------

    def evaluate(
        self,
        samples: Sequence[Sample],
        predictions: Mapping[str, Prediction],
        bootstrap: BootstrapSpec,
        extras: Mapping[str, Any] | None = None,
    ) -> EvaluationResult:
        raise NotImplementedError

    def units(
        self, samples: Sequence[Sample], predictions: Mapping[str, Prediction], evaluation: EvaluationResult
    ) -> list[dict[str, Any]]:
        """Per-sample unit records (aligned with ``samples``) from which :meth:`statistic` computes the
        metrics; by default the evaluation's own per-sample scores."""
        return [dict(evaluation.per_sample.get(s.id, {})) for s in samples]

    def sample_view(self, sample: Sample, prediction: Prediction, evaluation: EvaluationResult) -> SampleView:
        """The sample as the board shows it: free text and the sample's primary score by default (an evaluator
        of labels writes them as sentences or names, see the subclasses)."""
        gold = sample.target
        gold_label: int | None = None
        if isinstance(gold, Mapping):  # a question's answer with the label it names
            gold_text, gold_label = str(gold.get("answer", dict(gold))), gold.get("label")
        else:
            gold_text = str(gold)
        score = evaluation.per_sample.get(sample.id, {}).get(evaluation.primary_metric)
        return SampleView(gold_text, answer_text(prediction), gold_label, score)

    def answer_spread(
        self, samples: Sequence[Sample], predictions: Mapping[str, Prediction]
    ) -> AnswerDistribution | None:
        """How the answers spread over the labels (the evaluation's ``answers``), computed without the bootstrap:
        what a board built from recorded results reads for its collapse flag. None where answers are no labels."""
        return None

    def reduce(self, prediction: Prediction) -> Prediction:
        """The prediction with only what this evaluator's metrics read (its ``answer_fields``, validity and
        error), its trace left out: what a compact bundle keeps (``ddibench submit --compact``), and what a
        reproduction of a compact bundle compares. ``submit`` checks that the metrics of the reduced
        predictions equal the full ones, so an evaluator that reads more than it declares is caught there."""
        kept = {name: getattr(prediction, name) for name in self.answer_fields}
        return Prediction(sample_id=prediction.sample_id, valid=prediction.valid, error=prediction.error, **kept)

    def statistic(self, units: Sequence[Mapping[str, Any]]) -> Statistic:
        """Metrics under bootstrap weights: by default the weighted mean of each per-sample metric."""
        names = [m.name for m in self.metrics if any(m.name in u for u in units)]
        return mean_statistic({name: np.array([_num(u.get(name)) for u in units], dtype=float) for name in names})

    def intervals(
        self, units: Sequence[Mapping[str, Any]], clusters: Sequence[Sequence[str]], spec: BootstrapSpec
    ) -> dict[str, tuple[float, float]]:
        return bootstrap_intervals(self.statistic(units), len(units), spec, clusters=clusters)

    def floors(
        self, samples: Sequence[Sample], train: Sequence[Sample], draws: int = 20, seed: int = 0
    ) -> dict[str, Any]:
        """What answers without skill score on these samples (none for this kind of answer by default)."""
        return {}

    def point(self, units: Sequence[Mapping[str, Any]]) -> dict[str, float]:
        """Each metric's point value: the statistic at unit weights, the same function the intervals resample."""
        return {name: float(values[0]) for name, values in self.statistic(units)(np.ones((1, len(units)))).items()}

    def _floor_metrics(self, samples: Sequence[Sample], predictions: Mapping[str, Prediction]) -> dict[str, float]:
        return self.point(
            self.units(
                samples, predictions, EvaluationResult(n=0, n_invalid=0, metrics={}, primary_metric="", bootstrap={})
            )
        )

    def _random_floor(
        self, samples: Sequence[Sample], draw: Callable[[np.random.Generator], Prediction | None], draws: int, seed: int
    ) -> dict[str, float]:
        """Mean metrics over ``draws`` seeded draws of random answers (``draw`` makes one sample's answer)."""
        rng = np.random.default_rng(seed)
        total: dict[str, float] = {}
        for _ in range(draws):
            preds = {}
            for s in samples:
                pred = draw(rng)
                assert pred is not None
                preds[s.id] = pred.model_copy(update={"sample_id": s.id})
            for name, value in self._floor_metrics(samples, preds).items():
                total[name] = total.get(name, 0.0) + value / draws
        return total

    def paired(
        self,
        metric: str,
        clusters: Sequence[Sequence[str]],
        a: Sequence[Mapping[str, Any]],
        b: Sequence[Mapping[str, Any]],
        spec: BootstrapSpec | None = None,
    ) -> tuple[float, float, float]:
        """(difference, low, high) of ``metric``, run A minus run B, on aligned units of shared samples."""
        spec = spec or BootstrapSpec(replicates=500, seed=0)
        stat_a, stat_b = self.statistic(a), self.statistic(b)
        ones = np.ones((1, len(a)))
        point = float(stat_a(ones)[metric][0] - stat_b(ones)[metric][0])

        def difference(weights: np.ndarray) -> dict[str, np.ndarray]:
            return {"diff": stat_a(weights)[metric] - stat_b(weights)[metric]}

        low, high = bootstrap_intervals(difference, len(a), spec, clusters=clusters)["diff"]
        return point, low, high


def _num(value: object) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else float("nan")
