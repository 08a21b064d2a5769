"""Per-model API prices: the dated table shipped with the project, merged with ``$DDIBENCH_PRICES``.

Contract: :func:`load_prices` is the one reader of prices; the run plan (``ddibench run --plan``) and the board's
cost columns (``ddibench.results.store``) both call it. It returns ``{model spec: Price}``, prices in USD per 1,000
prompt and completion tokens. The shipped table (``ddibench/data/prices.toml``) names, for each row, the
provider's pricing page and the date it was read; ``$DDIBENCH_PRICES`` names a JSON file in the format the
project has always read (``{"openai:gpt-4o-mini": {"prompt": 0.00015, "completion": 0.0006}}``, optionally with
``"source"`` and ``"read"``), whose rows replace the shipped row of the same model or add models. A model with no
row is unpriced: nothing is guessed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import tomllib

from ddibench.errors import ConfigError

PRICES_ENV = "DDIBENCH_PRICES"


@dataclass(frozen=True)
class Price:
    """What a model's tokens cost (USD per 1,000) and where the figures come from."""

    prompt: float  # USD per 1,000 prompt (uncached input) tokens
    completion: float  # USD per 1,000 completion tokens
    source: str  # the provider's pricing page, or the file the price was read from
    read: str = ""  # the date the figures were read (YYYY-MM-DD)
    via: str = ""  # the page the figures were read from, where it is not the provider's own

    def usd(self, prompt_tokens: float, completion_tokens: float) -> float:
        return (prompt_tokens * self.prompt + completion_tokens * self.completion) / 1000

    def cited(self) -> str:
        """``https://... (via https://...), read 2026-11-29``."""
        via = f" (via {self.via})" if self.via else ""
        return f"{self.source}{via}" + (f", read {self.read}" if self.read else "")


def _price(model: str, row: Any, where: str, source: str, read: str) -> Price:
    if not isinstance(row, dict) or not all(
        isinstance(row.get(k), (int, float)) and not isinstance(row.get(k), bool) and row[k] >= 0
        for k in ("prompt", "completion")
    ):
        raise ConfigError(
            f'the price of \'{model}\' in {where} is not {{"prompt": USD, "completion": USD}}',
            "give both as non-negative numbers of US dollars per 1,000 tokens",
        )
    return Price(
        float(row["prompt"]),
        float(row["completion"]),
        str(row.get("source") or source),
        str(row.get("read") or read),
        str(row.get("via") or ""),
    )


@cache
def shipped_prices() -> dict[str, Price]:
    """The dated table shipped with the project (``ddibench/data/prices.toml``)."""
    text = resources.files("ddibench.data").joinpath("prices.toml").read_text(encoding="utf-8")
    rows = tomllib.loads(text).get("models", {})
    where = "ddibench/data/prices.toml"
    out = {}
    for model, row in rows.items():
        if not row.get("source") or not row.get("read"):
            raise ConfigError(f"the shipped price of '{model}' names no source or date", f"fix {where}")
        out[model] = _price(model, row, where, "", "")
    return out


def load_prices() -> dict[str, Price]:
    """The shipped prices with ``$DDIBENCH_PRICES``'s rows over them (see the module docstring)."""
    prices = dict(shipped_prices())
    path = os.environ.get(PRICES_ENV)
    if not path:
        return prices
    file = Path(path)
    try:
        rows = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"${PRICES_ENV} ({path}) cannot be read: {exc}", "point it at a JSON file of prices") from exc
    if not isinstance(rows, dict):
        raise ConfigError(f"${PRICES_ENV} ({path}) is not a JSON object", 'use {"provider:model": {...}, ...}')
    for model, row in rows.items():
        prices[model] = _price(model, row, f"${PRICES_ENV} ({path})", f"${PRICES_ENV} ({path})", "")
    return prices


def price_for(spec: str, prices: Mapping[str, Price]) -> Price | None:
    """A model's price by its spec as displayed or recorded (``openai:gpt-4o-mini@https://...#json=schema``): the
    spec itself, then without its options and endpoint (``openai:gpt-4o-mini``), then the model name alone."""
    bare = spec.partition("#")[0]
    at = bare.rfind("@")
    if at >= 0 and bare[at + 1 :].startswith(("http://", "https://")):
        bare = bare[:at]
    name = bare.partition(":")[2]
    for key in (spec, bare, name):
        if key and key in prices:
            return prices[key]
    return None
