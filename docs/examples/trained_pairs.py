"""A trained system for drug pairs (one interaction type per pair): logistic regression on the two drugs'
Morgan fingerprints, trained in ``prepare`` on the training split and kept in ``ctx.artifacts``.

Answer kind: one label (``Prediction.label``, an id of ``task.label_space``). Register it with
``[project.entry-points."ddibench.systems"] fp-logreg = "my_adapter:FingerprintLogReg"``.
"""

import pickle

import numpy as np

from ddibench import BaseSystem, Prediction, SystemConfig
from ddibench.chem import morgan_matrix


class Config(SystemConfig):
    max_train: int = 6000  # training pairs used (a seeded subset: minutes on a laptop CPU)
    c: float = 1.0  # inverse regularisation strength


class FingerprintLogReg(BaseSystem):
    name = "fp-logreg"
    version = "0.1.0"
    description = "logistic regression on the two drugs' Morgan fingerprints (a worked example)"
    Config = Config
    families = ("drugbank_ddi",)

    async def prepare(self, view, ctx):
        drugs = view.resources["drugs"].drugs  # every Drug of the family, indexed by node_id
        self.bits, _ = morgan_matrix([d.smiles for d in drugs], n_bits=512)
        key = {
            "system": self.name,
            "version": self.version,
            "config": self.config.model_dump(),
            "task": view.task.name,
            "data": view.task.data_sha256,
            "seed": ctx.seed,
        }  # everything the model depends on

        def train(folder):
            from sklearn.linear_model import LogisticRegression

            train = list(view.train)  # samples with their targets: label ids
            rng = np.random.default_rng(ctx.seed)
            chosen = rng.permutation(len(train))[: self.config.max_train]
            x = self.features([train[i].input for i in chosen])
            y = np.array([train[i].target for i in chosen])
            model = LogisticRegression(C=self.config.c, max_iter=300).fit(x, y)
            (folder / "model.pkl").write_bytes(pickle.dumps(model))

        folder, built = ctx.artifacts.get_or_build("fp-logreg", key, train)  # a second run trains nothing
        self.model = pickle.loads((folder / "model.pkl").read_bytes())
        self.built = built

    def features(self, pairs):
        return np.hstack([self.bits[[p.head.node_id for p in pairs]], self.bits[[p.tail.node_id for p in pairs]]])

    async def predict(self, samples, ctx):
        x = self.features([s.input for s in samples])  # samples come without targets
        labels = self.model.classes_[self.model.predict_proba(x).argmax(axis=1)]
        return [Prediction(sample_id=s.id, label=int(label)) for s, label in zip(samples, labels)]

    def run_info(self):
        return {"model_built_this_run": self.built}
