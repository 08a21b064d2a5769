"""CBR-DDI's plan: the work a run will do, counted from the same seeded draws the run makes.

Contract: :func:`plan_phases` starts no model and trains nothing. It draws the repository's training pairs
and the validation pairs that choose ``lam`` exactly as :meth:`CBRDDISystem.prepare` does (same seeds, same
subsets), so the drugs it counts are the drugs the run describes: each distinct drug once (a drug met again
is answered by the response cache). Prompts are the real templates with the real drug names and labels;
what an LLM writes earlier in the run (descriptions, insights) is counted at its ``max_tokens``, and a
knowledge-graph path at :data:`PATH_TOKENS`. The counts assume empty caches: a repository or GNN already
built is reused by the run, which then skips those phases. Switches count as the run does them: without cases
no repository phase and no choice of ``lam``; with description features (``gnn_features="descriptions"``, the
default) every drug of the catalogue is described before the GNN module trains, so later phases describe none
again; the GNN module alone (``answer="gnn"``) makes no other LLM call, and none at all on Morgan features;
retrieval alone (``answer="cases"``) describes the drugs it retrieves with and writes nothing else.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ddibench.schema import Drug, Sample
from ddibench.system import BaseSystem, Phase, PlanContext, TrainingView, estimate_tokens
from ddibench.systems.cbr_ddi import prompts

if TYPE_CHECKING:
    from ddibench.llm import ChatRequest

PATH_TOKENS = 30  # one knowledge-graph path as the prompts show it ("A -[binds]-> Gene X -[...]-> B")


class CBRDDISystem(Protocol):
    """What the plan reads of the system (:class:`ddibench.systems.cbr_ddi.CBRDDISystem`; named here, not
    imported, so the package and its plan do not import each other)."""

    config: Any
    n_candidates: int
    predict_system: str

    def read_labels(self, view: TrainingView) -> None: ...
    def gnn_module(self, view: TrainingView, ctx: PlanContext) -> BaseSystem: ...
    def repository_pairs(self, view: TrainingView, rng: np.random.Generator) -> list[Sample]: ...
    def lambda_pairs(self, view: TrainingView, rng: np.random.Generator) -> list[Sample]: ...
    def describe_request(self, drug: Drug) -> ChatRequest: ...
    def interaction(self, target: Any, head: str, tail: str) -> str: ...
    def option(self, label: int) -> str: ...
    def query_prompt(
        self, head: Drug, tail: Drug, cases_text: str, paths: list[str], options: list[str]
    ) -> tuple[str, dict[str, Any]]: ...


def plan_phases(system: CBRDDISystem, view: TrainingView, samples: Sequence[Sample], ctx: PlanContext) -> list[Phase]:
    """The phases of a run, in the order they happen: the catalogue's descriptions when they are the GNN module's
    features, the GNN module, the repository (descriptions, insights, refinement) and the choice of ``lam`` when
    the run uses cases, then each query's descriptions and answer (none for the GNN module alone)."""
    cfg = system.config
    system.read_labels(view)
    described: set[tuple[int, str]] = set()
    phases = []
    if cfg.gnn_features == "descriptions":
        catalogue = view.resources["drugs"].drugs
        phases.append(_describing(system, "describing every drug (the GNN module's features)", catalogue, described))
    phases.append(
        replace(system.gnn_module(view, ctx).plan(view, [], ctx)[0], name="training the GNN module (EmerGNN)")
    )
    if cfg.answer == "gnn":
        return [p for p in phases if p.calls or p.epochs or p.seconds]
    if cfg.use_cases:
        chosen = system.repository_pairs(view, np.random.default_rng(ctx.seed))
        phases.append(_describing(system, "describing case drugs", _drugs(chosen), described))
        if cfg.answer == "llm":  # retrieval alone (answer="cases") writes no insight and refines nothing
            phases.append(_insights(system, chosen))
            if cfg.refine and chosen:
                phases += _refinement(system, chosen)
        if cfg.lam is None and chosen and view.valid:
            valid = system.lambda_pairs(view, np.random.default_rng(ctx.seed + 1))
            phases.append(_describing(system, "describing validation drugs (choosing lam)", _drugs(valid), described))
    phases.append(_describing(system, "describing query drugs", _drugs(samples), described))
    if cfg.answer == "cases":
        return [p for p in phases if p.calls or p.epochs or p.seconds]
    phases.append(
        Phase(
            "answering queries",
            "generator",
            len(samples),
            sum(_query_tokens(system, s.pair.head, s.pair.tail) for s in samples),
            len(samples) * cfg.answer_tokens,
            note=f"{cfg.k_cases if cfg.use_cases else 0} cases, {cfg.p_paths if cfg.use_paths else 0} paths, "
            f"{system.n_candidates} candidates a prompt",
        )
    )
    return [p for p in phases if p.calls or p.epochs or p.seconds]


def _drugs(samples: Iterable[Sample]) -> list[Drug]:
    return [d for s in samples for d in (s.pair.head, s.pair.tail)]


def _describing(system: CBRDDISystem, name: str, drugs: Sequence[Drug], described: set[tuple[int, str]]) -> Phase:
    """One description call per drug not described before (``described`` is updated)."""
    todo = [d for d in dict.fromkeys(drugs) if (d.node_id, d.name) not in described]
    described.update((d.node_id, d.name) for d in todo)
    requests = tuple(system.describe_request(d) for d in todo)
    prompt = sum(estimate_tokens(m["content"]) for r in requests for m in r.messages)
    repeats = len(drugs) - len(todo)
    note = f"{len(todo)} distinct drugs" + (f" ({repeats} repeats answered by the cache)" if repeats else "")
    tokens = len(todo) * system.config.description_tokens
    return Phase(name, "describer", len(todo), prompt, tokens, note=note, requests=requests)


def _known(system: CBRDDISystem, sample: Sample) -> str:
    """The case's label as the prompts state it."""
    return system.interaction(sample.target, sample.pair.head.name, sample.pair.tail.name)


def _insights(system: CBRDDISystem, chosen: Sequence[Sample]) -> Phase:
    cfg = system.config
    prompt = sum(
        estimate_tokens(prompts.INSIGHT_SYSTEM)
        + estimate_tokens(_filled(prompts.INSIGHT, s, interaction=_known(system, s)))
        + _written(system)
        for s in chosen
    )
    return Phase(
        "writing case insights",
        "describer",
        len(chosen),
        prompt,
        len(chosen) * cfg.insight_tokens,
        note="one per repository case ("
        + (
            f"repository_per_type={cfg.repository_per_type}"
            if cfg.repository_per_type is not None
            else f"repository_size={cfg.repository_size if cfg.repository_size is not None else 'all'}"
        )
        + ")",
    )


def _refinement(system: CBRDDISystem, chosen: Sequence[Sample]) -> list[Phase]:
    """Each checked case answered leave-one-out, then its insight rewritten when the answer was wrong."""
    cfg = system.config
    checked = list(chosen)[: min(len(chosen), cfg.refine_cases if cfg.refine_cases is not None else len(chosen))]
    answer = sum(_query_tokens(system, s.pair.head, s.pair.tail) for s in checked)
    rewrite = sum(
        estimate_tokens(prompts.INSIGHT_SYSTEM)
        + estimate_tokens(
            _filled(prompts.REFINE, s, interaction=_known(system, s), insight="", predicted=_known(system, s))
        )
        + _written(system)
        + cfg.insight_tokens
        for s in checked
    )
    return [
        Phase(
            "refining cases: answers",
            "generator",
            len(checked),
            answer,
            len(checked) * cfg.answer_tokens,
            note=f"refine_cases={cfg.refine_cases}",
        ),
        Phase(
            "refining cases: rewrites",
            "describer",
            len(checked),
            rewrite,
            len(checked) * cfg.insight_tokens,
            note="one per case answered wrongly: at most",
            upper_bound=True,
        ),
    ]


def _filled(template: str, sample: Sample, **fields: str) -> str:
    """A case prompt with the pair's names; descriptions and paths are counted apart (:func:`_written`)."""
    pair = sample.pair
    return template.format(
        head=pair.head.name, tail=pair.tail.name, head_description="", tail_description="", paths="", **fields
    )


def _written(system: CBRDDISystem) -> int:
    """Tokens a prompt holds of what the run wrote or found for a pair: two descriptions and the top-P paths."""
    cfg = system.config
    return 2 * cfg.description_tokens + (cfg.p_paths * PATH_TOKENS if cfg.use_paths else 0)


def _query_tokens(system: CBRDDISystem, head: Drug, tail: Drug) -> int:
    """A query prompt: the system prompt, K cases (each two descriptions, an insight and a label sentence, with the
    query's names standing in for the case's), the pair with its descriptions and paths, the N candidates."""
    cfg = system.config
    case = estimate_tokens(
        prompts.CASE.format(
            index=1,
            head=head.name,
            tail=tail.name,
            head_description="",
            tail_description="",
            insight="",
            interaction=system.option(0),
        )
    )
    cases = cfg.k_cases * (case + 2 * cfg.description_tokens + cfg.insight_tokens) if cfg.use_cases else 0
    user, _ = system.query_prompt(head, tail, "", [], [system.option(k) for k in range(system.n_candidates)])
    return estimate_tokens(system.predict_system) + estimate_tokens(user) + cases + _written(system)
