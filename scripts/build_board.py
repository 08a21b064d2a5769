#!/usr/bin/env python3
"""Build the leaderboard from real ddibench runs on this machine, and refresh the shipped results.

Every registered system and every task gets at least one run, made with the ``ddibench`` command
itself under the ``cpu`` profile and the default embedded model (SmolLM2-135M-Instruct) or the model
``--model`` names (any model spec: ``vllm:NAME@URL``, ``openai:gpt-4o-mini``, a GGUF path): full test
splits for the floors and the trained systems (majority and mlp on every DrugBank task, EmerGNN on its
own split; on both TWOSIDES tasks the popularity floor, mlp with either multi-label objective and
EmerGNN; the floors, morgan-sklearn and gin on every toxicity and drug-target task; only-smiles on
every captioning task; top-passage, the QA floor, on each QA preview's own samples), ``--limit``
previews for the LLM systems, whose cost here is a model call per item on two CPU cores. Each run is
packed with ``ddibench submit --compact`` and published with ``ddibench board publish`` (full runs;
previews too with ``--previews``) into ``results/``, which
verifies it, reproduces it when its run took under 5 seconds, and regenerates ``results/index.json``
and the results tables, so every number on the board was recomputed from per-sample predictions by
the same path a method author's submission takes. Nothing is typed in by hand.

    python scripts/build_board.py [--runs-dir board-runs] [--bundles board-bundles] [--results results]
                                  [--model SPEC] [--only SYSTEM_OR_TASK ...] [--previews] [--dry-run]
                                  [--plan board|reader]

``--plan reader`` is the previews that tell the seed systems apart with a model that can read
(``--model embedded:qwen2.5-coder-1.5b`` by default): the same stratified samples for every system of a
task, sized where they decide something on two CPU cores (see :func:`reader_plan`).

Finished runs are kept: run it again and it resumes where it stopped (interrupted runs resume too).
A finished run scored by an older version of its task's scorers (e.g. the free-text scorers before
BERTScore came from the bert-score library) is scored again with ``ddibench rescore`` and re-packed,
so the board never mixes scorer versions.
Set $DDIBENCH_MIRROR where GitHub is unreachable. Prints a table of runs, seconds and primary metrics.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

DDI_TASKS = [
    "drugbank_s0",
    "drugbank_s1",
    "drugbank_s2",
    "drugbank_s1_cluster",
    "drugbank_s2_cluster",
    "drugbank_s1_emergnn",
    "drugbank_time",  # the approval-time split's latest window
]
TWOSIDES_TASKS = ["twosides_s1", "twosides_s2"]
TOX_TASKS = ["tox_herg", "tox_herg_tdc", "tox_dili", "tox_dili_tdc", "tox_skin", "tox_carcinogens"]
TARGET_TASKS = ["targets_inhibit", "targets_activate"]
CAPTION_TASKS = ["caption_bbbp", "caption_sider", "caption_clintox", "caption_bace"]
LLM_DDI_SYSTEMS = ["zero-shot", "naive-cbr", "kaping", "k-paths", "cbr-ddi"]
QA_SYSTEMS = ["no-rag", "text-rag", "agentic-rag", "sql-agent", "drugrag"]


@dataclass(frozen=True)
class Entry:
    system: str
    task: str
    limit: int | None = None
    options: tuple[str, ...] = field(default=())
    variant: str = ""  # names runs of one system and task with other options apart

    @property
    def name(self) -> str:
        return (
            f"{self.task}__{self.system}"
            + (f"__{self.variant}" if self.variant else "")
            + (f"__limit{self.limit}" if self.limit else "")
        )


def plan() -> list[Entry]:
    entries = [Entry("majority", task) for task in DDI_TASKS]  # the floor of every DrugBank task: seconds each
    entries += [Entry("mlp", task) for task in DDI_TASKS]  # full test splits: about 8 minutes each here
    # the cpu budget, full test splits: 10 epochs on S1 (about 16 and 36 minutes here), the paper's 100 on S2 (15)
    # and on the approval-time window, an S2 split with the S2 budget (100 epochs of 512 pseudo-new pairs: minutes)
    entries += [
        Entry("emergnn", task) for task in ("drugbank_s1_emergnn", "drugbank_s1", "drugbank_s2", "drugbank_time")
    ]
    # 4 epochs' worth of training pairs (the cpu budget before the training step was made 2.7x faster) validated
    # every quarter epoch: the learning curve of the EmerGNN card
    entries.append(
        Entry(
            "emergnn",
            "drugbank_s1_emergnn",
            options=("-C", "max_epochs=16", "-C", "train_pairs_per_epoch=9450"),
            variant="quarter-epochs",
        )
    )
    entries += [Entry(system, "drugbank_s2", limit=30) for system in LLM_DDI_SYSTEMS]
    # TWOSIDES top-5: the floor, both multi-label objectives of the MLP (minutes each), EmerGNN with the ranking
    # objective under the cpu profile's TWOSIDES budgets (S1: 120 epochs at lr 1e-2, 35 minutes; S2: 100 epochs,
    # 2 minutes; its own objective ranks below the floor: docs/systems/emergnn.md), and the LLM systems as previews
    # of 10 pairs: an answer constrained to five of 200 names takes the embedded model about a minute on two cores
    entries += [Entry("popularity", task) for task in TWOSIDES_TASKS]
    entries += [Entry("mlp", task) for task in TWOSIDES_TASKS]
    entries += [Entry("mlp", task, options=("-C", "multilabel_loss=bce"), variant="bce") for task in TWOSIDES_TASKS]
    entries += [Entry(system, task, limit=10) for task in TWOSIDES_TASKS for system in LLM_DDI_SYSTEMS]
    entries += [
        Entry("emergnn", task, options=("-C", "multilabel_loss=bce"), variant="bce")
        for task in ("twosides_s2", "twosides_s1")
    ]
    entries += [Entry(system, task, limit=10) for task in ("ddi_qa_s0", "medquad") for system in QA_SYSTEMS]
    entries += [Entry("no-rag", task, limit=10) for task in ("ddi_qa_s1", "ddi_qa_s2")]
    # the QA floor on the previews' own samples: scoring free text costs seconds per answer (label recovery), so a
    # full split would take hours here
    entries += [Entry("top-passage", task, limit=10) for task in ("ddi_qa_s0", "medquad", "ddi_qa_s1", "ddi_qa_s2")]
    entries += molecular()
    return entries


def molecular() -> list[Entry]:
    """The molecular families: floors and trained baselines on full test splits (the captioning floor,
    only-smiles, captions every molecule and is scored by the linear probe), zero-shot previews.

    On 2 CPU cores: morgan-sklearn seconds to a minute per task, gin (cpu budget: at most 60 epochs)
    a few minutes per task and about a quarter of an hour on targets_inhibit; the embedded model's
    previews are sized so each task takes minutes (a caption is up to 256 tokens, the target answer is
    constrained to the task's symbols). A captioning preview of 40 molecules gives the probe 32
    training, 4 validation and 4 test molecules: it exercises the pipeline, its AUROC means nothing."""
    entries = [Entry(system, task) for task in TOX_TASKS for system in ("majority", "morgan-sklearn", "gin")]
    entries += [Entry(system, task) for task in TARGET_TASKS for system in ("popularity", "morgan-sklearn", "gin")]
    entries += [Entry("only-smiles", task) for task in CAPTION_TASKS]
    entries += molecular_zero_shot()
    entries += cladd()
    return entries


CLADD_ABLATIONS = ("use_kg_team=false", "use_mu=false", "annotations=expert")
# CLADD preview sizes: up to six model calls per molecule (reports of up to 200 tokens, a caption of up to 256)
# take the embedded model about 25 s a molecule on two idle CPU cores (several minutes under contention).
# hERG keeps the zero-shot preview's 20 molecules; the other toxicity and the target tasks take 10; a captioning
# preview takes 20 (16 training, 2 validation, 2 test molecules: it exercises the pipeline, its AUROC means nothing).
CLADD_LIMITS = {
    **dict.fromkeys(TOX_TASKS, 10),
    "tox_herg": 20,
    **dict.fromkeys(TARGET_TASKS, 10),
    **dict.fromkeys(CAPTION_TASKS, 20),
}
# the main ablations on every toxicity and target task and on one captioning task: an ablation re-asks only the
# agents whose prompt it changes (the others answer from the response cache), so a yes/no or target ablation takes
# a minute or two; a captioning one writes every caption again (minutes)
CLADD_ABLATION_TASKS = (*TOX_TASKS, *TARGET_TASKS, "caption_bbbp")


def molecular_zero_shot() -> list[Entry]:
    return (
        [Entry("zero-shot", task, limit=20) for task in TOX_TASKS]
        + [Entry("zero-shot", task, limit=10) for task in TARGET_TASKS]
        + [Entry("zero-shot", task, limit=40) for task in CAPTION_TASKS]
    )


def cladd() -> list[Entry]:
    """CLADD previews, each beside a zero-shot preview of the same size and seed (so the same stratified draw,
    and the board compares them pair by pair), and its main ablations (no KG team, no molecule-understanding
    agent, database annotations only) on every toxicity and drug-target task and on caption_bbbp."""
    entries = [Entry("cladd", task, limit=limit) for task, limit in CLADD_LIMITS.items()]
    zero_shot = {(e.task, e.limit) for e in molecular_zero_shot()}
    entries += [
        Entry("zero-shot", task, limit=limit) for task, limit in CLADD_LIMITS.items() if (task, limit) not in zero_shot
    ]
    for ablation in CLADD_ABLATIONS:
        entries += [
            Entry(
                "cladd",
                task,
                limit=CLADD_LIMITS[task],
                options=("--config", ablation),
                variant=ablation.replace("=", "-"),
            )
            for task in CLADD_ABLATION_TASKS
        ]
    return entries


READER_MODEL = "embedded:qwen2.5-coder-1.5b"
# generation-heavy systems (descriptions, insights, mechanisms, reports) get four slots of the embedded server:
# about 2x the generated tokens per second on 2 cores (benchmarks/reader_throughput.py); label choice stays at one
SLOTS = ("--concurrency", "4")


def reader_plan() -> list[Entry]:
    """Previews with the reader model, in the order they decide something (each task's runs share their samples):
    DrugBank S1 (100 pairs) for the five label-choice systems, then the same pairs with the options shuffled and
    chosen by the likelihood of their numbers (position bias), CLADD beside zero-shot on hERG and DILI (50
    molecules), the five QA systems and their floor on MedQuAD (50 questions, model-free scorers: the judge would be the reader
    itself), DrugBank S2 and TWOSIDES S2 (50 pairs), the two target tasks (30 molecules), DDI QA S1 and S0 (50
    questions each), and last the retrieval systems' answers chosen by the likelihood of the types' texts."""

    def ddi(system: str, task: str, limit: int) -> Entry:
        return Entry(system, task, limit=limit, options=SLOTS if system == "cbr-ddi" else ())

    def molecules(task: str, limit: int) -> list[Entry]:
        return [Entry("zero-shot", task, limit=limit), Entry("cladd", task, limit=limit, options=SLOTS)]

    def questions(task: str) -> list[Entry]:
        # the model-free scorers only: the judge would be the reader itself, and SelfCheckGPT's three resamples of
        # up to 256 tokens take a minute per retrieval answer here, longer than the answer itself
        scoring = ("--no-judge", "--selfcheck", "0")
        floor = Entry("top-passage", task, limit=50, options=scoring)  # on the same 50 questions
        return [floor] + [Entry(system, task, limit=50, options=scoring) for system in QA_SYSTEMS]

    plain = {system: ddi(system, "drugbank_s1", 100) for system in LLM_DDI_SYSTEMS}
    # position bias on the same pairs: the options in a seeded order, and chosen by likelihood (CBR-DDI's three
    # candidates are one token each: its constrained answer is already the most likely one, so no likelihood run)
    shuffled = {
        system: Entry(
            system,
            "drugbank_s1",
            100,
            options=("-C", "shuffle_options=1", *(SLOTS if system == "cbr-ddi" else ())),
            variant="shuffled",
        )
        for system in LLM_DDI_SYSTEMS
    }
    likely = {
        system: Entry(system, "drugbank_s1", 100, options=("-C", "answer_mode=likelihood"), variant="likelihood")
        for system in LLM_DDI_SYSTEMS
        if system != "cbr-ddi"
    }
    # the types' texts instead of their numbers: what the context states can match the answer itself
    texts = {
        system: Entry(
            system, "drugbank_s1", 100, options=("-C", "answer_mode=likelihood-text"), variant="likelihood-text"
        )
        for system in LLM_DDI_SYSTEMS
        if system != "cbr-ddi"
    }
    # the plain runs of the four baselines first; then what decides most per CPU hour: whether the collapsed readers
    # (zero-shot, KAPING, K-Paths: option 1 for 72-97% of pairs) answer from their context once position cannot
    # help them, with CBR-DDI (a long prompt per pair plus its repository's refinement) after the first of them
    entries = [plain[s] for s in ("zero-shot", "naive-cbr", "kaping", "k-paths")]
    entries += [
        shuffled["zero-shot"],
        likely["zero-shot"],
        likely["kaping"],
        # the numbers' likelihood collapses onto "1" as the greedy answer does (zero-shot and KAPING: 96%); the
        # texts' likelihood removes the position bias (zero-shot: 0% first options)
        texts["zero-shot"],
        plain["cbr-ddi"],  # the paper's system: does it beat zero-shot and Naive-CBR with this reader?
        # the rest of the position-bias table, cheapest first: each system with its options shuffled and chosen
        # by likelihood. CBR-DDI's shuffled run says how much of its 67% first-candidate share (the GNN's top
        # type) is position rather than reading
        shuffled["kaping"],
        shuffled["k-paths"],
        likely["k-paths"],
        shuffled["cbr-ddi"],
        shuffled["naive-cbr"],
        likely["naive-cbr"],
    ]
    entries += molecules("tox_herg", 50) + molecules("tox_dili", 50) + questions("medquad")
    entries += [ddi(system, task, 50) for task in ("drugbank_s2", "twosides_s2") for system in LLM_DDI_SYSTEMS]
    entries += molecules("targets_inhibit", 30) + molecules("targets_activate", 30) + questions("ddi_qa_s1")
    # the setting closest to DrugRAG's paper: both drugs of each question are known, and the training KG holds their
    # other interactions (on S1 one drug of each pair has none; the paper's KG holds the asked pairs themselves,
    # which no held-out split can)
    entries += questions("ddi_qa_s0")
    # the texts' likelihood with a context: one request per branch of the types' token tree after a prompt that
    # differs per pair, about ten times a generated answer's cost, so after every task's first previews
    entries += [texts["kaping"], texts["k-paths"], texts["naive-cbr"]]
    return entries


def uses_model(system: str) -> bool:
    from ddibench.registry import get_system_class

    return bool(get_system_class(system).llm_roles)


def model_tag(model: str | None) -> str:
    """A file-name-safe tag of a --model spec, so runs with different models keep different directories."""
    import hashlib
    import re

    if not model:
        return ""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "-", model.split("@")[0])[:40].strip("-")
    return f"__{readable}-{hashlib.sha256(model.encode()).hexdigest()[:8]}"


def run(entry: Entry, runs_dir: Path, bundles: Path, model: str | None = None) -> dict:
    model = model if model and uses_model(entry.system) else None
    name = entry.name + model_tag(model)
    run_dir = runs_dir / name
    bundle = bundles / f"{name}.tar.gz"
    log = runs_dir / f"{name}.log"
    seconds = None
    if not bundle.exists():
        cmd = [
            sys.executable,
            "-m",
            "ddibench",
            "run",
            "-s",
            entry.system,
            "-t",
            entry.task,
            "--run-dir",
            str(run_dir),
            *entry.options,
        ]
        if entry.limit:
            cmd += ["--limit", str(entry.limit)]
        if model:
            cmd += ["-m", model]
        start = time.perf_counter()
        with log.open("a", encoding="utf-8") as fh:
            fh.write("$ " + " ".join(cmd[1:]) + "\n")
            fh.flush()
            code = subprocess.call(cmd, stdout=fh, stderr=subprocess.STDOUT)
        seconds = time.perf_counter() - start
        if code != 0:
            return {"entry": name, "error": f"ddibench run exited {code}; see {log}"}
        subprocess.run(
            [sys.executable, "-m", "ddibench", "submit", "--compact", str(run_dir), "--out", str(bundle)],
            check=True,
            capture_output=True,
        )
    results = json.loads((run_dir / "results.json").read_text(encoding="utf-8"))
    rescored = False
    if _outdated(entry.task, results):
        with log.open("a", encoding="utf-8") as fh:
            subprocess.run(
                [sys.executable, "-m", "ddibench", "rescore", str(run_dir)],
                check=True,
                stdout=fh,
                stderr=subprocess.STDOUT,
            )
        subprocess.run(
            [sys.executable, "-m", "ddibench", "submit", "--compact", str(run_dir), "--out", str(bundle)],
            check=True,
            capture_output=True,
        )
        results = json.loads((run_dir / "results.json").read_text(encoding="utf-8"))
        rescored = True
    evaluation = results["evaluation"]
    primary = evaluation["primary_metric"]
    metric = evaluation["metrics"][primary]
    return {
        "entry": name,
        "system": entry.system,
        "task": entry.task,
        "n": evaluation["n"],
        "limit": entry.limit,
        "seconds_this_call": seconds,
        "seconds_run": results.get("timing", {}).get("wall_s_total"),
        "primary": primary,
        "value": metric["value"],
        "ci": [metric["ci_low"], metric["ci_high"]],
        "bundle": str(bundle),
        "rescored": rescored,
    }


def _outdated(task: str, results: dict) -> bool:
    """Whether a run was scored by an older version of its task's scorers than this ddibench's."""
    from ddibench.registry import get_task

    claimed = (results["manifest"]["scoring"].get("evaluator") or {}).get("version", 1)
    return int(claimed) != get_task(task).evaluator().version


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs-dir", type=Path, default=Path("board-runs"))
    parser.add_argument("--bundles", type=Path, default=Path("board-bundles"))
    parser.add_argument(
        "--results",
        type=Path,
        default=Path(__file__).resolve().parent.parent / "results",
        help="the shipped results folder to refresh",
    )
    parser.add_argument(
        "--model", default=None, help="model spec for the LLM systems' runs (default: the embedded SmolLM2-135M)"
    )
    parser.add_argument(
        "--previews", action="store_true", help="also publish the --limit previews (shown apart, never ranked)"
    )
    parser.add_argument("--no-publish", action="store_true", help="run and pack only; leave results/ as it is")
    parser.add_argument("--only", nargs="*", default=[], help="systems or tasks to include (default: the whole plan)")
    parser.add_argument("--dry-run", action="store_true", help="print the plan and exit")
    parser.add_argument(
        "--plan", choices=["board", "reader"], default="board", help="the whole board, or the reader model's previews"
    )
    args = parser.parse_args()
    if args.plan == "reader" and args.model is None:
        args.model = READER_MODEL

    entries = [
        e
        for e in (plan() if args.plan == "board" else reader_plan())
        if not args.only or e.system in args.only or e.task in args.only
    ]
    if args.dry_run:
        for e in entries:
            print(
                f"{e.system:12} {e.task:20} {'--limit ' + str(e.limit) if e.limit else 'full split'} {' '.join(e.options)}"
            )
        return
    args.runs_dir.mkdir(parents=True, exist_ok=True)
    args.bundles.mkdir(parents=True, exist_ok=True)
    summary = []
    for i, entry in enumerate(entries, 1):
        print(
            f"[{i}/{len(entries)}] {entry.system} on {entry.task}{f' --limit {entry.limit}' if entry.limit else ''}",
            flush=True,
        )
        row = run(entry, args.runs_dir, args.bundles, args.model)
        summary.append(row)
        if "error" in row:
            print(f"  failed: {row['error']}", flush=True)
        else:
            took = f"{row['seconds_this_call']:.0f} s" if row["seconds_this_call"] is not None else "done before"
            print(
                f"  {row['primary']} {row['value']:.3f} [{row['ci'][0]:.3f}, {row['ci'][1]:.3f}] on n={row['n']} ({took})",
                flush=True,
            )
    (args.runs_dir / "summary.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    bundles = [row["bundle"] for row in summary if "bundle" in row and (args.previews or not row["limit"])]
    if bundles and not args.no_publish:
        previews = ["--previews"] if args.previews else []
        subprocess.run(
            [sys.executable, "-m", "ddibench", "board", "publish", "--results", str(args.results), *previews, *bundles],
            check=False,
        )
    failed = [row["entry"] for row in summary if "error" in row]
    where = "packed" if args.no_publish else f"published to {args.results}"
    print(f"{len(bundles)} runs {where}" + (f"; failed: {', '.join(failed)}" if failed else ""))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
