#!/usr/bin/env python3
"""An account of the headline command, ``ddibench run --system cbr-ddi --task drugbank_s2``: where its seconds go,
phase by phase, beside what the model itself needs for the same work.

    python benchmarks/headline.py [--model smollm2,qwen2.5-coder-1.5b] [--limit 50] [--task drugbank_s2]
        [--concurrency N] [-C KEY=VALUE ...] [--reuse-artifacts] [--json out.json] [--keep DIR]
        [--project qwen2.5-coder-1.5b] [--recount OLD.json [--rates-from NEW.json]]

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

5. **A projection** (``--project MODEL``), for a model whose own run does not fit a session (the 1.5B reader's
   catalogue alone is hours on two cores): that model's costs measured here, and the run's account redone with
   them, call by call with the same tokens, each phase at the run/bound the measured run showed
   (:func:`projected_rows` says what it assumes). ``--recount OLD.json --project MODEL`` projects from a kept record.

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
    """The model's one-request rates on an embedded server with ``threads`` threads, as the run will start it:
    doctor's two figures, and the costs of a token by its position (:func:`measure_costs`)."""
    from ddibench.llm import EMBEDDED_SLOTS, LLMPool, ModelSpec, measure_throughput
    from ddibench.llm._throughput import keep_measured

    async def go() -> dict[str, float]:
        spec = ModelSpec.parse(f"embedded:{model}")
        pool = LLMPool({"generator": spec}, cache=None, n_threads=threads, embedded_slots=EMBEDDED_SLOTS)
        await pool.start(["generator"])
        try:
            client = pool.client("generator")
            r = await measure_throughput(client, prompt_tokens=1024, generated_tokens=64, parallel=EMBEDDED_SLOTS)
            costs = await measure_costs(client)
        finally:
            await pool.close()
        # kept as doctor keeps them: the plan printed beside the run times the model at this machine's rates
        keep_measured(spec.display(), r, threads)
        return {
            "prompt_per_s": r.prompt_per_s,
            "generated_per_s": r.generated_per_s,
            "generated_parallel_per_s": r.generated_parallel_per_s or 0.0,
            **costs,
        }

    return asyncio.run(go())


# a sentence of ordinary prose, repeated to a prompt's length
FILLER = "The hepatic clearance of the second drug is reduced when both are taken together at usual doses. "


async def measure_costs(client: Any, short: int = 256, long: int = 2048, generated: int = 64) -> dict[str, float]:
    """Seconds one token costs at context position p, for prompt evaluation and for generation, each fit as
    ``a + b * p`` from a request at a short and at a long context (attention reads every earlier token, so a
    token of a 2,400-token query costs more than one of a 70-token description request; a bound from a single
    rate would be wrong for one of them). Prompt requests answer one token; generation requests write
    ``generated`` tokens past the end of sequence (llama.cpp's ``ignore_eos``)."""
    import secrets

    async def request(tokens: int, generate: int) -> tuple[int, int, int, float]:
        text = f"[{secrets.token_hex(8)}] " + FILLER * max(1, tokens // 17) + "\nContinue the text."
        extra = {"ignore_eos": True} if generate > 1 else None
        r = await client.chat([{"role": "user", "content": text}], max_tokens=generate, use_cache=False, extra=extra)
        return r.prompt_tokens, r.reused_prompt_tokens, r.completion_tokens, r.latency_s

    await client.chat([{"role": "user", "content": "Say OK."}], max_tokens=1, use_cache=False)  # loads the weights
    (p1, r1, _, t1), (p2, r2, _, t2) = [await request(n, 1) for n in (short, long)]
    # t = a (s - r) + b (s^2 - r^2) / 2 for the tokens from position r to s
    a, b = _solve((p1 - r1, (p1**2 - r1**2) / 2, t1), (p2 - r2, (p2**2 - r2**2) / 2, t2))

    def prompt_s(sent: float, reused: float) -> float:
        return a * (sent - reused) + b * (sent**2 - reused**2) / 2

    (q1, s1, g1, u1), (q2, s2, g2, u2) = [await request(n, generated) for n in (short, long)]
    # generation after a prompt of q tokens: c g + d (q g + g^2 / 2)
    c, d = _solve(
        (g1, q1 * g1 + g1**2 / 2, u1 - prompt_s(q1, s1)),
        (g2, q2 * g2 + g2**2 / 2, u2 - prompt_s(q2, s2)),
    )
    return {"prompt_a": a, "prompt_b": b, "gen_c": c, "gen_d": d}


def _solve(first: tuple[float, float, float], second: tuple[float, float, float]) -> tuple[float, float]:
    """x, y with x * u + y * v = t for both (u, v, t), neither below 0: a negative slope or a negative intercept
    is the noise of two timings, and then the one term left is fit to both (a flat cost a token, or one that
    grows with the position from nothing)."""
    (u1, v1, t1), (u2, v2, t2) = first, second
    det = u1 * v2 - u2 * v1
    y = (u1 * t2 - u2 * t1) / det if det else 0.0
    if y < 0:
        return (t1 + t2) / (u1 + u2), 0.0
    x = (t1 - y * v1) / u1
    if x < 0:
        return 0.0, (t1 + t2) / (v1 + v2)
    return x, y


def bound_seconds(calls: int, sent: int, reused: int, generated: int, costs: dict[str, float]) -> float:
    """The seconds the model needs for a phase's calls one at a time, each taken as the phase's mean call: its
    prompt evaluated from the reused prefix's end to its end, then its answer generated after it."""
    if not calls:
        return 0.0
    s, r, g = sent / calls, reused / calls, generated / calls
    prompt = costs["prompt_a"] * (s - r) + costs["prompt_b"] * (s**2 - r**2) / 2
    gen = costs["gen_c"] * g + costs["gen_d"] * (s * g + g**2 / 2)
    return calls * (prompt + gen)


def pinned_threads() -> int:
    """The embedded server's threads, pinned in ``$DDIBENCH_THREADS``: the rates, the run and the plan beside it
    all get the same threads."""
    from ddibench.runner.plan import embedded_threads

    threads = embedded_threads()
    os.environ["DDIBENCH_THREADS"] = str(threads)
    return threads


def rates_from(args: argparse.Namespace) -> dict[str, Any]:
    """The models' rates kept in ``--rates-from`` (a ``--rates-only`` or earlier ``--json``), or none."""
    return json.loads(args.rates_from.read_text(encoding="utf-8"))["models"] if args.rates_from else {}


def run_command(args: argparse.Namespace, model: str, work: Path, threads: int) -> tuple[Path, float, float]:
    """The headline command for ``model``: its run directory and its start and end (Unix time)."""
    run_dir = work / f"run-{model}"
    cmd = [sys.executable, "-m", "ddibench", "run", "-s", "cbr-ddi", "-t", args.task, "--limit", str(args.limit)]
    cmd += ["-m", f"embedded:{model}", "--run-dir", str(run_dir)]
    cmd += ["--concurrency", str(args.concurrency)] if args.concurrency else []
    for option in args.config:
        cmd += ["-C", option]
    env = dict(os.environ, DDIBENCH_THREADS=str(threads))  # the threads the rates were measured with
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
    rows.append({"phase": "whole command", "wall_s": ended - started})
    return bounded(rows, rates)


def bounded(rows: list[dict[str, Any]], rates: dict[str, float]) -> list[dict[str, Any]]:
    """The phases' tokens and bounds with these rates; the last row (the whole command) sums the others."""
    for row in rows[:-1]:
        used = row.get("llm", {}).values()
        row["calls"] = sum(u["calls"] for u in used)
        row["sent"] = sum(u["prompt_tokens"] for u in used)
        row["reused"] = sum(u["reused_prompt_tokens"] for u in used)
        row["evaluated"] = row["sent"] - row["reused"]
        row["generated"] = sum(u["completion_tokens"] for u in used)
        row["flat_bound_s"] = row["evaluated"] / rates["prompt_per_s"] + row["generated"] / rates["generated_per_s"]
        row["bound_s"] = sum(
            bound_seconds(u["calls"], u["prompt_tokens"], u["reused_prompt_tokens"], u["completion_tokens"], rates)
            for u in used
        )
    keys = ("calls", "sent", "reused", "evaluated", "generated", "bound_s", "flat_bound_s")
    rows[-1].update({key: sum(r[key] for r in rows[:-1]) for key in keys})
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
        f"{rates['generated_per_s']:,.1f} generated tokens/s (one request, doctor's figures; the mean of the rates "
        "measured just before and just after the run)"
    )
    print(
        f"a token costs {1e3 * rates['prompt_a']:.3f} ms + {1e6 * rates['prompt_b']:.3f} us x its position to "
        f"evaluate, {1e3 * rates['gen_c']:.3f} ms + {1e6 * rates['gen_d']:.3f} us x its position to generate "
        "(the bound; 'flat' divides by doctor's two rates)"
    )
    head = f"{'phase':<44}{'wall s':>9}{'cpu s':>8}{'calls':>7}{'sent':>10}{'reused':>10}{'evaluated':>10}{'generated':>10}"
    print(head + f"{'bound s':>9}{'run/bound':>10}{'flat s':>9}{'run/flat':>9}")
    for r in rows:
        ratio = f"{r['wall_s'] / r['bound_s']:>10.2f}" if r["bound_s"] > 0 else f"{'-':>10}"
        flat = f"{r['wall_s'] / r['flat_bound_s']:>9.2f}" if r["flat_bound_s"] > 0 else f"{'-':>9}"
        cpu = f"{r['cpu_s']:>8.1f}" if "cpu_s" in r else f"{'-':>8}"
        print(
            f"{r['phase'][:43]:<44}{r['wall_s']:>9.1f}{cpu}{r['calls']:>7,}{r['sent']:>10,}{r['reused']:>10,}"
            f"{r['evaluated']:>10,}{r['generated']:>10,}{r['bound_s']:>9.1f}{ratio}{r['flat_bound_s']:>9.1f}{flat}"
        )
    plan = hours(full["plan_seconds"]) if full["plan_seconds"] else "not timed"
    print(
        f"full split ({full['pairs']:,} pairs): about {hours(full['seconds'])} at this run's rate "
        f"({full['per_pair_s']:.1f} s a pair), bound {hours(full['bound_s'])}; the plan says {plan}"
    )


def project_all(args: argparse.Namespace, measured: dict[str, Any]) -> dict[str, Any]:
    """``--project``: the costs of another model measured here and now, and its account projected from each run."""
    from ddibench.registry import get_system_class

    target = MODELS.get(args.project, args.project)
    threads = pinned_threads()
    other = rates_from(args)
    rates = other[target]["rates"] if target in other else measure_rates(target, threads)
    together = () if args.concurrency else tuple(getattr(get_system_class("cbr-ddi"), "generation_roles", ()))
    out = {}
    for source, kept in measured.items():
        rows = projected_rows(kept["rows"], kept["rates"], rates, together)
        full = projection(args, target, rows)
        print_projection(target, source, rates, rows, full)
        out[f"{target} from {source}"] = {"threads": threads, "rates": rates, "rows": rows, "full_split": full}
    return out


def projected_rows(
    rows: list[dict[str, Any]], measured: dict[str, float], target: dict[str, float], together: tuple[str, ...]
) -> list[dict[str, Any]]:
    """Another model's account of the same run, phase by phase: each role's calls with the same tokens, bounded
    with the other model's cost of a token, times the phase's run/bound as measured (what the harness, the
    server's slots and the prefix cache made of the bound). A generation role's requests share the server's slots:
    its ratio is scaled by the measured model's gain from the slots over the other's (``generated_parallel_per_s``
    over ``generated_per_s``). A phase without a model call keeps its seconds (the GNN, the embeddings, start-up
    and scoring do not depend on the reader). The tokens are the measured model's: another model's answers differ
    in length (descriptions stop at their ``max_tokens`` either way), so this is a projection, not a run."""

    def gain(rates: dict[str, float]) -> float:
        return (rates.get("generated_parallel_per_s") or rates["generated_per_s"]) / rates["generated_per_s"]

    slots = gain(measured) / gain(target)
    out: list[dict[str, Any]] = []
    for row in rows[:-1]:
        used = row.get("llm", {})
        if not used:
            out.append({**row, "measured_wall_s": row["wall_s"], "measured_bound_s": 0.0})
            continue
        ratio = row["wall_s"] / row["bound_s"] if row["bound_s"] else 1.0
        wall = bound = 0.0
        for role, u in used.items():
            b = bound_seconds(u["calls"], u["prompt_tokens"], u["reused_prompt_tokens"], u["completion_tokens"], target)
            bound += b
            wall += b * ratio * (slots if role in together else 1.0)
        out.append(
            {
                **row,
                "wall_s": wall,
                "bound_s": bound,
                "measured_wall_s": row["wall_s"],
                "measured_bound_s": row["bound_s"],
            }
        )
    keys = ("wall_s", "bound_s", "measured_wall_s", "calls", "evaluated", "generated")
    out.append({"phase": "whole command", **{key: sum(r[key] for r in out) for key in keys}})
    return out


def print_projection(
    target: str, source: str, rates: dict[str, float], rows: list[dict[str, Any]], full: dict[str, Any]
) -> None:
    print(
        f"\n== projected for {target} from the run with {source}: {rates['prompt_per_s']:,.1f} prompt and "
        f"{rates['generated_per_s']:,.1f} generated tokens/s one request at a time, "
        f"{rates['generated_parallel_per_s']:,.1f} generated with the slots decoding together"
    )
    print(
        f"a token costs {1e3 * rates['prompt_a']:.3f} ms + {1e6 * rates['prompt_b']:.3f} us x its position to "
        f"evaluate, {1e3 * rates['gen_c']:.3f} ms + {1e6 * rates['gen_d']:.3f} us x its position to generate"
    )
    print(
        f"{'phase':<44}{'measured s':>11}{'calls':>7}{'evaluated':>10}{'generated':>10}{'bound s':>10}{'projected s':>12}"
    )
    for r in rows:
        print(
            f"{r['phase'][:43]:<44}{r['measured_wall_s']:>11.1f}{r['calls']:>7,}{r['evaluated']:>10,}"
            f"{r['generated']:>10,}{r['bound_s']:>10.1f}{r['wall_s']:>12.1f}"
        )
    plan = hours(full["plan_seconds"]) if full["plan_seconds"] else "not timed"
    print(
        f"full split ({full['pairs']:,} pairs): about {hours(full['seconds'])} projected "
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
    parser.add_argument(
        "--recount", type=Path, default=None, help="account again the kept runs of an earlier --json (runs nothing)"
    )
    parser.add_argument(
        "--project",
        default=None,
        help="after the runs (or with --recount): measure this embedded model's costs and project its account from "
        "theirs, for a model whose own run does not fit a session",
    )
    parser.add_argument(
        "--rates-only",
        action="store_true",
        help="measure the models' rates and costs only (no run), into --json: for --recount --rates-from",
    )
    parser.add_argument(
        "--rates-from", type=Path, default=None, help="with --recount: the rates of another --json (same machine)"
    )
    args = parser.parse_args()
    if args.recount:
        recount(args)
        return
    if args.rates_only:
        rates_only(args)
        return

    work = args.keep or Path(tempfile.mkdtemp(prefix="ddibench-headline-"))
    work.mkdir(parents=True, exist_ok=True)
    out = {}
    for name in args.model.split(","):
        model = MODELS.get(name, name)
        threads = pinned_threads()
        before = measure_rates(model, threads)
        run_dir, started, ended = run_command(args, model, work, threads)
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
            "started": started,
            "ended": ended,
        }
    record: dict[str, Any] = {"limit": args.limit, "task": args.task, "config": args.config, "models": out}
    if args.project:
        record["projected"] = project_all(args, out)
    if args.json:
        args.json.write_text(json.dumps(record, indent=1))


def rates_only(args: argparse.Namespace) -> None:
    """The models' rates and costs of a token by position, measured now with the threads a run gets."""
    threads = pinned_threads()
    out = {}
    for name in args.model.split(","):
        model = MODELS.get(name, name)
        rates = measure_rates(model, threads)
        print(f"{model}: {json.dumps({key: round(value, 9) for key, value in rates.items()})}")
        out[model] = {"threads": threads, "rates": rates, "measured_at": time.time()}
    if args.json:
        args.json.write_text(json.dumps({"models": out}, indent=1))


def recount(args: argparse.Namespace) -> None:
    """The account of runs an earlier ``--json`` kept, with its rates or those of ``--rates-from`` (the cost of a
    token by position, measured later on the same idle machine, for a record written before it was measured)."""
    earlier = json.loads(args.recount.read_text(encoding="utf-8"))
    other = rates_from(args)
    args.limit, args.task, args.config = earlier["limit"], earlier["task"], earlier.get("config", [])
    for model, kept in earlier["models"].items():
        rates = other[model]["rates"] if model in other else kept["rates"]
        if "prompt_a" not in rates:
            raise SystemExit(f"{args.recount} has no cost of a token by position for {model}: give --rates-from")
        rows = kept["rows"]
        started = kept.get("started") or rows[1]["started_at"] - rows[0]["wall_s"]
        ended = kept.get("ended") or started + rows[-1]["wall_s"]
        if Path(kept["run_dir"], "results.json").exists():
            rows = account(Path(kept["run_dir"]), started, ended, rates)
        else:  # the run itself is gone: its record keeps every role's tokens
            rows = bounded(rows, rates)
        print_account(model, rates, rows, projection(args, model, rows))
        kept.update(rows=rows, rates=rates)  # what --project starts from
    if args.project:
        project_all(args, earlier["models"])


if __name__ == "__main__":
    main()
