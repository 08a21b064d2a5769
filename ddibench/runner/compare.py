"""Two runs on the same samples, compared pair by pair (``ddibench report RUN_A --against RUN_B``).

Either side can be a submission bundle too (``.tar.gz``, e.g. a run published on the board): the command
line passes :func:`ddibench.submission.load_finished_or_bundle`, which verifies it first. Both runs must
be of the same task, split and scoring variant; the comparison uses the samples both scored, so a
``--limit`` preview can be set against a full run. For each metric the task's evaluator computes A's
value, B's value, and the difference A - B with a paired bootstrap interval
(:meth:`~ddibench.evaluation.BaseEvaluator.paired`: both runs resampled with the same weights, clustered
by the samples' cluster keys, so sample difficulty cancels out). The difference is significant at the
interval's level when the interval excludes 0. This is the test the board uses to mark runs tied with a
task's best, for any two runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ddibench.errors import RunDirError

if TYPE_CHECKING:
    from ddibench.evaluation import Evaluator
    from ddibench.metrics.bootstrap import BootstrapSpec
    from ddibench.runner.records import Results, RunIdentity
    from ddibench.schema import Prediction, Sample
    from ddibench.task import Task


@dataclass(frozen=True)
class MetricComparison:
    name: str
    title: str
    a: float
    b: float
    diff: float
    low: float
    high: float
    spec: Any

    @property
    def significant(self) -> bool:
        return bool(self.low > 0 or self.high < 0)


@dataclass(frozen=True)
class Comparison:
    task: str
    a: str  # "system [variant] (run dir)" of each side
    b: str
    n: int  # samples both runs scored
    level: float
    replicates: int
    metrics: list[MetricComparison]


Finished = tuple["RunIdentity", "Results", "dict[str, Prediction]"]


def compare(
    run_a: Path, run_b: Path, replicates: int = 1000, seed: int = 0, load: Callable[[Path], Finished] | None = None
) -> Comparison:
    """Run A against run B on the samples both scored (see the module). ``load`` reads one side: by default a
    finished run directory (:func:`~ddibench.runner.rundir.load_finished`)."""
    from ddibench.metrics.bootstrap import BootstrapSpec
    from ddibench.registry import get_task
    from ddibench.runner.rundir import load_finished

    load = load or load_finished
    ident_a, results_a, preds_a = load(run_a)
    ident_b, results_b, preds_b = load(run_b)
    _check_comparable(run_a, run_b, ident_a, ident_b, results_a, results_b)
    task = get_task(ident_a.task.name)
    evaluator = task.evaluator().configure(results_a.manifest.scoring.options)
    shared = [s for s in _selected_by_both(task, ident_a, ident_b) if s.id in preds_a and s.id in preds_b]
    if not shared:
        raise RunDirError(
            f"{run_a} and {run_b} share no scored sample", "compare runs with the same --limit and --seed, or full runs"
        )
    spec = BootstrapSpec(replicates=replicates, seed=seed)
    return Comparison(
        task=task.name,
        a=_who(results_a, run_a),
        b=_who(results_b, run_b),
        n=len(shared),
        level=spec.level,
        replicates=replicates,
        metrics=_metric_rows(evaluator, shared, preds_a, preds_b, spec),
    )


def _check_comparable(
    run_a: Path, run_b: Path, ident_a: RunIdentity, ident_b: RunIdentity, results_a: Results, results_b: Results
) -> None:
    """Returns nothing; raises RunDirError unless both runs are of the same task and split, scored alike."""
    if ident_a.task.name != ident_b.task.name or ident_a.split != ident_b.split:
        raise RunDirError(
            f"{run_a} is {ident_a.task.name} ({ident_a.split}), {run_b} is {ident_b.task.name} ({ident_b.split})",
            "compare two runs of the same task and split",
        )
    from ddibench.registry import get_task

    # only options that change scores count, as on the board: a judge or SelfCheckGPT only adds model-based scores,
    # which a comparison does not recompute (it scores both sides' predictions again with the task's scorers)
    evaluator = get_task(ident_a.task.name).evaluator()
    options_a, options_b = results_a.manifest.scoring.options, results_b.manifest.scoring.options
    if evaluator.configure(options_a).variant_settings() != evaluator.configure(options_b).variant_settings():
        raise RunDirError(
            f"the two runs were scored with other options ({options_a} and {options_b})",
            "rescore one with the other's options",
        )


def _selected_by_both(task: Task, ident_a: RunIdentity, ident_b: RunIdentity) -> list[Sample]:
    """The samples run A selected that run B selected too, in A's order."""
    from ddibench.runner.selection import run_samples

    data = task.load()
    samples_a = run_samples(task, ident_a.selection, data)
    in_b = {s.id for s in run_samples(task, ident_b.selection, data)}
    return [s for s in samples_a if s.id in in_b]


def _metric_rows(
    evaluator: Evaluator,
    shared: list[Sample],
    preds_a: dict[str, Prediction],
    preds_b: dict[str, Prediction],
    spec: BootstrapSpec,
) -> list[MetricComparison]:
    """One comparison per metric both runs have a value for: A's value, B's, and A - B with its paired interval."""
    evaluation = evaluator.evaluate(shared, {s.id: preds_a[s.id] for s in shared}, spec)
    units_a = evaluator.units(shared, {s.id: preds_a[s.id] for s in shared}, evaluation)
    units_b = evaluator.units(
        shared,
        {s.id: preds_b[s.id] for s in shared},
        evaluator.evaluate(shared, {s.id: preds_b[s.id] for s in shared}, spec),
    )
    clusters = [s.clusters for s in shared]
    ones = np.ones((1, len(shared)))
    stat_a, stat_b = evaluator.statistic(units_a), evaluator.statistic(units_b)
    point_a, point_b = stat_a(ones), stat_b(ones)
    rows = []
    for metric in evaluation.metric_specs:
        if metric.name not in point_a or metric.name not in point_b:
            continue
        diff, low, high = evaluator.paired(metric.name, clusters, units_a, units_b, spec)
        rows.append(
            MetricComparison(
                metric.name,
                metric.title(),
                float(point_a[metric.name][0]),
                float(point_b[metric.name][0]),
                float(diff),
                float(low),
                float(high),
                metric,
            )
        )
    return rows


def _who(results: Results, run_dir: Path) -> str:
    variant = results.manifest.system.variant
    return f"{results.system}{f' [{variant}]' if variant else ''} ({run_dir})"
