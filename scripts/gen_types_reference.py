"""Write the generated tables of docs/reference/types.md (the types an adapter touches, field by field, and what
each task family asks of a prediction) from the source, so the committed page reads on GitHub as on the site.

Run after changing a documented type, a field's docstring or comment, or a family's evaluator:

    python scripts/gen_types_reference.py          # rewrite the page
    python scripts/gen_types_reference.py --check  # exit 1 when the committed page is stale

The tables are built by ``docs/hooks.py`` (``fill_generated``); ``tests/test_docs.py`` fails when the committed
page differs from what this script writes. The families table loads each family's evaluator, so run it where the
task data resolves (``DDIBENCH_MIRROR`` or the user cache).
"""

from __future__ import annotations

import argparse
import runpy
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PAGE = REPO / "docs" / "reference" / "types.md"
HOOKS = REPO / "docs" / "hooks.py"


def render(markdown: str) -> str:
    """``markdown`` (the page's text) with its generated blocks rewritten from the installed package."""
    fill = runpy.run_path(str(HOOKS))["fill_generated"]
    return fill(markdown)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report whether the committed page is stale")
    args = parser.parse_args(argv)
    current = PAGE.read_text()
    fresh = render(current)
    if fresh == current:
        print(f"{PAGE.relative_to(REPO)} is up to date")
        return 0
    if args.check:
        print(f"{PAGE.relative_to(REPO)} is stale: run python scripts/gen_types_reference.py", file=sys.stderr)
        return 1
    PAGE.write_text(fresh)
    print(f"wrote {PAGE.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
