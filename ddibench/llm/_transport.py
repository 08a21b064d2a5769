"""The HTTP path of a chat request: one pre-serialised JSON POST on a kept-alive HTTP/1.1 connection.

:class:`ChatTransport` is one endpoint's connection pool. :meth:`ChatTransport.post` sends a request body
that the client has already serialised (the messages are encoded once per call, and that text also feeds
the cache key) and returns the status, the headers (names in lower case) and the raw body; it neither
retries nor interprets anything: what a response means (retry, Retry-After, a usable completion or not) is
decided by :class:`~ddibench.llm.LLMClient`. Failures come back as one small taxonomy:
:class:`TransportTimeout` (no complete answer within the endpoint's timeout) and :class:`TransportError`
(the connection was refused, reset or cut, or the response was not HTTP).

Why hand-written HTTP/1.1 for direct connections: against a fast server the client's own CPU is what
limits a run. The ``openai`` SDK walks every message through its type transforms and builds request and
response objects on every call (about 2 ms of CPU per request here); aiohttp with bytes in and bytes out
still spends about 0.15 ms in its request machinery. A request here is one write of a prebuilt head and
the body; a response is one read up to the blank line, the header lines split, and the body read by
``Content-Length`` or chunk by chunk (``benchmarks/runner_throughput.py`` measures the whole path beside
lm-eval and a raw-socket floor). A connection is reused only after a complete response that did not ask
to close it; a kept-alive connection the server has dropped meanwhile is replaced once, before a byte of
the response arrived. TLS uses the default context (system certificates, hostname checks).

Proxies (``HTTPS_PROXY``/``HTTP_PROXY``/``NO_PROXY``) are honoured through aiohttp: the endpoint's proxy is
looked up once (:func:`proxy_for`) and passed with each request (aiohttp's own ``trust_env`` would look it
up again on a worker thread for every request).
"""

from __future__ import annotations

import asyncio
import ssl
import sys
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

from ddibench._version import __version__


class TransportError(Exception):
    """The request did not get a complete HTTP response (refused, reset, cut short, not HTTP)."""


class TransportTimeout(TransportError):
    """No complete response within the endpoint's timeout."""


def proxy_for(url: str) -> str | None:
    """The proxy the environment names for ``url`` (None: connect directly)."""
    parts = urllib.parse.urlsplit(url)
    proxies = urllib.request.getproxies()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if not proxy or urllib.request.proxy_bypass(parts.hostname or ""):
        return None
    return proxy


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


HEAD_LIMIT = 64 * 1024  # the status line and headers of a chat completion response are a few hundred bytes


class ChatTransport:
    """Chat-completion POSTs to one OpenAI-compatible endpoint, on kept-alive connections."""

    def __init__(self, base_url: str, api_key: str, timeout: float) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise TransportError(f"not an http(s) URL: {base_url}")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.timeout = float(timeout)
        self.api_key = api_key
        self.proxy = proxy_for(self.url)
        self._session: Any = None  # aiohttp.ClientSession for a proxied endpoint, made inside the event loop
        self._errors: tuple[type[BaseException], ...] = ()
        parts = urllib.parse.urlsplit(self.url)
        if not parts.hostname:
            raise TransportError(f"no host in {base_url}")
        self._tls = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if self._tls else 80)
        self._ssl: ssl.SSLContext | None = None
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        host = parts.netloc.rpartition("@")[2]
        if any(c in text for text in (target, host, api_key) for c in "\r\n"):
            raise TransportError("a line break in the endpoint URL or API key")  # it would end the header line
        self._head = (
            f"POST {target} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {api_key}\r\n"
            f"Content-Type: application/json\r\nAccept: application/json\r\nUser-Agent: ddibench/{__version__}\r\n"
            "Content-Length: "
        ).encode("latin-1")
        self._idle: list[_Connection] = []

    async def post(self, body: bytes) -> tuple[int, Mapping[str, str], bytes]:
        """POST ``body`` (JSON bytes); the status, headers and complete body of the response."""
        if self.proxy is not None:
            return await self._post_via_proxy(body)
        try:
            if sys.version_info >= (3, 11):
                async with asyncio.timeout(self.timeout):
                    return await self._exchange(body)
            return await asyncio.wait_for(self._exchange(body), self.timeout)
        except (asyncio.TimeoutError, TimeoutError):
            raise TransportTimeout(f"timeout after {self.timeout:g} s") from None
        except (OSError, ValueError, EOFError, _Stale, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
            raise _failed(exc) from None

    async def _exchange(self, body: bytes) -> tuple[int, dict[str, str], bytes]:
        request = self._head + str(len(body)).encode() + b"\r\n\r\n" + body
        while self._idle:
            conn = self._idle.pop()
            if not conn.usable():
                conn.close()
                continue
            try:
                return await self._on(conn, request, reused=True)
            except _Stale:
                continue  # dropped while idle: the next idle connection, or a new one
        return await self._on(await self._connect(), request, reused=False)

    async def _connect(self) -> _Connection:
        if self._tls and self._ssl is None:
            self._ssl = ssl.create_default_context()
        reader, writer = await asyncio.open_connection(
            self._host, self._port, ssl=self._ssl if self._tls else None, limit=HEAD_LIMIT
        )
        return _Connection(reader, writer)

    async def _on(self, conn: _Connection, request: bytes, reused: bool) -> tuple[int, dict[str, str], bytes]:
        keep = False
        try:
            conn.writer.write(request)
            try:
                head = await conn.reader.readuntil(b"\r\n\r\n")
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
                status, headers, version = _parse_head(await conn.reader.readuntil(b"\r\n\r\n"))
            data, complete = await _read_body(conn.reader, status, headers)
            connection = headers.get("connection", "").lower()
            keep = complete and "close" not in connection and (version != "HTTP/1.0" or "keep-alive" in connection)
            return status, headers, data
        finally:
            if keep:
                self._idle.append(conn)
            else:  # an error, a cancellation (timeout), or the server closes it: never reused
                conn.close()

    async def _post_via_proxy(self, body: bytes) -> tuple[int, Mapping[str, str], bytes]:
        session = self._session or self._open()
        try:
            async with session.post(self.url, data=body, allow_redirects=False, proxy=self.proxy) as response:
                return response.status, {k.lower(): v for k, v in response.headers.items()}, await response.read()
        except asyncio.TimeoutError:  # aiohttp's own timeouts derive from it too
            raise TransportTimeout(f"timeout after {self.timeout:g} s") from None
        except self._errors as exc:
            raise _failed(exc) from None

    def _open(self) -> Any:
        import aiohttp

        self._errors = (aiohttp.ClientError, OSError, ValueError)
        self._session = aiohttp.ClientSession(
            # the endpoint's policy bounds how many requests are in flight; the connector adds no queue of its own
            connector=aiohttp.TCPConnector(limit=0),
            timeout=aiohttp.ClientTimeout(total=self.timeout),
            headers={
                "Authorization": f"Bearer {self.api_key}",
                "Content-Type": "application/json",
                "Accept": "application/json",
                "User-Agent": f"ddibench/{__version__}",
            },
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


def _failed(exc: BaseException) -> TransportError:
    """The TransportError of a failed exchange: the exception's type and the first line of its message."""
    detail = str(exc).splitlines()[0] if str(exc) else ""
    return TransportError(f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__)


def _parse_head(head: bytes) -> tuple[int, dict[str, str], str]:
    """Status, headers (lower-case names; repeated ones joined with ', ') and version of a response head."""
    lines = head.decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    code = rest[:3]
    if not version.startswith("HTTP/1.") or not code.isdigit():
        raise ValueError(f"not an HTTP/1.x response: {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise ValueError(f"malformed header line: {line[:80]!r}")
        name, value = name.strip().lower(), value.strip()
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    return int(code), headers, version


async def _read_body(reader: asyncio.StreamReader, status: int, headers: Mapping[str, str]) -> tuple[bytes, bool]:
    """The body and whether the connection is left at a message boundary (False: read to its end)."""
    if status in (204, 304):
        return b"", True
    if "chunked" in headers.get("transfer-encoding", "").lower():
        parts: list[bytes] = []
        while True:
            size_line = await reader.readuntil(b"\r\n")
            size = int(size_line.split(b";", 1)[0].strip(), 16)
            if size == 0:
                while await reader.readuntil(b"\r\n") != b"\r\n":  # trailers, then the blank line
                    pass
                return b"".join(parts), True
            parts.append(await reader.readexactly(size))
            if await reader.readexactly(2) != b"\r\n":
                raise ValueError("malformed chunked body")
    length = headers.get("content-length")
    if length is not None:
        if not length.isdigit():
            raise ValueError(f"bad Content-Length: {length[:40]!r}")
        return await reader.readexactly(int(length)), True
    return await reader.read(), False  # delimited by the server closing the connection
