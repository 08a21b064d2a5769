"""``ddibench probe memorisation``: does a model recall DrugBank's sentence for a named pair?

The probe itself is :mod:`ddibench.runner.memorisation`; this module parses the options, says what the
probe will cost before it spends anything, writes the result file and prints its table.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ddibench.commands.common import console as _console
from ddibench.errors import ConfigError, write_error

MAX_N = 2520  # the pairs of drugbank_time's test split, the smallest slice source


@click.group()
def probe() -> None:
    """Probes of a model (not of a system): what it recalls without any context."""


@probe.command("memorisation")
@click.option(
    "--model", "-m", "model", default="embedded", show_default=True, help="The model to probe (a --model spec)."
)
@click.option("--base-url", default=None, help="OpenAI-compatible server URL; --model then names the served model.")
@click.option("--n", "n", type=int, default=100, show_default=True, help="Pairs per slice (four slices: 4 x n calls).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the pairs drawn.")
@click.option(
    "--out",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="The result file (JSON). Default: <model slug>.json here; ship it as results/probes/<model slug>.json.",
)
@click.option("--no-cache", is_flag=True, help="Ask the model again instead of reading cached answers.")
def memorisation(model: str, base_url: str | None, n: int, seed: int, out: Path | None, no_cache: bool) -> None:
    """Ask MODEL, with no context, for the sentence DrugBank records about each of n seeded pairs of four
    slices (drugbank_s2 train, drugbank_s2 test, drugbank_time test, and unrecorded pairs with the training
    pairs' heads as the control), and count how often the recorded interaction type comes back."""
    from ddibench.llm import ModelSpec
    from ddibench.runner import memorisation as mem

    if not 1 <= n <= MAX_N:
        raise ConfigError(f"--n {n} is not between 1 and {MAX_N}", "give e.g. --n 100")
    spec = ModelSpec.parse(model, base_url)
    path = out or Path(f"{mem.model_slug(spec.display())}.json")
    calls = 4 * n
    console = _console(stderr=True)
    console.print(
        f"probe: {len(mem.SLICES)} slices x {n} pairs = {calls:,} calls to {spec.display()} "
        f"(at most {mem.MAX_TOKENS} tokens each, temperature 0; cached answers are not asked again)",
        highlight=False,
    )
    every = max(1, calls // 10)

    def progress(done: int) -> None:
        if done % every == 0 or done == calls:
            console.print(f"  {done:,}/{calls:,} answers", highlight=False)

    result = mem.probe(
        spec,
        n,
        seed,
        use_cache=not no_cache,
        progress=progress if sys.stderr.isatty() or calls > 40 else None,
        note=lambda text: console.print(text, highlight=False),
    )
    try:
        path.write_text(result.model_dump_json(indent=1) + "\n", encoding="utf-8")
    except OSError as exc:
        raise write_error(exc, path, "give --out a writable path") from None
    show(result)
    click.echo(f"written: {path}")


def show(result: object) -> None:
    """The probe's table: per slice, the recovered share with its interval (all matches; template and string only)."""
    from rich.table import Table

    from ddibench.runner.memorisation import ProbeResult

    assert isinstance(result, ProbeResult)
    table = Table(title=f"memorisation probe: {result.model.spec} (seed {result.seed}, n={result.n} per slice)")
    for column in (
        "slice",
        "pairs",
        "recovered [95% CI]",
        "template/string only [95% CI]",
        "template/string/embedding/empty",
    ):
        table.add_column(column)

    def ci(value: float, low: float, high: float, signed: bool = False) -> str:
        f = "{:+.2f}" if signed else "{:.2f}"
        return f"{f.format(value)} [{f.format(low)}, {f.format(high)}]"

    for s in result.slices:
        m = s.matches
        table.add_row(
            s.name,
            str(s.n),
            f"{s.recovered} = " + ci(s.rate.value, s.rate.ci_low, s.rate.ci_high),
            f"{s.strict_recovered} = " + ci(s.strict_rate.value, s.strict_rate.ci_low, s.strict_rate.ci_high),
            f"{m['template']}/{m['string']}/{m['embedding']}/{m['empty answer']}",
        )
    d, sd = result.pair_specific, result.strict_pair_specific
    table.add_row(
        "s2_train - control",
        str(result.n),
        ci(d.value, d.ci_low, d.ci_high, True),
        ci(sd.value, sd.ci_low, sd.ci_high, True),
        "paired over heads",
    )
    _console().print(table)
