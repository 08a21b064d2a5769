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

    # training says where it stands after every epoch, and the bar ends on the epochs actually run
    epochs = info["epochs_run"]
    said = [line for line in (out + err).splitlines() if line.startswith("mlp (6,000 pairs) epoch ")]
    assert [line.split(":")[0] for line in said] == [f"mlp (6,000 pairs) epoch {e}/2" for e in range(1, epochs + 1)]
    assert all("valid macro-F1 " in line and "best " in line and "patience " in line for line in said), said
    assert f"best {info['best_valid_macro_f1']:.3f} at epoch {info['best_epoch']}" in said[-1]
    assert f"trained mlp (6,000 pairs): {epochs} epochs" in out + err

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
    code, _, err = cli(
        "run", "-s", "mlp", "-t", "drugbank_s2", "--profile", "a100-80g", "--run-dir", str(tmp_path / "gpu")
    )
    assert code == 2 and "torch sees no CUDA device" in err


def test_fingerprints_cover_every_drug() -> None:
    from ddibench.tasks.drugbank import load_catalog

    matrix, failed = morgan_matrix([d.smiles for d in load_catalog().drugs], 2, 1024)
    assert matrix.shape == (1710, 1024) and failed == []
    assert (matrix.sum(axis=1) > 0).all()


def test_training_progress_counts_steps_says_the_stopping_state_and_shrinks_on_an_early_stop() -> None:
    """Steps inside an epoch move the bar (so its ETA exists within epoch 1); each epoch's end says the
    validation score and the patience used; an early stop leaves the bar at the steps taken."""
    import io

    from rich.console import Console

    from ddibench import TrainingProgress
    from ddibench.commands.common import LineProgress

    buffer = io.StringIO()
    shown = LineProgress(
        Console(file=buffer, width=200), every=0.0
    )  # a line at every step, as a log would get every 30 s
    bar = TrainingProgress(shown, "toy", max_epochs=10, steps_per_epoch=4, metric="macro-F1", patience=2)
    bar.step(3)  # a short last batch skipped: epoch_done makes up the fourth step
    bar.epoch_done(1, 12.0, 0.5, 0.5, 1, 0)
    bar.step(4)
    bar.epoch_done(2, 11.0, 0.4, 0.5, 1, 1)
    bar.finish(2, stopped_early=True)
    lines = buffer.getvalue().splitlines()
    assert lines[0].startswith("training toy: epoch 1/10: 3/40 (8%)") and "ETA " in lines[0]
    assert "toy epoch 1/10: valid macro-F1 0.500, best 0.500 at epoch 1, patience 0/2, 12 s" in lines
    assert "toy epoch 2/10: valid macro-F1 0.400, best 0.500 at epoch 1, patience 1/2, 11 s" in lines
    assert any(line.startswith("training toy: epoch 1/10: 4/40") for line in lines)
    assert any(line.startswith("training toy: epoch 2/10: 8/40") for line in lines)
    assert lines[-1].startswith("trained toy: 2 epochs (early stopping): 8/8 (100%)")
    interrupted = TrainingProgress(shown, "toy", max_epochs=10, steps_per_epoch=4, metric="macro-F1", patience=2)
    interrupted.step(2)
    interrupted.finish(0)  # Ctrl-C in epoch 1: neither trained nor stopped early
    assert buffer.getvalue().splitlines()[-1].startswith("training toy interrupted after 0 complete epochs: 2/40")


def test_best_epoch_keeps_the_best_weights_and_counts_the_patience() -> None:
    import torch

    from ddibench import BestEpoch

    net = torch.nn.Linear(2, 1)
    best = BestEpoch(patience=2)
    for epoch, value in enumerate([0.3, 0.5, float("nan"), 0.5, 0.4], 1):
        with torch.no_grad():
            net.weight.fill_(epoch)
        best.update(epoch, value, net)
        if best.should_stop:
            break
    # the NaN and the tie are not better; the patience of 2 ends training after epoch 4
    assert (best.epoch, best.value, best.waited, epoch) == (2, 0.5, 2, 4)
    assert best.state is not None and torch.equal(
        best.state["weight"], torch.full((1, 2), 2.0)
    )  # a copy, not the live weights
    loss = BestEpoch(lower_is_better=True)
    for epoch, value in enumerate([0.9, 0.7, 0.8], 1):
        loss.update(epoch, value, net)
    assert (loss.epoch, loss.value, loss.waited, loss.should_stop) == (2, 0.7, 1, False)  # no patience: never stops
