"""A yes/no system with scores for molecules (toxicity): the Tanimoto-weighted vote of the k most similar
training molecules. Its score for "yes" lets the board compute AUROC beside macro-F1.

Answer kind: one label of a yes/no task (``0`` = no, ``1`` = yes: the task's label space says so) and
``scores={"1": p}``, the probability of the positive label, on every valid prediction. Register it with
``[project.entry-points."ddibench.systems"] knn-vote = "my_adapter:NeighbourVote"``.
"""

import numpy as np

from ddibench import BaseSystem, Prediction, SystemConfig
from ddibench.chem import morgan_matrix, tanimoto_matrix


class Config(SystemConfig):
    k: int = 7  # neighbours that vote
    threshold: float = 0.5  # "yes" when the weighted share of "yes" votes reaches it


class NeighbourVote(BaseSystem):
    name = "knn-vote"
    version = "0.1.0"
    description = "Tanimoto-weighted vote of the k nearest training molecules (a worked example)"
    Config = Config
    families = ("toxicity",)
    batch_size = 64  # predict() gets up to 64 molecules at a time

    async def prepare(self, view, ctx):
        train = list(view.train)
        self.bits, _ = morgan_matrix([s.molecule.smiles for s in train])
        self.yes = np.array([s.target == 1 for s in train], dtype=float)  # targets: 0 = no, 1 = yes

    async def predict(self, samples, ctx):
        query, failed = morgan_matrix([s.molecule.smiles for s in samples])
        sims = tanimoto_matrix(query, self.bits).astype(np.float64)
        out = []
        for i, s in enumerate(samples):
            if i in failed:  # a structure RDKit cannot read: no answer rather than a guess
                out.append(Prediction.invalid(s.id, "RDKit cannot parse the SMILES"))
                continue
            top = np.argsort(-sims[i], kind="stable")[: self.config.k]
            weights = sims[i, top] + 1e-6
            p_yes = min(
                1.0, float((weights * self.yes[top]).sum() / weights.sum())
            )  # a probability: at most 1, exactly
            out.append(
                Prediction(
                    sample_id=s.id,
                    label=int(p_yes >= self.config.threshold),
                    scores={"1": p_yes},
                    trace={"neighbours": top.tolist()},
                )
            )
        return out
