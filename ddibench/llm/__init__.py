"""LLM access for systems and scorers: one OpenAI-compatible path for every model.

* :class:`ModelSpec` — which model behind which endpoint, and its identity (``--model`` syntax);
  :class:`RoleModels` — the model of each role, any role name, unset roles falling back to the default.
* :class:`LLMClient` — what ``ctx.model(role)`` returns: ``await client.chat(messages, ...)`` gives a
  :class:`ChatResult` (cached, retried, accounted); :class:`LLMCallError` when a call fails for good.
* :class:`LLMPool` — the models of one run by role (starts the embedded llama.cpp server when needed);
  :class:`EndpointPolicy` — how many requests an endpoint gets and how long each may take.
* :func:`unusable_reason` — whether a 200 response is a usable completion (else it is retried, never cached).
* :mod:`ddibench.llm.stub` — a local stub server that speaks the protocol, for testing an adapter.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# names -> defining module, imported on first use (listing systems must not start the HTTP stack)
_EXPORTS = {
    "ResponseCache": "_cache",
    "cache_key": "_cache",
    "ChatResult": "_client",
    "LLMCallError": "_client",
    "LLMClient": "_client",
    "RoleUsage": "_client",
    "UsageLedger": "_client",
    "retry_after_seconds": "_client",
    "unusable_reason": "_completion",
    "ChatRequest": "_request",
    "cached_calls": "_request",
    "LLMPool": "_pool",
    "EMBEDDED_SLOTS": "_pool",
    "MeasuredThroughput": "_throughput",
    "measure_throughput": "_throughput",
    "response_format": "_wire",
    "EndpointPolicy": "_policy",
    "EmbeddedServer": "_embedded",
    "EMBEDDED": "_spec",
    "ROLES": "_spec",
    "ModelSpec": "_spec",
    "identity_digest": "_spec",
    "identity_summary": "_spec",
    "RoleModels": "_spec",
    "parse_model_options": "_spec",
    "parse_role": "_spec",
    "default_gguf": "_weights",
    "weights_sha256": "_weights",
}

if TYPE_CHECKING:
    from ddibench.llm._cache import ResponseCache, cache_key
    from ddibench.llm._client import (
        ChatResult,
        LLMCallError,
        LLMClient,
        RoleUsage,
        UsageLedger,
        retry_after_seconds,
    )
    from ddibench.llm._completion import unusable_reason
    from ddibench.llm._embedded import EmbeddedServer
    from ddibench.llm._policy import EndpointPolicy
    from ddibench.llm._pool import EMBEDDED_SLOTS, LLMPool
    from ddibench.llm._request import ChatRequest, cached_calls
    from ddibench.llm._spec import (
        EMBEDDED,
        ROLES,
        ModelSpec,
        RoleModels,
        identity_digest,
        identity_summary,
        parse_model_options,
        parse_role,
    )
    from ddibench.llm._throughput import MeasuredThroughput, measure_throughput
    from ddibench.llm._weights import default_gguf, weights_sha256
    from ddibench.llm._wire import response_format


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"ddibench.llm.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'ddibench.llm' has no attribute '{name}'")


__all__ = [
    "EMBEDDED",
    "EMBEDDED_SLOTS",
    "ROLES",
    "ChatRequest",
    "ChatResult",
    "EmbeddedServer",
    "EndpointPolicy",
    "LLMCallError",
    "LLMClient",
    "LLMPool",
    "MeasuredThroughput",
    "ModelSpec",
    "ResponseCache",
    "RoleModels",
    "RoleUsage",
    "UsageLedger",
    "cache_key",
    "cached_calls",
    "default_gguf",
    "identity_digest",
    "identity_summary",
    "measure_throughput",
    "parse_model_options",
    "parse_role",
    "response_format",
    "retry_after_seconds",
    "unusable_reason",
    "weights_sha256",
]
