"""The API an adapter imports stays importable.

Every ``from ddibench... import X`` in the docs (their Python code blocks and the worked examples of
``docs/examples/``) and in the reference systems' imports of the core resolves, and so does every dotted
``ddibench...`` name the docs give in backticks or as an API reference (``::: ddibench.x``): a module moved
without its documented path fails here. The old paths of the toolkit modules (``ddibench.label_choice``, ...)
give the very objects of their new ones (``ddibench.toolkit.label_choice``, ...).
"""

from __future__ import annotations

import ast
import importlib
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
SYSTEMS = REPO / "systems"

# the path a module had before it moved into ddibench.toolkit -> the path it has now (kept for adapters)
OLD_PATHS = {
    "ddibench.label_choice": "ddibench.toolkit.label_choice",
    "ddibench.answering": "ddibench.toolkit.answering",
    "ddibench.molecule_answers": "ddibench.toolkit.molecule_answers",
    "ddibench.corpus": "ddibench.toolkit.corpus",
}

CODE_BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)
DOTTED = re.compile(r"`(ddibench(?:\.[A-Za-z_]\w*)+)(?:\(\))?`|^::: (ddibench(?:\.[A-Za-z_]\w*)*)\s*$", re.MULTILINE)


def imports_of(source: str) -> Iterator[tuple[str, str | None]]:
    """(module, name) for each absolute import of ddibench's core in ``source``; name is None for ``import m``."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith("ddibench"):
            for alias in node.names:
                yield node.module or "", alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "ddibench":
                    yield alias.name, None


def documented_imports() -> dict[tuple[str, str | None], str]:
    """What the docs and the reference systems import from the core, each with one place that imports it."""
    found: dict[tuple[str, str | None], str] = {}
    sources = [(p, block) for p in sorted(DOCS.rglob("*.md")) for block in CODE_BLOCK.findall(p.read_text())]
    sources += [(p, p.read_text()) for p in sorted((DOCS / "examples").rglob("*.py"))]
    sources += [(p, p.read_text()) for p in sorted(SYSTEMS.rglob("*.py"))]
    for path, source in sources:
        for module, name in imports_of(source):
            if module.startswith("ddibench.systems"):  # a system's own package, or another's: not the core
                continue
            found.setdefault((module, name), str(path.relative_to(REPO)))
    return found


def documented_paths() -> dict[str, str]:
    """The dotted ddibench names the docs give in backticks or as an API reference, each with one page."""
    found: dict[str, str] = {}
    for path in sorted(DOCS.rglob("*.md")):
        for match in DOTTED.finditer(path.read_text()):
            found.setdefault(match.group(1) or match.group(2), str(path.relative_to(REPO)))
    return found


def resolves(module: str, name: str | None = None) -> bool:
    """Whether ``from module import name`` (or ``import module``) would succeed here."""
    try:
        imported = importlib.import_module(module)
    except ImportError:
        return False
    if name is None or name == "*" or hasattr(imported, name):
        return True
    try:
        importlib.import_module(f"{module}.{name}")  # 'from package import submodule'
    except ImportError:
        return False
    return True


def dotted_resolves(dotted: str) -> bool:
    """Whether ``dotted`` names a module, or an attribute (however deep) of the longest module it starts with."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attribute in parts[i:]:
            if not hasattr(obj, attribute):
                return False
            obj = getattr(obj, attribute)
        return True
    return False


def test_every_name_the_docs_and_the_reference_systems_import_resolves() -> None:
    found = documented_imports()
    # the collection sees what it must: the facade, a toolkit module, an example's and a system's imports
    assert ("ddibench", "BaseSystem") in found
    assert ("ddibench.chem", "morgan_matrix") in found  # docs/examples/
    assert ("ddibench.toolkit.label_choice", "LabelChoiceSystem") in found  # systems/
    missing = [
        f"{where}: from {module} import {name}" for (module, name), where in found.items() if not resolves(module, name)
    ]
    assert not missing, missing


def test_every_dotted_name_the_docs_give_resolves() -> None:
    found = documented_paths()
    assert "ddibench.toolkit.label_choice" in found  # an API reference page's ':::' directive
    missing = [f"{where}: {dotted}" for dotted, where in found.items() if not dotted_resolves(dotted)]
    assert not missing, missing


@pytest.mark.parametrize("old, new", sorted(OLD_PATHS.items()))
def test_an_old_toolkit_path_gives_the_objects_of_the_new_one(old: str, new: str) -> None:
    old_module, new_module = importlib.import_module(old), importlib.import_module(new)
    public = [name for name in vars(new_module) if not name.startswith("_")]
    assert public
    assert [name for name in public if getattr(old_module, name, None) is not getattr(new_module, name)] == []


def test_the_resolvers_bite() -> None:
    assert resolves("ddibench.toolkit", "label_choice")  # a submodule, imported by name
    assert not resolves("ddibench.toolkit.label_choice", "NoSuchName")
    assert not resolves("ddibench.no_such_module", "X")
    assert dotted_resolves("ddibench.toolkit.label_choice.LabelChoiceSystem.prepare")
    assert not dotted_resolves("ddibench.toolkit.label_choice.NoSuchName")
    assert list(imports_of("from ddibench.x import (a,\n b)\nimport ddibench.y\nimport os\nfrom . import z\n")) == [
        ("ddibench.x", "a"),
        ("ddibench.x", "b"),
        ("ddibench.y", None),
    ]
