"""The contributing guide (docs/contributing.md) names only things that exist: every repository path, pytest
node, ``ddibench`` command and dotted Python name it puts in backticks resolves, so the guide fails here
the day a file it tells a contributor to copy is moved or renamed."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

from conftest import command_problem

REPO = Path(__file__).resolve().parent.parent
GUIDE = REPO / "docs" / "contributing.md"
SKIP = {".git", ".venv", "site", "runs", "__pycache__", "ddibench.egg-info"}  # not the repository's own files

PATH_LIKE = re.compile(
    r"[\w.*-]+(?:/[\w.*-]*)+|[\w.-]+\.(?:py|toml|md)"
)  # tasks/drugbank/, ddibench/task.py, tasks.toml
DOTTED = re.compile(r"ddibench(?:\.\w+)+(?::\w+)?")  # ddibench.task.RESOURCES, ddibench.systems.mlp:MLPSystem


def code_spans(markdown: str) -> list[str]:
    """The inline code spans of a page, fenced blocks left out (they hold examples, not names)."""
    text = re.sub(r"^```.*?^```", "", markdown, flags=re.DOTALL | re.MULTILINE)
    return [span.strip() for span in re.findall(r"(?<!`)`([^`\n]+)`(?!`)", text)]


def _repository_files(name: str) -> bool:
    for top in REPO.iterdir():
        if top.name in SKIP or top.name.startswith("."):
            continue
        if top.name == name or (top.is_dir() and any(p for p in top.rglob(name) if not SKIP & set(p.parts))):
            return True
    return False


def path_problem(token: str) -> str | None:
    """Why a path-like token names nothing in the repository: ``a/b.py`` and ``a/b/`` from the root (globs
    allowed), ``a/b.py::test_x`` a test function in that file, a bare ``tasks.toml`` any file of that name."""
    path, _, node = token.partition("::")
    if "/" not in path:
        return None if _repository_files(path) else f"no file named {path} in the repository"
    matches = list(REPO.glob(path.rstrip("/"))) if "*" in path else [REPO / path.rstrip("/")]
    if not matches or not all(m.exists() for m in matches):
        return f"{path} does not exist"
    if node and not re.search(
        rf"^(?:async )?def {re.escape(node)}\(", matches[0].read_text(encoding="utf-8"), re.MULTILINE
    ):
        return f"{path} has no test {node}"
    return None


def dotted_problem(name: str) -> str | None:
    """Why ``ddibench.x.y`` (or an entry point's ``ddibench.x:Y``) does not resolve: the longest importable
    module prefix, then attributes."""
    parts = name.replace(":", ".").split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return f"{'.'.join(parts[:cut])} has no {'.'.join(parts[cut:])}"
            obj = getattr(obj, attr)
        return None
    return "no module of it imports"


def names_in(spans: list[str]) -> tuple[set[str], set[str], set[str]]:
    """Commands (``ddibench ...`` spans), dotted names and path-like tokens of the spans."""
    commands = {span.removeprefix("ddibench ") for span in spans if span.startswith("ddibench ")}
    dotted = {m.group(0) for span in spans for m in DOTTED.finditer(span)}
    paths = set()
    for span in spans:
        if span.startswith("ddibench ") or DOTTED.fullmatch(span) or "://" in span or "<" in span:
            continue
        for token in span.split():
            if token.startswith(("-", ".")) or "=" in token or "'" in token or '"' in token:
                continue
            if PATH_LIKE.fullmatch(token.split("::")[0]):
                paths.add(token)
    return commands, dotted, paths


def test_the_guide_names_only_paths_commands_and_names_that_exist() -> None:
    spans = code_spans(GUIDE.read_text(encoding="utf-8"))
    commands, dotted, paths = names_in(spans)
    assert len(commands) >= 5 and len(dotted) >= 15 and len(paths) >= 20, (
        commands,
        dotted,
        paths,
    )  # the guide still names them
    wrong = [f"`ddibench {c}`: {p}" for c in sorted(commands) if (p := command_problem(c))]
    wrong += [f"`{n}`: {p}" for n in sorted(dotted) if (p := dotted_problem(n))]
    wrong += [f"`{t}`: {p}" for t in sorted(paths) if (p := path_problem(t))]
    assert not wrong, "docs/contributing.md names what does not exist:\n" + "\n".join(wrong)


def test_the_checks_catch_what_is_wrong() -> None:
    """Each check bites on a planted mistake, so the guide's test cannot pass by checking nothing."""
    commands, dotted, paths = names_in(
        code_spans(
            "`ddibench lst tasks` `ddibench list metrics` `ddibench run --sytem x` `ddibench.task.RESOURCE` `ddibench.nothing.X` "
            "`tasks/drugbnk/tasks.toml` `tests/test_docs.py::test_missing` `tasks.tml.toml` `systems/naive_cbr/` "
            "`python -m pytest tests/test_layers.py` `-t FAMILY` `view.resources` `x = 'ddibench.systems.nothere:X'`\n```\n`systems/not_checked.py`\n```\n"
        )
    )
    assert {c for c in commands if command_problem(c)} == {"lst tasks", "list metrics", "run --sytem x"}
    assert {n for n in dotted if dotted_problem(n)} == {
        "ddibench.task.RESOURCE",
        "ddibench.nothing.X",
        "ddibench.systems.nothere:X",
    }
    assert {t for t in paths if path_problem(t)} == {
        "tasks/drugbnk/tasks.toml",
        "tests/test_docs.py::test_missing",
        "tasks.tml.toml",
    }
    assert {"systems/naive_cbr/", "tests/test_layers.py"} <= paths and not {p for p in paths if "not_checked" in p}
    assert (
        dotted_problem("ddibench.systems.naive_cbr:NaiveCBRSystem") is None and command_problem("list tasks -v") is None
    )
