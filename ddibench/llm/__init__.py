"""LLM access: model specs, the embedded llama.cpp server, the cached and accounted client."""

from ddibench.llm.spec import EMBEDDED, ROLES, ModelSpec, parse_model_options

__all__ = ["EMBEDDED", "ROLES", "ModelSpec", "parse_model_options"]
