"""A chat call known before it is made, and how many such calls the response cache already answers.

A system that can write a call's request before the run (a drug's description asked by its name) makes the call
from a :class:`ChatRequest` and declares the same requests in its plan; ``ddibench run --plan`` then counts the
calls the response cache answers (:func:`cached_calls`) apart from those a run will make. The cache key and the
request's parameters are those :meth:`~ddibench.llm.LLMClient.chat` uses (:func:`request_params`), so a plan's
count and a run's ``from cache`` agree.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddibench.errors import ModelEndpointError
from ddibench.llm._cache import cache_key
from ddibench.llm._completion import _usable_cached
from ddibench.llm._spec import NOT_ANSWERING, ModelSpec
from ddibench.llm._wire import response_format

_KEYS_A_QUERY = 500  # keys in one SELECT (SQLite allows 32,766 variables; a short statement is as fast)


@dataclass(frozen=True)
class ChatRequest:
    """One chat call as a system makes it: its messages and the parameters :meth:`LLMClient.chat` takes
    (:meth:`LLMClient.ask` sends it)."""

    messages: tuple[dict[str, Any], ...]
    temperature: float = 0.0
    max_tokens: int = 256
    seed: int | None = None

    def kwargs(self) -> dict[str, Any]:
        return {"temperature": self.temperature, "max_tokens": self.max_tokens, "seed": self.seed}


def request_params(
    json_mode: str,
    temperature: float,
    max_tokens: int,
    top_p: float | None = None,
    seed: int | None = None,
    stop: list[str] | None = None,
    json_schema: dict[str, Any] | None = None,
    top_logprobs: int | None = None,
) -> dict[str, Any]:
    """A call's parameters (all but ``extra_body``), in the order the request body has always had them; the
    cache key holds them."""
    params: dict[str, Any] = {"temperature": temperature, "max_tokens": max_tokens}
    for name, value in (("top_p", top_p), ("seed", seed), ("stop", stop)):
        if value is not None:
            params[name] = value
    fmt = response_format(json_mode, json_schema)
    if fmt is not None:
        params["response_format"] = fmt
    if top_logprobs is not None:
        params["logprobs"] = True
        params["top_logprobs"] = top_logprobs
    return params


def request_key(identity: dict[str, Any], json_mode: str, request: ChatRequest) -> str:
    """The response cache's key of ``request`` to the model of ``identity`` (as :meth:`LLMClient.chat` computes it)."""
    answering = {k: v for k, v in identity.items() if k not in NOT_ANSWERING}
    params = request_params(json_mode, request.temperature, request.max_tokens, seed=request.seed)
    return cache_key(answering, list(request.messages), params, 0)


def cached_calls(spec: ModelSpec, requests: Iterable[ChatRequest], cache: Path) -> int:
    """How many of ``requests`` to ``spec``'s model the response cache file ``cache`` answers with a usable
    answer. Reads the file read-only and writes nothing; 0 where there is no cache file or the model's identity
    cannot be known here (an unknown model, a weights file that is not there)."""
    if not cache.is_file():
        return 0
    try:
        identity = spec.identity_unfetched()
    except (ModelEndpointError, OSError):  # no such pinned model, or a given weights file not there: the run says so
        return 0
    keys = [request_key(identity, spec.json_mode, r) for r in requests]
    found = 0
    try:
        with sqlite3.connect(f"file:{cache}?mode=ro", uri=True) as conn:
            for start in range(0, len(keys), _KEYS_A_QUERY):
                chunk = keys[start : start + _KEYS_A_QUERY]
                rows = conn.execute(
                    f"SELECT response FROM responses WHERE key IN ({','.join('?' * len(chunk))})", chunk
                ).fetchall()
                found += sum(_usable(raw) for (raw,) in rows)
    except sqlite3.Error:
        return 0  # a cache the run cannot read either: the run checks it and says so
    return found


def _usable(raw: str) -> bool:
    try:
        hit = json.loads(raw)
    except ValueError:
        return False
    return isinstance(hit, dict) and _usable_cached(hit)
