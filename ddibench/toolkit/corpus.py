"""Text corpora the question-answering systems retrieve from, and two indexes over them.

Chunks come from pinned sources and the *training* split only:

* drug monographs — DrugBank 4.2 descriptions (name, DrugBank id, description), split into passages;
* interaction sentences — the DrugBank sentence of each training pair, with the drugs' names;
* MedQuAD documents — answered questions of the NIDDK and NINDS collections (never asked by a task).

:class:`BM25Index` is the local keyword search tool (the stand-in for a web search API);
:class:`EmbeddingIndex` ranks chunks by sentence-embedding cosine (text RAG).
"""

from __future__ import annotations

import csv
import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from ddibench.data import fetch, source

_TOKEN = re.compile(r"[a-z0-9]+")
_STOP = frozenset(
    "a an and are as at be by can do does for from has have how i if in is it its of on or should the to was what when "
    "which who why will with you your this that these those there their be been being into about".split()
)


@dataclass(frozen=True, slots=True)
class Chunk:
    id: str
    text: str
    source: str  # "monograph", "interaction" or "medquad"
    title: str = ""


def tokens(text: str) -> list[str]:
    return [t for t in _TOKEN.findall(text.lower()) if t not in _STOP]


def _passages(text: str, words: int) -> list[str]:
    parts = text.split()
    return [" ".join(parts[i : i + words]) for i in range(0, len(parts), words)] or [""]


@cache
def drug_monographs(words: int = 90) -> tuple[Chunk, ...]:
    path = fetch(source("drugbank42", "data/drugbank.tsv"))
    out = []
    with open(path, encoding="utf-8", newline="") as fh:
        for row in csv.DictReader(fh, delimiter="\t"):
            description = " ".join((row.get("description") or "").split())
            if not description:
                continue
            head = f"{row['name']} (DrugBank {row['drugbank_id']})"
            for i, passage in enumerate(_passages(description, words)):
                out.append(Chunk(f"monograph:{row['drugbank_id']}:{i}", f"{head}: {passage}", "monograph", row["name"]))
    return tuple(out)


@cache
def medquad_chunks(words: int = 120) -> tuple[Chunk, ...]:
    from ddibench.data.medquad import medquad_documents

    out = []
    for row in medquad_documents("medquad-corpus"):
        for i, passage in enumerate(_passages(row["answer"], words)):
            out.append(Chunk(f"medquad:{row['qid']}:{i}", f"{row['question']} {passage}", "medquad", row["focus"]))
    return tuple(out)


def interaction_chunks(train: Iterable[Any], labels: Any, limit: int | None = None, seed: int = 0) -> tuple[Chunk, ...]:
    """One sentence per training pair (a seeded subset of ``limit`` pairs when given)."""
    rows = list(train)
    if limit is not None and limit < len(rows):
        keep = np.sort(np.random.default_rng(seed).choice(len(rows), limit, replace=False))
        rows = [rows[i] for i in keep]
    out = []
    for s in rows:
        pair = s.input if hasattr(s.input, "head") else s.input.pair
        label = int(s.target if isinstance(s.target, int) else s.target["label"])
        out.append(
            Chunk(
                f"interaction:{s.id}",
                labels[label].render(pair.head.name, pair.tail.name),
                "interaction",
                f"{pair.head.name} + {pair.tail.name}",
            )
        )
    return tuple(out)


def qa_corpus(
    train: Sequence[Any],
    labels: Any,
    *,
    interactions: int | None = None,
    monographs: int | None = None,
    medquad: int | None = None,
    seed: int = 0,
) -> list[Chunk]:
    """The shared QA corpus, in one order: monograph passages, MedQuAD corpus passages, then the training
    pairs' interaction sentences (none when ``train`` is empty), each part capped at its count (None: all).
    Text RAG embeds it; the ``top-passage`` floor searches it by keyword."""
    chunks = list(drug_monographs())[:monographs]
    chunks += list(medquad_chunks())[:medquad]
    if train:
        chunks += list(interaction_chunks(train, labels, interactions, seed))
    return chunks


class BM25Index:
    """Okapi BM25 (k1 = 1.5, b = 0.75) over chunk tokens."""

    def __init__(self, chunks: Sequence[Chunk], k1: float = 1.5, b: float = 0.75) -> None:
        self.chunks = list(chunks)
        self.k1, self.b = k1, b
        self._postings: dict[str, list[tuple[int, int]]] = {}
        lengths = np.zeros(len(self.chunks))
        for i, chunk in enumerate(self.chunks):
            counts = Counter(tokens(chunk.text))
            lengths[i] = sum(counts.values())
            for term, tf in counts.items():
                self._postings.setdefault(term, []).append((i, tf))
        self._lengths = lengths
        self._avg = float(lengths.mean()) if len(lengths) else 0.0
        n = len(self.chunks)
        self._idf = {t: math.log(1 + (n - len(p) + 0.5) / (len(p) + 0.5)) for t, p in self._postings.items()}

    def search(self, query: str, k: int = 5) -> list[tuple[Chunk, float]]:
        scores = np.zeros(len(self.chunks))
        for term in set(tokens(query)):
            postings = self._postings.get(term)
            if not postings:
                continue
            idx = np.fromiter((i for i, _ in postings), dtype=np.int64, count=len(postings))
            tf = np.fromiter((f for _, f in postings), dtype=np.float64, count=len(postings))
            norm = tf + self.k1 * (1 - self.b + self.b * self._lengths[idx] / (self._avg or 1))
            scores[idx] += self._idf[term] * tf * (self.k1 + 1) / norm
        if not scores.any():
            return []
        top = np.argsort(-scores, kind="stable")[:k]
        return [(self.chunks[i], float(scores[i])) for i in top if scores[i] > 0]


class EmbeddingIndex:
    """Cosine ranking of chunk embeddings (computed once; see :meth:`build` / :meth:`load`)."""

    def __init__(self, chunks: Sequence[Chunk], vectors: np.ndarray, encoder: Any) -> None:
        self.chunks = list(chunks)
        self.vectors = vectors
        self.encoder = encoder

    @classmethod
    def build(cls, chunks: Sequence[Chunk], encoder: Any) -> EmbeddingIndex:
        return cls(
            chunks, encoder.encode([c.text for c in chunks]) if chunks else np.zeros((0, 1), np.float32), encoder
        )

    def search(self, query: str, k: int = 5) -> list[tuple[Chunk, float]]:
        if not self.chunks:
            return []
        sims = self.vectors @ self.encoder.encode([query])[0]
        k = min(k, len(sims))
        top = np.argpartition(-sims, k - 1)[:k]
        top = top[np.argsort(-sims[top], kind="stable")]
        return [(self.chunks[i], float(sims[i])) for i in top]
