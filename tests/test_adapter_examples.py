"""The worked adapter examples of the docs (docs/examples/*.py), one per kind of answer, each installed as an
outside package (its own distribution with a ``ddibench.systems`` entry point, found through
``importlib.metadata`` as after ``pip install``), run on a full test split, submitted and verified."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "docs" / "examples"

# example file, class, system name, task, what the result must show beyond a verified bundle
CASES = [
    ("trained_pairs.py", "FingerprintLogReg", "fp-logreg", "drugbank_s2", "macro_f1"),
    ("yes_no_scores.py", "NeighbourVote", "knn-vote", "tox_herg", "auroc"),
    ("ranking.py", "DrugCooccurrence", "drug-cooccurrence", "twosides_s1", "recall@5"),
]


@pytest.fixture
def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from ddibench import registry

    installed: list[str] = []

    def put(example: str, cls: str, name: str) -> None:
        package = f"example_{Path(example).stem}"
        site = tmp_path / "site"
        (site / package).mkdir(parents=True)
        (site / package / "__init__.py").write_text((EXAMPLES / example).read_text())
        info = site / f"{package}-0.1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: 0.1.0\n")
        (info / "entry_points.txt").write_text(f"[ddibench.systems]\n{name} = {package}:{cls}\n")
        monkeypatch.syspath_prepend(str(site))
        importlib.invalidate_caches()
        registry.clear_caches()
        installed.append(package)

    yield put
    registry.clear_caches()
    for package in installed:
        sys.modules.pop(package, None)


@pytest.mark.parametrize(("example", "cls", "name", "task", "metric"), CASES)
def test_a_worked_example_runs_submits_and_verifies(
    cli, install, tmp_path: Path, example: str, cls: str, name: str, task: str, metric: str
) -> None:
    install(example, cls, name)
    code, out, err = cli("list", "systems")
    assert code == 0 and name in out, err
    run_dir = tmp_path / "run"
    code, out, err = cli("run", "-s", name, "-t", task, "--run-dir", str(run_dir))
    assert code == 0, out + err
    results = json.loads((run_dir / "results.json").read_text())
    evaluation = results["evaluation"]
    assert metric in evaluation["metrics"] and evaluation["n_invalid"] == 0
    primary = evaluation["primary_metric"]
    floor = max(f["metrics"][primary] for f in results["floors"].values())
    assert evaluation["metrics"][primary]["value"] > floor, (
        evaluation["metrics"][primary],
        results["floors"],
    )  # it learnt something
    bundle = tmp_path / "run.tar.gz"
    code, out, err = cli("submit", "--compact", str(run_dir), "--out", str(bundle))
    assert code == 0, out + err
    code, out, err = cli("verify", str(bundle))
    assert code == 0 and "FAILED" not in out and f"{name} 0.1.0 is not registered here" not in out, out + err
    assert f"adapter: example_{Path(example).stem}" in out  # the outside package is named as the adapter's source
