"""Typed, versioned records of a run: its identity (``run.json``), each session (``sessions.jsonl``), its
results with the manifest (``results.json``), and a submission bundle's index (``bundle.json``).

Every reader (report, submission, store, board, rescore) goes through these models, so a field is
named in one place and a malformed file is a one-line error, never a ``KeyError`` deep inside.

Versions:

* ``run.json`` — schema 1. Its canonical JSON (without ``run_id``) hashes to the run id, so its fields
  never change; new information goes into the results.
* ``results.json`` — schema 2 (adds the evaluator's metric declarations, the scoring options and the
  manifest's own schema). Schema-1 files (ddibench 0.1.0 before the typed records) still read: the
  metric declarations of their evaluators and their scoring options are filled in on load.
  ``evaluation.bootstrap.interval`` names the interval method (``"bca"`` since BCa intervals; results
  that do not name one used ``"percentile"``): :attr:`Results.bootstrap_spec` reads it, and ``verify``
  recomputes with the method a bundle records. The manifest's system card records the run's variant and whether
  its system answers the same for every sample by design (:class:`SystemCard`); a card written before it did gets
  both from what its system declared then (:data:`DECLARED_BEFORE_RECORDING`), never from the installed code.
* ``bundle.json`` — format 1.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_serializer, model_validator

from ddibench.errors import RunDirError
from ddibench.evaluation import EvaluationResult, MetricSpec
from ddibench.evaluation.classification import CLASSIFICATION_METRICS
from ddibench.evaluation.text import TEXT_METRICS
from ddibench.hashing import config_hash
from ddibench.metrics.bootstrap import BootstrapSpec
from ddibench.runner.selection import Selection
from ddibench.system import INPUT_ROLES, variant_name

RUN_SCHEMA_VERSION = 1
RESULTS_SCHEMA_VERSION = 2
BUNDLE_FORMAT = 1


class _Record(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="allow")

    def dump(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)


# -- identity ------------------------------------------------------------------------------------


class TaskRef(_Record):
    name: str
    version: str
    data_sha256: str


class SystemRef(_Record):
    name: str
    version: str
    config: dict[str, Any]
    config_hash: str


class RunIdentity(_Record):
    """What a run is: the same identity always gives the same run id (and the same run directory)."""

    model_config = ConfigDict(populate_by_name=True, extra="forbid")

    schema_version: int = Field(RUN_SCHEMA_VERSION, alias="schema")
    task: TaskRef
    system: SystemRef
    models: dict[str, dict[str, Any]]
    split: str
    seed: int
    limit: int | None
    n_samples: int
    sample_ids_sha256: str
    run_id: str = ""

    def payload(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude={"run_id"})

    @property
    def selection(self) -> Selection:
        """What picks the run's samples (:func:`ddibench.runner.selection.run_samples` gives them)."""
        return Selection(self.split, self.limit, self.seed)

    def with_id(self) -> RunIdentity:
        return self.model_copy(update={"run_id": config_hash(self.payload(), 16)})

    def summary(self, key: str) -> str:
        if key == "task":
            return f"{self.task.name} {self.task.version} (data {self.task.data_sha256[:12]})"
        if key == "system":
            return f"{self.system.name} {self.system.version} (config {self.system.config_hash})"
        return json.dumps(self.payload()[key], sort_keys=True)

    def mismatch(self, other: RunIdentity) -> str:
        """How ``other`` (what a command asks for) differs from this identity (what a directory holds)."""
        mine, theirs = self.payload(), other.payload()
        for key in ("task", "system", "models", "split", "seed", "limit"):
            if json.dumps(mine[key], sort_keys=True) != json.dumps(theirs[key], sort_keys=True):
                return f"{key}: the directory has {self.summary(key)}, this command asks for {other.summary(key)}"
        return "the selected samples differ"


# -- sessions and results ------------------------------------------------------------------------


SESSION_STATES = ("started", "finished", "failed", "interrupted", "killed")


class SessionRecord(_Record):
    """One invocation of ``ddibench run`` on a run directory.

    A session writes a ``started`` line when it begins and a line with its outcome (``finished``,
    ``failed`` or ``interrupted``, same ``session_id``) when it ends; a session killed before it could
    end (SIGKILL, power loss) keeps only its ``started`` line and reads as ``killed``, its time and
    samples estimated from the journal (see :func:`ddibench.runner.rundir.read_sessions`). Lines
    written before sessions had ids are finished sessions.
    """

    session_id: str = ""
    state: str = "finished"
    started: str
    wall_s: float = 0.0
    cpu_s: float = 0.0
    predicted: int = 0
    profile: str = ""
    hardware: dict[str, Any] = {}
    code: dict[str, Any] = {}
    timing: dict[str, float] = {}
    concurrency: int | None = None
    llm_usage: dict[str, dict[str, Any]] = {}
    served_models: dict[str, Any] = {}
    models: dict[str, str] = {}  # role -> the model spec the session ran with (what a merge of shards is scored with)
    system_info: dict[str, Any] = {}
    endpoints: dict[str, dict[str, Any]] = {}  # each model endpoint's policy: concurrency, timeouts, deadline
    failed: dict[str, str] = {}  # sample id -> why its model calls failed for good (the sample was not journalled)
    error: str | None = None  # why a failed or interrupted session ended

    @property
    def ended(self) -> bool:
        return self.state != "started"


class RoleCost(_Record):
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    served_from_cache: int = 0


class PerItemCost(_Record):
    calls: float = 0.0
    prompt_tokens: float = 0.0
    completion_tokens: float = 0.0


class Cost(_Record):
    """LLM calls and tokens by role, summed over the journalled predictions' traces."""

    by_role: dict[str, RoleCost] = {}
    per_item: dict[str, PerItemCost] = {}
    n_items: int = 0
    recorded: bool = True  # False: the answers came from elsewhere (an import) without token counts

    @property
    def calls_per_item(self) -> float:
        return sum(v.calls for v in self.per_item.values())

    @property
    def tokens_per_item(self) -> float:
        return sum(v.prompt_tokens + v.completion_tokens for v in self.per_item.values())


class Timing(_Record):
    wall_s_total: float = 0.0
    predict_s_total: float = 0.0
    prepare_s_total: float = 0.0


class ModelEntry(_Record):
    spec: str
    identity: dict[str, Any]
    output: str | None = None  # how its answers were constrained (None: runs made before this was recorded)


class ProfileRecord(_Record):
    declared: dict[str, Any]
    detected: dict[str, Any]
    warning: str | None = None

    @property
    def name(self) -> str:
        return str(self.declared.get("name", ""))


class TaskCard(_Record):
    name: str
    version: str
    family: str = ""
    setting: str = ""
    title: str = ""
    data_sha256: str
    recipe_version: int = 1
    sources: list[dict[str, Any]] = []
    deviations: list[str] = []
    input_kind: str = ""  # drug_pair, molecule or question (empty in results of early builds)
    cluster_unit: str = "drugs"  # what the bootstrap resampled (drugs, scaffolds, documents)


@dataclass(frozen=True)
class _Declared:
    """What a system declared about how it answers (:class:`ddibench.system.BaseSystem`'s ``variant_keys``, the
    defaults of those keys, ``Config.absent_means`` and ``constant_answer``)."""

    variant_keys: tuple[str, ...] = ()
    defaults: Mapping[str, Any] = field(default_factory=dict)
    absent_means: Mapping[str, Any] = field(default_factory=dict)
    constant_answer: bool = False


_ANSWER_MODES = _Declared(("answer_mode", "shuffle_options"), {"answer_mode": "generate", "shuffle_options": None})
_TRAIN_FRACTION = _Declared(("train_fraction",))  # recorded only when set, so any recorded value is a variant
# What ddibench's reference systems declared when results began to record their variant and constant-answer flag
# (ddibench 0.1.0, every system at version 1.0.0), by (name, version). Results written before then record neither;
# their card gets both from here, never from the code installed where they are read, so a bundle gives the same
# board row on every machine. A card of a system not named here (an outside author's) reads with no variant and no
# constant answer, as a board built without that system installed has always shown it. Frozen: a later change of a
# system's declaration reaches the board through the runs that record it.
DECLARED_BEFORE_RECORDING: Mapping[tuple[str, str], _Declared] = {
    ("cbr-ddi", "1.0.0"): _Declared(
        (
            "shuffle_options",
            "use_cases",
            "use_paths",
            "use_candidates",
            "answer",
            "gnn_features",
            "lam",
            "sampling",
            "k_cases",
        ),
        {
            "shuffle_options": None,
            "use_cases": True,
            "use_paths": True,
            "use_candidates": True,
            "gnn_features": "descriptions",
            "lam": None,
            "sampling": True,
            "k_cases": 5,
        },
        {"gnn_features": "morgan"},
    ),
    ("cladd", "1.0.0"): _Declared(
        ("use_kg_team", "use_drugrel", "use_biorel", "use_mu", "use_captioning_tool", "annotations", "k_related"),
        {
            "use_kg_team": True,
            "use_drugrel": True,
            "use_biorel": True,
            "use_mu": True,
            "use_captioning_tool": True,
            "annotations": "both",
            "k_related": 5,
        },
    ),
    ("gin", "1.0.0"): _TRAIN_FRACTION,
    ("morgan-sklearn", "1.0.0"): _TRAIN_FRACTION,
    ("k-paths", "1.0.0"): _ANSWER_MODES,
    ("kaping", "1.0.0"): _ANSWER_MODES,
    ("naive-cbr", "1.0.0"): _ANSWER_MODES,
    ("zero-shot", "1.0.0"): _ANSWER_MODES,
    ("majority", "1.0.0"): _Declared(constant_answer=True),
    ("popularity", "1.0.0"): _Declared(constant_answer=True),
}
MAX_VARIANT_CHARS = 500  # a variant names a few configuration values; a bundle's card is read as hostile input


def declared_before_recording(card: Mapping[str, Any]) -> dict[str, Any]:
    """The variant and constant-answer flag of a system card written before cards recorded them, from its system's
    name, version and configuration and what that system declared then (:data:`DECLARED_BEFORE_RECORDING`)."""
    declared = DECLARED_BEFORE_RECORDING.get((str(card.get("name")), str(card.get("version"))), _Declared())
    config = card.get("config")
    config = {**declared.absent_means, **config} if isinstance(config, dict) else {}
    return {
        "variant": variant_name(declared.variant_keys, config, declared.defaults),
        "constant_answer": declared.constant_answer,
    }


class SystemCard(_Record):
    name: str
    version: str
    description: str = ""
    config: dict[str, Any] = {}
    config_hash: str
    deviations: list[str] = []
    # where the adapter's code comes from: entry point, distribution and version, source URL or checkout,
    # commit, and the sha256 of its files (ddibench.registry.system_provenance); empty in older results
    provenance: dict[str, Any] = {}
    variant: str = Field("", max_length=MAX_VARIANT_CHARS)
    """How the run's answers were made, as its system named it when it ran (:meth:`ddibench.system.BaseSystem.variant`:
    the variant keys its configuration sets off their defaults, ``use_mu=false``); '' for the system itself. The
    board shows a run with a variant apart, under this name, whether or not the system is installed where it is
    built. Results written before it was recorded get it from :data:`DECLARED_BEFORE_RECORDING`."""
    constant_answer: bool = False
    """Whether the system answers the same for every sample on purpose (a floor such as majority:
    :attr:`ddibench.system.BaseSystem.constant_answer`), so reports and the board do not flag its collapsed answers.
    Results written before it was recorded get it from :data:`DECLARED_BEFORE_RECORDING`."""

    @model_validator(mode="before")
    @classmethod
    def _upgrade(cls, data: Any) -> Any:
        """Read a card written before it recorded its variant and constant-answer flag."""
        if isinstance(data, dict) and not {"variant", "constant_answer"} <= data.keys():
            return {**declared_before_recording(data), **data}
        return data


class Seeds(_Record):
    run: int
    bootstrap: int
    limit_sampling: int | None = None


class Scoring(_Record):
    """How the answers were scored: the evaluator's non-default options, its scorers' identities, and
    what its model-based scoring recorded (judge, SelfCheckGPT)."""

    options: dict[str, Any] = {}
    evaluator: dict[str, Any] | None = None  # {"kind", "version"}: runs scored by another version never mix
    scorers: dict[str, Any] | None = None
    judge: dict[str, Any] | None = None
    second_judge: dict[str, Any] | None = None
    judge_agreement: dict[str, Any] | None = None
    selfcheck: dict[str, Any] | None = None

    @model_serializer(mode="wrap")
    def _without_empty(self, handler: Any) -> dict[str, Any]:
        return {k: v for k, v in handler(self).items() if v is not None and v != {}}


class Manifest(_Record):
    """Everything a number needs to be traced: code, data, system, models, hardware, seeds, scoring."""

    schema_version: int = Field(RESULTS_SCHEMA_VERSION, alias="schema")
    created: str
    ddibench_version: str
    git_commit: str | None = None
    git_dirty: bool | None = None
    task: TaskCard
    system: SystemCard
    models: dict[str, ModelEntry] = {}
    profile: ProfileRecord
    packages: dict[str, str | None] = {}
    seeds: Seeds
    split: str
    limit: int | None = None
    submittable: bool
    not_submittable_reason: str | None = None
    n_samples: int
    sample_ids_sha256: str
    scoring: Scoring = Scoring()
    sessions: int = 0
    sessions_killed: int = 0  # sessions that never wrote their end (their time is estimated from the journal)

    @property
    def answer_model(self) -> str:
        """The model a board row names, the one that wrote the answers: the generator's spec, else the first role's
        that is not an input role (:data:`ddibench.system.INPUT_ROLES`: a describer's features, a judge's grades),
        else '—' (no LLM wrote the answers)."""
        if "generator" in self.models:
            return self.models["generator"].spec
        answering = [entry.spec for role, entry in self.models.items() if role not in INPUT_ROLES]
        return answering[0] if answering else "—"


def schema1_metric_specs(names: Iterable[str]) -> list[MetricSpec]:
    """The declarations of metrics recorded before runs declared them (results of schema 1, results stores of
    the same builds): only the classification and text evaluators' metrics existed then."""
    known = {m.name: m for m in (*CLASSIFICATION_METRICS, *TEXT_METRICS)}
    return [known[name] for name in names if name in known]


class Results(_Record):
    """``results.json``: metrics with intervals, cost, timing and the manifest."""

    schema_version: int = Field(RESULTS_SCHEMA_VERSION, alias="schema")
    run_id: str
    task: str
    system: str
    evaluation: EvaluationResult
    cost: Cost = Cost()
    timing: Timing = Timing()
    system_info: dict[str, Any] = {}
    floors: dict[str, Any] = {}  # what answers without skill score on the same samples (majority, uniform random)
    manifest: Manifest
    scored_from: str | None = (
        None  # digest of what these results were computed from (runner/scoring.py: scoring_inputs)
    )

    @model_validator(mode="before")
    @classmethod
    def _upgrade(cls, data: Any) -> Any:
        """Read schema 1: fill in the metric declarations and scoring options it did not record."""
        if not isinstance(data, dict) or data.get("schema", RESULTS_SCHEMA_VERSION) != 1:
            return data
        data = json.loads(json.dumps(data))
        evaluation = data.get("evaluation") or {}
        if isinstance(evaluation, dict) and not evaluation.get("metric_specs"):
            evaluation["metric_specs"] = [m.model_dump() for m in schema1_metric_specs(evaluation.get("metrics", {}))]
        manifest = data.get("manifest") or {}
        scoring = manifest.get("scoring") if isinstance(manifest, dict) else None
        if isinstance(scoring, dict) and "options" not in scoring and "scorers" in scoring:
            from ddibench.evaluation import scoring_encoder_of

            options: dict[str, Any] = {"selfcheck": (scoring.get("selfcheck") or {}).get("n", 0)}
            if "judge" not in scoring:
                options["judge"] = False
            encoder = scoring_encoder_of(scoring)
            if encoder:
                options["scorer_encoder"] = encoder
            scoring["options"] = {k: v for k, v in options.items() if (k, v) not in (("selfcheck", 3), ("judge", True))}
        if isinstance(manifest, dict):
            manifest.setdefault("schema", 1)
        return data

    @property
    def bootstrap_spec(self) -> BootstrapSpec:
        """How the intervals were computed (replicates, seed, clustering, interval method)."""
        return BootstrapSpec.from_record(self.evaluation.bootstrap)

    @property
    def primary(self) -> tuple[str, float, float | None, float | None]:
        name = self.evaluation.primary_metric
        m = self.evaluation.metrics[name]
        return name, m.value, m.ci_low, m.ci_high


class BundleSystem(_Record):
    name: str
    version: str
    config_hash: str


class Compaction(_Record):
    """How a compact bundle (``ddibench submit --compact``) was reduced from its run's journal: each
    prediction keeps only the answer fields the task's metrics read, and a handful of samples keep their whole
    trace; the others keep their LLM call records, which the identity and cost checks read, and what the
    ceilings read (:func:`ddibench.runner.ceilings.evidence`)."""

    answer_fields: list[str]
    whole_traces: int
    note: str = ""
    whole_trace_ids: list[str] | None = None
    """The samples whose whole trace the bundle keeps, in the run's order: a seeded draw from the run's samples
    (:attr:`whole_trace_seed`). None in bundles packed before the draw: they keep the first ``whole_traces``."""
    whole_trace_seed: int | None = None
    """The seed of that draw (None: the first ``whole_traces`` samples, the rule of older bundles)."""

    def whole_ids(self, sample_ids: Sequence[str]) -> list[str]:
        """The ids of the samples (``sample_ids``: the run's, in its order) whose whole trace the bundle keeps."""
        if self.whole_trace_ids is not None:
            return list(self.whole_trace_ids)
        return list(sample_ids[: self.whole_traces])


class BundleIndex(_Record):
    """``bundle.json``: what a submission bundle holds and the sha256 of every member."""

    format: int = BUNDLE_FORMAT
    created: str
    ddibench_version: str
    run_id: str
    task: TaskRef
    system: BundleSystem
    hashes: dict[str, str]
    trust_tier: str = "self-reported"
    compact: Compaction | None = None  # None: the predictions as the run wrote them


# -- reading -------------------------------------------------------------------------------------


def read_json(path: Path, what: str) -> Any:
    """A JSON file of a run directory, or a one-line error saying what is wrong with it."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RunDirError(f"{path} does not exist", "give a run directory printed by 'ddibench run'") from None
    except UnicodeDecodeError:
        raise RunDirError(
            f"{path} is not UTF-8 text ({what})", "the file is damaged; start a fresh run directory"
        ) from None
    except OSError as exc:
        raise RunDirError(f"cannot read {path}: {exc.strerror or exc}", "check the path and its permissions") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise RunDirError(
            f"{path} is not valid JSON ({what}: {exc.msg} at line {exc.lineno})",
            "the file is damaged or was cut off; start a fresh run directory",
        ) from None


def parse_record(model: type[_Record], data: Any, where: str) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        raise RunDirError(
            f"{where} is not a valid {model.__name__} record ({loc}: {err['msg']})",
            "the file was edited or written by another tool; start a fresh run directory",
        ) from None


def read_identity(path: Path) -> RunIdentity:
    return parse_record(RunIdentity, read_json(path, "run identity"), str(path))


def read_results(path: Path) -> Results:
    return parse_record(Results, read_json(path, "results"), str(path))
