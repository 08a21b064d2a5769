"""The MLP baseline: trains on the training split, scores the whole test set, caches its checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the mlp system needs the 'ml' extra")
pytest.importorskip("rdkit", reason="the mlp system needs the 'ml' extra")

from ddibench.chem import morgan_matrix  # noqa: E402

BUDGET = ["-C", "max_epochs=2", "-C", "max_train=6000", "-C", "hidden=[128]", "-C", "patience=1"]


def test_mlp_trains_scores_every_test_sample_and_reuses_its_checkpoint(cli, tmp_path: Path, fresh_cache: Path) -> None:
    code, out, err = cli("run", "-s", "mlp", "-t", "drugbank_s2", *BUDGET, "--run-dir", str(tmp_path / "a"))
    assert code == 0, err
    results = json.loads((tmp_path / "a" / "results.json").read_text())
    assert results["evaluation"]["n"] == 1992 and results["manifest"]["submittable"] is True
    info = results["system_info"]
    assert info["n_train"] == 6000 and info["n_train_available"] == 99283
    assert info["epochs_run"] <= 2 and info["loaded_from_cache"] is False
    assert 0.0 <= info["best_valid_macro_f1"] <= 1.0
    assert results["evaluation"]["metrics"]["accuracy"]["value"] > 0.15  # well above chance (1/86)
    artifacts = [p for p in (fresh_cache / "artifacts" / "mlp").iterdir() if not p.name.startswith(".")]
    assert len(artifacts) == 1 and (artifacts[0] / "model.pt").exists() and (artifacts[0] / "key.json").exists()

    code, _, err = cli("run", "-s", "mlp", "-t", "drugbank_s2", *BUDGET, "--run-dir", str(tmp_path / "b"))
    assert code == 0, err
    again = json.loads((tmp_path / "b" / "results.json").read_text())
    assert again["system_info"]["loaded_from_cache"] is True
    assert again["evaluation"]["metrics"] == results["evaluation"]["metrics"]
    assert again["manifest"]["system"]["config_hash"] == results["manifest"]["system"]["config_hash"]


def test_profile_budget_is_part_of_the_config(cli, tmp_path: Path) -> None:
    from ddibench.profiles import get_profile
    from ddibench.runner.plan import build_system

    cpu = build_system("mlp", get_profile("cpu"), {})
    gpu = build_system("mlp", get_profile("a100-80g"), {})
    assert cpu.config.max_epochs == 30 and gpu.config.max_epochs == 100 and gpu.config.device == "cuda"
    assert build_system("mlp", get_profile("cpu"), {"max_epochs": 3}).config.max_epochs == 3


def test_cuda_profile_without_gpu_is_a_clear_error(cli, tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    code, _, err = cli("run", "-s", "mlp", "-t", "drugbank_s2", "--profile", "a100-80g", "--run-dir", str(tmp_path / "gpu"))
    assert code == 2 and "torch sees no CUDA device" in err


def test_fingerprints_cover_every_drug() -> None:
    from ddibench.tasks.drugbank import load_catalog

    matrix, failed = morgan_matrix([d.smiles for d in load_catalog().drugs], 2, 1024)
    assert matrix.shape == (1710, 1024) and failed == []
    assert (matrix.sum(axis=1) > 0).all()
