"""Lazy registries of tasks and systems, discovered through Python entry points.

* ``ddibench.tasks``: each entry point loads a mapping ``{task name: Task}`` (one per task family).
* ``ddibench.systems``: each entry point loads one System class; its name is the entry point's name.

ddibench's own tasks and reference systems register exactly like an outside package would, in its
``pyproject.toml``. Nothing is imported until a name is asked for (listing systems imports only
their modules, which keep heavy imports inside methods). Unknown names get a "did you mean" error.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Any

from ddibench.errors import ConfigError, UnknownNameError

if TYPE_CHECKING:
    from ddibench.system import System
    from ddibench.task import Task

TASK_GROUP = "ddibench.tasks"
SYSTEM_GROUP = "ddibench.systems"


def _entry_points(group: str) -> list[EntryPoint]:
    return sorted(entry_points(group=group), key=lambda ep: ep.name)


@cache
def _tasks() -> dict[str, Task]:
    return _task_registry()[0]


@cache
def _task_registry() -> tuple[dict[str, Task], dict[str, list[str]]]:
    """Every registered task, and the task names of each ``ddibench.tasks`` entry point (``molecular``: the
    toxicity, target and captioning tasks it registers)."""
    from ddibench.task import AnswerSpec

    out: dict[str, Task] = {}
    origin: dict[str, str] = {}
    packages: dict[str, list[str]] = {}
    for ep in _entry_points(TASK_GROUP):
        provided = ep.load()
        if not hasattr(provided, "items"):
            raise ConfigError(f"entry point '{ep.value}' in group {TASK_GROUP} is not a mapping of task names to tasks")
        for name, task in provided.items():
            if name in out:
                raise ConfigError(f"task '{name}' is registered twice ({origin[name]} and {ep.value})", "rename one")
            # systems decide what to answer from this declaration: a task without one is refused here, not mid-run
            if not isinstance(getattr(task, "answer", None), AnswerSpec):
                raise ConfigError(
                    f"task '{name}' ({ep.value}) does not declare how it is answered",
                    "give its class an 'answer = ddibench.task.AnswerSpec(kind=...)' (see 'A task family' in docs/adapters.md)",
                )
            out[name] = task
            origin[name] = ep.value
            packages.setdefault(ep.name, []).append(name)
    return out, packages


def task_groups() -> dict[str, list[str]]:
    """Names that stand for several tasks in ``-t``: each task family (``task.family``: ``toxicity``) and each
    registered group of families (the entry point's name: ``molecular``), with their tasks in name order."""
    tasks, packages = _task_registry()
    groups = {name: sorted(members) for name, members in packages.items()}
    for name, task in sorted(tasks.items()):
        groups.setdefault(task.family, [])
        if name not in groups[task.family]:
            groups[task.family].append(name)
    return groups


def load_task_families() -> None:
    """Import every registered task family (so the evaluators they bring are known)."""
    _tasks()


def task_names() -> list[str]:
    return sorted(_tasks())


def get_task(name: str) -> Task:
    tasks = _tasks()
    if name not in tasks:
        raise UnknownNameError("task", name, tasks)
    return tasks[name]


@cache
def _system_entry_points() -> dict[str, EntryPoint]:
    out: dict[str, EntryPoint] = {}
    for ep in _entry_points(SYSTEM_GROUP):
        if ep.name in out and out[ep.name].value != ep.value:
            raise ConfigError(
                f"system '{ep.name}' is registered twice ({out[ep.name].value} and {ep.value})", "uninstall one"
            )
        out[ep.name] = ep
    return out


def system_names() -> list[str]:
    return sorted(_system_entry_points())


def get_system_class(name: str) -> type[System]:
    eps = _system_entry_points()
    if name not in eps:
        raise UnknownNameError("system", name, eps)
    from ddibench.system import SYSTEM_MEMBERS

    cls: Any = eps[name].load()
    for attr in SYSTEM_MEMBERS:
        if not hasattr(cls, attr):
            raise ConfigError(
                f"system '{name}' ({eps[name].value}) lacks '{attr}'",
                "implement the ddibench.System protocol, or subclass ddibench.BaseSystem, which has them all (see docs/adapters.md, 'A system')",
            )
    if cls.name != name:
        raise ConfigError(f"system class {eps[name].value} says its name is '{cls.name}', registered as '{name}'")
    return cls


def clear_caches() -> None:
    """Forget discovered entry points (after installing a plug-in in the same process)."""
    _tasks.cache_clear()
    _task_registry.cache_clear()
    _system_entry_points.cache_clear()


def system_provenance(name: str) -> dict[str, Any]:
    """Where a registered system's code comes from, for the manifest and the bundle: the entry point, the
    distribution that registers it (name, version), its source, and the sha256 of the adapter's own files
    (the package or module that holds the entry point), so two bundles made with different code never
    look alike. The source is, first hit wins: the URL and commit pip recorded for a VCS install (PEP 610
    ``direct_url.json``); the git checkout the code lies in (commit, dirty flag, origin URL), as for an
    editable install; the project URLs of the distribution's metadata (an index install)."""
    eps = _system_entry_points()
    if name not in eps:
        raise UnknownNameError("system", name, eps)
    ep = eps[name]
    out: dict[str, Any] = {"entry_point": ep.value}
    dist = ep.dist
    if dist is not None:
        out["distribution"] = dist.metadata["Name"]
        out["version"] = dist.version
    import importlib.util
    from pathlib import Path

    try:
        spec = importlib.util.find_spec(ep.module)
    except (ImportError, ValueError):
        spec = None
    origin = Path(spec.origin).parent if spec is not None and spec.origin else None
    checkout = _git_checkout(origin) if origin else None
    if out.get("distribution") == "ddibench" and checkout is not None:  # a reference system: ddibench's own code
        out.update(checkout, source=f"ddibench {out['version']} (a reference system shipped with it)", local=False)
    else:
        out.update(_vcs_install(dist) or _local_install(dist, origin) or checkout or _index_source(dist))
    files = _module_files_sha256(spec) if spec is not None else None
    if files is not None:
        out["files_sha256"] = files
    return out


def _vcs_install(dist: Any) -> dict[str, Any] | None:
    import json

    try:
        direct = json.loads((dist.read_text("direct_url.json") if dist is not None else None) or "null")
    except ValueError:
        return None
    if isinstance(direct, dict) and isinstance(direct.get("vcs_info"), dict) and isinstance(direct.get("url"), str):
        return {"source": direct["url"], "commit": direct["vcs_info"].get("commit_id")}
    return None


def _local_install(dist: Any, origin: Any) -> dict[str, Any] | None:
    """An adapter pip installed from a folder on this machine (PEP 610 ``dir_info``, or a ``file:`` URL): recorded as
    local, never public, with that folder's commit where it is a git checkout whose files hold the adapter."""
    import json
    from pathlib import Path
    from urllib.parse import unquote, urlparse

    try:
        direct = json.loads((dist.read_text("direct_url.json") if dist is not None else None) or "null")
    except ValueError:
        return None
    if not isinstance(direct, dict) or not str(direct.get("url", "")).startswith("file:") or "vcs_info" in direct:
        return None
    folder = Path(unquote(urlparse(direct["url"]).path))
    out: dict[str, Any] = {"source": f"a local folder {folder}", "local": True}
    checkout = _git_checkout(origin) if origin is not None and direct.get("dir_info", {}).get("editable") else None
    checkout = checkout or _git_checkout(folder)
    if checkout is not None:
        out.update(commit=checkout["commit"], dirty=checkout["dirty"])
    return out


def _git_checkout(where: Any) -> dict[str, Any] | None:
    """The git checkout whose tracked files hold ``where`` (commit, origin URL, and whether those files have
    uncommitted changes), or None: a folder that a checkout merely contains (an ignored .venv inside it) is not
    that checkout's code."""
    import subprocess

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if not commit or not git("ls-files", "--", "."):
        return None
    root = git("rev-parse", "--show-toplevel")
    remote = git("remote", "get-url", "origin")
    return {
        "source": remote or f"a local checkout at {root}",
        "local": not remote,
        "commit": commit,
        "dirty": bool(git("status", "--porcelain", "--untracked-files=no", "--", ".")),
    }


def _index_source(dist: Any) -> dict[str, Any]:
    if dist is None:
        return {}
    urls = [u.split(",", 1) for u in dist.metadata.get_all("Project-URL") or []]
    preferred = ("source", "repository", "code", "homepage")
    ranked = sorted(
        (kv for kv in urls if len(kv) == 2),
        key=lambda kv: next((i for i, p in enumerate(preferred) if p in kv[0].lower()), len(preferred)),
    )
    name, version = dist.metadata["Name"], dist.version
    return {
        "source": ranked[0][1].strip()
        if ranked
        else (dist.metadata.get("Home-page") or f"pip install '{name}=={version}'"),
        "index": True,
    }


def _module_files_sha256(spec: Any) -> str | None:
    """sha256 over the files of the package (or single module) of a module spec: each file's path
    relative to the package and its bytes, in sorted order; caches (``__pycache__``) left out."""
    import hashlib
    from pathlib import Path

    if spec.submodule_search_locations:
        roots = [Path(p) for p in spec.submodule_search_locations]
        files = sorted(
            (p.relative_to(root).as_posix(), p)
            for root in roots
            for p in root.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts
        )
    elif spec.origin and Path(spec.origin).is_file():
        files = [(Path(spec.origin).name, Path(spec.origin))]
    else:
        return None
    digest = hashlib.sha256()
    for rel, path in files:
        digest.update(rel.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def scoring_provenance(task: str, scoring: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(label, text) lines on how a run of ``task`` was scored, as the task's evaluator reads its manifest's
    scoring section (its judge, its SelfCheckGPT samples); none for a task not registered here."""
    try:
        evaluator = get_task(task).evaluator()
    except UnknownNameError:
        return []
    return evaluator.provenance(scoring)
