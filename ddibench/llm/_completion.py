"""What an endpoint answered: whether a 200 response is a usable completion (:func:`unusable_reason`),
the parts of one, what an error response says, and how to fix a rejected request."""

from __future__ import annotations

import json
from typing import Any

from ddibench.llm._spec import ModelSpec

FAILED_FINISH = {"error", "abort"}  # finish reasons of a generation the server gave up on


def _error_text(raw: bytes) -> str:
    """What an error response says: its error object's message when it has one, else its text."""
    try:
        body = json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace") or "(empty body)"
    error = body.get("error") if isinstance(body, dict) else None
    message = error.get("message") if isinstance(error, dict) else error
    return str(message) if message else str(body)


# -- is this a usable completion? -----------------------------------------------------------------


def _field(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


def unusable_reason(completion: Any) -> str | None:
    """Why a 200 response is not a usable completion, or None when it is one.

    Usable: a completion object without an error, whose first choice has a message with text content
    (possibly empty: an empty answer is the model's answer) or a refusal, and whose generation was not
    abandoned by the server. Anything else (an error object, ``"choices": []``, a message without
    content, a body that is not a completion at all) is a failed attempt.
    """
    if completion is None or isinstance(completion, (str, bytes, list, int, float)):
        return f"the body is not a completion object ({type(completion).__name__})"
    error = _field(completion, "error")
    if error:
        message = _field(error, "message") if isinstance(error, dict) or hasattr(error, "message") else error
        return f"an error object ({_short(str(message or error), 120)})"
    choices = _field(completion, "choices")
    if not isinstance(choices, list) or not choices:
        return "no choices" if isinstance(choices, list) or choices is None else "choices is not a list"
    choice = choices[0]
    finish = _field(choice, "finish_reason")
    if finish in FAILED_FINISH:
        return f"finish_reason '{finish}'"
    message = _field(choice, "message")
    if not isinstance(_field(message, "content"), str) and not isinstance(_field(message, "refusal"), str):
        return "a message without content"
    return None


def _usable_cached(hit: dict[str, Any]) -> bool:
    """A cache entry that holds an answer. Entries written before responses were checked may hold the
    empty text of an error body (no finish reason, no text): those are asked again, never served."""
    return isinstance(hit.get("text"), str) and (bool(hit["text"]) or hit.get("finish_reason") is not None)


def _top_logprobs(choice: Any) -> tuple[tuple[str, float], ...] | None:
    """The first generated token's alternatives, ``(token, logprob)`` most likely first, when the response has them."""
    logprobs = _field(choice, "logprobs")
    content = _field(logprobs, "content") if logprobs is not None else None
    if not isinstance(content, list) or not content:
        return None
    top = _field(content[0], "top_logprobs")
    if not isinstance(top, list):
        return None
    out = []
    for item in top:
        token, value = _field(item, "token"), _field(item, "logprob")
        if isinstance(token, str) and isinstance(value, (int, float)) and not isinstance(value, bool):
            out.append((token, float(value)))
    return tuple(sorted(out, key=lambda x: -x[1]))


def _short(text: str, limit: int = 160) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _status_fix(status: int, spec: ModelSpec) -> str:
    if status in (401, 403):
        return f"check the API key in ${spec.key_env}" if spec.key_env else "the server refused the request"
    if status == 404:
        return f"check the model name '{spec.model}' and the URL {spec.base_url}"
    return "the request was rejected; check the model spec and its options (e.g. #json=none)"
