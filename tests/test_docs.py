"""The documentation site builds in strict mode (a broken link or API reference fails), and its generated
tables list every registered task and system."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def test_docs_build_strictly_and_list_everything(tmp_path: Path) -> None:
    if (
        shutil.which("mkdocs") is None
        and subprocess.run([sys.executable, "-m", "mkdocs", "--version"], capture_output=True).returncode
    ):
        pytest.skip("mkdocs is not installed (pip install -e '.[dev]')")
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    from ddibench.registry import system_names, task_names

    tasks_page = (site / "tasks" / "index.html").read_text()
    assert all(f"<code>{name}</code>" in tasks_page for name in task_names())
    systems_page = (site / "systems" / "index.html").read_text()
    assert all(f"<code>{name}</code>" in systems_page for name in system_names())
    documented = " ".join(p.read_text() for p in (site / "systems").rglob("index.html"))
    missing = [name for name in system_names() if f"<strong><code>{name}</code></strong>" not in documented]
    assert not missing, (
        f"systems without a page of their own: {missing} (add <!-- ddibench:system NAME --> to a page under docs/systems/)"
    )
    assert "Writing an adapter" in (site / "adapters" / "index.html").read_text()
    # no markup left as text: an admonition or details block whose extension is off, emphasis or code spans
    # that did not render (code blocks, code spans and the search index may show such characters)
    leftovers = {}
    for page in site.rglob("*.html"):
        text = re.sub(r"<(pre|code|script|style)\b.*?</\1>", "", page.read_text(), flags=re.DOTALL)
        text = re.sub(r"<[^>]+>", " ", text)
        found = re.findall(r"(?:^|\s)(\?\?\?\+?|!!!)\s+\w+|\*\*\S[^*\n]*\*\*|`[^`\n]+`", text)
        if found:
            leftovers[str(page.relative_to(site))] = found[:3]
    assert not leftovers, f"markup shown as text: {leftovers}"
    assert "BaseEvaluator" in (site / "reference" / "evaluation" / "index.html").read_text()


def test_the_types_reference_gives_every_field_a_meaning_and_every_resource_is_declared() -> None:
    """The generated reference (docs/hooks.py) reads each field's meaning from the source: none may be missing.
    Each family's declared resource keys are the keys its loaded data hands to systems, each documented."""
    import runpy

    from ddibench.registry import get_task, task_names
    from ddibench.task import RESOURCES

    hooks = runpy.run_path(str(REPO / "docs" / "hooks.py"))
    missing = []
    for module, name, _ in hooks["TYPES"]:
        fields, methods = hooks["type_members"](module, name)
        missing += [f"{name}.{f}" for f, _, _, meaning in fields if not meaning] + [
            f"{name}.{m}" for m, doc in methods if not doc
        ]
    assert not missing, f"fields and methods without a meaning in the source: {missing}"
    first_of_family: dict[str, str] = {}
    for task_name in task_names():
        first_of_family.setdefault(get_task(task_name).family, task_name)
    for family, task_name in sorted(first_of_family.items()):
        task = get_task(task_name)
        assert set(task.resource_keys) <= set(RESOURCES), (family, task.resource_keys)
        assert set(task.load().resources) == set(task.resource_keys), (
            family,
            sorted(task.load().resources),
            task.resource_keys,
        )


# a line that tries to include a file with pymdownx.snippets, however mangled (the formatter wrote '--8 < --"x.py"')
SNIPPET_LIKE = re.compile(r"^\s*;*-+\s*8\s*<\s*-+")
SNIPPET = re.compile(r'^--8<-- "([^"\s]+)"$')


def _snippet_base_paths() -> list[Path]:
    yaml = pytest.importorskip("yaml")
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    extensions = {
        next(iter(e)) if isinstance(e, dict) else e: next(iter(e.values())) if isinstance(e, dict) else {}
        for e in config["markdown_extensions"]
    }
    base = (extensions.get("pymdownx.snippets") or {}).get("base_path", ["."])
    return [REPO / p for p in ([base] if isinstance(base, str) else base)]


def _snippet_problems(text: str, page: str, bases: list[Path]) -> list[str]:
    """Each include of ``text`` that is not exactly ``--8<-- "FILE"`` or names a file under none of ``bases``."""
    problems = []
    for number, line in enumerate(text.splitlines(), 1):
        if not SNIPPET_LIKE.match(line):
            continue
        match = SNIPPET.match(line.strip())
        if match is None:
            problems.append(f'{page}:{number}: {line.strip()!r} is not --8<-- "FILE"')
        elif not any((base / match.group(1)).is_file() for base in bases):
            problems.append(f"{page}:{number}: {match.group(1)} is in none of {[str(b) for b in bases]}")
    return problems


def test_every_snippet_include_in_the_docs_is_well_formed_and_names_a_file() -> None:
    """The worked examples are included from docs/examples/*.py with pymdownx.snippets; a mangled include (ruff's
    Markdown formatting once rewrote them as Python) or a missing file would leave a page without its code."""
    bases = _snippet_base_paths()
    problems = []
    for page in sorted((REPO / "docs").rglob("*.md")):
        problems += _snippet_problems(page.read_text(), str(page.relative_to(REPO)), bases)
    assert not problems, (
        'broken snippet includes (write them as --8<-- "FILE"; keep the page out of ruff format):\n'
        + ("\n".join(problems))
    )
    assert "--8<--" in (REPO / "docs" / "examples.md").read_text()


def test_the_snippet_check_catches_the_formatted_form_and_a_missing_file() -> None:
    bases = _snippet_base_paths()
    assert _snippet_problems('--8<-- "trained_pairs.py"', "ok.md", bases) == []
    assert len(_snippet_problems('--8 < --"trained_pairs.py"', "mangled.md", bases)) == 1
    assert len(_snippet_problems('--8<-- "no_such_example.py"', "missing.md", bases)) == 1


def test_the_committed_types_reference_is_up_to_date() -> None:
    """docs/reference/types.md carries its generated tables in the repository (readable on GitHub); they must be
    what scripts/gen_types_reference.py writes from the current source."""
    import difflib
    import runpy

    page = REPO / "docs" / "reference" / "types.md"
    committed = page.read_text()
    fresh = runpy.run_path(str(REPO / "scripts" / "gen_types_reference.py"))["render"](committed)
    diff = "".join(
        difflib.unified_diff(committed.splitlines(True), fresh.splitlines(True), "committed", "generated", n=0)
    )
    assert fresh == committed, (
        f"docs/reference/types.md is stale: run python scripts/gen_types_reference.py\n{diff[:3000]}"
    )
    assert "| `node_id` | `int` |" in committed


MD_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def _anchors(page: Path) -> set[str]:
    """The heading anchors of a markdown page as GitHub and mkdocs' toc write them (lower case, punctuation
    dropped, spaces as hyphens)."""
    anchors = set()
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            title = re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower())
            anchors.add(title.replace(" ", "-"))
    return anchors


def test_the_readme_links_resolve_and_every_docs_page_is_in_the_site() -> None:
    """The README is short and links to the docs for the rest: every relative link names a file of the repository
    (and a heading of it, after '#'). Every page under docs/ is in mkdocs.yml's nav, so the strict build above checks
    its links and a reader of the site finds it."""
    yaml = pytest.importorskip("yaml")
    broken = []
    for target in MD_LINK.findall((REPO / "README.md").read_text(encoding="utf-8")):
        if re.match(r"[a-z]+://", target):
            continue
        path, _, anchor = target.partition("#")
        page = REPO / path
        if not page.is_file() or (anchor and anchor not in _anchors(page)):
            broken.append(target)
    assert not broken, f"README links that resolve to nothing: {broken}"

    def pages(nav: object) -> list[str]:
        if isinstance(nav, str):
            return [nav]
        if isinstance(nav, dict):
            return [p for v in nav.values() for p in pages(v)]
        return [p for item in nav for p in pages(item)] if isinstance(nav, list) else []

    config = yaml.load((REPO / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)
    in_nav = set(pages(config["nav"]))
    on_disk = {str(p.relative_to(REPO / "docs")) for p in (REPO / "docs").rglob("*.md")}
    assert on_disk <= in_nav, f"pages missing from mkdocs.yml's nav: {sorted(on_disk - in_nav)}"
    assert "results.md" in in_nav and "getting-started.md" in in_nav


def test_the_link_check_catches_a_missing_page_and_heading(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Data and licences\n\n## `--limit` and trained systems\n", encoding="utf-8")
    assert _anchors(page) == {"data-and-licences", "--limit-and-trained-systems"}
    assert MD_LINK.findall("see [a](docs/x.md#y), not ![img](z.png)") == ["docs/x.md#y"]
