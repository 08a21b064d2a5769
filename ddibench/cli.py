"""The ``ddibench`` command line: the group and ``main``; the commands live in :mod:`ddibench.commands`.

Only click is imported at start-up; each command imports what it needs, so ``ddibench --help`` is
fast. Errors the user can fix are printed as one line (``error: ...``) with a non-zero exit code: our
own (:class:`~ddibench.errors.DdibenchError`), click's usage errors, and operating-system errors (a full
disk, a read-only or missing place). Ctrl-C (or SIGTERM) ends a command with one line; for ``run``
it says that finished samples are kept and how to resume.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

import click

from ddibench.commands import board, cache, data, doctor, interop, kg, listing, probe, run
from ddibench.errors import DdibenchError, write_error


class Interrupted(Exception):
    """Ctrl-C or SIGTERM during a command (raised past click, which would print an empty line)."""


class Group(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            raise Interrupted() from None


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="ddibench")
def cli() -> None:
    """ddibench: evaluate LLM-based systems on drug-drug-interaction tasks.

    \b
    Quickstart:
      ddibench list tasks
      ddibench run --system zero-shot --task drugbank_s2 --limit 50
      ddibench report runs/
    """


for command in (
    run.run,
    run.rescore,
    run.report,
    run.merge,
    listing.list_,
    data.data,
    cache.cache,
    board.submit,
    board.verify,
    board.board,
    kg.kg,
    probe.probe,
    interop.export,
    interop.import_,
    doctor.doctor,
):
    cli.add_command(command)


def _terminate(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt  # SIGTERM ends a command like Ctrl-C: sessions are closed, servers stopped


def _interrupted(argv: list[str]) -> str:
    command = next((a for a in argv if not a.startswith("-")), "")
    if command == "run":
        return "interrupted; finished samples are saved, re-run the same command to resume"
    return "interrupted; nothing was left half-written"


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if any(
        k.startswith("DDIBENCH_") and not os.path.isabs(v) for k, v in os.environ.items()
    ):  # resolve.py costs ~40 ms to import
        from ddibench.data.resolve import absolutize_env

        absolutize_env()  # relative paths made absolute once, for every process this command starts
    try:
        previous = signal.signal(signal.SIGTERM, _terminate)
    except ValueError:  # not the main thread: leave signals alone
        previous = None
    try:
        cli.main(args=args, prog_name="ddibench", standalone_mode=False)
    except (Interrupted, KeyboardInterrupt, click.exceptions.Abort):
        click.echo(_interrupted(args), err=True)
        sys.exit(130)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.UsageError as exc:
        where = exc.ctx.command_path if exc.ctx is not None else "ddibench"
        click.echo(f"error: {' '.join(exc.format_message().split())}; see '{where} -h'", err=True)
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        click.echo(f"error: {' '.join(exc.format_message().split())}", err=True)
        sys.exit(exc.exit_code)
    except DdibenchError as exc:
        click.echo(f"error: {' '.join(str(exc).split())}", err=True)
        sys.exit(exc.exit_code)
    except BrokenPipeError:  # the reader of a pipe went away ('ddibench report runs/ | head'): nothing to say
        sys.exit(1)
    except OSError as exc:  # a full disk, a read-only or missing place that no command foresaw
        click.echo(f"error: {write_error(exc)}", err=True)
        sys.exit(2)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    main()
