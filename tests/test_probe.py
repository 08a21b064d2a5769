"""The captioning probe: it learns the property from the captions (a caption that states the label lifts
its AUROC to 1), is deterministic, keeps probes apart on the board, and the finetune protocol runs."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from ddibench.errors import ConfigError
from ddibench.evaluation import EvaluationInputError, ProbeData, ProbeEvaluator, finetune_probe
from ddibench.metrics.bootstrap import BootstrapSpec
from ddibench.registry import get_task
from ddibench.results.store import scoring_variant
from ddibench.schema import Prediction


@pytest.fixture(scope="module")
def bace_slice() -> list:
    """A slice of caption_bace: every fifth training molecule (242), 40 validation and every test molecule."""
    data = get_task("caption_bace").load()
    return [*data.splits["train"][::5], *data.splits["valid"][:40], *data.splits["test"]]


def captions(samples: list, leak: bool) -> dict[str, Prediction]:
    def text(s) -> str:  # noqa: ANN001
        if not leak:
            return ""
        return "This molecule inhibits BACE-1." if s.target["Class"] else "This molecule is inactive on BACE-1."

    return {s.id: Prediction(sample_id=s.id, text=text(s)) for s in samples}


def test_the_probe_reads_the_captions_and_is_deterministic(bace_slice: list) -> None:
    evaluator = ProbeEvaluator(["Class"])
    spec = BootstrapSpec(replicates=200, seed=0)
    smiles_only = evaluator.evaluate(bace_slice, captions(bace_slice, leak=False), spec)
    leaking = evaluator.evaluate(bace_slice, captions(bace_slice, leak=True), spec)
    n_test = sum(1 for s in bace_slice if s.meta["split"] == "test")
    assert smiles_only.n == leaking.n == n_test
    assert 0.6 < smiles_only.metrics["auroc"].value < 0.95  # the fingerprint alone carries signal
    assert leaking.metrics["auroc"].value > 0.99  # a caption that states the label: the probe reads it
    assert smiles_only.breakdown["captions train"]["n_empty"] == 242
    again = evaluator.evaluate(bace_slice, captions(bace_slice, leak=False), spec)
    assert again.metrics == smiles_only.metrics and again.per_sample == smiles_only.per_sample
    seeds = [smiles_only.breakdown["probe seeds"][f"seed {k}"] for k in range(5)]
    assert smiles_only.metrics["auroc"].value == pytest.approx(np.mean(seeds), abs=1e-6)
    assert smiles_only.metrics["auroc_std"].value == pytest.approx(np.std(seeds), abs=1e-6)
    # the units the board stores give the same AUROC again (paired comparisons resample these)
    test = [s for s in bace_slice if s.meta["split"] == "test"]
    units = [smiles_only.per_sample[s.id] for s in test]
    assert evaluator.statistic(units)(np.ones((1, len(units))))["auroc"][0] == pytest.approx(
        smiles_only.metrics["auroc"].value
    )
    diff, low, high = evaluator.paired(
        "auroc", [s.clusters for s in test], [leaking.per_sample[s.id] for s in test], units
    )
    assert (
        diff == pytest.approx(leaking.metrics["auroc"].value - smiles_only.metrics["auroc"].value)
        and 0 < low <= diff <= high
    )


def test_the_probe_needs_training_and_evaluated_molecules(bace_slice: list) -> None:
    evaluator = ProbeEvaluator(["Class"])
    test_only = [s for s in bace_slice if s.meta["split"] == "test"]
    with pytest.raises(EvaluationInputError, match="training molecules"):
        evaluator.evaluate(test_only, captions(test_only, leak=False), BootstrapSpec(replicates=10))
    untagged = [dataclasses.replace(s, meta={}) for s in bace_slice[:3]]
    with pytest.raises(EvaluationInputError, match="no split"):
        evaluator.evaluate(untagged, captions(untagged, leak=False), BootstrapSpec(replicates=10))


def test_probe_options_are_checked_and_keep_probes_apart() -> None:
    evaluator = ProbeEvaluator(["p_np"])
    with pytest.raises(ConfigError, match="--probe must be"):
        evaluator.configure({"probe": "ridge"})
    with pytest.raises(ConfigError, match="--probe finetune only"):
        evaluator.configure({"probe_epochs": 3})
    with pytest.raises(ConfigError, match="not a sentence-transformers model directory"):
        evaluator.configure({"probe_encoder": "/nonexistent/scibert"})
    finetune = evaluator.configure({"probe": "finetune", "probe_epochs": 3})
    assert scoring_variant(finetune) != scoring_variant(evaluator) == ""
    assert finetune.describe()["scorers"]["probe"]["epochs"] == 3


def test_finetune_probe_smoke(bace_slice: list) -> None:
    """The paper's protocol (the encoder fine-tuned on 'SMILES [SEP] caption') runs end to end on CPU: one step."""

    def part(samples: list) -> ProbeData:
        return ProbeData(
            [s.input.smiles for s in samples],
            ["a caption"] * len(samples),
            np.array([[float(s.target["Class"])] for s in samples]),
        )

    train, valid, test = (
        part([s for s in bace_slice if s.meta["split"] == name][:n])
        for name, n in (("train", 8), ("valid", 4), ("test", 6))
    )
    scores = finetune_probe(train, valid, test, seeds=1, epochs=1, max_steps=1, device="cpu")
    assert scores.shape == (1, 6, 1)
    assert np.all((scores >= 0) & (scores <= 1))
