"""The memorisation probe: does a model recall the sentence DrugBank records about a named drug pair?

``ddibench probe memorisation -m SPEC`` asks a model, with no context, for DrugBank's interaction
sentence about each of a seeded sample of pairs (one fixed, short prompt: :data:`PROMPT`; greedy, at
temperature 0, at most :data:`MAX_TOKENS` tokens), maps each answer to one of the 86 interaction types with
:class:`~ddibench.evaluation.text_scorers.LabelRecovery` (the QA tasks' matcher) and counts how often the
recorded type comes back. Four slices of ``n`` pairs each, drawn with the seed and disjoint:

* ``s2_train`` — pairs of ``drugbank_s2``'s training split;
* ``s2_test`` — pairs of ``drugbank_s2``'s test split;
* ``time_test`` — pairs of ``drugbank_time``'s test split (among the 159 drugs approved last, 2011-2022);
* ``control`` — for each ``s2_train`` pair, the same head drug with another drug such that the pair has no
  recorded interaction anywhere in DrugBank (``drugbank_s0``'s three splits hold all 192,284 triples), scored
  against the type of the original pair: what the model says about the head drug whatever its partner (the prior).

The pair-specific recall is ``s2_train`` minus ``control``, paired over the same heads. A type recovered by
embedding similarity alone is weak evidence (the closest of 86 sentences is always some type), so every
rate is given twice: counting every recovery, and counting only template and string matches (``strict``).
Intervals are i.i.d. BCa bootstraps over pairs (:mod:`ddibench.metrics.bootstrap`); the difference
resamples the pairs of ``s2_train`` with their controls. The sampled pairs rarely share a drug, which is why
the probe resamples pairs rather than drugs.

The result (:class:`ProbeResult`, schema :data:`SCHEMA_VERSION`) is data: a shipped copy lives in
``results/probes/<model slug>.json`` (:func:`model_slug`), where ``ddibench board check`` validates it
(:func:`probe_problems`) and the board shows it beside the runs of the same model.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ddibench._version import __version__
from ddibench.hashing import sha256_text

SCHEMA_VERSION = 1
PROMPT = (
    "From memory: DrugBank records one sentence about the interaction between {head} and {tail}, "
    "naming both drugs and the effect one has on the other. "
    "Write that sentence, in DrugBank's words, and nothing else."
)
MAX_TOKENS = 64
TEMPERATURE = 0.0
SLICES: dict[str, str] = {
    "s2_train": "drugbank_s2 train: pairs a model may have read (and systems train on)",
    "s2_test": "drugbank_s2 test: pairs of two drugs unseen in training",
    "time_test": "drugbank_time test: pairs among the drugs approved last (2011-2022)",
    "control": "the heads of s2_train, each with a drug it has no recorded interaction with, scored against "
    "the s2_train pair's type",
}
SOURCES = {
    "s2_train": ("drugbank_s2", "train"),
    "s2_test": ("drugbank_s2", "test"),
    "time_test": ("drugbank_time", "test"),
}
ALL_PAIRS = "drugbank_s0"  # its train + valid + test hold every recorded triple
STRICT = ("template", "string")  # the matches that are evidence of the sentence itself
MATCHES = ("template", "string", "embedding", "empty answer")
MAX_PROBE_BYTES = 4 * 2**20  # a shipped probe file (n=500: about 1 MB)
_SLUG = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Interval(_Strict):
    value: float
    """The estimate: a share of pairs in [0, 1] (a rate) or a difference of two shares in [-1, 1]."""
    ci_low: float
    ci_high: float


class SliceResult(_Strict):
    name: Literal["s2_train", "s2_test", "time_test", "control"]
    description: str
    n: int = Field(ge=1)
    recovered: int = Field(ge=0)
    """Pairs whose recorded type came back, by any match."""
    strict_recovered: int = Field(ge=0)
    """Pairs whose recorded type came back by a template or string match."""
    rate: Interval
    strict_rate: Interval
    matches: dict[str, int]
    """How the answers were mapped to a type, by match kind (every answer, recovered or not)."""


class PairRecord(_Strict):
    slice: Literal["s2_train", "s2_test", "time_test", "control"]
    head_id: str
    tail_id: str
    head: str
    tail: str
    gold: int = Field(ge=0, le=85)
    """The recorded type (for a control pair: the type of the s2_train pair with the same head)."""
    original_tail_id: str | None = None
    """A control pair's s2_train partner (None in the other slices)."""
    answer: str
    recovered: int | None = Field(default=None, ge=0, le=85)
    match: Literal["template", "string", "embedding", "empty answer"]


class TaskUsed(_Strict):
    name: str
    version: str
    data_sha256: str
    splits: list[str]


class ProbeModel(_Strict):
    spec: str
    """The model as runs record it (a run's manifest, the board's model column)."""
    identity: dict[str, Any]
    """Its identity as the runner records it: provider, model, weights sha256 or revision, training cutoff."""


class ProbeResult(_Strict):
    schema_version: Literal[1] = 1  # SCHEMA_VERSION
    probe: Literal["memorisation"] = "memorisation"
    ddibench_version: str
    created: str
    model: ProbeModel
    prompt: str
    prompt_sha256: str
    generation: dict[str, float | int]
    seed: int
    n: int = Field(ge=1)
    tasks: list[TaskUsed]
    recovery: dict[str, Any]
    """How answers were mapped to types: the matcher, its string threshold and its encoder's identity."""
    bootstrap: dict[str, Any]
    slices: list[SliceResult]
    pair_specific: Interval
    """s2_train minus control (every match), paired over the same heads."""
    strict_pair_specific: Interval
    """The same, counting template and string matches only."""
    pairs: list[PairRecord]

    @model_validator(mode="after")
    def _consistent(self) -> ProbeResult:
        """The summary is what the pair records give (counts recomputed), and the prompt's hash is its own."""
        if self.prompt_sha256 != sha256_text(self.prompt):
            raise ValueError("prompt_sha256 is not the sha256 of the prompt")
        names = [s.name for s in self.slices]
        if sorted(names) != sorted(SLICES):
            raise ValueError(f"slices are {names}, not {list(SLICES)}")
        for s in self.slices:
            mine = [p for p in self.pairs if p.slice == s.name]
            counts = _counts(mine)
            if (s.n, s.recovered, s.strict_recovered) != (len(mine), counts["recovered"], counts["strict"]):
                raise ValueError(f"slice {s.name}: its counts differ from its {len(mine)} pair records")
            if s.n != self.n or s.matches != counts["matches"]:
                raise ValueError(f"slice {s.name}: n or match counts differ from the pair records")
            for interval, count in ((s.rate, s.recovered), (s.strict_rate, s.strict_recovered)):
                if abs(interval.value - count / s.n) > 1e-6:
                    raise ValueError(f"slice {s.name}: a rate is not its count over n")
                if not 0 <= interval.ci_low <= interval.value <= interval.ci_high <= 1:
                    raise ValueError(f"slice {s.name}: an interval does not hold its rate within [0, 1]")
        train = [p for p in self.pairs if p.slice == "s2_train"]
        controls = [p for p in self.pairs if p.slice == "control"]
        if [(c.head_id, c.gold, c.original_tail_id) for c in controls] != [
            (t.head_id, t.gold, t.tail_id) for t in train
        ]:
            raise ValueError("the control pairs are not the s2_train pairs' heads, in order, with their types")
        if any(p.original_tail_id is not None for p in self.pairs if p.slice != "control"):
            raise ValueError("only a control pair has an original tail")
        for interval, strict in ((self.pair_specific, False), (self.strict_pair_specific, True)):
            hits = [
                (p.recovered == p.gold and (not strict or p.match in STRICT))
                - (c.recovered == c.gold and (not strict or c.match in STRICT))
                for p, c in zip(train, controls)
            ]
            if abs(interval.value - sum(hits) / max(len(hits), 1)) > 1e-6:
                raise ValueError("a pair-specific difference is not what the pair records give")
            if not -1 <= interval.ci_low <= interval.value <= interval.ci_high <= 1:
                raise ValueError("a pair-specific interval does not hold its difference within [-1, 1]")
        return self

    def slice(self, name: str) -> SliceResult:
        return next(s for s in self.slices if s.name == name)

    def summary(self) -> str:
        """One line: what the board shows beside the model's runs."""
        train, control = self.slice("s2_train"), self.slice("control")
        d, sd = self.pair_specific, self.strict_pair_specific
        return (
            f"recalls DrugBank's type for {train.recovered}/{train.n} training pairs "
            f"({train.strict_recovered} by template or string) vs {control.recovered}/{control.n} for "
            f"unrecorded pairs with the same heads; pair-specific {d.value:+.2f} [{d.ci_low:+.2f}, {d.ci_high:+.2f}] "
            f"(strict {sd.value:+.2f} [{sd.ci_low:+.2f}, {sd.ci_high:+.2f}]), n={self.n} per slice"
        )


def _counts(pairs: Sequence[PairRecord]) -> dict[str, Any]:
    hits = [p for p in pairs if p.recovered == p.gold]
    matches = {kind: sum(p.match == kind for p in pairs) for kind in MATCHES}
    return {"recovered": len(hits), "strict": sum(p.match in STRICT for p in hits), "matches": matches}


def model_slug(spec: str) -> str:
    """The file name stem of a model's shipped probe: its spec without the endpoint, in safe characters
    ('embedded:SmolLM2-135M-Instruct' -> 'embedded-SmolLM2-135M-Instruct')."""
    body = spec.split("@", 1)[0] if "@http" in spec else spec
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", body).strip("-._")
    return slug[:100] or "model"


# -- drawing the pairs -------------------------------------------------------------------------------


class Pair:
    """A pair to ask about: drugs as catalog entries, the type to score against, the slice."""

    __slots__ = ("slice", "head", "tail", "gold", "original_tail")

    def __init__(self, slice_: str, head: Any, tail: Any, gold: int, original_tail: Any = None) -> None:
        self.slice, self.head, self.tail, self.gold, self.original_tail = slice_, head, tail, gold, original_tail


def _key(a: int, b: int) -> tuple[int, int]:
    return (a, b) if a <= b else (b, a)


def draw_pairs(n: int, seed: int) -> tuple[list[Pair], list[TaskUsed]]:
    """The probe's pairs, slice by slice, and the tasks they came from. The same ``n`` and ``seed`` give the same
    pairs; no two slices share a pair (in either order), and no control pair has a recorded interaction."""
    from ddibench.errors import ConfigError
    from ddibench.registry import get_task

    rng = np.random.default_rng(seed)
    used: set[tuple[int, int]] = set()
    pairs: list[Pair] = []
    tasks: dict[str, TaskUsed] = {}
    for name, (task_name, split) in SOURCES.items():
        task = get_task(task_name)
        samples = task.load().split(split)
        order = rng.permutation(len(samples))
        chosen = []
        for i in order:
            pair = samples[int(i)].pair
            key = _key(pair.head.node_id, pair.tail.node_id)
            if key in used:
                continue
            used.add(key)
            chosen.append(Pair(name, pair.head, pair.tail, int(samples[int(i)].target)))  # type: ignore[arg-type]
            if len(chosen) == n:
                break
        if len(chosen) < n:
            raise ConfigError(
                f"--n {n} is more than the {len(chosen)} pairs {task_name} {split} offers", "give a smaller --n"
            )
        pairs += chosen
        _add_task(tasks, task, split)
    every = get_task(ALL_PAIRS)
    data = every.load()
    recorded: set[tuple[int, int]] = set()
    for split in ("train", "valid", "test"):
        recorded.update(_key(s.pair.head.node_id, s.pair.tail.node_id) for s in data.split(split))
        _add_task(tasks, every, split)
    drugs = data.resources["drugs"].drugs
    for original in [p for p in pairs if p.slice == "s2_train"]:
        head = original.head
        for _ in range(10_000):
            other = drugs[int(rng.integers(len(drugs)))]
            key = _key(head.node_id, other.node_id)
            if other.node_id != head.node_id and key not in recorded and key not in used:
                break
        else:  # a drug that interacts with every other drug: none in DrugBank
            raise ConfigError(f"no unrecorded partner found for {head.drugbank_id}", "report it")
        used.add(key)
        pairs.append(Pair("control", head, other, original.gold, original.tail))
    return pairs, list(tasks.values())


def _add_task(tasks: dict[str, TaskUsed], task: Any, split: str) -> None:
    if task.name not in tasks:
        tasks[task.name] = TaskUsed(name=task.name, version=task.version, data_sha256=task.data_sha256, splits=[])
    tasks[task.name].splits.append(split)


def prompt_of(pair: Pair) -> str:
    return PROMPT.format(head=pair.head.name, tail=pair.tail.name)


# -- asking and scoring ------------------------------------------------------------------------------


async def ask(
    spec: Any, pairs: Sequence[Pair], use_cache: bool, progress: Callable[[int], None] | None = None
) -> tuple[list[str], dict[str, Any]]:
    """Each pair's answer from the model of ``spec`` (a :class:`~ddibench.llm.ModelSpec`), and its identity."""
    from ddibench.llm import LLMPool
    from ddibench.runner.plan import embedded_threads, open_cache

    cache = open_cache() if use_cache else None
    pool = LLMPool({"generator": spec}, cache=cache, concurrency=4, embedded_slots=1, n_threads=embedded_threads())
    done = 0
    try:
        await pool.start(["generator"])
        client = pool.client("generator")

        async def one(pair: Pair) -> str:
            nonlocal done
            messages = [{"role": "user", "content": prompt_of(pair)}]
            result = await client.chat(messages, temperature=TEMPERATURE, max_tokens=MAX_TOKENS, use_cache=use_cache)
            done += 1
            if progress is not None:
                progress(done)
            return result.text

        answers = await asyncio.gather(*(one(p) for p in pairs))
        return list(answers), pool.identity("generator")
    finally:
        await pool.close()


def score(
    pairs: Sequence[Pair], answers: Sequence[str], encoder: str = "minilm"
) -> tuple[list[PairRecord], dict[str, Any]]:
    """Each answer mapped to a type (:class:`LabelRecovery`), as pair records; and how the mapping was made."""
    from ddibench.data.drugbank import load_labels
    from ddibench.embeddings import shared_encoder
    from ddibench.evaluation.text_scorers import LabelRecovery

    text_encoder = shared_encoder(encoder)
    recovery = LabelRecovery(load_labels(), text_encoder)
    records = []
    for pair, answer in zip(pairs, answers):
        label, match = recovery.recover(answer, pair.head.name, pair.tail.name)
        records.append(
            PairRecord(
                slice=pair.slice,  # type: ignore[arg-type]
                head_id=pair.head.drugbank_id,
                tail_id=pair.tail.drugbank_id,
                head=pair.head.name,
                tail=pair.tail.name,
                gold=pair.gold,
                original_tail_id=pair.original_tail.drugbank_id if pair.original_tail is not None else None,
                answer=answer,
                recovered=label,
                match=match,  # type: ignore[arg-type]
            )
        )
    how = {
        "matcher": "LabelRecovery: a type whose sentence with the pair's names the answer contains (template), else the "
        "closest sentence by string similarity at or above the threshold (string), else the closest by embedding (embedding)",
        "string_threshold": recovery.threshold,
        "encoder": dict(text_encoder.identity),
    }
    return records, how


def summarise(records: list[PairRecord], bootstrap_seed: int = 0) -> dict[str, Any]:
    """The slices' counts and rates with intervals, and the pair-specific differences."""
    from ddibench.metrics.bootstrap import BootstrapSpec, bootstrap_intervals

    spec = BootstrapSpec(seed=bootstrap_seed, method="iid")

    def interval(values: np.ndarray) -> Interval:
        def statistic(w: np.ndarray) -> dict[str, np.ndarray]:
            return {"v": (w @ values) / w.sum(axis=1)}

        low, high = bootstrap_intervals(statistic, len(values), spec)["v"]
        point = float(values.mean())
        return Interval(value=round(point, 6), ci_low=round(min(low, point), 6), ci_high=round(max(high, point), 6))

    def hits(slice_: str, strict: bool) -> np.ndarray:
        return np.array(
            [p.recovered == p.gold and (not strict or p.match in STRICT) for p in records if p.slice == slice_], float
        )

    slices = []
    for name, description in SLICES.items():
        mine = [p for p in records if p.slice == name]
        counts = _counts(mine)
        slices.append(
            SliceResult(
                name=name,  # type: ignore[arg-type]
                description=description,
                n=len(mine),
                recovered=counts["recovered"],
                strict_recovered=counts["strict"],
                rate=interval(hits(name, False)),
                strict_rate=interval(hits(name, True)),
                matches=counts["matches"],
            )
        )
    # the controls follow the s2_train pairs in the same order: the i-th control has the i-th training pair's head
    return {
        "slices": slices,
        "pair_specific": interval(hits("s2_train", False) - hits("control", False)),
        "strict_pair_specific": interval(hits("s2_train", True) - hits("control", True)),
        "bootstrap": {
            **spec.describe(),
            "description": "i.i.d. bootstrap over pairs; the difference resamples s2_train pairs with their controls",
        },
    }


def probe(
    spec: Any,
    n: int,
    seed: int,
    use_cache: bool = True,
    progress: Callable[[int], None] | None = None,
    note: Callable[[str], None] | None = None,
) -> ProbeResult:
    """Run the memorisation probe on the model of ``spec`` (a :class:`~ddibench.llm.ModelSpec`); ``progress`` is
    told the number of answers so far, ``note`` what the probe does next."""
    pairs, tasks = draw_pairs(n, seed)
    answers, identity = asyncio.run(ask(spec, pairs, use_cache, progress))
    if note is not None:
        note("mapping the answers to interaction types (an answer matched by embedding takes seconds on a CPU)")
    records, how = score(pairs, answers)
    return ProbeResult(
        ddibench_version=__version__,
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        model=ProbeModel(spec=spec.display(), identity=identity),
        prompt=PROMPT,
        prompt_sha256=sha256_text(PROMPT),
        generation={"temperature": TEMPERATURE, "max_tokens": MAX_TOKENS},
        seed=seed,
        n=n,
        tasks=tasks,
        recovery=how,
        pairs=records,
        **summarise(records),
    )


# -- shipped probe files -------------------------------------------------------------------------------


def read_probe(text: str) -> ProbeResult:
    """A probe file's text as a :class:`ProbeResult`; ``ValueError`` naming the first problem otherwise."""
    try:
        return ProbeResult.model_validate_json(text)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"]) or "the file"
        raise ValueError(f"{where}: {first['msg']}"[:300]) from None
