"""Systems under test: the protocol an adapter implements, and what a run hands it.

A system is a class registered under the ``ddibench.systems`` entry-point group. The runner builds it
from its pydantic ``Config`` (system defaults, then the profile's budget, then ``--config`` overrides),
calls ``prepare`` once with the *training view* of the task (training and validation splits only; the
test split is never passed), then ``predict`` on chunks of *blinded* samples (no targets), and journals
each returned :class:`~ddibench.schema.Prediction`.

A system may also declare its work before any of it is done (:class:`Planned`): ``plan(view, samples,
ctx)`` returns the :class:`Phase` list ``ddibench run --plan`` prints (training epochs, LLM calls per
role, prompt and generated tokens). :meth:`BaseSystem.plan` gives a default for a system that makes one
LLM call per item; a multi-stage or trained system declares its own.
"""

from __future__ import annotations

import json
import logging
import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, ValidationError, model_serializer

from ddibench.errors import ConfigError
from ddibench.hashing import config_hash, keep_text, sha256_text
from ddibench.schema import DrugPair, Molecule, Prediction, Question, Sample

if TYPE_CHECKING:
    from ddibench.artifacts import ArtifactStore
    from ddibench.llm import ChatRequest, ChatResult, LLMClient, LLMPool
    from ddibench.profiles import Profile
    from ddibench.task import Lazy, Task


class ProgressHandle(Protocol):
    def advance(self, n: int = 1, *, cached: bool = False) -> None:
        """``n`` items done; ``cached``: done without work (answers from the response cache, resumed samples),
        shown apart and left out of the rate and the ETA."""

    def update(self, *, total: int | None = None, description: str | None = None) -> None: ...
    def close(self) -> None: ...


class Progress(Protocol):
    def task(self, description: str, total: int | None) -> ProgressHandle: ...

    def note(self, message: str) -> None:
        """Say what is happening during a long step that has no count (loading data, starting a server)."""


class _NullHandle:
    def advance(self, n: int = 1, *, cached: bool = False) -> None:
        pass

    def update(self, *, total: int | None = None, description: str | None = None) -> None:
        pass

    def close(self) -> None:
        pass


class NullProgress:
    def task(self, description: str, total: int | None) -> ProgressHandle:
        return _NullHandle()

    def note(self, message: str) -> None:
        pass


class TrainingProgress:
    """Training progress a person can read: the steps inside the current epoch, an ETA from the steps
    done so far, and the early-stopping state.

    One bar counts optimiser steps over the whole schedule (``max_epochs`` x ``steps_per_epoch``), so its
    rate, and with it the ETA, is known within the first minute of epoch 1 rather than after an epoch
    of minutes; the ETA is an upper bound when early stopping may end training sooner. At the end of
    each epoch a line says where training stands ("mlp epoch 9/50: valid macro-F1 0.612, best 0.630 at
    epoch 7, patience 2/5, 94 s"); when training stops early the bar's total shrinks to the steps taken,
    so it never ends at "13/50". An epoch longer than declared (EmerGNN resamples its pairs every epoch)
    raises the steps expected of every epoch, so the total grows and the bar never passes 100%."""

    def __init__(
        self,
        progress: Progress,
        name: str,
        max_epochs: int,
        steps_per_epoch: int,
        metric: str,
        patience: int | None = None,
    ) -> None:
        self.progress, self.name, self.metric, self.patience = progress, name, metric, patience
        self.max_epochs, self.steps_per_epoch = max_epochs, max(1, steps_per_epoch)
        self.epoch, self.steps = 1, 0
        self.bar = progress.task(self._description(), max_epochs * self.steps_per_epoch)

    def _description(self) -> str:
        return f"training {self.name}: epoch {self.epoch}/{self.max_epochs}"

    def step(self, n: int = 1) -> None:
        """``n`` optimiser steps done (batches of the current epoch)."""
        self.steps += n
        if self.steps > self.max_epochs * self.steps_per_epoch:
            self._expect(-(-self.steps // self.epoch))
        self.bar.advance(n)

    def _expect(self, steps_per_epoch: int) -> None:
        """Every epoch is now expected to take ``steps_per_epoch`` steps (more than declared): the total grows."""
        if steps_per_epoch > self.steps_per_epoch:
            self.steps_per_epoch = steps_per_epoch
            self.bar.update(total=self.max_epochs * steps_per_epoch)

    def epoch_done(
        self,
        epoch: int,
        seconds: float,
        value: float | None = None,
        best: float | None = None,
        best_epoch: int | None = None,
        waited: int | None = None,
    ) -> None:
        """Epoch ``epoch`` (1-based) ended: say its validation score and the early-stopping state; steps the
        epoch did not take (a short last batch skipped) are counted, so the bar stays on schedule."""
        if self.steps > epoch * self.steps_per_epoch:  # longer than declared: later epochs are expected as long
            self._expect(-(-self.steps // epoch))
        missing = epoch * self.steps_per_epoch - self.steps
        if missing > 0:
            self.step(missing)
        parts = [f"{self.name} epoch {epoch}/{self.max_epochs}"]
        state = []
        if value is not None:
            state.append(f"valid {self.metric} {value:.3f}")
        if best is not None and best_epoch is not None:
            state.append(f"best {best:.3f} at epoch {best_epoch}")
        if waited is not None and self.patience:
            state.append(f"patience {waited}/{self.patience}")
        state.append(f"{seconds:.0f} s")
        self.progress.note(f"{parts[0]}: " + ", ".join(state))
        self.epoch = epoch + 1
        if self.epoch <= self.max_epochs:
            self.bar.update(description=self._description())

    def finish(self, epochs_run: int, stopped_early: bool = False) -> None:
        """Training ended after ``epochs_run`` complete epochs: the schedule ran out, early stopping ended
        it (``stopped_early``), or it was interrupted (fewer epochs and not stopped early)."""
        if epochs_run >= self.max_epochs:
            self.bar.update(description=f"trained {self.name}: {epochs_run} epoch{'s' if epochs_run != 1 else ''}")
        elif stopped_early:
            self.bar.update(
                total=max(self.steps, 1), description=f"trained {self.name}: {epochs_run} epochs (early stopping)"
            )
        else:
            self.bar.update(description=f"training {self.name} interrupted after {epochs_run} complete epochs")
        self.bar.close()


class BestEpoch:
    """Early stopping's bookkeeping: the best validation value so far, its epoch (1-based), a CPU copy of
    the model's weights at that epoch, and how many evaluations in a row have brought nothing better.

    The first value is the best so far (a NaN never is); ``lower_is_better`` for losses. ``should_stop``
    once ``patience`` evaluations in a row brought nothing better (never without a patience)."""

    def __init__(self, patience: int | None = None, lower_is_better: bool = False) -> None:
        self.patience, self.lower_is_better = patience, lower_is_better
        self.value = math.inf if lower_is_better else -math.inf
        self.epoch: int | None = None
        self.state: dict[str, Any] | None = None
        self.waited = 0

    def update(self, epoch: int, value: float, model: Any) -> bool:
        """Epoch ``epoch`` scored ``value`` on validation: keep ``model``'s weights if it is the best yet."""
        better = value < self.value if self.lower_is_better else value > self.value
        if better:
            self.value, self.epoch, self.waited = value, epoch, 0
            self.state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
        else:
            self.waited += 1
        return better

    @property
    def should_stop(self) -> bool:
        return self.patience is not None and self.waited >= self.patience


class TrainingView:
    """What ``prepare`` may see: the task, its training and validation splits, shared resources.

    A split may be given as a :class:`~ddibench.task.Lazy`: it is built when a system first reads it, so
    a system that trains on nothing (zero-shot) never makes the run build 100,000 training samples."""

    __slots__ = ("task", "_train", "_valid", "resources")
    task: Task  # the task: name, label_space, family, evaluator() (its test split is not reachable from here)
    resources: dict[str, Any]  # what the task hands to systems (the keys of ddibench.task.RESOURCES it declares)

    def __init__(
        self,
        task: Task,
        train: tuple[Sample, ...] | Lazy,
        valid: tuple[Sample, ...] | Lazy,
        resources: dict[str, Any] | None = None,
    ) -> None:
        self.task = task
        self._train = train
        self._valid = valid
        self.resources = resources if resources is not None else {}

    @property
    def train(self) -> tuple[Sample, ...]:
        """The training split, with targets (built on first read)."""
        from ddibench.task import Lazy

        if isinstance(self._train, Lazy):
            self._train = self._train.build()
        return self._train  # type: ignore[return-value]

    @property
    def valid(self) -> tuple[Sample, ...]:
        """The validation split, with targets (built on first read); for model selection, never for training on test."""
        from ddibench.task import Lazy

        if isinstance(self._valid, Lazy):
            self._valid = self._valid.build()
        return self._valid  # type: ignore[return-value]


@dataclass
class RunContext:
    """Everything a system may use during a run besides its own configuration."""

    task: Task  # the task being run (name, label_space, family, evaluator)
    profile: Profile  # the declared hardware profile; profile.budget_for(system, task) gives its budget
    seed: int  # the run's seed: seed every random choice with it
    artifacts: ArtifactStore  # where prepare() keeps what it builds, keyed by what it was built from
    llm: LLMPool | None = None  # the models of the run (use model(role))
    progress: Progress = field(default_factory=NullProgress)  # progress.task(description, total) for long steps
    run_dir: Path | None = None  # the run's directory (None in tests that run a system directly)
    resources: dict[str, Any] = field(default_factory=dict)  # the task's resources, as in the training view
    log: logging.Logger = field(default_factory=lambda: logging.getLogger("ddibench.run"))  # a logger for the run

    def remember_text(self, text: str) -> str:
        """Keep a long text shared by many samples (a system prompt) once, in ``<run dir>/texts/<sha256>.txt``.

        Traces refer to it by hash instead of repeating it in every journal line.
        """
        return keep_text(self.run_dir, text) if self.run_dir is not None else sha256_text(text)

    def model(self, role: str = "generator") -> LLMClient:
        """The client of a role the system declares in ``llm_roles`` (chat, cached, retried, accounted)."""
        if self.llm is None:
            raise RuntimeError("this run has no LLM; declare the role in the system's llm_roles")
        return self.llm.client(role)


# Roles whose models never write a run's answers: the describer writes what a system reads (drug descriptions, case
# notes), the judges score the answers. A run whose only models play these roles is not an LLM system's run (CBR-DDI's
# GNN module alone on the describer's descriptions): its results name no answering model, and the board marks it no LLM row
INPUT_ROLES = ("describer", "judge", "second_judge")
CHARS_PER_TOKEN = 4  # the plan's token estimate: characters / 4 (English prose; drug names and ids run a little denser)


def estimate_tokens(text: str) -> int:
    """Tokens of ``text`` as the plan counts them: characters / :data:`CHARS_PER_TOKEN`, rounded up."""
    return -(-len(text) // CHARS_PER_TOKEN)


@dataclass(frozen=True)
class Phase:
    """One stage of a run's work, declared before it is done (``ddibench run --plan`` prints them).

    A phase trains (``epochs``, with ``seconds`` when the system knows its rate) or makes ``calls`` LLM
    calls of one ``role``; tokens are totals over the phase. ``generated_tokens`` counts every call's
    ``max_tokens``: an upper bound. ``upper_bound``: ``calls`` is the most the phase can make (refinement
    rewrites only the cases it answered wrongly). ``requests``: the phase's calls exactly as the run will make
    them, where the system can write them before the run (make those calls with :meth:`LLMClient.ask`); the
    plan counts the ones the response cache already answers apart (``ddibench run --plan``)."""

    name: str
    role: str | None = None  # the LLM role making the calls (None: no LLM in this phase)
    calls: int = 0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    epochs: int = 0
    seconds: float | None = None  # the phase's own time, for work that is not LLM calls (training), when known
    note: str = ""
    upper_bound: bool = False
    requests: tuple[ChatRequest, ...] = ()


@dataclass(frozen=True)
class PlanContext:
    """What a system's ``plan`` may use besides its configuration: the run's profile and seed, and the artifact
    store the run will use (look an artifact up with ``get``, which builds nothing; None: plan from empty caches)."""

    profile: Profile
    seed: int
    artifacts: ArtifactStore | None = None


@runtime_checkable
class Planned(Protocol):
    """A system that declares its work (optional: the runner falls back to :meth:`BaseSystem.plan`'s default)."""

    def plan(self, view: TrainingView, samples: Sequence[Sample], ctx: PlanContext) -> list[Phase]: ...


@runtime_checkable
class System(Protocol):
    """The protocol every adapter implements (subclassing :class:`BaseSystem` is the easy way)."""

    name: ClassVar[str]
    version: ClassVar[str]
    description: ClassVar[str]
    llm_roles: ClassVar[tuple[str, ...]]  # roles whose models the runner must start
    batch_size: ClassVar[int]  # samples per predict() call
    max_concurrency: ClassVar[int]  # predict() calls in flight at once

    @property
    def config(self) -> BaseModel: ...  # its validated configuration (read-only: a subclass narrows the type)

    def supports(self, task: Task) -> bool: ...

    async def prepare(self, view: TrainingView, ctx: RunContext) -> None: ...

    async def predict(self, samples: Sequence[Sample], ctx: RunContext) -> list[Prediction]: ...

    def run_info(self) -> dict[str, Any]: ...  # what it did in this session beyond its config (kept in the results)

    def deviations(self) -> list[str]: ...  # known differences from the published method (stated in every manifest)


@runtime_checkable
class NamesVariant(Protocol):
    """A system whose configuration can change how it answers (optional: :class:`BaseSystem` has it). The run
    records the name :meth:`BaseSystem.variant` gives, so the board shows the run apart wherever it is built."""

    def variant(self, config: dict[str, Any]) -> str: ...


@runtime_checkable
class AnswersByDesign(Protocol):
    """A system that may answer the same for every sample on purpose (optional: :class:`BaseSystem` has it)."""

    constant_answer: ClassVar[bool]


@runtime_checkable
class ChoosesRoles(Protocol):
    """A system whose configuration can leave an LLM role idle (optional: :class:`BaseSystem` has it)."""

    def used_roles(self, config: Any) -> tuple[str, ...]: ...


# every member of System: the registry refuses a class that lacks one, so the runner can use them without a default
SYSTEM_MEMBERS = (
    "name",
    "version",
    "description",
    "llm_roles",
    "batch_size",
    "max_concurrency",
    "supports",
    "prepare",
    "predict",
    "run_info",
    "deviations",
)


_Config = TypeVar("_Config", bound="SystemConfig")


class SystemConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    # keys added after runs of the system were recorded: dumped only when set off their default, so the recorded
    # configuration (and its hash: run ids, artifacts, the verification of shipped bundles) of every run that
    # leaves them alone stays what it was
    added_keys: ClassVar[tuple[str, ...]] = ()
    # keys added after runs of the system were recorded whose default is not what those runs did: a recorded
    # configuration that lacks one ran with the value named here (cbr-ddi's gnn_features: "morgan"). Unlike
    # added_keys they are always dumped, so a new run at the new default never shares a configuration hash (run id,
    # artifacts) with a recorded one, and the recorded ones keep theirs
    absent_means: ClassVar[dict[str, Any]] = {}

    @model_serializer(mode="wrap")
    def _without_added_defaults(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        for key in self.added_keys:
            if key in data and getattr(self, key) == type(self).model_fields[key].default:
                del data[key]
        return data

    @classmethod
    def as_run(cls, recorded: Mapping[str, Any]) -> dict[str, Any]:
        """A recorded configuration with every key of :attr:`absent_means` it lacks as the run had it."""
        return {**cls.absent_means, **recorded}

    @classmethod
    def from_record(cls: type[_Config], recorded: Mapping[str, Any]) -> _Config:
        """The configuration a recorded run ran with, a key of :attr:`absent_means` its record lacks read as named
        there. ValueError (pydantic's ValidationError is one) when the record is not one this configuration
        writes: a value it refuses, a key it would have recorded otherwise."""
        config = cls.model_validate(cls.as_run(recorded))
        dumped = config.model_dump(mode="json")
        written = {k: v for k, v in dumped.items() if k in recorded or k not in cls.absent_means}
        if written != dict(recorded):
            raise ValueError(f"{cls.__name__} does not record this configuration")
        return config


class Counters:
    """What a system counts as it answers, by name (answers given, invalid answers, fallbacks taken, calls of a
    role). A system reports them as ``run_info()["counters"]``, and the runner adds each name up over every session
    of a run (:mod:`ddibench.runner.manifest`), so every count is an int that only grows."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}

    def add(self, name: str, n: int = 1) -> None:
        """Count ``n`` more of ``name``."""
        self._counts[name] = self._counts.get(name, 0) + n

    def set(self, name: str, value: int) -> None:
        """Record ``name`` as ``value`` (a flag counted once per session, such as an index built in it)."""
        self._counts[name] = value

    def __getitem__(self, name: str) -> int:
        """The count of ``name``; 0 for a name never counted."""
        return self._counts.get(name, 0)

    def as_dict(self) -> dict[str, int]:
        """A copy, in the order the names were first counted."""
        return dict(self._counts)


class BaseSystem(ABC):
    """Convenience base: configuration handling, counters and sensible class defaults."""

    name: ClassVar[str] = ""  # the name runs and the board know it by (``ddibench run -s NAME``)
    version: ClassVar[str] = "0"  # bump when answers change for the same configuration: run ids and artifacts follow it
    description: ClassVar[str] = ""  # one line for 'ddibench list systems' and the board
    paper: ClassVar[str] = ""  # the paper the system follows: its citation with a URL (arXiv, DOI); "" for none
    code: ClassVar[str] = ""  # the URL of the paper's authors' own code; "" where none is published or known
    # its options (pydantic): defaults, then the profile's budget, then --config
    Config: ClassVar[type[SystemConfig]] = SystemConfig
    families: ClassVar[tuple[str, ...]] = ()  # the task families it serves (empty: every family)
    llm_roles: ClassVar[
        tuple[str, ...]
    ] = ()  # the models the runner starts for it (ctx.model(role)); -m ROLE=SPEC sets one
    batch_size: ClassVar[int] = 1  # samples per predict() call
    max_concurrency: ClassVar[int] = 64  # predict() calls in flight at once (at most the run's --concurrency)
    # roles whose requests mostly generate (long answers from short prompts: descriptions, explanations): on the
    # embedded server their independent requests run together in its slots; every other role's go one at a time,
    # since one prompt already takes both cores (benchmarks/headline.py). Remote endpoints and --concurrency N
    # treat all roles alike
    generation_roles: ClassVar[tuple[str, ...]] = ()
    # configuration keys that change how answers are made rather than how well (an answer mode, an option
    # order, a paper's ablation switch): a run with another value of one is shown apart on the board, named by
    # the values that differ, never as the system itself
    variant_keys: ClassVar[tuple[str, ...]] = ()
    # answers the same for every sample by design (the majority and popularity floors): its collapsed answer
    # spread is what it is for, so reports and the board do not flag it
    constant_answer: ClassVar[bool] = False

    def __init__(self, config: SystemConfig | None = None) -> None:
        self.config = config if config is not None else self.Config()
        self.counters = Counters()  # what :meth:`count` counts; a system reports it in its run_info

    def count(self, name: str, n: int = 1) -> None:
        """Count ``n`` more of ``name`` in :attr:`counters`."""
        self.counters.add(name, n)

    @classmethod
    def variant(cls, config: dict[str, Any]) -> str:
        """The run's variant as ``key=value`` pairs of :attr:`variant_keys` that differ from the defaults ('' for none),
        each value as ``--config`` takes it (``use_mu=false``)."""
        defaults = cls.Config().model_dump(mode="json")
        # a run recorded before such a key ran with its old value
        return variant_name(cls.variant_keys, cls.Config.as_run(config), defaults)

    @classmethod
    def build(cls, *layers: dict[str, Any]) -> BaseSystem:
        """Build from configuration layers (later layers win), with one-line errors for bad keys."""
        merged: dict[str, Any] = {}
        for layer in layers:
            merged.update(layer)
        known = set(cls.Config.model_fields)
        unknown = [k for k in merged if k not in known]
        if unknown:
            import difflib

            close = difflib.get_close_matches(unknown[0], sorted(known), n=1, cutoff=0.5)
            fix = f"did you mean '{close[0]}'?" if close else f"see 'ddibench list systems -v' for {cls.name}'s options"
            raise ConfigError(f"unknown {cls.name} config key '{unknown[0]}'", fix)
        try:
            return cls(cls.Config(**merged))
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"])
            raise ConfigError(
                f"{cls.name} config '{where}': {err['msg']}", f"see 'ddibench list systems -v' for {cls.name}'s options"
            ) from None

    @classmethod
    def used_roles(cls, config: SystemConfig) -> tuple[str, ...]:
        """The LLM roles a run under ``config`` calls: the runner starts a model for each, and a run records and
        is verified against exactly these. Every role of :attr:`llm_roles` by default; a system whose
        configuration can leave a role idle (an ablation that answers without the LLM) names the ones it uses,
        so such a run starts no model for the others (and needs no ``-m``)."""
        return cls.llm_roles

    def artifact_key(
        self, task: Task, seed: int | None = None, *, whole_config: bool = True, **built_from: Any
    ) -> dict[str, Any]:
        """The key of an artifact this system builds from ``task`` (a trained model, a case repository), for
        ``ctx.artifacts``: this system's name and version, the hash of its whole configuration, the task and the hash
        of its data, the seed where the artifact depends on it, and ``built_from``, whatever else went into it (the
        configuration as trained, a training-code version, a graph's card).

        ``whole_config=False`` leaves the configuration's hash out, for an artifact that depends on a few options
        only (named in ``built_from``): runs that differ in the other options then share it. The key's hash names
        the artifact's folder, so a key must stay what it was, byte for byte, or every artifact built under it is
        built again: a system adds what is new in ``built_from`` (and only where it applies), never here."""
        key: dict[str, Any] = {"system": self.name, "version": self.version}
        if whole_config:
            key["config_hash"] = system_config_hash(self)
        key |= {"task": task.name, "data_sha256": task.data_sha256}
        if seed is not None:
            key["seed"] = seed
        return key | built_from

    def supports(self, task: Task) -> bool:
        """Whether it serves ``task`` (by default: the task's family is one of :attr:`families`; a system that can
        answer any family of a kind overrides it and reads ``task.input_kind`` and ``task.answer``)."""
        return not self.families or task.family in self.families

    async def prepare(self, view: TrainingView, ctx: RunContext) -> None:
        """Build what predict() needs from the training view only (train and valid splits), once per run;
        keep what is costly in ``ctx.artifacts`` so a second run finds it. Nothing by default."""
        return None

    def run_info(self) -> dict[str, Any]:
        """What the system did in this session beyond its config (e.g. a training log); kept in the results."""
        return {}

    def deviations(self) -> list[str]:
        """Known differences from the published method under this configuration (stated in every manifest)."""
        return []

    def plan(self, view: TrainingView, samples: Sequence[Sample], ctx: PlanContext) -> list[Phase]:
        """The work of a run on ``samples`` (blinded), before any of it is done. The default fits a system that
        makes one call of its first LLM role per item: the prompt is estimated from the item's input and, unless
        the items are questions (answered in text), the task's label options (the prompt template is the system's own, so a
        system that knows it better, or does more, declares its own plan); no phase without an LLM role."""
        if not self.llm_roles:
            return []
        questions = bool(samples) and isinstance(samples[0].input, Question)  # answered in text, not from options
        options = 0 if questions else sum(estimate_tokens(label.name) + 2 for label in view.task.label_space)
        prompt = sum(estimate_tokens(_input_text(s)) for s in samples) + len(samples) * (options + 150)
        max_tokens = int(getattr(self.config, "max_tokens", 0) or 256)
        note = "one call per item (the default plan: the input, the label options unless a question, ~150 tokens more)"
        return [Phase("answering", self.llm_roles[0], len(samples), prompt, len(samples) * max_tokens, note=note)]

    @abstractmethod
    async def predict(self, samples: Sequence[Sample], ctx: RunContext) -> list[Prediction]:
        """One prediction per sample, in any order."""


def _input_text(sample: Sample) -> str:
    """A sample's input as the text a prompt would hold (drug names, a molecule's SMILES, a question)."""
    payload = sample.input
    if isinstance(payload, DrugPair):
        return f"Drug A: {payload.head.name}. Drug B: {payload.tail.name}."
    if isinstance(payload, Molecule):
        return f"{payload.name} {payload.smiles}"
    if isinstance(payload, Question):
        return payload.text
    return str(payload)


def variant_name(keys: Sequence[str], config: Mapping[str, Any], defaults: Mapping[str, Any]) -> str:
    """A variant's name: ``key=value`` for each of ``keys`` that ``config`` sets off ``defaults`` (a key the defaults
    leave out is off them whenever set), each value as ``--config`` takes it (``use_mu=false``); '' for none."""

    def text(value: Any) -> str:
        return json.dumps(value) if isinstance(value, bool) or value is None else str(value)

    return ", ".join(f"{k}={text(config[k])}" for k in keys if k in config and config[k] != defaults.get(k))


def answer_variant(system: System) -> str:
    """The variant ``system`` answers in as configured (:meth:`BaseSystem.variant`; '' for a system that declares
    none): what the run records, so the board names it without the system installed."""
    if isinstance(system, NamesVariant):
        return system.variant(system.config.model_dump(mode="json"))
    return ""


def answers_constant_by_design(system: System) -> bool:
    """Whether ``system`` answers the same for every sample on purpose (:attr:`BaseSystem.constant_answer`)."""
    return isinstance(system, AnswersByDesign) and system.constant_answer


def configured_roles(system: System) -> tuple[str, ...]:
    """The LLM roles ``system`` calls as configured (:meth:`BaseSystem.used_roles`; a system that does not
    subclass :class:`BaseSystem` and defines no ``used_roles`` calls every role of its ``llm_roles``). ConfigError
    when it names a role its ``llm_roles`` do not declare."""
    roles = tuple(system.used_roles(system.config) if isinstance(system, ChoosesRoles) else system.llm_roles)
    undeclared = [r for r in roles if r not in system.llm_roles]
    if undeclared:
        raise ConfigError(
            f"system '{system.name}' uses LLM role '{undeclared[0]}', which its llm_roles do not declare",
            f"add it to {type(system).__name__}.llm_roles",
        )
    return roles


def system_config_hash(system: System) -> str:
    """The hash that names a system's configuration in run ids, artifacts and manifests."""
    return config_hash(
        {"system": system.name, "version": system.version, "config": system.config.model_dump(mode="json")}
    )


def parse_config_overrides(items: Sequence[str]) -> dict[str, Any]:
    """``--config key=value`` items; values are JSON when they parse as JSON, else strings."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"bad --config item '{item}'", "write key=value, e.g. --config max_epochs=5")
        try:
            out[key.strip()] = json.loads(value)
        except ValueError:
            out[key.strip()] = value
    return out


def llm_trace(role: str, messages: list[dict[str, Any]], result: ChatResult) -> dict[str, Any]:
    """The trace entry of one LLM call; the runner sums these into per-item cost.

    System messages are recorded by sha256 (see :meth:`RunContext.remember_text`), other messages in full.
    """
    recorded = [
        {"role": "system", "sha256": sha256_text(m["content"]), "chars": len(m["content"])}
        if m.get("role") == "system" and isinstance(m.get("content"), str)
        else m
        for m in messages
    ]
    return {"role": role, "messages": recorded, "response": result.text, **result.trace()}
