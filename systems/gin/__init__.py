"""``gin``: a graph isomorphism network over the molecular graph (torch-geometric), trained on the training split.

The graph baseline of molecular property prediction (Xu et al. 2019; with bond features as in Hu et al.
2020). A molecule becomes a graph with torch-geometric's ``from_smiles`` (9 categorical atom features,
3 bond features, each embedded and summed); ``layers`` GINE convolutions (each an MLP with batch norm
and ReLU, residual, dropout), mean pooling over atoms, and a linear head, by the answer the task declares
(it serves every molecule task with a yes/no or top-k answer and training labels):

* yes/no (toxicity): one logit, binary cross-entropy; the label is "yes" when its probability reaches
  0.5, and ``scores`` carry that probability (AUROC is reported);
* top-k (drug targets): one logit per label (target symbol), binary cross-entropy over the label set; the ranking is
  by predicted probability.

Adam with early stopping on the validation loss (``patience`` epochs), keeping the best epoch. The
checkpoint is a cached artifact keyed by configuration, task data, seed and code version. What a run
may spend is a profile budget (``cpu``: fewer epochs; GPU profiles train on CUDA).

``train_fraction`` (default 1.0) trains on a seeded subset of the labelled molecules, as the CLADD paper's
trained baselines are fine-tuned with 10% of the training labels (``--config train_fraction=0.1``); the
subset is ``morgan-sklearn``'s :func:`ddibench.systems.fingerprint.label_fraction` (stratified by label on
yes/no tasks), and the validation split that stops training early is cut to the same fraction, so model
selection sees no more labels than training. ``system_info`` records the molecules used and available.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from pydantic import Field, model_serializer

from ddibench import (
    BaseSystem,
    BestEpoch,
    Prediction,
    RunContext,
    Sample,
    SystemConfig,
    Task,
    TrainingProgress,
    TrainingView,
)
from ddibench.errors import ConfigError
from ddibench.profiles import torch_device
from ddibench.system import Phase, PlanContext
from ddibench.systems.fingerprint import TRAIN_FRACTION_DEFAULT, label_fraction, learns
from ddibench.toolkit.label_sets import omit_at_default

TRAINING_CODE_VERSION = 1


class GINConfig(SystemConfig):
    hidden: int = 128
    layers: int = 4
    dropout: float = 0.2
    lr: float = 1e-3
    weight_decay: float = 0.0
    batch_size: int = 64
    max_epochs: int = 100
    patience: int = 15
    top_k: int = 5
    device: str = "cpu"
    threads: int | None = None
    # train (and stop early) on this share of the labelled molecules, seeded; left out of the dump at 1.0
    train_fraction: float = Field(1.0, gt=0, le=1, allow_inf_nan=False)

    @model_serializer(mode="wrap")
    def _dump(self, handler: Any) -> dict[str, Any]:
        return omit_at_default(handler(self), TRAIN_FRACTION_DEFAULT)


def _network(cfg: GINConfig, n_out: int) -> Any:
    import torch
    from torch import nn
    from torch_geometric.nn import GINEConv, global_mean_pool
    from torch_geometric.utils.smiles import e_map, x_map

    class GIN(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.atom: nn.ModuleList = nn.ModuleList(nn.Embedding(len(v), cfg.hidden) for v in x_map.values())
            self.bond = nn.ModuleList(
                nn.ModuleList(nn.Embedding(len(v), cfg.hidden) for v in e_map.values()) for _ in range(cfg.layers)
            )
            self.convs = nn.ModuleList(
                GINEConv(
                    nn.Sequential(
                        nn.Linear(cfg.hidden, 2 * cfg.hidden),
                        nn.BatchNorm1d(2 * cfg.hidden),
                        nn.ReLU(),
                        nn.Linear(2 * cfg.hidden, cfg.hidden),
                    )
                )
                for _ in range(cfg.layers)
            )
            self.norms = nn.ModuleList(nn.BatchNorm1d(cfg.hidden) for _ in range(cfg.layers))
            self.dropout = nn.Dropout(cfg.dropout)
            self.head = nn.Linear(cfg.hidden, n_out)

        def forward(self, data: Any) -> Any:
            h = sum(emb(data.x[:, i]) for i, emb in enumerate(self.atom))
            for conv, norm, bond in zip(self.convs, self.norms, self.bond):
                edge = (
                    sum(emb(data.edge_attr[:, i]) for i, emb in enumerate(cast(nn.ModuleList, bond)))
                    if data.edge_attr.numel()
                    else torch.zeros(0, cfg.hidden)
                )
                h = h + self.dropout(torch.relu(norm(conv(h, data.edge_index, edge))))
            return self.head(global_mean_pool(h, data.batch))

    return GIN()


def molecule_graphs(smiles: Sequence[str]) -> tuple[list[Any], list[int]]:
    """torch-geometric graphs of the molecules, and the indices RDKit or the featuriser could not read
    (those become a single carbon atom so that every molecule still gets a prediction)."""
    import torch
    from torch_geometric.data import Data
    from torch_geometric.utils import from_smiles

    graphs, failed = [], []
    for i, smi in enumerate(smiles):
        try:
            graph = from_smiles(smi)
            if graph.x.numel() == 0:
                raise ValueError("no atoms")
        except (ValueError, AttributeError, RuntimeError):
            failed.append(i)
            x = torch.zeros(1, 9, dtype=torch.long)
            x[0, 0] = 6
            graph = Data(
                x=x, edge_index=torch.zeros(2, 0, dtype=torch.long), edge_attr=torch.zeros(0, 3, dtype=torch.long)
            )
        graph.smiles = None
        graphs.append(graph)
    return graphs, failed


class GINSystem(BaseSystem):
    name = "gin"
    version = "1.0.0"
    description = (
        "graph isomorphism network (GINE, torch-geometric) over the molecular graph, trained on the training split"
    )
    Config = GINConfig
    variant_keys = ("train_fraction",)  # a run on fewer labels is shown apart from the full-label run
    batch_size = 4096
    max_concurrency = 1
    config: GINConfig

    def __init__(self, config: GINConfig | None = None) -> None:
        super().__init__(config)
        self._model: Any = None
        self.multilabel = False
        self.n_out = 1
        self.log: dict[str, Any] = {}

    def supports(self, task: Task) -> bool:
        return learns(task)

    def _device(self) -> Any:
        return torch_device(self.config.device, "gin")

    def _targets(self, samples: Sequence[Sample]) -> Any:
        import torch

        if not self.multilabel:
            return torch.tensor([[float(s.label)] for s in samples])
        y = torch.zeros(len(samples), self.n_out)
        for i, s in enumerate(samples):
            y[i, list(s.label_ids)] = 1.0
        return y

    async def prepare(self, view: TrainingView, ctx: RunContext) -> None:
        import torch

        torch.set_num_threads(self.config.threads or os.cpu_count() or 1)
        self.multilabel = view.task.answer.kind == "top_k"  # a label set per molecule: one output per label
        self.n_out = len(view.task.label_space) if self.multilabel else 1
        if not view.train or not view.valid:
            raise ConfigError(
                f"task {view.task.name} lacks a training or validation split",
                "gin trains on train and stops early on valid",
            )
        key = self.artifact_key(
            view.task, ctx.seed, config=self.config.model_dump(mode="json"), training_code=TRAINING_CODE_VERSION
        )
        path, built = ctx.artifacts.get_or_build("gin", key, lambda tmp: self._train(view, ctx, tmp))
        self.log = json.loads((path / "training.json").read_text(encoding="utf-8"))
        self.log["loaded_from_cache"] = not built
        self.log["artifact"] = str(path)
        model = _network(self.config, self.n_out)
        model.load_state_dict(torch.load(path / "model.pt", map_location="cpu", weights_only=True))
        self._model = model.to(self._device()).eval()

    def run_info(self) -> dict[str, Any]:
        return self.log

    def plan(self, view: TrainingView, samples: Sequence[Sample], ctx: PlanContext) -> list[Phase]:
        """Training: at most ``max_epochs`` epochs (early stopping may end it sooner) over the training molecules."""
        cfg = self.config
        stratify = view.task.answer.kind == "yes_no"  # one label per molecule to stratify by (not a label set)
        n_train = len(label_fraction(view.train, cfg.train_fraction, 0, stratify=stratify))  # the count is seed-free
        note = f"{n_train:,} training molecules, batch {cfg.batch_size}, patience {cfg.patience} (epochs: at most)"
        return [Phase("training gin", epochs=cfg.max_epochs, note=note)]

    def _loader(self, samples: Sequence[Sample], shuffle: bool, seed: int, with_targets: bool = True) -> Any:
        import torch
        from torch_geometric.loader import DataLoader

        graphs, failed = molecule_graphs([s.molecule.smiles for s in samples])
        if with_targets:
            for graph, y in zip(graphs, self._targets(samples)):
                graph.y = y.unsqueeze(0)
        generator = torch.Generator().manual_seed(seed)
        return DataLoader(graphs, batch_size=self.config.batch_size, shuffle=shuffle, generator=generator), failed

    def _labelled(self, view: TrainingView, seed: int) -> tuple[list[Sample], list[Sample], dict[str, Any]]:
        """The molecules training and early stopping read, and what the run records of the fraction.

        The CLADD paper fine-tunes its trained baselines with 10% of the training labels; we follow it by
        training on that share of the training molecules (``train_fraction``), and cut the validation split
        (early stopping) to the same share, drawn the same way, so that no more labels choose the model either.
        """
        fraction, stratify = self.config.train_fraction, not self.multilabel
        train = label_fraction(view.train, fraction, seed, stratify=stratify)
        valid = label_fraction(view.valid, fraction, seed, stratify=stratify, split="valid")
        if fraction >= 1:
            return train, valid, {}  # the default's record is as it was before the option existed
        record = {
            "train_fraction": fraction,
            "n_train_available": len(view.train),
            "n_valid_available": len(view.valid),
        }
        return train, valid, record

    def _train(self, view: TrainingView, ctx: RunContext, out: Path) -> None:
        import torch

        cfg = self.config
        device = self._device()
        torch.manual_seed(ctx.seed)
        train_set, valid_set, fraction_log = self._labelled(view, ctx.seed)
        train, train_failed = self._loader(train_set, True, ctx.seed)
        valid, _ = self._loader(valid_set, False, ctx.seed)
        model = _network(cfg, self.n_out).to(device)
        optimiser = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        loss_fn = torch.nn.BCEWithLogitsLoss()
        best = BestEpoch(cfg.patience, lower_is_better=True)
        epochs: list[dict[str, float]] = []
        bar = TrainingProgress(
            ctx.progress, f"gin ({len(train_set):,} molecules)", cfg.max_epochs, len(train), "loss", cfg.patience
        )
        started = time.perf_counter()
        try:
            for epoch in range(cfg.max_epochs):
                t0 = time.perf_counter()
                model.train()
                total, n = 0.0, 0
                for batch in train:
                    if batch.num_graphs < 2:
                        continue  # batch norm needs two molecules
                    batch = batch.to(device)
                    loss = loss_fn(model(batch), batch.y)
                    optimiser.zero_grad()
                    loss.backward()
                    optimiser.step()
                    total += loss.item() * batch.num_graphs
                    n += batch.num_graphs
                    bar.step()
                valid_loss = self._loss(model, valid, device)
                epochs.append(
                    {
                        "epoch": epoch + 1,
                        "train_loss": round(total / max(n, 1), 5),
                        "valid_loss": round(valid_loss, 5),
                        "seconds": round(time.perf_counter() - t0, 2),
                    }
                )
                best.update(epoch + 1, valid_loss, model)
                bar.epoch_done(epoch + 1, time.perf_counter() - t0, valid_loss, best.value, best.epoch, best.waited)
                if best.should_stop:
                    break
        finally:
            bar.finish(len(epochs), stopped_early=best.should_stop)
        torch.save(best.state, out / "model.pt")
        log = {
            "n_train": len(train_set),
            "n_valid": len(valid_set),
            **fraction_log,
            "best_epoch": best.epoch,
            "best_valid_loss": best.value,
            "epochs_run": len(epochs),
            "train_seconds": round(time.perf_counter() - started, 1),
            "device": str(device),
            "torch_threads": torch.get_num_threads(),
            "graphs_unreadable": train_failed,
            "epochs": epochs,
        }
        (out / "training.json").write_text(json.dumps(log, indent=2), encoding="utf-8")

    @staticmethod
    def _loss(model: Any, loader: Any, device: Any) -> float:
        import torch

        model.eval()
        total, n = 0.0, 0
        with torch.no_grad():
            for batch in loader:
                batch = batch.to(device)
                total += float(
                    torch.nn.functional.binary_cross_entropy_with_logits(model(batch), batch.y, reduction="sum")
                )
                n += batch.y.numel()
        return total / max(n, 1)

    async def predict(self, samples: Sequence[Sample], ctx: RunContext) -> list[Prediction]:
        import torch

        loader, failed = self._loader(samples, False, ctx.seed, with_targets=False)
        device = self._device()
        probs = []
        with torch.no_grad():
            for batch in loader:
                probs.append(torch.sigmoid(self._model(batch.to(device))).cpu())
        p = torch.cat(probs).numpy()
        out = []
        unreadable = set(failed)
        for i, s in enumerate(samples):
            trace: dict[str, Any] = {"graph_unreadable": True} if i in unreadable else {}
            if not self.multilabel:
                yes = float(p[i, 0])
                out.append(
                    Prediction(
                        sample_id=s.id,
                        label=int(yes >= 0.5),
                        scores={"0": round(1 - yes, 6), "1": round(yes, 6)},
                        trace=trace,
                    )
                )
            else:
                order = p[i].argsort()[::-1][: self.config.top_k]
                trace["top"] = [[int(j), round(float(p[i, j]), 5)] for j in order]
                out.append(Prediction(sample_id=s.id, ranked=[int(j) for j in order], trace=trace))
        return out
