"""Choosing an option by the model's likelihood instead of its greedy answer (``answer_mode=likelihood`` and
``likelihood-text``).

The options are the strings an answer can go on with after a fixed prefix (the option numbers "1" to "86"
after ``{"type": ``, or the options' texts after ``{"interaction": "``); an option ends where the answer goes on
with one of ``closers`` (a space, ``}`` or ``,`` after a JSON number; ``"`` after a text) that extends no option. lm-eval scores multiple-choice options from the log-probabilities of prompt tokens
(``echo``), which llama.cpp's server does not return; what it returns, like vLLM and OpenAI, are the top
log-probabilities of the *next* token. So the options are walked as a tree of their common prefixes: one
request per node with more than one way on (``max_tokens=1``, ``top_logprobs=20``, the answer so far as an
assistant prefix the model continues). At each node the moves that lead into an option or end one are
renormalised — the distribution a decoder constrained to the options draws from — and an option's score
is the sum of its moves' log-probabilities. With a tokenizer that writes digits one by one (Qwen2.5,
SmolLM2), 86 numbered options take 9 requests; each continues the cached prompt, so a request costs a few
new tokens (the walk holds its endpoint slot, so no other sample's request evicts that prompt in between). A
stretch that every option still going on shares costs no request: the constrained decoder takes it with
probability 1, so the walk goes straight to the last word boundary before they part and texts cost about one
request per such point. An option none of whose moves is among a node's top tokens is
not scored (``None``).

Why not the greedy answer: greedy decoding commits to the first digit before it sees the second, so "1"
collects the mass of options 1 and 10-19 (eleven options) and "9" only its own; the likelihood compares
whole options.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

NUMBER_CLOSERS = " \t\r\n},"  # what can follow a JSON number: it ends there
TOP_LOGPROBS = 20  # the most OpenAI-compatible servers return (OpenAI's and vLLM's default cap)


@dataclass
class OptionScores:
    logprobs: list[float | None]  # per option (None: not scored), renormalised over the valid moves
    calls: list[Any] = field(default_factory=list)  # the ChatResults, in request order
    prefixes: list[str] = field(default_factory=list)  # the answer so far of each request

    def add(self, i: int, logprob: float) -> None:
        """Another way to option ``i`` (a token that completes it and one that ends it both count)."""
        old = self.logprobs[i]
        self.logprobs[i] = logprob if old is None else _logsumexp([old, logprob])

    def best(self) -> int | None:
        """The most likely scored option (ties: the first), or None when none was scored."""
        scored = [(lp, -i) for i, lp in enumerate(self.logprobs) if lp is not None]
        return -max(scored)[1] if scored else None

    def ranked(self, n: int = 10) -> list[list[Any]]:
        """The ``n`` most likely options as ``[index, logprob]`` (for traces)."""
        scored = (i for i, lp in enumerate(self.logprobs) if lp is not None)
        order = sorted(scored, key=lambda i: (-self.logprobs[i], i))  # type: ignore[operator]
        return [[i, round(float(self.logprobs[i]), 4)] for i in order[:n]]  # type: ignore[arg-type]


def _logsumexp(values: Sequence[float]) -> float:
    top = max(values)
    return top + math.log(sum(math.exp(v - top) for v in values))


async def option_likelihoods(
    client: Any,
    messages: list[dict[str, Any]],
    prefix: str,
    options: Sequence[str],
    *,
    top: int = TOP_LOGPROBS,
    seed: int | None = None,
    closers: str = NUMBER_CLOSERS,
) -> OptionScores:
    """Score each of ``options`` as the continuation of ``prefix`` after ``messages`` (see the module)."""
    if len(set(options)) != len(options) or any(not o for o in options):
        raise ValueError("options must be distinct, non-empty strings")
    async with client.holding():  # the walk's requests back to back: each continues the cached prompt
        return await _walk(client, messages, prefix, options, top, seed, closers)


async def _walk(
    client: Any,
    messages: list[dict[str, Any]],
    prefix: str,
    options: Sequence[str],
    top: int,
    seed: int | None,
    closers: str,
) -> OptionScores:
    index = {o: i for i, o in enumerate(options)}
    out = OptionScores(logprobs=[None] * len(options))
    # the answers so far still to expand, with the log-probabilities of the ways there: the shortest first, so
    # every way to a node (two tokenisations of one text) is summed before the node is asked about
    pending: dict[str, list[float]] = {"": [0.0]}

    def reach(text: str, logprob: float) -> None:
        pending.setdefault(text, []).append(logprob)

    while pending:
        here = min(pending, key=len)
        base = _logsumexp(pending.pop(here))
        going_on = [o for o in options if len(o) > len(here) and o.startswith(here)]
        if not going_on:  # nothing goes on: it can only end
            if here in index:
                out.add(index[here], base)
            continue
        stretch = _shared_stretch(here, going_on)
        if here not in index and stretch > len(here):  # a decoder held to the options takes it
            reach(going_on[0][:stretch], base)
            continue
        result = await client.chat(
            messages, prefill=prefix + here, max_tokens=1, top_logprobs=top, temperature=0.0, seed=seed
        )
        out.calls.append(result)
        out.prefixes.append(prefix + here)
        children, endings = _moves(here, result.top_logprobs or (), options, closers)
        moves = [lp for lps in (*children.values(), *endings.values()) for lp in lps]
        if not moves:
            continue  # no valid move among the top tokens: the options below are not scored
        total = _logsumexp(moves)
        for option, lps in endings.items():
            out.add(index[option], base + _logsumexp(lps) - total)
        for text, lps in sorted(children.items()):
            reach(text, base + _logsumexp(lps) - total)
    return out


def _moves(
    here: str, top_logprobs: Sequence[tuple[str, float]], options: Sequence[str], closers: str
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """The top tokens after ``here`` that lead into an option (the text they reach -> their log-probabilities)
    and those that end one (the option -> theirs); any other token leads nowhere."""
    children: dict[str, list[float]] = {}
    endings: dict[str, list[float]] = {}
    for token, logprob in top_logprobs:
        text = here + token
        if len(text) > len(here) and any(o.startswith(text) for o in options):
            children.setdefault(text, []).append(logprob)
            continue
        # the token ends an option (here, or a longer one it completes) with a closing character
        for option in options:
            closes = (
                len(option) >= len(here)
                and text.startswith(option)
                and len(text) > len(option)
                and text[len(option)] in closers
            )
            if closes and not any(o.startswith(text[: len(option) + 1]) for o in options):
                endings.setdefault(option, []).append(logprob)
    return children, endings


def _shared_stretch(here: str, going_on: Sequence[str]) -> int:
    """How far past ``here`` every option still going on agrees, cut back to where a token can end: before a
    space that each of them has next (or at an option's end). A walk cut inside a word or after a space would
    ask the model to go on from a place its tokeniser never stops at ("...may in" + "crease", or "Drug A " +
    "may" where the model writes " may"), and its top tokens would miss the options. ``len(here)`` when no such
    place lies beyond it."""
    common = os.path.commonprefix(list(going_on))
    for end in range(len(common), len(here), -1):
        if not common[end - 1].isspace() and all(len(o) == end or o[end].isspace() for o in going_on):
            return end
    return len(here)
