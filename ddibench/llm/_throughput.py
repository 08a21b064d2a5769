"""What one request gets from a model here and now: prompt tokens evaluated a second and tokens generated a second.

``ddibench doctor`` prints it for the model it checks; ``benchmarks/headline.py`` divides a run's tokens by it to
get the model's own bound for the run's work. It is measured through the same client a run uses (any endpoint,
embedded or served), uncached, with two requests after a warm-up:

* **prompt**: a prompt of about ``prompt_tokens`` tokens that starts with a fresh nonce, so that no prefix of it is
  in the server's cache, answered with one token: its evaluated tokens (sent less what the endpoint says it
  reused) over the request's seconds;
* **generation**: a short prompt asking for a long list, cut at ``generated_tokens``: its generated tokens over the
  request's seconds less the time its prompt takes at the measured prompt rate.

Each figure includes what a request costs besides the model (HTTP, JSON, the server's scheduling), as a run's
requests do; on a llama.cpp server that is a few milliseconds.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

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

    def line(self) -> str:
        return (
            f"{self.prompt_per_s:,.0f} prompt tokens/s ({self.prompt_tokens:,} evaluated), "
            f"{self.generated_per_s:,.1f} generated tokens/s ({self.generated_tokens} generated), one request"
        )


async def measure_throughput(
    client: LLMClient, prompt_tokens: int = 512, generated_tokens: int = 48
) -> MeasuredThroughput:
    """Measures one request's prompt and generation rates on ``client``'s endpoint (see the module's docstring)."""
    warm = [{"role": "user", "content": "Say OK."}]
    await client.chat(warm, max_tokens=1, use_cache=False)  # loads the weights into memory, fills no slot cache
    filler = _FILLER * max(1, prompt_tokens // 17)
    prompt = [{"role": "user", "content": f"[{secrets.token_hex(8)}] {filler}\nAnswer with one word."}]
    first = await client.chat(prompt, max_tokens=1, use_cache=False)
    evaluated = max(1, first.prompt_tokens - first.reused_prompt_tokens)
    prompt_rate = evaluated / max(first.latency_s, 1e-6)
    ask = [
        {
            "role": "user",
            "content": f"[{secrets.token_hex(8)}] List the integers from 1 to 500, separated by commas, "
            "and nothing else.",
        }
    ]
    second = await client.chat(ask, max_tokens=generated_tokens, use_cache=False)
    prompt_s = (second.prompt_tokens - second.reused_prompt_tokens) / prompt_rate
    generated = max(1, second.completion_tokens)
    generated_rate = generated / max(second.latency_s - prompt_s, 1e-6)
    return MeasuredThroughput(prompt_rate, generated_rate, evaluated, generated)
