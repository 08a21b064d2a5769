"""Endpoint preflight: a remote endpoint checked before the first sample (:func:`preflight`: reachable,
key accepted, model served), and how it constrains answers to a schema when its json mode is ``auto``
(:func:`probe_json_mode`)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from ddibench.errors import ModelEndpointError
from ddibench.llm._client import RoleUsage, _result
from ddibench.llm._completion import _short, _status_fix, unusable_reason
from ddibench.llm._spec import ModelSpec
from ddibench.llm._wire import response_format


def preflight(spec: ModelSpec, timeout: float = 10.0) -> dict[str, Any]:
    """Check a remote endpoint before the first sample: reachable, key accepted, model served."""
    url = (spec.base_url or "").rstrip("/") + "/models"
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {spec.api_key()}"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:  # noqa: S310 - user-given endpoint
            payload = json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            raise ModelEndpointError(
                f"{spec.base_url} rejected the API key (HTTP {exc.code})", _status_fix(exc.code, spec)
            ) from None
        return {"models_endpoint": f"HTTP {exc.code}"}  # some servers do not list models; the first call will tell
    except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ModelEndpointError(
            f"cannot reach model endpoint {spec.base_url} ({reason})",
            "start the server, or check --model / --base-url",
        ) from None
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
        request = urllib.request.Request(
            url,
            json.dumps(body).encode(),
            {"Content-Type": "application/json", "Authorization": f"Bearer {spec.api_key()}"},
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as resp:  # noqa: S310 - user-given endpoint
                completion = json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as exc:
            tried.append(f"{mode}: HTTP {exc.code}")
            continue
        except (urllib.error.URLError, TimeoutError, ConnectionError, OSError, ValueError) as exc:
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
