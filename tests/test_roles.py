"""Model roles named by ``-m ROLE=SPEC``: a role that neither the system nor its scorers use (a typo) is
refused at once, in one line that names the roles and the closest one, before any model starts and
before anything is written. Before this check a misspelt role was dropped and the real role ran on
the default model (the embedded one, or the bare ``-m SPEC``), and the run finished with exit 0."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ddibench.errors import ConfigError
from ddibench.llm import parse_model_options

SECONDS = 20  # planning only: python, the registry and the task's declarations; a model start or a run takes far longer


@pytest.fixture(scope="module")
def stub() -> Iterator:
    """A model server that answers everything: were a misspelt role dropped, the run would go through on it."""
    from ddibench.llm.stub import StubConfig, running_stub

    reply = '{"decision": "no", "reason": "none", "answer": "no"}'
    with running_stub(StubConfig(reply=reply)) as server:
        yield server


CASES = [
    # (system, task, config, the misspelt role, the role it suggests)
    ("zero-shot", "drugbank_s2", [], "generatr", "generator"),
    ("cladd", "tox_carcinogens", [], "predicter", "predictor"),
    ("cladd", "tox_carcinogens", ["-C", "use_kg_team=false"], "biorl", "biorel"),  # a role the ablation leaves unused
    ("cbr-ddi", "drugbank_s2", [], "describr", "describer"),
    ("sql-agent", "ddi_qa_s0", [], "query_writr", "query_writer"),
    ("text-rag", "medquad", [], "jduge", "judge"),  # a scorer's role: the judge of the text answers
]


@pytest.mark.parametrize(("system", "task", "config", "typo", "meant"), CASES, ids=[f"{c[0]}-{c[3]}" for c in CASES])
def test_a_misspelt_role_is_refused_before_anything_starts(
    stub, tmp_path: Path, system: str, task: str, config: list[str], typo: str, meant: str
) -> None:
    model = f"vllm:stub-model@{stub.base_url}"
    run_dir = tmp_path / "run"
    args = [
        "run",
        "-s",
        system,
        "-t",
        task,
        "--limit",
        "2",
        "-m",
        model,
        "-m",
        f"{typo}={model}",
        *config,
        "--run-dir",
        str(run_dir),
        "--runs-dir",
        str(tmp_path / "runs"),
        "--no-cache",
    ]
    before = len(stub.requests)
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "ddibench", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
        timeout=300,
    )
    took = time.monotonic() - started
    err = proc.stderr.strip()
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], err[-2000:])
    assert "Traceback" not in proc.stdout + proc.stderr
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, err
    line = errors[0]
    assert (
        f"unknown model role '{typo}'" in line
        and f"system '{system}' uses " in line
        and f"did you mean '{meant}'?" in line
    ), line
    from ddibench.registry import get_system_class

    assert all(role in line for role in get_system_class(system).llm_roles), line  # the line names the system's roles
    assert took < SECONDS, f"{took:.1f} s: something started before the role was checked"
    assert len(stub.requests) == before  # no model was asked anything
    assert not run_dir.exists() and not (tmp_path / "runs").exists()  # nothing written


def test_every_role_of_every_system_is_accepted_and_each_near_miss_is_named() -> None:
    """For each registered system with LLM roles: its own roles, the scorers' roles and 'generator' (the
    default of every role) pass; each role with its last letter dropped is refused with that role suggested."""
    from ddibench.registry import get_system_class, system_names

    with_roles = [(name, tuple(get_system_class(name).llm_roles)) for name in system_names()]
    with_roles = [(name, roles) for name, roles in with_roles if roles]
    assert {"zero-shot", "cbr-ddi", "cladd", "drugrag", "sql-agent"} <= {name for name, _ in with_roles}
    for name, roles in with_roles:
        scoring = ("judge", "generator")
        given = parse_model_options([*(f"{r}=openai:m" for r in roles), "judge=openai:j", "generator=openai:g"])
        given.check_roles(f"system '{name}'", roles, scoring)
        for role in roles:
            with pytest.raises(ConfigError) as caught:
                parse_model_options([f"{role[:-1]}=openai:m"]).check_roles(f"system '{name}'", roles, ())
            text = str(caught.value)
            assert (
                "\n" not in text and f"unknown model role '{role[:-1]}'" in text and f"did you mean '{role}'?" in text
            ), text
            assert ", ".join(roles) in text


def test_generator_sets_every_role_and_a_system_without_roles_names_none() -> None:
    from ddibench.llm import ModelSpec

    cladd = ("annotation_planner", "kg_planner", "drugrel", "biorel", "molecule_understanding", "predictor")
    models = parse_model_options(["generator=openai:gpt-4o-mini"])
    models.check_roles("system 'cladd'", cladd)  # the generator's model is every unset role's
    assert models.for_roles(cladd) == dict.fromkeys(cladd, ModelSpec.parse("openai:gpt-4o-mini"))
    with pytest.raises(
        ConfigError, match=r"system 'mlp' uses no model roles; name one of those roles, or give -m SPEC alone"
    ):
        parse_model_options(["judge=openai:gpt-4o"]).check_roles("system 'mlp'", ())
