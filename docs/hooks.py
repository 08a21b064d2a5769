"""mkdocs hook: pages say ``<!-- ddibench:tasks FAMILY -->`` or ``<!-- ddibench:systems -->`` and get tables
generated from the installed registry, so the documentation lists exactly what ``ddibench list`` lists.

The API reference of the types an adapter touches (every field with its type, default and meaning, read from the
source) and what each task family asks of a prediction are not filled in at build time: they are written into
``docs/reference/types.md`` between ``<!-- generated:types start ... -->`` and ``<!-- generated:types end -->``
markers (and ``generated:families``) by ``python scripts/gen_types_reference.py``, so the page reads the same on
GitHub as on the site; ``tests/test_docs.py`` fails when the committed page is stale."""

from __future__ import annotations

import re

PLACEHOLDER = re.compile(r"<!-- ddibench:(tasks|systems|profiles|system)(?: ([a-z_-]+))? -->")
# a block of a committed page that scripts/gen_types_reference.py rewrites: start marker, body, end marker
GENERATED = re.compile(r"(<!-- generated:(types|families) start[^\n]*-->\n).*?(<!-- generated:\2 end -->)", re.DOTALL)


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
        cards.append(
            f'??? note "`{name}`: sources and deviations"\n    **Sources**\n\n{sources}\n\n    **Deviations from upstream**\n\n{notes}\n'
        )
    return "\n".join(rows) + "\n\n" + "\n".join(cards)


def _systems() -> str:
    from ddibench.registry import get_system_class, system_names

    rows = ["| system | version | LLM roles | description |", "|---|---|---|---|"]
    for name in system_names():
        cls = get_system_class(name)
        rows.append(
            f"| `{name}` | {cls.version} | {', '.join(cls.llm_roles) or '—'} | {getattr(cls, 'description', '')} |"
        )
    return "\n".join(rows) + "\n"


def _system(name: str) -> str:
    """A system's own documentation: its module docstring and its --config options with their defaults and the
    values each takes."""
    import inspect
    import sys

    from ddibench.commands.listing import allowed_values
    from ddibench.registry import get_system_class

    cls = get_system_class(name)
    doc = inspect.cleandoc(sys.modules[cls.__module__].__doc__ or "").replace("``", "`")
    lines = [
        f"**`{name}`** {cls.version} — {getattr(cls, 'description', '')}",
        "",
        doc,
        "",
        "| `--config` option | default | takes |",
        "|---|---|---|",
    ]
    config = getattr(cls, "Config", None)
    for key, field in config.model_fields.items() if config is not None else []:
        default = field.get_default(call_default_factory=True)
        lines.append(f"| `{key}` | `{default!r}` | {allowed_values(field)} |")
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
        return {
            "tasks": lambda: _tasks(arg),
            "systems": _systems,
            "profiles": _profiles,
            "system": lambda: _system(arg),
        }[kind]()

    return PLACEHOLDER.sub(render, markdown)


# ---- the API reference of the types an adapter touches, generated from their source ------------------------------

# (module, class, what it is for): the order of the page
TYPES = (
    ("ddibench.schema", "Sample", "what a system is asked about (its target is None at prediction time)"),
    ("ddibench.schema", "Drug", "a drug of a DDI family (DrugBank, TWOSIDES)"),
    ("ddibench.schema", "DrugPair", "the input of a DDI sample"),
    ("ddibench.schema", "Molecule", "the input of a molecular sample (toxicity, targets, captioning)"),
    ("ddibench.schema", "Question", "the input of a question-answering sample"),
    ("ddibench.schema", "Label", "one label of a task"),
    ("ddibench.schema", "LabelSpace", "a task's labels, ids 0..n-1 in order"),
    ("ddibench.schema", "Prediction", "what a system returns for one sample"),
    ("ddibench.task", "AnswerSpec", "a task's `answer`"),
    ("ddibench.system", "BaseSystem", "the class an adapter subclasses (class attributes)"),
    ("ddibench.system", "TrainingView", "what prepare() sees"),
    ("ddibench.system", "RunContext", "what prepare() and predict() may use"),
    ("ddibench.artifacts", "ArtifactStore", "ctx.artifacts: what a system builds once and finds again"),
    ("ddibench.llm._client", "ChatResult", "what ctx.model(role).chat(...) returns"),
)


def _class_node(module: str, name: str):  # noqa: ANN202 - an ast.ClassDef
    import ast
    import importlib
    import inspect

    source = inspect.getsource(importlib.import_module(module))
    tree = ast.parse(source)
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)
    return node, source.splitlines()


def _comment(lines: list[str], node) -> str:  # noqa: ANN001
    """The comment that says what a field is: at the end of its (last) line, else the comment lines just above it."""
    last = lines[node.end_lineno - 1]
    if "  # " in last:
        return last.split("  # ", 1)[1].strip()
    above, i = [], node.lineno - 2
    while i >= 0 and lines[i].strip().startswith("#"):
        above.insert(0, lines[i].strip().lstrip("#").strip())
        i -= 1
    return " ".join(above)


def _meaning(lines: list[str], body: list, index: int) -> str:  # noqa: ANN001 - ast nodes
    """What a field means: its attribute docstring (a string just under it), else a pydantic ``Field(description=...)``,
    else its comment."""
    import ast
    import inspect

    item = body[index]
    after = body[index + 1] if index + 1 < len(body) else None
    if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str):
        return inspect.cleandoc(after.value.value).split("\n\n")[0].replace("\n", " ")
    if isinstance(item.value, ast.Call):
        for keyword in item.value.keywords:
            if keyword.arg == "description" and isinstance(keyword.value, ast.Constant):
                return str(keyword.value.value)
    return _comment(lines, item)


def type_members(module: str, name: str) -> tuple[list[tuple[str, str, str, str]], list[tuple[str, str]]]:
    """A class's public fields ``(name, type, default, meaning)`` and public methods and properties ``(signature, meaning)``."""
    import ast

    node, lines = _class_node(module, name)
    fields, methods = [], []
    for index, item in enumerate(node.body):
        if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) and not item.target.id.startswith("_"):
            kind = (
                ast.unparse(item.annotation).replace("ClassVar[", "").rstrip("]")
                if "ClassVar" in ast.unparse(item.annotation)
                else ast.unparse(item.annotation)
            )
            default = ast.unparse(item.value) if item.value is not None else ""
            if default.startswith("field(") or default.startswith("Field("):
                default = "(built per instance)" if "factory" in default else default
            fields.append((item.target.id, kind, default, _meaning(lines, node.body, index)))
        elif isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and not item.name.startswith("_"):
            doc = (ast.get_docstring(item) or "").split("\n\n")[0].replace("\n", " ")
            args = [a.arg for a in item.args.args if a.arg not in ("self", "cls")]
            is_property = any(isinstance(d, ast.Name) and d.id == "property" for d in item.decorator_list)
            prefix = "async " if isinstance(item, ast.AsyncFunctionDef) else ""
            signature = item.name if is_property else f"{prefix}{item.name}({', '.join(args)})"
            methods.append((signature, doc))
    return fields, methods


def _cell(text: str) -> str:
    return " ".join(text.replace("|", "\\|").split())


def _types() -> str:
    import ast

    from ddibench.task import RESOURCES

    out = []
    for module, name, purpose in TYPES:
        node, _ = _class_node(module, name)
        doc = (ast.get_docstring(node) or "").split("\n\n")[0].replace("\n", " ")
        fields, methods = type_members(module, name)
        public = module.replace("._client", "")
        out += [f"### `{name}`", "", f"`{public}.{name}` — {purpose}. {_cell(doc)}".rstrip(), ""]
        if fields:
            out += ["| field | type | default | meaning |", "|---|---|---|---|"]
            out += [
                f"| `{f}` | `{_cell(t)}` | {f'`{_cell(d)}`' if d else '—'} | {_cell(m) or '—'} |"
                for f, t, d, m in fields
            ]
            out.append("")
        if methods:
            out += ["| method or property | what it does |", "|---|---|"]
            out += [f"| `{_cell(sig)}` | {_cell(doc) or '—'} |" for sig, doc in methods]
            out.append("")
    out += [
        "### Resources",
        "",
        "What a task hands to systems in `view.resources` (the keys each family provides are below):",
        "",
        "| key | value |",
        "|---|---|",
    ]
    out += [f"| `{key}` | {_cell(text.replace('``', '`'))} |" for key, text in RESOURCES.items()]
    out.append("")
    return "\n".join(out) + "\n"


def _answer(answer) -> str:  # noqa: ANN001 - an AnswerSpec
    """A task's declared answer in a table cell: its kind, k, and the budget of a model's answer where declared."""
    kind = f"`{answer.kind}`" + (f" (k={answer.k})" if answer.kind == "top_k" else "")
    return kind + (f", {answer.max_tokens} tokens" if answer.max_tokens is not None else "")


def _families() -> str:
    """Per task family: its tasks, input, declared answer, scorer kind, what a prediction must hold, and its resources."""
    from ddibench.registry import get_task, task_names

    by_family: dict[str, list] = {}
    for name in task_names():
        task = get_task(name)
        by_family.setdefault(task.family, []).append(task)
    rows = [
        "| family | tasks | input | answer | scored as | a prediction holds | resources |",
        "|---|---|---|---|---|---|---|",
    ]
    for family, tasks in sorted(by_family.items()):
        first = tasks[0]
        try:
            evaluator = first.evaluator()
            kind, expected = evaluator.kind, evaluator.expected_format
        except Exception as exc:  # noqa: BLE001 - an evaluator that needs data this machine lacks
            kind, expected = "—", f"(needs the task's data: {type(exc).__name__})"
        names = ", ".join(f"`{t.name}`" for t in tasks)
        keys = ", ".join(f"`{k}`" for k in first.resource_keys) or "—"
        rows.append(
            f"| `{family}` | {names} | `{first.input_kind}` | {_answer(first.answer)} | {kind} | {_cell(expected)} | {keys} |"
        )
    return "\n".join(rows) + "\n"


def fill_generated(markdown: str) -> str:
    """``markdown`` with each ``generated:types`` / ``generated:families`` block rewritten from the source."""
    render = {"types": _types, "families": _families}
    return GENERATED.sub(lambda m: f"{m.group(1)}\n{render[m.group(2)]().strip()}\n\n{m.group(3)}", markdown)
