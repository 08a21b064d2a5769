#!/usr/bin/env python3
"""An account of the headline command, ``ddibench run --system cbr-ddi --task drugbank_s2``: where its seconds go,
phase by phase, beside what the model itself needs for the same work.

    python benchmarks/headline.py [--model smollm2,qwen2.5-coder-1.5b] [--limit 50] [--task drugbank_s2]
        [--concurrency N] [-C KEY=VALUE ...] [--reuse-artifacts] [--json out.json] [--keep DIR]

For each embedded model, one after the other:

1. **The model's rates**, measured here and now, just before and just after the run, with the threads the run's
   server gets (:func:`ddibench.llm.measure_throughput`, what ``ddibench doctor`` prints): prompt tokens
   evaluated a second and tokens generated a second, one request at a time; the bound uses their mean, and both
   are printed (far apart: the machine's load changed during the run, and the ratio is not to be trusted).
2. **The run**: the real command in its own process, ``--limit N`` pairs, from an empty cache as on a new user's
   first run (the GNN module trains, the knowledge repository is built, every answer comes from the model but for
   a request repeated within the run; the task's data comes from the mirror or the pinned URLs, the weights from
   the model store already here). ``--reuse-artifacts`` keeps the user's artifact store (a trained GNN module, a
   built repository) and reads no cached answer (``--no-cache``).
3. **The account**, from the run's own records: cbr-ddi times each phase into ``system_info["phases"]`` with what
   each model role spent in it (calls, prompt tokens sent, of them reused from the server's prefix cache,
   generated tokens); start-up (imports, the task, the knowledge graph, the model server) runs from the spawn to
   the first phase, scoring and writing from the last phase's end to the exit. Per phase it prints the wall
   seconds, the tokens, and the **bound**: evaluated prompt tokens / the prompt rate + generated tokens / the
   generation rate, the seconds the model alone needs for the phase's calls one at a time. ``run/bound`` is the
   number to drive down (the target is 1.3 or less for the whole run on --limit 50 with SmolLM2-135M).
4. **The full split**: the phases that do not grow with the test pairs (the GNN, the repository, the choice of
   lambda, start-up) plus the queries' seconds a pair times the split's pairs; the plan's projection for the same
   run (``ddibench run --plan``) beside it.

A phase without LLM calls has no bound: its seconds are the harness's and the GNN's own work, counted in the
whole run's ratio. Run it on an idle machine, under ``nice`` if anything else runs; it asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

MODELS = {"smollm2": "smollm2-135m-instruct", "qwen2.5-coder-1.5b": "qwen2.5-coder-1.5b-instruct"}


def measure_rates(model: str, threads: int) -> dict[str, float]:
    """The model's one-request rates on an embedded server with ``threads`` threads, as the run will start it."""
    from ddibench.llm import LLMPool, ModelSpec, measure_throughput

    async def go() -> dict[str, float]:
        pool = LLMPool({"generator": ModelSpec.parse(f"embedded:{model}")}, cache=None, n_threads=threads)
        await pool.start(["generator"])
        try:
            r = await measure_throughput(pool.client("generator"), prompt_tokens=1024, generated_tokens=64)
        finally:
            await pool.close()
        return {"prompt_per_s": r.prompt_per_s, "generated_per_s": r.generated_per_s}

    return asyncio.run(go())


def run_command(args: argparse.Namespace, model: str, work: Path) -> tuple[Path, float, float]:
    """The headline command for ``model``: its run directory and its start and end (Unix time)."""
    run_dir = work / f"run-{model}"
    cmd = [sys.executable, "-m", "ddibench", "run", "-s", "cbr-ddi", "-t", args.task, "--limit", str(args.limit)]
    cmd += ["-m", f"embedded:{model}", "--run-dir", str(run_dir)]
    cmd += ["--concurrency", str(args.concurrency)] if args.concurrency else []
    for option in args.config:
        cmd += ["-C", option]
    env = dict(os.environ)
    if args.reuse_artifacts:  # the user's response cache would answer from earlier runs: none is read
        cmd.append("--no-cache")
    else:  # an empty response cache, as on a first run: a call repeated within the run is answered from it
        from ddibench.llm._weights import models_root

        env["DDIBENCH_MODELS"] = str(models_root())  # the weights already here; everything else starts empty
        env["DDIBENCH_CACHE"] = str(work / f"cache-{model}")
    started = time.time()
    done = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    ended = time.time()
    if done.returncode:
        raise SystemExit(f"[{model}] ddibench run exited with {done.returncode}:\n{done.stderr[-3000:]}")
    return run_dir, started, ended


def account(run_dir: Path, started: float, ended: float, rates: dict[str, float]) -> list[dict[str, Any]]:
    """One row per phase (start-up and scoring included) and the whole command: seconds, tokens and bound."""
    results = json.loads((run_dir / "results.json").read_text(encoding="utf-8"))
    phases = [dict(p) for p in results["system_info"].get("phases", [])]
    first = phases[0]["started_at"] if phases else ended
    last = max((p["started_at"] + p["wall_s"] for p in phases), default=started)
    rows: list[dict[str, Any]] = [
        {"phase": "start-up (imports, task, KG, model server)", "wall_s": first - started, "llm": {}}
    ]
    rows += phases
    rows.append({"phase": "scoring and writing (to exit)", "wall_s": ended - last, "llm": {}})
    for row in rows:
        used = row.get("llm", {}).values()
        row["calls"] = sum(u["calls"] for u in used)
        row["sent"] = sum(u["prompt_tokens"] for u in used)
        row["reused"] = sum(u["reused_prompt_tokens"] for u in used)
        row["evaluated"] = row["sent"] - row["reused"]
        row["generated"] = sum(u["completion_tokens"] for u in used)
        row["bound_s"] = row["evaluated"] / rates["prompt_per_s"] + row["generated"] / rates["generated_per_s"]
    total = {key: sum(r[key] for r in rows) for key in ("calls", "sent", "reused", "evaluated", "generated", "bound_s")}
    rows.append({"phase": "whole command", "wall_s": ended - started, **total})
    return rows


def projection(args: argparse.Namespace, model: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The full split's seconds from this run (fixed phases + the queries' seconds a pair x the split's pairs),
    and the plan's projection of the same full run."""
    from ddibench.llm import parse_model_options
    from ddibench.runner.forecast import forecast
    from ddibench.runner.plan import RunRequest
    from ddibench.system import parse_config_overrides

    config = parse_config_overrides(args.config)
    plan = forecast(RunRequest(args.task, "cbr-ddi", parse_model_options([f"embedded:{model}"]), config=config))
    queries = next((r for r in rows if r["phase"] == "queries"), None)
    whole = rows[-1]
    per_pair = queries["wall_s"] / args.limit if queries else 0.0
    fixed = whole["wall_s"] - (queries["wall_s"] if queries else 0.0)
    bound_pair = queries["bound_s"] / args.limit if queries else 0.0
    return {
        "pairs": plan.of,
        "seconds": fixed + per_pair * plan.of,
        "bound_s": whole["bound_s"] - (queries["bound_s"] if queries else 0.0) + bound_pair * plan.of,
        "per_pair_s": per_pair,
        "plan_seconds": plan.seconds,
    }


def hours(seconds: float) -> str:
    return f"{seconds / 3600:,.1f} h" if seconds >= 3600 else f"{seconds / 60:,.1f} min"


def print_account(model: str, rates: dict[str, float], rows: list[dict[str, Any]], full: dict[str, Any]) -> None:
    print(
        f"\n== cbr-ddi on the headline task with {model}: {rates['prompt_per_s']:,.0f} prompt and "
        f"{rates['generated_per_s']:,.1f} generated tokens/s (one request; the mean of the rates measured just before "
        "and just after the run)"
    )
    head = f"{'phase':<44}{'wall s':>9}{'calls':>7}{'sent':>10}{'reused':>10}{'evaluated':>10}{'generated':>10}"
    print(head + f"{'bound s':>9}{'run/bound':>10}")
    for r in rows:
        ratio = f"{r['wall_s'] / r['bound_s']:>10.2f}" if r["bound_s"] > 0 else f"{'-':>10}"
        print(
            f"{r['phase'][:43]:<44}{r['wall_s']:>9.1f}{r['calls']:>7,}{r['sent']:>10,}{r['reused']:>10,}"
            f"{r['evaluated']:>10,}{r['generated']:>10,}{r['bound_s']:>9.1f}{ratio}"
        )
    plan = hours(full["plan_seconds"]) if full["plan_seconds"] else "not timed"
    print(
        f"full split ({full['pairs']:,} pairs): about {hours(full['seconds'])} at this run's rate "
        f"({full['per_pair_s']:.1f} s a pair), bound {hours(full['bound_s'])}; the plan says {plan}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2,qwen2.5-coder-1.5b", help="embedded models, comma separated")
    parser.add_argument("--task", default="drugbank_s2")
    parser.add_argument("--limit", type=int, default=50)
    parser.add_argument("--concurrency", type=int, default=None, help="the run's --concurrency (server slots)")
    parser.add_argument("-C", "--config", action="append", default=[], help="a cbr-ddi option KEY=VALUE")
    parser.add_argument("--reuse-artifacts", action="store_true", help="keep the user's artifact store")
    parser.add_argument("--json", type=Path, default=None, help="write every row here too")
    parser.add_argument("--keep", type=Path, default=None, help="keep the runs in this folder")
    args = parser.parse_args()

    from ddibench.runner.plan import embedded_threads

    work = args.keep or Path(tempfile.mkdtemp(prefix="ddibench-headline-"))
    work.mkdir(parents=True, exist_ok=True)
    out = {}
    for name in args.model.split(","):
        model = MODELS.get(name, name)
        threads = embedded_threads()
        before = measure_rates(model, threads)
        run_dir, started, ended = run_command(args, model, work)
        after = measure_rates(model, threads)  # a machine whose load changed during the run shows it here
        rates = {key: (before[key] + after[key]) / 2 for key in before}
        rows = account(run_dir, started, ended, rates)
        full = projection(args, model, rows)
        print_account(model, rates, rows, full)
        print(
            f"rates before the run {before['prompt_per_s']:,.0f} / {before['generated_per_s']:,.1f}, after it "
            f"{after['prompt_per_s']:,.0f} / {after['generated_per_s']:,.1f} tokens/s (the bound uses their mean); "
            f"{threads} server thread(s), load {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs at the end"
        )
        out[model] = {
            "threads": threads,
            "rates": rates,
            "rates_measured": {"before": before, "after": after},
            "rows": rows,
            "full_split": full,
            "run_dir": str(run_dir),
        }
    if args.json:
        args.json.write_text(json.dumps({"limit": args.limit, "task": args.task, "models": out}, indent=1))


if __name__ == "__main__":
    main()
