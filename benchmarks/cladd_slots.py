#!/usr/bin/env python3
"""CLADD with the embedded server's slots and without, side by side on the same molecules.

    python benchmarks/cladd_slots.py [--task tox_skin] [--limit 8] [--model qwen2.5-coder-1.5b-instruct]
                                     [--slots 4] [--out DIR]

Runs ``ddibench run -s cladd -t TASK --limit N --no-cache -m embedded:MODEL`` twice, each in its own run directory
under ``--out`` (default: a new temporary directory): once as a user's default run does (the embedded server
answers one request at a time, since CLADD declares no ``generation_roles``), once with ``--concurrency SLOTS``
(that many server slots decoding together, several molecules' agents in flight). Prints, for each: the prediction
seconds from the run's own record, seconds a molecule, prompt and generated tokens a molecule (the same work: the
same prompts up to the reports' wording), the sum of the calls' latencies over the wall time (the requests in
flight on average), and the macro-F1, so a difference in answers is visible beside the difference in time.

The question it answers: whether CLADD's agents, whose prompts are a few hundred tokens and whose reports run to
a few hundred generated tokens, gain from the slots on a 2-core CPU as generation-heavy work does
(``benchmarks/reader_throughput.py --describe``) or lose as prompt-bound label choice does; the answer decides
whether its report roles belong in ``generation_roles``. Run it on an otherwise idle machine: another process on
the cores changes both numbers. It resumes: a finished run directory is read, not run again. Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the benchmarks' shared helpers
from resumable import finish  # noqa: E402


def command(args: argparse.Namespace, run_dir: Path, slots: int | None) -> list[str]:
    """The ``ddibench run`` command of one side."""
    cmd = [sys.executable, "-m", "ddibench", "run", "-s", "cladd", "-t", args.task, "--limit", str(args.limit)]
    cmd += ["--no-cache", "-m", f"embedded:{args.model}", "--run-dir", str(run_dir)]
    return cmd + (["--concurrency", str(slots)] if slots else [])


def measure(run_dir: Path) -> dict[str, float]:
    """What the table shows of a finished run, read from its results (the LLM use its cost records by role)."""
    results = json.loads((run_dir / "results.json").read_text())
    n = results["evaluation"]["n"]
    roles = results["cost"]["by_role"].values()
    prompt, completion, latency = (
        sum(role[key] for role in roles) for key in ("prompt_tokens", "completion_tokens", "latency_s")
    )
    predict_s = results["timing"]["predict_s_total"]
    return {
        "n": n,
        "predict_s": predict_s,
        "s_per_molecule": predict_s / n,
        "prompt_per_molecule": prompt / n,
        "generated_per_molecule": completion / n,
        "in_flight": latency / predict_s if predict_s else 0.0,
        "macro_f1": results["evaluation"]["metrics"]["macro_f1"]["value"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="tox_skin")
    parser.add_argument("--limit", type=int, default=8)
    parser.add_argument("--model", default="qwen2.5-coder-1.5b-instruct")
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="cladd-slots-"))
    rows = {}
    for name, slots in (("one at a time", None), (f"{args.slots} slots", args.slots)):
        run_dir = out / name.replace(" ", "-")
        finish(name, run_dir, command(args, run_dir, slots))
        rows[name] = measure(run_dir)
    print(f"\ncladd on {args.task}, {args.limit} molecules, embedded:{args.model}, from an empty response cache")
    print(
        f"{'':<14} {'predict s':>10} {'s/molecule':>11} {'prompt/mol':>11} {'gen/mol':>8} {'in flight':>10} {'macro-F1':>9}"
    )
    for name, row in rows.items():
        print(
            f"{name:<14} {row['predict_s']:>10.0f} {row['s_per_molecule']:>11.1f} {row['prompt_per_molecule']:>11.0f}"
            f" {row['generated_per_molecule']:>8.0f} {row['in_flight']:>10.2f} {100 * row['macro_f1']:>9.1f}"
        )
    one, many = rows["one at a time"], rows[f"{args.slots} slots"]
    print(f"the slots' run takes {many['predict_s'] / one['predict_s']:.2f}x the time of one at a time")


if __name__ == "__main__":
    main()
