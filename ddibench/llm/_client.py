"""One OpenAI-compatible client path for every model.

:class:`LLMPool` owns the models of a run, by role (generator, describer, judge): it starts the
embedded llama.cpp server when a role uses it, checks remote endpoints before the first sample, and
hands out :class:`LLMClient` objects. A client call goes through the response cache, then its
endpoint's :class:`~ddibench.llm._policy.EndpointPolicy` (how many requests in flight, how long each
may take), then one pre-serialised JSON POST (:class:`~ddibench.llm._transport.ChatTransport`, HTTP/1.1
on kept-alive connections; aiohttp through a proxy) with retries and exponential backoff on 429, 5xx, timeouts, connection
errors and answers that are not answers (honouring ``Retry-After``), and records tokens and latency for
its role in the run's :class:`UsageLedger`.

The messages of a call are serialised once (:func:`~ddibench.llm._cache.encode_messages`): that text is
both the request body and the input of the cache key, and a system prompt shared by every call is
encoded and hashed once per process. The request path costs well under a millisecond of CPU per call
(``benchmarks/runner_throughput.py``).

Whether a response is a usable completion is decided in one place, :func:`unusable_reason`: a 200
response carrying an error object, no choices, or a message without content is a failed attempt,
retried and never cached; if every attempt fails, the call raises :class:`LLMCallError` with the
reason, like a 5xx.
"""

from __future__ import annotations

import asyncio
import email.utils
import io
import json
import pickle
import random
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ddibench.errors import ModelEndpointError
from ddibench.hashing import stable_json
from ddibench.llm._cache import ResponseCache, encode_messages, key_of
from ddibench.llm._policy import EndpointPolicy, StalledRequest
from ddibench.llm._spec import ModelSpec, identity_digest
from ddibench.llm._transport import ChatTransport, TransportError, TransportTimeout

RETRYABLE_STATUS = {408, 409, 425, 429, 500, 502, 503, 504, 529}
OVERLOAD_STATUS = {429, 503, 529}  # the endpoint asks for fewer requests: its policy shrinks concurrency
FAILED_FINISH = {"error", "abort"}  # finish reasons of a generation the server gave up on


class LLMCallError(ModelEndpointError):
    """A call that failed after its retries (or with an error retrying cannot fix)."""


@dataclass
class RoleUsage:
    calls: int = 0  # successful requests that reached the endpoint
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_prompt_tokens: int = 0  # tokens of answers served from the cache (not paid again)
    cached_completion_tokens: int = 0
    latency_s: float = 0.0  # summed over successful requests
    retries: int = 0
    failures: int = 0  # calls that failed for good
    timeouts: int = 0  # attempts cut at their deadline (a hung or stalled request)
    unusable: int = 0  # 200 responses without a usable completion (error object, no choices), retried


@dataclass
class UsageLedger:
    roles: dict[str, RoleUsage] = field(default_factory=dict)

    def role(self, name: str) -> RoleUsage:
        return self.roles.setdefault(name, RoleUsage())

    def as_dict(self) -> dict[str, dict[str, Any]]:
        return {name: asdict(usage) for name, usage in sorted(self.roles.items())}

    @property
    def total_calls(self) -> int:
        return sum(u.calls for u in self.roles.values())


@dataclass(frozen=True)
class ChatResult:
    text: str  # the answer (JSON text when a schema constrained it)
    finish_reason: str | None  # "stop", or "length" when max_tokens cut it
    prompt_tokens: int  # as the endpoint counted them
    completion_tokens: int  # generated tokens, as the endpoint counted them
    latency_s: float  # 0 for an answer from the response cache
    cached: bool  # served from the response cache (same model identity, messages and parameters)
    model_reported: str | None  # the model name the endpoint said answered
    model_id: str | None = None  # digest of the model identity that answered (see identity_digest)
    # when asked for (chat(top_logprobs=N)): the N most likely first tokens and their log-probabilities
    top_logprobs: tuple[tuple[str, float], ...] | None = None

    def trace(self) -> dict[str, Any]:
        """The call's record for a prediction's trace (use ``ddibench.llm_trace``, which adds the messages)."""
        return {
            "model": self.model_id,
            "finish_reason": self.finish_reason,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "latency_s": round(self.latency_s, 4),
            "cached": self.cached,
            "model_reported": self.model_reported,
        }


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


def retry_after_seconds(headers: Any) -> float | None:
    """Delay requested by a ``Retry-After`` (seconds or HTTP date) or ``retry-after-ms`` header."""
    if headers is None:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(value)
        return max(0.0, parsed.timestamp() - time.time()) if parsed else None


class LLMClient:
    """Chat completions for one role against one endpoint."""

    def __init__(
        self,
        spec: ModelSpec,
        identity: dict[str, Any],
        transport: ChatTransport,
        role: str,
        cache: ResponseCache | None,
        ledger: UsageLedger,
        policy: EndpointPolicy,
        *,
        max_retries: int = 5,
        backoff_base: float = 1.0,
        backoff_cap: float = 60.0,
        json_mode: str | None = None,
    ) -> None:
        self.spec = spec
        self.json_mode = json_mode or spec.json_mode  # the spec's, or what a probe of an 'auto' endpoint found
        self.identity = identity
        self.role = role
        self._transport = transport
        self._cache = cache
        self._usage = ledger.role(role)
        self._policy = policy
        self.model_id = identity_digest(identity)
        self._identity_json = stable_json(identity)  # the cache key's model part, serialised once
        self._model_json = _WIRE.encode(spec.model)
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.remember: Any = None  # set by the pool: keeps each system prompt once in the run directory
        # set by the pool for the embedded server: the error of a server process that has ended, else None
        self.liveness: Callable[[], ModelEndpointError | None] | None = None

    async def chat(
        self,
        messages: list[dict[str, Any]],
        *,
        temperature: float = 0.0,
        max_tokens: int = 256,
        top_p: float | None = None,
        seed: int | None = None,
        stop: list[str] | None = None,
        json_schema: dict[str, Any] | None = None,
        sample_index: int = 0,
        use_cache: bool = True,
        extra: dict[str, Any] | None = None,
        top_logprobs: int | None = None,
        prefill: str | None = None,
    ) -> ChatResult:
        """One chat completion. ``top_logprobs=N`` also returns the N most likely first tokens with their
        log-probabilities (:attr:`ChatResult.top_logprobs`); ``prefill`` makes the answer start with that text
        (the model continues it), where the endpoint offers it (:attr:`ModelSpec.prefill`)."""
        params: dict[str, Any] = {"temperature": temperature, "max_tokens": max_tokens}
        for name, value in (("top_p", top_p), ("seed", seed), ("stop", stop)):
            if value is not None:
                params[name] = value
        fmt = response_format(self.json_mode, json_schema)
        if fmt is not None:
            params["response_format"] = fmt
        if top_logprobs is not None:
            params["logprobs"] = True
            params["top_logprobs"] = top_logprobs
        if prefill is not None:
            if self.spec.prefill == "none":
                raise ModelEndpointError(
                    f"{self.spec.display()} cannot continue an answer prefix (needed by the likelihood answer mode)",
                    "use an embedded, llamacpp: or vllm: model, or answer_mode=generate",
                )
            messages = [*messages, {"role": "assistant", "content": prefill}]
            if self.spec.prefill == "vllm":
                extra = {**(extra or {}), "continue_final_message": True, "add_generation_prompt": False}
        if extra:
            params["extra_body"] = extra
        encoded = encode_messages(messages)  # once: the cache key and the request body share it
        if self.remember is not None:
            for digest, text in encoded.texts:
                self.remember(text, digest)
        params_json, tail_json = _encode_params(params)
        key = key_of(self._identity_json, encoded, params_json, sample_index)  # == cache_key(identity, messages, params, sample_index)
        cache = self._cache if use_cache else None
        if cache is not None:
            hit = cache.get(key)
            if hit is not None and _usable_cached(hit) and (top_logprobs is None or isinstance(hit.get("top_logprobs"), list)):
                self._usage.cache_hits += 1
                self._usage.cached_prompt_tokens += hit.get("prompt_tokens", 0)
                self._usage.cached_completion_tokens += hit.get("completion_tokens", 0)
                return ChatResult(
                    text=hit["text"],
                    finish_reason=hit.get("finish_reason"),
                    prompt_tokens=hit.get("prompt_tokens", 0),
                    completion_tokens=hit.get("completion_tokens", 0),
                    latency_s=0.0,
                    cached=True,
                    model_reported=hit.get("model_reported"),
                    model_id=self.model_id,
                    top_logprobs=tuple((str(t), float(lp)) for t, lp in hit["top_logprobs"]) if top_logprobs is not None else None,
                )
        body = self._body(messages, tail_json)
        result = await self._call(body, want_logprobs=top_logprobs is not None)
        if cache is not None:
            cache.put_encoded(
                key,
                self._identity_json,
                encoded,
                f'{{"params":{params_json},"sample_index":{int(sample_index)}}}',
                stable_json(
                    {
                        "text": result.text,
                        "finish_reason": result.finish_reason,
                        "prompt_tokens": result.prompt_tokens,
                        "completion_tokens": result.completion_tokens,
                        "model_reported": result.model_reported,
                        **({"top_logprobs": [list(x) for x in result.top_logprobs]} if result.top_logprobs is not None else {}),
                    }
                ),
            )
        return result

    def _body(self, messages: list[dict[str, Any]], tail_json: str) -> bytes:
        """The request body, byte for byte what the ``openai`` SDK sent before this client posted it itself
        (model, messages as given, then the parameters as :func:`_encode_params` writes them): a server that
        answers by the request's bytes (the stub) answers as it did before."""
        wire = ",".join(_wire_message(m) for m in messages)
        return f'{{"model":{self._model_json},"messages":[{wire}]{tail_json}'.encode()

    async def _call(self, body: bytes, want_logprobs: bool = False) -> ChatResult:
        where = f"{self.spec.display()} ({self.role})"
        for attempt in range(self.max_retries + 1):
            delay: float | None = None
            async with self._policy:
                start = time.perf_counter()
                try:
                    status, headers, raw = await self._policy.bounded(self._transport.post(body), attempt)
                    latency = time.perf_counter() - start
                except (StalledRequest, TransportTimeout) as exc:
                    await self._raise_if_gone()
                    self._usage.timeouts += 1
                    self._policy.timed_out()
                    delay = 0.0  # the wait was the backoff; the retry gets a longer deadline (see EndpointPolicy)
                    error = f"timeout ({exc})" if isinstance(exc, StalledRequest) else f"timeout after {self._policy.timeout:g} s"
                except TransportError as exc:
                    await self._raise_if_gone()
                    error = str(exc)
                else:
                    if not 200 <= status < 300:
                        if status not in RETRYABLE_STATUS:
                            self._usage.failures += 1
                            raise LLMCallError(f"{where} answered HTTP {status}: {_short(_error_text(raw))}", _status_fix(status, self.spec))
                        if status in OVERLOAD_STATUS:
                            self._policy.overloaded()
                        delay = retry_after_seconds(headers)
                        error = f"HTTP {status}"
                    else:
                        try:
                            completion = json.loads(raw)
                        except ValueError as exc:  # not JSON, cut short, not UTF-8
                            error = f"unreadable response ({type(exc).__name__})"
                        else:
                            reason = unusable_reason(completion)
                            if reason is None:
                                self._policy.answered(latency)
                                result = _result(completion, latency, self._usage, self.model_id)
                                if want_logprobs and result.top_logprobs is None:  # no retry can give what the server does not offer
                                    self._usage.failures += 1
                                    raise LLMCallError(
                                        f"{where} returned no token log-probabilities although they were asked for",
                                        "use an endpoint that returns them (llama.cpp, vLLM), or answer_mode=generate",
                                    )
                                return result
                            self._usage.unusable += 1
                            error = f"HTTP 200 without a usable completion: {reason}"
            if attempt == self.max_retries:
                self._usage.failures += 1
                raise LLMCallError(
                    f"{where} failed after {attempt + 1} attempts (last: {error})",
                    "check that the server is up and not overloaded, then re-run the same command to resume",
                )
            self._usage.retries += 1
            if delay is None:
                delay = min(self.backoff_cap, self.backoff_base * 2**attempt) * (0.5 + random.random() / 2)
            await asyncio.sleep(min(delay, self.backoff_cap * 2))
        raise AssertionError("unreachable")

    async def _raise_if_gone(self) -> None:
        """A lost connection to the embedded server: if its process has ended, stop now (no retry can help)."""
        if self.liveness is not None:
            for _ in range(20):  # the socket can close a moment before the process is reaped
                died = self.liveness()
                if died is not None:
                    self._usage.failures += 1
                    raise died
                await asyncio.sleep(0.01)


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


def _result(completion: Any, latency: float, usage: RoleUsage, model_id: str | None) -> ChatResult:
    """The ChatResult of a usable completion (see :func:`unusable_reason`)."""
    choice = _field(completion, "choices")[0]
    message = _field(choice, "message")
    content = _field(message, "content")
    text = content if isinstance(content, str) else str(_field(message, "refusal"))
    tokens = _field(completion, "usage")
    prompt = int(_field(tokens, "prompt_tokens") or 0) if tokens is not None else 0
    generated = int(_field(tokens, "completion_tokens") or 0) if tokens is not None else 0
    usage.calls += 1
    usage.prompt_tokens += prompt
    usage.completion_tokens += generated
    usage.latency_s += latency
    reported = _field(completion, "model")
    return ChatResult(
        text=text,
        finish_reason=_field(choice, "finish_reason"),
        prompt_tokens=prompt,
        completion_tokens=generated,
        latency_s=latency,
        cached=False,
        model_reported=reported if isinstance(reported, str) else None,
        model_id=model_id,
        top_logprobs=_top_logprobs(choice),
    )


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


# ---------------------------------------------------------------------------------------------


class LLMPool:
    """The models of one run, by role; starts and stops the embedded server as needed."""

    def __init__(
        self,
        specs: dict[str, ModelSpec],
        *,
        cache: ResponseCache | None,
        concurrency: int = 4,
        embedded_slots: int = 1,
        log_dir: Path | None = None,
        n_threads: int | None = None,
        timeout: float = 120.0,
        max_retries: int = 5,
    ) -> None:
        self.specs = specs
        self.cache = cache
        self.concurrency = concurrency
        self.embedded_slots = embedded_slots
        self.log_dir = log_dir
        self.n_threads = n_threads
        self.timeout = timeout
        self.max_retries = max_retries
        self.ledger = UsageLedger()
        self.served: dict[str, Any] = {}
        self._identities: dict[ModelSpec, dict[str, Any]] = {}
        self._endpoints: dict[ModelSpec, tuple[ChatTransport, EndpointPolicy]] = {}
        self._policies: dict[str, EndpointPolicy] = {}  # kept after close(), for the session record
        self._servers: list[Any] = []
        self._liveness: dict[ModelSpec, Callable[[], ModelEndpointError | None]] = {}
        self._clients: dict[str, LLMClient] = {}
        self._remembered: set[str] = set()

    def identity(self, role: str) -> dict[str, Any]:
        spec = self.specs[role]
        if spec not in self._identities:
            self._identities[spec] = spec.identity()
        return self._identities[spec]

    def identities(self, roles: list[str]) -> dict[str, dict[str, Any]]:
        return {role: self.identity(role) for role in roles}

    def preflight(self) -> None:
        """Check every remote endpoint of the pool (reachable, key accepted, model served)."""
        for spec in dict.fromkeys(self.specs.values()):
            if not spec.is_embedded and spec.display() not in self.served:
                self.served[spec.display()] = preflight(spec)

    async def start(self, roles: list[str]) -> None:
        for role in roles:
            spec = self.specs[role]
            if spec in self._endpoints:
                continue
            if spec.is_embedded:
                # started from this (the main) thread on purpose: the server is asked to die with the
                # thread that forked it, which must live as long as the run
                base_url = self._start_embedded(spec)
            else:
                base_url = spec.base_url or ""
                if spec.display() not in self.served:
                    self.served[spec.display()] = await asyncio.to_thread(preflight, spec)
            timeout = spec.timeout or self.timeout
            # the embedded llama.cpp server answers as many requests at once as it has slots (one by default);
            # queueing more there only inflates latency
            limit = self.embedded_slots if spec.is_embedded else self.concurrency
            policy = EndpointPolicy(limit, timeout, adaptive=not spec.is_embedded)
            transport = ChatTransport(base_url, spec.api_key(), timeout)
            self._endpoints[spec] = (transport, policy)
            self._policies[spec.display()] = self._endpoints[spec][1]

    def _start_embedded(self, spec: ModelSpec) -> str:
        from ddibench.llm._embedded import EmbeddedServer

        log = self.log_dir / "llm-server.log" if self.log_dir else None
        server = EmbeddedServer(spec.gguf_path(), spec.model, n_threads=self.n_threads, parallel=self.embedded_slots, log_path=log)
        base_url = server.start()
        self._servers.append(server)
        self._liveness[spec] = server.died_error
        self.served[spec.display()] = {"base_url": base_url, "model_path": str(server.model_path)}
        return base_url

    def client(self, role: str) -> LLMClient:
        if role not in self._clients:
            spec = self.specs[role]
            if spec not in self._endpoints:
                raise RuntimeError(f"model for role '{role}' was not started; list it in the system's llm_roles")
            transport, policy = self._endpoints[spec]
            self._clients[role] = LLMClient(
                spec,
                self.identity(role),
                transport,
                role,
                self.cache,
                self.ledger,
                policy,
                max_retries=self.max_retries,
                json_mode=self.json_mode(role),
            )
            self._clients[role].remember = self._remember_text
            self._clients[role].liveness = self._liveness.get(spec)
        return self._clients[role]

    def json_mode(self, role: str) -> str:
        """How the role's answers are constrained: its spec's json mode, or what the probe of an 'auto' endpoint found."""
        spec = self.specs[role]
        if spec.json_mode != "auto":
            return spec.json_mode
        return str((self.served.get(spec.display()) or {}).get("json_mode", "none"))

    def output(self, role: str) -> str:
        """The role's output constraint in words (what manifests and reports say)."""
        from ddibench.llm._spec import OUTPUT

        mode = self.json_mode(role)
        probed = " (probed at the start)" if self.specs[role].json_mode == "auto" else ""
        return OUTPUT.get(mode, mode) + probed

    def endpoint_stats(self) -> dict[str, dict[str, Any]]:
        """Each started endpoint's policy: its concurrency (and the lowest it fell to), timeouts, deadline."""
        return {display: policy.stats() for display, policy in self._policies.items()}

    def _remember_text(self, text: str, digest: str | None = None) -> None:
        """Keep a system prompt once as ``<log_dir>/texts/<sha256>.txt`` (traces refer to it by hash)."""
        from ddibench.hashing import sha256_text

        if self.log_dir is None:
            return
        digest = digest or sha256_text(text)
        if digest in self._remembered:
            return
        path = self.log_dir / "texts" / f"{digest}.txt"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_text(text, encoding="utf-8")
            tmp.replace(path)
        self._remembered.add(digest)

    async def close(self) -> None:
        """Close the connections, stop the embedded server, and commit the answers still queued for the cache."""
        for transport, _ in self._endpoints.values():
            try:
                await transport.close()
            except Exception:  # noqa: BLE001 - closing must not mask the run's own error
                pass
        self._endpoints.clear()
        self._clients.clear()
        for server in self._servers:
            server.stop()
        self._servers.clear()
        if self.cache is not None:
            self.cache.flush()


def preflight(spec: ModelSpec, timeout: float = 10.0) -> dict[str, Any]:
    """Check a remote endpoint before the first sample: reachable, key accepted, model served."""
    url = (spec.base_url or "").rstrip("/") + "/models"
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {spec.api_key()}"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:  # noqa: S310 - user-given endpoint
            payload = json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            raise ModelEndpointError(f"{spec.base_url} rejected the API key (HTTP {exc.code})", _status_fix(exc.code, spec)) from None
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
        body = {"model": spec.model, "messages": [{"role": "user", "content": "Reply with a JSON object."}], "max_tokens": 16,
                "temperature": 0, "response_format": response_format(mode, PROBE_SCHEMA)}  # fmt: skip
        request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json", "Authorization": f"Bearer {spec.api_key()}"})
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
