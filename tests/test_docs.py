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
