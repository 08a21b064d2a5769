"""``morgan-sklearn``: Morgan fingerprints of the molecule into a scikit-learn classifier (no LLM, no graph).

The classic baseline of molecular property prediction. Each molecule is an ECFP-style Morgan bit vector
(RDKit; radius 2, 2,048 bits by default). It serves every molecule task whose declared answer is yes/no or
top-k and whose training labels it may see (:func:`learns`):

* yes/no (toxicity): a random forest (500 trees, balanced class weights) on the training molecules;
  the label is the more probable class and ``scores`` carry the probability of "yes" (so AUROC is
  reported).
* top-k (drug targets, label sets): one-vs-rest L2 logistic regression, one binary model per label
  that occurs among the training molecules' targets; the ranking is by predicted probability (a symbol
  never seen in training cannot be ranked).

``estimator`` picks the model: ``auto`` (the above), ``rf`` or ``logreg`` for both. The fitted model is a
cached artifact keyed by configuration, task data, seed and code version: a second run fits nothing.

``train_fraction`` (default 1.0, all of them) trains on a seeded subset of the training molecules, as the
CLADD paper's trained baselines are fine-tuned with 10% of the training labels (``--config
train_fraction=0.1``): see :func:`label_fraction`, which ``gin`` shares. The run's ``system_info`` records
how many molecules were used (``n_train``) of how many (``n_train_available``).
"""

from __future__ import annotations

import json
import math
import pickle
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_serializer

from ddibench import BaseSystem, Prediction, RunContext, Sample, SystemConfig, Task, TrainingView
from ddibench.chem import morgan_matrix
from ddibench.errors import ConfigError
from ddibench.toolkit.label_sets import omit_at_default

TRAINING_CODE_VERSION = 1
# ``train_fraction``, the share of the training labels a run trains on (the CLADD paper's baselines: 0.1), is
# left out of a configuration's dump at its default, so runs made before the option existed keep their config
# hash, run id and cached model, and their bundles still verify (``verify`` checks that the recorded
# configuration is the dump of itself)
TRAIN_FRACTION_DEFAULT = {"train_fraction": 1.0}
SPLIT_SALT = {"train": 0, "valid": 1}  # one random stream per split, so the two subsets are drawn independently


def learns(task: Task) -> bool:
    """Whether a model trained on the training molecules' labels answers ``task`` (what ``morgan-sklearn`` and
    ``gin`` serve): a molecule in, a yes/no (one classifier) or top-k answer (one binary model per label) out, and
    training labels to learn from."""
    return task.input_kind == "molecule" and task.answer.kind in ("yes_no", "top_k") and task.training_labels_visible


def fraction_size(n: int, fraction: float) -> int:
    """How many of ``n`` items a fraction keeps: ``fraction * n`` rounded half up, at least one (``n`` when
    ``n`` is 0 or the fraction is 1)."""
    if fraction >= 1 or n == 0:
        return n
    return min(n, max(1, math.floor(fraction * n + 0.5)))


def label_fraction(
    samples: Sequence[Sample], fraction: float, seed: int, *, stratify: bool, split: str = "train"
) -> list[Sample]:
    """A seeded subset of a split's molecules with ``fraction`` of its labels, in the split's order.

    ``stratify`` (yes/no tasks): each label keeps :func:`fraction_size` of its own molecules, so both
    classes stay present (at least one positive and one negative when the split has both). Otherwise (the
    label-set drug-target tasks, where no one label stratifies a molecule) a plain random subset of
    :func:`fraction_size` molecules. The same seed, fraction and split give the same subset; ``fraction``
    1 returns every molecule in order, so the default trains exactly as before the option existed.
    """
    import numpy as np

    if fraction >= 1:
        return list(samples)
    rng = np.random.default_rng([seed & 0xFFFFFFFFFFFFFFFF, SPLIT_SALT.get(split, 2)])
    if not stratify:
        keep = rng.choice(len(samples), size=fraction_size(len(samples), fraction), replace=False).tolist()
    else:
        by_label: dict[int, list[int]] = {}
        for i, s in enumerate(samples):
            by_label.setdefault(s.label, []).append(i)
        keep = []
        for label in sorted(by_label):
            members = by_label[label]
            keep += rng.choice(members, size=fraction_size(len(members), fraction), replace=False).tolist()
    return [samples[i] for i in sorted(int(i) for i in keep)]


class MorganSklearnConfig(SystemConfig):
    radius: int = 2
    n_bits: int = 2048
    estimator: Literal["auto", "rf", "logreg"] = "auto"
    n_estimators: int = 500  # random forest
    C: float = 1.0  # logistic regression (inverse L2 strength)
    top_k: int = 5  # target symbols returned per molecule
    n_jobs: int = 2
    train_fraction: float = Field(
        1.0, gt=0, le=1, allow_inf_nan=False
    )  # train on this share of the training molecules (seeded; see label_fraction)

    @model_serializer(mode="wrap")
    def _dump(self, handler: Any) -> dict[str, Any]:
        return omit_at_default(handler(self), TRAIN_FRACTION_DEFAULT)


class MorganSklearnSystem(BaseSystem):
    name = "morgan-sklearn"
    version = "1.0.0"
    description = "Morgan fingerprints -> scikit-learn (random forest for yes/no, one-vs-rest logistic regression for target sets)"
    Config = MorganSklearnConfig
    variant_keys = ("train_fraction",)  # a run on fewer labels is shown apart from the full-label run
    batch_size = 4096
    max_concurrency = 1
    config: MorganSklearnConfig

    def __init__(self, config: MorganSklearnConfig | None = None) -> None:
        super().__init__(config)
        self._model: Any = None
        self.multilabel = False
        self.log: dict[str, Any] = {}

    def supports(self, task: Task) -> bool:
        return learns(task)

    def estimator_kind(self) -> str:
        if self.config.estimator != "auto":
            return self.config.estimator
        return "logreg" if self.multilabel else "rf"

    def _features(self, samples: Sequence[Sample]) -> Any:
        bits, _ = morgan_matrix([s.molecule.smiles for s in samples], self.config.radius, self.config.n_bits)
        return bits

    async def prepare(self, view: TrainingView, ctx: RunContext) -> None:
        self.multilabel = view.task.answer.kind == "top_k"  # a label set per molecule: one binary model per label
        if not view.train:
            raise ConfigError(
                f"task {view.task.name} has no training molecules", "morgan-sklearn needs a training split"
            )
        key = self.artifact_key(
            view.task, ctx.seed, config=self.config.model_dump(mode="json"), training_code=TRAINING_CODE_VERSION
        )
        path, built = ctx.artifacts.get_or_build("morgan-sklearn", key, lambda tmp: self._fit(view, ctx, tmp))
        with open(path / "model.pkl", "rb") as fh:
            self._model = pickle.load(fh)  # noqa: S301 - our own artifact, written by _fit under a content-addressed key
        self.log = json.loads((path / "training.json").read_text(encoding="utf-8"))
        self.log["loaded_from_cache"] = not built
        self.log["artifact"] = str(path)

    def run_info(self) -> dict[str, Any]:
        return self.log

    def _fit(self, view: TrainingView, ctx: RunContext, out: Path) -> None:
        import numpy as np
        from sklearn.ensemble import RandomForestClassifier
        from sklearn.linear_model import LogisticRegression
        from sklearn.multiclass import OneVsRestClassifier
        from sklearn.preprocessing import MultiLabelBinarizer

        started = time.perf_counter()
        train = label_fraction(view.train, self.config.train_fraction, ctx.seed, stratify=not self.multilabel)
        x = self._features(train)
        kind = self.estimator_kind()
        cfg = self.config
        if kind == "rf":
            base: Any = RandomForestClassifier(
                n_estimators=cfg.n_estimators, class_weight="balanced", n_jobs=cfg.n_jobs, random_state=ctx.seed
            )
        else:
            base = LogisticRegression(
                C=cfg.C, max_iter=2000, class_weight="balanced" if not self.multilabel else None, random_state=ctx.seed
            )
        if self.multilabel:
            n_labels = len(view.task.label_space)
            binarizer = MultiLabelBinarizer(classes=list(range(n_labels)))
            y = binarizer.fit_transform([list(s.label_ids) for s in train])
            seen = np.flatnonzero(y.sum(axis=0) > 0)
            model: Any = {
                "kind": "multilabel",
                "labels": seen.tolist(),
                "model": OneVsRestClassifier(base, n_jobs=cfg.n_jobs).fit(x, y[:, seen]),
            }
            info = {"labels_learned": len(seen), "labels_total": n_labels}
        else:
            y = np.array([s.label for s in train])
            model = {"kind": "binary", "model": base.fit(x, y)}
            info = {"positives": int(y.sum())}
        with open(out / "model.pkl", "wb") as fh:
            pickle.dump(model, fh)
        log = {
            "estimator": kind,
            "n_train": len(train),
            **(
                {"train_fraction": cfg.train_fraction, "n_train_available": len(view.train)}
                if cfg.train_fraction < 1
                else {}
            ),
            "fit_seconds": round(time.perf_counter() - started, 2),
            **info,
        }
        (out / "training.json").write_text(json.dumps(log, indent=2), encoding="utf-8")

    async def predict(self, samples: Sequence[Sample], ctx: RunContext) -> list[Prediction]:
        import numpy as np

        x = self._features(samples)
        model = self._model
        out = []
        if model["kind"] == "binary":
            classes = list(model["model"].classes_)
            probs = model["model"].predict_proba(x)
            p_yes = probs[:, classes.index(1)] if 1 in classes else np.zeros(len(samples))
            for s, p in zip(samples, p_yes.tolist()):
                out.append(
                    Prediction(sample_id=s.id, label=int(p >= 0.5), scores={"0": round(1 - p, 6), "1": round(p, 6)})
                )
            return out
        labels = np.array(model["labels"])
        probs = model["model"].predict_proba(x)
        k = self.config.top_k
        for s, row in zip(samples, probs):
            order = np.argsort(-row, kind="stable")[:k]
            out.append(
                Prediction(
                    sample_id=s.id,
                    ranked=[int(labels[i]) for i in order],
                    trace={"top": [[int(labels[i]), round(float(row[i]), 5)] for i in order]},
                )
            )
        return out
