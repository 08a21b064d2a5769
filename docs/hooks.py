"""mkdocs hook: pages say ``<!-- ddibench:tasks FAMILY -->`` or ``<!-- ddibench:systems -->`` and get tables
generated from the installed registry, so the documentation lists exactly what ``ddibench list`` lists."""

from __future__ import annotations

import re

PLACEHOLDER = re.compile(r"<!-- ddibench:(tasks|systems|profiles|system)(?: ([a-z_-]+))? -->")


def _tasks(family: str | None) -> str:
    from ddibench.registry import get_task, task_names

    rows = ["| task | version | setting | input | title |", "|---|---|---|---|---|"]
    cards = []
    for name in task_names():
        task = get_task(name)
        if family and task.family != family:
            continue
        rows.append(f"| `{name}` | {task.version} | {task.setting} | {task.input_kind} | {task.title} |")
        sources = "\n".join(f"    - <{s.url}> — sha256 `{s.sha256[:16]}…`, licence `{s.license}`" for s in task.sources)
        notes = "\n".join(f"    - {d}" for d in task.deviations) or "    - none"
        cards.append(f"??? note \"`{name}`: sources and deviations\"\n    **Sources**\n\n{sources}\n\n    **Deviations from upstream**\n\n{notes}\n")
    return "\n".join(rows) + "\n\n" + "\n".join(cards)


def _systems() -> str:
    from ddibench.registry import get_system_class, system_names

    rows = ["| system | version | LLM roles | description |", "|---|---|---|---|"]
    for name in system_names():
        cls = get_system_class(name)
        rows.append(f"| `{name}` | {cls.version} | {', '.join(cls.llm_roles) or '—'} | {getattr(cls, 'description', '')} |")
    return "\n".join(rows) + "\n"


def _system(name: str) -> str:
    """A system's own documentation: its module docstring and its --config options with their defaults."""
    import inspect
    import sys

    from ddibench.registry import get_system_class

    cls = get_system_class(name)
    doc = inspect.cleandoc(sys.modules[cls.__module__].__doc__ or "").replace("``", "`")
    lines = [f"**`{name}`** {cls.version} — {getattr(cls, 'description', '')}", "", doc, "", "| `--config` option | default |", "|---|---|"]
    config = getattr(cls, "Config", None)
    for key, field in (config.model_fields.items() if config is not None else []):
        lines.append(f"| `{key}` | `{field.get_default(call_default_factory=True)!r}` |")
    return "\n".join(lines) + "\n"


def _profiles() -> str:
    from ddibench.profiles import PROFILES

    rows = ["| profile | accelerators | budgets |", "|---|---|---|"]
    for p in PROFILES.values():
        budgets = "; ".join(f"{s}: " + ", ".join(f"{k}={v}" for k, v in b.items()) for s, b in p.budgets.items())
        rows.append(f"| `{p.name}` | {p.accelerator_count} × {p.accelerator or 'none'} | {budgets} |")
    return "\n".join(rows) + "\n"


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ANN001 - mkdocs' hook signature
    def render(match: re.Match[str]) -> str:
        kind, arg = match.group(1), match.group(2)
        return {"tasks": lambda: _tasks(arg), "systems": _systems, "profiles": _profiles, "system": lambda: _system(arg)}[kind]()

    return PLACEHOLDER.sub(render, markdown)
