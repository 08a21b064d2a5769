"""What one request gets from a model here and now: prompt tokens evaluated a second and tokens generated a second.

``ddibench doctor`` prints it for the model it checks; ``benchmarks/headline.py`` divides a run's tokens by it to
get the model's own bound for the run's work. It is measured through the same client a run uses (any endpoint,
embedded or served), uncached, with two requests after a warm-up:

* **prompt**: a prompt of about ``prompt_tokens`` tokens that starts with a fresh nonce, so that no prefix of it is
  in the server's cache, answered with one token: its evaluated tokens (sent less what the endpoint says it
  reused) over the request's seconds;
* **generation**: a short prompt asking for a long list, cut at ``generated_tokens``: its generated tokens over the
  request's seconds less the time its prompt takes at the measured prompt rate;
* with ``parallel=N``, **generation with N requests in flight** (the embedded server's slots decode them together):
  their generated tokens over the seconds from the first request out to the last answer in, less one prompt's
  time. A run's generation roles (``BaseSystem.generation_roles``) get this rate on the embedded server.

Each figure includes what a request costs besides the model (HTTP, JSON, the server's scheduling), as a run's
requests do; on a llama.cpp server that is a few milliseconds.

``ddibench doctor`` keeps what it measured in ``throughput.json`` of the user cache, by model spec and with the
server's threads; ``ddibench run --plan`` times that model's calls at the kept rate while the server would get
the same threads (:func:`measured_rates`), so the plan uses what this machine did, not a table.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

from ddibench.llm._client import LLMClient

# a sentence of ordinary pharmacology prose, repeated to the prompt's length (about 17 tokens for most tokenizers)
_FILLER = "The hepatic clearance of the second drug is reduced when both are taken together at usual doses. "


@dataclass(frozen=True)
class MeasuredThroughput:
    """Tokens a second one request got, and the requests it was measured on."""

    prompt_per_s: float
    generated_per_s: float
    prompt_tokens: int  # evaluated in the prompt request
    generated_tokens: int  # generated in the generation request
    generated_parallel_per_s: float | None = None  # with ``parallel`` requests in flight (None: not measured)
    parallel: int = 1

    def line(self) -> str:
        together = (
            f"; {self.generated_parallel_per_s:,.1f} generated tokens/s with {self.parallel} requests at once"
            if self.generated_parallel_per_s
            else ""
        )
        return (
            f"{self.prompt_per_s:,.0f} prompt tokens/s ({self.prompt_tokens:,} evaluated), "
            f"{self.generated_per_s:,.1f} generated tokens/s ({self.generated_tokens} generated), one request"
            + together
        )


async def measure_throughput(
    client: LLMClient, prompt_tokens: int = 512, generated_tokens: int = 48, parallel: int = 1
) -> MeasuredThroughput:
    """Measures one request's prompt and generation rates on ``client``'s endpoint (see the module's docstring)."""
    warm = [{"role": "user", "content": "Say OK."}]
    await client.chat(warm, max_tokens=1, use_cache=False)  # loads the weights into memory, fills no slot cache
    filler = _FILLER * max(1, prompt_tokens // 17)
    prompt = [{"role": "user", "content": f"[{secrets.token_hex(8)}] {filler}\nAnswer with one word."}]
    first = await client.chat(prompt, max_tokens=1, use_cache=False)
    evaluated = max(1, first.prompt_tokens - first.reused_prompt_tokens)
    prompt_rate = evaluated / max(first.latency_s, 1e-6)

    def ask() -> list[dict[str, str]]:
        text = f"[{secrets.token_hex(8)}] List the integers from 1 to 500, separated by commas, and nothing else."
        return [{"role": "user", "content": text}]

    second = await client.chat(ask(), max_tokens=generated_tokens, use_cache=False)
    prompt_s = (second.prompt_tokens - second.reused_prompt_tokens) / prompt_rate
    generated = max(1, second.completion_tokens)
    generated_rate = generated / max(second.latency_s - prompt_s, 1e-6)
    together = None
    if parallel > 1:
        start = time.perf_counter()
        answers = await asyncio.gather(
            *(client.chat(ask(), max_tokens=generated_tokens, use_cache=False) for _ in range(parallel))
        )
        wall = time.perf_counter() - start
        together = sum(a.completion_tokens for a in answers) / max(wall - prompt_s, 1e-6)
    return MeasuredThroughput(prompt_rate, generated_rate, evaluated, generated, together, parallel)


@dataclass(frozen=True)
class KeptThroughput:
    """A measurement kept by ``ddibench doctor``: the rates, the server's threads and when."""

    prompt_per_s: float
    generated_per_s: float
    threads: int | None  # the embedded server's threads (None: a served model)
    measured_at: str  # ISO time, UTC
    generated_parallel_per_s: float | None = None  # with several requests in flight (kept since 2026-11-29)

    def source(self) -> str:
        threads = f" with {self.threads} server thread{'s' if self.threads != 1 else ''}" if self.threads else ""
        return f"measured by 'ddibench doctor' on this machine{threads}, {self.measured_at[:16].replace('T', ' ')} UTC"


def _kept_file() -> Path:
    from ddibench.data.resolve import cache_root

    return cache_root() / "throughput.json"


def keep_measured(spec_display: str, rates: MeasuredThroughput, threads: int | None) -> None:
    """Keeps ``rates`` for the model ``spec_display`` (written whole, atomically; other models' entries stay)."""
    path = _kept_file()
    kept = _read_kept(path)
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    kept[spec_display] = asdict(
        KeptThroughput(rates.prompt_per_s, rates.generated_per_s, threads, now, rates.generated_parallel_per_s)
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(kept, indent=1, sort_keys=True), encoding="utf-8")
    os.replace(tmp, path)


def measured_rates(spec_display: str, threads: int | None) -> KeptThroughput | None:
    """The kept measurement of ``spec_display`` when it was taken with ``threads`` server threads (an embedded
    model's speed depends on them), else None."""
    entry = _read_kept(_kept_file()).get(spec_display)
    if not isinstance(entry, dict):
        return None
    try:
        kept = KeptThroughput(**entry)
    except TypeError:
        return None
    if kept.threads != threads or not (kept.prompt_per_s > 0 and kept.generated_per_s > 0):
        return None
    return kept


def _read_kept(path: Path) -> dict[str, object]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
