"""Reference-based scorers for free-text answers.

* **Embedding similarity** — cosine of the sentence embeddings of answer and reference (MiniLM by default).
* **BERTScore** (Zhang et al. 2020) — greedy matching of contextual token embeddings: precision is the
  mean, over answer tokens, of the best cosine to a reference token; recall the other way round; F1
  their harmonic mean. Implemented here (no idf weighting, no baseline rescaling) on the encoder's
  transformer at layer ``num_layers`` (6 = the last layer of MiniLM-L6), because the ``bert-score``
  package downloads models at run time.
* **Label recovery** — an answer about a drug pair mapped back to one of the 86 interaction types: a
  type whose sentence (with the pair's names) the answer contains, else the closest sentence by
  string similarity when it is close enough, else the closest by embedding similarity.
* **SelfCheckGPT, BERTScore variant** (Manakul et al. 2023) — for each sentence of the answer, one
  minus the mean over N stochastic samples of its best BERTScore against the sample's sentences; the
  answer's score is the mean over its sentences, in [0, 1], higher = less consistent (more likely
  hallucinated).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from ddibench.embeddings import TextEncoder
from ddibench.schema import LabelSpace

_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_WORDS = re.compile(r"[^a-z0-9 ]+")


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(text.strip()) if s.strip()]


def _norm(text: str) -> str:
    return " ".join(_WORDS.sub(" ", text.lower()).split())


class BertScorer:
    def __init__(self, encoder: TextEncoder, num_layers: int = 6) -> None:
        self.encoder = encoder
        self.num_layers = num_layers
        self._memo: dict[str, np.ndarray] = {}

    def describe(self) -> dict[str, Any]:
        return {**self.encoder.identity, "num_layers": self.num_layers, "idf": False, "baseline_rescaling": False}

    def _tokens(self, texts: Sequence[str]) -> list[np.ndarray]:
        import torch

        missing = [t for t in dict.fromkeys(texts) if t not in self._memo]
        if missing:
            module = self.encoder._load()[0]  # the sentence-transformers Transformer module
            tokenizer, model = module.tokenizer, module.auto_model
            for start in range(0, len(missing), 32):
                batch = missing[start : start + 32]
                enc = tokenizer(batch, padding=True, truncation=True, max_length=256, return_tensors="pt")
                with torch.no_grad():
                    hidden = model(**enc, output_hidden_states=True).hidden_states[self.num_layers]
                for i, text in enumerate(batch):
                    mask = enc["attention_mask"][i].bool()
                    vectors = hidden[i][mask][1:-1]  # drop [CLS] and [SEP]
                    vectors = torch.nn.functional.normalize(vectors, dim=-1) if len(vectors) else vectors
                    self._memo[text] = vectors.numpy()
        return [self._memo[t] for t in texts]

    def score(self, candidates: Sequence[str], references: Sequence[str]) -> np.ndarray:
        """(n, 3) precision, recall, F1; an empty side scores 0."""
        out = np.zeros((len(candidates), 3))
        cand_vecs, ref_vecs = self._tokens(candidates), self._tokens(references)
        for i, (c, r) in enumerate(zip(cand_vecs, ref_vecs)):
            if len(c) == 0 or len(r) == 0:
                continue
            sim = c @ r.T
            p, rc = float(sim.max(axis=1).mean()), float(sim.max(axis=0).mean())
            out[i] = (p, rc, 2 * p * rc / (p + rc) if p + rc > 0 else 0.0)
        return out


def embedding_similarity(encoder: TextEncoder, answers: Sequence[str], references: Sequence[str]) -> np.ndarray:
    a = encoder.encode([x or " " for x in answers])
    b = encoder.encode([x or " " for x in references])
    sims = np.sum(a * b, axis=1)
    return np.where(np.array([bool(x.strip()) for x in answers]), sims, 0.0)


class LabelRecovery:
    """Map an answer about a pair to an interaction type (see the module docstring)."""

    def __init__(self, labels: LabelSpace, encoder: TextEncoder, string_threshold: float = 0.85) -> None:
        self.labels = labels
        self.encoder = encoder
        self.threshold = string_threshold

    def recover(self, answer: str, head: str, tail: str) -> tuple[int | None, str]:
        if not answer.strip():
            return None, "empty answer"
        rendered = [lb.render(head, tail) for lb in self.labels]
        norm_answer = _norm(answer)
        contained = [i for i, text in enumerate(rendered) if _norm(text) and _norm(text) in norm_answer]
        if contained:
            return max(contained, key=lambda i: len(rendered[i])), "template"
        best, best_ratio = None, 0.0
        for sentence in sentences(answer) or [answer]:
            for i, text in enumerate(rendered):
                ratio = difflib.SequenceMatcher(None, _norm(sentence), _norm(text), autojunk=False).ratio()
                if ratio > best_ratio:
                    best, best_ratio = i, ratio
        if best is not None and best_ratio >= self.threshold:
            return best, "string"
        sims = self.encoder.encode(rendered) @ self.encoder.encode([answer])[0]
        return int(np.argmax(sims)), "embedding"


def selfcheck_bertscore(scorer: BertScorer, answer: str, samples: Sequence[str]) -> float | None:
    """SelfCheckGPT (BERTScore variant) of one answer; None without samples or sentences."""
    answer_sentences = sentences(answer)
    sample_sentences = [sentences(s) for s in samples]
    if not answer_sentences or not samples:
        return None
    per_sentence = []
    for sent in answer_sentences:
        best = []
        for sents in sample_sentences:
            if not sents:
                best.append(0.0)
                continue
            f1 = scorer.score([sent] * len(sents), sents)[:, 2]
            best.append(float(f1.max()))
        per_sentence.append(1.0 - float(np.mean(best)))
    return float(np.clip(np.mean(per_sentence), 0.0, 1.0))
