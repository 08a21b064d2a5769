"""Reading a bundle's members safely: streamed through the bounded reader (:mod:`ddibench.archive`), every
member hashed, small JSON members checked for depth, and predictions parsed line by line (each line's length
capped) into what the checks read."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddibench.archive import SMALL_MEMBERS
from ddibench.archive import members as bundle_members
from ddibench.errors import DataError
from ddibench.schema import Prediction

CALL_FIELDS = (
    "role",
    "model",
    "prompt_tokens",
    "completion_tokens",
    "latency_s",
    "cached",
)  # what verify keeps of a traced call
CHUNK = 1 << 20
MAX_LINE = 16 * 2**20  # one prediction line; a longer one is refused without being built in memory
MAX_JSON_DEPTH = 64  # bundle.json, run.json and results.json nest a handful of levels deep
_ALL_FIELDS = set(Prediction.model_fields)


def read_bundle(path: Path) -> dict[str, bytes]:
    """Every member of the bundle, whole, in memory (for tools and tests; :func:`verify` streams). The
    archive is read by a bounded reader of its own (:mod:`ddibench.archive`), not by tarfile."""
    members = {name: handle.read() for name, handle in bundle_members(path)}
    if "bundle.json" not in members:
        raise DataError(f"{path} has no bundle.json")
    return members


@dataclass
class _Streamed:
    """What one pass over a bundle keeps: small members whole, predictions reduced, every member's hash."""

    members: dict[str, bytes] = field(default_factory=dict)
    hashes: dict[str, str] = field(default_factory=dict)
    predictions: dict[str, Prediction] = field(default_factory=dict)
    traces: dict[str, str] = field(default_factory=dict)
    duplicates: int = 0
    problem: str | None = None  # the first prediction line that could not be read


def _stream(path: Path, keep_traces: bool) -> _Streamed:
    out = _Streamed()
    for name, handle in bundle_members(path):
        digest = hashlib.sha256()
        if name != "predictions.jsonl":
            data = handle.read()
            digest.update(data)
            if name in SMALL_MEMBERS:
                _check_depth(name, data)
            out.members[name] = data
        else:
            for lineno, line in enumerate(_lines(handle, digest), 1):
                if line.strip() and out.problem is None:
                    _take_prediction(out, line, lineno, keep_traces)
        out.hashes[name] = digest.hexdigest()
    if "bundle.json" not in out.members:
        raise DataError(f"{path} has no bundle.json", "submit the run again with 'ddibench submit'")
    return out


def _check_depth(name: str, data: bytes) -> None:
    """Refuse a JSON member nested deeper than :data:`MAX_JSON_DEPTH` (a member that is not JSON at all
    is left to its record check, which names what is wrong)."""
    too_deep = DataError(
        f"bundle member '{name}' nests deeper than {MAX_JSON_DEPTH} levels",
        "submit the run again with 'ddibench submit'",
    )
    try:
        value = json.loads(data)
    except RecursionError:
        raise too_deep from None
    except ValueError:
        return
    level: list[tuple[Any, int]] = [(value, 1)]
    while level:
        item, depth = level.pop()
        if depth > MAX_JSON_DEPTH:
            raise too_deep
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        level.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))


def _lines(handle: Any, digest: Any) -> Iterator[bytes]:
    """The lines of the predictions member; a line longer than :data:`MAX_LINE` is refused as soon as the
    part read of it is that long (it is never built whole)."""
    rest = b""
    lineno = 0
    while chunk := handle.read(CHUNK):
        digest.update(chunk)
        parts = (rest + chunk).split(b"\n")
        rest = parts.pop()
        for part in parts:
            lineno += 1
            if len(part) > MAX_LINE:
                raise _line_too_long(lineno)
            yield part
        if len(rest) > MAX_LINE:
            raise _line_too_long(lineno + 1)
    if rest:
        yield rest


def _line_too_long(lineno: int) -> DataError:
    return DataError(
        f"predictions.jsonl line {lineno:,} is longer than {MAX_LINE // 2**20} MiB",
        "submit the run again with 'ddibench submit'",
    )


def _take_prediction(out: _Streamed, line: bytes, lineno: int, keep_traces: bool) -> None:
    try:
        record = json.loads(line)
        if not isinstance(record, dict):
            raise ValueError("not a JSON object")
        trace = record.get("trace")
        prediction = Prediction.model_validate({**record, "trace": {"llm": _calls(trace)} if trace else {}})
        whole_trace = json.dumps(trace or {}, ensure_ascii=False) if keep_traces else None
    except RecursionError:
        out.problem = f"line {lineno} is not a valid prediction record (nested too deeply)"
        return
    except (ValueError, TypeError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        out.problem = f"line {lineno} is not a valid prediction record ({first[:200]})"
        return
    # every field of a bundle's prediction counts as set: one shared set instead of one per prediction
    # (pydantic keeps a set of set field names on every instance, half the memory of a small prediction)
    object.__setattr__(prediction, "__pydantic_fields_set__", _ALL_FIELDS)
    if prediction.sample_id in out.predictions:
        out.duplicates += 1
    out.predictions[prediction.sample_id] = prediction
    if whole_trace is not None:
        out.traces[prediction.sample_id] = whole_trace


def _calls(trace: Any) -> list[dict[str, Any]]:
    """The LLM calls of a trace, reduced to what the identity and cost checks read."""
    if not isinstance(trace, dict):
        raise ValueError("trace is not an object")
    calls = trace.get("llm", [])
    if not isinstance(calls, list) or not all(isinstance(c, dict) for c in calls):
        raise ValueError("trace.llm is not a list of call records")
    out = []
    for call in calls:
        kept = {k: call[k] for k in CALL_FIELDS if k in call}
        if not isinstance(kept.get("role", ""), str) or not isinstance(kept.get("model", ""), (str, type(None))):
            raise ValueError("trace.llm role or model is not a name")
        for key in ("prompt_tokens", "completion_tokens"):
            value = kept.get(key, 0)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"trace.llm {key} {value!r} is not a token count")
        latency = kept.get("latency_s", 0.0)
        if (
            isinstance(latency, bool)
            or not isinstance(latency, (int, float))
            or not math.isfinite(latency)
            or latency < 0
        ):
            raise ValueError(f"trace.llm latency_s {latency!r} is not a duration")
        out.append(kept)
    return out
