"""Reading a bundle's members safely: streamed through the bounded reader (:mod:`ddibench.submission.archive`), whose
per-member caps refuse an oversized member from its header; every member hashed a chunk at a time; the small
JSON members checked for depth; predictions parsed line by line, each line's length, the number of lines and
the JSON values they hold capped (a line is never built past its cap); scores/ kept (the task's evaluator
reads them) once their lines and values are counted; sessions.jsonl hashed and dropped (nothing reads it).

Every cap stops the read where it is crossed, with one :class:`DataError` line that names it: a gzip bomb,
an endless line or a flood of tiny records costs at most a cap's worth of work, never the whole member.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddibench.errors import DataError
from ddibench.schema import Prediction
from ddibench.submission.archive import SMALL_MEMBERS
from ddibench.submission.archive import members as bundle_members

CALL_FIELDS = (
    "role",
    "model",
    "prompt_tokens",
    "completion_tokens",
    "latency_s",
    "cached",
)  # what verify keeps of a traced call
CHUNK = 1 << 20
MAX_LINE = 4 * 2**20  # one prediction line (the longest shipped: 27 kB); a longer one is never built in memory
MAX_LINES = 100_000  # lines of predictions.jsonl, blank ones too (the biggest task: 38,419 samples)
# JSON values in predictions.jsonl, counted as its ',' ':' '[' (an upper bound: a value but the first of a list
# follows a ',' or a ':'): what parsing them builds, ~100 bytes each, held to what a hostile bundle may cost
# (300 MB with the interpreter); the biggest shipped bundle holds 0.73 million (a compact DrugBank S0 run); a
# non-compact one, every label scored, about 7 million: it is packed with --compact
MAX_VALUES = 2_000_000
MAX_SCORES_LINES = 100_000  # lines of scores/*.jsonl together, as str.splitlines counts them
MAX_SCORES_VALUES = 1_000_000  # JSON values in scores/*.jsonl together, counted as for predictions
MAX_JSON_DEPTH = 64  # bundle.json, run.json and results.json nest a handful of levels deep
_FIX = "submit the run again with 'ddibench submit'"
_FIX_BIG = "pack the run with 'ddibench submit --compact', which keeps of each prediction what the metrics read"
# what str.splitlines splits at, UTF-8 encoded (\r\n counts twice: an upper bound)
_SEPARATORS = (b"\n", b"\r", b"\x0b", b"\x0c", b"\x1c", b"\x1d", b"\x1e", b"\xc2\x85", b"\xe2\x80\xa8", b"\xe2\x80\xa9")
_STRUCTURE = (b",", b":", b"[")
_ALL_FIELDS = set(Prediction.model_fields)


def read_bundle(path: Path) -> dict[str, bytes]:
    """Every member of the bundle, whole, in memory (for tools and tests; :func:`verify` streams). The
    archive is read by a bounded reader of its own (:mod:`ddibench.submission.archive`), not by tarfile: each member at
    most its cap (:func:`ddibench.submission.archive.member_cap`), every one together at most ``MAX_BUNDLE_BYTES``."""
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
    scores_lines = scores_values = 0
    for name, handle in bundle_members(path):
        digest = hashlib.sha256()
        if name == "predictions.jsonl":
            for lineno, line in enumerate(_lines(handle, digest), 1):
                if line.strip() and out.problem is None:
                    _take_prediction(out, line, lineno, keep_traces)
        elif name in SMALL_MEMBERS or name.startswith("scores/"):  # read by the checks and the evaluator
            data = b"".join(_chunks(handle, digest))  # at most MAX_SMALL_BYTES, or MAX_SCORES_BYTES for scores/
            if name in SMALL_MEMBERS:
                _check_depth(name, data)
            else:  # what the evaluator's read_extras builds of them: their lines (str.splitlines) and values
                scores_lines += sum(data.count(s) for s in _SEPARATORS)
                scores_values += _values(data)
                _check_count("scores/*.jsonl", scores_lines, MAX_SCORES_LINES, scores_values, MAX_SCORES_VALUES, _FIX)
            out.members[name] = data
        else:  # sessions.jsonl: hashed, never kept (no check reads it)
            for _ in _chunks(handle, digest):
                pass
        out.hashes[name] = digest.hexdigest()
    if "bundle.json" not in out.members:
        raise DataError(f"{path} has no bundle.json", _FIX)
    return out


def _chunks(handle: Any, digest: Any) -> Iterator[bytes]:
    """A member's content a :data:`CHUNK` at a time, each hashed as it is read."""
    while chunk := handle.read(CHUNK):
        digest.update(chunk)
        yield chunk


def _values(data: bytes) -> int:
    return sum(data.count(s) for s in _STRUCTURE)


def _check_count(name: str, lines: int, max_lines: int, values: int, max_values: int, fix: str) -> None:
    if lines > max_lines:
        raise DataError(f"bundle member {name} has more than {max_lines:,} lines", fix)
    if values > max_values:
        raise DataError(f"bundle member {name} holds more than {max_values:,} JSON values (counted as its , : [)", fix)


def _check_depth(name: str, data: bytes) -> None:
    """Refuse a JSON member nested deeper than :data:`MAX_JSON_DEPTH` (a member that is not JSON at all
    is left to its record check, which names what is wrong)."""
    too_deep = DataError(f"bundle member '{name}' nests deeper than {MAX_JSON_DEPTH} levels", _FIX)
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
    """The lines of the predictions member. Each chunk's lines and JSON values are counted before any of its
    lines is parsed: one that takes the member past :data:`MAX_LINES` lines or :data:`MAX_VALUES` values is
    refused. A line longer than :data:`MAX_LINE` is refused as soon as the part read of it is that long (it
    is never built whole)."""
    parts: list[bytes] = []  # the line read so far, in pieces (joined once its end is seen)
    held = lines = values = 0
    for chunk in _chunks(handle, digest):
        lineno = lines
        lines += chunk.count(b"\n")
        values += _values(chunk)
        _check_count("predictions.jsonl", lines, MAX_LINES, values, MAX_VALUES, _FIX_BIG)
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            lineno += 1
            if held + end - start > MAX_LINE:
                raise _line_too_long(lineno)
            if parts:
                parts.append(chunk[start:end])
                line = b"".join(parts)
                parts, held = [], 0
            else:
                line = chunk[start:end]
            yield line
            start = end + 1
        if start < len(chunk):
            held += len(chunk) - start
            if held > MAX_LINE:
                raise _line_too_long(lineno + 1)
            parts.append(chunk[start:])
    if parts:
        yield b"".join(parts)


def _line_too_long(lineno: int) -> DataError:
    return DataError(f"predictions.jsonl line {lineno:,} is longer than {MAX_LINE // 2**20} MiB", _FIX_BIG)


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
