"""The README's set-up commands and CI stay in step; packaging covers every package directory."""

from __future__ import annotations

import re
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parent.parent


def _readme_commands() -> list[str]:
    block = re.search(r"## Set up.*?```bash\n(.*?)```", (REPO / "README.md").read_text(), re.DOTALL)
    assert block, "README.md needs a 'Set up' section with a bash block"
    return [line for line in block.group(1).splitlines() if line and not line.startswith("#")]


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    install_and_run, test = _readme_commands()
    assert "ddibench run" in install_and_run
    assert "pytest" in test
    ci_lines = (REPO / ".ci" / "run").read_text().splitlines()
    assert test in ci_lines


def test_every_package_directory_is_packaged() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapping = config["package-dir"]
    packaged = set(config["packages"])
    found = set()
    for name, root in mapping.items():
        for init in (REPO / root).rglob("__init__.py"):
            rel = init.parent.relative_to(REPO / root)
            found.add(".".join([name, *rel.parts]) if rel.parts else name)
    assert found == packaged, found ^ packaged


def test_public_api_names_resolve() -> None:
    import ddibench

    assert set(ddibench.__all__) - {"__version__"} == set(ddibench._EXPORTS)
    for name in ddibench._EXPORTS:
        assert getattr(ddibench, name) is not None


def test_the_fresh_clone_check_runs_the_readme_commands() -> None:
    """scripts/fresh_clone_check.sh takes the line after '# 1. ' and '# 2. ' of the set-up block: the same two commands."""
    lines = (REPO / "README.md").read_text().splitlines()
    after = [lines[i + 1] for i, line in enumerate(lines) if line.startswith(("# 1. ", "# 2. "))]
    assert after == _readme_commands()
    script = (REPO / "scripts" / "fresh_clone_check.sh").read_text()
    for name in ("CMAKE_ARGS", "DDIBENCH_CACHE", "DDIBENCH_MODELS", "PIP_NO_CACHE_DIR=1", "cache_hits"):
        assert name in script


def test_getting_started_gives_the_readme_commands_word_for_word() -> None:
    """docs/getting-started.md repeats the two set-up commands: the same lines as the README's, never an older pair."""
    page = (REPO / "docs" / "getting-started.md").read_text()
    block = re.search(r"## Install and run.*?```bash\n(.*?)```", page, re.DOTALL)
    assert block, "docs/getting-started.md needs an 'Install and run' section with a bash block"
    assert [line for line in block.group(1).splitlines() if line and not line.startswith("#")] == _readme_commands()


def test_command_1_runs_an_llm_system_and_the_readme_says_what_it_printed() -> None:
    """Command 1 shows an LLM system at work (not a floor), and the paragraph right after the set-up block reports
    that run: it names command 1's system and task and the floors beside its number, so a changed command 1 cannot
    keep an old result."""
    from ddibench.registry import get_system_class, get_task

    install_and_run, _ = _readme_commands()
    system = re.search(r"--system (\S+)", install_and_run)
    task = re.search(r"--task (\S+)", install_and_run)
    assert system and task, f"command 1 must name --system and --task: {install_and_run}"
    assert get_system_class(system.group(1)).llm_roles, f"command 1 runs {system.group(1)}, which calls no model"
    get_task(task.group(1))
    after = re.search(r"## Set up.*?```bash\n.*?```\n\n(.*?)\n\n", (REPO / "README.md").read_text(), re.DOTALL)
    assert after, "README.md needs a paragraph after the set-up block saying what command 1 printed"
    for needed in (f"`{system.group(1)}`", f"`{task.group(1)}`", "floor"):
        assert needed in after.group(1), f"the paragraph after the set-up commands does not mention {needed}"


def test_the_tree_is_lint_and_format_clean() -> None:
    """ruff check and ruff format --check over the repository (line length 120, pinned ruff): dense lines and
    unformatted files fail here instead of accumulating."""
    import subprocess
    import sys

    for args in (["check", "."], ["format", "--check", "."]):
        done = subprocess.run(
            [sys.executable, "-m", "ruff", *args], cwd=REPO, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, f"ruff {' '.join(args)}:\n{done.stdout[-3000:]}{done.stderr[-1000:]}"
