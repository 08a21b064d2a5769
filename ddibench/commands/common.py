"""What every command shares: the console, the progress display, and the options several commands take
(declared and checked once here, so every command that takes ``--limit`` or ``--bootstrap`` refuses the
same bad values with the same words)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
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


MIN_FRESH_FOR_ETA = 3  # an ETA is shown once this many items were done by real work (not from a cache)


@dataclass
class Tally:
    """What a progress bar counts: items done by real work apart from items done without it (answers from the
    response cache, resumed samples), so neither the rate nor the ETA is inflated by the free ones.

    The bar shows ``done / (total - cached)``: the work there is. A total that turns out too small grows to
    the items seen, so the bar never passes 100%; an ETA exists only after :data:`MIN_FRESH_FOR_ETA` items of
    real work, from the time they took (a stalled step's ETA grows instead of standing still)."""

    total: int | None
    done: int = 0
    cached: int = 0
    started: float = field(default_factory=time.monotonic)

    def add(self, n: int = 1, cached: bool = False) -> None:
        if cached:
            self.cached += n
        else:
            self.done += n
        if self.total is not None and self.done + self.cached > self.total:
            self.total = self.done + self.cached

    @property
    def work(self) -> int | None:
        """The items to do by real work (None: unknown)."""
        return None if self.total is None else max(self.total - self.cached, self.done)

    def eta(self, now: float | None = None) -> float | None:
        """Seconds left, or None until a few items of real work have been done (or without a total)."""
        work = self.work
        if work is None or self.done < MIN_FRESH_FOR_ETA:
            return None
        elapsed = (now if now is not None else time.monotonic()) - self.started
        return elapsed / self.done * (work - self.done)

    def count(self) -> str:
        """``12/80 (15%), 30 from cache``, or ``12 done`` without a total."""
        work = self.work
        text = (
            f"{self.done:,} done" if work is None else f"{self.done:,}/{work:,} ({100 * self.done / max(work, 1):.0f}%)"
        )
        return text + (f", {self.cached:,} from cache" if self.cached else "")


class RichProgress:
    """The runner's Progress protocol on top of rich progress bars (:class:`Tally` counting, ETA once known)."""

    def __init__(self, console: Console) -> None:
        from rich.progress import BarColumn, Progress, ProgressColumn, TextColumn, TimeElapsedColumn
        from rich.text import Text

        class Count(ProgressColumn):
            def render(self, task: Any) -> Text:
                return Text(task.fields["tally"].count())

        class Eta(ProgressColumn):
            def render(self, task: Any) -> Text:
                eta = task.fields["tally"].eta()
                return Text("" if eta is None or task.finished else f"ETA {_clock(eta)}")

        self._progress = Progress(
            TextColumn("[progress.description]{task.description}"),
            BarColumn(),
            Count(),
            TimeElapsedColumn(),
            Eta(),
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
        tally = Tally(total)
        task_id = progress.add_task(description, total=tally.work, tally=tally)

        class Handle:
            def advance(self, n: int = 1, *, cached: bool = False) -> None:
                tally.add(n, cached)
                progress.update(task_id, total=tally.work, completed=tally.done)

            def update(self, *, total: int | None = None, description: str | None = None) -> None:
                if total is not None:
                    tally.total = total
                    progress.update(task_id, total=tally.work)
                if description is not None:
                    progress.update(task_id, description=description)

            def close(self) -> None:
                progress.refresh()

        return Handle()


def _clock(seconds: float) -> str:
    """``0:04:31``."""
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


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
        console, every = self.console, self.every

        class Handle:
            def __init__(self) -> None:
                self.tally, self.description = Tally(total), description
                self.last, self.shown = self.tally.started, ""

            def _show(self) -> None:
                line = self._line()
                if line != self.shown:  # a task that ends just after a periodic line is not reported twice
                    console.print(line, markup=False, highlight=False)
                    self.shown = line

            def _line(self) -> str:
                now = time.monotonic()
                eta = self.tally.eta(now)
                line = f"{self.description}: {self.tally.count()} {now - self.tally.started:.0f}s elapsed"
                return line + ("" if eta is None or eta <= 0 else f", ETA {eta:.0f}s")

            def advance(self, n: int = 1, *, cached: bool = False) -> None:
                self.tally.add(n, cached)
                if time.monotonic() - self.last >= every:
                    self.last = time.monotonic()
                    self._show()

            def update(self, *, total: int | None = None, description: str | None = None) -> None:
                self.tally.total = total if total is not None else self.tally.total
                self.description = description or self.description

            def close(self) -> None:
                self._show()

        return Handle()


def progress(console: Console) -> Any:
    """Live bars with ETA on a terminal; periodic plain lines in logs and pipes."""
    return RichProgress(console) if console.is_terminal else LineProgress(console)
