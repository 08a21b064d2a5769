"""What every command shares: the console, the progress display, and the options several commands take
(declared and checked once here, so every command that takes ``--limit`` or ``--bootstrap`` refuses the
same bad values with the same words)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from ddibench.errors import ConfigError

if TYPE_CHECKING:
    from rich.console import Console

F = TypeVar("F", bound=Callable[..., Any])
MIN_REPLICATES = 100  # fewer bootstrap replicates do not resolve a 95% interval's tails


def limit_option(help_text: str, fix: str) -> Callable[[F], F]:
    """``--limit N``: a positive number of samples (``fix`` says what omitting it does)."""

    def check(_ctx: click.Context, _param: click.Parameter, value: int | None) -> int | None:
        if value is not None and value <= 0:
            raise ConfigError(f"--limit must be a positive number of samples, got {value}", fix)
        return value

    return click.option("--limit", type=int, default=None, callback=check, help=help_text)


def bootstrap_option(help_text: str = "Bootstrap replicates for confidence intervals.") -> Callable[[F], F]:
    """``--bootstrap N`` (stored as ``replicates``): at least :data:`MIN_REPLICATES`."""

    def check(_ctx: click.Context, _param: click.Parameter, value: int) -> int:
        if value < MIN_REPLICATES:
            raise ConfigError(
                f"--bootstrap {value} is too few replicates for a 95% interval",
                f"use at least {MIN_REPLICATES} (default 1000)",
            )
        return value

    return click.option(
        "--bootstrap", "replicates", type=int, default=1000, show_default=True, callback=check, help=help_text
    )


def console(stderr: bool = False) -> Console:
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=True)


class RichProgress:
    """The runner's Progress protocol on top of rich progress bars (with ETA)."""

    def __init__(self, console: Console) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TaskProgressColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._progress = Progress(
            TextColumn("[progress.description]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TaskProgressColumn(),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=console,
            transient=False,
        )

    def __enter__(self) -> RichProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def note(self, message: str) -> None:
        self._progress.console.print(f"[dim]{message}[/dim]", highlight=False)

    def task(self, description: str, total: int | None) -> Any:
        progress = self._progress
        task_id = progress.add_task(description, total=total)

        class Handle:
            def advance(self, n: int = 1) -> None:
                progress.advance(task_id, n)

            def update(self, *, total: int | None = None, description: str | None = None) -> None:
                kwargs: dict[str, Any] = {}
                if total is not None:
                    kwargs["total"] = total
                if description is not None:
                    kwargs["description"] = description
                progress.update(task_id, **kwargs)

            def close(self) -> None:
                progress.refresh()

        return Handle()


class LineProgress:
    """Progress for logs and pipes: a plain line per task every ``every`` seconds and when it ends."""

    def __init__(self, console: Console, every: float = 30.0) -> None:
        self.console = console
        self.every = every

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def note(self, message: str) -> None:
        self.console.print(message, markup=False, highlight=False)

    def task(self, description: str, total: int | None) -> Any:
        import time

        console, every = self.console, self.every

        class Handle:
            def __init__(self) -> None:
                self.done, self.total, self.description = 0, total, description
                self.start = self.last = time.monotonic()

            def _line(self) -> str:
                elapsed = time.monotonic() - self.start
                if self.total:
                    eta = elapsed / self.done * (self.total - self.done) if self.done else float("nan")
                    return f"{self.description}: {self.done:,}/{self.total:,} ({100 * self.done / self.total:.0f}%) {elapsed:.0f}s elapsed, ETA {eta:.0f}s"
                return f"{self.description}: {self.done:,} {elapsed:.0f}s elapsed"

            def advance(self, n: int = 1) -> None:
                self.done += n
                if time.monotonic() - self.last >= every:
                    self.last = time.monotonic()
                    console.print(self._line(), markup=False, highlight=False)

            def update(self, *, total: int | None = None, description: str | None = None) -> None:
                self.total = total if total is not None else self.total
                self.description = description or self.description

            def close(self) -> None:
                console.print(self._line(), markup=False, highlight=False)

        return Handle()


def progress(console: Console) -> Any:
    """Live bars with ETA on a terminal; periodic plain lines in logs and pipes."""
    return RichProgress(console) if console.is_terminal else LineProgress(console)
