"""A ranking system for drug pairs (TWOSIDES: the five most likely of 200 side effects): each side effect
scored by how often it occurs in the training pairs of either drug, then by its overall frequency. On S1
(one drug seen in training) that beats the popularity floor; on S2 neither drug was seen, and it is the floor.

Answer kind: a ranking (``Prediction.ranked``: label ids, most likely first; the task's k, 5 here, first
distinct ids are scored). Register it with
``[project.entry-points."ddibench.systems"] drug-cooccurrence = "my_adapter:DrugCooccurrence"``.
"""

from collections import Counter, defaultdict

from ddibench import BaseSystem, Prediction, SystemConfig


class Config(SystemConfig):
    depth: int = 20  # how many labels to rank (the metrics read the first k)


class DrugCooccurrence(BaseSystem):
    name = "drug-cooccurrence"
    version = "0.1.0"
    description = "side effects of either drug's training pairs, then overall frequency (a worked example)"
    Config = Config
    families = ("twosides",)

    async def prepare(self, view, ctx):
        self.by_drug = defaultdict(Counter)
        overall = Counter()
        for s in view.train:  # a label-set task: each target is a tuple of label ids
            for drug in (s.pair.head.node_id, s.pair.tail.node_id):
                self.by_drug[drug].update(s.target)
            overall.update(s.target)
        self.popular = [label for label, _ in overall.most_common()]

    async def predict(self, samples, ctx):
        out = []
        for s in samples:
            counts = self.by_drug[s.pair.head.node_id] + self.by_drug[s.pair.tail.node_id]
            known = [label for label, _ in counts.most_common()]
            ranked = list(dict.fromkeys(known + self.popular))[: self.config.depth]
            out.append(Prediction(sample_id=s.id, ranked=ranked, trace={"from_the_drugs": len(known)}))
        return out
