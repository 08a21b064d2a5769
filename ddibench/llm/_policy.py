"""How one endpoint is used: how many requests may be in flight, and how long each may take.

An :class:`EndpointPolicy` is shared by every client of one endpoint. It decides two things, from what
the endpoint did so far:

* **the deadline of a request.** ``timeout`` (the model option ``#timeout=``, else the pool's default)
  is the longest any request may take. Once the endpoint has answered ``MIN_OBSERVED`` requests, a
  request is also cut when it has taken ``FACTOR`` times the endpoint's recent 95th-percentile latency
  (never less than ``FLOOR`` seconds): a request that hangs then costs seconds, not the full timeout.
  Each retry of a cut request doubles its deadline (up to ``timeout``), so an answer that is merely
  slow still arrives. A request already in flight when the deadline becomes known is held to it too
  (the deadline is re-read every ``RECHECK`` seconds while a request waits).
* **how many requests are in flight.** Up to ``limit`` (the run's concurrency). Repeated timeouts
  with no answer in between mean the endpoint has stalled: the limit halves each time (down to one
  request probing the endpoint) instead of every slot waiting on a dead server; overload answers
  (429, 503) halve it too. Each answer raises it by one again (additive increase, multiplicative
  decrease, as TCP and inspect_ai's adaptive connections do). With ``serial_limit``, requests that
  enter through :meth:`EndpointPolicy.slot` as ``serial`` are also held to that many in flight, while
  the others may fill every slot: on a CPU server, prompt evaluation already uses every core for one
  request (a second one in flight only splits them), while decoding one sequence leaves the memory
  bandwidth idle, so requests that mostly generate gain from running together (``benchmarks/headline.py``).

Only requests to a remote endpoint are cut early. The embedded llama.cpp server is local and watched, and its
slots share the CPU, so a long prompt is slow there rather than stalled: it is not second-guessed
(``adaptive=False``) and its timeout is the pool's long embedded one (``_pool.EMBEDDED_TIMEOUT``).

A run of requests that continue one prompt (the likelihood walk's requests, each the last one plus a token)
can :meth:`EndpointPolicy.hold` a slot for all of them: no other sample's request is answered in between, so
a server that keeps one prompt cache per slot (llama.cpp) reuses it instead of evaluating the whole prompt
again for each request.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
from collections.abc import AsyncIterator, Awaitable
from typing import Any, TypeVar

T = TypeVar("T")

MIN_OBSERVED = 20  # answers seen before the deadline adapts
FACTOR = 8.0  # a request is cut at FACTOR x the recent p95 latency...
FLOOR = 2.0  # ...but never before FLOOR seconds
RECHECK = 1.0  # how often a waiting request re-reads its deadline while the deadline is the full timeout
WINDOW = 256  # recent latencies kept


class StalledRequest(Exception):
    """A request cut at its deadline (the endpoint took far longer than it usually does)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"no answer within {seconds:.1f} s")
        self.seconds = seconds


class EndpointPolicy:
    def __init__(self, limit: int, timeout: float, *, adaptive: bool = True, serial_limit: int | None = None) -> None:
        self.max_limit = max(1, int(limit))
        self.limit = self.max_limit
        self.timeout = float(timeout)
        self.adaptive = adaptive
        self.active = 0
        self.serial_limit = serial_limit  # most ``serial`` requests in flight at once (None: only ``limit``)
        self.active_serial = 0
        self.lowest_limit = self.limit
        self.timeouts = 0
        self.consecutive_timeouts = 0
        self._waiters: collections.deque[tuple[asyncio.Future[None], bool]] = collections.deque()  # (future, serial)
        self._latencies: collections.deque[float] = collections.deque(maxlen=WINDOW)
        self._base: float | None = None  # the adapted deadline of a first attempt (None: not known yet)
        self._fresh = 0  # answers since the deadline was last computed
        # set inside hold(): the requests of that task (and of tasks it starts) use the slot it holds
        self._holding: contextvars.ContextVar[bool] = contextvars.ContextVar(f"holding-{id(self)}", default=False)

    # -- slots ---------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def hold(self, serial: bool = False) -> AsyncIterator[None]:
        """Keep one slot for the requests made inside (see the module); nested holds use the outer one."""
        if self._holding.get():
            yield
            return
        async with self.slot(serial):
            token = self._holding.set(True)
            try:
                yield
            finally:
                self._holding.reset(token)

    async def __aenter__(self) -> EndpointPolicy:
        await self._enter(serial=False)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if not self._holding.get():
            self._release(serial=False)

    @contextlib.asynccontextmanager
    async def slot(self, serial: bool = False) -> AsyncIterator[None]:
        """One request in flight; a ``serial`` one also within ``serial_limit`` (see the module)."""
        held = await self._enter(serial)
        try:
            yield
        finally:
            if not held:
                self._release(serial)

    def _fits(self, serial: bool) -> bool:
        if self.active >= self.limit:
            return False
        return not serial or self.serial_limit is None or self.active_serial < self.serial_limit

    async def _enter(self, serial: bool) -> bool:
        """Waits for a slot (True: this task holds one already, nothing was taken)."""
        if self._holding.get():
            return True  # the slot this task holds
        if self._fits(serial) and not any(self._fits(s) for _, s in self._waiters):
            self._take(serial)
            return False
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (future, serial)
        self._waiters.append(entry)
        try:
            await future  # the releasing request handed its slot over (the counts already include us)
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self._release(serial)  # the slot was handed over as we were cancelled: pass it on
            elif entry in self._waiters:
                self._waiters.remove(entry)
            raise
        return False

    def _take(self, serial: bool) -> None:
        self.active += 1
        self.active_serial += serial

    def _release(self, serial: bool) -> None:
        self.active -= 1
        self.active_serial -= serial
        self._wake()

    def _wake(self) -> None:
        """Hands free slots to the waiters in order; a serial waiter that does not fit lets later ones pass."""
        for entry in list(self._waiters):
            if self.active >= self.limit:
                return
            future, serial = entry
            if future.done():
                self._waiters.remove(entry)
            elif self._fits(serial):
                self._waiters.remove(entry)
                self._take(serial)
                future.set_result(None)

    # -- deadlines -----------------------------------------------------------------------------

    def deadline(self, attempt: int = 0) -> float:
        """Seconds the ``attempt``-th try of a request may take."""
        if not self.adaptive:
            return self.timeout
        if self._fresh >= 16 or (self._base is None and len(self._latencies) >= MIN_OBSERVED):
            ordered = sorted(self._latencies)
            p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
            self._base = max(FLOOR, FACTOR * p95)
            self._fresh = 0
        if self._base is None:
            return self.timeout
        return min(self.timeout, self._base * 2**attempt)

    async def bounded(self, call: Awaitable[T], attempt: int = 0) -> T:
        """Await ``call`` until it answers or its deadline passes (then :class:`StalledRequest`).

        One timer per request, no extra task (the request path stays as cheap as a bare await): the timer
        re-reads the deadline while it is the full timeout and cancels the request once it has passed.
        """
        if not self.adaptive:
            return await call  # the SDK's own timeout bounds it
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        start = loop.time()
        expired: list[float] = []
        handle: list[asyncio.TimerHandle] = []

        def check() -> None:
            limit = self.deadline(attempt)
            left = start + limit - loop.time()
            if left <= 0:
                expired.append(limit)
                task.cancel()
            else:
                handle[:] = [loop.call_later(left if limit < self.timeout else min(left, RECHECK), check)]

        check()
        try:
            return await call
        except asyncio.CancelledError:
            if not expired:
                raise
            uncancel = getattr(task, "uncancel", None)  # Python >= 3.11: the cancellation was ours, not the caller's
            if uncancel is not None:
                uncancel()
            raise StalledRequest(expired[0]) from None
        finally:
            if handle:
                handle[0].cancel()

    # -- what the endpoint did -----------------------------------------------------------------

    def answered(self, latency: float) -> None:
        self._latencies.append(latency)
        self._fresh += 1
        self.consecutive_timeouts = 0
        if self.limit < self.max_limit:
            self.limit += 1
            self._wake()

    def timed_out(self) -> None:
        self.timeouts += 1
        self.consecutive_timeouts += 1
        if self.consecutive_timeouts >= 2:  # repeated, with no answer in between: the endpoint stalls
            self._shrink()

    def overloaded(self) -> None:
        self._shrink()

    def _shrink(self) -> None:
        self.limit = max(1, self.limit // 2)
        self.lowest_limit = min(self.lowest_limit, self.limit)

    def stats(self) -> dict[str, Any]:
        return {
            "concurrency": self.max_limit,
            **({"serial_concurrency": self.serial_limit} if self.serial_limit is not None else {}),
            "lowest_concurrency": self.lowest_limit,
            "timeouts": self.timeouts,
            "deadline_s": None if self._base is None else round(min(self.timeout, self._base), 3),
            "timeout_s": self.timeout,
        }
