"""The HTTP path of a chat request: one pre-serialised JSON POST on a kept-alive aiohttp connection.

:class:`ChatTransport` is one endpoint's connection pool (an ``aiohttp.ClientSession``, opened on the
first request inside the running event loop). :meth:`ChatTransport.post` sends a request body that the
client has already serialised (the messages are encoded once per call, and that text also feeds the
cache key) and returns the status, the headers and the raw body; it neither retries nor interprets
anything: what a response means (retry, Retry-After, a usable completion or not) is decided by
:class:`~ddibench.llm.LLMClient`. Failures come back as one small taxonomy: :class:`TransportTimeout`
(no complete answer within the endpoint's timeout) and :class:`TransportError` (the connection was
refused, reset or cut, or the response was not HTTP).

Why not the ``openai`` SDK: against a fast server the client's own CPU is what limits a run, and the SDK
walks every message through its type transforms and builds its request and response objects on every
call (about 2 ms of CPU per request here). aiohttp with bytes in and bytes out costs about 0.1 ms
(``benchmarks/runner_throughput.py`` measures the whole path beside lm-eval and a raw-socket floor).
Proxies (``HTTPS_PROXY``/``HTTP_PROXY``/``NO_PROXY``) are honoured: the endpoint's proxy is looked up once
(:func:`proxy_for`) and passed with each request; aiohttp's own ``trust_env`` would look it up again on a
worker thread for every request, which costs more CPU than the rest of the request. TLS uses aiohttp's
default context (system certificates, hostname checks).
"""

from __future__ import annotations

import asyncio
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


class ChatTransport:
    """Chat-completion POSTs to one OpenAI-compatible endpoint, on kept-alive connections."""

    def __init__(self, base_url: str, api_key: str, timeout: float) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise TransportError(f"not an http(s) URL: {base_url}")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.timeout = float(timeout)
        self.api_key = api_key
        self.proxy = proxy_for(self.url)
        self._session: Any = None  # aiohttp.ClientSession, made inside the event loop on the first request
        self._errors: tuple[type[BaseException], ...] = ()

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

    async def post(self, body: bytes) -> tuple[int, Mapping[str, str], bytes]:
        """POST ``body`` (JSON bytes); the status, headers and complete body of the response."""
        session = self._session or self._open()
        try:
            async with session.post(self.url, data=body, allow_redirects=False, proxy=self.proxy) as response:
                return response.status, response.headers, await response.read()
        except asyncio.TimeoutError:  # aiohttp's own timeouts derive from it too
            raise TransportTimeout(f"timeout after {self.timeout:g} s") from None
        except self._errors as exc:
            detail = str(exc).splitlines()[0] if str(exc) else ""
            raise TransportError(f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__) from None

    async def close(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()
