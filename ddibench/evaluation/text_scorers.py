"""Reference-based scorers for free-text answers.

* **Embedding similarity** — cosine of the sentence embeddings of answer and reference (MiniLM by default).
* **BERTScore** (Zhang et al. 2020) — the ``bert-score`` library (``bert_score.BERTScorer``) on the text
  encoder's own weights, read from its local directory (nothing is downloaded), at layer ``num_layers``
  (6 = the last layer of MiniLM-L6), no idf weighting, no baseline rescaling (there is no published
  baseline file for MiniLM). A pair with an empty side scores 0 without calling the library (it cannot
  encode an empty string with transformers 5). Pairs are scored one per batch: the library pads the
  pairs of a batch and takes each token's best match over the padded positions too, so when every
  real similarity is negative (MiniLM's layer-6 token cosines can be) a padded zero wins and a pair's
  score depends on which pairs share its batch (seen here: 0.0826 alone, 0.0866 beside another pair;
  upstream Tiiiger/bert_score#197). Alone, a pair's score is a property of the pair.
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
    """BERTScore with the ``bert-score`` library on a local encoder; one scorer per encoder and layer."""

    def __init__(self, encoder: TextEncoder, num_layers: int = 6, batch_size: int = 1) -> None:
        self.encoder = encoder
        self.num_layers = num_layers
        self.batch_size = batch_size
        self._scorer: Any = None

    def describe(self) -> dict[str, Any]:
        from importlib.metadata import version

        return {
            **self.encoder.identity,
            "library": "bert-score",
            "library_version": version("bert-score"),
            "num_layers": self.num_layers,
            "idf": False,
            "baseline_rescaling": False,
            "batch_size": self.batch_size,
        }

    def _library(self) -> Any:
        if self._scorer is None:
            import os

            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            from bert_score import BERTScorer
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()
            self._scorer = BERTScorer(
                model_type=str(self.encoder.path),
                num_layers=self.num_layers,
                batch_size=self.batch_size,
                device=self.encoder.device,
            )
        return self._scorer

    def score(self, candidates: Sequence[str], references: Sequence[str]) -> np.ndarray:
        """(n, 3) precision, recall, F1; a pair with an empty side scores 0."""
        out = np.zeros((len(candidates), 3))
        keep = [i for i, (c, r) in enumerate(zip(candidates, references)) if c.strip() and r.strip()]
        if keep:
            precision, recall, f1 = self._library().score(
                [candidates[i] for i in keep], [references[i] for i in keep], verbose=False
            )
            out[keep] = np.stack([precision.numpy(), recall.numpy(), f1.numpy()], axis=1)
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


class StatedTypes:
    """The interaction types a retrieved text states: sentences that instantiate a type's template with *any* drug
    names ("Aspirin may increase the anticoagulant activities of Warfarin" states that type about another pair).
    What a QA system's context says about interaction types, for the retrieval ceilings
    (:mod:`ddibench.runner.ceilings`). Hand-written: a template match with free names is what no library does.
    Where several templates match one sentence, the one with the most fixed text wins (a name could otherwise
    swallow the tail of a longer type's sentence)."""

    def __init__(self, labels: LabelSpace) -> None:
        self._patterns: list[tuple[int, int, re.Pattern[str]]] = []
        for lb in labels:
            if "#Drug1" not in lb.template or "#Drug2" not in lb.template:
                continue
            parts = re.split(r"#Drug[12]", lb.template.rstrip(". "))
            body = "(?:.+?)".join(re.escape(part) for part in parts)
            self._patterns.append((sum(map(len, parts)), lb.id, re.compile(body, re.IGNORECASE)))
        self._patterns.sort(key=lambda x: -x[0])  # most fixed text first

    def __bool__(self) -> bool:
        return bool(self._patterns)

    def in_sentence(self, sentence: str) -> int | None:
        for _, label, pattern in self._patterns:
            if pattern.search(sentence):
                return label
        return None

    def __call__(self, texts: Sequence[str]) -> list[int]:
        """The types the texts' sentences state, in the order they are stated (one per sentence, repeats kept)."""
        out = []
        for text in texts:
            for sentence in sentences(text):
                label = self.in_sentence(sentence)
                if label is not None:
                    out.append(label)
        return out


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
