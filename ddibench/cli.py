"""The ``ddibench`` command line: the group and ``main``; the commands live in :mod:`ddibench.commands`.

Only click is imported at start-up; each command imports what it needs, so ``ddibench --help`` is
fast. Errors the user can fix are printed as one line (``error: ...``) with a non-zero exit code.
"""

from __future__ import annotations

import sys

import click

from ddibench.commands import board, data, interop, kg, listing, run
from ddibench.errors import DdibenchError


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="ddibench")
def cli() -> None:
    """ddibench: evaluate LLM-based systems on drug-drug-interaction tasks.

    \b
    Quickstart:
      ddibench list tasks
      ddibench run --system zero-shot --task drugbank_s2 --limit 50
      ddibench report runs/
    """


for command in (run.run, run.rescore, run.report, listing.list_, data.data, board.submit, board.verify, board.board, kg.kg,
                interop.export, interop.import_):
    cli.add_command(command)


def main(argv: list[str] | None = None) -> None:
    try:
        cli.main(args=argv, prog_name="ddibench", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except DdibenchError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        click.echo("interrupted; finished samples are saved, re-run the same command to resume", err=True)
        sys.exit(130)


if __name__ == "__main__":
    main()
