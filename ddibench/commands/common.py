"""What every command shares: the console and the progress display."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console


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
