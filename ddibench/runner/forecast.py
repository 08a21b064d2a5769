"""What a run will cost, before it spends anything: ``ddibench run --plan``, and the summary a long run
prints in its first lines.

Contract: :func:`forecast` plans the run as :func:`~ddibench.runner.plan.plan_run` does (the same
task, system, configuration and samples) and asks the system for its :class:`~ddibench.system.Phase`
list; it starts no model, trains nothing and writes nothing (no run directory, no cache). Where a phase declares
its calls' requests (CBR-DDI's descriptions), it looks them up in the response cache, read-only, and counts the
calls the cache answers apart: they are neither timed nor priced (``--no-cache``: none is answered). Each
LLM phase is timed from its tokens at its role's model's throughput (:data:`THROUGHPUT`: rates measured
on this project's 2-core machines, named with their source in the output), one call at a time as the
embedded server answers them. Where ``ddibench doctor -m SPEC`` measured the model on this machine (with the
threads an embedded server would get now), its kept rate is used instead, so that the plan and the run agree. A
served or API model is timed at a throughput the caller declares (``ddibench run --plan --throughput
PROMPT,GEN``), else at the rate doctor kept for it, and is otherwise left untimed.
A phase that is not LLM calls brings its own seconds when the system knows them. Dollars come from per-model
prices (USD per 1,000 prompt / completion tokens: :func:`ddibench.prices.load_prices`, the dated table shipped
with the project under ``$DDIBENCH_PRICES``), each named with its source and date; an embedded model costs
nothing. On a profile with accelerators the plan also gives GPU hours: projected hours x the profile's
``accelerator_count``.

Tokens are estimates (:func:`~ddibench.system.estimate_tokens`: characters / 4), and generated tokens are
every call's ``max_tokens``: the time and dollars are upper bounds on the generating side.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ddibench.llm import ModelSpec
from ddibench.prices import Price, load_prices, price_for
from ddibench.runner.plan import RunRequest, build_system, training_view_of
from ddibench.runner.selection import run_samples
from ddibench.system import CHARS_PER_TOKEN, BaseSystem, Phase, PlanContext, Planned, configured_roles

LONG_RUN_S = 180.0  # a run projected to take longer prints its plan summary before it starts


@dataclass(frozen=True)
class Throughput:
    """Tokens a second one request gets from a model, and where the figures come from."""

    prompt: float
    generated: float
    source: str
    # generated tokens a second with the embedded server's slots all decoding (its generation roles' phases);
    # None: not measured, those phases are timed one request at a time
    generated_parallel: float | None = None


# the pinned embedded models, one request at a time on 2 cores (ENVIRONMENT.md of this project)
THROUGHPUT: dict[str, Throughput] = {
    "smollm2-135m-instruct": Throughput(377.0, 130.0, "measured with 2 threads, 2026-11-22 (ENVIRONMENT.md)"),
    "qwen2.5-coder-1.5b-instruct": Throughput(
        40.0, 10.0, "measured on an idle 2-core machine, 2026-11-25 (ENVIRONMENT.md; 20-25 / 1-3 under load)"
    ),
}
# the same on a busy machine, where the server gets one thread (runner.plan.embedded_threads)
THROUGHPUT_BUSY: dict[str, Throughput] = {
    "smollm2-135m-instruct": Throughput(
        55.0, 15.0, "measured with 1 thread under a load of 9-10 on 2 cores, 2026-11-28 (this machine is busy)"
    ),
}
ALIASES = {"smollm2": "smollm2-135m-instruct", "qwen2.5-coder-1.5b": "qwen2.5-coder-1.5b-instruct"}


@dataclass(frozen=True)
class PhaseCost:
    """A phase with its projected seconds (None: unknown) and dollars (None: no price known)."""

    phase: Phase
    model: str | None  # the role's model, as its spec displays
    seconds: float | None
    usd: float | None
    cached: int = 0  # of the phase's calls, those the response cache answers (of its declared requests)

    @property
    def share(self) -> float:
        """The share of the phase's calls the run will make (its tokens, time and dollars are that share)."""
        return 1.0 - self.cached / self.phase.calls if self.phase.calls else 1.0


@dataclass
class Forecast:
    """A run's plan: what it runs on, its phases with time and cost, and what the figures rest on."""

    system: str
    task: str
    split: str
    profile: str
    samples: int
    of: int  # samples in the split(s): ``samples`` is fewer under --limit
    models: dict[str, str]  # role -> model spec as displayed
    phases: list[PhaseCost]
    rates: dict[str, Throughput] = field(default_factory=dict)  # model -> the throughput its phases were timed at
    unpriced: list[str] = field(default_factory=list)  # models with no price known
    busy: str = ""  # the machine's load when it is busier than its CPUs (the rates are an idle machine's)
    prices: dict[str, Price] = field(default_factory=dict)  # model -> the price its phases were costed at
    accelerators: int = 0  # the profile's accelerator_count: GPU hours are hours x this

    @property
    def gpu_hours(self) -> float | None:
        """Projected hours x the profile's accelerators (None on a profile without accelerators)."""
        return self.seconds / 3600 * self.accelerators if self.accelerators else None

    @property
    def seconds(self) -> float:
        """The projected time of the phases whose time is known."""
        return sum(p.seconds or 0.0 for p in self.phases)

    @property
    def complete(self) -> bool:
        """Whether every phase has a projected time."""
        return all(p.seconds is not None for p in self.phases)

    @property
    def usd(self) -> float | None:
        """The projected dollars, or None while a model that is called has no price."""
        return None if self.unpriced else sum(p.usd or 0.0 for p in self.phases)

    def calls(self, role: str | None = None) -> int:
        """The run's LLM calls (of ``role``), those the response cache answers among them."""
        return sum(p.phase.calls for p in self.phases if role is None or p.phase.role == role)

    def cached(self, role: str | None = None) -> int:
        """Of :meth:`calls`, those the response cache answers: the run makes the rest."""
        return sum(p.cached for p in self.phases if role is None or p.phase.role == role)


def throughput_of(spec: ModelSpec, busy: bool = False) -> Throughput | None:
    """The rate ``ddibench doctor`` measured for this model here, with the threads an embedded server would get now
    (:func:`ddibench.llm._throughput.measured_rates`); else for an embedded pinned model the table's (on a ``busy``
    machine the one measured under load where there is one); else None."""
    from ddibench.llm._throughput import measured_rates
    from ddibench.runner.plan import embedded_threads

    kept = measured_rates(spec.display(), embedded_threads() if spec.is_embedded else None)
    if kept is not None:
        return Throughput(kept.prompt_per_s, kept.generated_per_s, kept.source(), kept.generated_parallel_per_s)
    if not spec.is_embedded:
        return None
    name = spec.model.lower()
    name = ALIASES.get(name, name)
    return (THROUGHPUT_BUSY.get(name) if busy else None) or THROUGHPUT.get(name)


def price_of(spec: ModelSpec, prices: Mapping[str, Price]) -> Price | None:
    """A model's price by its displayed spec, its ``provider:model`` or its name."""
    return price_for(spec.display(), prices) or price_for(f"{spec.provider}:{spec.model}", prices)


def parse_throughput(text: str) -> Throughput:
    """``PROMPT,GEN`` (tokens a second) as a declared :class:`Throughput`."""
    from ddibench.errors import ConfigError

    try:
        prompt, generated = (float(x) for x in text.split(","))
    except ValueError:
        prompt = generated = 0.0
    if not (prompt > 0 and generated > 0):
        raise ConfigError(
            f"throughput '{text}' is not PROMPT,GEN", "give two positive rates in tokens a second, e.g. 2000,150"
        )
    return Throughput(prompt, generated, "declared with --throughput (the rate this run gets from the endpoint)")


def forecast(
    request: RunRequest, prices: Mapping[str, Price] | None = None, throughput: Throughput | None = None
) -> Forecast:
    """The plan of ``request``'s run: nothing is started, trained or written (see the module docstring).
    ``prices``: per-model prices (default: :func:`~ddibench.prices.load_prices`); ``throughput``: the declared rate
    of every model without a measured one."""
    from ddibench.errors import ConfigError
    from ddibench.profiles import get_profile
    from ddibench.registry import get_task

    profile = get_profile(request.profile)
    task = get_task(request.task)
    system = build_system(request.system, profile, request.config, task.name)
    if not system.supports(task):
        raise ConfigError(
            f"system '{system.name}' does not support task '{task.name}' ({task.family})", "run 'ddibench list systems'"
        )
    selection = request.selection(task)
    split = selection.split
    data = task.load()
    of = sum(len(data.split(s)) for s in task.predicted_splits(split))
    samples = [s.blind() for s in run_samples(task, selection, data)]
    view = training_view_of(task, data, split)
    from ddibench.artifacts import ArtifactStore

    context = PlanContext(profile, request.seed, ArtifactStore(request.artifact_dir()))
    from ddibench.data.resolve import cache_root

    cache = cache_root() / "llm-cache.sqlite" if request.use_cache else None  # the file runner.plan.open_cache opens
    if isinstance(system, Planned):
        phases = system.plan(view, samples, context)
    else:  # a system that does not subclass BaseSystem and declares nothing: the one-call-per-item default
        phases = BaseSystem.plan(system, view, samples, context)  # type: ignore[arg-type]
    specs = request.role_models().for_roles(list(configured_roles(system)))
    load = busy()
    priced = load_prices() if prices is None else prices
    # on the embedded server, the system's generation roles fill its slots unless --concurrency sets them for all
    together = () if request.concurrency else tuple(getattr(system, "generation_roles", ()))
    out = _costed(
        request, system.name, split, len(samples), of, specs, phases, priced, bool(load), throughput, together, cache
    )
    out.busy = load
    out.accelerators = profile.accelerator_count
    return out


def busy() -> str:
    """``other work keeps 1.8 of 2 CPUs busy`` when other processes take at least one CPU (else ''): the embedded
    server then gets fewer threads (:func:`~ddibench.runner.plan.embedded_threads`) and runs far slower than on an
    idle machine. A thread count pinned with ``$DDIBENCH_THREADS`` on an idle machine is not busy: one idle thread
    runs at about half the two-thread rate, not at the rate measured under a load of 9."""
    import os

    from ddibench.runner.plan import other_work

    cpus = os.cpu_count() or 1
    load = other_work()
    if round(load) < 1:
        return ""
    return f"other work keeps {load:.1f} of {cpus} CPUs busy"


def _costed(
    request: RunRequest,
    system: str,
    split: str,
    n: int,
    of: int,
    specs: dict[str, ModelSpec],
    phases: list[Phase],
    prices: Mapping[str, Price],
    busy: bool = False,
    declared: Throughput | None = None,
    together: tuple[str, ...] = (),
    cache: Path | None = None,
) -> Forecast:
    from ddibench.llm import cached_calls

    out = Forecast(system, request.task, split, request.profile, n, of, {r: s.display() for r, s in specs.items()}, [])
    for phase in phases:
        spec = specs.get(phase.role) if phase.role else None
        seconds, usd = phase.seconds, None
        hits = cached_calls(spec, phase.requests, cache) if spec is not None and phase.requests and cache else 0
        share = PhaseCost(phase, None, None, None, hits).share
        if spec is not None and phase.calls:
            rate = (None if spec.is_embedded else declared) or throughput_of(spec, busy)
            if rate is not None:
                out.rates[spec.display()] = rate
                generated = rate.generated
                if spec.is_embedded and phase.role in together and rate.generated_parallel:
                    generated = rate.generated_parallel  # its independent calls decode together in the slots
                seconds = (seconds or 0.0) + share * (
                    phase.prompt_tokens / rate.prompt + phase.generated_tokens / generated
                )
            elif seconds is None:
                seconds = None
            price = Price(0.0, 0.0, "embedded: runs here") if spec.is_embedded else price_of(spec, prices)
            if price is None:
                if spec.display() not in out.unpriced:
                    out.unpriced.append(spec.display())
            else:
                if not spec.is_embedded:
                    out.prices[spec.display()] = price
                usd = price.usd(round(share * phase.prompt_tokens), round(share * phase.generated_tokens))
        out.phases.append(PhaseCost(phase, spec.display() if spec else None, seconds, usd, hits))
    return out


def duration(seconds: float) -> str:
    """``42 s``, ``7 min``, ``1 h 05 min``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"


def dollars(usd: float) -> str:
    """``$1,234.50``, ``$0.50``; under ten cents its first two significant figures (``$0.0057``)."""
    if usd >= 0.1 or usd == 0:
        return f"${usd:,.2f}"
    return f"${usd:.2g}" if usd >= 1e-4 else "under $0.0001"


def render(fc: Forecast) -> list[str]:
    """The plan as lines: the run, one line per phase, the totals, and what the figures rest on."""
    lines = [
        f"plan: {fc.system} on {fc.task} ({fc.split}, {fc.samples:,} of {fc.of:,} samples), profile {fc.profile}; "
        "nothing was started, trained or written",
        *(f"models: {role} = {model}" for role, model in fc.models.items()),
        f"{'phase':<44} {'role':<10} {'epochs':>6} {'calls':>6} {'prompt tok':>10} {'gen tok ≤':>9} {'time':>9}",
    ]
    for cost in fc.phases:
        p = cost.phase
        calls = ("≤" if p.upper_bound else "") + f"{p.calls:,}" if p.role else ""
        prompt, generated = (f"{p.prompt_tokens:,}", f"{p.generated_tokens:,}") if p.role else ("", "")
        lines.append(
            f"{p.name:<44} {p.role or '-':<10} {p.epochs or '':>6} {calls:>6} {prompt:>10} {generated:>9} "
            f"{duration(cost.seconds) if cost.seconds is not None else '?':>9}"
        )
        if p.note:
            lines.append(f"  {p.note}")
        if cost.cached:
            lines.append(f"  {_answered(cost.cached, p.calls)}: its time and cost are the other calls'")
    lines += _totals(fc)
    return lines


def _answered(cached: int, calls: int) -> str:
    return f"{'all' if cached == calls else f'{cached:,} of'} {calls:,} answered by the response cache"


def _totals(fc: Forecast) -> list[str]:
    """The total line and the sources of the figures."""
    tokens = (  # of the calls the run makes
        round(sum(c.share * c.phase.prompt_tokens for c in fc.phases)),
        round(sum(c.share * c.phase.generated_tokens for c in fc.phases)),
    )
    by_role = ", ".join(f"{fc.calls(role):,} {role}" for role in fc.models if fc.calls(role))
    total = duration(fc.seconds) + ("" if fc.complete else " + phases of unknown time")
    usd = fc.usd
    cost = (
        dollars(usd)
        if usd is not None
        else f"no price for {', '.join(fc.unpriced)} (the shipped table has none: add it in $DDIBENCH_PRICES)"
    )
    if not fc.calls():
        if not fc.phases:
            return ["total: no training and no LLM calls"]
        known = f"about {total}" if fc.seconds else "its time is not declared"
        gpu = [_gpu_line(fc)] if fc.gpu_hours else []
        return [f"total: no LLM calls, {known}", *gpu, "from empty caches: a model already trained is reused"]
    to_make = f"; {_answered(fc.cached(), fc.calls())}, {fc.calls() - fc.cached():,} to make" if fc.cached() else ""
    lines = [
        f"total: {fc.calls():,} LLM calls ({by_role or 'none'}){to_make}, {tokens[0]:,} prompt + at most "
        f"{tokens[1]:,} generated tokens, about {total}, {cost}",
        f"tokens: characters / {CHARS_PER_TOKEN} of the real prompt templates with the task's drug names and labels; "
        "generated tokens at each call's max_tokens (an upper bound)"
        + ("; the total counts the calls to make" if fc.cached() else ""),
    ]
    lines += [
        f"throughput: {m}: {r.prompt:g} prompt and {r.generated:g} generated tok/s"
        + (f" ({r.generated_parallel:.4g} with the server's slots all decoding)" if r.generated_parallel else "")
        + f", {r.source}"
        for m, r in fc.rates.items()
    ]
    lines += [
        f"throughput: {m}: unknown here, so its calls are not timed (declare one: --plan --throughput PROMPT,GEN, "
        f"or measure it: ddibench doctor -m {m})"
        for m in _untimed(fc)
    ]
    lines += [
        f"price: {m}: ${p.prompt:g} prompt and ${p.completion:g} completion per 1,000 tokens, {p.cited()}"
        for m, p in fc.prices.items()
    ]
    if fc.gpu_hours is not None:
        lines.append(_gpu_line(fc))
    if fc.busy and any(r in THROUGHPUT.values() for r in fc.rates.values()):
        lines.append(f"{fc.busy}: the model runs slower than the rate above, measured idle")
    lines.append(
        "LLM calls timed as if the response cache were empty, except those a system declares before the run "
        "(CBR-DDI's descriptions), looked up in it; not counted: start-up (the task's data and KG, the model "
        "server: seconds; a model's first use downloads it)"
    )
    return lines


def _gpu_line(fc: Forecast) -> str:
    if not fc.seconds:  # nothing timed (a served model with no declared throughput, an untimed GNN): no figure
        return (
            f"GPU hours: unknown: no phase has a projected time on profile {fc.profile} "
            "(declare the served model's rate with --plan --throughput PROMPT,GEN)"
        )
    untimed = "" if fc.complete else " (phases of unknown time not counted)"
    return (
        f"GPU hours: about {fc.gpu_hours or 0.0:,.2f} ({duration(fc.seconds)} x {fc.accelerators} accelerator"
        f"{'s' if fc.accelerators != 1 else ''} of profile {fc.profile}){untimed}"
    )


def _untimed(fc: Forecast) -> list[str]:
    return sorted({c.model for c in fc.phases if c.model and c.phase.calls and c.model not in fc.rates})


def summary(fc: Forecast) -> list[str]:
    """The two lines a long run prints before it starts."""
    heavy = sorted((c for c in fc.phases if c.seconds), key=lambda c: -(c.seconds or 0.0))[:3]
    parts = ", ".join(f"{c.phase.name} {duration(c.seconds or 0.0)}" for c in heavy)
    usd = fc.usd
    busy = f" ({fc.busy})" if fc.busy and fc.rates else ""
    return [
        f"plan: about {duration(fc.seconds)}{busy}{'' if fc.complete else ' (some phases untimed)'}"
        f"{f', {dollars(usd)}' if usd else ''}, {fc.calls():,} LLM calls"
        f"{f' ({fc.cached():,} answered by the response cache)' if fc.cached() else ''}; longest: {parts}",
        *([f"  {_gpu_line(fc)}"] if fc.gpu_hours else []),
        "  the whole plan: the same command with --plan (nothing is run)"
        + ("" if fc.profile == "quick" else "; --profile quick for a one-minute look"),
    ]
