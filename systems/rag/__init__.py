"""The RAG baselines DrugRAG is compared with: ``no-rag``, ``text-rag`` and ``agentic-rag``.

* ``no-rag`` — the answer model alone.
* ``text-rag`` — the 5 chunks most similar to the question (sentence embeddings) from the shared corpus:
  DrugBank 4.2 drug monographs, the training split's interaction sentences and the MedQuAD corpus
  collections (see :mod:`ddibench.toolkit.corpus`), as context for the same answer prompt.
* ``agentic-rag`` — two retrieval iterations: after the first 5 chunks the LLM writes a follow-up
  search query for what is still missing, 5 more chunks are retrieved, and the answer uses all of them.

The embedded corpus is a cached artifact keyed by its composition, the encoder and the task data.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from ddibench.hashing import sha256_text
from ddibench.schema import Question
from ddibench.system import RunContext, TrainingView, llm_trace
from ddibench.toolkit.answering import AnswerConfig, AnswerSystem


class NoRAGSystem(AnswerSystem):
    name = "no-rag"
    version = "1.0.0"
    description = "the answer model alone, no retrieval"
    retrieves = False

    async def answer(self, question: Question, ctx: RunContext) -> tuple[str, dict[str, Any]]:
        text, call = await self.write(question.text, [], ctx)
        return text, {"llm": [call]}


class TextRAGConfig(AnswerConfig):
    k_chunks: int = 5
    interaction_chunks: int | None = 20000  # training sentences indexed (None: all)
    monograph_chunks: int | None = None  # cap on monograph passages (None: all)
    medquad_chunks: int | None = None  # cap on MedQuAD corpus passages (None: all)
    encoder_device: str = "cpu"  # where the text encoder runs ("cuda" on the GPU profiles)
    added_keys: ClassVar[tuple[str, ...]] = ("encoder_device",)  # runs recorded before it keep their hashes


class TextRAGSystem(AnswerSystem):
    name = "text-rag"
    version = "1.0.0"
    description = "top-5 corpus chunks by embedding similarity (monographs, training interactions, MedQuAD corpus)"
    Config = TextRAGConfig
    config: TextRAGConfig

    async def prepare_knowledge(self, view: TrainingView, ctx: RunContext) -> None:
        self.index = build_embedding_index(view, ctx, self.config)

    def retrieve(self, query: str) -> list[dict[str, Any]]:
        return [
            {"id": c.id, "source": c.source, "text": c.text, "score": round(s, 4)}
            for c, s in self.index.search(query, self.config.k_chunks)
        ]

    async def answer(self, question: Question, ctx: RunContext) -> tuple[str, dict[str, Any]]:
        found = self.retrieve(question.text)
        text, call = await self.write(question.text, [c["text"] for c in found], ctx)
        return text, {"retrieved": found, "llm": [call]}


FOLLOW_UP = """Question: {question}
Information found so far:
{context}
Write one short search query for the information still needed to answer the question. Reply with the query only."""


class AgenticRAGSystem(TextRAGSystem):
    name = "agentic-rag"
    version = "1.0.0"
    description = "two retrieval iterations: retrieve, LLM writes a follow-up query, retrieve again, answer"

    async def answer(self, question: Question, ctx: RunContext) -> tuple[str, dict[str, Any]]:
        first = self.retrieve(question.text)
        messages = [
            {
                "role": "user",
                "content": FOLLOW_UP.format(question=question.text, context="\n".join(f"- {c['text']}" for c in first)),
            }
        ]
        result = await ctx.model("generator").chat(messages, temperature=0.0, max_tokens=32, seed=ctx.seed)
        follow_up = " ".join(result.text.split())[:300] or question.text
        second = [c for c in self.retrieve(follow_up) if c["id"] not in {f["id"] for f in first}]
        text, call = await self.write(question.text, [c["text"] for c in first + second], ctx)
        return text, {
            "retrieved": first,
            "follow_up_query": follow_up,
            "retrieved_again": second,
            "llm": [llm_trace("generator", messages, result), call],
        }


def build_embedding_index(view: TrainingView, ctx: RunContext, config: TextRAGConfig) -> Any:
    """The embedded corpus for this task's training split (built once, then loaded from the artifact)."""
    from ddibench.embeddings import shared_encoder
    from ddibench.toolkit import corpus

    encoder = shared_encoder(config.encoder, config.encoder_device)
    chunks = corpus.qa_corpus(
        view.train,
        view.task.label_space,
        interactions=config.interaction_chunks,
        monographs=config.monograph_chunks,
        medquad=config.medquad_chunks,
        seed=ctx.seed,
    )
    key = {
        "chunks": len(chunks),
        "composition": {k: getattr(config, k) for k in ("interaction_chunks", "monograph_chunks", "medquad_chunks")},
        "ids_sha": sha256_text("\n".join(c.id for c in chunks)),
        "encoder": encoder.identity,
        "data_sha256": view.task.data_sha256,
        "seed": ctx.seed,
    }

    def build(directory: Any) -> None:
        bar = ctx.progress.task(f"embedding {len(chunks):,} corpus chunks", len(chunks))
        vectors = []
        for start in range(0, len(chunks), 512):
            vectors.append(encoder.encode([c.text for c in chunks[start : start + 512]]))
            bar.advance(min(512, len(chunks) - start))
        bar.close()
        np.save(directory / "vectors.npy", np.concatenate(vectors) if vectors else np.zeros((0, 1), np.float32))

    path, _ = ctx.artifacts.get_or_build("rag-index", key, build)
    return corpus.EmbeddingIndex(chunks, np.load(path / "vectors.npy"), encoder)
