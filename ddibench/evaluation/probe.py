"""Property-specific captioning, scored by a probe that learns the property from the captions.

A captioning system writes a caption for *every* molecule of the task (training, validation and
evaluated molecules: the task's ``predict_splits``) without seeing any label. The probe then learns
the property from the training molecules' SMILES and captions and predicts it for the evaluated
molecules: a caption that says something about the property raises the probe's AUROC above what the
structure alone gives (the ``only-smiles`` system, whose captions are all empty, is that floor).

Probes (``--probe``; which probe and encoder scored a run is in its manifest, and the board never
ranks runs scored differently together):

* ``linear`` (default; CPU, under a minute per dataset here): the features of a molecule are its Morgan
  fingerprint (radius 2, 2,048 bits) beside the frozen text encoder's embedding of its caption
  (``--probe-encoder``: MiniLM by default, any local sentence-transformers or Hugging Face model
  directory, e.g. SciBERT); standardised on the training molecules; one L2-regularised logistic
  regression per label column, fitted by stochastic gradient descent (scikit-learn ``SGDClassifier``,
  log loss, 30 epochs, averaged weights) whose seed sets the order of the training molecules, so the 5
  seeds differ the way fine-tuning seeds do. The L2 strength is chosen once per run from a grid, by the
  mean validation AUROC (seed 0).
* ``finetune`` (the paper's protocol): the encoder fine-tuned as a multi-label classifier on the pair
  ``SMILES [SEP] caption`` (BCE over the label columns, AdamW, learning rate 2e-5, batch 32, at most 256
  tokens, ``--probe-epochs`` epochs keeping the epoch with the best validation AUROC), one model per
  seed, on CUDA when torch sees a GPU. On 2 CPU cores a step takes seconds: a GPU profile's job.

Metrics: ``auroc`` (primary) = for each seed the mean over label columns of the AUROC on the
evaluated molecules, then the mean over the 5 seeds; ``auroc_std`` = their standard deviation over
seeds (population, ddof 0). A column whose evaluated molecules all share one class has no AUROC and
is left out (as chemprop does); a column with one class among the training molecules gets a constant
score (AUROC 0.5). Unparsable captions count as empty captions and are counted apart.

Intervals: the probe is trained once per seed; the cluster bootstrap then reweights the evaluated
molecules by scaffold (the same replicate for every seed and column). Units are per evaluated
molecule (``{"gold": [...], "scores": [[...] per seed]}``), so paired comparisons resample the same
scaffolds for both runs.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ddibench.embeddings import DEFAULT_ENCODER
from ddibench.errors import ConfigError
from ddibench.evaluation.base import (
    BaseEvaluator,
    EvaluationInputError,
    EvaluationResult,
    MetricSpec,
    MetricValue,
    ScoringOption,
    Statistic,
    check_coverage,
)
from ddibench.metrics.auroc import weighted_auroc
from ddibench.metrics.bootstrap import BootstrapSpec
from ddibench.schema import Prediction, Sample

PROBES = ("linear", "finetune")
N_SEEDS = 5
SPLIT_ORDER = ("train", "valid", "test")
PROBE_CODE_VERSION = 1  # bump when a probe changes in a way its options do not show

FP_RADIUS, FP_BITS = 2, 2048
LINEAR_ALPHAS = (1e-4, 1e-3, 1e-2, 1e-1)  # L2 strengths each seed chooses from on the validation molecules
LINEAR_DEFAULT_ALPHA = 1e-2  # when there are no validation molecules to choose with
LINEAR_EPOCHS = 30
FINETUNE: dict[str, Any] = {"lr": 2e-5, "batch_size": 32, "max_length": 256, "weight_decay": 0.01}

PROBE_METRICS = (
    MetricSpec(
        name="auroc",
        label="probe AUROC",
        primary=True,
        description="AUROC of the probe on the evaluated molecules: mean over label columns, then over 5 probe seeds",
    ),
    MetricSpec(
        name="auroc_std",
        label="probe AUROC std",
        higher_is_better=False,
        description="standard deviation of the probe AUROC over its 5 seeds",
    ),
)


@dataclass(frozen=True)
class ProbeData:
    """Molecules of one split as the probe sees them: SMILES, captions, labels (NaN: missing)."""

    smiles: list[str]
    captions: list[str]
    labels: np.ndarray  # (molecules, columns)


class ProbeEvaluator(BaseEvaluator):
    """Captions of every molecule -> a probe trained on the training molecules -> AUROC on the evaluated ones."""

    kind = "probe"
    answer_fields: ClassVar[tuple[str, ...]] = ("text",)
    metrics: tuple[MetricSpec, ...] = PROBE_METRICS
    options: ClassVar[tuple[ScoringOption, ...]] = (
        ScoringOption(
            "probe",
            "--probe",
            "Captioning probe: linear (frozen encoder + fingerprint, CPU) or finetune (the paper's protocol, GPU).",
            default="linear",
        ),
        ScoringOption(
            "probe_encoder",
            "--probe-encoder",
            "Text encoder of the captioning probe: 'minilm' or a local model directory (e.g. SciBERT).",
            default=DEFAULT_ENCODER,
            portable=False,
        ),
        ScoringOption(
            "probe_epochs",
            "--probe-epochs",
            "Epochs of the finetune probe (the best validation epoch is kept).",
            type=int,
            default=10,
        ),
    )
    expected_format = (
        "one Prediction per molecule of every predicted split (train, valid and the evaluated split) with the caption in text; "
        "valid=False or an empty text counts as an empty caption"
    )

    def __init__(self, columns: Sequence[str], seeds: int = N_SEEDS, max_steps: int | None = None) -> None:
        super().__init__()
        if not columns:
            raise ValueError("a probe needs at least one label column")
        self.columns = tuple(columns)
        self.seeds = seeds
        self.max_steps = max_steps  # finetune only: stop each seed after this many optimiser steps (smoke tests)

    # -- options -----------------------------------------------------------------------------------

    @property
    def probe(self) -> str:
        return str(self.setting("probe") or "linear")

    @property
    def encoder_spec(self) -> str:
        return str(self.setting("probe_encoder") or DEFAULT_ENCODER)

    def _validate(self) -> None:
        from ddibench.embeddings import encoder_path

        if self.probe not in PROBES:
            raise ConfigError(f"--probe must be one of {', '.join(PROBES)}, got '{self.probe}'")
        epochs = self.setting("probe_epochs")
        if epochs is not None and int(epochs) <= 0:
            raise ConfigError(
                f"--probe-epochs must be a positive number of epochs, got {epochs}", "omit it for 10 epochs"
            )
        if self.probe != "finetune" and "probe_epochs" in self.settings():
            raise ConfigError(
                "--probe-epochs applies to --probe finetune only", "drop --probe-epochs, or add --probe finetune"
            )
        if self.encoder_spec != DEFAULT_ENCODER:
            encoder_path(self.encoder_spec)  # refuses a path that holds no model, before any prediction

    def describe(self) -> dict[str, Any]:
        from ddibench.embeddings import TextEncoder

        identity = TextEncoder(self.encoder_spec).identity
        if self.probe == "linear":
            recipe: dict[str, Any] = {
                "features": f"Morgan radius {FP_RADIUS}, {FP_BITS} bits + frozen caption embedding (standardised)",
                "classifier": f"SGDClassifier(log_loss, L2 alpha chosen once from {list(LINEAR_ALPHAS)} on validation AUROC, "
                f"{LINEAR_EPOCHS} epochs, averaged)",
            }
        else:
            recipe = {
                "input": "SMILES [SEP] caption (tokenizer text pair)",
                "epochs": int(self.setting("probe_epochs")),
                **FINETUNE,
                "device": _device(),
            }
        return {
            "scorers": {
                "probe": {
                    "probe": self.probe,
                    "encoder": identity,
                    "seeds": self.seeds,
                    "code_version": PROBE_CODE_VERSION,
                    **recipe,
                }
            }
        }

    # -- scoring -----------------------------------------------------------------------------------

    def _partition(self, samples: Sequence[Sample]) -> tuple[list[Sample], list[Sample], list[Sample], str]:
        groups: dict[str, list[Sample]] = {}
        for s in samples:
            split = s.meta.get("split")
            if split not in SPLIT_ORDER:
                raise EvaluationInputError(
                    f"sample {s.id} has no split in its meta ({split!r}); a probe task tags every sample with its split"
                )
            groups.setdefault(str(split), []).append(s)
        present = [s for s in SPLIT_ORDER if s in groups]
        if "train" not in groups or len(present) < 2:
            raise EvaluationInputError(
                "the probe needs captions of training molecules and of the evaluated molecules (the task's predict_splits)"
            )
        scored = present[-1]
        selection = groups.get("valid", []) if scored == "test" else []
        return groups["train"], selection, groups[scored], scored

    def _data(self, samples: Sequence[Sample], predictions: Mapping[str, Prediction]) -> ProbeData:
        labels = np.full((len(samples), len(self.columns)), np.nan)
        for i, s in enumerate(samples):
            target = s.target
            if not isinstance(target, Mapping):
                raise EvaluationInputError(
                    f"sample {s.id} has target {target!r}; a probe task's target maps label columns to 0/1"
                )
            for j, col in enumerate(self.columns):
                value = target.get(col)
                if value is not None:
                    labels[i, j] = float(value)
        return ProbeData([s.molecule.smiles for s in samples], [_caption(predictions[s.id]) for s in samples], labels)

    def probe_scores(self, train: ProbeData, valid: ProbeData | None, test: ProbeData) -> np.ndarray:
        """The probe's scores of the evaluated molecules: shape (seeds, molecules, columns)."""
        if self.probe == "linear":
            return linear_probe(train, valid, test, self.encoder_spec, self.seeds)
        return finetune_probe(
            train,
            valid,
            test,
            self.encoder_spec,
            self.seeds,
            int(self.setting("probe_epochs")),
            max_steps=self.max_steps,
        )

    def evaluate(
        self,
        samples: Sequence[Sample],
        predictions: Mapping[str, Prediction],
        bootstrap: BootstrapSpec,
        extras: Mapping[str, object] | None = None,
    ) -> EvaluationResult:
        check_coverage(samples, predictions)
        train, selection, scored, scored_split = self._partition(samples)
        data = {
            name: self._data(group, predictions)
            for name, group in (("train", train), ("valid", selection), ("scored", scored))
        }
        scores = self.probe_scores(data["train"], data["valid"] if selection else None, data["scored"])
        units = [
            {
                "gold": [None if np.isnan(v) else int(v) for v in data["scored"].labels[i]],
                "scores": [[round(float(x), 6) for x in scores[k, i]] for k in range(scores.shape[0])],
            }
            for i in range(len(scored))
        ]
        statistic = self.statistic(units)
        point = statistic(np.ones((1, len(units))))
        intervals = self.intervals(units, [s.clusters for s in scored], bootstrap)
        metrics = {
            name: MetricValue(
                value=float(point[name][0]),
                ci_low=intervals.get(name, (np.nan, np.nan))[0],
                ci_high=intervals.get(name, (np.nan, np.nan))[1],
            )
            for name in ("auroc", "auroc_std")
        }
        per_seed, per_column = _auroc_table(units)
        breakdown: dict[str, dict[str, Any]] = {
            f"captions {name}": {
                "n": len(group),
                "n_invalid": sum(not predictions[s.id].valid for s in group),
                "n_empty": sum(not _caption(predictions[s.id]) for s in group),
            }
            for name, group in (("train", train), ("valid", selection), (scored_split, scored))
            if group
        }
        breakdown["probe seeds"] = {"n": len(per_seed), **{f"seed {k}": v for k, v in enumerate(per_seed)}}
        invalid = [s.id for s in scored if not predictions[s.id].valid]
        return EvaluationResult(
            n=len(scored),
            n_invalid=len(invalid),
            metrics=metrics,
            primary_metric=self.primary_metric,
            bootstrap=bootstrap.describe(),
            metric_specs=list(self.metrics),
            breakdown=breakdown,
            per_label={col: per_column[j] for j, col in enumerate(self.columns)},
            invalid_examples=[
                {"sample_id": sid, "error": predictions[sid].error or "unparsable output"} for sid in invalid[:5]
            ],
            per_sample={s.id: u for s, u in zip(scored, units)},
        )

    def statistic(self, units: Sequence[Mapping[str, Any]]) -> Statistic:
        gold, scores, columns = _arrays(units)

        def statistic(weights: np.ndarray) -> dict[str, np.ndarray]:
            per_seed = _per_seed_auroc(gold, scores, columns, weights)  # (seeds, replicates)
            with np.errstate(invalid="ignore"):
                return {"auroc": per_seed.mean(axis=0), "auroc_std": per_seed.std(axis=0)}

        return statistic


def _caption(pred: Prediction) -> str:
    return (pred.text or "").strip() if pred.valid else ""


def _arrays(units: Sequence[Mapping[str, Any]]) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """Gold labels (molecules, columns), scores (molecules, seeds, columns), and the columns that have an
    AUROC on these molecules (both classes present)."""
    if not units:
        return np.zeros((0, 0)), np.zeros((0, 0, 0)), []
    gold = np.array([[np.nan if v is None else float(v) for v in u["gold"]] for u in units], dtype=float)
    scores = np.array([u["scores"] for u in units], dtype=float)
    columns = [c for c in range(gold.shape[1]) if np.nansum(gold[:, c] == 1) > 0 and np.nansum(gold[:, c] == 0) > 0]
    return gold, scores, columns


def _per_seed_auroc(gold: np.ndarray, scores: np.ndarray, columns: Sequence[int], weights: np.ndarray) -> np.ndarray:
    """Mean AUROC over ``columns`` for every seed and replicate: shape (seeds, replicates)."""
    n_seeds = scores.shape[1] if scores.ndim == 3 else 0
    out = np.full((max(n_seeds, 1), weights.shape[0]), np.nan)
    if not columns:
        return out
    for k in range(n_seeds):
        per_column = []
        for c in columns:
            known = ~np.isnan(gold[:, c])
            per_column.append(weighted_auroc(gold[known, c] == 1, scores[known, k, c], weights[:, known]))
        stacked = np.stack(per_column)
        counted = (~np.isnan(stacked)).sum(axis=0)  # a replicate without any scorable column is NaN
        out[k] = np.where(counted > 0, np.nansum(stacked, axis=0) / np.maximum(counted, 1), np.nan)
    return out


def _auroc_table(units: Sequence[Mapping[str, Any]]) -> tuple[list[float | None], list[float | None]]:
    """AUROC of each seed (mean over columns) and of each column (mean over seeds), for the breakdown."""
    gold, scores, columns = _arrays(units)
    if not units:
        return [], []
    ones = np.ones((1, len(units)))
    per_seed = [None if np.isnan(v) else round(float(v), 6) for v in _per_seed_auroc(gold, scores, columns, ones)[:, 0]]
    per_column: list[float | None] = []
    for c in range(gold.shape[1]):
        if c not in columns:
            per_column.append(None)
            continue
        values = _per_seed_auroc(gold, scores, [c], ones)[:, 0]
        per_column.append(round(float(np.mean(values)), 6))
    return per_seed, per_column


# -- the probes ------------------------------------------------------------------------------------


def _device() -> str:
    try:
        import torch
    except ImportError:
        return "cpu"
    return "cuda" if torch.cuda.is_available() else "cpu"


def linear_probe(
    train: ProbeData, valid: ProbeData | None, test: ProbeData, encoder: str = DEFAULT_ENCODER, seeds: int = N_SEEDS
) -> np.ndarray:
    """Scores of the ``linear`` probe: shape (seeds, test molecules, columns) (see the module docstring)."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import SGDClassifier
    from sklearn.preprocessing import StandardScaler

    from ddibench.chem import morgan_matrix
    from ddibench.embeddings import shared_encoder

    text_encoder = shared_encoder(encoder)
    parts = [p for p in (train, valid, test) if p is not None]
    smiles = [smi for p in parts for smi in p.smiles]
    captions = [c for p in parts for c in p.captions]
    fingerprints, _ = morgan_matrix(smiles, FP_RADIUS, FP_BITS)
    # rounded so that the same captions give the same features wherever the encoder runs (last-bit noise)
    embeddings = np.round(text_encoder.encode(captions).astype(np.float64), 5)
    features = np.hstack([fingerprints.astype(np.float64), embeddings])
    bounds = np.cumsum([0] + [len(p.smiles) for p in parts])
    blocks = [features[bounds[i] : bounds[i + 1]] for i in range(len(parts))]
    scaler = StandardScaler().fit(blocks[0])
    x_train, x_test = scaler.transform(blocks[0]), scaler.transform(blocks[-1])
    x_valid = scaler.transform(blocks[1]) if valid is not None else None
    n_cols = train.labels.shape[1]
    out = np.zeros((seeds, len(test.smiles), n_cols))

    def fit_column(c: int, alpha: float, seed: int) -> Any:
        known = ~np.isnan(train.labels[:, c])
        y = train.labels[known, c].astype(int)
        if len(set(y.tolist())) < 2:
            return float(y[0]) if y.size else 0.5  # one class among the training molecules: a constant score
        model = SGDClassifier(
            loss="log_loss",
            penalty="l2",
            alpha=alpha,
            max_iter=LINEAR_EPOCHS,
            tol=None,
            average=True,
            random_state=seed,
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            return model.fit(x_train[known], y)

    def predict(model: Any, x: np.ndarray) -> np.ndarray:
        return np.full(len(x), model) if isinstance(model, float) else model.predict_proba(x)[:, 1]

    alpha = LINEAR_DEFAULT_ALPHA
    if (
        valid is not None and x_valid is not None and len(valid.smiles)
    ):  # the L2 strength, chosen once on the validation molecules
        best = -1.0
        for candidate in LINEAR_ALPHAS:
            scores = np.stack([predict(fit_column(c, candidate, 0), x_valid) for c in range(n_cols)], axis=1)
            value = _mean_auroc(valid.labels, scores)
            if value > best:
                best, alpha = value, candidate
    for seed in range(seeds):
        for c in range(n_cols):
            out[seed, :, c] = predict(fit_column(c, alpha, seed), x_test)
    return out


def _mean_auroc(labels: np.ndarray, scores: np.ndarray) -> float:
    values = []
    for c in range(labels.shape[1]):
        known = ~np.isnan(labels[:, c])
        y = labels[known, c] == 1
        if y.any() and (~y).any():
            values.append(float(weighted_auroc(y, scores[known, c])))
    return float(np.mean(values)) if values else float("nan")


def finetune_probe(
    train: ProbeData,
    valid: ProbeData | None,
    test: ProbeData,
    encoder: str = DEFAULT_ENCODER,
    seeds: int = N_SEEDS,
    epochs: int = 10,
    max_steps: int | None = None,
    device: str | None = None,
) -> np.ndarray:
    """Scores of the ``finetune`` probe: shape (seeds, test molecules, columns) (see the module docstring)."""
    # over 60 lines: one fine-tuning recipe (the paper's): the tokenizer, device and encoded splits are shared by
    # the encode/score closures and the per-seed loop, and determinism is switched on around all of it
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS, set before CUDA starts
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    from transformers.utils import logging as hf_logging

    from ddibench.embeddings import encoder_path

    hf_logging.disable_progress_bar()
    path = str(encoder_path(encoder))
    device = device or _device()
    torch.set_num_threads(os.cpu_count() or 1)
    tokenizer = AutoTokenizer.from_pretrained(path)
    n_cols = train.labels.shape[1]

    def encode(part: ProbeData) -> list[dict[str, list[int]]]:
        """Token ids of each ``SMILES [SEP] caption`` pair (a tokenizer text pair), unpadded."""
        enc = tokenizer(part.smiles, part.captions, truncation=True, max_length=int(FINETUNE["max_length"]))
        return [{k: enc[k][i] for k in enc} for i in range(len(part.smiles))]

    def collate(items: list[dict[str, list[int]]]) -> dict[str, Any]:
        """One batch, padded to its own longest pair (not the split's)."""
        return {k: v.to(device) for k, v in tokenizer.pad(items, return_tensors="pt").items()}

    def score(model: Any, encoded: list[dict[str, list[int]]]) -> np.ndarray:
        model.eval()
        out = []
        with torch.no_grad():
            for start in range(0, len(encoded), 64):
                out.append(torch.sigmoid(model(**collate(encoded[start : start + 64])).logits).float().cpu().numpy())
        return np.concatenate(out) if out else np.zeros((0, n_cols))

    enc_train, enc_test = encode(train), encode(test)
    enc_valid = encode(valid) if valid is not None and len(valid.smiles) else None
    labels = torch.tensor(np.nan_to_num(train.labels, nan=0.0), dtype=torch.float32)
    mask = torch.tensor(~np.isnan(train.labels), dtype=torch.float32)
    result = np.zeros((seeds, len(test.smiles), n_cols))
    deterministic = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        for seed in range(seeds):
            torch.manual_seed(seed)
            model = AutoModelForSequenceClassification.from_pretrained(
                path, num_labels=n_cols, problem_type="multi_label_classification"
            ).to(device)
            optimiser = torch.optim.AdamW(model.parameters(), lr=FINETUNE["lr"], weight_decay=FINETUNE["weight_decay"])
            generator = torch.Generator().manual_seed(seed)
            best_value, best_state, steps = -1.0, None, 0
            for _ in range(epochs):
                model.train()
                order = torch.randperm(labels.shape[0], generator=generator)
                batch_size = int(FINETUNE["batch_size"])
                for start in range(0, len(order), batch_size):
                    idx = order[start : start + batch_size]
                    logits = model(**collate([enc_train[i] for i in idx.tolist()])).logits
                    loss = torch.nn.functional.binary_cross_entropy_with_logits(
                        logits, labels[idx].to(device), weight=mask[idx].to(device), reduction="sum"
                    )
                    loss = loss / mask[idx].sum().clamp(min=1).to(device)
                    optimiser.zero_grad()
                    loss.backward()
                    optimiser.step()
                    steps += 1
                    if max_steps is not None and steps >= max_steps:
                        break
                value = (
                    _mean_auroc(valid.labels, score(model, enc_valid))
                    if enc_valid is not None and valid is not None
                    else float("nan")
                )
                if (
                    enc_valid is None or best_state is None or value > best_value
                ):  # no validation molecules: the last epoch
                    best_value = value
                    best_state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
                if max_steps is not None and steps >= max_steps:
                    break
            if best_state is not None:
                model.load_state_dict(best_state)
            result[seed] = score(model, enc_test)
    finally:
        torch.use_deterministic_algorithms(deterministic)
    return result
