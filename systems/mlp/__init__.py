"""``mlp``: Morgan fingerprints of both drugs into a multi-layer perceptron (no LLM, no graph).

The trained baseline of the EmerGNN and DDI-Ben tables. Each drug is an ECFP-style Morgan bit vector
(RDKit; radius 2, 1024 bits by default); a pair is the concatenation ``[fp(head); fp(tail)]`` (order
matters: the label is directional) and the MLP predicts one of the 86 interaction types. It trains on
the training split with Adam and cross-entropy, keeps the epoch with the best validation macro-F1, and
stops after ``patience`` epochs without improvement. The checkpoint is a cached artifact keyed by
configuration, task data and code version, so a second run trains nothing.

On label-set tasks (TWOSIDES side effects) the head has one sigmoid output per label, trained with the
``multilabel_loss`` objective (EmerGNN's positive-versus-generated-negative BCE by default, or BCE over
every label; see :mod:`ddibench.toolkit.label_sets`), selected by validation recall@k, and a
prediction is the labels ranked by score.

Against the EmerGNN paper's MLP row on ``drugbank_s1_emergnn`` (46.6 accuracy / 21.1 macro-F1 / 33.4
kappa) this MLP scores far higher (board run: 67.1 / 63.5 / 60.0; even on 50,000 training pairs for 3
epochs: 64.5 / 48.5 / 57.0). Not leakage: of the 166 test drugs unseen in training, 4 have a 1,024-bit
fingerprint identical to a training drug's and 7 the same structure up to salts and stereo; the 5.0%
of test pairs with such a twin move macro-F1 by 1.4 points when excluded. What it learns is analogy:
macro-F1 rises from 37.8 (pairs whose new drug has nearest-neighbour Tanimoto < 0.5 to the training
drugs) to 62.8 (0.7-0.95); half the new drugs have a training analogue at 0.54 or above. The paper's MLP
(Suppl. Section 2) feeds each drug's 1,024-bit fingerprint through its own 3-layer MLP and a linear layer
over the concatenation; its training code and settings are not published (the EmerGNN repository
holds EmerGNN only), so its low score is best read as an under-trained baseline, not a ceiling of
fingerprints. ``benchmarks/mlp_leakage.py`` prints these counts; ``drugbank_s1_cluster`` (new drugs
structurally distant) is the split that removes the analogues.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, NamedTuple

from pydantic import Field, model_serializer

from ddibench import families
from ddibench.chem import morgan_matrix
from ddibench.errors import ConfigError
from ddibench.profiles import torch_device
from ddibench.schema import Prediction, Sample
from ddibench.system import (
    BaseSystem,
    BestEpoch,
    Phase,
    PlanContext,
    RunContext,
    SystemConfig,
    TrainingProgress,
    TrainingView,
)
from ddibench.toolkit import label_sets

TRAINING_CODE_VERSION = 1  # bump when training changes in a way the config does not show


class MLPConfig(SystemConfig):
    radius: int = 2
    n_bits: int = 1024
    hidden: tuple[int, ...] = (1024, 512)
    dropout: float = Field(0.3, ge=0, lt=1)
    lr: float = Field(1e-3, gt=0, allow_inf_nan=False)
    weight_decay: float = Field(1e-6, ge=0, allow_inf_nan=False)
    batch_size: int = Field(512, gt=0)
    max_epochs: int = Field(50, gt=0)
    patience: int = Field(5, ge=0)
    max_train: int | None = Field(None, gt=0)  # train on a seeded subsample of this many pairs (a declared budget)
    device: str = "cpu"
    threads: int | None = None
    multilabel_loss: Literal["negatives", "bce"] = "negatives"  # label-set tasks only (see ddibench.toolkit.label_sets)

    @model_serializer(mode="wrap")
    def _dump(self, handler: Any) -> dict[str, Any]:
        return label_sets.omit_at_default(handler(self), {"multilabel_loss": "negatives"})


def _network(cfg: MLPConfig, n_labels: int) -> Any:
    from torch import nn

    layers: list[Any] = []
    width = 2 * cfg.n_bits
    for size in cfg.hidden:
        layers += [nn.Linear(width, size), nn.BatchNorm1d(size), nn.ReLU(), nn.Dropout(cfg.dropout)]
        width = size
    layers.append(nn.Linear(width, n_labels))
    return nn.Sequential(*layers)


class _Objective(NamedTuple):
    name: str  # the progress bar's title
    metric: str  # the validation score's name
    batch_loss: Callable[[Any, Any], Any]  # (model, batch indices) -> loss tensor
    validate: Callable[[Any], tuple[float, dict[str, float]]]  # model -> (score, what the epoch log shows)


def _epoch(
    model: Any,
    optimiser: Any,
    batch_loss: Callable[[Any, Any], Any],
    n: int,
    batch_size: int,
    generator: Any,
    bar: TrainingProgress,
) -> float:
    """One pass over the ``n`` training pairs in a seeded random order; the summed loss (per pair)."""
    import torch

    model.train()
    order = torch.randperm(n, generator=generator)
    total = 0.0
    for start in range(0, n, batch_size):
        idx = order[start : start + batch_size]
        if idx.numel() < 2:
            continue  # BatchNorm needs two samples
        loss = batch_loss(model, idx)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        total += loss.item() * idx.numel()
        bar.step()
    return total


class MLPSystem(BaseSystem):
    name = "mlp"
    version = "1.0.0"
    description = (
        "Morgan fingerprints of both drugs -> MLP, trained on the training split (early stopping on validation macro-F1; "
        "label sets: one sigmoid per label, validation recall@k)"
    )
    Config = MLPConfig
    families = (families.DRUGBANK_DDI, families.TWOSIDES)
    batch_size = 4096
    max_concurrency = 1
    config: MLPConfig

    def __init__(self, config: MLPConfig | None = None) -> None:
        super().__init__(config)
        self._model: Any = None
        self._features: Any = None
        self._label_sets = False
        self._k = 5
        self.training_log: dict[str, Any] = {}

    def _device(self) -> Any:
        return torch_device(self.config.device, "mlp")

    async def prepare(self, view: TrainingView, ctx: RunContext) -> None:
        import torch

        torch.set_num_threads(self.config.threads or os.cpu_count() or 1)
        catalog = view.resources["drugs"]
        feats, failed = morgan_matrix([d.smiles for d in catalog.drugs], self.config.radius, self.config.n_bits)
        self._features = torch.from_numpy(feats).float()
        self._label_sets = label_sets.is_label_set_task(view.task)
        self._k = label_sets.top_k(view.task)
        key = self.artifact_key(
            view.task, ctx.seed, config=self.config.model_dump(mode="json"), training_code=TRAINING_CODE_VERSION
        )
        if self._label_sets:  # (DrugBank keys stay as they were)
            key["objective"] = {"multilabel_loss": self.config.multilabel_loss, "select_by": f"recall@{self._k}"}
        path, built = ctx.artifacts.get_or_build("mlp", key, lambda tmp: self._train(view, ctx, tmp, failed))
        self.training_log = json.loads((path / "training.json").read_text(encoding="utf-8"))
        self.training_log["loaded_from_cache"] = not built
        self.training_log["artifact"] = str(path)
        model = _network(self.config, len(view.task.label_space))
        model.load_state_dict(torch.load(path / "model.pt", map_location="cpu", weights_only=True))
        self._model = model.to(self._device()).eval()
        ctx.log.info("mlp: %s checkpoint %s", "built" if built else "reused", path)

    def deviations(self) -> list[str]:
        if self._label_sets:
            return []
        return [
            "the EmerGNN paper's MLP encodes each drug with its own 3-layer MLP before a linear layer over the concatenation; "
            "this one feeds the concatenated fingerprints to one MLP. It scores far above that paper's row on S1; near-duplicate "
            "molecules explain little of it (benchmarks/mlp_leakage.py: 5% of drugbank_s1_emergnn test pairs, 1.4 macro-F1 points)"
        ]

    def run_info(self) -> dict[str, Any]:
        return self.training_log

    def plan(self, view: TrainingView, samples: Sequence[Sample], ctx: PlanContext) -> list[Phase]:
        """Training: at most ``max_epochs`` epochs (early stopping may end it sooner) over the training pairs."""
        cfg = self.config
        pairs = min(len(view.train), cfg.max_train or len(view.train))
        note = f"{pairs:,} training pairs, batch {cfg.batch_size}, patience {cfg.patience} (epochs: at most)"
        return [Phase("training mlp", epochs=cfg.max_epochs, note=note)]

    def _pairs(self, samples: Sequence[Sample]) -> tuple[Any, Any]:
        import torch

        heads = torch.tensor([s.pair.head.node_id for s in samples], dtype=torch.long)
        tails = torch.tensor([s.pair.tail.node_id for s in samples], dtype=torch.long)
        return heads, tails

    def _inputs(self, heads: Any, tails: Any, device: Any) -> Any:
        import torch

        return torch.cat([self._features[heads], self._features[tails]], dim=1).to(device)

    def _train(self, view: TrainingView, ctx: RunContext, out_dir: Path, failed_smiles: list[int]) -> None:
        """Train on the training split with Adam, keep the epoch with the best validation score, and write
        ``model.pt`` and ``training.json`` into ``out_dir``. One loop for both objectives: one label per pair
        (cross-entropy, validation macro-F1) and label sets (``multilabel_loss``, validation recall@k)."""
        import numpy as np
        import torch

        cfg = self.config
        device = self._device()
        torch.manual_seed(ctx.seed)
        rng = np.random.default_rng(ctx.seed)
        train = list(view.train)
        if cfg.max_train is not None and cfg.max_train < len(train):
            keep = np.sort(rng.choice(len(train), size=cfg.max_train, replace=False))
            train = [train[i] for i in keep]
        if not view.valid:
            raise ConfigError("mlp needs a validation split for early stopping", "evaluate on the test split")
        objective = self._objective(view, train, rng, device)
        model = _network(cfg, len(view.task.label_space)).to(device)
        optimiser = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        generator = torch.Generator().manual_seed(ctx.seed)
        best = BestEpoch(cfg.patience)
        epochs: list[dict[str, float]] = []
        bar = TrainingProgress(
            ctx.progress,
            objective.name,
            cfg.max_epochs,
            -(-len(train) // cfg.batch_size),
            objective.metric,
            cfg.patience,
        )
        started = time.perf_counter()
        try:
            for epoch in range(cfg.max_epochs):
                t0 = time.perf_counter()
                total = _epoch(model, optimiser, objective.batch_loss, len(train), cfg.batch_size, generator, bar)
                value, shown = objective.validate(model)
                epochs.append(
                    {
                        "epoch": epoch + 1,
                        "train_loss": round(total / len(train), 5),
                        **shown,
                        "seconds": round(time.perf_counter() - t0, 2),
                    }
                )
                best.update(epoch + 1, value, model)
                bar.epoch_done(epoch + 1, time.perf_counter() - t0, value, best.value, best.epoch, best.waited)
                if best.should_stop:
                    break
        finally:
            bar.finish(len(epochs), stopped_early=best.should_stop)
        torch.save(best.state, out_dir / "model.pt")
        log = self._training_record(view, train, best, epochs, time.perf_counter() - started, device, failed_smiles)
        (out_dir / "training.json").write_text(json.dumps(log, indent=2), encoding="utf-8")

    def _training_record(
        self,
        view: TrainingView,
        train: list[Sample],
        best: BestEpoch,
        epochs: list[dict[str, float]],
        seconds: float,
        device: Any,
        failed_smiles: list[int],
    ) -> dict[str, Any]:
        """What ``training.json`` says of a training run: its data, the best epoch, the cost, every epoch."""
        import torch

        cfg = self.config
        log: dict[str, Any] = {"n_train": len(train), "n_train_available": len(view.train), "n_valid": len(view.valid)}
        if self._label_sets:
            log["multilabel_loss"] = cfg.multilabel_loss
        log["best_epoch"] = best.epoch
        log[f"best_valid_recall@{self._k}" if self._label_sets else "best_valid_macro_f1"] = best.value
        log.update(
            {
                "epochs_run": len(epochs),
                "stopped_early": len(epochs) < cfg.max_epochs,
                "train_seconds": round(seconds, 1),
                "device": str(device),
                "torch_threads": torch.get_num_threads(),
                "smiles_unparsable": failed_smiles,
                "epochs": epochs,
            }
        )
        return log

    def _objective(self, view: TrainingView, train: list[Sample], rng: Any, device: Any) -> _Objective:
        """What one training run optimises and selects on: the batch loss over the training pairs and the
        validation score, for one label per pair or for label sets (with EmerGNN's fixed negatives if asked)."""
        import numpy as np
        import torch

        from ddibench.metrics.classification import classification_scores

        cfg, n_labels = self.config, len(view.task.label_space)
        h_tr, t_tr = self._pairs(train)
        h_va, t_va = self._pairs(view.valid)
        negatives = None
        if self._label_sets:
            y_tr = torch.from_numpy(label_sets.label_matrix(train, n_labels))
            y_va = label_sets.label_matrix(view.valid, n_labels)
            if cfg.multilabel_loss == "negatives":  # one fixed negative per positive, as in EmerGNN's files
                pairs = np.stack([h_tr.numpy(), t_tr.numpy()], axis=1)
                negatives = torch.from_numpy(label_sets.corrupt_pairs(pairs, np.unique(pairs), rng))
            name, metric = f"mlp ({len(train):,} pairs, {cfg.multilabel_loss})", f"recall@{self._k}"
        else:
            y_tr = torch.tensor([s.label for s in train], dtype=torch.long)
            y_va = np.array([s.label for s in view.valid])
            name, metric = f"mlp ({len(train):,} pairs)", "macro-F1"
        cross_entropy = torch.nn.CrossEntropyLoss()

        def batch_loss(model: Any, idx: Any) -> Any:
            logits = model(self._inputs(h_tr[idx], t_tr[idx], device))
            if not self._label_sets:
                return cross_entropy(logits, y_tr[idx].to(device))
            negative_logits = (
                None if negatives is None else model(self._inputs(negatives[idx, 0], negatives[idx, 1], device))
            )
            return label_sets.loss(cfg.multilabel_loss, logits, y_tr[idx].to(device), negative_logits)

        def validate(model: Any) -> tuple[float, dict[str, float]]:
            if self._label_sets:
                recall = label_sets.recall_at_k(self._scores(model, h_va, t_va, device), y_va, self._k)
                return recall, {f"valid_recall@{self._k}": round(recall, 5)}
            scores = classification_scores(y_va, self._argmax(model, h_va, t_va, device), n_labels)
            return scores.macro_f1, {
                "valid_accuracy": round(scores.accuracy, 5),
                "valid_macro_f1": round(scores.macro_f1, 5),
            }

        return _Objective(name, metric, batch_loss, validate)

    def _argmax(self, model: Any, heads: Any, tails: Any, device: Any, chunk: int = 8192) -> Any:
        import numpy as np
        import torch

        model.eval()
        out = []
        with torch.no_grad():
            for start in range(0, len(heads), chunk):
                logits = model(self._inputs(heads[start : start + chunk], tails[start : start + chunk], device))
                out.append(logits.argmax(dim=1).cpu().numpy())
        return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)

    def _scores(self, model: Any, heads: Any, tails: Any, device: Any, chunk: int = 8192) -> Any:
        """Sigmoid scores (n, n_labels) of label-set models."""
        import numpy as np
        import torch

        model.eval()
        out = []
        with torch.no_grad():
            for start in range(0, len(heads), chunk):
                logits = model(self._inputs(heads[start : start + chunk], tails[start : start + chunk], device))
                out.append(torch.sigmoid(logits).cpu().numpy())
        return np.concatenate(out) if out else np.zeros((0, 0), dtype=np.float32)

    async def predict(self, samples: Sequence[Sample], ctx: RunContext) -> list[Prediction]:
        import torch

        heads, tails = self._pairs(samples)
        if self._label_sets:
            scores = torch.from_numpy(self._scores(self._model, heads, tails, self._device()))
            top_p, top_i = scores.topk(min(10, scores.shape[1]), dim=1)
            return [
                Prediction(
                    sample_id=sample.id,
                    ranked=[int(i) for i in ids[: self._k]],
                    trace={"top10": [[int(i), round(float(p), 5)] for i, p in zip(ids, ps)]},
                )
                for sample, ps, ids in zip(samples, top_p.tolist(), top_i.tolist())
            ]
        with torch.no_grad():
            probs = torch.softmax(self._model(self._inputs(heads, tails, self._device())), dim=1).cpu()
        top_p, top_i = probs.topk(5, dim=1)
        out = []
        for sample, ps, ids in zip(samples, top_p.tolist(), top_i.tolist()):
            out.append(
                Prediction(
                    sample_id=sample.id,
                    label=int(ids[0]),
                    ranked=[int(i) for i in ids],
                    trace={"top5": [[int(i), round(float(p), 5)] for i, p in zip(ids, ps)]},
                )
            )
        return out
