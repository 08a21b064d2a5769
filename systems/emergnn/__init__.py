"""``emergnn``: EmerGNN (flow-based GNN over the biomedical KG), reimplemented with PyTorch.

Faithful to the paper and its code: pair-wise propagation from each drug over the KG plus the known
interactions (L = 3 layers, dimension 64), pair-specific relation attention, Morgan-fingerprint drug
features for S1/S2 and learned drug embeddings for S0, softmax cross-entropy over the 86 types,
Adam (lr 1e-3), and EmerGNN's *pseudo-emerging resampling*: every epoch 20% of the training drugs
that have KG edges are treated as new, their interactions leave the graph, and the model trains on the
pairs that involve them (exactly one for S1, both for S2; a random 20% of pairs for S0). The model with
the best validation macro-F1 is kept.

Graphs follow EmerGNN's visibility rule (``ddibench.kg.split_visibility``): training sees no KG edge of
a drug outside the training pairs, validation none of a drug outside training and validation pairs;
prediction uses the whole KG with the training and validation interactions.

It also serves CBR-DDI: :meth:`EmerGNNSystem.encode` gives class probabilities and the pair
representation ``h_p = [h_uv; h_vu]``, :meth:`EmerGNNSystem.explain` the top-P relational paths by
attention (beam search), and ``feature="external"`` with :meth:`EmerGNNSystem.use_node_features` trains on
drug features the caller gives (CBR-DDI's embedded LLM descriptions) in place of Morgan fingerprints; the
checkpoint's key then holds the matrix's hash. The checkpoint is a cached artifact keyed by configuration, task data, KG
and code version; the ``cpu`` profile trains a declared budget (epochs, pairs per epoch, validation
pairs) that every manifest records.

On label-set tasks (TWOSIDES side effects) the classifier has one sigmoid output per side effect, trained
with EmerGNN's TWOSIDES objective (``multilabel_loss="negatives"``: the positive side effects of a pair
against the same side effects on a generated negative pair) or BCE over every side effect (``"bce"``),
with EmerGNN's TWOSIDES hyperparameters per setting; the model with the best validation recall@k is kept,
and a prediction ranks the side effects by score (see :mod:`ddibench.toolkit.label_sets`).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal, TypeVar

import numpy as np
from pydantic import model_serializer

from ddibench import families
from ddibench.errors import ConfigError
from ddibench.hashing import config_hash
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

TRAINING_CODE_VERSION = 2  # 2: sums of messages in CSR order (scipy-built matrices), batches prepared ahead
T = TypeVar("T")
R = TypeVar("R")
# training pairs a second on 2 CPU cores (one torch thread beside the batch-preparing thread), measured: DrugBank
# S1 epochs of ~30,000 pairs in ~92 s and drugbank_s2's 100 epochs of 2,688 pairs in 921 s; TWOSIDES S1's 120
# epochs of 2,112 pairs (with their negatives) in 2,037 s. Validation and prediction pass forward only.
CPU_TRAIN_PAIRS_PER_S = {"single": 300.0, "label_sets": 125.0}
CPU_SCORE_PAIRS_PER_S = 270.0  # drugbank_s2: an epoch that validates 1,606 pairs takes ~6 s longer
PAPER = {  # EmerGNN's per-setting hyperparameters (evaluate.py / the paper's supplement)
    "S0": {"feature": "embedding", "weight_decay": 1e-6, "batch_size": 128},
    "S1": {"feature": "morgan", "weight_decay": 1e-8, "batch_size": 32},
    "S2": {"feature": "morgan", "weight_decay": 1e-8, "batch_size": 32},
}
# EmerGNN's TWOSIDES values: S1 from TWOSIDES/evaluate.py ('emerging'), S2 from the paper's supplement (its
# weight decay is not stated there; S1's is used). dim and lr apply unless given with --config.
PAPER_TWOSIDES = {
    "S1": {"feature": "morgan", "lr": 1e-3, "weight_decay": 1e-6, "batch_size": 32, "dim": 32},
    "S2": {"feature": "morgan", "lr": 3e-3, "weight_decay": 1e-6, "batch_size": 64, "dim": 64},
}


class EmerGNNConfig(SystemConfig):
    dim: int = 64
    length: int = 3
    # "morgan", "embedding", "auto" (the paper's choice for the setting), or "external": a (drugs, d) matrix the
    # caller gives with use_node_features (CBR-DDI's description embeddings), projected to dim as Morgan features are
    feature: str = "auto"
    lr: float = 1e-3
    weight_decay: float | None = None  # None: the paper's value for the setting
    batch_size: int | None = None  # None: the paper's value for the setting
    max_epochs: int = 100
    epoch_per_test: int = 5
    known_ratio: float = 0.8  # pseudo-emerging resampling keeps this share of drugs as known
    train_pairs_per_epoch: int | None = None  # budget: a seeded subsample of each epoch's training pairs
    valid_pairs: int | None = None  # budget: model selection on a seeded subsample of validation pairs
    predict_batch: int = 64
    predict_facts: str = "train+valid"  # interactions in the prediction graph: "train+valid" (the paper) or "train"
    explain_paths: int = 0  # top-P attention paths written into each prediction's trace
    kg_edges: str | None = None  # Hetionet's full hetionet-v1.0-edges.sif.gz, to include every metaedge
    device: str = "cpu"
    threads: int | None = None
    multilabel_loss: Literal["negatives", "bce"] = "negatives"  # label-set tasks only (see ddibench.toolkit.label_sets)
    # the classifier reads [h_uv; h_vu] (the paper), or with Morgan features also the drugs' own [x_u; x_v] ("pair+drugs",
    # a diagnostic of what the flow representation misses: see the system card's TWOSIDES section)
    classifier: Literal["pair", "pair+drugs"] = "pair"

    @model_serializer(mode="wrap")
    def _dump(self, handler: Any) -> dict[str, Any]:
        return label_sets.omit_at_default(handler(self), {"multilabel_loss": "negatives", "classifier": "pair"})


class EmerGNNSystem(BaseSystem):
    name = "emergnn"
    version = "1.0.0"
    description = "EmerGNN: flow-based GNN over Hetionet + known DDIs with pair-specific relation attention"
    paper = (
        "Zhang et al., Emerging drug interaction prediction enabled by a flow-based graph neural network with biomedical network, "
        "Nat. Comput. Sci. 3:1023-1033 (2023), arXiv 2311.09261, https://arxiv.org/abs/2311.09261"
    )
    code = "https://github.com/LARS-research/EmerGNN"
    Config = EmerGNNConfig
    families = (families.DRUGBANK_DDI, families.TWOSIDES)
    batch_size = 256
    max_concurrency = 1
    config: EmerGNNConfig

    def __init__(self, config: EmerGNNConfig | None = None) -> None:
        super().__init__(config)
        self._net: Any = None
        self._graphs: dict[str, Any] = {}
        self._kg: Any = None
        self._paper = PAPER
        self._label_sets = False
        self._k = 5
        self._node_features: np.ndarray | None = None
        self.training_log: dict[str, Any] = {}

    def use_node_features(self, features: np.ndarray) -> None:
        """The drug features of ``feature="external"``: one row per drug of the task's catalogue, by node id."""
        if features.ndim != 2 or not len(features):
            raise ConfigError(f"emergnn node features of shape {features.shape} are not one row per drug")
        self._node_features = np.ascontiguousarray(features, dtype=np.float32)

    def node_features_sha256(self) -> str:
        """The hash of the external feature matrix (shape and float32 values): the checkpoint's key holds it, so a
        model trained on other features (another describer or encoder) is never loaded."""
        features = self._external_features()
        return hashlib.sha256(json.dumps(features.shape).encode() + features.tobytes()).hexdigest()

    def _external_features(self) -> np.ndarray:
        if self._node_features is None:
            raise ConfigError(
                "emergnn feature 'external' needs a node feature matrix",
                "give one with EmerGNNSystem.use_node_features, or use feature=morgan (cbr-ddi gives its descriptions')",
            )
        return self._node_features

    # -- configuration ---------------------------------------------------------------------

    def resolved(self, setting: str) -> dict[str, Any]:
        """The configuration with the paper's per-setting values filled in."""
        cfg = self.config.model_dump()
        paper = self._paper[setting]
        if cfg["feature"] == "auto":
            cfg["feature"] = paper["feature"]
        for key in ("weight_decay", "batch_size"):
            if cfg[key] is None:
                cfg[key] = paper[key]
        for key in ("dim", "lr"):  # the paper's value where it names one, unless the user gave one
            if key in paper and key not in self.config.model_fields_set:
                cfg[key] = paper[key]
        if self._label_sets:
            cfg["multilabel_loss"] = self.config.multilabel_loss
            cfg["select_by"] = f"recall@{self._k}"
        if cfg["feature"] not in ("morgan", "embedding", "external"):
            raise ConfigError(f"emergnn feature '{cfg['feature']}' is not morgan, embedding, external or auto")
        if not 1 <= cfg["length"] <= 3:
            raise ConfigError(f"emergnn length {cfg['length']} is not supported", "use 1, 2 or 3 (the paper uses 3)")
        return cfg

    def _device(self) -> Any:
        return torch_device(self.config.device, "emergnn")

    # -- graphs ------------------------------------------------------------------------------

    def _message_graph(self, kg: Any, hide: set[int], facts: np.ndarray) -> Any:
        from ddibench.systems.emergnn.walks import MessageGraph

        view = kg.without_entities(hide) if hide else kg
        head = np.concatenate([view.head, facts[:, 0]])
        tail = np.concatenate([view.tail, facts[:, 1]])
        rel = np.concatenate([view.rel, facts[:, 2]])
        return MessageGraph.from_triples(head, tail, rel, kg.n_entities, kg.n_relations)

    # -- prepare: train or load ----------------------------------------------------------------

    async def prepare(self, view: TrainingView, ctx: RunContext) -> None:
        import torch

        from ddibench.kg import load_kg

        # one core stays free for the worker thread that prepares the next batch's walk subgraphs: on 2 cores
        # torch on one thread beside it runs a step in 73 ms, on two in 106 ms (benchmarks/emergnn_step.py)
        torch.set_num_threads(self.config.threads or max(1, (os.cpu_count() or 1) - 1))
        self._label_sets = label_sets.is_label_set_task(view.task)
        self._k = label_sets.top_k(view.task)
        self._paper = PAPER_TWOSIDES if self._label_sets else PAPER
        cfg = self.resolved(view.task.setting)
        space = view.resources.get("kg_space", "drugbank")
        kg = load_kg(space, self.config.kg_edges)
        self._kg = kg.with_interactions((), templates=[lb.template for lb in view.task.label_space])
        self._n_labels = len(view.task.label_space)
        if self._label_sets:
            # rows (head, tail, pair index) and the pairs' side effects; graph facts are (head, tail, side effect)
            train, valid = _pair_rows(view.train), _pair_rows(view.valid)
            self._labels = {
                "train": label_sets.label_matrix(view.train, self._n_labels),
                "valid": label_sets.label_matrix(view.valid, self._n_labels),
            }
            train_facts, valid_facts = _facts(train, self._labels["train"]), _facts(valid, self._labels["valid"])
        else:
            train_facts = train = _triples(view.train)
            valid_facts = valid = _triples(view.valid)
        seen = {int(d) for d in train[:, :2].ravel()} | {int(d) for d in valid[:, :2].ravel()}
        # validation graph: no KG edge of a drug outside the training and validation pairs (the test drugs),
        # training interactions as facts
        self._graphs["valid"] = self._message_graph(kg, set(range(kg.n_drugs)) - seen, train_facts)
        # prediction graph: the whole KG, training and validation interactions as facts
        if self.config.predict_facts not in ("train", "train+valid"):
            raise ConfigError(f"emergnn predict_facts '{self.config.predict_facts}' is not 'train' or 'train+valid'")
        facts = (
            np.concatenate([train_facts, valid_facts])
            if len(valid) and self.config.predict_facts == "train+valid"
            else train_facts
        )
        self._graphs["predict"] = self._message_graph(kg, set(), facts)
        key = self._artifact_key(view, cfg, kg, ctx.seed)
        path, built = ctx.artifacts.get_or_build(
            "emergnn", key, lambda tmp: self._train(view, ctx, tmp, kg, train, valid, cfg)
        )
        self.training_log = json.loads((path / "training.json").read_text(encoding="utf-8"))
        self.training_log["loaded_from_cache"] = not built
        self.training_log["artifact"] = str(path)
        self.training_log["kg"] = {k: kg.card[k] for k in ("kg_edges", "missing_metaedges", "deviation")}
        self._net = self._new_net(cfg, kg, view)
        self._net.load_state_dict(torch.load(path / "model.pt", map_location="cpu", weights_only=True))
        self._net = self._net.to(self._device()).eval()

    def run_info(self) -> dict[str, Any]:
        return self.training_log

    def deviations(self) -> list[str]:
        out = [
            "propagation layers have no bias term (the paper's equations), so the flow is computed exactly on the "
            "subgraph of length-L walks between the two drugs instead of over every entity"
        ]
        if not self.config.kg_edges:
            out.append(
                "KG: Hetionet without AeG, GpCC and GpMF (993,498 of the paper's 1,690,693 edges; the inputs of those "
                "697,195 are not among the pinned sources); pass --config kg_edges=PATH to hetionet-v1.0-edges.sif.gz to "
                "include them. They cannot change this implementation's predictions: anatomy, cellular components and "
                "molecular functions have no drug neighbour, so no walk of three steps between two drugs passes one "
                "(tested); in the paper's code they reach a pair only through the propagation layers' bias"
            )
        if self._label_sets:
            out += [
                "known interactions enter the graph with their side effect as relation (EmerGNN's TWOSIDES code merges "
                "them into one 'interacts' relation weighted by the number of side effects)",
                f"model selection by validation recall@{self._k} (EmerGNN: PR-AUC against its negatives, which the task "
                "does not have)",
            ]
            if self.config.multilabel_loss == "negatives":
                out.append(
                    "negative pairs are generated once per training run from the training drugs (EmerGNN reads them from its files)"
                )
                out.append(
                    "EmerGNN's objective (multilabel_loss=negatives) scores each side effect of a pair against the same side "
                    "effect on a random pair, so it never learns which side effects are frequent: its ranking sits at or below "
                    "the popularity floor (docs/systems/emergnn.md); -C multilabel_loss=bce trains the ranking the task scores"
                )
        if self.config.feature == "external":
            out.append(
                "drug features are a matrix the caller gives (CBR-DDI: its embedded LLM descriptions), projected to dim "
                "as Morgan fingerprints are, in place of the paper's fingerprints"
            )
        if self.config.classifier == "pair+drugs":
            out.append(
                "the classifier also reads the drugs' projected Morgan features [x_u; x_v] (not the paper's: a diagnostic)"
            )
        return out

    def _artifact_key(self, view: TrainingView, cfg: dict[str, Any], kg: Any, seed: int) -> dict[str, Any]:
        """What the trained model is stored under: everything its weights depend on (the external features' hash
        only with them, so the keys of Morgan and embedding models stay what they were)."""
        key = self.artifact_key(
            view.task, seed, resolved=cfg, kg=config_hash(kg.card), training_code=TRAINING_CODE_VERSION
        )
        if cfg["feature"] == "external":
            key["node_features_sha256"] = self.node_features_sha256()
        return key

    def plan(self, view: TrainingView, samples: Sequence[Sample], ctx: PlanContext) -> list[Phase]:
        """Training (epochs, and pairs an epoch from one draw of the pseudo-new drugs) and prediction; seconds
        from the rates measured on 2 CPU cores when the device is the CPU (none declared for a GPU)."""
        self._label_sets = label_sets.is_label_set_task(view.task)
        self._k = label_sets.top_k(view.task)
        self._paper = PAPER_TWOSIDES if self._label_sets else PAPER
        cfg = self.resolved(view.task.setting)
        # external features are made in the run (CBR-DDI describes the drugs first): before then no key is known
        if ctx.artifacts is not None and (cfg["feature"] != "external" or self._node_features is not None):
            from ddibench.kg import load_kg

            kg = load_kg(view.resources.get("kg_space", "drugbank"), self.config.kg_edges)
            found = ctx.artifacts.get("emergnn", self._artifact_key(view, cfg, kg, ctx.seed))
            if found is not None:
                note = f"already trained: the model is loaded from {found}"
                return [Phase("training emergnn", epochs=cfg["max_epochs"], seconds=0.0, note=note)]
        pairs = self.epoch_pairs(view, cfg, ctx.seed)
        tests = len(range(cfg["epoch_per_test"], cfg["max_epochs"] + 1, cfg["epoch_per_test"]))
        tests += cfg["max_epochs"] % cfg["epoch_per_test"] != 0  # the last epoch is always evaluated
        valid = min(len(view.valid), cfg["valid_pairs"] or len(view.valid))
        seconds = None
        if cfg["device"] == "cpu":
            rate = CPU_TRAIN_PAIRS_PER_S["label_sets" if self._label_sets else "single"]
            seconds = cfg["max_epochs"] * pairs / rate + tests * valid / CPU_SCORE_PAIRS_PER_S
        note = f"{pairs:,} pairs an epoch, validation on {valid:,} pairs {tests} times"
        if seconds is not None:
            note += " (time: rates measured on 2 CPU cores)"
        if cfg["feature"] == "external" and self._node_features is None:
            note += "; a model trained on the same features is loaded instead, but they are made in the run"
        return [
            Phase("training emergnn", epochs=cfg["max_epochs"], seconds=seconds, note=note),
            Phase(
                "predicting",
                seconds=len(samples) / CPU_SCORE_PAIRS_PER_S if cfg["device"] == "cpu" else None,
                note=f"{len(samples):,} pairs, no LLM",
            ),
        ]

    def epoch_pairs(self, view: TrainingView, cfg: dict[str, Any], seed: int) -> int:
        """The training pairs of an epoch: the mean of 32 draws of the pseudo-new drugs among the training drugs with an edge
        in the KG (as training draws them, less the rare drug whose only edges lead to test drugs), capped by
        ``train_pairs_per_epoch``."""
        from ddibench.kg import load_kg

        train = np.array([(s.pair.head.node_id, s.pair.tail.node_id) for s in view.train], dtype=np.int64)
        if not len(train):
            return 0
        kg = load_kg(view.resources.get("kg_space", "drugbank"), self.config.kg_edges)
        in_kg = np.zeros(max(kg.n_entities, int(train.max()) + 1), dtype=bool)
        in_kg[kg.head] = True
        in_kg[kg.tail] = True
        candidates = np.array([d for d in np.unique(train) if in_kg[d]], dtype=np.int64)
        rng = np.random.default_rng(seed)
        setting, ratio = view.task.setting, cfg["known_ratio"]
        draws = [len(_pseudo_emerging(setting, train, candidates, ratio, rng)[1]) for _ in range(32)]
        pairs = round(float(np.mean(draws)))  # epochs vary (drugbank_s2: 2,688 in the first, 3,040 on average)
        return min(pairs, cfg["train_pairs_per_epoch"] or pairs)

    def _new_net(self, cfg: dict[str, Any], kg: Any, view: TrainingView) -> Any:
        from ddibench.chem import morgan_matrix
        from ddibench.systems.emergnn.model import EmerGNNNet

        fingerprints = None
        catalog = view.resources["drugs"]
        if cfg["feature"] == "morgan":
            fingerprints, _ = morgan_matrix([d.smiles for d in catalog.drugs], 2, 1024)
        elif cfg["feature"] == "external":
            fingerprints = self._external_features()
            if len(fingerprints) != len(catalog.drugs):
                raise ConfigError(
                    f"emergnn node features have {len(fingerprints)} rows for {len(catalog.drugs)} drugs",
                    "give one row per drug of the task's catalogue, in node-id order",
                )
        return EmerGNNNet(
            n_drugs=kg.n_drugs,
            n_relations=2 * kg.n_relations + 1,
            n_labels=len(view.task.label_space),
            dim=cfg["dim"],
            length=cfg["length"],
            fingerprints=fingerprints,
            drugs_in_classifier=self.config.classifier == "pair+drugs",
        )

    def _train(
        self,
        view: TrainingView,
        ctx: RunContext,
        out_dir: Path,
        kg: Any,
        train: np.ndarray,
        valid: np.ndarray,
        cfg: dict[str, Any],
    ) -> None:
        """Train with pseudo-emerging resampling, keep the best evaluated epoch, and write ``model.pt`` and
        ``training.json`` into ``out_dir``. One loop for both kinds of task: ``train``/``valid`` are (head, tail,
        label) rows (cross-entropy, validation macro-F1), or for label sets (head, tail, pair index) rows (the side
        effects of the pairs that stay known are the graph's facts; ``multilabel_loss``; validation recall@k)."""
        # over 60 lines: one training loop; the network, optimiser, scheduler, seeded generator and best epoch are
        # state every step shares, and the generator's draws must stay in this order (negatives, validation, epochs)
        import torch

        if len(valid) == 0:
            raise ConfigError("emergnn needs a validation split for model selection", "evaluate on the test split")
        setting = view.task.setting
        rng = np.random.default_rng(ctx.seed)
        torch.manual_seed(ctx.seed)
        device = self._device()
        net = self._new_net(cfg, kg, view).to(device)
        optimiser = torch.optim.Adam(net.parameters(), lr=cfg["lr"], weight_decay=cfg["weight_decay"])
        scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimiser, mode="max")
        y_train = self._labels["train"] if self._label_sets else None
        train_drugs = {int(d) for d in train[:, :2].ravel()}
        kg_train, candidates = _training_graph(kg, train_drugs)
        negatives = None
        if (
            self._label_sets and cfg["multilabel_loss"] == "negatives"
        ):  # one fixed negative per training pair, as in EmerGNN's files
            negatives = label_sets.corrupt_pairs(train[:, :2], np.array(sorted(train_drugs), dtype=np.int64), rng)
        valid_eval = valid
        if cfg["valid_pairs"] and cfg["valid_pairs"] < len(valid):
            valid_eval = valid[np.sort(rng.choice(len(valid), cfg["valid_pairs"], replace=False))]
        metric = f"valid_recall@{self._k}" if self._label_sets else "valid_macro_f1"
        validate = self._validator(net, valid_eval, cfg, device, len(view.task.label_space))
        log: list[dict[str, Any]] = []
        best = BestEpoch()  # no early stopping: the best evaluated epoch is kept
        started = time.perf_counter()
        bar: TrainingProgress | None = None  # sized from the first epoch's pairs (the resampling varies them a little)
        try:
            for epoch in range(1, cfg["max_epochs"] + 1):
                t0 = time.perf_counter()
                known, data = _pseudo_emerging(setting, train, candidates, cfg["known_ratio"], rng)
                available = len(data)
                if cfg["train_pairs_per_epoch"] and cfg["train_pairs_per_epoch"] < len(data):
                    data = data[rng.choice(len(data), cfg["train_pairs_per_epoch"], replace=False)]
                if bar is None:
                    bar = TrainingProgress(
                        ctx.progress,
                        f"emergnn ({len(data):,} pairs an epoch)",
                        cfg["max_epochs"],
                        -(-len(data) // cfg["batch_size"]),
                        f"recall@{self._k}" if self._label_sets else "macro-F1",
                    )
                graph = self._message_graph(kg_train, set(), known if y_train is None else _facts(known, y_train))
                loss = self._epoch(
                    net, optimiser, graph, data, cfg, rng, device, bar, labels=y_train, negatives=negatives
                )
                row: dict[str, Any] = {
                    "epoch": epoch,
                    "facts": int(len(known)),
                    "pairs": int(len(data)),
                    "pairs_available": int(available),
                    "loss": round(loss, 4),
                }
                if epoch % cfg["epoch_per_test"] == 0 or epoch == cfg["max_epochs"]:
                    value, shown = validate(metric)
                    scheduler.step(value)
                    row.update(shown)
                    best.update(epoch, value, net)
                row["seconds"] = round(time.perf_counter() - t0, 1)
                log.append(row)
                bar.epoch_done(epoch, row["seconds"], row.get(metric), best.value if best.epoch else None, best.epoch)
        finally:
            if bar is not None:
                bar.finish(len(log))
        torch.save(best.state, out_dir / "model.pt")
        record = {
            "setting": setting,
            "resolved_config": cfg,
            "best_epoch": best.epoch,
            f"best_{metric}": best.value,
            "valid_pairs_used": int(len(valid_eval)),
            "valid_pairs_available": int(len(valid)),
            "train_seconds": round(time.perf_counter() - started, 1),
            "device": str(device),
            "torch_threads": torch.get_num_threads(),
            "pseudo_new_candidates": int(len(candidates)),
            "epochs": log,
        }
        (out_dir / "training.json").write_text(json.dumps(record, indent=2), encoding="utf-8")

    def _validator(
        self, net: Any, pairs: np.ndarray, cfg: dict[str, Any], device: Any, n_labels: int
    ) -> Callable[[str], tuple[float, dict[str, float]]]:
        """The validation score of the network on these validation rows, and what the epoch log shows of it
        (macro-F1 and accuracy, or recall@k for label sets, under the given metric name)."""
        from ddibench.metrics.classification import classification_scores

        valid_graph = self._graphs["valid"]

        def validate(metric: str) -> tuple[float, dict[str, float]]:
            probs = self._probabilities(net, valid_graph, pairs[:, 0], pairs[:, 1], cfg, device)
            if self._label_sets:
                recall = label_sets.recall_at_k(probs, self._labels["valid"][pairs[:, 2]], self._k)
                return recall, {metric: round(recall, 5)}
            scores = classification_scores(pairs[:, 2], probs.argmax(1), n_labels)
            return scores.macro_f1, {
                "valid_macro_f1": round(scores.macro_f1, 5),
                "valid_accuracy": round(scores.accuracy, 5),
            }

        return validate

    def _epoch(
        self,
        net: Any,
        optimiser: Any,
        graph: Any,
        data: np.ndarray,
        cfg: dict[str, Any],
        rng: np.random.Generator,
        device: Any,
        bar: TrainingProgress,
        labels: np.ndarray | None = None,
        negatives: np.ndarray | None = None,
    ) -> float:
        """One pass over ``data``: (head, tail, label) rows, or (head, tail, pair index) rows with ``labels``
        (the pairs' 0/1 side effects) and, for EmerGNN's objective, each pair's generated ``negatives``."""
        import torch

        from ddibench.systems.emergnn.model import PairBatch

        net.train()
        order = rng.permutation(len(data))
        size = cfg["batch_size"]

        def prepare(batch: np.ndarray) -> tuple[np.ndarray, Any, Any]:
            pairs = PairBatch.of(graph, batch[:, 0], batch[:, 1], cfg["length"], device)
            negative = None
            if labels is not None and negatives is not None:
                neg = negatives[batch[:, 2]]
                negative = PairBatch.of(graph, neg[:, 0], neg[:, 1], cfg["length"], device)
            return batch, pairs, negative

        total = 0.0
        for batch, pairs, negative in _prefetched(
            prepare, [data[order[start : start + size]] for start in range(0, len(order), size)]
        ):
            logits, _, _ = net(pairs)
            if labels is None:
                loss = torch.nn.functional.cross_entropy(
                    logits, torch.from_numpy(batch[:, 2]).to(device), reduction="sum"
                )
            else:
                target = torch.from_numpy(labels[batch[:, 2]]).to(device)
                negative_logits = net(negative)[0] if negative is not None else None
                # the batch's mean loss, scaled like the single-label sum (the epoch reports a per-pair mean)
                loss = label_sets.loss(cfg["multilabel_loss"], logits, target, negative_logits) * len(batch)
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            total += loss.item()
            bar.step()
        return total / max(1, len(data))

    def _batches(
        self,
        graph: Any,
        heads: Sequence[int] | np.ndarray,
        tails: Sequence[int] | np.ndarray,
        cfg: dict[str, Any],
        device: Any,
        hide_pair_below: int = 0,
    ) -> Iterator[Any]:
        """``PairBatch``es of ``predict_batch`` pairs, in order, each prepared while the previous one runs."""
        from ddibench.systems.emergnn.model import PairBatch

        size = cfg["predict_batch"]
        heads, tails = np.asarray(heads, dtype=np.int64), np.asarray(tails, dtype=np.int64)
        return _prefetched(
            lambda start: PairBatch.of(
                graph, heads[start : start + size], tails[start : start + size], cfg["length"], device, hide_pair_below
            ),
            range(0, len(heads), size),
        )

    def _probabilities(
        self, net: Any, graph: Any, heads: np.ndarray, tails: np.ndarray, cfg: dict[str, Any], device: Any
    ) -> np.ndarray:
        import torch

        net.eval()
        out = []
        with torch.no_grad():
            for batch in self._batches(graph, heads, tails, cfg, device):
                out.append(self._normalise(net(batch)[0]).cpu().numpy())
        net.train()
        return np.concatenate(out) if out else np.zeros((0, 0))

    def _normalise(self, logits: Any) -> Any:
        """Class probabilities (softmax over the types), or one sigmoid score per label for label sets."""
        import torch

        return torch.sigmoid(logits) if self._label_sets else torch.softmax(logits, dim=1)

    # -- what CBR-DDI and the runner use -------------------------------------------------------------

    def encode(
        self, heads: Sequence[int], tails: Sequence[int], setting: str, graph: str = "predict", hide_own: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """Class probabilities (n, 86) and pair representations [h_uv; h_vu] (n, 2 * dim); for label sets the
        probabilities are one sigmoid score per label.

        ``hide_own`` leaves out interaction edges between each pair's own drugs (for training pairs,
        whose label is a fact of the graph), so they are encoded as a query would be.
        """
        probs, reprs, _ = self._encoded(heads, tails, setting, graph, hide_own, 0)
        return probs, reprs

    def encode_explained(
        self,
        heads: Sequence[int],
        tails: Sequence[int],
        setting: str,
        top: int,
        graph: str = "predict",
        hide_own: bool = False,
    ) -> tuple[np.ndarray, np.ndarray, list[list[dict[str, Any]]]]:
        """:meth:`encode`, and each pair's ``top`` paths as :meth:`explain` gives them, from the same walk
        subgraphs: one forward per batch, and no walk subgraph built again for a pair."""
        return self._encoded(heads, tails, setting, graph, hide_own, top)

    def explain(
        self, head: int, tail: int, setting: str, top: int = 5, graph: str = "predict", hide_own: bool = False
    ) -> list[dict[str, Any]]:
        """The ``top`` relational paths between the pair with the highest attention, verbalised."""
        import torch

        from ddibench.systems.emergnn.walks import walk_batch

        cfg = self.resolved(setting)
        message_graph = self._graphs[graph]
        # the walks alone: the attention reads only the drugs' features, so no propagation (and no tensor walks)
        walks = walk_batch(
            message_graph, np.array([head]), np.array([tail]), cfg["length"], self._n_labels if hide_own else 0
        )
        device = self._device()
        ids = torch.tensor([head], device=device), torch.tensor([tail], device=device)
        return self._paths(*ids, walks, message_graph, top)[0]

    def _encoded(
        self, heads: Sequence[int], tails: Sequence[int], setting: str, graph: str, hide_own: bool, top: int
    ) -> tuple[np.ndarray, np.ndarray, list[list[dict[str, Any]]]]:
        """Probabilities, pair representations and, when ``top`` > 0, each pair's paths (else an empty list)."""
        import torch

        cfg = self.resolved(setting)
        device = self._device()
        message_graph = self._graphs[graph]
        probs, reprs, paths = [], [], []
        with torch.no_grad():
            for batch in self._batches(message_graph, heads, tails, cfg, device, self._n_labels if hide_own else 0):
                logits, pair, _ = self._net(batch)
                probs.append(self._normalise(logits).cpu().numpy())
                reprs.append(pair.cpu().numpy())
                if top > 0:
                    paths += self._paths(batch.heads, batch.tails, batch.walks, message_graph, top)
        return np.concatenate(probs), np.concatenate(reprs), paths

    def attention_alone(self, heads: Any, tails: Any) -> list[list[np.ndarray]]:
        """Each pair's relation attention, layer by layer (one ``(1, relations)`` row each), computed for the pair
        alone (drug id tensors ``heads``, ``tails``): what its paths are scored by."""
        import torch

        net = self._net
        with torch.no_grad():
            alone = [net.attention(net.drugs(heads[i : i + 1]), net.drugs(tails[i : i + 1])) for i in range(len(heads))]
        return [[w.cpu().numpy() for w in a] for a in alone]

    def _paths(self, heads: Any, tails: Any, walks: Any, message_graph: Any, top: int) -> list[list[dict[str, Any]]]:
        """The ``top`` highest-attention paths of each pair (drug id tensors ``heads``, ``tails`` and their
        ``WalkBatch``), verbalised.

        The paths' attention is a small network over the pair's two drug features alone, which the walks do not
        enter, so it needs no propagation. It is computed for each pair on its own: a batched product could round
        its floats differently, and the paths (near-ties of their scores) with them. So the paths are the same
        whether a pair is explained alone or within a batch (``tests/test_emergnn.py`` compares them). Each pair's
        walks are searched in a piece of their own (``WalkBatch.split``): one search over a batch of 256 cases
        finds the same paths, but its arrays (12 million middle edges) leave the CPU's caches, and it took twice
        as long (14.9 against 7.2 CPU ms a case, ``benchmarks/emergnn_paths.py``)."""
        from ddibench.systems.emergnn.model import top_paths

        weights = self.attention_alone(heads, tails)
        pieces = walks.split() if len(weights) > 1 else [walks]  # one pair: its walks as they are
        return [
            [
                {
                    "score": round(score, 4),
                    "steps": [list(s) for s in steps],
                    "text": "; ".join(self._kg.verbalise(a, r, b) for a, r, b in steps),
                }
                for score, steps in top_paths(piece, w, message_graph, top)[0]
            ]
            for piece, w in zip(pieces, weights)
        ]

    async def predict(self, samples: Sequence[Sample], ctx: RunContext) -> list[Prediction]:
        setting = ctx.task.setting
        heads = [s.pair.head.node_id for s in samples]
        tails = [s.pair.tail.node_id for s in samples]
        probs, _, paths = self._encoded(heads, tails, setting, "predict", False, self.config.explain_paths)
        if self._label_sets:
            top = np.argsort(-probs, axis=1, kind="stable")[:, :10]
            return [
                Prediction(
                    sample_id=sample.id,
                    ranked=[int(k) for k in top[i, : self._k]],
                    trace={
                        "top10": [[int(k), round(float(probs[i, k]), 5)] for k in top[i]],
                        **({"paths": paths[i]} if self.config.explain_paths else {}),
                    },
                )
                for i, sample in enumerate(samples)
            ]
        top5 = np.argsort(-probs, axis=1)[:, :5]
        out = []
        for i, sample in enumerate(samples):
            trace: dict[str, Any] = {"top5": [[int(k), round(float(probs[i, k]), 5)] for k in top5[i]]}
            if self.config.explain_paths:
                trace["paths"] = paths[i]
            out.append(
                Prediction(sample_id=sample.id, label=int(top5[i, 0]), ranked=[int(k) for k in top5[i]], trace=trace)
            )
        return out


def _triples(samples: Sequence[Sample]) -> np.ndarray:
    rows = [(s.pair.head.node_id, s.pair.tail.node_id, s.label) for s in samples]
    return np.array(rows, dtype=np.int64).reshape(-1, 3)


def _pair_rows(samples: Sequence[Sample]) -> np.ndarray:
    """(head, tail, pair index) rows of label-set samples."""
    return np.array(
        [(s.pair.head.node_id, s.pair.tail.node_id, i) for i, s in enumerate(samples)], dtype=np.int64
    ).reshape(-1, 3)


def _facts(rows: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """(head, tail, label) triples of (head, tail, pair index) rows: one per label of the pair."""
    pair, label = np.nonzero(labels[rows[:, 2]])
    return np.stack([rows[pair, 0], rows[pair, 1], label], axis=1).astype(np.int64).reshape(-1, 3)


def _training_graph(kg: Any, train_drugs: set[int]) -> tuple[Any, np.ndarray]:
    """The KG without the drugs training never sees, and the drugs EmerGNN may turn pseudo-new in an epoch:
    training drugs with at least one edge in it."""
    hidden = set(range(kg.n_drugs)) - train_drugs
    kg_train = kg.without_entities(hidden) if hidden else kg
    in_kg = np.zeros(kg.n_entities, dtype=bool)
    in_kg[kg_train.head] = True
    in_kg[kg_train.tail] = True
    return kg_train, np.array(sorted(d for d in train_drugs if in_kg[d]), dtype=np.int64)


def _pseudo_emerging(
    setting: str, train: np.ndarray, candidates: np.ndarray, known_ratio: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """One epoch's (fact edges, training pairs), EmerGNN's resampling of pseudo-new drugs."""
    if setting == "S0":
        order = rng.permutation(len(train))
        n_facts = int(len(train) * known_ratio)
        return train[order[:n_facts]], train[order[n_facts:]]
    n_new = len(candidates) - int(len(candidates) * known_ratio)
    new = np.zeros(int(train[:, :2].max()) + 1, dtype=bool)
    new[rng.choice(candidates, size=n_new, replace=False)] = True
    n_new_in_pair = new[train[:, 0]].astype(int) + new[train[:, 1]].astype(int)
    facts = train[n_new_in_pair == 0]
    data = train[n_new_in_pair == (1 if setting == "S1" else 2)]
    return facts, data


def _prefetched(prepare: Callable[[T], R], items: Sequence[T]) -> Iterator[R]:
    """``prepare(item)`` for each item in order, the next one computed on a worker thread while the caller
    uses this one. A batch's walk extraction and sparse matrices (numpy and scipy, which release the GIL)
    thus overlap the previous batch's forward and backward passes; the results do not depend on it."""
    if len(items) < 2:
        yield from map(prepare, items)
        return
    with ThreadPoolExecutor(1, thread_name_prefix="emergnn-prefetch") as pool:
        pending = pool.submit(prepare, items[0])
        for item in items[1:]:
            ready = pending.result()
            pending = pool.submit(prepare, item)
            yield ready
        yield pending.result()
