"""The house reads one way: sources -> tasks -> systems -> runner -> results -> board.

Every import in the repository (module level, inside functions, under ``TYPE_CHECKING``) is parsed
with ``ast`` and checked against these rules, with ``tasks/`` read as ``ddibench.tasks``, ``systems/``
as ``ddibench.systems`` and ``leaderboard/`` as ``ddibench.leaderboard``:

* no import cycle between modules;
* a core module imports only core modules of its own layer or below (:data:`LAYERS`), and never a
  task family or a system (the registry finds those through entry points);
* a task family imports only public core modules of the task layer and below, and other task families;
* a system imports only public core modules of the system layer and below, its own package, and
  other systems' packages (as an outside author could) — never a task family and never a private
  module (a path component or an imported name starting with ``_``).

The checker itself is tested on a small planted tree, so a rule that stopped biting would fail here.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
ROOTS = {
    "ddibench": "ddibench",
    "tasks": "ddibench.tasks",
    "systems": "ddibench.systems",
    "leaderboard": "ddibench.leaderboard",
}

# Core layers, lowest first. A core module may import modules of its own layer or any layer below.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "foundation",
        (
            "ddibench._version",
            "ddibench.errors",
            "ddibench.hashing",
            "ddibench.schema",
            "ddibench.families",
            "ddibench.net",
        ),
    ),
    (
        "sources",
        (
            "ddibench.data",
            "ddibench.profiles",
            "ddibench.chem",
            "ddibench.toolkit.parsing",
            "ddibench.artifacts",
            "ddibench.prices",
        ),
    ),
    (
        "tools",
        (
            "ddibench.llm",
            "ddibench.embeddings",
            "ddibench.kg",
            "ddibench.metrics",
            "ddibench.toolkit.corpus",
            "ddibench.corpus",  # the old path of ddibench.toolkit.corpus, kept for adapters
        ),
    ),
    ("tasks", ("ddibench.task", "ddibench.drug_settings", "ddibench.evaluation")),
    (
        "systems",
        (
            "ddibench.system",
            "ddibench.toolkit",  # but parsing and corpus, each in its own layer above (a module's first match wins)
            "ddibench.label_choice",  # the old paths of three toolkit modules, kept for adapters
            "ddibench.answering",
            "ddibench.molecule_answers",
        ),
    ),
    ("runner", ("ddibench.registry", "ddibench.runner")),
    (
        "results",
        (
            "ddibench.submission",
            "ddibench.results",
            "ddibench.interop",
        ),
    ),
    ("board and command line", ("ddibench.leaderboard", "ddibench.commands", "ddibench.cli", "ddibench.__main__")),
]
TASK_LAYER = "tasks"
SYSTEM_LAYER = "systems"
PLUGIN_IMPORTERS = ("ddibench.registry", "ddibench.commands", "ddibench.cli")  # may name plug-ins (they do not today)
FACADE = "ddibench"  # the root package re-exports the public API lazily; nothing in the core imports it


@dataclass(frozen=True)
class Import:
    importer: str
    target: str  # the module imported
    name: str | None  # the name imported from it, for 'from X import name'
    line: int


def module_files(repo: Path) -> dict[str, Path]:
    out = {}
    for folder, package in ROOTS.items():
        root = repo / folder
        if not root.is_dir():
            continue
        for path in root.rglob("*.py"):
            rel = path.relative_to(root).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            out[".".join([package, *parts])] = path
    return out


def imports(modules: dict[str, Path]) -> Iterator[Import]:
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    yield Import(name, alias.name, None, node.lineno)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = name.split(".") if is_package else name.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                for alias in node.names:
                    sub = f"{module}.{alias.name}"
                    if sub in modules:  # 'from package import submodule'
                        yield Import(name, sub, None, node.lineno)
                    else:
                        yield Import(name, module, alias.name, node.lineno)


def layer_of(module: str) -> int | None:
    for rank, (_, prefixes) in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return rank
    return None


def layer_rank(name: str) -> int:
    return next(i for i, (n, _) in enumerate(LAYERS) if n == name)


def kind(module: str) -> str:
    if module == FACADE:
        return "facade"
    for plugin in ("ddibench.tasks", "ddibench.systems"):
        if module == plugin or module.startswith(plugin + "."):
            return plugin.split(".")[1]
    return "core" if module.startswith("ddibench.") else "external"


def plugin_package(module: str) -> str:
    """``ddibench.systems.cbr_ddi.prompts`` -> ``ddibench.systems.cbr_ddi``."""
    return ".".join(module.split(".")[:3])


def is_private(imp: Import) -> bool:
    parts = imp.target.split(".")[1:]
    return any(p.startswith("_") and not p.startswith("__") for p in parts) or bool(
        imp.name and imp.name.startswith("_")
    )


def violations(repo: Path) -> list[str]:
    modules = module_files(repo)
    problems = []
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for imp in imports(modules):
        where = f"{modules[imp.importer].relative_to(repo)}:{imp.line}"
        target_kind, importer_kind = kind(imp.target), kind(imp.importer)
        if imp.target in modules:
            graph[imp.importer].add(imp.target)
        if target_kind == "external" or imp.importer == imp.target:
            continue
        if importer_kind == "core":
            rank = layer_of(imp.importer)
            if rank is None:
                problems.append(
                    f"{where}: {imp.importer} belongs to no layer (add it to LAYERS in tests/test_layers.py)"
                )
                continue
            if target_kind in ("tasks", "systems"):
                if not imp.importer.startswith(PLUGIN_IMPORTERS):
                    problems.append(
                        f"{where}: the core module {imp.importer} imports the {target_kind[:-1]} package {imp.target}"
                    )
            elif target_kind == "facade":
                problems.append(
                    f"{where}: the core module {imp.importer} imports the root package (import the module that defines the name)"
                )
            else:
                target_rank = layer_of(imp.target)
                if target_rank is not None and target_rank > rank:
                    problems.append(
                        f"{where}: {imp.importer} ({LAYERS[rank][0]}) imports {imp.target} ({LAYERS[target_rank][0]}), a layer above it"
                    )
        elif importer_kind in ("tasks", "systems"):
            own = plugin_package(imp.importer)
            limit = layer_rank(TASK_LAYER if importer_kind == "tasks" else SYSTEM_LAYER)
            if target_kind == "core":
                target_rank = layer_of(imp.target)
                if target_rank is not None and target_rank > limit:
                    problems.append(
                        f"{where}: the {importer_kind[:-1]} {own} imports {imp.target} ({LAYERS[target_rank][0]} layer)"
                    )
                if is_private(imp):
                    problems.append(
                        f"{where}: {own} imports the private {imp.target}{'.' + imp.name if imp.name else ''}"
                    )
            elif target_kind == "systems" and importer_kind == "tasks":
                problems.append(f"{where}: the task family {own} imports the system {imp.target}")
            elif target_kind == "tasks" and importer_kind == "systems":
                problems.append(
                    f"{where}: the system {own} imports the task family {imp.target} (use the TrainingView and TaskData resources)"
                )
            elif (
                target_kind == importer_kind
                and plugin_package(imp.target) != own
                and imp.target != plugin_package(imp.target)
            ):
                problems.append(
                    f"{where}: {own} imports {imp.target}, an inner module of another {importer_kind[:-1]} package"
                )
    problems += [f"import cycle: {' -> '.join(cycle)}" for cycle in cycles(graph)]
    return problems


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(_cycle_in(sorted(component), graph))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _cycle_in(component: list[str], graph: dict[str, set[str]]) -> list[str]:
    members = set(component)
    path, seen = [component[0]], {component[0]}
    while True:
        nxt = sorted(w for w in graph[path[-1]] if w in members)
        back = [w for w in nxt if w == path[0]]
        if back and len(path) > 1:
            return [*path, path[0]]
        step = next((w for w in nxt if w not in seen), None)
        if step is None:
            return [*path, nxt[0] if nxt else path[0]]
        path.append(step)
        seen.add(step)


def test_the_repository_keeps_its_layers() -> None:
    problems = violations(REPO)
    assert not problems, "\n".join(problems)


def test_every_core_module_has_a_layer() -> None:
    unplaced = [m for m in module_files(REPO) if kind(m) == "core" and layer_of(m) is None]
    assert not unplaced


def test_the_public_api_names_only_public_modules() -> None:
    import ddibench

    for name, module in ddibench._EXPORTS.items():
        assert not any(p.startswith("_") for p in module.split(".")[1:]), (name, module)
        assert layer_of(module) is not None and layer_of(module) <= layer_rank(SYSTEM_LAYER), (name, module)


# -- the checker bites: a planted tree with one violation of each kind --------------------------


def _plant(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


CLEAN_TREE = {
    "ddibench/__init__.py": "",
    "ddibench/errors.py": "",
    "ddibench/schema.py": "from ddibench.errors import X\n",
    "ddibench/data/__init__.py": "from ddibench.schema import Sample\n",
    "ddibench/llm/__init__.py": "from ddibench.llm._client import LLMClient\n",
    "ddibench/llm/_client.py": "from ddibench.errors import X\n",
    "ddibench/task.py": "from ddibench.schema import Sample\n",
    "ddibench/system.py": "from ddibench.task import Task\n",
    "ddibench/runner/__init__.py": "",
    "ddibench/runner/run.py": "from ddibench.system import System\n",
    "tasks/__init__.py": "",
    "tasks/fam/__init__.py": "from ddibench.task import Task\n",
    "systems/__init__.py": "",
    "systems/other/__init__.py": "",
    "systems/mine/__init__.py": "from ddibench import BaseSystem\nfrom ddibench.llm import LLMClient\nfrom ddibench.systems.mine import prompts\nfrom ddibench.systems.other import Other\n",
    "systems/mine/prompts.py": "",
}


@pytest.mark.parametrize(
    "planted, expected",
    [
        ({"ddibench/schema.py": "from ddibench.tasks.fam import TASKS\n"}, "imports the task package"),
        ({"ddibench/schema.py": "def f():\n    from ddibench.systems.mine import X\n"}, "imports the system package"),
        ({"ddibench/data/__init__.py": "from ddibench.runner.run import execute\n"}, "a layer above it"),
        (
            {
                "ddibench/errors.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ddibench.data import S\n"
            },
            "a layer above it",
        ),
        (
            {
                "ddibench/llm/_client.py": "from ddibench.llm import spec\n",
                "ddibench/llm/spec.py": "def f():\n    from ddibench.llm import _client\n",
            },
            "import cycle",
        ),
        ({"systems/mine/prompts.py": "from ddibench.llm._client import LLMClient\n"}, "private"),
        ({"systems/mine/prompts.py": "from ddibench.llm import _secret\n"}, "private"),
        ({"systems/mine/prompts.py": "from ddibench.tasks.fam import TASKS\n"}, "imports the task family"),
        ({"systems/mine/prompts.py": "from ddibench.runner.run import execute\n"}, "runner layer"),
        (
            {"systems/mine/prompts.py": "from ddibench.systems.other.inner import X\n", "systems/other/inner.py": ""},
            "inner module of another",
        ),
        ({"tasks/fam/__init__.py": "from ddibench.systems.mine import X\n"}, "imports the system"),
        ({"tasks/fam/__init__.py": "from ddibench.system import BaseSystem\n"}, "systems layer"),
        ({"ddibench/schema.py": "import ddibench\n"}, "root package"),
        ({"ddibench/newthing.py": ""}, None),  # a module in no layer
    ],
)
def test_the_checker_finds_each_kind_of_violation(
    tmp_path: Path, planted: dict[str, str], expected: str | None
) -> None:
    _plant(tmp_path, CLEAN_TREE)
    assert violations(tmp_path) == []
    _plant(tmp_path, planted)
    modules = module_files(tmp_path)
    if expected is None:
        assert [m for m in modules if kind(m) == "core" and layer_of(m) is None] == ["ddibench.newthing"]
        return
    problems = violations(tmp_path)
    assert problems and any(expected in p for p in problems), problems


def test_the_code_type_checks() -> None:
    """mypy over the core, the task families, the reference systems and the board (configured in pyproject.toml),
    so a shape change that breaks a reader, or a system that reads a sample's input as the wrong kind, fails here."""
    import shutil
    import subprocess
    import sys

    if (
        shutil.which("mypy") is None
        and subprocess.run([sys.executable, "-m", "mypy", "--version"], capture_output=True).returncode
    ):
        pytest.skip("mypy is not installed (pip install -e '.[dev]')")
    proc = subprocess.run([sys.executable, "-m", "mypy"], cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:]


# a function reads at once up to about 60 lines (as the formatter lays it out); a longer one says why in a comment
# above its first statement, e.g. "# over 60 lines: one vectorised kernel ...", or it is split
LONG_FUNCTION = 65
REASON = "# over 60 lines:"


def long_functions(root: Path) -> list[str]:
    """Functions of the core, the task families, the systems and the board over :data:`LONG_FUNCTION` lines
    that give no reason above their first statement."""
    found = []
    for folder in ROOTS:
        for path in sorted((root / folder).rglob("*.py")):
            source = path.read_text(encoding="utf-8")
            lines = source.splitlines()
            for node in ast.walk(ast.parse(source)):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    length = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                    docstring = isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)
                    first = node.body[1] if docstring and len(node.body) > 1 else node.body[0]
                    head = lines[node.lineno - 1 : first.lineno]  # the signature, docstring and comments above the code
                    if length > LONG_FUNCTION and not any(REASON in line for line in head):
                        found.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({length} lines)")
    return found


def test_long_functions_say_why(tmp_path: Path) -> None:
    assert long_functions(REPO) == []
    body = "".join(f"    x{i} = {i}\n" for i in range(LONG_FUNCTION))
    _plant(tmp_path, {"ddibench/long.py": f"def f() -> None:\n{body}"})  # the check bites on a planted one
    assert long_functions(tmp_path) == [f"ddibench/long.py:1 f ({LONG_FUNCTION + 1} lines)"]
    _plant(tmp_path, {"ddibench/long.py": f"def f() -> None:\n    {REASON} one table\n{body}"})
    assert long_functions(tmp_path) == []
