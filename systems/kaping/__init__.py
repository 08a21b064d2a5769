"""``kaping``: the knowledge-graph triples around both drugs most similar to the question, as facts.

KAPING (Baek et al. 2023): every triple with either drug as head or tail — Hetionet plus the training
interactions — is verbalised ("Fosphenytoin binds CYP3A4"), embedded with the sentence encoder and
ranked by cosine similarity to the question; the top 10 go into a zero-shot prompt. A triple that is an
interaction between the two drugs themselves would state the answer and is never used.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import Field

from ddibench.schema import Sample
from ddibench.system import RunContext, TrainingView
from ddibench.toolkit.label_choice import LabelChoiceConfig, LabelChoiceSystem


class KAPINGConfig(LabelChoiceConfig):
    k_facts: int = Field(10, ge=0)
    encoder: str = "minilm"
    kg_edges: str | None = None


class KAPINGSystem(LabelChoiceSystem):
    name = "kaping"
    version = "1.0.0"
    description = "top-10 KG triples around both drugs by embedding similarity to the question, as facts"
    paper = "Baek et al. 2023, KAPING"
    Config = KAPINGConfig
    config: KAPINGConfig
    context_heading = "Facts from a biomedical knowledge graph"

    async def prepare_context(self, view: TrainingView, ctx: RunContext) -> None:
        from ddibench.embeddings import shared_encoder
        from ddibench.kg import interaction_graph

        space = view.resources.get("kg_space", "drugbank")
        self._kg = interaction_graph(
            view.train, [lb.template for lb in view.task.label_space], self.config.kg_edges, space=space
        )
        self._encoder = shared_encoder(self.config.encoder)

    def facts(self, head: int, tail: int, question: str) -> tuple[list[str], list[float], list[int]]:
        """The top facts, their similarities, and the interaction labels they state (``context_labels``)."""
        from ddibench.kg import interaction_label, touches_pair

        triples = [
            t
            for t in dict.fromkeys(self._kg.triples_of(head) + self._kg.triples_of(tail))
            if not touches_pair(self._kg, t, head, tail)
        ]
        if not triples:
            return [], [], []
        by_text: dict[str, tuple[int, int, int]] = {}
        for t in triples:
            by_text.setdefault(self._kg.verbalise(*t), t)  # the first triple of a sentence, as before
        texts = list(by_text)
        sims = self._encoder.encode(texts) @ self._encoder.encode([question])[0]
        top = np.argsort(-sims, kind="stable")[: self.config.k_facts]
        labels = [label for i in top if (label := interaction_label(self._kg, by_text[texts[i]])) is not None]
        return [texts[i] for i in top], [float(sims[i]) for i in top], labels

    async def context(self, sample: Sample, ctx: RunContext) -> tuple[list[str], dict[str, Any]]:
        pair = sample.pair
        if self.k is None:
            question = f"What happens when {pair.head.name} is combined with {pair.tail.name}?"
        else:
            question = f"What side effects does combining {pair.head.name} with {pair.tail.name} cause?"
        facts, sims, labels = self.facts(pair.head.node_id, pair.tail.node_id, question)
        if not facts:
            self.count("no_facts")
        return facts, {"facts": facts, "similarities": [round(s, 4) for s in sims], "context_labels": labels}
