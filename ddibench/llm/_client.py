"""One OpenAI-compatible client path for every model.

:class:`~ddibench.llm._pool.LLMPool` owns the models of a run, by role (generator, describer, judge): it
starts the embedded llama.cpp server when a role uses it, checks remote endpoints before the first sample
(:mod:`~ddibench.llm._preflight`), and hands out :class:`LLMClient` objects. A client call goes through the
response cache, then its endpoint's :class:`~ddibench.llm._policy.EndpointPolicy` (how many requests in
flight, how long each may take), then one pre-serialised JSON POST (:class:`~ddibench.net.Endpoint`: HTTP/1.1
on kept-alive connections, aiohttp through a proxy, no redirect followed, a deadline and a byte cap per request) with retries and exponential backoff on 429, 5xx, timeouts, connection
errors and answers that are not answers (honouring ``Retry-After``), and records tokens and latency for
its role in the run's :class:`UsageLedger`.

The messages of a call are serialised once (:func:`~ddibench.llm._cache.encode_messages`): that text is
both the request body and the input of the cache key, and a system prompt shared by every call is
encoded and hashed once per process (the request body's encoding: :mod:`~ddibench.llm._wire`). The request
path costs well under a millisecond of CPU per call (``benchmarks/runner_throughput.py``).

Whether a response is a usable completion is decided in one place,
:func:`~ddibench.llm._completion.unusable_reason`: a 200 response carrying an error object, no choices,
or a message without content is a failed attempt, retried and never cached; if every attempt fails, the
call raises :class:`LLMCallError` with the reason, like a 5xx.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import json
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from ddibench.errors import ModelEndpointError
from ddibench.hashing import stable_json
from ddibench.llm._cache import Encoded, ResponseCache, encode_messages, key_of
from ddibench.llm._completion import (
    _error_text,
    _field,
    _short,
    _status_fix,
    _top_logprobs,
    _usable_cached,
    unusable_reason,
)
from ddibench.llm._policy import EndpointPolicy, StalledRequest
from ddibench.llm._request import ChatRequest, request_params
from ddibench.llm._spec import NOT_ANSWERING, ModelSpec, identity_digest
from ddibench.llm._wire import _WIRE, _encode_params, _wire_message
from ddibench.net import Endpoint, HttpError, HttpRefused, HttpTimeout

RETRYABLE_STATUS = {408, 409, 425, 429, 500, 502, 503, 504, 529}
OVERLOAD_STATUS = {429, 503, 529}  # the endpoint asks for fewer requests: its policy shrinks concurrency


# a failed attempt: why, and the delay the endpoint asked for before the next one (None: exponential backoff)
_Failed = tuple[str, float | None]


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
    # prompt tokens the endpoint took from its own prefix cache instead of evaluating them again, as it reported
    # them (``usage.prompt_tokens_details.cached_tokens``: OpenAI, vLLM and llama.cpp's server; 0 where not reported)
    reused_prompt_tokens: int = 0
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

    def snapshot(self) -> dict[str, RoleUsage]:
        """A copy of every role's usage now, to measure a stretch of work with :meth:`since`."""
        return {name: replace(usage) for name, usage in self.roles.items()}

    def since(self, before: dict[str, RoleUsage]) -> dict[str, dict[str, Any]]:
        """What each role used after ``before`` (a :meth:`snapshot`): calls, cache hits, tokens sent, reused and
        generated, and seconds waited; a role that made no call in between is left out."""
        out = {}
        for name, now in sorted(self.roles.items()):
            was = before.get(name, RoleUsage())
            if now.calls == was.calls and now.cache_hits == was.cache_hits:
                continue
            out[name] = {
                "calls": now.calls - was.calls,
                "cache_hits": now.cache_hits - was.cache_hits,
                "prompt_tokens": now.prompt_tokens - was.prompt_tokens,
                "reused_prompt_tokens": now.reused_prompt_tokens - was.reused_prompt_tokens,
                "completion_tokens": now.completion_tokens - was.completion_tokens,
                "latency_s": round(now.latency_s - was.latency_s, 3),
            }
        return out


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
    # of prompt_tokens, those the endpoint took from its prefix cache (0 where it does not say, or from our cache)
    reused_prompt_tokens: int = 0

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
        transport: Endpoint,
        role: str,
        cache: ResponseCache | None,
        ledger: UsageLedger,
        policy: EndpointPolicy,
        *,
        max_retries: int = 5,
        backoff_base: float = 1.0,
        backoff_cap: float = 60.0,
        json_mode: str | None = None,
        serial: bool = False,
    ) -> None:
        self.spec = spec
        self.json_mode = json_mode or spec.json_mode  # the spec's, or what a probe of an 'auto' endpoint found
        self.identity = identity
        self.role = role
        self._transport = transport
        self._cache = cache
        self._usage = ledger.role(role)
        self._policy = policy
        # this role's requests are held to the policy's serial limit (on the embedded server: one at a time
        # unless the role mostly generates; see EndpointPolicy)
        self._serial = serial
        self.model_id = identity_digest(identity)
        # the cache key's model part, serialised once (without the fields that cannot change an answer)
        self._identity_json = stable_json({k: v for k, v in identity.items() if k not in NOT_ANSWERING})
        self._model_json = _WIRE.encode(spec.model)
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.remember: Any = None  # set by the pool: keeps each system prompt once in the run directory
        # set by the pool for the embedded server: the error of a server process that has ended, else None
        self.liveness: Callable[[], ModelEndpointError | None] | None = None

    def holding(self) -> contextlib.AbstractAsyncContextManager[None]:
        """Requests made inside go to the endpoint one after another with no other request in between: a
        series that continues one prompt keeps the server's prompt cache (see :class:`EndpointPolicy`)."""
        return self._policy.hold(self._serial)

    async def ask(self, request: ChatRequest) -> ChatResult:
        """:meth:`chat` with a request written before the call (one a plan can look up in the cache)."""
        return await self.chat(list(request.messages), **request.kwargs())

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
        params = request_params(self.json_mode, temperature, max_tokens, top_p, seed, stop, json_schema, top_logprobs)
        if prefill is not None:
            messages, extra = self._prefilled(messages, extra, prefill)
        if extra:
            params["extra_body"] = extra
        encoded = encode_messages(messages)  # once: the cache key and the request body share it
        if self.remember is not None:
            for digest, text in encoded.texts:
                self.remember(text, digest)
        params_json, tail_json = _encode_params(params)
        key = key_of(
            self._identity_json, encoded, params_json, sample_index
        )  # == cache_key(identity, messages, params, sample_index)
        cache = self._cache if use_cache else None
        if cache is not None:
            hit = self._cached(cache, key, top_logprobs)
            if hit is not None:
                return hit
        body = self._body(messages, tail_json)
        result = await self._call(body, want_logprobs=top_logprobs is not None)
        if cache is not None:
            _store(cache, key, self._identity_json, encoded, params_json, sample_index, result)
        return result

    def _prefilled(
        self, messages: list[dict[str, Any]], extra: dict[str, Any] | None, prefill: str
    ) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        """The messages ending with the answer prefix as an assistant turn, and the extra fields that make the
        endpoint continue it; raises where the endpoint cannot."""
        if self.spec.prefill == "none":
            raise ModelEndpointError(
                f"{self.spec.display()} cannot continue an answer prefix (needed by the likelihood answer mode)",
                "use an embedded, llamacpp: or vllm: model, or answer_mode=generate",
            )
        messages = [*messages, {"role": "assistant", "content": prefill}]
        if self.spec.prefill == "vllm":
            extra = {**(extra or {}), "continue_final_message": True, "add_generation_prompt": False}
        return messages, extra

    def _cached(self, cache: ResponseCache, key: str, top_logprobs: int | None) -> ChatResult | None:
        """The cached answer to this call, counted in the role's usage; None when there is none usable (or it
        lacks the log-probabilities asked for)."""
        hit = cache.get(key)
        if hit is None or not _usable_cached(hit):
            return None
        if top_logprobs is not None and not isinstance(hit.get("top_logprobs"), list):
            return None
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
            top_logprobs=tuple((str(t), float(lp)) for t, lp in hit["top_logprobs"])
            if top_logprobs is not None
            else None,
        )

    def _body(self, messages: list[dict[str, Any]], tail_json: str) -> bytes:
        """The request body, byte for byte what the ``openai`` SDK sent before this client posted it itself
        (model, messages as given, then the parameters as :func:`_encode_params` writes them): a server that
        answers by the request's bytes (the stub) answers as it did before."""
        wire = ",".join(_wire_message(m) for m in messages)
        return f'{{"model":{self._model_json},"messages":[{wire}]{tail_json}'.encode()

    async def _call(self, body: bytes, want_logprobs: bool = False) -> ChatResult:
        """The endpoint's answer to the request, after retries with backoff; raises :class:`LLMCallError`."""
        where = f"{self.spec.display()} ({self.role})"
        for attempt in range(self.max_retries + 1):
            async with self._policy.slot(self._serial):
                outcome = await self._attempt(body, attempt, where, want_logprobs)
            if isinstance(outcome, ChatResult):
                return outcome
            error, delay = outcome
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

    async def _attempt(self, body: bytes, attempt: int, where: str, want_logprobs: bool) -> ChatResult | _Failed:
        """One request (inside the endpoint policy): its result, or why it failed and the delay it asks for
        before the next attempt (None: exponential backoff); raises for an error no retry can fix."""
        start = time.perf_counter()
        try:
            response = await self._policy.bounded(self._transport.request("POST", "/chat/completions", body), attempt)
            latency = time.perf_counter() - start
        except (StalledRequest, HttpTimeout) as exc:
            await self._raise_if_gone()
            self._usage.timeouts += 1
            self._policy.timed_out()
            error = (
                f"timeout ({exc})" if isinstance(exc, StalledRequest) else f"timeout after {self._policy.timeout:g} s"
            )
            return error, 0.0  # the wait was the backoff; the retry gets a longer deadline (see EndpointPolicy)
        except HttpRefused as exc:  # a redirect elsewhere, a body over the cap, a server that is not HTTP
            self._usage.failures += 1
            raise LLMCallError(f"{where}: {exc.problem}", exc.fix) from None
        except HttpError as exc:
            await self._raise_if_gone()
            return exc.problem, None
        status, headers, raw = response.status, response.headers, response.body
        if not 200 <= status < 300:
            return self._http_error(status, headers, raw, where)
        return self._completion(raw, latency, where, want_logprobs)

    def _http_error(self, status: int, headers: Any, raw: bytes, where: str) -> _Failed:
        """The failure of a non-2xx answer worth retrying, with the delay the endpoint asked for; raises for a
        status no retry can fix."""
        if status not in RETRYABLE_STATUS:
            self._usage.failures += 1
            raise LLMCallError(
                f"{where} answered HTTP {status}: {_short(_error_text(raw))}",
                _status_fix(status, self.spec),
            )
        if status in OVERLOAD_STATUS:
            self._policy.overloaded()
        return f"HTTP {status}", retry_after_seconds(headers)

    def _completion(self, raw: bytes, latency: float, where: str, want_logprobs: bool) -> ChatResult | _Failed:
        """The result of a 2xx answer, or why it is not a usable completion (retried after backoff); raises
        when log-probabilities were asked for and the server does not return them."""
        try:
            completion = json.loads(raw)
        except ValueError as exc:  # not JSON, cut short, not UTF-8
            return f"unreadable response ({type(exc).__name__})", None
        reason = unusable_reason(completion)
        if reason is not None:
            self._usage.unusable += 1
            return f"HTTP 200 without a usable completion: {reason}", None
        self._policy.answered(latency)
        result = _result(completion, latency, self._usage, self.model_id)
        if want_logprobs and result.top_logprobs is None:  # no retry can give what the server does not offer
            self._usage.failures += 1
            raise LLMCallError(
                f"{where} returned no token log-probabilities although they were asked for",
                "use an endpoint that returns them (llama.cpp, vLLM), or answer_mode=generate",
            )
        return result

    async def _raise_if_gone(self) -> None:
        """A lost connection to the embedded server: if its process has ended, stop now (no retry can help)."""
        if self.liveness is not None:
            for _ in range(20):  # the socket can close a moment before the process is reaped
                died = self.liveness()
                if died is not None:
                    self._usage.failures += 1
                    raise died
                await asyncio.sleep(0.01)


def _store(
    cache: ResponseCache,
    key: str,
    identity_json: str,
    encoded: Encoded,
    params_json: str,
    sample_index: int,
    result: ChatResult,
) -> None:
    """Writes a fresh answer to the response cache under its key (the log-probabilities only when asked for)."""
    cache.put_encoded(
        key,
        identity_json,
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


def _result(completion: Any, latency: float, usage: RoleUsage, model_id: str | None) -> ChatResult:
    """The ChatResult of a usable completion (see :func:`unusable_reason`)."""
    choice = _field(completion, "choices")[0]
    message = _field(choice, "message")
    content = _field(message, "content")
    text = content if isinstance(content, str) else str(_field(message, "refusal"))
    tokens = _field(completion, "usage")
    prompt = int(_field(tokens, "prompt_tokens") or 0) if tokens is not None else 0
    generated = int(_field(tokens, "completion_tokens") or 0) if tokens is not None else 0
    details = _field(tokens, "prompt_tokens_details") if tokens is not None else None
    reused = int(_field(details, "cached_tokens") or 0) if details is not None else 0
    usage.calls += 1
    usage.prompt_tokens += prompt
    reused = min(reused, prompt)
    usage.reused_prompt_tokens += reused
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
        reused_prompt_tokens=reused,
    )
