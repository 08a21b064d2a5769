"""DrugBank DDI tasks: an ordered drug pair -> one of 86 interaction types.

All tasks share the EmerGNN/SumGNN id space (drugs 0..1709, relations 0..85): the drug catalog and
the label space are source data (:mod:`ddibench.data.drugbank`); this family adds the splits.

The task definitions live in ``tasks.toml`` beside this module; this module turns them into
:class:`DrugBankTask` objects and verifies, each time a task loads, what the definition promises:
split sizes, the S0/S1/S2 property over both drug columns, DDI-Ben's drug sets, EmerGNN's test-drug
list, that no (head, tail, label) triple is in both training and evaluation splits, and for DDI-Ben's
approval-time split the approval dates of each split's drugs: no test drug approved before a training drug.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from datetime import date
from functools import cache, partial
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

from ddibench import families
from ddibench.data import SourceFile, fetch, source
from ddibench.data.drugbank import (
    N_DRUGS,
    N_LABELS,
    DrugCatalog,
    approval_date,
    catalog_sources,
    load_catalog,
    load_labels,
)
from ddibench.drug_settings import UNSEEN, UNSEEN_WORDS, drugs_of, n_unseen, setting_check, unseen_counts
from ddibench.errors import DataError
from ddibench.schema import DrugPair, LabelSpace, Sample, sample_id
from ddibench.task import (
    AnswerSpec,
    Check,
    FamilySpec,
    Lazy,
    Splits,
    Task,
    TaskData,
    TaskSpec,
    load_task_specs,
    require,
)

if TYPE_CHECKING:
    from ddibench.evaluation import Evaluator

FAMILY = families.DRUGBANK_DDI
SPLITS = ("train", "valid", "test")


class DrugBankSpec(TaskSpec):
    """A ``[tasks.NAME]`` table of ``tasks.toml``: upstream's split files as published, and what every load checks."""

    setting: Literal["S0", "S1", "S2"]
    dataset: str  # the pinned dataset (ddibench/data/sources.toml) the files below belong to
    train: str
    valid: str
    test: str
    sizes: dict[str, int]  # pairs per split
    unseen: dict[str, tuple[int, int, int]]  # pairs of valid/test with 0, 1, 2 drugs absent from every training pair
    drug_sets: dict[str, str] = {}  # DDI-Ben's drug-level split: the drug ids of each split
    drug_set_sizes: dict[str, int] = {}
    drug_set_violations: dict[str, int] = {}  # pairs upstream that break its own drug-set definition, kept as published
    new_drug_list: dict[str, str] = {}  # EmerGNN's list of new drugs, per split
    # DDI-Ben's approval-time split: the drugs of each split's pairs, and the first and last approval date among them
    # ("YYYY/MM/DD" as DDI-Ben's sheet writes it); no test drug may be approved before a training drug
    pair_drugs: dict[str, int] = {}
    approval_dates: dict[str, tuple[str, str]] = {}
    undated_drugs: int = 0  # catalog drugs without an exact approval date: none may occur in the split's pairs

    def split_file(self, split: str) -> str:
        return {"train": self.train, "valid": self.valid, "test": self.test}[split]


FAMILY_SPEC, SPECS = load_task_specs(__name__, FamilySpec, DrugBankSpec)


# ---------------------------------------------------------------------------------------------
# Split files


@cache
def read_triples(src: SourceFile) -> tuple[tuple[int, int, int], ...]:
    """``head tail label`` lines of a split file, with ids range-checked."""
    path = fetch(src)
    out = []
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            parts = line.split()
            if not parts:
                continue
            try:
                h, t, r = (int(x) for x in parts)
            except ValueError:
                raise DataError(
                    f"{src.path}:{lineno}: expected 'head tail label' integers, got {line.strip()!r}"
                ) from None
            if not (0 <= h < N_DRUGS and 0 <= t < N_DRUGS and 0 <= r < N_LABELS):
                raise DataError(f"{src.path}:{lineno}: id out of range in {line.strip()!r}")
            out.append((h, t, r))
    return tuple(out)


@cache
def read_id_list(src: SourceFile) -> frozenset[int]:
    path = fetch(src)
    return frozenset(int(x) for x in path.read_text(encoding="utf-8").split())


def _pairs(triples: Iterable[tuple[int, int, int]]) -> list[tuple[int, int]]:
    """The (head, tail) pairs of ``head tail label`` triples."""
    return [(h, t) for h, t, _ in triples]


def _drugs_of(triples: Iterable[tuple[int, int, int]]) -> set[int]:
    return drugs_of(_pairs(triples))


# ---------------------------------------------------------------------------------------------
# Tasks


class DrugBankTask(Task):
    family = FAMILY
    resource_keys = ("drugs", "labels", "train_drugs", "interactions")
    answer = AnswerSpec(kind="label")  # one of the 86 interaction types

    def __init__(self, name: str, spec: DrugBankSpec) -> None:
        self.name = name
        self.spec = spec
        self.version = spec.version
        self.setting = spec.setting
        self.title = spec.title
        self.recipe_version = FAMILY_SPEC.recipe_version

    # -- definition --------------------------------------------------------------------------

    def split_source(self, split: str) -> SourceFile:
        return source(self.spec.dataset, self.spec.split_file(split))

    @property
    def sources(self) -> tuple[SourceFile, ...]:
        ds = self.spec.dataset
        files = [self.split_source(s) for s in SPLITS]
        files += [source(ds, p) for p in self.spec.drug_sets.values()]
        files += [source(ds, p) for p in self.spec.new_drug_list.values()]
        return catalog_sources() + tuple(files)

    @property
    def label_space(self) -> LabelSpace:
        return load_labels()

    @property
    def deviations(self) -> tuple[str, ...]:
        expected = UNSEEN[self.setting]
        out = []
        for split in ("valid", "test"):
            counts = self.spec.unseen[split]
            total = sum(counts)
            for k, n in enumerate(counts):
                if k != expected and n:
                    out.append(
                        f"{n:,} of {total:,} {split} pairs contain {UNSEEN_WORDS[k]} absent from training pairs "
                        f"(setting {self.setting} expects {UNSEEN_WORDS[expected]}); kept as published upstream, "
                        f"scored in the breakdown n_unseen={k}"
                    )
        if self.spec.drug_sets and self.setting == "S1" and any(self.spec.unseen[s][2] for s in ("valid", "test")):
            out.append(
                "in DDI-Ben's drug-level split a drug of the training drug set can have no training interaction; "
                "pairs with such a drug are S2 from a model's point of view"
            )
        for split, n in self.spec.drug_set_violations.items():
            out.append(
                f"{n} {split} pairs break DDI-Ben's own drug-set definition of {self.setting} upstream; kept as published"
            )
        return tuple(out)

    def evaluator(self) -> Evaluator:
        from ddibench.evaluation import ClassificationEvaluator  # imported when scoring: 'list tasks' stays fast

        return ClassificationEvaluator(self.label_space)

    def card(self) -> dict[str, Any]:
        card = super().card()
        card["n_labels"] = N_LABELS
        card["expected_sizes"] = dict(self.spec.sizes)
        return card

    # -- loading -----------------------------------------------------------------------------

    def build(self) -> TaskData:
        catalog = load_catalog()
        triples = {split: read_triples(self.split_source(split)) for split in SPLITS}
        train_drugs = _drugs_of(triples["train"])
        checks = [Check(c.name, c.ok, c.detail) for c in catalog.checks]
        checks += self._check_splits(triples, train_drugs)
        if self.spec.approval_dates:
            checks += approval_checks(self.spec, triples, catalog)
        require(self.name, checks, "tasks/drugbank/tasks.toml")
        # each split's samples are built (and their ids hashed) when first read: a run on the test split
        # that trains nothing, or resumes, never builds the 134,641 training samples of drugbank_s0
        splits = Splits(
            {
                split: Lazy(partial(self._split_samples, split, rows, catalog, train_drugs))
                for split, rows in triples.items()
            }
        )
        labels = self.label_space
        return TaskData(
            splits=splits,
            resources={
                "drugs": catalog,
                "labels": labels,
                "train_drugs": frozenset(train_drugs),
                # what a knowledge base (SQL table, graph, corpus) may hold: the training interactions
                "interactions": Lazy(lambda: (splits["train"], labels)),
            },
            checks=checks,
            stats=self._stats(triples, train_drugs, catalog) if self.spec.approval_dates else {},
        )

    def _stats(
        self, triples: dict[str, tuple[tuple[int, int, int], ...]], train_drugs: set[int], catalog: DrugCatalog
    ) -> dict[str, Any]:
        """What ``ddibench data stats`` prints for a time split: the test pairs by drugs unseen in training, and the
        approval dates of each split's drugs."""
        counts = unseen_counts(_pairs(triples["test"]), train_drugs)
        stats: dict[str, Any] = {f"test pairs, {UNSEEN_WORDS[k]} unseen": counts[k] for k in (1, 2)}
        ranges = _date_ranges(triples, catalog)
        stats["drugs approved (train / valid / test)"] = " / ".join(
            f"{ranges[s][0][:4]}-{ranges[s][1][:4]}" for s in SPLITS
        )
        return stats

    def _split_samples(
        self, split: str, rows: tuple[tuple[int, int, int], ...], catalog: DrugCatalog, train_drugs: set[int]
    ) -> tuple[Sample, ...]:
        return tuple(self._samples(split, rows, catalog, train_drugs))

    def _samples(
        self, split: str, rows: tuple[tuple[int, int, int], ...], catalog: DrugCatalog, train_drugs: set[int]
    ) -> Iterable[Sample]:
        drugs = catalog.drugs
        for h, t, r in rows:
            head, tail = drugs[h], drugs[t]
            yield Sample(
                id=sample_id("ddi", f"{head.drugbank_id}>{tail.drugbank_id}:{r}"),
                input=DrugPair(head, tail),
                target=r,
                clusters=(head.drugbank_id, tail.drugbank_id),
                meta=MappingProxyType({"split": split, "n_unseen": n_unseen(h, t, train_drugs)}),
            )

    def _check_splits(self, triples: dict[str, tuple[tuple[int, int, int], ...]], train_drugs: set[int]) -> list[Check]:
        spec = self.spec
        checks = []
        sizes = {s: len(triples[s]) for s in SPLITS}
        checks.append(
            Check(
                "split sizes",
                sizes == spec.sizes,
                ", ".join(f"{s} {sizes[s]:,} (expected {spec.sizes[s]:,})" for s in SPLITS),
            )
        )
        train_set = set(triples["train"])
        for split in ("valid", "test"):
            checks.append(setting_check(self.setting, split, _pairs(triples[split]), train_drugs, spec.unseen[split]))
            overlap = sum(1 for row in triples[split] if row in train_set)
            checks.append(
                Check(f"no train triple in {split}", overlap == 0, f"{overlap} shared (head, tail, label) triples")
            )
        if spec.drug_sets:
            checks += self._check_drug_sets(triples)
        for split, rel in spec.new_drug_list.items():
            listed = read_id_list(source(spec.dataset, rel))
            per_pair = Counter((h in listed) + (t in listed) for h, t, _ in triples[split])
            checks.append(
                Check(
                    f"{split} pairs contain exactly one listed new drug",
                    set(per_pair) == {1},
                    f"{len(listed)} listed drugs; pairs by number of listed drugs: {dict(sorted(per_pair.items()))}",
                )
            )
        return checks

    def _check_drug_sets(self, triples: dict[str, tuple[tuple[int, int, int], ...]]) -> list[Check]:
        spec = self.spec
        sets = {s: read_id_list(source(spec.dataset, p)) for s, p in spec.drug_sets.items()}
        sizes = {s: len(v) for s, v in sets.items()}
        checks = [
            Check("drug set sizes", sizes == spec.drug_set_sizes, f"{sizes} (expected {spec.drug_set_sizes})"),
            Check(
                "drug sets disjoint and complete",
                not (sets["train"] & sets["valid"] or sets["train"] & sets["test"] or sets["valid"] & sets["test"])
                and len(sets["train"] | sets["valid"] | sets["test"]) == N_DRUGS,
                f"{len(sets['train'] | sets['valid'] | sets['test'])} drugs in the union",
            ),
            Check(
                "training pairs use training drugs only",
                _drugs_of(triples["train"]) <= sets["train"],
                f"{len(_drugs_of(triples['train']))} of {len(sets['train'])} training-set drugs occur in training pairs",
            ),
        ]
        expected_new = UNSEEN[self.setting]
        for split in ("valid", "test"):
            own = sets[split]
            bad = 0
            for h, t, _ in triples[split]:
                in_own = (h in own) + (t in own)
                in_train = (h in sets["train"]) + (t in sets["train"])
                if in_own != expected_new or in_own + in_train != 2:
                    bad += 1
            allowed = spec.drug_set_violations.get(split, 0)
            checks.append(
                Check(
                    f"DDI-Ben drug sets ({split})",
                    bad == allowed,
                    f"{bad} pairs without exactly {expected_new} {split}-set drug(s) and the rest training-set drugs "
                    f"(declared {allowed})",
                )
            )
        return checks


def _dated_drugs(
    triples: dict[str, tuple[tuple[int, int, int], ...]], catalog: DrugCatalog
) -> dict[str, dict[int, date | None]]:
    """Each split's drugs with their approval date (None where the sheet gives no exact date)."""
    return {
        split: {d: approval_date(catalog.approval_dates[d]) for d in sorted(_drugs_of(rows))}
        for split, rows in triples.items()
    }


def _date_ranges(
    triples: dict[str, tuple[tuple[int, int, int], ...]], catalog: DrugCatalog
) -> dict[str, tuple[str, str]]:
    """The first and last approval date among each split's drugs, as the sheet writes them."""
    out = {}
    for split, drugs in _dated_drugs(triples, catalog).items():
        dates = sorted(d for d in drugs.values() if d is not None)
        out[split] = (dates[0].strftime("%Y/%m/%d"), dates[-1].strftime("%Y/%m/%d")) if dates else ("", "")
    return out


def approval_checks(
    spec: DrugBankSpec, triples: dict[str, tuple[tuple[int, int, int], ...]], catalog: DrugCatalog
) -> list[Check]:
    """DDI-Ben's approval-time split: each split's drugs and their approval dates as declared, no drug without an
    exact date in any split (DDI-Ben leaves them out), and no test drug approved before a training drug."""
    dated = _dated_drugs(triples, catalog)
    n_drugs = {s: len(dated[s]) for s in SPLITS}
    ranges = _date_ranges(triples, catalog)
    declared = {s: tuple(spec.approval_dates.get(s, ("", ""))) for s in SPLITS}
    undated_catalog = Counter(t.strip() or "empty" for t in catalog.approval_dates if approval_date(t) is None)
    undated_used = sorted({d for s in SPLITS for d, when in dated[s].items() if when is None})
    latest_train = max((d for d in dated["train"].values() if d is not None), default=None)
    older = sorted(
        (when, catalog[d].drugbank_id)
        for d, when in dated["test"].items()
        if when is not None and latest_train is not None and when < latest_train
    )
    if older:
        shown = ", ".join(f"{db_id} {when:%Y/%m/%d}" for when, db_id in older[:3])
        order_detail = (
            f"{len(older)} test drug(s) approved before the latest training drug ({latest_train:%Y/%m/%d}): {shown}"
        )
    else:
        order_detail = f"earliest test drug {ranges['test'][0]}, latest training drug {ranges['train'][1]}"
    return [
        Check(
            "drugs per split",
            n_drugs == spec.pair_drugs,
            ", ".join(f"{s} {n_drugs[s]}" for s in SPLITS) + f" (expected {spec.pair_drugs})",
        ),
        Check(
            "approval dates per split",
            ranges == declared,
            ", ".join(f"{s} {ranges[s][0]} to {ranges[s][1]}" for s in SPLITS)
            + ("" if ranges == declared else f" (declared {declared})"),
        ),
        Check(
            "no drug without an approval date",
            not undated_used and sum(undated_catalog.values()) == spec.undated_drugs,
            f"{sum(undated_catalog.values())} catalog drugs have no exact date (declared {spec.undated_drugs}: "
            + ", ".join(f"{n} {text!r}" for text, n in undated_catalog.most_common())
            + f"); {len(undated_used)} of them in the split pairs",
        ),
        Check("test drugs approved after training drugs", not older and latest_train is not None, order_detail),
    ]


TASKS: dict[str, DrugBankTask] = {name: DrugBankTask(name, spec) for name, spec in SPECS.items()}

__all__ = [
    "TASKS",
    "DrugBankTask",
    "approval_checks",
    "DrugCatalog",
    "load_catalog",
    "load_labels",
    "read_triples",
]  # catalog and labels re-exported from ddibench.data.drugbank
