"""Every HTTP request ddibench makes goes through this module: one client, with the same rules everywhere.

The rules, for an endpoint that may be hostile (a typo'd ``--base-url``, a compromised mirror, a proxy that
answers for it):

* **Only http(s) URLs with a host.** ``file://``, ``ftp://`` and the like are refused before a socket opens.
* **No redirect leaves the origin.** A redirect to another scheme, host or port is an :class:`HttpRefused`
  naming its target; a request never reaches another origin, so its credentials (``Authorization``) are
  only ever sent where the caller pointed them. A GET may follow up to :data:`MAX_REDIRECTS` redirects within
  its own origin; a POST follows none (it would have to be sent again).
* **A total deadline per request**, not per read: connecting, sending, the head and the whole body must fit
  in ``timeout`` seconds, so a server that drips one byte every few seconds is cut like a silent one.
* **A cap on response bytes** (head :data:`HEAD_LIMIT`, body ``max_bytes``), checked against a declared
  ``Content-Length`` before reading and counted while reading a chunked or close-delimited body; the error
  names the cap.
* **One-line errors.** A refused connection, a cut-short body and a response that is not HTTP are each one
  :class:`HttpError`; the raw bytes a server sent are never echoed (only a short ``ascii()`` of them).

Callers: the chat-completion transport of every LLM call (:class:`Endpoint`, kept-alive connections, see
:mod:`ddibench.llm._client`), the endpoint start-up check and JSON-mode probe (:mod:`ddibench.llm._preflight`),
the embedded server's readiness poll (:mod:`ddibench.llm._embedded`), and every download of pinned data or
model weights (:func:`download`, used by :func:`ddibench.data.resolve.download_verified`).

Why hand-written HTTP/1.1 for direct connections: against a fast server the client's own CPU is what limits a
run. The ``openai`` SDK walks every message through its type transforms and builds request and response objects
on every call (about 2 ms of CPU per request here); aiohttp with bytes in and bytes out still spends about
0.15 ms in its request machinery. A request here is one write of a prebuilt head and the body; a response is one
read up to the blank line, the header lines split, and the body read by ``Content-Length`` or chunk by chunk
(``benchmarks/runner_throughput.py`` measures the whole path beside lm-eval and a raw-socket floor). A connection
is reused only after a complete response that did not ask to close it; a kept-alive connection the server has
dropped meanwhile is replaced once, before a byte of the response arrived. TLS uses the default context (system
certificates, hostname checks). Proxies (``HTTPS_PROXY``/``HTTP_PROXY``/``NO_PROXY``) are honoured through
aiohttp, with the same rules (no redirects, the deadline, the cap).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import ssl
import sys
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ddibench._version import __version__
from ddibench.errors import DdibenchError

HEAD_LIMIT = 64 * 1024  # a response's status line and headers (a chat completion's are a few hundred bytes)
ERROR_BODY_LIMIT = 1 << 20  # the body of a non-2xx answer: read for its message, never written anywhere
MAX_REDIRECTS = 5  # within one origin, for GET only
READ_CHUNK = 1 << 16

Sink = Callable[[bytes], None]


class HttpError(DdibenchError):
    """A request that got no complete HTTP response: refused, reset, cut short. Worth retrying."""

    exit_code = 3


class HttpTimeout(HttpError):
    """No complete response within the request's deadline."""


class HttpRefused(HttpError):
    """What ddibench will not do or accept, whatever the retry: a URL that is not http(s), a redirect to
    another origin, a response over its byte cap, a server that does not speak HTTP."""


class HttpTooLarge(HttpRefused):
    """A response larger than the cap the caller set."""


def _fix_for(url: str) -> str:
    return f"check the URL ({url}) and that an HTTP server answers there"


def check_url(url: str) -> urllib.parse.SplitResult:
    """The parts of an http(s) URL with a host; :class:`HttpRefused` for anything else."""
    if any(c in url for c in "\r\n\t\x00 "):
        raise HttpRefused(f"the URL {ascii(url)[:120]} contains a space or control character", "remove it")
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise HttpRefused(
            f"not an http(s) URL: {ascii(url)[:120]}", "give an http:// or https:// URL (e.g. http://HOST:PORT/v1)"
        )
    if not parts.hostname:
        raise HttpRefused(f"no host in the URL {ascii(url)[:120]}", "give a URL like http://HOST:PORT/v1")
    try:
        parts.port  # noqa: B018 - raises for a port that is not a number in range
    except ValueError:
        raise HttpRefused(f"a bad port in the URL {ascii(url)[:120]}", "give a port between 1 and 65535") from None
    return parts


def origin(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of an http(s) URL: what a redirect may not change."""
    parts = check_url(url)
    host = (parts.hostname or "").lower()
    return parts.scheme, host, parts.port or (443 if parts.scheme == "https" else 80)


def proxy_for(url: str) -> str | None:
    """The proxy the environment names for ``url`` (None: connect directly)."""
    parts = urllib.parse.urlsplit(url)
    proxies = urllib.request.getproxies()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if not proxy or urllib.request.proxy_bypass(parts.hostname or ""):
        return None
    return proxy


@dataclass(frozen=True)
class Response:
    status: int
    headers: Mapping[str, str]  # names in lower case; repeated ones joined with ', '
    body: bytes  # empty when a sink took it
    url: str  # the URL that answered (after redirects within the origin)


class _Connection:
    __slots__ = ("reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    def usable(self) -> bool:
        return not (self.reader.at_eof() or self.writer.is_closing())

    def close(self) -> None:
        self.writer.close()


class _Stale(Exception):
    """A reused connection ended before any byte of the response (the server had dropped it)."""


class _NotHttp(ValueError):
    """The bytes a server sent are not an HTTP/1.x response."""


class _TooLarge(Exception):
    def __init__(self, what: str, cap: int) -> None:
        super().__init__(what)
        self.what, self.cap = what, cap


class Endpoint:
    """Requests to one origin, on kept-alive connections, under the module's rules.

    ``headers`` go with every request (e.g. ``Authorization``); ``timeout`` is each request's total deadline
    and ``max_bytes`` its body cap. Use inside one event loop; :meth:`close` when done."""

    def __init__(
        self, base_url: str, *, headers: Mapping[str, str] | None = None, timeout: float, max_bytes: int
    ) -> None:
        parts = check_url(base_url)
        self.base_url = base_url.rstrip("/")
        self.timeout = float(timeout)
        self.max_bytes = int(max_bytes)
        self.origin = origin(base_url)
        self._tls = parts.scheme == "https"
        self._host = parts.hostname or ""
        self._port = self.origin[2]
        self._netloc = parts.netloc.rpartition("@")[2]  # user:password@ in a URL is never sent
        self._headers = {"User-Agent": f"ddibench/{__version__}", **(headers or {})}
        for name, value in self._headers.items():
            if any(c in f"{name}{value}" for c in "\r\n"):
                raise HttpRefused(
                    f"a line break in the {name} header (an API key?)", "remove it"
                )  # it would end the line
        self.proxy = proxy_for(self.base_url)
        self._session: Any = None  # aiohttp.ClientSession for a proxied endpoint, made inside the event loop
        self._errors: tuple[type[BaseException], ...] = ()
        self._ssl: ssl.SSLContext | None = None
        self._heads: dict[tuple[str, str], bytes] = {}
        self._idle: list[_Connection] = []

    def url_of(self, path: str) -> str:
        """``path`` (``/chat/completions``) under the base URL; a full URL is taken as it is."""
        return path if "://" in path else self.base_url + path

    async def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        *,
        sink: Sink | None = None,
        timeout: float | None = None,
        max_bytes: int | None = None,
    ) -> Response:
        """``method`` on ``path`` (relative to the base URL, or a URL of the same origin): the final response,
        its body whole (or handed to ``sink`` block by block). Raises :class:`HttpTimeout` past the deadline,
        :class:`HttpRefused` for a redirect elsewhere, a body over the cap or a server that is not HTTP, and
        :class:`HttpError` for a connection that failed."""
        url = self.url_of(path)
        deadline = self.timeout if timeout is None else float(timeout)
        cap = self.max_bytes if max_bytes is None else int(max_bytes)
        where = [url]  # the URL asked last (after redirects within the origin), for the messages
        try:
            return await _within(self._follow(method, where, body, sink, cap), deadline)
        except (asyncio.TimeoutError, TimeoutError):
            raise HttpTimeout(
                f"{where[0]} did not answer completely within {deadline:g} s",
                "check that the server is up and not stuck",
            ) from None
        except _TooLarge as exc:
            raise HttpTooLarge(
                f"{where[0]} sent a {exc.what} larger than ddibench reads ({_size(exc.cap)})",
                "check that the URL points at the right server",
            ) from None
        except _NotHttp as exc:
            raise HttpRefused(f"{where[0]} did not answer in HTTP ({exc})", _fix_for(where[0])) from None
        except (OSError, EOFError, ValueError, _Stale, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
            raise HttpError(f"{where[0]}: {_failure(exc)}", "check that the server is up, then try again") from None

    async def _follow(self, method: str, where: list[str], body: bytes | None, sink: Sink | None, cap: int) -> Response:
        """The request, and the redirects it may follow within the origin (``where[0]``: the URL asked last)."""
        for _ in range(MAX_REDIRECTS + 1):
            url = where[0]
            if origin(url) != self.origin:
                raise HttpRefused(f"{url} is not on {self.base_url}", "request it through its own endpoint")
            status, headers, data = await self._send(method, url, body, sink, cap)
            if not (300 <= status < 400 and status != 304 and "location" in headers):
                return Response(status, headers, data, url)
            where[0] = self._redirect(method, url, status, headers["location"])
        raise HttpRefused(f"{self.base_url} redirected more than {MAX_REDIRECTS} times", _fix_for(where[0]))

    def _redirect(self, method: str, url: str, status: int, location: str) -> str:
        target = urllib.parse.urljoin(url, location.strip())
        try:
            same = origin(target) == self.origin
        except HttpRefused:
            same = False
        if method in ("GET", "HEAD") and same:
            return target
        where = "another origin" if not same else f"a {method} that would be sent again"
        raise HttpRefused(
            f"{url} redirected (HTTP {status}) to {ascii(target)[1:-1][:200]}: ddibench follows no redirect to {where}",
            "use the final URL directly, if you trust it",
        )

    async def _send(
        self, method: str, url: str, body: bytes | None, sink: Sink | None, cap: int
    ) -> tuple[int, dict[str, str], bytes]:
        if self.proxy is not None:
            return await self._send_via_proxy(method, url, body, sink, cap)
        parts = urllib.parse.urlsplit(url)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        request = self._head(method, target) + (
            str(len(body)).encode() + b"\r\n\r\n" + body if body is not None else b"\r\n"
        )
        while self._idle:
            conn = self._idle.pop()
            if not conn.usable():
                conn.close()
                continue
            try:
                return await self._on(conn, request, sink, cap, reused=True)
            except _Stale:
                continue  # dropped while idle: the next idle connection, or a new one
        return await self._on(await self._connect(), request, sink, cap, reused=False)

    def _head(self, method: str, target: str) -> bytes:
        """The request's head up to its last header line: ``Content-Length: `` for a body, else complete."""
        key = (method, target)
        if key not in self._heads:
            lines = [f"{method} {target} HTTP/1.1", f"Host: {self._netloc}"]
            lines += [f"{name}: {value}" for name, value in self._headers.items()]
            head = "\r\n".join(lines) + "\r\n"
            self._heads[key] = head.encode("latin-1") + (b"Content-Length: " if method in ("POST", "PUT") else b"")
        return self._heads[key]

    async def _connect(self) -> _Connection:
        if self._tls and self._ssl is None:
            self._ssl = ssl.create_default_context()
        reader, writer = await asyncio.open_connection(
            self._host, self._port, ssl=self._ssl if self._tls else None, limit=HEAD_LIMIT
        )
        return _Connection(reader, writer)

    async def _on(
        self, conn: _Connection, request: bytes, sink: Sink | None, cap: int, reused: bool
    ) -> tuple[int, dict[str, str], bytes]:
        keep = False
        try:
            conn.writer.write(request)
            try:
                head = await _read_head(conn.reader)
            except asyncio.IncompleteReadError as exc:
                if reused and not exc.partial:
                    raise _Stale() from None
                raise
            except ConnectionError:
                if reused:
                    raise _Stale() from None
                raise
            status, headers, version = _parse_head(head)
            while 100 <= status < 200:  # interim responses (we send no Expect): the final one follows
                status, headers, version = _parse_head(await _read_head(conn.reader))
            if not 200 <= status < 300:  # an error page or a redirect: kept whole for the message, never the sink's
                sink, cap = None, ERROR_BODY_LIMIT
            data, complete = await _read_body(conn.reader, status, headers, sink, cap)
            connection = headers.get("connection", "").lower()
            keep = complete and "close" not in connection and (version != "HTTP/1.0" or "keep-alive" in connection)
            return status, headers, data
        finally:
            if keep:
                self._idle.append(conn)
            else:  # an error, a cancellation (the deadline), or the server closes it: never reused
                conn.close()

    async def _send_via_proxy(
        self, method: str, url: str, body: bytes | None, sink: Sink | None, cap: int
    ) -> tuple[int, dict[str, str], bytes]:
        session = self._session or self._open()
        try:
            async with session.request(method, url, data=body, allow_redirects=False, proxy=self.proxy) as response:
                headers = {k.lower(): v for k, v in response.headers.items()}
                if not 200 <= response.status < 300:
                    sink, cap = None, ERROR_BODY_LIMIT
                declared = headers.get("content-length", "")
                if declared.isdigit() and int(declared) > cap:
                    raise _TooLarge("body", cap)
                body_read = _Body(sink, cap)
                async for block in response.content.iter_chunked(READ_CHUNK):
                    body_read.take(block)
                return response.status, headers, body_read.data()
        except self._errors as exc:
            raise HttpError(f"{url}: {_failure(exc)}", "check the proxy and the server") from None

    def _open(self) -> Any:
        import aiohttp

        self._errors = (aiohttp.ClientError,)
        self._session = aiohttp.ClientSession(
            # the caller bounds how many requests are in flight; the connector adds no queue of its own
            connector=aiohttp.TCPConnector(limit=0),
            headers=self._headers,
            trust_env=False,  # the proxy is self.proxy, looked up once
            cookie_jar=aiohttp.DummyCookieJar(),
        )
        return self._session

    async def close(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()


async def _within(awaitable: Any, seconds: float) -> Any:
    """``awaitable`` under a total deadline (``asyncio.timeout`` from Python 3.11, ``wait_for`` before)."""
    if sys.version_info >= (3, 11):
        async with asyncio.timeout(seconds):
            return await awaitable
    return await asyncio.wait_for(awaitable, seconds)


def _size(n: int) -> str:
    return f"{n / 2**20:g} MiB" if n >= 2**20 else f"{n / 2**10:g} KiB" if n >= 2**10 else f"{n} bytes"


def _failure(exc: BaseException) -> str:
    """The exception's type and the first line of its message (never raw bytes a server sent)."""
    if isinstance(exc, asyncio.IncompleteReadError):
        return f"the connection closed after {len(exc.partial)} of {exc.expected} bytes"
    if isinstance(exc, asyncio.LimitOverrunError):
        return f"a response line longer than {_size(HEAD_LIMIT)}"
    if isinstance(exc, _Stale):
        return "the connection was dropped"
    detail = str(exc).splitlines()[0][:200] if str(exc) else ""
    return f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__


async def _read_head(reader: asyncio.StreamReader) -> bytes:
    try:
        return await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError:
        raise _TooLarge("response head", HEAD_LIMIT) from None


def _parse_head(head: bytes) -> tuple[int, dict[str, str], str]:
    """Status, headers (lower-case names; repeated ones joined with ', ') and version of a response head."""
    lines = head.decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    code = rest[:3]
    if not version.startswith("HTTP/1.") or not code.isdigit():
        raise _NotHttp(f"its first bytes are {ascii(lines[0][:40])}, not an HTTP/1.x status line")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise _NotHttp(f"malformed header line {ascii(line[:40])}")
        name, value = name.strip().lower(), value.strip()
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    return int(code), headers, version


class _Body:
    """A response body as it arrives: counted against its cap, handed to the sink or kept whole."""

    def __init__(self, sink: Sink | None, cap: int) -> None:
        self.sink, self.cap, self.received = sink, cap, 0
        self.parts: list[bytes] = []

    def take(self, block: bytes) -> None:
        self.received += len(block)
        if self.received > self.cap:
            raise _TooLarge("body", self.cap)
        if self.sink is not None:
            self.sink(block)
        else:
            self.parts.append(block)

    def data(self) -> bytes:
        return b"".join(self.parts)


async def _read_body(
    reader: asyncio.StreamReader, status: int, headers: Mapping[str, str], sink: Sink | None, cap: int
) -> tuple[bytes, bool]:
    """The body (empty when ``sink`` took it) and whether the connection is left at a message boundary
    (False: the body was read to the connection's end). At most ``cap`` body bytes are read."""
    if status in (204, 304):
        return b"", True
    body = _Body(sink, cap)
    if "chunked" in headers.get("transfer-encoding", "").lower():
        while True:
            size_line = await reader.readuntil(b"\r\n")
            size_text = size_line.split(b";", 1)[0].strip()
            if not size_text or len(size_text) > 16 or any(c not in b"0123456789abcdefABCDEF" for c in size_text):
                raise _NotHttp(f"a malformed chunk size {ascii(size_text[:20])}")
            size = int(size_text, 16)
            if size == 0:
                trailers = 0
                while await reader.readuntil(b"\r\n") != b"\r\n":  # trailers, then the blank line
                    trailers += 1
                    if trailers > 100:
                        raise _NotHttp("more than 100 trailer lines after a chunked body")
                return body.data(), True
            if body.received + size > cap:
                raise _TooLarge("body", cap)
            while size > 0:
                block = await reader.readexactly(min(size, READ_CHUNK))
                size -= len(block)
                body.take(block)
            if await reader.readexactly(2) != b"\r\n":
                raise _NotHttp("a malformed chunked body")
    length = headers.get("content-length")
    if length is not None:
        if not length.isdigit():
            raise _NotHttp(f"a bad Content-Length {ascii(length[:40])}")
        left = int(length)
        if left > cap:
            raise _TooLarge("body", cap)
        while left > 0:
            block = await reader.readexactly(min(left, READ_CHUNK))
            left -= len(block)
            body.take(block)
        return body.data(), True
    while block := await reader.read(READ_CHUNK):  # delimited by the server closing the connection
        body.take(block)
    return body.data(), False


def request(
    method: str,
    url: str,
    *,
    body: bytes | None = None,
    headers: Mapping[str, str] | None = None,
    timeout: float,
    max_bytes: int,
    sink: Sink | None = None,
) -> Response:
    """One request from synchronous code, under the module's rules (see :meth:`Endpoint.request`)."""

    async def once() -> Response:
        endpoint = Endpoint(url, headers=headers, timeout=timeout, max_bytes=max_bytes)
        try:
            return await endpoint.request(method, url, body, sink=sink)
        finally:
            await endpoint.close()

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(once())
    # called from inside an event loop (a notebook): run it on a thread of its own
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, once()).result()


def download(url: str, sink: Sink, *, size: int, headers: Mapping[str, str] | None = None) -> Response:
    """GET ``url`` into ``sink`` block by block: at most ``size`` bytes (the pinned size; more is refused), within
    a deadline of 60 s plus 10 s per MB expected (a floor of 100 kB/s, so a server that drips is cut)."""
    return request("GET", url, headers=headers, timeout=60.0 + size / 100_000, max_bytes=max(size, 1), sink=sink)
