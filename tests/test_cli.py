"""The command line: fast start-up, lazy imports, data commands, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("torch", "rdkit", "openai", "llama_cpp", "numpy", "rich", "pydantic")


def _modules_after(args: list[str]) -> set[str]:
    code = (
        "import sys\nfrom ddibench.cli import main\n"
        "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
        "import json; print(json.dumps(sorted(m.split('.')[0] for m in sys.modules)), file=sys.stderr)"
    )
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)
    return set(json.loads(proc.stderr.strip().splitlines()[-1]))


def test_help_imports_nothing_heavy() -> None:
    loaded = _modules_after(["--help"])
    assert not loaded & set(HEAVY), loaded & set(HEAVY)


def test_listing_imports_no_model_or_ml_library() -> None:
    loaded = _modules_after(["list", "tasks"])
    assert not loaded & {"torch", "rdkit", "openai", "llama_cpp"}


def test_list_commands(cli) -> None:
    code, out, _ = cli("list", "tasks")
    assert code == 0 and "drugbank_s1_emergnn" in out and "S2" in out
    code, out, _ = cli("list", "profiles")
    assert code == 0 and "h200-141g" in out and "this machine:" in out
    code, _, err = cli("list", "sytems")
    assert code == 2 and "did you mean 'systems'" in err


def test_list_systems_verbose_needs_no_data_and_shows_the_values_each_option_takes(tmp_path: Path) -> None:
    """With no mirror, an empty cache and downloads sent to a closed port, 'list systems -v' lists every system and
    its options with the values each takes, read from the systems' declared configs; it downloads nothing."""
    import os

    from ddibench.registry import system_names

    env = {k: v for k, v in os.environ.items() if not k.startswith("DDIBENCH_")}
    cache = tmp_path / "cache"
    env.update(
        DDIBENCH_CACHE=str(cache),
        DDIBENCH_DOWNLOAD_BASE="http://127.0.0.1:9",
        XDG_CACHE_HOME=str(tmp_path / "xdg"),
        COLUMNS="200",
    )
    proc = subprocess.run(
        [sys.executable, "-m", "ddibench", "list", "systems", "-v"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    assert all(name in out for name in system_names())
    for line in (
        "answer_mode = 'generate'  (generate, likelihood or likelihood-text)",  # a Literal's choices
        "use_cases = True  (true or false)",  # a bool
        "max_hops = 3  (integer from 1 to 10)",  # declared bounds
        "sampling_ratio = 0.05  (number in (0, 1])",
        "repository_per_type = None  (integer > 0, share or null)",  # a union with None
    ):
        assert line in out, line
    assert "majority: no options" in out
    assert not cache.exists() or not any(cache.rglob("*.*")), sorted(cache.rglob("*"))  # nothing downloaded


def test_allowed_values_are_read_from_the_declared_type() -> None:
    from typing import Annotated, Literal

    from pydantic import BaseModel, Field

    from ddibench.commands.listing import allowed_values

    class Config(BaseModel):
        mode: Literal["a", "b"] = "a"
        flag: bool = False
        k: int = Field(default=1, ge=1)
        share: float = Field(default=0.5, gt=0, lt=1)
        per_type: Annotated[int, Field(gt=0)] | Literal["share"] | None = None
        grid: tuple[float, ...] = ()
        extra: dict[str, int] = {}
        name: str | None = None

    shown = {key: allowed_values(field) for key, field in Config.model_fields.items()}
    assert shown == {
        "mode": "a or b",
        "flag": "true or false",
        "k": "integer ≥ 1",
        "share": "number in (0, 1)",
        "per_type": "integer > 0, share or null",
        "grid": "a list of numbers",
        "extra": "a JSON object",
        "name": "text or null",
    }


def test_list_profiles_shows_the_task_budgets_on_their_system_line(cli) -> None:
    """A per-task budget (EmerGNN's 100 epochs on drugbank_s2) is shown beside the profile's budget it overrides."""
    from ddibench.profiles import get_profile

    code, out, _ = cli("list", "profiles")
    line = next(x for x in out.splitlines() if x.strip().startswith("cpu emergnn:"))
    assert f"max_epochs={get_profile('cpu').budgets['emergnn']['max_epochs']}" in line
    assert "; drugbank_s2: max_epochs=100, epoch_per_test=5" in line and "; twosides_s1: " in line


def test_gpu_profiles_give_the_papers_scale_and_every_budget_figure_names_its_source() -> None:
    """CBR-DDI's whole training split as its repository pool, full refinement and lambda chosen on every validation
    pair; the retrieval systems' whole corpora; and a source for each figure of every profile."""
    from ddibench.profiles import PROFILES

    gpu = [p for p in PROFILES.values() if p.accelerator_count]
    assert gpu
    for profile in gpu:
        cbr = profile.budget_for("cbr-ddi", "drugbank_s2")
        assert cbr["repository_size"] is None and cbr["refine_cases"] is None and cbr["lambda_valid_pairs"] is None
        assert cbr["lam"] is None and "sampling" not in cbr  # the paper's representative sampling: its default, on
        assert cbr["encoder_device"] == "cuda" and "accelerator" in (
            profile.source_of("cbr-ddi", "encoder_device") or ""
        )
        assert "2505.23034" in (profile.source_of("cbr-ddi", "repository_size") or "")
        for rag in ("text-rag", "agentic-rag"):
            budget = profile.budget_for(rag)
            assert budget == {
                "interaction_chunks": None,
                "monograph_chunks": None,
                "medquad_chunks": None,
                "encoder_device": "cuda",  # the whole corpus embedded on the accelerator, not the host's cores
            }
            assert "DrugRAG" in (profile.source_of(rag, "interaction_chunks") or "")
        assert profile.budget_for("emergnn")["max_epochs"] == 100 and profile.budget_for("gin")["max_epochs"] == 300
    for profile in PROFILES.values():
        for system, budget in profile.budgets.items():
            for key in budget:
                assert profile.source_of(system, key), (profile.name, system, key)
        for system, tasks in profile.task_budgets.items():
            for task in tasks:
                assert profile.source_of(system, task), (profile.name, system, task)


def test_list_profiles_prints_the_source_of_each_budget_figure(cli) -> None:
    from ddibench.profiles import get_profile

    code, out, _ = cli("list", "profiles")
    assert code == 0
    lines = out.splitlines()
    at = next(i for i, x in enumerate(lines) if x.strip().startswith("h100-80g cbr-ddi:"))
    assert "repository_size=None" in lines[at] and "lambda_valid_pairs=None" in lines[at]
    sources = []
    for line in lines[at + 1 :]:
        if not line.startswith("    "):
            break
        sources.append(line.strip())
    h100 = get_profile("h100-80g")
    assert f"repository_size: {h100.source_of('cbr-ddi', 'repository_size')}" in sources
    cpu = next(x for x in lines if x.strip().startswith("max_epochs, epoch_per_test, valid_pairs: measured:"))
    assert "15 minutes" in cpu


def test_data_commands(cli) -> None:
    code, out, _ = cli("data", "list")
    assert code == 0 and "emergnn-drugbank" in out and "CC-BY-NC-4.0" in out and "github.com/yzhangee/EmerGNN" in out
    code, out, _ = cli("data", "verify")
    assert code == 0 and "0 missing, 0 bad" in out
    code, out, _ = cli("data", "fetch", "--task", "drugbank_s2")
    assert code == 0 and "files verified" in out
    code, out, _ = cli("data", "stats", "drugbank_s1", "drugbank_s2")
    assert code == 0
    assert "99,283" in out and "28,823" in out and "31,984" in out and "1,606" in out and "1,992" in out
    assert "FAILED" not in out
    code, _, err = cli("data", "stats", "drugbank_s9")
    assert code == 2 and "unknown task" in err


def test_unknown_command_suggests(cli) -> None:
    code, _, err = cli("rnu")
    assert code == 2 and "Did you mean 'run'" in err


def test_every_command_the_code_names_exists() -> None:
    """Every 'ddibench ...' a message, hint or docstring in the code names is a real command, with real options,
    and every kind of unknown name points to a listing that exists (or lists the names itself)."""
    import re

    from conftest import command_problem

    from ddibench.commands.listing import KINDS
    from ddibench.errors import LISTED_KINDS, UnknownNameError

    root = Path(__file__).resolve().parent.parent
    named: dict[str, str] = {}
    for folder in ("ddibench", "systems", "tasks", "leaderboard", "scripts"):
        for path in (root / folder).rglob("*.py"):
            for found in re.findall(r"'ddibench ([a-z][a-z0-9 _=-]*[a-z0-9])'", path.read_text(encoding="utf-8")):
                named.setdefault(found, str(path.relative_to(root)))
    assert len(named) > 15, named
    wrong = []
    for text, where in sorted(named.items()):
        problem = command_problem(text)
        if problem:
            wrong.append(f"{where}: 'ddibench {text}' ({problem})")
    assert not wrong, wrong
    assert {f"{k}s" for k in LISTED_KINDS} <= set(KINDS)
    assert "list providers" not in str(UnknownNameError("provider", "xyz", ["openai", "vllm"]))
    assert "openai, vllm" in str(UnknownNameError("provider", "xyz", ["openai", "vllm"]))


def test_a_family_or_a_group_of_families_stands_for_its_tasks() -> None:
    """-t takes task names, family names (toxicity) and the registered groups the docs name (molecular)."""
    from ddibench.commands.run import expand_tasks
    from ddibench.errors import UnknownNameError
    from ddibench.registry import get_task

    molecular = expand_tasks("molecular")
    assert {get_task(t).family for t in molecular} == {"toxicity", "drug_targets", "captioning"} and len(
        molecular
    ) == 12
    assert expand_tasks("toxicity") == [t for t in molecular if get_task(t).family == "toxicity"]
    assert (
        expand_tasks("drugbank_s2,toxicity,tox_herg")[0] == "drugbank_s2"
        and expand_tasks("tox_herg,toxicity").count("tox_herg") == 1
    )
    with pytest.raises(UnknownNameError, match="did you mean 'molecular'"):
        expand_tasks("moleculer")


def test_board_commands_read_the_store_and_results_options_from_one_place() -> None:
    """Every board command that takes --store or --results takes it from store_options: the same parameter, type
    and help for the same use, so the commands that show a board, write a store or write the shipped results
    describe their defaults alike."""
    import click

    from ddibench.commands import board

    seen = {"--store": set(), "--results": set()}
    for name, command in board.board.commands.items():
        for param in command.params:
            flag = next((f for f in param.opts if f in seen), None)
            if flag is None:
                continue
            assert isinstance(param, click.Option) and param.default is None, name
            assert param.name == {"--store": "store", "--results": "root"}[flag], name
            assert param.help in {"--store": board._STORE_HELP, "--results": board._RESULTS_HELP}[flag].values(), name
            seen[flag].add(name)
    assert seen == {
        "--store": {"add", "upgrade", "serve", "export"},
        "--results": {"publish", "check", "serve", "export"},
    }
