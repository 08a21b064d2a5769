"""A results folder a pull request edited is hostile input until 'ddibench board check' has passed: 'board publish'
refuses a malformed or forged index, a path outside the folder and a symbolic link with one line, before it
writes anything; 'board check' refuses a symbolic link.

The folder is a small copy of the shipped results (two real bundles of one task, their index entries and floors),
with the checkout's README beside it (publish regenerates its results section): nothing under it may change on a
refusal, and the new bundle is never copied in."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ddibench.commands.board import RESULTS_MARKERS
from ddibench.results.shipped import INDEX, index_text, read_index

REPO_RESULTS = Path(__file__).resolve().parent.parent / "results"
SHIPPED = ("tox_skin/majority/136ecb6dd578a8a1.tar.gz", "tox_skin/morgan-sklearn/48c6e524794920ff.tar.gz")
NEW = "tox_carcinogens/majority/f6ddbf0012ea9e3e.tar.gz"  # the bundle each publication below tries to add


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A checkout-like folder: results/ with two shipped bundles and their index, and a README and docs/results.md
    with the results sections publish regenerates."""
    repo = tmp_path_factory.mktemp("repo")
    results = repo / "results"
    index = read_index(REPO_RESULTS)
    runs = [e for e in index["runs"] if e["path"] in SHIPPED]
    assert len(runs) == len(SHIPPED)
    for rel in SHIPPED:
        (results / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO_RESULTS / rel, results / rel)
    floors = [f for f in index["floors"] if f["task"] == "tox_skin"]
    (results / INDEX).write_text(index_text(runs, floors), encoding="utf-8")
    (results / "README.md").write_text("# Shipped results\n\nthe table\n", encoding="utf-8")
    start, end = RESULTS_MARKERS
    (repo / "README.md").write_text(f"# ddibench\n\n{start}\nthe table\n{end}\nmore\n", encoding="utf-8")
    (repo / "docs").mkdir()
    (repo / "docs" / "results.md").write_text(f"# Results\n\n{start}\nthe table\n{end}\n", encoding="utf-8")
    return repo


@pytest.fixture
def repo(clean: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "repo"
    shutil.copytree(clean, copy, symlinks=True)
    return copy


@pytest.fixture
def new_bundle(tmp_path: Path) -> Path:
    path = tmp_path / "new" / "bundle.tar.gz"
    path.parent.mkdir()
    shutil.copyfile(REPO_RESULTS / NEW, path)
    return path


def tree(root: Path) -> str:
    """A hash of everything under ``root``: each path with its kind and its bytes (a link's target, never followed;
    a fifo is not read)."""
    digest = hashlib.sha256()
    for folder, dirs, files in os.walk(root):
        for name in sorted(dirs) + sorted(files):
            path = Path(folder) / name
            mode = path.lstat().st_mode
            digest.update(path.relative_to(root).as_posix().encode() + b"\0")
            if stat.S_ISLNK(mode):
                digest.update(b"link:" + os.readlink(path).encode())
            elif stat.S_ISREG(mode):
                digest.update(b"file:" + hashlib.sha256(path.read_bytes()).digest())
            else:
                digest.update(b"dir" if stat.S_ISDIR(mode) else f"other:{stat.S_IFMT(mode)}".encode())
        dirs.sort()
    return digest.hexdigest()


def edit_index(change: Callable[[list[Any]], None]) -> Callable[[Path, Path], None]:
    def tamper(results: Path, outside: Path) -> None:
        index = json.loads((results / INDEX).read_text(encoding="utf-8"))
        change(index["runs"])
        (results / INDEX).write_text(json.dumps(index, indent=1), encoding="utf-8")

    return tamper


def set_field(key: str, value: Callable[[dict[str, Any]], Any]) -> Callable[[Path, Path], None]:
    return edit_index(lambda runs: runs[0].update({key: value(runs[0])}))


def path_outside(absolute: bool) -> Callable[[Path, Path], None]:
    """The first entry's path names a copy of its bundle outside the folder (the copy's bytes match the entry):
    ``results/../outside/x.tar.gz``, or the absolute path of one."""

    def tamper(results: Path, outside: Path) -> None:
        outside = outside if absolute else results.parent / "outside"
        outside.mkdir(exist_ok=True)
        shutil.copyfile(results / SHIPPED[0], outside / "x.tar.gz")
        path = str(outside / "x.tar.gz") if absolute else "../outside/x.tar.gz"
        edit_index(lambda runs: runs[0].update(path=path))(results, outside)

    return tamper


def linked_bundle(results: Path, outside: Path) -> None:
    outside.mkdir(exist_ok=True)
    shutil.move(results / SHIPPED[0], outside / "x.tar.gz")
    (results / SHIPPED[0]).symlink_to(outside / "x.tar.gz")


def linked_task_folder(results: Path, outside: Path) -> None:
    outside.mkdir(exist_ok=True)
    shutil.move(results / "tox_skin", outside / "tox_skin")
    (results / "tox_skin").symlink_to(outside / "tox_skin", target_is_directory=True)


def fifo(results: Path, outside: Path) -> None:
    os.mkfifo(results / "tox_skin" / "majority" / "pipe.tar.gz")


HOSTILE = {
    "an entry without fields": (edit_index(lambda runs: runs.__setitem__(0, {})), "runs[0]: lacks the fields 'path'"),
    "an entry missing a field": (
        edit_index(lambda runs: runs[0].pop("sha256")),
        f"runs[0] ('{SHIPPED[0]}'): lacks the field 'sha256'",
    ),
    "an entry that is a number": (edit_index(lambda runs: runs.__setitem__(0, 7)), "runs[0]: is int 7, not an object"),
    "bytes as text": (set_field("bytes", lambda e: str(e["bytes"])), "field 'bytes' is \""),
    "an unknown field": (set_field("verified_by", lambda e: "me"), "has an unknown field 'verified_by'"),
    "a value raised": (
        set_field("value", lambda e: 0.99),
        f"the shipped results differ from their index: {SHIPPED[0]}: the index differs from the bundle's recorded "
        "results (value 0.99 in the index,",
    ),
    "a model renamed": (set_field("model", lambda e: "gpt-5"), "(model 'gpt-5' in the index, '—' recorded)"),
    "a path ../outside": (path_outside(absolute=False), "path '../outside/x.tar.gz' is not where"),
    "an absolute path": (path_outside(absolute=True), "is not where its task, system and run id put it"),
    "a path that is not a .tar.gz": (
        set_field("path", lambda e: e["path"].removesuffix(".tar.gz") + ".zip"),
        "is not where its task, system and run id put it",
    ),
    "a symlinked bundle": (linked_bundle, f"{SHIPPED[0]} is a symbolic link (to "),
    "a symlinked task folder": (linked_task_folder, "results/tox_skin is a symbolic link (to "),
    "a fifo": (fifo, "pipe.tar.gz is not a regular file"),
}


def refused(cli, repo: Path, args: list[str], reason: str) -> str:
    """Run the CLI; assert it failed with one line naming ``reason`` (no traceback); return that line."""
    code, out, err = cli(*args)
    assert code != 0, out + err
    assert "Traceback" not in out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert reason in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("tamper, reason", HOSTILE.values(), ids=list(HOSTILE))
def test_publish_refuses_a_hostile_results_folder_and_writes_nothing(
    cli, repo: Path, new_bundle: Path, tmp_path: Path, fresh_cache: Path, tamper, reason: str
) -> None:
    results = repo / "results"
    tamper(results, tmp_path / "outside")
    before = tree(repo)
    args = ["board", "publish", "--no-reproduce", "--results", str(results), str(new_bundle)]
    refused(cli, repo, args, reason)
    assert tree(repo) == before
    assert not (results / "tox_carcinogens").exists()


def test_publish_refuses_a_raised_value_though_a_store_of_that_index_was_built_before(
    cli, repo: Path, new_bundle: Path, fresh_cache: Path
) -> None:
    """'board serve' builds (and caches) the board of a forged index, leaving the forged run out; publish then does
    not take that store for a check of every entry."""
    from ddibench.results.shipped import shipped_store

    results = repo / "results"
    set_field("value", lambda e: 0.99)(results, repo)
    left_out: list[str] = []
    shipped_store(results, progress=lambda o: left_out.append(o.problem) if o.problem else None)
    assert len(left_out) == 1 and "value 0.99 in the index" in left_out[0]
    before = tree(repo)
    args = ["board", "publish", "--no-reproduce", "--results", str(results), str(new_bundle)]
    refused(cli, repo, args, "value 0.99 in the index")
    assert tree(repo) == before


def test_publish_of_the_clean_folder_writes_the_bundle_the_index_and_the_tables(
    cli, repo: Path, new_bundle: Path, fresh_cache: Path
) -> None:
    """The control: the same folder untouched publishes (so each refusal above is the tampering's)."""
    results = repo / "results"
    code, out, err = cli("board", "publish", "--no-reproduce", "--results", str(results), str(new_bundle))
    assert code == 0, out + err
    assert (results / NEW).read_bytes() == new_bundle.read_bytes()
    assert {e["path"] for e in read_index(results)["runs"]} == {*SHIPPED, NEW}
    readme, page = ((repo / p).read_text(encoding="utf-8") for p in ("README.md", "docs/results.md"))
    assert "the table" not in readme and "the table" not in page and readme.endswith("more\n")
    # the README gets the compact ranked table, the docs page and results/README.md the full one
    assert "| task | metric | best | best LLM system | floors |" in readme and "| task | metric | best |" not in page
    full = page.split(RESULTS_MARKERS[0], 1)[1].split(RESULTS_MARKERS[1], 1)[0].strip()
    assert full.startswith("| task | metric |") and full in (results / "README.md").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    "tamper, reason",
    [HOSTILE["a symlinked bundle"], HOSTILE["a symlinked task folder"], HOSTILE["a fifo"]],
    ids=["a symlinked bundle", "a symlinked task folder", "a fifo"],
)
def test_board_check_refuses_a_link_or_a_special_file(cli, repo: Path, tmp_path: Path, tamper, reason: str) -> None:
    results = repo / "results"
    tamper(results, tmp_path / "outside")
    before = tree(repo)
    refused(cli, repo, ["board", "check", "--no-reproduce", "--results", str(results)], reason)
    assert tree(repo) == before


def test_board_serve_store_refuses_a_link(repo: Path, tmp_path: Path, fresh_cache: Path) -> None:
    from ddibench.errors import DataError
    from ddibench.results.shipped import shipped_store

    results = repo / "results"
    linked_bundle(results, tmp_path / "outside")
    with pytest.raises(DataError, match="is a symbolic link"):
        shipped_store(results)


def test_publish_refuses_a_new_bundle_whose_entry_would_be_malformed_and_an_index_it_would_not_read(
    repo: Path, new_bundle: Path, fresh_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What publish writes is held to the schema it reads: a new entry that departs from it (here a negative run
    time) leaves the bundle out, and an index that would not pass (here a tie verdict of another kind) is not
    written."""
    import ddibench.results.shipped as shipped
    from ddibench.errors import DataError

    results = repo / "results"
    before = tree(repo)
    shipped.shipped_store(results, strict=True)  # built (and cached) before entry_of is changed: the shipped runs
    entry_of = shipped.entry_of
    monkeypatch.setattr(shipped, "entry_of", lambda *args: {**entry_of(*args), "run_seconds": -1.0})
    [outcome] = shipped.publish(results, [new_bundle], reproduce=False)
    assert outcome.problem == "its index entry would be malformed: field 'run_seconds' is -1.0, not a number of seconds"
    monkeypatch.undo()
    with_derived = shipped._with_derived

    def odd_ties(entries, store):
        runs, floors = with_derived(entries, store)
        return [{**e, "tie": {**e["tie"], "tied": "yes"}} for e in runs], floors

    monkeypatch.setattr(shipped, "_with_derived", odd_ties)
    with pytest.raises(DataError, match="the index publish would write is malformed: index entry runs.0. .* 'tied'"):
        shipped.publish(results, [new_bundle], reproduce=False)
    assert tree(repo) == before
