"""The hand-written HTTP/1.1 client (:mod:`ddibench.net`), as the chat path uses it, against a raw server that
answers each request with scripted bytes: the framings a server may choose (Content-Length, chunked,
close-delimited), keep-alive and its end, a kept-alive connection dropped while idle, and responses that are not
HTTP. The stub servers of test_llm and test_faults (aiohttp) and the embedded llama.cpp server (uvicorn) exercise
the common path; tests/test_hostile_endpoints.py the servers that redirect, flood, drip or answer garbage."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import pytest

from ddibench.llm._pool import chat_endpoint
from ddibench.net import Endpoint, HttpError, HttpRefused, HttpTimeout

BODY = json.dumps({"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}]}).encode()


def _length(body: bytes = BODY, extra: str = "") -> bytes:
    return (
        f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode()
        + body
    )


class Chat:
    """The chat-completion POST of an endpoint, as the LLM client makes it: (status, headers, body)."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint

    async def post(self, body: bytes) -> tuple[int, object, bytes]:
        response = await self.endpoint.request("POST", "/chat/completions", body)
        return response.status, response.headers, response.body

    async def close(self) -> None:
        await self.endpoint.close()


class ScriptedServer:
    """Answers the n-th request (over all connections) with ``script[n]`` (bytes, or a callable acting on
    the connection's writer); ``None`` closes the connection without answering."""

    def __init__(self, script: list[bytes | Callable[[asyncio.StreamWriter], object] | None]) -> None:
        self.script = list(script)
        self.requests: list[bytes] = []
        self.connections = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(
                    next(
                        line.split(b":")[1]
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length")
                    )
                )
                self.requests.append(head + await reader.readexactly(length))
                step = self.script.pop(0)
                if step is None:
                    break
                if callable(step):
                    step(writer)
                else:
                    writer.write(step)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


async def _with_server(script: list, body: Callable[[Chat, ScriptedServer], object], timeout: float = 5.0) -> None:
    server = ScriptedServer(script)
    tcp = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    port = tcp.sockets[0].getsockname()[1]
    transport = Chat(chat_endpoint(f"http://127.0.0.1:{port}/v1", "key", timeout))
    try:
        await body(transport, server)  # type: ignore[misc]
    finally:
        await transport.close()
        tcp.close()
        await tcp.wait_closed()


def run(script: list, body: Callable[[Chat, ScriptedServer], object], timeout: float = 5.0) -> None:
    asyncio.run(_with_server(script, body, timeout))


def test_requests_are_well_formed_and_one_connection_is_kept_alive() -> None:
    async def body(t: Chat, s: ScriptedServer) -> None:
        for i in range(3):
            status, headers, raw = await t.post(b'{"n": %d}' % i)
            assert (status, raw, headers["content-type"]) == (200, BODY, "application/json")
        assert s.connections == 1
        head, _, sent = s.requests[0].partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        assert lines[0] == "POST /v1/chat/completions HTTP/1.1"
        assert {"Host: " + lines[1].split(": ")[1], "Authorization: Bearer key", "Content-Length: 8"} <= set(lines)
        assert sent == b'{"n": 0}'

    run([_length()] * 3, body)


def test_chunked_bodies_with_trailers_and_extensions_are_joined() -> None:
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        + b"%x\r\n" % 10
        + BODY[:10]
        + b"\r\n"
        + b"%x;ext=1\r\n" % (len(BODY) - 10)
        + BODY[10:]
        + b"\r\n0\r\nX-Trailer: 1\r\n\r\n"
    )

    async def body(t: Chat, s: ScriptedServer) -> None:
        assert (await t.post(b"{}"))[2] == BODY
        assert (await t.post(b"{}"))[2] == BODY  # the connection was left at the message boundary
        assert s.connections == 1

    run([chunked, chunked], body)


def test_connection_close_and_close_delimited_bodies_open_a_new_connection() -> None:
    def close_delimited(writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n" + BODY)
        writer.close()

    async def body(t: Chat, s: ScriptedServer) -> None:
        assert (await t.post(b"{}"))[2] == BODY
        assert (await t.post(b"{}"))[2] == BODY
        assert (await t.post(b"{}"))[2] == BODY
        assert s.connections == 3

    run([_length(extra="Connection: close\r\n"), close_delimited, _length()], body)


def test_a_kept_alive_connection_dropped_while_idle_is_replaced_once() -> None:
    async def body(t: Chat, s: ScriptedServer) -> None:
        assert (await t.post(b"{}"))[0] == 200
        # the server reads the second request on the kept-alive connection and drops it unanswered
        status, _, raw = await t.post(b"{}")
        assert (status, raw) == (200, BODY) and s.connections == 2

    run([_length(), None, _length()], body)


def test_a_new_connection_dropped_unanswered_is_an_error_not_a_retry() -> None:
    async def body(t: Chat, s: ScriptedServer) -> None:
        with pytest.raises(HttpError, match="the connection closed after 0 of"):
            await t.post(b"{}")
        assert len(s.requests) == 1

    run([None], body)


@pytest.mark.parametrize(
    ("response", "message"),
    [
        (b"SSH-2.0-OpenSSH\r\n\r\n", "did not answer in HTTP .*not an HTTP/1.x status line"),
        (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "malformed header line"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n" + BODY[:5], "closed after 5 of"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "malformed chunk size"),
    ],
)
def test_responses_that_are_not_complete_http_are_transport_errors(response: bytes, message: str) -> None:
    def answer_and_close(writer: asyncio.StreamWriter) -> None:
        writer.write(response)
        writer.close()

    async def body(t: Chat, s: ScriptedServer) -> None:
        with pytest.raises(HttpError, match=message):
            await t.post(b"{}")

    run([answer_and_close], body)


def test_statuses_and_retry_after_pass_through_and_a_silent_server_times_out() -> None:
    throttled = b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 2\r\nContent-Length: 2\r\n\r\n{}"

    async def body(t: Chat, s: ScriptedServer) -> None:
        status, headers, raw = await t.post(b"{}")
        assert (status, headers["retry-after"], raw) == (429, "2", b"{}")
        with pytest.raises(HttpTimeout):
            await t.post(b"{}")  # the server reads it and never answers

    run([throttled, lambda writer: None], body, timeout=0.3)


def test_a_line_break_in_the_key_cannot_add_header_lines() -> None:
    with pytest.raises(HttpRefused, match="line break"):
        chat_endpoint("http://127.0.0.1:1/v1", "key\r\nX-Injected: 1", 5)
    with pytest.raises(HttpRefused, match="control character"):  # nor can the URL
        chat_endpoint("http://127.0.0.1:1/v1\r\nX: 1", "key", 5)
