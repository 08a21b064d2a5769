#!/usr/bin/env python3
"""CBR-DDI's retrieval alone: how often the top-K retrieved cases carry the gold type, by repository and lam.

Runs ``ddibench run -s cbr-ddi -C answer=cases`` (no insight, no refinement, no LLM answer: the label the top-K
cases carry most often) on the same ``--limit`` test pairs as the shipped CBR-DDI previews, once per repository:

* ``random60``: 60 random training cases (the ``cpu`` profile's draw, before its K-medoids sampling kept 51);
* ``per_type10``: up to 10 cases of every interaction type (``repository_per_type=10``);
* ``share``: the per-type counts the paper's sampling keeps, max(10, 5% of the type's training cases), drawn at
  random (``repository_per_type=share``: about the paper's post-sampling size);
* ``all``: every training case (``repository_size=null``: the paper's pool before sampling), with ``--all``.

Each run records, for every query, the labels its top-K cases would carry at every lam of the grid, and the run's
own lam (chosen on validation pairs as the full system chooses it); the table is read with
``ddibench report RUN --ceilings --json``. Prints, per repository: cases, types covered, the chosen lam, coverage of
the gold at each lam, and the vote's accuracy. The describer is ``--model``; descriptions are answered from the
response cache once written (all repositories share them), so only the first run pays for them.

    python benchmarks/cbr_coverage.py --model embedded:qwen2.5-coder-1.5b [--task drugbank_s1] [--limit 100]

It resumes: each run has its own directory under ``--out`` (a finished one is read, not run again).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the benchmarks' shared helpers
from resumable import finish  # noqa: E402

REPOSITORIES: dict[str, list[str]] = {
    "random60": ["-C", "repository_size=60"],
    "per_type10": ["-C", "repository_per_type=10"],
    "share": ["-C", "repository_per_type=share"],
    "all": ["-C", "repository_size=null"],
}


def command(args: argparse.Namespace, name: str, run_dir: Path) -> list[str]:
    """The ``ddibench run`` command of one repository."""
    cmd = [sys.executable, "-m", "ddibench", "run", "-s", "cbr-ddi", "-t", args.task, "--profile", args.profile]
    cmd += ["-C", "answer=cases", *REPOSITORIES[name], "--limit", str(args.limit), "--run-dir", str(run_dir)]
    cmd += ["-m", f"describer={args.model}"]
    for option in args.config:
        cmd += ["-C", option]
    return cmd


def row(run_dir: Path) -> dict[str, object]:
    """What the table shows of a finished run: its repository, lam, coverage by lam and the vote's accuracy."""
    out = subprocess.run(
        [sys.executable, "-m", "ddibench", "report", "--ceilings", "--json", str(run_dir)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    (ceiling,) = json.loads(out)
    results = json.loads((run_dir / "results.json").read_text(encoding="utf-8"))
    info = results["system_info"]
    repo = info["repository"]
    return {
        "cases": repo["cases"],
        "types": repo.get("types"),
        "lambda": ceiling["lambda"],
        "by_lambda": ceiling["coverage_by_lambda"],
        "accuracy": 100 * results["evaluation"]["metrics"]["accuracy"]["value"],
        "n": ceiling["n"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="the describer's model spec (as -m takes it)")
    parser.add_argument("--task", default="drugbank_s1")
    parser.add_argument("--profile", default="cpu")
    parser.add_argument("--limit", type=int, default=100, help="the test pairs (the shipped previews' 100)")
    parser.add_argument("--out", type=Path, default=Path("runs/cbr_coverage"), help="one run directory per repository")
    parser.add_argument("--all", action="store_true", help="also the whole training split as the repository")
    parser.add_argument("--repositories", default="", help="the repositories to run, comma-separated (default: all)")
    parser.add_argument("-C", "--config", action="append", default=[], help="more cbr-ddi options, as run takes them")
    args = parser.parse_args()
    names = [n.strip() for n in args.repositories.split(",") if n.strip()] or [
        n for n in REPOSITORIES if n != "all" or args.all
    ]
    unknown = [n for n in names if n not in REPOSITORIES]
    if unknown:
        raise SystemExit(f"--repositories: '{unknown[0]}' is not one of {', '.join(REPOSITORIES)}")
    found = {}
    for name in names:
        run_dir = args.out / f"{name}-limit{args.limit}"
        finish(name, run_dir, command(args, name, run_dir))
        found[name] = row(run_dir)
    lams = sorted({lam for r in found.values() for lam in r["by_lambda"]}, key=float)  # type: ignore[union-attr]
    print(f"\nCBR-DDI retrieval alone (answer=cases, K cases) on {args.task}, {args.limit} test pairs, {args.profile}")
    print("gold type among the top-K cases' labels, by lam (* the lam chosen on validation); vote = their most common")
    print(
        f"{'repository':<12}{'cases':>7}{'types':>7}"
        + "".join(f"{'lam ' + lam:>11}" for lam in lams)
        + f"{'vote acc':>10}"
    )
    for name, r in found.items():
        cells = "".join(
            f"{100 * r['by_lambda'][lam]:>10.1f}{'*' if lam == r['lambda'] else ' '}"  # type: ignore[index]
            for lam in lams
        )
        print(f"{name:<12}{r['cases']:>7}{str(r['types'] or '-'):>7}{cells}{r['accuracy']:>10.1f}")


if __name__ == "__main__":
    main()
