#!/usr/bin/env python3
"""CBR-DDI's GNN module alone with either drug features: the paper's embedded descriptions, or Morgan fingerprints.

Runs ``ddibench run -s cbr-ddi -C answer=gnn`` twice on the task's whole test split under the ``cpu`` profile's
budget: with ``gnn_features=descriptions`` (the describer describes all 1,710 drugs of the catalogue, MiniLM embeds
the descriptions, EmerGNN trains on them) and with ``gnn_features=morgan`` (EmerGNN's Morgan fingerprints), and
prints accuracy and macro-F1 of each. The GNN module alone calls no generator; the describer model is ``--model``.

    python benchmarks/cbr_gnn_features.py --model embedded:qwen2.5-coder-1.5b [--task drugbank_s1] [--out DIR]

It resumes: each run has its own directory under ``--out`` (a finished one is read, not run again; an unfinished
one continues with the same ``ddibench run`` command), the descriptions are answered from the response cache once
written, and a GNN module already trained on the same features is loaded from the artifact cache. ``--limit N``
and ``--gnn JSON`` (EmerGNN options over the profile's budget) make a quick check, e.g. against the stub server;
a run with --limit is a preview, not the measurement.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the benchmarks' shared helpers
from resumable import finish  # noqa: E402

FEATURES = ("descriptions", "morgan")


def command(args: argparse.Namespace, features: str, run_dir: Path) -> list[str]:
    """The ``ddibench run`` command of one feature kind."""
    cmd = [sys.executable, "-m", "ddibench", "run", "-s", "cbr-ddi", "-t", args.task, "--profile", args.profile]
    cmd += ["-C", "answer=gnn", "-C", f"gnn_features={features}", "--run-dir", str(run_dir)]
    if args.gnn:
        cmd += ["-C", f"gnn={args.gnn}"]
    if args.limit is not None:
        cmd += ["--limit", str(args.limit)]
    if features == "descriptions":  # Morgan features call no model: the run names none
        cmd += ["-m", f"describer={args.model}"]
    return cmd


def scores(run_dir: Path) -> dict[str, float]:
    """Accuracy and macro-F1 (percent) and what the run records of the GNN module, from a finished run."""
    results = json.loads((run_dir / "results.json").read_text(encoding="utf-8"))
    metrics = results["evaluation"]["metrics"]
    gnn = results["system_info"].get("gnn", {})
    best = next((v for k, v in gnn.items() if k.startswith("best_valid")), None)
    return {
        "n": results["manifest"]["n_samples"],
        "accuracy": 100 * metrics["accuracy"]["value"],
        "macro_f1": 100 * metrics["macro_f1"]["value"],
        "best_valid": best,
        "best_epoch": gnn.get("best_epoch"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="the describer's model spec (as -m takes it)")
    parser.add_argument("--task", default="drugbank_s1")
    parser.add_argument("--profile", default="cpu")
    parser.add_argument("--out", type=Path, default=Path("runs/cbr_gnn_features"), help="one run directory per kind")
    parser.add_argument("--features", default=",".join(FEATURES), help="the kinds to run, comma-separated")
    parser.add_argument("--limit", type=int, default=None, help="a preview on N test pairs (a check, not the result)")
    parser.add_argument("--gnn", default="", help="EmerGNN options over the budget, JSON (e.g. '{\"max_epochs\": 1}')")
    args = parser.parse_args()
    kinds = [k.strip() for k in args.features.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in FEATURES]
    if unknown:
        raise SystemExit(f"--features: '{unknown[0]}' is not one of {', '.join(FEATURES)}")
    found: dict[str, dict[str, float]] = {}
    for kind in kinds:
        run_dir = args.out / (kind if args.limit is None else f"{kind}-limit{args.limit}")
        finish(kind, run_dir, command(args, kind, run_dir))
        found[kind] = scores(run_dir)
    print(
        f"\nCBR-DDI's GNN module alone (answer=gnn) on {args.task}, {args.profile} profile"
        + (f", --limit {args.limit} (a preview)" if args.limit is not None else ", whole test split")
    )
    print(f"{'features':<14}{'n':>7}{'accuracy':>10}{'macro-F1':>10}  best validation (epoch)")
    for kind, s in found.items():
        valid = f"{s['best_valid']:.4f} ({s['best_epoch']})" if s["best_valid"] is not None else "-"
        print(f"{kind:<14}{s['n']:>7}{s['accuracy']:>10.2f}{s['macro_f1']:>10.2f}  {valid}")


if __name__ == "__main__":
    main()
