"""The baselines of the molecular families: which system serves which task, and real runs on the
smallest tasks (cpu profile, tiny budgets where training is involved) through run, submit, verify and
the board; the zero-shot LLM system against the local stub server."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import f1_score, roc_auc_score

from ddibench.registry import get_system_class, get_task

SERVES = {
    "majority": {"tox_carcinogens", "drugbank_s2"},
    "popularity": {"targets_activate"},
    "only-smiles": {"caption_bace"},
    "morgan-sklearn": {"tox_carcinogens", "targets_activate"},
    "gin": {"tox_carcinogens", "targets_activate"},
    "zero-shot": {"tox_carcinogens", "targets_activate", "caption_bace", "drugbank_s2"},
}


def journal(run_dir: Path) -> dict[str, dict]:
    return {
        (p := json.loads(line)["prediction"])["sample_id"]: p
        for line in (run_dir / "journal.jsonl").read_text().splitlines()
        if line.strip()
    }


def submit_verify_add(cli, run_dir: Path, tmp_path: Path, previews: bool = False) -> str:
    bundle = tmp_path / f"{run_dir.name}.tar.gz"
    assert cli("submit", str(run_dir), "--out", str(bundle))[0] == 0
    code, out, err = cli("verify", str(bundle))
    assert ("recomputed" in out) if not previews else ("preview" in out or "--limit" in out), out + err
    code, out, err = cli(
        "board", "add", "--store", str(tmp_path / "board.duckdb"), *(["--previews"] if previews else []), str(bundle)
    )
    assert code == 0, out + err
    return out


def test_which_baseline_serves_which_task() -> None:
    tasks = ["tox_carcinogens", "targets_activate", "caption_bace", "drugbank_s2"]
    for name, served in SERVES.items():
        system = get_system_class(name)()
        assert {t for t in tasks if system.supports(get_task(t))} == served, name


def test_morgan_sklearn_on_toxicity_scores_equal_sklearn_and_reach_the_board(cli, tmp_path: Path) -> None:
    run_dir = tmp_path / "rf"
    code, out, err = cli(
        "run", "-s", "morgan-sklearn", "-t", "tox_carcinogens", "--run-dir", str(run_dir), "--config", "n_estimators=50"
    )
    assert code == 0, out + err
    results = json.loads((run_dir / "results.json").read_text())
    preds = journal(run_dir)
    test = get_task("tox_carcinogens").load().splits["test"]
    assert set(preds) == {s.id for s in test}
    gold = [s.target for s in test]
    metrics = results["evaluation"]["metrics"]
    assert metrics["macro_f1"]["value"] == pytest.approx(
        f1_score(gold, [preds[s.id]["label"] for s in test], average="macro"), abs=1e-12
    )
    assert metrics["auroc"]["value"] == pytest.approx(
        roc_auc_score(gold, [preds[s.id]["scores"]["1"] for s in test]), abs=1e-12
    )
    assert results["system_info"]["estimator"] == "rf"
    submit_verify_add(cli, run_dir, tmp_path)
    # a second run fits nothing: the model is a cached artifact
    again = tmp_path / "rf-again"
    assert (
        cli(
            "run",
            "-s",
            "morgan-sklearn",
            "-t",
            "tox_carcinogens",
            "--run-dir",
            str(again),
            "--config",
            "n_estimators=50",
        )[0]
        == 0
    )
    assert json.loads((again / "results.json").read_text())["system_info"]["loaded_from_cache"] is True


def test_gin_and_popularity_on_drug_targets(cli, tmp_path: Path) -> None:
    task = get_task("targets_activate")
    test = task.load().splits["test"]
    for system, options in (("popularity", []), ("gin", ["--config", "max_epochs=2"])):
        run_dir = tmp_path / system
        code, out, err = cli("run", "-s", system, "-t", "targets_activate", "--run-dir", str(run_dir), *options)
        assert code == 0, out + err
        preds = journal(run_dir)
        metrics = json.loads((run_dir / "results.json").read_text())["evaluation"]["metrics"]
        no_overlap = [s for s in test if s.meta["kg"] == "no-overlap"]
        direct = [len(set(preds[s.id]["ranked"][:5]) & set(s.label_ids)) / 5 for s in no_overlap]
        assert metrics["precision@5_no_overlap"]["value"] == pytest.approx(np.mean(direct), abs=1e-12)
        submit_verify_add(cli, run_dir, tmp_path)


def test_gin_on_toxicity_gives_scores(cli, tmp_path: Path) -> None:
    run_dir = tmp_path / "gin"
    code, out, err = cli(
        "run", "-s", "gin", "-t", "tox_carcinogens", "--run-dir", str(run_dir), "--config", "max_epochs=2"
    )
    assert code == 0, out + err
    results = json.loads((run_dir / "results.json").read_text())
    assert "auroc" in results["evaluation"]["metrics"]
    assert results["system_info"]["epochs_run"] == 2 and results["system_info"]["graphs_unreadable"] == []


def test_only_smiles_preview_predicts_every_split_and_verifies_on_the_same_molecules(cli, tmp_path: Path) -> None:
    from ddibench.runner.execute import training_view
    from ddibench.runner.plan import RunRequest, plan_run

    run_dir = tmp_path / "only-smiles"
    code, out, err = cli("run", "-s", "only-smiles", "-t", "caption_bace", "--limit", "60", "--run-dir", str(run_dir))
    assert code == 0, out + err
    preds = journal(run_dir)
    data = get_task("caption_bace").load()
    splits = {s.id: s.meta["split"] for v in data.splits.values() for s in v}
    assert sorted(splits[sid] for sid in preds).count("train") == 48 and len(preds) == 60
    results = json.loads((run_dir / "results.json").read_text())
    assert results["evaluation"]["n"] == 6 and results["manifest"]["scoring"]["scorers"]["probe"]["probe"] == "linear"
    out = submit_verify_add(cli, run_dir, tmp_path, previews=True)
    # systems never see a captioning label, not even in the training view
    plan = plan_run(RunRequest(task="caption_bace", system="only-smiles", limit=60))
    view = training_view(plan)
    assert view.train and all(s.target is None for s in (*view.train, *view.valid))


def test_zero_shot_on_the_three_families_with_the_stub(cli, stub, tmp_path: Path) -> None:
    model = f"vllm:stub-model@{stub.base_url}"
    for task, limit in (("tox_carcinogens", "6"), ("targets_activate", "6"), ("caption_bace", "6")):
        run_dir = tmp_path / task
        code, out, err = cli(
            "run", "-s", "zero-shot", "-t", task, "--limit", limit, "-m", model, "--run-dir", str(run_dir), "--no-cache"
        )
        assert code == 0, out + err
        preds = journal(run_dir)
        assert len(preds) == 6 and all(p["valid"] for p in preds.values()), preds
        request = stub.requests[-1]
        fmt = request.get("response_format") or {}
        schema = fmt.get("schema") or (fmt.get("json_schema") or {}).get("schema")
        if task == "tox_carcinogens":
            assert all(p["label"] in (0, 1) for p in preds.values())
            assert schema["properties"]["answer"]["enum"] == ["yes", "no"]
        elif task == "targets_activate":
            symbols = {lb.name for lb in get_task(task).label_space}
            assert set(schema["properties"]["targets"]["items"]["enum"]) == symbols
            assert all(1 <= len(p["ranked"]) <= 5 for p in preds.values())
        else:
            assert schema is None and all(p["text"] for p in preds.values())
            assert (
                "blood-brain" not in request["messages"][-1]["content"]
                and "BACE-1" in request["messages"][-1]["content"]
            )


def test_molecular_answers_are_parsed_strictly() -> None:
    from ddibench.schema import Label, LabelSpace
    from ddibench.toolkit.molecule_answers import parse_targets, parse_yes_no

    labels = LabelSpace(tuple(Label(i, s, s) for i, s in enumerate(["EGFR", "KIT", "ABL1", "MET"])))
    assert parse_targets('{"targets": ["egfr", "EGFR-2", "KIT", "KIT"]}', labels) == ([0, 1], ["EGFR-2"], "json")
    assert parse_targets("It may inhibit EGFR and the kit of several proteins", labels) == (
        [0],
        [],
        "text",
    )  # "kit" is a word, not KIT
    assert parse_targets("no symbol here", labels)[0] == []
    assert parse_yes_no('{"answer": "no"}') == (0, "json")
    assert parse_yes_no("Yes, it blocks the channel.") == (1, "text")
    assert parse_yes_no("yes or no, hard to say")[0] is None


def test_the_declared_answers_ask_what_the_shipped_runs_asked() -> None:
    """A task's declared answer (``task.answer``) is what zero-shot and CLADD's predictor ask with: rebuilt from it,
    the system prompt, the question and the budget of every shipped molecular run's recorded calls are the same, byte
    for byte, so their cached answers still serve and their bundles still reproduce."""
    import tarfile

    from ddibench.hashing import sha256_text
    from ddibench.systems.cladd.prompts import PREDICTOR_PREFIX
    from ddibench.toolkit.molecule_answers import instruction_of, question

    root = Path(__file__).resolve().parent.parent / "results"
    checked: dict[str, int] = {}
    for bundle in sorted([*root.glob("*/zero-shot/*.tar.gz"), *root.glob("*/cladd/*.tar.gz")]):
        task = get_task(bundle.parent.parent.name)
        if task.input_kind != "molecule":
            continue
        answer, system = task.answer, bundle.parent.name
        role, prefix = ("predictor", PREDICTOR_PREFIX) if system == "cladd" else ("generator", "")
        data = task.load()
        samples = {s.id: s for split in data.splits.values() for s in split}
        instruction = instruction_of(data.resources, task.name)
        with tarfile.open(bundle) as tar:
            member = tar.extractfile("predictions.jsonl")
            assert member is not None
            lines = member.read().decode().splitlines()
        for line in lines:
            pred = json.loads(line)
            calls = [c for c in pred["trace"].get("llm", []) if c.get("role") == role and "messages" in c]
            for call in calls:
                sent_system, sent_user = call["messages"][0], call["messages"][-1]["content"]
                asked = question(answer, samples[pred["sample_id"]].molecule, instruction)
                assert sent_system["sha256"] == sha256_text(prefix + answer.system_prompt), bundle
                assert sent_user == asked if system == "zero-shot" else sent_user.endswith("\n\n" + asked), bundle
                assert pred["trace"]["max_tokens"] == answer.max_tokens, bundle
                checked[task.family] = checked.get(task.family, 0) + 1
    assert set(checked) == {"toxicity", "drug_targets"} and min(checked.values()) >= 10, checked
