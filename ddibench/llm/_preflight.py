"""Endpoint preflight: a remote endpoint checked before the first sample (:func:`preflight`: reachable,
key accepted, model served), and how it constrains answers to a schema when its json mode is ``auto``
(:func:`probe_json_mode`)."""

from __future__ import annotations

import json
from typing import Any

from ddibench.errors import ModelEndpointError
from ddibench.llm._client import RoleUsage, _result
from ddibench.llm._completion import _short, _status_fix, unusable_reason
from ddibench.llm._spec import ModelSpec
from ddibench.llm._wire import response_format
from ddibench.net import HttpError, HttpRefused, check_url, request

MODELS_MAX_BYTES = 4 * 2**20  # a /models listing (a few hundred bytes a model)
PROBE_MAX_BYTES = 1 * 2**20  # the answer to a 16-token probe


STARTUP_TIMEOUT = 10.0  # the whole listing request, not each read of it


def preflight(spec: ModelSpec, timeout: float | None = None) -> dict[str, Any]:
    """Check a remote endpoint before the first sample: reachable, key accepted, model served."""
    timeout = STARTUP_TIMEOUT if timeout is None else timeout
    url = (spec.base_url or "").rstrip("/") + "/models"
    headers = {"Authorization": f"Bearer {spec.api_key()}", "Accept": "application/json"}
    try:
        check_url(url)
        response = request("GET", url, headers=headers, timeout=timeout, max_bytes=MODELS_MAX_BYTES)
    except HttpRefused as exc:  # not an http(s) URL, a redirect elsewhere, too large, not HTTP
        raise ModelEndpointError(f"model endpoint {spec.base_url}: {exc.problem}", exc.fix) from None
    except HttpError as exc:  # refused, reset, cut short, past the deadline
        raise ModelEndpointError(
            f"cannot reach model endpoint {spec.base_url} ({exc.problem})",
            "start the server, or check --model / --base-url",
        ) from None
    if response.status in (401, 403):
        raise ModelEndpointError(
            f"{spec.base_url} rejected the API key (HTTP {response.status})", _status_fix(response.status, spec)
        )
    if not 200 <= response.status < 300:
        return {
            "models_endpoint": f"HTTP {response.status}"
        }  # some servers do not list models; the first call will tell
    try:
        payload = json.loads(response.body or b"{}")
    except ValueError:
        raise ModelEndpointError(f"{url} did not answer with JSON", "is this an OpenAI-compatible server?") from None
    models = payload.get("data") if isinstance(payload, dict) else None
    served = [m.get("id") for m in models or [] if isinstance(m, dict)]
    if served and spec.provider in ("vllm", "llamacpp", "ollama", "openai-compatible") and spec.model not in served:
        raise ModelEndpointError(
            f"{spec.base_url} does not serve model '{spec.model}' (it serves: {', '.join(map(str, served[:5]))})",
            "use one of those names",
        )
    info = next((m for m in models or [] if isinstance(m, dict) and m.get("id") == spec.model), {})
    out = {"listed": bool(info), "root": info.get("root"), "owned_by": info.get("owned_by")}
    if spec.json_mode == "auto":
        out["json_mode"], out["json_probe"] = probe_json_mode(spec, timeout=max(timeout, 60.0))
    return out


PROBE_SCHEMA = {"type": "object", "properties": {"probe": {"type": "integer", "enum": [417]}}, "required": ["probe"]}


def probe_json_mode(spec: ModelSpec, timeout: float = 60.0) -> tuple[str, str]:
    """How a server constrains answers to a JSON schema, found by asking: one short request per form
    (json_schema, then llama.cpp's json_object with a schema) under a schema whose only valid answer is
    ``{"probe": 417}``; the first form answered so is the one used. Else ``none`` (the prompt alone asks)."""
    url = (spec.base_url or "").rstrip("/") + "/chat/completions"
    tried = []
    for mode in ("schema", "llamacpp"):
        body = {
            "model": spec.model,
            "messages": [{"role": "user", "content": "Reply with a JSON object."}],
            "max_tokens": 16,
            "temperature": 0,
            "response_format": response_format(mode, PROBE_SCHEMA),
        }
        headers = {"Authorization": f"Bearer {spec.api_key()}", "Content-Type": "application/json"}
        try:
            response = request(
                "POST", url, body=json.dumps(body).encode(), headers=headers, timeout=timeout, max_bytes=PROBE_MAX_BYTES
            )
        except HttpRefused as exc:  # what no other form of the probe can change
            raise ModelEndpointError(f"model endpoint {spec.base_url}: {exc.problem}", exc.fix) from None
        except HttpError as exc:
            tried.append(f"{mode}: {exc.problem}")
            continue
        if not 200 <= response.status < 300:
            tried.append(f"{mode}: HTTP {response.status}")
            continue
        try:
            completion = json.loads(response.body or b"{}")
        except ValueError as exc:
            tried.append(f"{mode}: {type(exc).__name__}")
            continue
        text = _result(completion, 0.0, RoleUsage(), None).text if unusable_reason(completion) is None else ""
        try:
            obeyed = json.loads(text) == {"probe": 417}
        except ValueError:
            obeyed = False
        if obeyed:
            return mode, f"a probe answer obeyed the schema ({mode})" + (f" after {'; '.join(tried)}" if tried else "")
        tried.append(f"{mode}: answer {_short(text, 40)!r} ignored the schema")
    return "none", "no form held a probe answer to its schema (" + "; ".join(tried) + ")"
