"""The wire encoding of a chat request: the body's JSON, byte for byte what the ``openai`` SDK sent
(:func:`_wire_message`, :func:`_encode_params`), and the ``response_format`` of each json mode."""

from __future__ import annotations

import io
import json
import pickle
from typing import Any

from ddibench.hashing import stable_json


def response_format(json_mode: str, schema: dict[str, Any] | None) -> dict[str, Any] | None:
    if schema is None or json_mode in ("none", "auto"):  # 'auto' is resolved by a probe before the first call
        return None
    if json_mode == "schema":
        return {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema, "strict": False}}
    if json_mode == "object":
        return {"type": "json_object"}
    if json_mode == "llamacpp":
        return {"type": "json_object", "schema": schema}
    raise ValueError(f"unknown json mode {json_mode}")


# the SDK's JSON: compact, keys in insertion order, UTF-8 kept
_WIRE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
_wire_memo: dict[tuple[tuple[str, ...], str], str] = {}


def _wire_message(message: dict[str, Any]) -> str:
    """One message as the SDK wrote it; a long system prompt (sent with every call) is encoded once."""
    content = message.get("content")
    if message.get("role") != "system" or not isinstance(content, str) or len(content) < 1024 or len(message) != 2:
        return _WIRE.encode(message)
    key = (tuple(message), content)
    text = _wire_memo.get(key)
    if text is None:
        if len(_wire_memo) >= 64:
            _wire_memo.clear()
        text = _wire_memo[key] = _WIRE.encode(message)
    return text


class _PlainPickler(pickle.Pickler):
    """Pickles plain JSON values only (dicts, lists, strings, numbers, booleans, None): anything else raises."""

    def reducer_override(self, obj: Any) -> Any:
        raise TypeError(f"not a plain JSON value: {type(obj).__name__}")


_params_memo: dict[bytes, tuple[str, str]] = {}


def _encode_params(params: dict[str, Any]) -> tuple[str, str]:
    """The parameters' canonical JSON (``stable_json(params)``, the cache key's part) and the request body's
    text after the messages: the SDK's parameters in its order (sorted), the extra fields, then
    response_format, and the closing brace.

    Every call of a run sends the same parameters, and encoding them twice (mostly the response format's
    schema: a label enum of 86 integers is 6 of the 8 microseconds of one encoding) cost the request path
    13% of its items per second at concurrency 16 (``benchmarks/runner_throughput.py``).
    They are remembered by their pickle, which is exact where equality is not (``1 == 1.0 == True`` encode
    differently; pickle tells them apart, and dict order too) and costs a quarter of one encoding.
    Parameters holding anything but plain JSON values are encoded every time."""
    buffer = io.BytesIO()
    fingerprint: bytes | None = None
    try:
        _PlainPickler(buffer, protocol=5).dump(params)
    except Exception:  # noqa: BLE001 - an unpicklable or non-plain value: not remembered
        pass
    else:
        fingerprint = buffer.getvalue()
        hit = _params_memo.get(fingerprint)
        if hit is not None:
            return hit
    sdk = {k: params[k] for k in sorted(params) if k not in ("response_format", "extra_body")}
    tail = {**sdk, **(params.get("extra_body") or {})}
    if "response_format" in params:
        tail["response_format"] = params["response_format"]
    encoded = (stable_json(params), "," + _WIRE.encode(tail)[1:] if tail else "}")
    if fingerprint is not None:
        if len(_params_memo) >= 64:
            _params_memo.clear()
        _params_memo[fingerprint] = encoded
    return encoded
