"""Peak memory and time of ``ddibench run`` against hostile model endpoints (every network read is bounded).

Each case starts a raw local server, runs ``ddibench run -s zero-shot -t drugbank_s1 --limit 1 --base-url ...`` in
a child process and prints its exit code, wall time, peak resident memory (``ru_maxrss`` of the child), how many
bytes the server got out before the client hung up, and the one line the command printed:

* ``length-3gib`` — ``/models`` declares and streams a 3 GiB body;
* ``chunked`` / ``close`` — the same without a length: chunk after chunk, or until a close that never comes;
* ``chat-3gib`` — an honest ``/models``, then chat completions of 3 GiB;
* ``drip`` — one byte every half second (the start-up check's deadline is 10 s for the whole request);
* ``garbage`` — random bytes and terminal escapes instead of HTTP;
* ``redirect`` — ``302`` to another origin, which must never see the key.

Before the one client (``ddibench/net.py``), issue 51 measured 2.5 GB in 4 s for the 3 GiB bodies, no error after
200 s of drip, a traceback with the raw bytes for garbage, and the key sent to the redirect's target.

    python benchmarks/hostile_endpoints.py
"""

from __future__ import annotations

import os
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable

MODELS = b'{"object": "list", "data": [{"id": "m", "object": "model"}]}'
Answer = Callable[[socket.socket, str], int]


def _ok(body: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body


def _flood(framing: str) -> Answer:
    def answer(sock: socket.socket, line: str) -> int:
        head = {
            "length": b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (3 * 2**30),
            "chunked": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            "close": b"HTTP/1.1 200 OK\r\n\r\n",
        }[framing]
        sock.sendall(head)
        block = b"[" + b" " * (2**20 - 1)
        piece = b"%x\r\n%s\r\n" % (len(block), block) if framing == "chunked" else block
        sent = len(head)
        for _ in range(3 * 2**10):
            sock.sendall(piece)
            sent += len(piece)
        return sent

    return answer


def _chat_flood(sock: socket.socket, line: str) -> int:
    if "/models" in line:
        sock.sendall(_ok(MODELS))
        return 0
    return _flood("length")(sock, line)


def _drip(sock: socket.socket, line: str) -> int:
    sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
    for _ in range(1000):
        sock.sendall(b" ")
        time.sleep(0.5)
    return 1000


def _garbage(sock: socket.socket, line: str) -> int:
    data = b"\x1b[2J\x1b]0;pwned\x07" + os.urandom(4096) + b"\r\n\r\n"
    sock.sendall(data)
    return len(data)


class _Counted:
    """A socket whose ``sendall`` counts the bytes that got out (into the server's ``sent``)."""

    def __init__(self, sock: socket.socket, server: _Server) -> None:
        self.sock, self.server = sock, server

    def sendall(self, data: bytes) -> None:
        self.sock.sendall(data)
        self.server.sent += len(data)


class _Server:
    """A threaded raw server: reads each request's head and body, then hands the socket to ``answer``."""

    def __init__(self, answer: Answer) -> None:
        self.sent = 0
        self.requests: list[str] = []
        outer = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                sock: socket.socket = self.request
                data = b""
                try:
                    while b"\r\n\r\n" not in data:
                        chunk = sock.recv(65536)
                        if not chunk:
                            return
                        data += chunk
                    head, _, rest = data.partition(b"\r\n\r\n")
                    lines = head.decode("latin-1").split("\r\n")
                    length = next((int(x.split(":")[1]) for x in lines if x.lower().startswith("content-length")), 0)
                    while len(rest) < length:
                        rest += sock.recv(65536)
                    outer.requests.append(head.decode("latin-1"))
                    answer(_Counted(sock, outer), lines[0])  # type: ignore[arg-type]
                except OSError:
                    pass

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _run(base_url: str, json_mode: str) -> tuple[int, float, float, str]:
    """Exit code, wall seconds, peak MB of the child, and its last line of stderr."""
    env = {**os.environ, "HOSTILE_KEY": "sk-benchmark"}
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        env.pop(name, None)
    with tempfile.TemporaryDirectory() as tmp, open(f"{tmp}/err", "w+") as err:
        start = time.perf_counter()
        child = subprocess.Popen(
            [sys.executable, "-m", "ddibench", "run", "-s", "zero-shot", "-t", "drugbank_s1", "--limit", "1",
             "--no-cache", "--base-url", base_url, "-m", f"m#key_env=HOSTILE_KEY,json={json_mode}",
             "--run-dir", f"{tmp}/run"],
            stdout=subprocess.DEVNULL, stderr=err, env=env,
        )  # fmt: skip
        _, status, usage = os.wait4(child.pid, 0)  # this child's own peak, not the largest of all children
        child.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - start
        err.seek(0)
        lines = [line for line in err.read().splitlines() if line.strip()]
    return child.returncode, wall, usage.ru_maxrss / 1024, (lines[-1] if lines else "")[:150]


def main() -> None:
    cases: list[tuple[str, Answer, str]] = [
        ("length-3gib", _flood("length"), "auto"),
        ("chunked", _flood("chunked"), "auto"),
        ("close", _flood("close"), "auto"),
        ("chat-3gib", _chat_flood, "none"),
        ("drip", _drip, "auto"),
        ("garbage", _garbage, "auto"),
    ]
    print(f"{'case':<12} {'exit':>4} {'wall s':>7} {'peak MB':>8} {'server sent MB':>15}  message")
    for name, answer, json_mode in cases:
        server = _Server(answer)
        code, wall, peak, message = _run(server.url + "/v1", json_mode)
        time.sleep(0.2)
        server.close()
        print(f"{name:<12} {code:>4} {wall:>7.1f} {peak:>8.0f} {server.sent / 2**20:>15.1f}  {message}")
    elsewhere = _Server(lambda sock, line: sock.sendall(_ok(MODELS)) or 0)

    def redirect(sock: socket.socket, line: str) -> int:
        sock.sendall(
            b"HTTP/1.1 302 Found\r\nLocation: %s/v1/models\r\nContent-Length: 0\r\n\r\n" % elsewhere.url.encode()
        )
        return 0

    first = _Server(redirect)
    code, wall, peak, message = _run(first.url + "/v1", "auto")
    first.close()
    elsewhere.close()
    print(f"{'redirect':<12} {code:>4} {wall:>7.1f} {peak:>8.0f} {0:>15.1f}  {message}")
    print(f"requests that reached the redirect's target: {len(elsewhere.requests)} (with the key: "
          f"{sum('sk-benchmark' in r for r in elsewhere.requests)})")  # fmt: skip


if __name__ == "__main__":
    main()
