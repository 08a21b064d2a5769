"""Hostile model endpoints and download servers, met through the real command line: a server that redirects to
another origin (the API key must never arrive there), one that streams a body without end, one that drips a byte
at a time, one that answers garbage, a proxy that does the same, and URLs that are not http(s). Each must end in
one line naming what is wrong, within the client's bounds (a deadline per request, a cap on response bytes), with
nothing written. The rules live in one client, :mod:`ddibench.net`; the raw servers here speak just enough
HTTP/1.1 to be hostile."""

from __future__ import annotations

import json
import socket
import socketserver
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ddibench.errors import DataError
from ddibench.net import HttpRefused, HttpTimeout, request

KEY = "sk-hostile-test-0123456789"
MODELS = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}).encode()


@dataclass
class Seen:
    """What one server received: each request's line and headers, and the bytes it managed to send."""

    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    sent: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def keys(self) -> list[str]:
        return [h.get("authorization", "") for _, h in self.requests]


Answer = Callable[[socket.socket, str, Seen], None]


@contextmanager
def raw_server(answer: Answer) -> Iterator[tuple[str, Seen]]:
    """A threaded TCP server: reads each request's head (and body), records it, lets ``answer`` write anything."""
    seen = Seen()

    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            sock: socket.socket = self.request
            sock.settimeout(30)
            data = b""
            try:
                while b"\r\n\r\n" not in data:
                    chunk = sock.recv(65536)
                    if not chunk:
                        return
                    data += chunk
                head, _, rest = data.partition(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
                length = int(headers.get("content-length", "0"))
                while len(rest) < length:
                    rest += sock.recv(65536)
                with seen.lock:
                    seen.requests.append((lines[0], headers))
                answer(sock, lines[0], seen)
            except OSError:
                pass  # the client hung up: what these servers are for

    class Server(socketserver.ThreadingTCPServer):
        daemon_threads = True
        allow_reuse_address = True

    server = Server(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


def send(sock: socket.socket, data: bytes, seen: Seen) -> None:
    sock.sendall(data)
    with seen.lock:
        seen.sent += len(data)


def ok_json(body: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body


def redirect_to(target: str, status: int = 302) -> Answer:
    def answer(sock: socket.socket, line: str, seen: Seen) -> None:
        path = urllib.parse.urlsplit(line.split(" ")[1]).path  # a proxy is asked for the absolute URL
        send(
            sock,
            b"HTTP/1.1 %d Found\r\nLocation: %s%s\r\nContent-Length: 0\r\n\r\n"
            % (status, target.encode(), path.encode()),
            seen,
        )

    return answer


def flood(framing: str) -> Answer:
    """A body without end: a declared 3 GiB, chunked without a last chunk, or delimited by a close never made."""

    def answer(sock: socket.socket, line: str, seen: Seen) -> None:
        head = {
            "length": b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % (3 * 2**30),
            "chunked": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            "close": b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n",
        }[framing]
        send(sock, head, seen)
        block = b"[" + b" " * (2**20 - 1)
        piece = b"%x\r\n%s\r\n" % (len(block), block) if framing == "chunked" else block
        for _ in range(3 * 2**10):  # 3 GiB, if the client kept reading
            send(sock, piece, seen)

    return answer


def drip(sock: socket.socket, line: str, seen: Seen) -> None:
    send(sock, b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n", seen)
    for _ in range(1000):
        send(sock, b" ", seen)
        time.sleep(0.5)


def garbage(sock: socket.socket, line: str, seen: Seen) -> None:
    send(sock, b"\x1b[2J\x1b]0;pwned\x07" + bytes(range(256)) * 8 + b"\r\n\r\n", seen)


def run_against(
    cli, base_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, json_mode: str = "auto"
) -> tuple[int, str]:
    """``ddibench run`` of one zero-shot question against ``base_url``, the key in $HOSTILE_KEY: (exit code, stderr)."""
    monkeypatch.setenv("HOSTILE_KEY", KEY)
    run_dir = tmp_path / "run"
    code, out, err = cli(
        "run", "-s", "zero-shot", "-t", "drugbank_s1", "--limit", "1", "--no-cache", "--base-url", base_url,
        "-m", f"m#key_env=HOSTILE_KEY,json={json_mode}", "--run-dir", str(run_dir),
    )  # fmt: skip
    assert not run_dir.exists() or not any(run_dir.rglob("journal.jsonl")), "a sample was saved from a hostile endpoint"
    return code, err


def one_line(code: int, err: str) -> str:
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert code != 0 and len(lines) == 1 and "Traceback" not in err, err
    assert "\x1b" not in err and "\x07" not in err, "bytes a server sent reached the terminal"
    return lines[0]


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)


# ---------------------------------------------------------------------------------------------------------------
# the API key stays with its origin


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_a_redirect_at_start_up_is_refused_and_the_key_never_reaches_the_other_origin(
    cli, cli_env: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, status: int
) -> None:
    honest = raw_server(lambda s, line, seen: send(s, ok_json(MODELS), seen))
    with honest as (elsewhere, other), raw_server(redirect_to(elsewhere, status)) as (base, first):
        code, err = run_against(cli, base + "/v1", tmp_path, monkeypatch)
    message = one_line(code, err)
    assert "redirected" in message and f"{elsewhere}/v1/models" in message and "another origin" in message, message
    assert first.keys() == [f"Bearer {KEY}"]  # the origin given got the key, once
    assert other.requests == []  # the other origin got nothing at all


def test_a_redirect_of_the_answers_is_refused_before_anything_is_saved(
    cli, cli_env: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The listing is honest, the chat completions redirect: the run's own client refuses, naming the target."""
    with raw_server(lambda s, line, seen: send(s, ok_json(b"{}"), seen)) as (elsewhere, other):

        def answer(sock: socket.socket, line: str, seen: Seen) -> None:
            if "/models" in line:
                send(sock, ok_json(MODELS), seen)
            else:
                redirect_to(elsewhere, 307)(sock, line, seen)

        with raw_server(answer) as (base, first):
            code, err = run_against(cli, base + "/v1", tmp_path, monkeypatch, json_mode="none")
            probed_code, probed_err = run_against(cli, base + "/v1", tmp_path / "probe", monkeypatch, json_mode="auto")
    for message in (one_line(code, err), one_line(probed_code, probed_err)):
        assert f"redirected (HTTP 307) to {elsewhere}/v1/chat/completions" in message, message
    assert other.requests == [] and set(first.keys()) == {f"Bearer {KEY}"}


def test_a_redirect_within_the_origin_is_followed_for_a_get_only(cli_env: None) -> None:
    def answer(sock: socket.socket, line: str, seen: Seen) -> None:
        if " /old " in line:
            send(sock, b"HTTP/1.1 301 Moved\r\nLocation: /new\r\nContent-Length: 0\r\n\r\n", seen)
        else:
            send(sock, ok_json(b'{"here": 1}'), seen)

    with raw_server(answer) as (base, seen):
        response = request("GET", base + "/old", timeout=5, max_bytes=1000)
        assert (response.status, response.body, response.url) == (200, b'{"here": 1}', base + "/new")
        with pytest.raises(HttpRefused, match="redirected .* to .*/new: ddibench follows no redirect to a POST"):
            request("POST", base + "/old", body=b"{}", timeout=5, max_bytes=1000)


# ---------------------------------------------------------------------------------------------------------------
# every read is bounded: bytes and time


@pytest.mark.parametrize("framing", ["length", "chunked", "close"])
def test_a_body_without_end_is_cut_at_the_cap(
    cli, cli_env: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, framing: str
) -> None:
    with raw_server(flood(framing)) as (base, seen):
        code, err = run_against(cli, base + "/v1", tmp_path, monkeypatch)
        time.sleep(0.2)
        sent = seen.sent
    message = one_line(code, err)
    assert "larger than ddibench reads (4 MiB)" in message, message
    # the client stopped reading at its cap: what the server got out is the cap plus the sockets' buffers
    assert sent < 64 * 2**20, f"the server sent {sent / 2**20:.0f} MiB before the client hung up"


def test_a_chat_answer_without_end_is_cut_at_its_cap(
    cli, cli_env: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    endless = flood("length")

    def answer(sock: socket.socket, line: str, seen: Seen) -> None:
        (send(sock, ok_json(MODELS), seen) if "/models" in line else endless(sock, line, seen))

    with raw_server(answer) as (base, seen):
        code, err = run_against(cli, base + "/v1", tmp_path, monkeypatch, json_mode="none")
        sent = seen.sent
    assert "larger than ddibench reads (16 MiB)" in one_line(code, err)
    assert sent < 128 * 2**20


def test_a_server_that_drips_is_cut_at_the_request_deadline(cli_env: None) -> None:
    """urllib's timeout is per read: a byte every half second never tripped it. Here the deadline is the request's."""
    with raw_server(drip) as (base, _):
        start = time.monotonic()
        with pytest.raises(HttpTimeout, match="did not answer completely within 2 s"):
            request("GET", base + "/v1/models", timeout=2, max_bytes=2**20)
        assert time.monotonic() - start < 10


def test_a_dripping_endpoint_is_one_line_at_start_up(
    cli, cli_env: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("ddibench.llm._preflight.STARTUP_TIMEOUT", 2.0)
    with raw_server(drip) as (base, _):
        code, err = run_against(cli, base + "/v1", tmp_path, monkeypatch)
    assert "did not answer completely within 2 s" in one_line(code, err)


# ---------------------------------------------------------------------------------------------------------------
# what is not HTTP, or not an http(s) URL


def test_garbage_is_one_line_and_never_echoed(
    cli, cli_env: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with raw_server(garbage) as (base, _):
        code, err = run_against(cli, base + "/v1", tmp_path, monkeypatch)
    message = one_line(code, err)
    assert "did not answer in HTTP" in message, message


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://127.0.0.1/v1", "http:///v1", "http://127.0.0.1:99999/v1"])
def test_a_base_url_that_is_not_http_is_one_line_before_any_request(
    cli, cli_env: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    code, err = run_against(cli, url, tmp_path, monkeypatch)
    message = one_line(code, err)
    assert code == 2 and "server URL" in message and ("http(s)" in message or "host" in message or "port" in message)


# ---------------------------------------------------------------------------------------------------------------
# the same rules through a proxy (aiohttp's path), and for downloads of pinned data


def test_a_proxy_that_redirects_or_floods_meets_the_same_rules(
    cli, cli_env: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    honest = raw_server(lambda s, line, seen: send(s, ok_json(MODELS), seen))
    with honest as (elsewhere, other), raw_server(redirect_to(elsewhere)) as (proxy, through):
        monkeypatch.setenv("HTTP_PROXY", proxy)
        monkeypatch.setenv("NO_PROXY", "")
        code, err = run_against(cli, "http://model-host.invalid:8000/v1", tmp_path, monkeypatch)
        assert "redirected" in one_line(code, err) and other.requests == []
        assert through.requests and through.requests[0][0].startswith("GET http://model-host.invalid:8000/v1/models")
    with raw_server(flood("chunked")) as (proxy, seen):
        monkeypatch.setenv("HTTP_PROXY", proxy)
        code, err = run_against(cli, "http://model-host.invalid:8000/v1", tmp_path / "2", monkeypatch)
        sent = seen.sent
    assert "larger than ddibench reads (4 MiB)" in one_line(code, err) and sent < 64 * 2**20


def test_a_download_redirected_elsewhere_is_refused_and_leaves_nothing(
    cli_env: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ddibench.data.resolve import download_verified

    honest = raw_server(lambda s, line, seen: send(s, ok_json(b"x" * 10), seen))
    with honest as (elsewhere, other), raw_server(redirect_to(elsewhere)) as (base, _):
        try:
            download_verified(f"{base}/f.txt", tmp_path / "f.txt", "0" * 64, 10)
        except DataError as exc:
            assert f"cannot download: {base}/f.txt redirected (HTTP 302) to {elsewhere}/f.txt" in str(exc)
        else:
            raise AssertionError("a download redirected to another origin was followed")
    assert other.requests == [] and list(tmp_path.iterdir()) == []
