"""Running the runner's event loops so that SIGTERM ends them as cleanly as Ctrl-C.

The command line turns SIGTERM into ``KeyboardInterrupt`` (:mod:`ddibench.cli`). Raised by a signal
handler in the middle of an event loop, that exception lands inside whichever task happens to run: the
task keeps it, nobody retrieves it, and Python prints "Task exception was never retrieved" with a
traceback after the one-line message. :func:`run_async` instead lets the loop itself catch SIGTERM, the
way ``asyncio.run`` already treats Ctrl-C: the main task is cancelled, its ``finally`` blocks run (the
journal is synced, model servers are closed), every other task is cancelled and awaited, and only then
is ``KeyboardInterrupt`` raised, outside the loop.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run_async(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)``; a SIGTERM while it runs cancels it and raises ``KeyboardInterrupt`` afterwards."""
    terminated: list[bool] = []

    async def guarded() -> T:
        loop = asyncio.get_running_loop()
        me = asyncio.current_task()
        previous = signal.getsignal(signal.SIGTERM)

        def on_sigterm() -> None:
            terminated.append(True)
            if me is not None:
                me.cancel()

        try:
            loop.add_signal_handler(signal.SIGTERM, on_sigterm)
        # not the main thread, or a loop without signal handlers (Windows): SIGTERM keeps the command's handler
        except (ValueError, RuntimeError, NotImplementedError):
            return await main
        try:
            return await main
        finally:
            loop.remove_signal_handler(signal.SIGTERM)
            signal.signal(signal.SIGTERM, previous)  # the command's own handler again (remove_ sets the default)

    outer = guarded()
    try:
        result = asyncio.run(outer)
    except asyncio.CancelledError:
        if not terminated:
            raise
        raise KeyboardInterrupt from None
    finally:
        # a SIGTERM before the loop ran them (the command's handler raised while asyncio.run set up) left both
        # coroutines unstarted, and Python would warn at exit that they were never awaited; a finished one
        # closes as a no-op
        outer.close()
        main.close()
    if terminated:  # the cancellation was swallowed somewhere: the command ends all the same
        raise KeyboardInterrupt
    return result
