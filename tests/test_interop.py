"""ddibench beside the tools its users run: Hugging Face datasets and lm-evaluation-harness.

* ``ddibench data export`` writes typed splits that ``datasets`` loads offline, byte-identical twice;
* ``ddibench export lm-eval`` writes task configs that lm-eval runs against a local OpenAI-compatible
  server, and ``ddibench import lm-eval`` turns its logged samples into a run whose recomputed metrics
  equal lm-eval's own and which verifies like any other run;
* neither export holds an absolute path: the folders can be moved, and relative paths in the DDIBENCH_*
  variables work from any directory (they are made absolute once, for every process a command starts).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ddibench.registry import get_task


def _digests(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _holding(root: Path, places: set[str]) -> list[str]:
    """The files under ``root`` that name any of ``places``."""
    return [
        str(p.relative_to(root))
        for p in sorted(root.rglob("*"))
        if p.is_file() and any(s.encode() in p.read_bytes() for s in places)
    ]


def test_paths_from_the_environment_are_made_absolute(cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ddibench.data.resolve import absolutize_env, cache_root, mirror_root

    monkeypatch.chdir(tmp_path)
    here = Path.cwd()
    monkeypatch.setenv("DDIBENCH_MIRROR", "mirror/github")
    monkeypatch.setenv("DDIBENCH_CACHE", "../cache")
    monkeypatch.setenv("DDIBENCH_BOARD", "~/board.duckdb")
    monkeypatch.setenv("DDIBENCH_PRICES", "/elsewhere/prices.json")
    monkeypatch.setenv("DDIBENCH_DOWNLOAD_BASE", "http://127.0.0.1:9")  # a URL, not a path
    assert mirror_root() == here / "mirror" / "github"
    assert cache_root() == here / ".." / "cache"  # absolute, not resolved: symlinks are kept
    monkeypatch.delenv("DDIBENCH_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", "xdg")
    assert cache_root() == here / "xdg" / "ddibench"

    monkeypatch.setenv("DDIBENCH_CACHE", "../cache")
    assert absolutize_env() == {
        "DDIBENCH_MIRROR": str(here / "mirror/github"),
        "DDIBENCH_CACHE": str(here / "../cache"),
        "DDIBENCH_BOARD": str(Path.home() / "board.duckdb"),
    }
    assert (
        os.environ["DDIBENCH_PRICES"] == "/elsewhere/prices.json"
        and os.environ["DDIBENCH_DOWNLOAD_BASE"] == "http://127.0.0.1:9"
    )
    monkeypatch.chdir(tmp_path.parent)
    assert (
        mirror_root() == here / "mirror" / "github" and absolutize_env() == {}
    )  # once absolute, the same from anywhere

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DDIBENCH_MIRROR", "mirror/github")
    code, _, err = cli("--version")  # every command rewrites them first, for the processes it starts
    assert code == 0, err
    assert os.environ["DDIBENCH_MIRROR"] == str(here / "mirror" / "github")


@pytest.mark.parametrize(("task_name", "fmt"), [("drugbank_s2", "parquet"), ("ddi_qa_s2", "hf")])
def test_data_export_loads_offline_and_is_reproducible(
    cli, tmp_path: Path, task_name: str, fmt: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    datasets = pytest.importorskip(
        "datasets", reason="the interop extra is not installed (pip install 'ddibench[interop]')"
    )
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # nothing read from or written to the user's cache
    first, second = tmp_path / "a", tmp_path / "b"
    code, out, err = cli("data", "export", task_name, str(first), "--format", fmt)
    assert code == 0, err
    assert task_name in out and "data sha256" in out
    code, _, err = cli("data", "export", task_name, str(second), "--format", fmt)
    assert code == 0, err
    assert _digests(first) == _digests(second)  # the same bytes, twice
    assert not _holding(first, {str(tmp_path), str(tmp_path.resolve())})  # nothing ties the copy to this place

    task = get_task(task_name)
    data = task.load()
    if fmt == "parquet":  # the folder as a Hub repository: the card's configs name the files of each split
        loaded = datasets.load_dataset(str(first), cache_dir=str(tmp_path / "c"))
    else:
        loaded = datasets.load_from_disk(str(first))
    assert sorted(loaded) == ["test", "train", "validation"] and len(loaded["validation"]) == len(data.split("valid"))
    test = loaded["test"]
    assert len(test) == len(data.split("test")) and test["id"] == [s.id for s in data.split("test")]
    label = test.features["label"]
    assert label.names[0] == task.label_space[0].name and label.num_classes == len(task.label_space)
    gold = [int(s.target) if isinstance(s.target, int) else s.target["label"] for s in data.split("test")]
    assert test["label"] == gold
    assert test["clusters"][0] == list(data.split("test")[0].clusters)
    card = (first / "README.md").read_text()
    assert task.data_sha256 in card and "Non-commercial terms apply" in card and "CC-BY-NC-4.0" in card

    code, _, err = cli("data", "export", task_name, str(first))
    assert code == 2 and "is not an empty directory" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("task_name", "limit", "json_mode"),
    [
        ("drugbank_s2", 12, "llamacpp"),
        ("ddi_qa_s2", 3, "none"),
        ("tox_herg", 10, "schema"),
        ("twosides_s2", 6, "schema"),
    ],
)
def test_lm_eval_runs_an_exported_task_and_its_samples_import_as_a_run(
    cli, stub, tmp_path: Path, task_name: str, limit: int, json_mode: str
) -> None:
    """Exported in one directory with relative DDIBENCH_* paths, moved, and run by lm-eval from a third."""
    pytest.importorskip("lm_eval", reason="the interop extra is not installed (pip install 'ddibench[interop]')")
    mirror = Path(os.environ["DDIBENCH_MIRROR"]).absolute()
    home, moved, elsewhere = tmp_path / "home", tmp_path / "moved", tmp_path / "elsewhere"
    for place in (home, moved, elsewhere):
        place.mkdir()

    def relative(cwd: Path) -> dict[str, str]:
        """The environment as a user writes it: the mirror and the cache given relative to ``cwd``."""
        return {
            **os.environ,
            "DDIBENCH_MIRROR": os.path.relpath(mirror, cwd),
            "DDIBENCH_CACHE": "cache",
            "COLUMNS": "200",
            "HF_DATASETS_OFFLINE": "1",
            "HF_HUB_OFFLINE": "1",
            "HF_HOME": str(tmp_path / "hf"),
        }

    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ddibench",
            "export",
            "lm-eval",
            "tasks",
            "-t",
            task_name,
            "--limit",
            str(limit),
            "--json-mode",
            json_mode,
        ],
        capture_output=True,
        text=True,
        env=relative(home),
        timeout=600,
        cwd=home,
    )
    assert proc.returncode == 0, proc.stderr
    assert f"ddibench_{task_name}" in proc.stdout and (home / "tasks" / "ddibench_utils.py").exists()
    tasks = moved / "lm_tasks"
    (home / "tasks").rename(tasks)  # the folder is moved (or shared) after the export
    assert not _holding(
        tasks,
        {str(tmp_path), str(tmp_path.resolve()), str(mirror), str(mirror.resolve()), os.path.relpath(mirror, home)},
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "lm_eval",
            "--include_path",
            "../moved/lm_tasks",
            "--tasks",
            f"ddibench_{task_name}",
            "--model",
            "local-chat-completions",
            "--model_args",
            f"base_url={stub.base_url}/chat/completions,model=stub-model,tokenized_requests=False",
            "--apply_chat_template",
            "--log_samples",
            "--output_path",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        env=relative(elsewhere),
        timeout=600,
        cwd=elsewhere,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    samples = next((tmp_path / "out").rglob(f"samples_ddibench_{task_name}_*.jsonl"))
    lm_results = json.loads(next((tmp_path / "out").rglob("results_*.json")).read_text())["results"][
        f"ddibench_{task_name}"
    ]
    assert len(stub.requests) == limit  # every document went through lm-eval to the server
    if json_mode != "none":  # the same constrained request ddibench would send
        assert all(
            r.get("response_format", {}).get("type") == ("json_object" if json_mode == "llamacpp" else "json_schema")
            for r in stub.requests
        )

    run_dir = tmp_path / "imported"
    code, out, err = cli("import", "lm-eval", str(samples), "--run-dir", str(run_dir))
    assert code == 0, err
    results = json.loads((run_dir / "results.json").read_text())
    for name, metric in results["evaluation"]["metrics"].items():
        assert metric["value"] == pytest.approx(lm_results[f"{name},none"], abs=1e-6), (
            name
        )  # lm-eval's number is ddibench's (float32 embeddings)
    manifest = results["manifest"]
    from importlib.metadata import version

    assert manifest["system"]["name"] == "lm-eval" and manifest["system"]["version"] == version("lm_eval")
    assert (
        manifest["system"]["config"]["model"] == "local-chat-completions"
        and "stub-model" in manifest["models"]["generator"]["spec"]
    )
    assert manifest["limit"] == limit and not manifest["submittable"] and results["cost"]["recorded"] is False
    if not task_name.startswith("ddi_qa"):  # floors beside the imported numbers, as for any run (text tasks have none)
        assert (
            "uniform_random" in results["floors"]
            and ({"majority", "popularity"} & set(results["floors"]))
            and "random floor" in out
        )
    journal = [json.loads(line)["prediction"] for line in (run_dir / "journal.jsonl").read_text().splitlines()]
    assert len(journal) == limit and all("lm_eval" in p["trace"] for p in journal)

    bundle = tmp_path / "imported.tar.gz"
    code, _, err = cli("submit", str(run_dir), "--out", str(bundle))
    assert code == 0, err
    code, out, err = cli("board", "add", "--previews", "--store", str(tmp_path / "board.duckdb"), str(bundle))
    assert code == 0 and "added (recomputed, preview)" in out, out + err
    from ddibench.errors import ConfigError
    from ddibench.submission import reproduce, verify

    verdict = verify(bundle)
    verdict.accepted = True  # as a full-split import would be: a reproduction says what it can do, not a provider error
    with pytest.raises(ConfigError, match="made by lm-evaluation-harness and imported"):
        reproduce(verdict, tmp_path / "again")

    code, _, err = cli("import", "lm-eval", str(tmp_path / "nope.jsonl"))
    assert code == 2 and "does not exist" in err
