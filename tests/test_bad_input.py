"""Bad input of every kind a hostile user tried: each ends with a non-zero exit, exactly one line on
stderr naming the problem and the fix, and every file that was there before byte-identical afterwards
(and nothing new written). Also: a full disk never tears the journal, Ctrl-C says how to resume, and a
rescore during a run names the lock."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from ddibench.llm.stub import StubConfig, running_stub

LIMIT = 4


@pytest.fixture(scope="module")
def stub():
    with running_stub(StubConfig()) as server:
        yield server


@pytest.fixture(scope="module")
def world(stub, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished run, its bundle and the LLM cache that answered it: what the bad inputs meet."""
    from ddibench.cli import main

    root = tmp_path_factory.mktemp("world")
    old = os.environ.get("DDIBENCH_CACHE")
    os.environ["DDIBENCH_CACHE"] = str(root / "cache")
    try:
        for args in (
            run_args(stub, root),
            ["submit", str(root / "run"), "--out", str(root / "bundle.tar.gz")],
            ["export", "lm-eval", str(root / "lm-tasks"), "-t", "drugbank_s2", "--limit", str(LIMIT)],
        ):
            try:
                main(args)
            except SystemExit as exc:
                assert not exc.code, args
    finally:
        if old is None:
            os.environ.pop("DDIBENCH_CACHE")
        else:
            os.environ["DDIBENCH_CACHE"] = old
    (root / "afile").write_text("a file, not a directory\n")
    lm_eval_output(root)
    return root


LM_SAMPLES = "lm/samples_ddibench_drugbank_s2_2025-01-01T00-00-00.000000.jsonl"
LM_RESULTS = "lm/results_2025-01-01T00-00-00.000000.json"


def lm_eval_output(root: Path) -> None:
    """What lm-eval's --log_samples writes for the exported task (answering "1" to every document), in lm/."""
    docs = [
        json.loads(line)
        for line in (root / "lm-tasks" / "ddibench_data" / "drugbank_s2.jsonl").read_text().splitlines()
    ]
    request = {"gen_args_0": {"arg_0": "the prompt", "arg_1": {"until": [], "temperature": 0.0}}}
    records = [
        {
            "doc_id": i,
            "doc": doc,
            "target": str(doc["gold"]),
            "arguments": request,
            "resps": [["1"]],
            "filtered_resps": ["1"],
        }
        for i, doc in enumerate(docs)
    ]
    (root / "lm").mkdir()
    (root / LM_SAMPLES).write_text("".join(json.dumps(r) + "\n" for r in records))
    results = {
        "config": {"model": "local-chat-completions", "model_args": "base_url=http://127.0.0.1:9/v1,model=m"},
        "lm_eval_version": "0.4.9",
        "date": 1735689600.0,
        "total_evaluation_time_seconds": "12.5",
    }
    (root / LM_RESULTS).write_text(json.dumps(results))


def sample_lines(change: Callable[[list[dict]], None]) -> Callable[[bytes], bytes]:
    def apply(data: bytes) -> bytes:
        records = [json.loads(line) for line in data.splitlines()]
        change(records)
        return b"".join(json.dumps(r).encode() + b"\n" for r in records)

    return apply


def _first_response_a_mapping(records: list[dict]) -> None:
    records[0]["filtered_resps"] = {"text": "1"}


def _limit_a_word(records: list[dict]) -> None:
    for r in records:
        r["doc"]["ddibench_limit"] = "four"


def run_args(stub, root: Path, *extra: str) -> list[str]:
    return [
        "run",
        "-s",
        "zero-shot",
        "-t",
        "drugbank_s2",
        "--limit",
        str(LIMIT),
        "-m",
        f"vllm:stub-model@{stub.base_url}",
        "--run-dir",
        str(root / "run"),
        *extra,
    ]


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()
    }


def edit(name: str, change: Callable[[bytes], bytes]) -> Callable[[Path], None]:
    def setup(root: Path) -> None:
        path = root / name
        path.write_bytes(change(path.read_bytes()))

    return setup


def remove(name: str) -> Callable[[Path], None]:
    return lambda root: (root / name).unlink()


def garbage_line(data: bytes) -> bytes:
    lines = data.splitlines(keepends=True)
    return b"".join(lines[:1]) + b"this is not JSON\n" + b"".join(lines[1:])


R = "{run}"  # the finished run's directory
CASES: list[tuple[str, Callable[[Path], None] | None, list[str], str]] = [
    # the run directory's own files
    ("run.json truncated", edit("run/run.json", lambda b: b[: len(b) // 2]), ["RUN"], "run.json is not valid JSON"),
    ("run.json empty", edit("run/run.json", lambda b: b""), ["RUN"], "run.json is not valid JSON"),
    ("run.json a list", edit("run/run.json", lambda b: b"[1, 2]"), ["RUN"], "is not a valid RunIdentity record"),
    ("run.json not UTF-8", edit("run/run.json", lambda b: b"\xff\xfe" + b), ["RUN"], "is not UTF-8"),
    (
        "run.json of another shape",
        edit("run/run.json", lambda b: b'{"schema": 1}'),
        ["RUN"],
        "is not a valid RunIdentity record (task: Field required)",
    ),
    (
        "journal with a garbage line",
        edit("run/journal.jsonl", garbage_line),
        ["RUN"],
        "journal.jsonl:2 is not a readable journal record",
    ),
    (
        "journal not UTF-8",
        edit("run/journal.jsonl", lambda b: b"\xff\xfe\n" + b),
        ["RUN"],
        "journal.jsonl:1 is not a readable journal record",
    ),
    ("sessions with a garbage line", edit("run/sessions.jsonl", garbage_line), ["RUN"], "sessions.jsonl:2 is not JSON"),
    (
        "report of a truncated results.json",
        edit("run/results.json", lambda b: b[:100]),
        ["report", R],
        "results.json is not valid JSON",
    ),
    (
        "report of a results.json that is a list",
        edit("run/results.json", lambda b: b"[]"),
        ["report", R],
        "is not a valid Results record",
    ),
    (
        "report of a results.json not UTF-8",
        edit("run/results.json", lambda b: b"\xff" + b),
        ["report", R],
        "is not UTF-8",
    ),
    (
        "report --json of a truncated results.json",
        edit("run/results.json", lambda b: b[:10]),
        ["report", R, "--json"],
        "is not valid JSON",
    ),
    ("report of nothing", None, ["report", "{root}/nothing"], "does not exist; give a run directory"),
    (
        "rescore of a truncated results.json",
        edit("run/results.json", lambda b: b[:100]),
        ["rescore", R],
        "results.json is not valid JSON",
    ),
    (
        "rescore of an unfinished run",
        remove("run/results.json"),
        ["rescore", R],
        "has not been scored yet (an unfinished run); finish it",
    ),
    ("rescore of a directory that is no run", None, ["rescore", "{root}"], "holds no run.json"),
    # places that cannot be written
    ("--runs-dir is a file", None, ["RUNS", "{root}/afile"], "--runs-dir {root}/afile is a file, not a directory"),
    (
        "--run-dir is a file",
        None,
        ["RUN", "--run-dir", "{root}/afile"],
        "--run-dir {root}/afile is a file, not a directory",
    ),
    ("--run-dir below a file", None, ["RUN", "--run-dir", "{root}/afile/run"], "{root}/afile is a file, so --run-dir"),
    (
        "a non-empty --run-dir without run.json",
        None,
        ["RUN", "--run-dir", "{root}/cache"],
        "is not empty and holds no run.json",
    ),
    ("the cache directory is a file", None, ["RUN", "ENV:DDIBENCH_CACHE={root}/afile"], "{root}/afile is in the way"),
    (
        "a garbage LLM cache",
        edit("cache/llm-cache.sqlite", lambda b: b"garbage " * 100),
        ["RUN", "--run-dir", "{root}/fresh"],
        "llm-cache.sqlite is not a readable SQLite database",
    ),
    # models
    (
        "non-UTF-8 bytes in --model",
        None,
        ["RUN", "-m", "vllm:stub-model\udcff@http://127.0.0.1:9/v1"],
        "bytes that are not UTF-8; retype the model spec",
    ),
    (
        "a control character in --model",
        None,
        ["RUN", "-m", "vllm:stub\x01model@http://127.0.0.1:9/v1"],
        "control characters",
    ),
    ("a timeout that is no number", None, ["RUN", "-m", "vllm:m@http://127.0.0.1:9/v1#timeout=soon"], "timeout=soon"),
    (
        "a negative timeout",
        None,
        ["RUN", "-m", "vllm:m@http://127.0.0.1:9/v1#timeout=-1"],
        "is not a number of seconds",
    ),
    (
        "an unknown model option",
        None,
        ["RUN", "-m", "vllm:m@http://127.0.0.1:9/v1#temperature=1"],
        "bad model option 'temperature=1'",
    ),
    (
        "an unreachable endpoint",
        None,
        ["RUN", "--run-dir", "{root}/fresh", "-m", "vllm:m@http://127.0.0.1:9/v1"],
        "cannot reach model endpoint",
    ),
    # configuration values
    (
        "-C max_tokens=-5",
        None,
        ["RUN", "-C", "max_tokens=-5"],
        "zero-shot config 'max_tokens': Input should be greater than 0",
    ),
    ("-C max_tokens=0", None, ["RUN", "-C", "max_tokens=0"], "Input should be greater than 0"),
    (
        "-C temperature=-3",
        None,
        ["RUN", "-C", "temperature=-3"],
        "zero-shot config 'temperature': Input should be greater than or equal to 0",
    ),
    ("-C temperature=NaN", None, ["RUN", "-C", "temperature=NaN"], "zero-shot config 'temperature'"),
    ("-C without a value", None, ["RUN", "-C", "temperature"], "bad --config item 'temperature'"),
    ("-C unknown key", None, ["RUN", "-C", "temprature=0.3"], "did you mean 'temperature'"),
    (
        "--limit beyond the split",
        None,
        ["RUN", "--limit", "1000000000000"],
        "--limit 1,000,000,000,000 is more than the 1,992 samples",
    ),
    ("--limit 0", None, ["RUN", "--limit", "0"], "--limit must be a positive number"),
    ("--limit not a number", None, ["RUN", "--limit", "many"], "'many' is not a valid integer"),
    ("--concurrency 0", None, ["RUN", "--concurrency", "0"], "--concurrency must be positive"),
    ("--max-retries -1", None, ["RUN", "--max-retries", "-1"], "--max-retries must be 0 or more"),
    ("--bootstrap 10", None, ["RUN", "--bootstrap", "10"], "too few replicates"),
    ("--split train", None, ["RUN", "--split", "train"], "'train' is not one of 'test', 'valid'"),
    ("an option without its value", None, ["run", "-s", "zero-shot", "--task"], "Option '--task' requires an argument"),
    ("a misspelt option", None, ["RUN", "--limt", "5"], "No such option '--limt'. (Did you mean one of: '--limit'"),
    ("an unknown task", None, ["run", "-s", "zero-shot", "-t", "drugbank_s9"], "unknown task 'drugbank_s9'"),
    ("an unknown command", None, ["rnu"], "No such command 'rnu'"),
    # submissions
    (
        "submit --out into a missing directory",
        None,
        ["submit", R, "--out", "{root}/missing/b.tar.gz"],
        "directory {root}/missing does not exist",
    ),
    ("submit --out a directory", None, ["submit", R, "--out", "{root}/cache"], "is a directory"),
    (
        "submit with a garbage journal",
        edit("run/journal.jsonl", garbage_line),
        ["submit", R, "--out", "{root}/b.tar.gz"],
        "journal.jsonl:2 is not a readable journal record",
    ),
    (
        "submit of an unfinished run",
        remove("run/results.json"),
        ["submit", R, "--out", "{root}/b.tar.gz"],
        "has no results.json; finish the run",
    ),
    (
        "submit of a damaged results.json",
        edit("run/results.json", lambda b: b[:50]),
        ["submit", R, "--out", "{root}/b.tar.gz"],
        "is not valid JSON",
    ),
    ("verify of a missing bundle", None, ["verify", "{root}/missing.tar.gz"], "does not exist"),
    ("verify of something else", None, ["verify", "{root}/afile"], "is not a readable .tar.gz bundle"),
    (
        "verify --tolerance without --reproduce",
        None,
        ["verify", "{root}/bundle.tar.gz", "--tolerance", "0.1"],
        "--tolerance applies to --reproduce only",
    ),
    (
        "verify --tolerance out of range",
        None,
        ["verify", "{root}/bundle.tar.gz", "--reproduce", "--tolerance", "2"],
        "--tolerance 2.0 is not a share",
    ),
    (
        "board add into a missing directory",
        None,
        ["board", "add", "--store", "{root}/missing/board.duckdb", "{root}/bundle.tar.gz"],
        "directory {root}/missing does not exist",
    ),
    ("data verify of an unknown task", None, ["data", "verify", "--task", "drugbank_s9"], "unknown task 'drugbank_s9'"),
    (
        "board check of a folder with no index",
        None,
        ["board", "check", "--results", "{root}"],
        "holds no results index (index.json)",
    ),
    (
        "board serve of a missing store",
        None,
        ["board", "serve", "--store", "{root}/none.duckdb"],
        "no results store at {root}/none.duckdb",
    ),
    (
        "board export with nothing to write",
        None,
        ["board", "export", "--store", "{root}/none.duckdb"],
        "nothing to export",
    ),
    (
        "board publish into a file",
        None,
        ["board", "publish", "--results", "{root}/afile", "{root}/bundle.tar.gz"],
        "--results {root}/afile is not a directory",
    ),
    # issue 26: scoring options out of range (they were read as an unknown option '-3')
    (
        "--probe-epochs=-3",
        None,
        [
            "run",
            "-s",
            "only-smiles",
            "-t",
            "caption_bace",
            "--probe",
            "finetune",
            "--probe-epochs=-3",
            "--run-dir",
            "{root}/fresh",
        ],
        "--probe-epochs must be a positive number of epochs, got -3",
    ),
    (
        "--selfcheck -3",
        None,
        [
            "run",
            "-s",
            "no-rag",
            "-t",
            "ddi_qa_s2",
            "--selfcheck",
            "-3",
            "-m",
            "vllm:m@http://127.0.0.1:9/v1",
            "--run-dir",
            "{root}/fresh",
        ],
        "--selfcheck must be 0 or more, got -3",
    ),
    # issue 26: lm-eval interop
    (
        "export lm-eval --limit beyond the split",
        None,
        ["export", "lm-eval", "{root}/lm-more", "-t", "drugbank_s2", "--limit", "1000000000"],
        "--limit 1,000,000,000 is more than the 1,992 samples of drugbank_s2's test split",
    ),
    (
        "import lm-eval of a binary file",
        edit(LM_SAMPLES, lambda b: bytes(range(256)) * 8),
        ["IMPORT"],
        "is not UTF-8 text, so not an lm-eval samples file",
    ),
    (
        "import lm-eval of a samples line of the wrong types",
        edit(LM_SAMPLES, sample_lines(_first_response_a_mapping)),
        ["IMPORT"],
        "_2025-01-01T00-00-00.000000.jsonl:1 is not an lm-eval sample of a ddibench task",
    ),
    (
        "import lm-eval of a limit that is a word",
        edit(LM_SAMPLES, sample_lines(_limit_a_word)),
        ["IMPORT"],
        'the documents\' ddibench_limit is "four"',
    ),
    (
        "import lm-eval beside a results file whose config is a string",
        edit(LM_RESULTS, lambda b: b'{"config": "x"}'),
        ["IMPORT"],
        "is not lm-eval's results file: 'config' is \"x\", not an object",
    ),
    (
        "import lm-eval beside a results file whose model_args is a number",
        edit(LM_RESULTS, lambda b: b'{"config": {"model_args": 5}}'),
        ["IMPORT"],
        "'config.model_args' is 5",
    ),
    (
        "import lm-eval beside a results file whose date is a word",
        edit(LM_RESULTS, lambda b: b'{"date": "yesterday"}'),
        ["IMPORT"],
        "'date' is \"yesterday\", not a number of seconds",
    ),
    (
        "import lm-eval beside a results file that is a list",
        edit(LM_RESULTS, lambda b: b"[]"),
        ["IMPORT"],
        "it holds a JSON list, not an object",
    ),
    (
        "import lm-eval beside a garbage results_*.json",
        edit(LM_RESULTS, lambda b: b"garbage"),
        ["IMPORT"],
        "is not valid JSON, so not lm-eval's results file",
    ),
    (
        "import lm-eval beside a results_*.json not UTF-8",
        edit(LM_RESULTS, lambda b: b"\xff\xfe" + b),
        ["IMPORT"],
        "is not UTF-8 text, so not lm-eval's results file",
    ),
    (
        "import lm-eval of a folder holding a garbage results_*.json",
        edit(LM_RESULTS, lambda b: b"garbage"),
        ["import", "lm-eval", "{root}/lm", "--run-dir", "{root}/imported"],
        "is not valid JSON, so not lm-eval's results file",
    ),
    (
        "import lm-eval of a folder with no samples",
        None,
        ["import", "lm-eval", "{root}/cache", "--run-dir", "{root}/imported"],
        "{root}/cache is a folder that holds no samples_*.jsonl file",
    ),
    # issue 26: a Ray cluster where nothing listens (ray.init retried it for minutes)
    (
        "--ray-address where nothing listens",
        None,
        ["RUN", "--executor", "ray", "--ray-address", "127.0.0.1:1", "--run-dir", "{root}/fresh"],
        "no Ray cluster answers at --ray-address 127.0.0.1:1",
    ),
]


@contextmanager
def env(values: dict[str, str]) -> Iterator[None]:
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.mark.timeout(180)  # a case that hangs (ray.init on an address where nothing listens did, for minutes) fails
@pytest.mark.parametrize(("case", "setup", "args", "message"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_and_changes_nothing(
    cli, stub, world: Path, tmp_path: Path, case: str, setup, args: list[str], message: str
) -> None:
    root = tmp_path / "w"
    shutil.copytree(world, root)
    if setup is not None:
        setup(root)
    before = snapshot(root)
    variables = {"env": {"DDIBENCH_CACHE": str(root / "cache")}}
    argv: list[str] = []
    for arg in args:
        if arg == "RUN":
            argv += run_args(stub, root)
        elif arg == "RUNS":
            argv += [a for a in run_args(stub, root) if a != "--run-dir" and a != str(root / "run")] + ["--runs-dir"]
        elif arg == "IMPORT":
            argv += ["import", "lm-eval", str(root / LM_SAMPLES), "--run-dir", str(root / "imported")]
        elif arg.startswith("ENV:"):
            key, _, value = arg[4:].partition("=")
            variables["env"][key] = value.format(root=root)
        else:
            argv.append(arg.format(root=root, run=root / "run"))
    for option in ("--run-dir",):  # a later --run-dir replaces the run's own
        if argv.count(option) == 2:
            first = argv.index(option)
            del argv[first : first + 2]
    with env(variables["env"]):
        code, out, err = cli(*argv)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code not in (0, None), f"{case}: exit {code}\n{out}\n{err}"
    assert len(lines) == 1 and "Traceback" not in err, f"{case}: stderr is not one line:\n{err}"
    assert message.format(root=root) in lines[0], f"{case}: {lines[0]}"
    assert (
        ";" in lines[0]
        or message.startswith("No such")
        or "is not one of" in lines[0]
        or "requires an argument" in lines[0]
    ), lines[0]
    assert snapshot(root) == before, f"{case}: files changed or appeared"


def test_one_damaged_run_does_not_hide_the_others(cli, world: Path, tmp_path: Path) -> None:
    root = tmp_path / "w"
    shutil.copytree(world / "run", root / "good")
    shutil.copytree(world / "run", root / "bad")
    (root / "bad" / "run.json").write_text("{")
    code, out, err = cli("report", str(root))
    assert code == 1 and not err
    assert "unreadable:" in out and "is not valid JSON" in out and "drugbank_s2" in out and "complete" in out


@pytest.fixture
def held_lock(world: Path, tmp_path: Path) -> Iterator[Path]:
    """A copy of the finished run whose lock another process (this test) holds."""
    root = tmp_path / "w"
    shutil.copytree(world, root)
    with open(root / "run" / ".lock", "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        yield root
        fcntl.flock(fh, fcntl.LOCK_UN)


def test_rescore_and_run_during_a_run_name_the_lock(
    cli, stub, held_lock: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DDIBENCH_CACHE", str(held_lock / "cache"))
    before = snapshot(held_lock)
    for argv in (["rescore", str(held_lock / "run")], run_args(stub, held_lock)):
        code, _, err = cli(*argv)
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert "is in use by another process; wait for it to finish" in err and "model" not in err
    assert snapshot(held_lock) == before


# ---------------------------------------------------------------------------------------------
# a full disk, a read-only place, Ctrl-C: in a subprocess, against real file systems


def _can_mount() -> bool:
    if os.geteuid() != 0 or not shutil.which("mount"):
        return False
    probe = Path("/tmp") / f"ddibench-mount-probe-{os.getpid()}"
    probe.mkdir(exist_ok=True)
    try:
        ok = (
            subprocess.run(
                ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(probe)], capture_output=True
            ).returncode
            == 0
        )
        if ok:
            subprocess.run(["umount", str(probe)], capture_output=True)
        return ok
    finally:
        probe.rmdir()


CAN_MOUNT = _can_mount()


@contextmanager
def tmpfs(path: Path, size: str, readonly: bool = False) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    options = f"size={size}" + (",ro" if readonly else "")
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=True)


def cmd(stub, run_dir: Path, limit: int, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "ddibench",
        "run",
        "-s",
        "zero-shot",
        "-t",
        "drugbank_s2",
        "--limit",
        str(limit),
        "-m",
        f"vllm:stub-model@{stub.base_url}",
        "--run-dir",
        str(run_dir),
        "--no-cache",
        "--concurrency",
        "1",
        *extra,
    ]


def journal_lines(run_dir: Path) -> list[dict]:
    data = (run_dir / "journal.jsonl").read_bytes() if (run_dir / "journal.jsonl").exists() else b""
    assert not data or data.endswith(b"\n"), "the journal ends in a torn line"
    return [json.loads(line) for line in data.splitlines()]


@pytest.mark.skipif(not CAN_MOUNT, reason="needs root to mount a small tmpfs")
def test_a_full_disk_stops_the_run_in_one_line_without_tearing_the_journal(stub, tmp_path: Path) -> None:
    env_ = {**os.environ, "DDIBENCH_CACHE": str(tmp_path / "cache"), "COLUMNS": "200"}
    with tmpfs(tmp_path / "disk", "96k") as disk:
        run_dir = disk / "run"
        full = subprocess.run(cmd(stub, run_dir, 200), capture_output=True, text=True, env=env_, timeout=300)
        lines = [x for x in full.stderr.splitlines() if x.strip()]
        assert full.returncode == 2 and len(lines) == 1 and "Traceback" not in full.stderr, full.stderr
        assert (
            "No space left on device" in lines[0]
            and "free some space" in lines[0]
            and "re-run the same command" in lines[0]
        )
        saved = journal_lines(run_dir)
        assert 0 < len(saved) < 200
        assert not [p for p in disk.rglob("*.tmp")]  # no half-written whole file left behind
        kept = {p: p.read_bytes() for p in (run_dir / "run.json", run_dir / "journal.jsonl")}
        moved = tmp_path / "moved"
        shutil.copytree(run_dir, moved)  # room to finish: the same run, resumed elsewhere
    for path, data in kept.items():
        assert (moved / path.name).read_bytes() == data
    done = subprocess.run(cmd(stub, moved, 200), capture_output=True, text=True, env=env_, timeout=300)
    assert done.returncode == 0, done.stderr
    ids = [x["prediction"]["sample_id"] for x in journal_lines(moved)]
    assert len(ids) == len(set(ids)) == 200 and ids[: len(saved)] == [x["prediction"]["sample_id"] for x in saved]


def test_a_write_cut_short_by_a_file_size_limit_is_undone(stub, tmp_path: Path) -> None:
    """Without root: RLIMIT_FSIZE makes the kernel write part of the line that crosses the limit and then
    fail (EFBIG), exactly the torn write a full disk gives. The journal must end on a whole line."""
    import resource

    run_dir = tmp_path / "run"
    limit = 24_000

    def cap() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    env_ = {**os.environ, "DDIBENCH_CACHE": str(tmp_path / "cache"), "COLUMNS": "200"}
    capped = subprocess.run(
        cmd(stub, run_dir, 60), capture_output=True, text=True, env=env_, timeout=300, preexec_fn=cap
    )
    lines = [x for x in capped.stderr.splitlines() if x.strip()]
    assert (
        capped.returncode == 2 and len(lines) == 1 and "File too large" in lines[0] and "journal.jsonl" in lines[0]
    ), capped.stderr
    saved = journal_lines(run_dir)
    assert 0 < len(saved) < 60 and (run_dir / "journal.jsonl").stat().st_size <= limit
    sessions = [json.loads(x) for x in (run_dir / "sessions.jsonl").read_text().splitlines()]
    assert sessions[-1]["state"] == "failed" and "File too large" in sessions[-1]["error"]
    done = subprocess.run(cmd(stub, run_dir, 60), capture_output=True, text=True, env=env_, timeout=300)
    assert done.returncode == 0, done.stderr
    ids = [x["prediction"]["sample_id"] for x in journal_lines(run_dir)]
    assert len(ids) == len(set(ids)) == 60


@pytest.mark.parametrize("how", ["mount", "chmod"])
def test_a_read_only_runs_directory_is_one_line(stub, tmp_path: Path, how: str) -> None:
    if how == "mount" and not CAN_MOUNT:
        pytest.skip("needs root to mount a read-only tmpfs")
    if how == "chmod" and os.geteuid() == 0:
        pytest.skip("root writes through permission bits")
    env_ = {**os.environ, "DDIBENCH_CACHE": str(tmp_path / "cache"), "COLUMNS": "200"}
    runs = tmp_path / "runs"
    if how == "mount":
        context = tmpfs(runs, "64k", readonly=True)
    else:
        runs.mkdir()
        runs.chmod(0o555)
        context = contextmanager(lambda: iter([runs]))()
    with context:
        argv = cmd(stub, runs / "run", 4)
        result = subprocess.run(argv, capture_output=True, text=True, env=env_, timeout=300)
        lines = [x for x in result.stderr.splitlines() if x.strip()]
        assert (
            result.returncode == 2
            and len(lines) == 1
            and "is not writable" in lines[0]
            and "choose a writable --run-dir" in lines[0]
        ), result.stderr
        assert not list(runs.iterdir())


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_says_how_to_resume_and_closes_the_session(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    env_ = {**os.environ, "DDIBENCH_CACHE": str(tmp_path / "cache"), "COLUMNS": "200"}
    # 0.2 s an answer, one at a time: the 300 samples take a minute, far longer than the test waits. The runs get
    # SIGINT's default disposition back: a suite started in the background of a script (`cmd &`) inherits SIGINT
    # ignored, and Python keeps an inherited ignore, so a Ctrl-C would never reach the run under test.
    with running_stub(StubConfig(delay=0.2)) as slow:
        proc = subprocess.Popen(
            cmd(slow, run_dir, 300),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env_,
            preexec_fn=_default_sigint,
        )
        deadline = time.time() + 120
        while time.time() < deadline and len(journal_lines(run_dir)) < 5:
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        lines = [x for x in err.splitlines() if x.strip()]
        assert proc.returncode == 130 and lines == [
            "interrupted; finished samples are saved, re-run the same command to resume"
        ], err
        sessions = [json.loads(x) for x in (run_dir / "sessions.jsonl").read_text().splitlines()]
        assert [s["state"] for s in sessions] == ["started", "interrupted"] and sessions[1]["predicted"] == len(
            journal_lines(run_dir)
        )

        proc = subprocess.Popen(
            cmd(slow, run_dir, 300),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env_,
            preexec_fn=_default_sigint,
        )
        while time.time() < deadline and len(journal_lines(run_dir)) < 10:
            time.sleep(0.05)
        proc.terminate()  # SIGTERM ends it the same way
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130 and "re-run the same command to resume" in err


def test_killed_sessions_are_counted(stub, tmp_path: Path) -> None:
    """A session killed with SIGKILL keeps its start line; the results count it and time it from the journal."""
    from conftest import kill_run_after

    run_dir = tmp_path / "run"
    env_ = {**os.environ, "DDIBENCH_CACHE": str(tmp_path / "cache"), "COLUMNS": "200"}
    with running_stub(StubConfig(delay=0.02)) as slow:
        argv = cmd(slow, run_dir, 120)
        for lines in (20, 50):
            kill_run_after(argv, run_dir / "journal.jsonl", lines, timeout=120)
        done = subprocess.run(argv, capture_output=True, text=True, env=env_, timeout=300)
    assert done.returncode == 0, done.stderr
    results = json.loads((run_dir / "results.json").read_text())
    assert results["manifest"]["sessions"] == 3 and results["manifest"]["sessions_killed"] == 2
    assert results["timing"]["wall_s_total"] >= 0.02 * 50  # the killed sessions' time is in, up to their last sample
    assert "3 session(s), 2 killed" in done.stdout


# ---------------------------------------------------------------------------------------------
# issue 26: a user's files given to CLADD, data export beside a user's file, simultaneous starts, SIGTERM


PRIMEKG_HEADER = "relation,display_relation,x_index,x_id,x_type,x_name,x_source,y_index,y_id,y_type,y_name,y_source\n"
PRIMEKG = (
    PRIMEKG_HEADER
    + "".join(
        f"drug_protein,target,0,{db},drug,{name},DrugBank,1,{gene},gene/protein,{gene},NCBI\n"
        for db, name, gene in (
            ("DB00945", "Aspirin", "PTGS1"),
            ("DB01050", "Ibuprofen", "PTGS1"),
            ("DB00945", "Aspirin", "PTGS2"),
        )
    )
).encode()
PUBCHEM = b"inchikey\tdescription\nBSYNRYMUTXBXSQ-UHFFFAOYSA-N\tAspirin is a drug.\nRZVAJINKPMORJF-UHFFFAOYSA-N\tParacetamol is a drug.\n"


@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    ("option", "data", "message"),
    [
        ("kg", PRIMEKG[:-40], "kg.csv:4 has 7 fields where its header has 12 (a file cut short"),
        ("kg", PRIMEKG.replace(b"Aspirin", b"Asp\xffirin"), "kg file {file} is not UTF-8 text; save it as UTF-8"),
        ("pubchem", PUBCHEM[:-36], "user.tsv:3 has 1 fields where its header has 2 (a file cut short"),
        ("pubchem", b"\xff\xfe" + PUBCHEM, "pubchem file {file} is not UTF-8 text; save it as UTF-8"),
    ],
    ids=["kg cut short", "kg not UTF-8", "pubchem cut short", "pubchem not UTF-8"],
)
def test_cladd_files_of_a_user_that_are_cut_short_or_not_utf8(
    cli, stub, tmp_path: Path, option: str, data: bytes, message: str
) -> None:
    """They were a UnicodeDecodeError or TypeError traceback: now one line naming the file (and the line). The
    file is read before the first sample, is left as it was, and the run directory holds no prediction."""
    file = tmp_path / ("kg.csv" if option == "kg" else "user.tsv")
    file.write_bytes(data)
    run_dir = tmp_path / "run"
    extra = ["-C", "use_kg_team=false"] if option == "pubchem" else []
    code, _, err = cli(
        "run",
        "-s",
        "cladd",
        "-t",
        "tox_carcinogens",
        "--limit",
        "1",
        "-m",
        f"vllm:stub-model@{stub.base_url}",
        "--run-dir",
        str(run_dir),
        "--no-cache",
        "-C",
        f"{option}={file}",
        *extra,
    )
    lines = [x for x in err.splitlines() if x.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert message.format(file=file) in lines[0] and ";" in lines[0], lines[0]
    assert file.read_bytes() == data
    assert not (run_dir / "journal.jsonl").exists() or not (run_dir / "journal.jsonl").read_text()


@pytest.mark.timeout(600)
def test_data_export_never_touches_a_users_file_and_takes_the_current_directory(
    cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It deleted an existing X/.out.part (its temporary name) without asking, and 'export TASK .' was a ValueError."""
    pytest.importorskip("datasets", reason="the interop extra is not installed (pip install 'ddibench[interop]')")
    mine = tmp_path / ".out.part"
    mine.write_text("a user's own file\n")
    code, _, err = cli("data", "export", "drugbank_s2", str(tmp_path / "out"), "--split", "test")
    assert code == 0 and not err.strip(), err
    assert mine.read_text() == "a user's own file\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".out.part", "out"]  # no temporary directory left
    assert sorted(str(p.relative_to(tmp_path / "out")) for p in (tmp_path / "out").rglob("*")) == [
        "README.md",
        "data",
        "data/test.parquet",
    ]

    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    code, _, err = cli("data", "export", "drugbank_s2", ".", "--split", "test")  # an empty current directory: filled
    assert code == 0 and not err.strip(), err
    assert sorted(str(p.relative_to(here)) for p in here.rglob("*")) == ["README.md", "data", "data/test.parquet"]
    assert (here / "data" / "test.parquet").read_bytes() == (tmp_path / "out" / "data" / "test.parquet").read_bytes()
    before = snapshot(here)
    code, _, err = cli("data", "export", "drugbank_s2", ".", "--split", "test")  # not empty any more: refused
    lines = [x for x in err.splitlines() if x.strip()]
    assert code == 2 and lines == ["error: . exists and is not an empty directory; give a new or empty directory"], err
    assert snapshot(here) == before and sorted(p.name for p in tmp_path.iterdir()) == [".out.part", "here", "out"]


@pytest.mark.timeout(600)
def test_simultaneous_starts_on_one_run_directory_name_the_lock(tmp_path: Path) -> None:
    """Started at once on one fresh --run-dir, every start but the one that runs (and any that start after it
    finished) says the directory is in use; none says it is 'not empty and holds no run.json'."""
    run_dir = tmp_path / "run"
    argv = [
        sys.executable,
        "-m",
        "ddibench",
        "run",
        "-s",
        "majority",
        "-t",
        "drugbank_s2",
        "--limit",
        "20",
        "--run-dir",
        str(run_dir),
    ]
    env_ = {**os.environ, "DDIBENCH_CACHE": str(tmp_path / "cache"), "COLUMNS": "200"}
    procs = [
        subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env_) for _ in range(6)
    ]
    outcomes = [(p.returncode, err) for p in procs for _, err in [p.communicate(timeout=500)]]
    assert any(code == 0 for code, _ in outcomes), outcomes
    for code, err in outcomes:
        lines = [x for x in err.splitlines() if x.strip()]
        assert "Traceback" not in err, err
        assert code == 0 or (code == 2 and len(lines) == 1 and f"run directory {run_dir} is in use by" in lines[0]), err
    assert json.loads((run_dir / "results.json").read_text())["manifest"]["limit"] == 20


def test_a_start_that_loses_the_race_names_the_lock(cli, stub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The race made certain: while this start checks its model endpoint, another start of the same run takes the
    directory's lock and writes run.json. This one must say 'in use by pid N' (it said 'not empty and holds no
    run.json', having looked at the directory before taking the lock), and leave the other's files alone."""
    from ddibench.llm import LLMPool

    run_dir = tmp_path / "run"
    checked = LLMPool.preflight
    held: list = []

    def preflight_while_another_starts(pool: LLMPool) -> None:
        checked(pool)
        run_dir.mkdir()
        fh = open(run_dir / ".lock", "a+")
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fh.write("pid 4242")
        fh.flush()
        (run_dir / "run.json").write_text("{}")
        held.append(fh)

    monkeypatch.setattr(LLMPool, "preflight", preflight_while_another_starts)
    try:
        code, _, err = cli(*run_args(stub, tmp_path))
        before = snapshot(run_dir)
    finally:
        for fh in held:
            fh.close()
    lines = [x for x in err.splitlines() if x.strip()]
    assert code == 2 and lines == [
        f"error: run directory {run_dir} is in use by pid 4242; wait for it to finish, or use another --run-dir"
    ], err
    assert before == {".lock": b"pid 4242", "run.json": b"{}"}


@pytest.mark.timeout(600)
def test_sigterm_early_in_prediction_is_one_line_and_the_run_resumes(tmp_path: Path) -> None:
    """A SIGTERM while the first answers are awaited printed the line and then asyncio's 'Task exception was
    never retrieved' with a traceback: the loop now cancels its tasks and awaits them before the line."""
    run_dir = tmp_path / "run"
    env_ = {**os.environ, "DDIBENCH_CACHE": str(tmp_path / "cache"), "COLUMNS": "200"}
    with running_stub(StubConfig(delay=0.5)) as slow:
        argv = cmd(slow, run_dir, 16, "--concurrency", "8")  # eight answers in flight at once
        sessions = run_dir / "sessions.jsonl"
        for n, wait in enumerate(
            (0.0, 0.1, 0.3)
        ):  # after the session starts: model start, preparation, the first requests
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env_)
            deadline = time.time() + 120
            while time.time() < deadline and (sessions.read_text().count("\n") if sessions.exists() else 0) <= 2 * n:
                time.sleep(0.01)
            time.sleep(wait)
            proc.terminate()
            _, err = proc.communicate(timeout=60)
            lines = [x for x in err.splitlines() if x.strip()]
            assert proc.returncode == 130 and "Traceback" not in err and "never retrieved" not in err, err
            assert lines == ["interrupted; finished samples are saved, re-run the same command to resume"], err
        done = subprocess.run(argv, capture_output=True, text=True, env=env_, timeout=300)
    assert done.returncode == 0, done.stderr
    ids = [x["prediction"]["sample_id"] for x in journal_lines(run_dir)]
    assert len(ids) == len(set(ids)) == 16


def test_sigterm_before_the_loop_runs_leaves_no_coroutine_unawaited(monkeypatch: pytest.MonkeyPatch) -> None:
    """The race the test above hit now and then: SIGTERM after the session started but before asyncio.run ran
    the run's coroutine (the command's handler raises KeyboardInterrupt there), and Python warned at exit that
    two coroutines were never awaited, after the one-line message."""
    import asyncio
    import gc
    import warnings

    from ddibench.runner import signals

    started: list[bool] = []

    async def work() -> int:
        started.append(True)
        return 1

    def interrupted(coro: Any) -> Any:  # the signal lands while asyncio.run sets up, before the coroutine starts
        raise KeyboardInterrupt

    assert signals.run_async(work()) == 1 and started == [True]  # the normal path still runs it
    monkeypatch.setattr(asyncio, "run", interrupted)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(KeyboardInterrupt):
            signals.run_async(work())
        gc.collect()
    assert started == [True]
    assert not [w for w in caught if "never awaited" in str(w.message)], [str(w.message) for w in caught]
