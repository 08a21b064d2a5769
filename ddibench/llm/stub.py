"""A local OpenAI-compatible stub server (loopback only) for benchmarks and failure tests.

It speaks enough of the chat-completions protocol for the ``openai`` SDK: ``GET /v1/models`` and
``POST /v1/chat/completions`` over HTTP/1.1 keep-alive, with no latency of its own. What it answers is
scripted, so the harness's retry, Retry-After, garbage and empty-answer handling can be exercised
against a real socket:

* ``reply``: ``"label"`` (a constrained request gets ``{"type": k}``, k one of the schema's allowed
  numbers chosen by a hash of the request, and an allowed value or list of allowed values for the
  other properties; an unconstrained one gets a sentence),
  ``"echo"`` (the last user message), or any fixed text (``""`` for an empty answer);
* ``script``: statuses for the first requests, e.g. ``[429, 500]`` then normal answers;
  ``retry_after`` is sent with 429s; ``"garbage"`` answers 200 with a body that is not JSON;
* ``delay``: seconds to wait before each answer.

Run it standalone with ``python -m ddibench.llm.stub --port 8099``.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 429: "Too Many Requests", 500: "Internal Server Error", 503: "Service Unavailable"}


@dataclass
class StubConfig:
    model: str = "stub-model"
    reply: str = "label"
    script: list[int | str] = field(default_factory=list)
    retry_after: float | None = 1.0
    delay: float = 0.0


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
                status, payload, extra = await self._respond(method, path, body)
                reason = _REASONS.get(status, "Status")
                head_out = f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
                for k, v in extra.items():
                    head_out += f"{k}: {v}\r\n"
                writer.write(head_out.encode() + b"\r\n" + payload)
                await writer.drain()
                if headers.get("connection", "").lower() == "close":
                    break
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
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
        if step == "garbage":
            return 200, b"<<not json at all>>", {}
        if step != 200:
            extra = {}
            if step == 429 and self.config.retry_after is not None:
                extra["Retry-After"] = f"{self.config.retry_after:g}"
            return int(step), json.dumps({"error": {"message": f"scripted {step}"}}).encode(), extra
        if request.get("model") != self.config.model:
            return 404, json.dumps({"error": {"message": f"model {request.get('model')} not found"}}).encode(), {}
        text = self._reply_text(request, body)
        completion = {
            "id": "chatcmpl-stub",
            "object": "chat.completion",
            "created": 0,
            "model": self.config.model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": len(body) // 4, "completion_tokens": max(1, len(text) // 4), "total_tokens": 0},
        }
        return 200, json.dumps(completion).encode(), {}

    def _reply_text(self, request: dict[str, Any], body: bytes) -> str:
        mode = self.config.reply
        if mode == "label":
            digest = int.from_bytes(hashlib.sha256(body).digest()[:4], "big")
            schema = _schema_of(request)
            if schema is None:  # no constrained output asked for: a free-text answer
                return f"A plausible mechanism for this pair (note {digest % 997})."
            properties = schema.get("properties") or {"type": {"enum": list(range(1, 87))}}
            answer: dict[str, Any] = {}
            for name, prop in properties.items():
                if prop.get("enum"):
                    answer[name] = prop["enum"][digest % len(prop["enum"])]
                elif prop.get("type") == "integer":
                    answer[name] = digest % 5 + 1
                elif prop.get("type") == "array":  # e.g. five target symbols: items of the allowed values, by the hash
                    allowed = (prop.get("items") or {}).get("enum") or ["ITEM"]
                    answer[name] = [allowed[(digest + 7919 * i) % len(allowed)] for i in range(int(prop.get("maxItems", 3)))]
                else:
                    answer[name] = "Both drugs act on the same enzyme."
            return json.dumps(answer)
        if mode == "echo":
            users = [m.get("content", "") for m in request.get("messages", []) if m.get("role") == "user"]
            return users[-1] if users else ""
        return mode


def _schema_of(request: dict[str, Any]) -> dict[str, Any] | None:
    """The JSON schema a request constrains its answer to, in any of the supported forms."""
    fmt = request.get("response_format") or {}
    if fmt.get("type") == "json_schema":
        return fmt.get("json_schema", {}).get("schema")
    if fmt.get("type") == "json_object":
        return fmt.get("schema") or {}
    return None


@contextmanager
def running_stub(config: StubConfig | None = None) -> Iterator[StubServer]:
    """Run a stub server on a background thread's event loop for the duration of the block."""
    server = StubServer(config)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8099)
    parser.add_argument("--model", default="stub-model")
    parser.add_argument("--reply", default="label")
    args = parser.parse_args()

    async def serve() -> None:
        server = StubServer(StubConfig(model=args.model, reply=args.reply), port=args.port)
        await server.start()
        print(f"stub OpenAI-compatible server on {server.base_url}", flush=True)
        await asyncio.Event().wait()

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
