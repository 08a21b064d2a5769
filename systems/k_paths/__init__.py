"""``k-paths``: up to 10 diverse KG paths between the two drugs as context.

K-Paths (Abdullahi et al. 2025): Yen's k shortest simple paths of at most 3 hops over Hetionet plus the
training interactions, keeping only paths with a relation sequence not seen yet (diversity filter),
verbalised. When the drugs are not connected, their one-hop neighbourhoods stand in (the 5 most
specific neighbours of each: lowest degree first). A guard removes every path or fact that is an
interaction between the two drugs themselves — it would state the pair's own label.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from ddibench.schema import Sample
from ddibench.system import RunContext, TrainingView
from ddibench.toolkit.label_choice import LabelChoiceConfig, LabelChoiceSystem


class KPathsConfig(LabelChoiceConfig):
    k_paths: int = Field(10, ge=0)
    max_hops: int = Field(3, ge=1, le=10)
    max_candidates: int = Field(200, gt=0)
    fallback_neighbours: int = Field(5, ge=0)
    kg_edges: str | None = None


class KPathsSystem(LabelChoiceSystem):
    name = "k-paths"
    version = "1.0.0"
    description = (
        "up to 10 diverse KG paths (<= 3 hops, Yen's algorithm, distinct relation sequences) between the drugs"
    )
    paper = "Abdullahi et al. 2025, K-Paths"
    Config = KPathsConfig
    config: KPathsConfig
    context_heading = "Paths between the two drugs in a biomedical knowledge graph"

    async def prepare_context(self, view: TrainingView, ctx: RunContext) -> None:
        from ddibench.kg import interaction_graph

        space = view.resources.get("kg_space", "drugbank")
        self._kg = interaction_graph(
            view.train, [lb.template for lb in view.task.label_space], self.config.kg_edges, space=space
        )

    def paths(self, head: int, tail: int) -> tuple[list[str], dict[str, Any]]:
        from ddibench.kg import interaction_label, touches_pair, yen_paths

        kg = self._kg
        found = yen_paths(
            kg,
            head,
            tail,
            k=self.config.k_paths + 2,
            max_hops=self.config.max_hops,
            max_candidates=self.config.max_candidates,
        )
        kept = [p for p in found if not any(touches_pair(kg, s, head, tail) for s in p.steps)][: self.config.k_paths]
        guarded = len(found) - len([p for p in found if not any(touches_pair(kg, s, head, tail) for s in p.steps)])
        if guarded:
            self.count("paths_removed_by_label_guard", guarded)
        if kept:
            labels = [label for p in kept for s in p.steps if (label := interaction_label(kg, s)) is not None]
            return [p.verbalise(kg) for p in kept], {
                "paths": [p.as_dict(kg) for p in kept],
                "guarded": guarded,
                "context_labels": labels,
            }
        self.count("not_connected_fallback")
        facts, labels = [], []
        for drug in (head, tail):
            triples = [t for t in kg.triples_of(drug) if not touches_pair(kg, t, head, tail)]
            other = [b if a == drug else a for a, _, b in triples]
            order = sorted(range(len(triples)), key=lambda i: (int(kg.degree[other[i]]), triples[i]))
            facts += [kg.verbalise(*triples[i]) for i in order[: self.config.fallback_neighbours]]
            labels += [
                label
                for i in order[: self.config.fallback_neighbours]
                if (label := interaction_label(kg, triples[i])) is not None
            ]
        return facts, {"paths": [], "fallback_neighbours": facts, "guarded": guarded, "context_labels": labels}

    async def context(self, sample: Sample, ctx: RunContext) -> tuple[list[str], dict[str, Any]]:
        return self.paths(sample.pair.head.node_id, sample.pair.tail.node_id)
