"""A local OpenAI-compatible stub server (loopback only) for benchmarks and failure tests.

It speaks enough of the chat-completions protocol for the ``openai`` SDK: ``GET /v1/models`` and
``POST /v1/chat/completions`` over HTTP/1.1 keep-alive, with no latency of its own. What it answers is
scripted, so the harness's retry, Retry-After, garbage and empty-answer handling can be exercised
against a real socket:

* ``reply``: ``"label"`` (a constrained request gets ``{"type": k}``, k one of the schema's allowed
  numbers chosen by a hash of the request, an array property as many distinct allowed items as it
  requires, e.g. ``{"side_effects": [five names]}``, and an allowed value for the other properties;
  an unconstrained one gets a sentence),
  ``"echo"`` (the last user message), or any fixed text (``""`` for an empty answer);
* ``script``: what the first requests get, then normal answers: an HTTP status (``429``, ``500``; a
  ``Retry-After`` of ``retry_after`` goes with 429s) or one of the :data:`FAULTS` (a body that is not
  JSON, a 200 with an error object or no choices, a request that is never answered, ...);
* ``delay``: seconds to wait before each answer;
* ``fill``: the share of a request's ``max_tokens`` an answer's free text fills (0: one short sentence): an
  unconstrained answer, and a constrained answer's string properties (a ``"mechanism"``), are that long at four
  characters a token, so a rehearsal's prompts carry descriptions and insights of a served model's length;
* ``next_tokens``: for requests that ask for ``logprobs``, the top next tokens ``[token, logprob]`` to
  return, by the answer prefix the request ends with (its final assistant message; ``""`` for none): the
  likelihood answer mode's tree walk, scripted. A prefix not in the table gets no alternatives.

:class:`FaultProxy` sits in front of any OpenAI-compatible server (this stub, the embedded llama.cpp
server) and injects faults into a given share of the chat requests, drawn reproducibly from a seed
and the request (a retry of the same request draws again); every other request is forwarded.

The server counts what it serves: ``in_flight`` (chat requests being answered now, hung ones included),
``peak_in_flight``, ``in_flight_area`` (request-seconds: the integral of ``in_flight`` over time, so its growth
over a window divided by the window is the mean number in flight), ``busy_s`` (seconds with any request in
flight) and the prompt and completion tokens of its
answers (``answered``: each answer's request arrival on ``time.monotonic()``, its prompt and completion tokens);
:meth:`StubServer.counters` reads them at one instant.

Run it standalone with ``python -m ddibench.llm.stub --port 8099`` (``--upstream URL --fault hang=0.05``
for the proxy).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import hashlib
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
}

# faults a script step or the proxy can inject, besides plain HTTP statuses
FAULTS = {
    "garbage": "200 with a body that is not JSON",
    "error200": "200 with an error object instead of a completion",
    "empty_choices": '200 with "choices": []',
    "null_content": "200 with a message whose content is null",
    "list": "200 with a JSON list",
    "truncated": "200 whose body ends before its Content-Length",
    "hang": "no answer at all (the connection stays open)",
}
HANG_S = 3600.0


@dataclass
class StubConfig:
    model: str = "stub-model"
    reply: str = "label"
    script: list[int | str] = field(default_factory=list)
    retry_after: float | None = 1.0
    delay: float = 0.0
    next_tokens: dict[str, list[tuple[str, float]]] = field(default_factory=dict)
    fill: float = 0.0


class StubServer:
    def __init__(self, config: StubConfig | None = None, host: str = "127.0.0.1", port: int = 0) -> None:
        self.config = config or StubConfig()
        self.host = host
        self.port = port
        self.requests: list[dict[str, Any]] = []  # bodies of chat requests, in arrival order
        self.request_times: list[float] = []
        self._server: asyncio.AbstractServer | None = None
        self._script = list(self.config.script)
        self._connections: set[asyncio.Task[Any]] = set()
        self.hang_s = HANG_S
        self.in_flight = 0
        self.peak_in_flight = 0
        self.in_flight_area = 0.0  # request-seconds up to ``_since``
        self.busy_s = 0.0  # seconds with at least one request in flight, up to ``_since``
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.answered: list[
            tuple[float, int, int]
        ] = []  # each answer: (its request's arrival, prompt, completion tokens)
        self._since = time.monotonic()

    def _count_in_flight(self, change: int) -> None:
        now = time.monotonic()
        self.in_flight_area += self.in_flight * (now - self._since)
        self.busy_s += (self.in_flight > 0) * (now - self._since)
        self._since = now
        self.in_flight += change
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)

    def counters(self) -> dict[str, float]:
        """What the server has served up to now (``time.monotonic()``, the same clock in every process): chat
        requests, those in flight, request-seconds in flight, seconds busy, prompt and completion tokens."""
        now = time.monotonic()
        return {
            "t": now,
            "requests": len(self.requests),
            "in_flight": self.in_flight,
            "in_flight_area": self.in_flight_area + self.in_flight * (now - self._since),
            "busy_s": self.busy_s + (self.in_flight > 0) * (now - self._since),
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
        }

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, self.host, self.port, backlog=1024)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            for task in list(self._connections):  # idle keep-alive connections: end them while the loop runs
                task.cancel()
            await asyncio.gather(*self._connections, return_exceptions=True)
            await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._connections.add(task)
            task.add_done_callback(self._connections.discard)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
                body = await reader.readexactly(int(headers.get("content-length", "0") or 0))
                chat = method == "POST" and path.rstrip("/").endswith("/chat/completions")
                if chat:
                    self._count_in_flight(+1)
                try:
                    status, payload, extra = await self._respond(method, path, body)
                finally:
                    if chat:
                        self._count_in_flight(-1)
                reason = _REASONS.get(status, "Status")
                length = extra.pop("_length", str(len(payload)))
                head_out = (
                    f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {length}\r\n"
                )
                for k, v in extra.items():
                    head_out += f"{k}: {v}\r\n"
                writer.write(head_out.encode() + b"\r\n" + payload)
                await writer.drain()
                if headers.get("connection", "").lower() == "close" or length != str(len(payload)):
                    break
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass
        except asyncio.CancelledError:  # the server is closing (a hung request ends here): end quietly
            pass
        finally:
            writer.close()

    async def _respond(self, method: str, path: str, body: bytes) -> tuple[int, bytes, dict[str, str]]:
        if method == "GET" and path.rstrip("/").endswith("/models"):
            data = {"object": "list", "data": [{"id": self.config.model, "object": "model", "owned_by": "stub"}]}
            return 200, json.dumps(data).encode(), {}
        if method != "POST" or not path.rstrip("/").endswith("/chat/completions"):
            return 404, b'{"error": {"message": "not found"}}', {}
        request = json.loads(body or b"{}")
        self.requests.append(request)
        self.request_times.append(asyncio.get_running_loop().time())
        if self.config.delay:
            await asyncio.sleep(self.config.delay)
        step = self._script.pop(0) if self._script else 200
        if step != 200:
            return await self._fault(step)
        if request.get("model") != self.config.model:
            return 404, json.dumps({"error": {"message": f"model {request.get('model')} not found"}}).encode(), {}
        text = self._reply_text(request, body)
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "finish_reason": "stop",
        }
        if request.get("logprobs"):
            messages = request.get("messages") or [{}]
            prefix = messages[-1].get("content", "") if messages[-1].get("role") == "assistant" else ""
            top = [{"token": t, "logprob": lp} for t, lp in self.config.next_tokens.get(prefix, [])][
                : int(request.get("top_logprobs") or 0)
            ]
            first = top[0] if top else {"token": text[:1], "logprob": 0.0}
            choice["logprobs"] = {"content": [{**first, "top_logprobs": top}]}
        completion = {
            "id": "chatcmpl-stub",
            "object": "chat.completion",
            "created": 0,
            "model": self.config.model,
            "choices": [choice],
            "usage": {"prompt_tokens": len(body) // 4, "completion_tokens": max(1, len(text) // 4), "total_tokens": 0},
        }
        self.prompt_tokens += len(body) // 4
        self.completion_tokens += max(1, len(text) // 4)
        self.answered.append((self.request_times[-1], len(body) // 4, max(1, len(text) // 4)))
        return 200, json.dumps(completion).encode(), {}

    async def _fault(self, step: int | str) -> tuple[int, bytes, dict[str, str]]:
        """The response of a scripted or injected fault: an HTTP status or one of :data:`FAULTS`."""
        if step == "hang":
            await asyncio.sleep(self.hang_s)
            return 504, b'{"error": {"message": "hung"}}', {}
        if step == "garbage":
            return 200, b"<<not json at all>>", {}
        if step == "error200":
            return (
                200,
                json.dumps(
                    {"error": {"message": "upstream model crashed", "type": "server_error", "code": 500}}
                ).encode(),
                {},
            )
        if step == "empty_choices":
            return (
                200,
                json.dumps(
                    {"id": "x", "object": "chat.completion", "model": self.config.model, "choices": [], "usage": None}
                ).encode(),
                {},
            )
        if step == "null_content":
            choice = {"index": 0, "message": {"role": "assistant", "content": None}, "finish_reason": "stop"}
            return (
                200,
                json.dumps(
                    {"id": "x", "object": "chat.completion", "model": self.config.model, "choices": [choice]}
                ).encode(),
                {},
            )
        if step == "list":
            return 200, b"[]", {}
        if step == "truncated":
            return 200, b'{"id": "x", "choices": [{"index": 0, "mess', {"_length": "4096"}
        status = int(step)
        extra = {}
        if status == 429 and self.config.retry_after is not None:
            extra["Retry-After"] = f"{self.config.retry_after:g}"
        return status, json.dumps({"error": {"message": f"scripted {status}"}}).encode(), extra

    def _reply_text(self, request: dict[str, Any], body: bytes) -> str:
        mode = self.config.reply
        if mode == "label":
            digest = int.from_bytes(hashlib.sha256(body).digest()[:4], "big")
            schema = _schema_of(request)
            prose = self._prose(request, f"A plausible mechanism for this pair (note {digest % 997}).")
            if schema is None:  # no constrained output asked for: a free-text answer
                return prose
            properties = schema.get("properties") or {"type": {"enum": list(range(1, 87))}}
            answer: dict[str, Any] = {}
            for name, prop in properties.items():
                if prop.get("enum"):
                    answer[name] = prop["enum"][digest % len(prop["enum"])]
                elif prop.get("type") == "array":
                    allowed = (prop.get("items") or {}).get("enum") or ["item"]
                    n = min(len(allowed), int(prop.get("minItems") or prop.get("maxItems") or 3))
                    answer[name] = [allowed[(digest + 7919 * i) % len(allowed)] for i in range(len(allowed))]
                    answer[name] = list(dict.fromkeys(answer[name]))[:n]
                elif prop.get("type") == "integer":
                    answer[name] = digest % 5 + 1
                else:
                    answer[name] = self._prose(request, "Both drugs act on the same enzyme.", reserve=16)
            return json.dumps(answer)
        if mode == "echo":
            users = [m.get("content", "") for m in request.get("messages", []) if m.get("role") == "user"]
            return users[-1] if users else ""
        return mode

    def _prose(self, request: dict[str, Any], sentence: str, reserve: int = 0) -> str:
        """``sentence``, repeated to fill ``fill`` of the request's ``max_tokens`` (less ``reserve`` tokens for the
        rest of a JSON answer) at four characters a token; the sentence alone without ``fill``."""
        limit = request.get("max_tokens") or request.get("max_completion_tokens") or 0
        chars = 4 * max(0, int(self.config.fill * int(limit)) - reserve)
        if len(sentence) >= chars:
            return sentence
        return (" ".join([sentence] * (chars // (len(sentence) + 1) + 1)))[:chars]


def _schema_of(request: dict[str, Any]) -> dict[str, Any] | None:
    """The JSON schema a request constrains its answer to, in any of the supported forms."""
    fmt = request.get("response_format") or {}
    if fmt.get("type") == "json_schema":
        return fmt.get("json_schema", {}).get("schema")
    if fmt.get("type") == "json_object":
        return fmt.get("schema") or {}
    return None


class FaultProxy(StubServer):
    """A proxy that injects faults into a share of the chat requests and forwards the others upstream.

    ``faults`` maps a fault (an HTTP status such as ``"500"``/``"429"``, or one of :data:`FAULTS`) to the
    share of chat requests that get it. Draws are reproducible: they depend on the seed, the request
    body and how often that body was seen, so a retry draws again. ``injected`` counts what was injected.
    """

    def __init__(
        self, upstream: str, faults: dict[str, float], seed: int = 0, retry_after: float | None = 0.05, port: int = 0
    ) -> None:
        super().__init__(StubConfig(retry_after=retry_after), port=port)
        unknown = [f for f in faults if f not in FAULTS and not f.isdigit()]
        if unknown or sum(faults.values()) > 1:
            raise ValueError(f"faults must be HTTP statuses or {', '.join(FAULTS)}, with shares summing to at most 1")
        self.upstream = upstream.rstrip("/")
        self.faults = dict(faults)
        self.seed = seed
        self.injected: collections.Counter[str] = collections.Counter()
        self.forwarded = 0
        self._seen: collections.Counter[bytes] = collections.Counter()

    def draw(self, body: bytes) -> str | None:
        """The fault this request gets (None: forwarded)."""
        key = hashlib.sha256(body).digest()
        self._seen[key] += 1
        seed = hashlib.sha256(f"{self.seed}:{self._seen[key]}:".encode() + key).digest()
        u = int.from_bytes(seed[:8], "big") / 2**64
        for fault, share in self.faults.items():
            if u < share:
                return fault
            u -= share
        return None

    async def _respond(self, method: str, path: str, body: bytes) -> tuple[int, bytes, dict[str, str]]:
        if method == "POST" and path.rstrip("/").endswith("/chat/completions"):
            self.requests.append({})
            self.request_times.append(asyncio.get_running_loop().time())
            fault = self.draw(body)
            if fault is not None:
                self.injected[fault] += 1
                return await self._fault(fault)
        self.forwarded += 1
        return await self._forward(method, path, body)

    async def _forward(self, method: str, path: str, body: bytes) -> tuple[int, bytes, dict[str, str]]:
        host, _, rest = self.upstream.partition("://")[2].partition("/")
        hostname, _, port = host.partition(":")
        prefix = "/" + rest if rest else ""
        suffix = path[len("/v1") :] if path.startswith("/v1") else path  # the upstream URL carries its own prefix
        reader, writer = await asyncio.open_connection(hostname, int(port or 80))
        try:
            writer.write(
                f"{method} {prefix}{suffix} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                + body
            )
            await writer.drain()
            raw = await reader.read()
        finally:
            writer.close()
        head, _, payload = raw.partition(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        headers = {
            k.strip().lower(): v.strip()
            for k, _, v in (ln.partition(":") for ln in head.decode("latin-1").split("\r\n")[1:])
        }
        extra = {"Retry-After": headers["retry-after"]} if "retry-after" in headers else {}
        return status, payload, extra


@contextmanager
def running_stub(config: StubConfig | None = None) -> Iterator[StubServer]:
    """Run a stub server on a background thread's event loop for the duration of the block."""
    with serving(StubServer(config)) as server:
        yield server


@contextmanager
def running_proxy(
    upstream: str, faults: dict[str, float], seed: int = 0, retry_after: float | None = 0.05
) -> Iterator[FaultProxy]:
    """Run a :class:`FaultProxy` in front of ``upstream`` for the duration of the block."""
    with serving(FaultProxy(upstream, faults, seed, retry_after)) as proxy:
        yield proxy


S = TypeVar("S", bound=StubServer)


@contextmanager
def serving(server: S) -> Iterator[S]:
    """Run a server on a background thread's event loop for the duration of the block."""
    loop = asyncio.new_event_loop()
    ready = threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(server.start())
        ready.set()
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    if not ready.wait(10):
        raise RuntimeError("stub server did not start")
    try:
        yield server
    finally:
        asyncio.run_coroutine_threadsafe(server.close(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        if not thread.is_alive():  # closed here, not by the garbage collector whenever it runs (its fds long reused)
            loop.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8099)
    parser.add_argument("--model", default="stub-model")
    parser.add_argument("--reply", default="label")
    parser.add_argument(
        "--upstream", default=None, help="Run a fault-injecting proxy in front of this base URL instead."
    )
    parser.add_argument(
        "--fault", action="append", default=[], help="FAULT=SHARE for the proxy, e.g. hang=0.05 or 500=0.02."
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--delay", type=float, default=0.0, help="Seconds to wait before each answer.")
    parser.add_argument("--fill", type=float, default=0.0, help="Share of max_tokens a free-text answer fills.")
    args = parser.parse_args()

    async def serve() -> None:
        if args.upstream:
            faults = {k: float(v) for k, _, v in (f.partition("=") for f in args.fault)}
            server: StubServer = FaultProxy(args.upstream, faults, args.seed, port=args.port)
        else:
            config = StubConfig(model=args.model, reply=args.reply, delay=args.delay, fill=args.fill)
            server = StubServer(config, port=args.port)
        await server.start()
        print(f"{'fault proxy' if args.upstream else 'stub OpenAI-compatible server'} on {server.base_url}", flush=True)
        await asyncio.Event().wait()

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
