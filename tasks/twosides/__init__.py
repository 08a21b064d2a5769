"""TWOSIDES side-effect tasks: a drug pair known to interact -> the five most likely of 200 side effects.

The CBR-DDI paper's TWOSIDES task (appendix B.3) on EmerGNN's split: every sample is a positive pair of
EmerGNN's evaluation files with its set of side effects; there are no negatives, and a system returns
a ranked list of side effects (Recall@5 and NDCG@5). The id space (604 drugs, 200 side effects) is
source data (:mod:`ddibench.data.twosides`); this family adds the splits.

The task definitions live in ``tasks.toml`` beside this module. EmerGNN's TWOSIDES training files are
not available, so the training split is *recovered* (:func:`recover_training`): the positive pairs of
every pinned evaluation file whose two drugs are both training drugs of the task's seed. Each time a
task loads it verifies, by code, what the definition promises: split sizes and triplet counts, the drug
roles of the seed, that validation and test pairs hold the seed's new drugs as the setting says, that no
training pair holds a validation or test drug or is itself an evaluation pair, and the S1/S2 property
over both drug columns of the recovered training pairs.
"""

from __future__ import annotations

import pickle
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from ddibench import families
from ddibench.data import SourceFile, fetch, source
from ddibench.data.twosides import N_DRUGS, N_LABELS, TwosidesCatalog, catalog_sources, load_catalog, load_labels
from ddibench.drug_settings import (
    UNSEEN,
    UNSEEN_WORDS,
    drugs_of,
    n_unseen,
    setting_check,
    setting_holds,
)
from ddibench.errors import DataError
from ddibench.schema import DrugPair, LabelSpace, Sample, sample_id
from ddibench.task import AnswerSpec, Check, FamilySpec, Lazy, Task, TaskData, TaskSpec, load_task_specs, require

if TYPE_CHECKING:
    from ddibench.evaluation import Evaluator

FAMILY = families.TWOSIDES
SPLITS = ("train", "valid", "test")
K = 5  # the task asks for the five most likely side effects


class TwosidesFamilySpec(FamilySpec):
    """The ``[family]`` table: the files whose positive pairs are pooled to recover the training pairs, and the drug
    roles (train/valid/test drugs) every seed has."""

    pool: tuple[tuple[str, str], ...]  # (dataset, path) of each pooled file
    drug_roles: dict[str, int]


class TwosidesSpec(TaskSpec):
    """A ``[tasks.NAME]`` table: an EmerGNN seed's evaluation files, and what every load checks."""

    setting: Literal["S1", "S2"]
    seed: int  # EmerGNN's split seed: it fixes the drug roles, hence the recovered training pairs
    valid: tuple[str, str]  # (dataset, path)
    test: tuple[str, str]
    valid_equals: tuple[str, str] | None = None  # another copy of the validation file, checked equal
    sizes: dict[str, int]  # pairs per split
    triplets: dict[str, int]  # (pair, side effect) triplets per split
    paper_train_triplets: int  # EmerGNN's training triplets for this seed (its Suppl. Table 1)
    unseen: dict[str, tuple[int, int, int]]  # pairs of valid/test with 0, 1, 2 drugs absent from every training pair


FAMILY_SPEC, SPECS = load_task_specs(__name__, TwosidesFamilySpec, TwosidesSpec)


@dataclass(frozen=True, slots=True)
class Pair:
    """A positive drug pair and its side effects (label ids, ascending)."""

    head: int
    tail: int
    labels: tuple[int, ...]


# ---------------------------------------------------------------------------------------------
# Reading the pinned files


def _multi_hot(text: str, where: str) -> tuple[int, ...]:
    # "0,1,0,...": 200 one-character entries at even positions, commas at odd ones
    if len(text) != 2 * N_LABELS - 1 or text[1::2] != "," * (N_LABELS - 1) or not set(text[::2]) <= {"0", "1"}:
        raise DataError(f"{where}: expected {N_LABELS} comma-separated 0/1 side-effect flags")
    flags = np.frombuffer(text[::2].encode("ascii"), dtype=np.uint8) == ord("1")
    labels = tuple(int(i) for i in np.flatnonzero(flags))
    if not labels:
        raise DataError(f"{where}: a positive pair without any side effect")
    return labels


@cache
def read_emergnn_ddi(src: SourceFile) -> tuple[Pair, ...]:
    """The positive pairs of an EmerGNN TWOSIDES ``*_ddi.txt`` file.

    Lines are ``head<TAB>tail<TAB>200 flags<TAB>y``; each positive (y = 1) is followed by its negative
    (y = 0: one drug replaced, the same flags), which this task does not use.
    """
    out: list[Pair] = []
    expect_negative_of: Pair | None = None
    with open(fetch(src), encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            parts = line.rstrip("\n").split("\t")
            where = f"{src.path}:{lineno}"
            if len(parts) != 4 or parts[3] not in ("0", "1"):
                raise DataError(f"{where}: expected 'head<TAB>tail<TAB>flags<TAB>y'")
            try:
                h, t = int(parts[0]), int(parts[1])
            except ValueError:
                raise DataError(f"{where}: drug ids are not integers") from None
            if not (0 <= h < N_DRUGS and 0 <= t < N_DRUGS):
                raise DataError(f"{where}: drug id out of range 0..{N_DRUGS - 1}")
            labels = _multi_hot(parts[2], where)
            if parts[3] == "1":
                if expect_negative_of is not None:
                    raise DataError(f"{where}: two positives in a row (each positive is followed by its negative)")
                expect_negative_of = Pair(h, t, labels)
                out.append(expect_negative_of)
            else:
                if expect_negative_of is None or labels != expect_negative_of.labels:
                    raise DataError(f"{where}: a negative that does not follow its positive")
                expect_negative_of = None
    return tuple(out)


class _NoClasses(pickle.Unpickler):
    """TextDDI's pickles hold plain lists of strings and integers: anything else is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise DataError(
            f"pickle refers to {module}.{name}; TextDDI's split files hold plain lists only",
            "the pinned file is not TextDDI's",
        )


@cache
def read_textddi(src: SourceFile) -> tuple[Pair, ...]:
    """The positive pairs of a TextDDI TWOSIDES pickle: ``[pos_h, pos_t, neg_h, neg_t, [200 flags]]`` rows."""
    with open(fetch(src), "rb") as fh:
        rows = _NoClasses(fh).load()
    out = []
    for i, row in enumerate(rows if isinstance(rows, list) else []):
        where = f"{src.path}[{i}]"
        if not (isinstance(row, list) and len(row) == 5 and isinstance(row[4], list) and len(row[4]) == N_LABELS):
            raise DataError(f"{where}: expected [pos_h, pos_t, neg_h, neg_t, {N_LABELS} flags]")
        h, t = int(row[0]), int(row[1])
        if not (0 <= h < N_DRUGS and 0 <= t < N_DRUGS) or not set(row[4]) <= {0, 1}:
            raise DataError(f"{where}: drug id or side-effect flag out of range")
        labels = tuple(i for i, flag in enumerate(row[4]) if flag)
        if not labels:
            raise DataError(f"{where}: a positive pair without any side effect")
        out.append(Pair(h, t, labels))
    if not out:
        raise DataError(f"{src.path}: no rows", "the pinned file is not TextDDI's")
    return tuple(out)


def read_pairs(dataset: str, path: str) -> tuple[Pair, ...]:
    src = source(dataset, path)
    return read_textddi(src) if path.endswith(".pkl") else read_emergnn_ddi(src)


def role_sources(seed: int) -> tuple[SourceFile, SourceFile]:
    """EmerGNN's KG deltas of a seed: edges of its validation drugs and of its test drugs."""
    return source("emergnn-twosides", f"data/S1_{seed}/valid_KG.txt"), source(
        "emergnn-twosides", f"data/S1_{seed}/test_KG.txt"
    )


@cache
def drug_roles(seed: int) -> dict[int, str]:
    """Each drug's role in EmerGNN's seed: "valid" or "test" for the drugs on drug-entity edges of the
    seed's ``valid_KG.txt`` / ``test_KG.txt`` (edges EmerGNN hides from training), "train" for the rest."""
    roles = dict.fromkeys(range(N_DRUGS), "train")
    for role, src in zip(("valid", "test"), role_sources(seed)):
        for line in fetch(src).read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            h, t, _ = (int(x) for x in line.split())
            if (h < N_DRUGS) != (t < N_DRUGS):  # a drug-entity edge: the drug is one the split hides
                drug = h if h < N_DRUGS else t
                if roles[drug] not in ("train", role):
                    raise DataError(
                        f"drug {drug} is both a validation and a test drug of seed {seed}",
                        "the KG delta files disagree",
                    )
                roles[drug] = role
    return roles


@dataclass(frozen=True)
class Pool:
    """The distinct positive pairs of every pooled evaluation file."""

    pairs: dict[tuple[int, int], tuple[int, ...]]
    files: int
    rows: int
    conflicts: int  # pairs listed with different side effects in different files
    both_orientations: int  # pairs listed as (a, b) and as (b, a)


@cache
def pool() -> Pool:
    pairs: dict[tuple[int, int], tuple[int, ...]] = {}
    rows = conflicts = 0
    files = FAMILY_SPEC.pool
    for dataset, path in files:
        for p in read_pairs(dataset, path):
            rows += 1
            known = pairs.setdefault((p.head, p.tail), p.labels)
            conflicts += known != p.labels
    both = sum(1 for h, t in pairs if h < t and (t, h) in pairs)
    return Pool(pairs, len(files), rows, conflicts, both)


def pool_sources() -> tuple[SourceFile, ...]:
    return tuple(source(dataset, path) for dataset, path in FAMILY_SPEC.pool)


def recover_training(seed: int) -> tuple[Pair, ...]:
    """The leak-free training pairs of a seed: pooled pairs whose two drugs are training drugs, by (head, tail)."""
    roles = drug_roles(seed)
    return tuple(
        Pair(h, t, labels)
        for (h, t), labels in sorted(pool().pairs.items())
        if roles[h] == "train" and roles[t] == "train"
    )


# ---------------------------------------------------------------------------------------------
# Checks (also used on their own, e.g. on a planted leak)


def _ids(pairs: Iterable[Pair]) -> list[tuple[int, int]]:
    """The (head, tail) ids of ``pairs``."""
    return [(p.head, p.tail) for p in pairs]


def setting_checks(setting: str, splits: dict[str, tuple[Pair, ...]], roles: dict[int, str]) -> list[Check]:
    """What the setting forbids, checked on the pairs themselves.

    * every training pair joins two training drugs of the seed (no validation or test drug at all);
    * validation/test pairs hold exactly the setting's number of the split's new drugs, the rest training drugs;
    * over the drugs of the training pairs (both columns): no S1 evaluation pair has both drugs seen, no
      S2 evaluation pair has any drug seen;
    * no evaluation pair is a training pair, in either orientation.
    """
    checks = []
    train = splits["train"]
    bad_train = [p for p in train if roles[p.head] != "train" or roles[p.tail] != "train"]
    checks.append(
        Check(
            "training pairs use training drugs only",
            not bad_train,
            f"{len(bad_train)} of {len(train):,} training pairs hold a validation or test drug"
            + (f" (e.g. {bad_train[0].head}-{bad_train[0].tail})" if bad_train else ""),
        )
    )
    expected = UNSEEN[setting]
    train_drugs = drugs_of(_ids(train))
    train_keys = {(p.head, p.tail) for p in train}
    for split in ("valid", "test"):
        pairs = splits[split]
        misfit = sum(
            1
            for p in pairs
            if (
                (roles[p.head] == split) + (roles[p.tail] == split),
                (roles[p.head] == "train") + (roles[p.tail] == "train"),
            )
            != (expected, 2 - expected)
        )
        checks.append(
            Check(
                f"{split} pairs hold {UNSEEN_WORDS[expected]} of the {split} drugs",
                misfit == 0,
                f"{misfit} of {len(pairs):,} pairs do not have exactly {expected} {split} drug(s) and the rest training drugs",
            )
        )
        checks.append(setting_holds(setting, split, _ids(pairs), train_drugs))
        shared = sum(1 for p in pairs if (p.head, p.tail) in train_keys or (p.tail, p.head) in train_keys)
        checks.append(
            Check(
                f"no training pair in {split}",
                shared == 0,
                f"{shared} {split} pairs are training pairs (either orientation)",
            )
        )
    return checks


# ---------------------------------------------------------------------------------------------
# Tasks


class TwosidesTask(Task):
    family = FAMILY
    resource_keys = ("drugs", "labels", "train_drugs", "kg_space", "interactions")
    answer = AnswerSpec(kind="top_k", k=K)  # the K most likely of the side effects

    def __init__(self, name: str, spec: TwosidesSpec) -> None:
        self.name = name
        self.spec = spec
        self.version = spec.version
        self.setting = spec.setting
        self.seed = spec.seed
        self.title = spec.title
        self.recipe_version = FAMILY_SPEC.recipe_version

    # -- definition --------------------------------------------------------------------------

    @property
    def sources(self) -> tuple[SourceFile, ...]:
        own = [source(*self.spec.valid), source(*self.spec.test)]
        if self.spec.valid_equals is not None:
            own.append(source(*self.spec.valid_equals))
        files = {f.relpath: f for f in (*catalog_sources(), *role_sources(self.seed), *pool_sources(), *own)}
        return tuple(files.values())

    @property
    def label_space(self) -> LabelSpace:
        return load_labels()

    @property
    def deviations(self) -> tuple[str, ...]:
        spec = self.spec
        n_train, triplets, paper = spec.sizes["train"], spec.triplets["train"], spec.paper_train_triplets
        out = [
            f"training split recovered, not EmerGNN's train_ddi.txt (not available): {n_train:,} pairs with {triplets:,} "
            f"(pair, side effect) triplets of the paper's {paper:,} for seed {self.seed} ({triplets / paper:.1%}); a non-random "
            "subset (the training-drug pairs that also occur in another seed's or setting's evaluation files), so drug and "
            "side-effect frequencies differ from the original training set",
            f"one seed ({self.seed}) instead of EmerGNN's five",
            "no negative pairs: every sample is a pair known to interact (the CBR-DDI top-5 task); systems that train on "
            "negatives generate their own",
        ]
        if self.setting == "S1":
            out.append(
                "S1 uses EmerGNN's seed 1234 (TextDDI's copy of its S1 test split), not seed 1 as CBR-DDI does: the seed-1 "
                "S1 test file is not available"
            )
        expected = UNSEEN[self.setting]
        for split in ("valid", "test"):
            counts = spec.unseen[split]
            for k, n in enumerate(counts):
                if k > expected and n:
                    out.append(
                        f"{n:,} of {sum(counts):,} {split} pairs contain {UNSEEN_WORDS[k]} absent from the recovered training "
                        f"pairs (setting {self.setting} expects {UNSEEN_WORDS[expected]}): their training drug has no recovered "
                        f"pair; scored in the breakdown n_unseen={k}"
                    )
        return tuple(out)

    def evaluator(self) -> Evaluator:
        from ddibench.evaluation import RankingEvaluator  # imported when scoring: 'list tasks' stays fast

        # Recall@5 is primary: the paper's first TWOSIDES metric, and it does not depend on the order within
        # the five, which an LLM's list of names does not reliably express; NDCG@5 is reported beside it.
        return RankingEvaluator(
            self.label_space, k=self.answer.k, metrics=("recall", "ndcg"), primary="recall", breakdown_key="n_unseen"
        )

    def card(self) -> dict[str, Any]:
        card = super().card()
        card["n_labels"] = N_LABELS
        card["k"] = K
        card["seed"] = self.seed
        card["expected_sizes"] = dict(self.spec.sizes)
        card["expected_triplets"] = dict(self.spec.triplets)
        card["paper_train_triplets"] = self.spec.paper_train_triplets
        return card

    # -- loading -----------------------------------------------------------------------------

    def split_pairs(self) -> dict[str, tuple[Pair, ...]]:
        return {
            "train": recover_training(self.seed),
            "valid": read_pairs(*self.spec.valid),
            "test": read_pairs(*self.spec.test),
        }

    def build(self) -> TaskData:
        catalog = load_catalog()
        roles = drug_roles(self.seed)
        pairs = self.split_pairs()
        checks = [Check(c.name, c.ok, c.detail) for c in catalog.checks]
        checks += self.check(pairs, roles)
        require(self.name, checks, "tasks/twosides/tasks.toml")
        train_drugs = drugs_of(_ids(pairs["train"]))
        splits = {split: tuple(self._samples(split, rows, catalog, train_drugs)) for split, rows in pairs.items()}
        labels = self.label_space
        return TaskData(
            splits=splits,
            resources={
                "drugs": catalog,
                "labels": labels,
                "train_drugs": frozenset(train_drugs),
                "kg_space": "twosides",
                # what a knowledge base (SQL table, graph, corpus) may hold: the training interactions
                "interactions": Lazy(lambda: (splits["train"], labels)),
            },
            checks=checks,
        )

    def _samples(
        self, split: str, rows: tuple[Pair, ...], catalog: TwosidesCatalog, train_drugs: set[int]
    ) -> Iterable[Sample]:
        drugs, cids = catalog.drugs, catalog.cids
        for p in rows:
            yield Sample(
                id=sample_id("twosides", f"{cids[p.head]}>{cids[p.tail]}:{','.join(map(str, p.labels))}"),
                input=DrugPair(drugs[p.head], drugs[p.tail]),
                target=p.labels,
                clusters=(cids[p.head], cids[p.tail]),
                meta=MappingProxyType({"split": split, "n_unseen": n_unseen(p.head, p.tail, train_drugs)}),
            )

    def check(self, pairs: dict[str, tuple[Pair, ...]], roles: dict[int, str]) -> list[Check]:
        """Every check of the definition on these pairs and drug roles."""
        spec = self.spec
        checks = []
        role_counts = Counter(roles.values())
        declared_roles = dict(FAMILY_SPEC.drug_roles)
        checks.append(
            Check(
                f"drug roles of seed {self.seed}",
                dict(role_counts) == declared_roles,
                f"{dict(sorted(role_counts.items()))} (expected {declared_roles})",
            )
        )
        found = pool()
        checks.append(
            Check(
                "pooled pairs agree",
                found.conflicts == 0 and found.both_orientations == 0,
                f"{len(found.pairs):,} distinct positive pairs in {found.files} files ({found.rows:,} rows); {found.conflicts} listed "
                f"with different side effects, {found.both_orientations} in both orientations",
            )
        )
        sizes = {s: len(pairs[s]) for s in SPLITS}
        triplets = {s: sum(len(p.labels) for p in pairs[s]) for s in SPLITS}
        checks.append(
            Check(
                "split sizes",
                sizes == spec.sizes and triplets == spec.triplets,
                ", ".join(
                    f"{s} {sizes[s]:,} pairs / {triplets[s]:,} triplets (expected {spec.sizes[s]:,} / {spec.triplets[s]:,})"
                    for s in SPLITS
                ),
            )
        )
        covered = {label for p in pairs["train"] for label in p.labels}
        checks.append(
            Check("every side effect occurs in training", len(covered) == N_LABELS, f"{len(covered)} of {N_LABELS}")
        )
        if spec.valid_equals is not None:
            other = read_pairs(*spec.valid_equals)
            checks.append(
                Check(
                    "validation file equals its copy",
                    other == pairs["valid"],
                    f"{spec.valid_equals[1]}: {len(other):,} pairs, {'the same' if other == pairs['valid'] else 'different'} pairs and side effects in the same order",
                )
            )
        checks += setting_checks(self.setting, pairs, roles)
        train_drugs = drugs_of(_ids(pairs["train"]))
        for split in ("valid", "test"):
            checks.append(setting_check(self.setting, split, _ids(pairs[split]), train_drugs, spec.unseen[split]))
        return checks


TASKS: dict[str, TwosidesTask] = {name: TwosidesTask(name, spec) for name, spec in SPECS.items()}

__all__ = [
    "TASKS",
    "Pair",
    "TwosidesTask",
    "drug_roles",
    "pool",
    "read_pairs",
    "recover_training",
    "setting_checks",
]
