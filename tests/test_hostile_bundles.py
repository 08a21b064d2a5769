"""Hostile bundles: each kind is refused by ``ddibench verify`` with one line, within bounded time and
memory, without a traceback and without writing anything; a ``board add`` batch goes on past them.

The bundles are built by benchmarks/hostile_bundles.py (which also prints the time and memory of each
refusal): big sizes are declared in headers, big members are compressible zeros, so files stay small.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tarfile
from pathlib import Path

import pytest
from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
from hostile_bundles import HOSTILE, SMALL_BUNDLE, build, run_measured, verify_cli  # noqa: E402

TIME_LIMIT_S = 30  # the benchmark measures about 1 s each (2.6 s for the 500 MiB line); a loaded CI machine is slower
PEAK_MB = 300  # the CLI process and its child together


def _listing(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.rglob("*"))}


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("hostile")
    for kind in HOSTILE:
        build(kind, folder)
    return folder


@pytest.mark.parametrize("kind", list(HOSTILE))
def test_hostile_bundle_is_refused_in_one_line(hostile: Path, kind: str) -> None:
    bundle = hostile / f"{kind}.tar.gz"
    before = _listing(hostile)
    code, text, wall, peak_mb = verify_cli(bundle, timeout=TIME_LIMIT_S)
    assert code not in (0, -9), f"{kind}: exit {code} (-9: killed at {TIME_LIMIT_S} s)\n{text[:2000]}"
    assert "Traceback" not in text, text[-3000:]
    lines = text.strip().splitlines()
    assert len(lines) == 1 and len(text) < 1000, f"{kind}: {len(lines)} lines, {len(text)} characters: {text[:2000]}"
    assert lines[0].startswith("error: ") and HOSTILE[kind][1] in lines[0], lines[0]
    assert wall < TIME_LIMIT_S and peak_mb < PEAK_MB, f"{kind}: {wall:.1f} s, {peak_mb:.0f} MB"
    assert _listing(hostile) == before, "verify changed a file"


def test_board_add_goes_on_past_hostile_bundles(hostile: Path, tmp_path: Path) -> None:
    """Hostile bundles first, a real one last: each hostile one is one rejected line, the real one is added."""
    import duckdb

    real = tmp_path / "real.tar.gz"
    shutil.copyfile(SMALL_BUNDLE, real)
    first = ["pax-negative-size", "pax-cve-2024-6232", "line-500mib", "json-depth-100k", "members-100k", "gzip-bomb"]
    store = tmp_path / "board.duckdb"
    args = [
        sys.executable,
        "-m",
        "ddibench",
        "board",
        "add",
        "--store",
        str(store),
        *(str(hostile / f"{k}.tar.gz") for k in first),
        str(real),
    ]
    code, text, wall, peak_mb = run_measured(args, timeout=120)
    assert code == 1 and "Traceback" not in text, text[-3000:]
    lines = text.strip().splitlines()
    assert len(lines) == len(first) + 1, text[:3000]
    for kind, line in zip(first, lines):
        assert line.startswith(f"{kind}.tar.gz: rejected: ") and HOSTILE[kind][1] in line, line
    assert lines[-1].startswith("real.tar.gz: added"), lines[-1]
    assert peak_mb < PEAK_MB + 200, f"{peak_mb:.0f} MB"
    with duckdb.connect(str(store), read_only=True) as conn:
        assert conn.execute("SELECT count(*) FROM runs").fetchone()[0] == 1


def test_every_shipped_bundle_reads_as_tarfile_reads_it() -> None:
    """The bounded reader accepts every bundle 'ddibench submit' wrote (the shipped ones: plain ustar)."""
    from ddibench.submission import read_bundle

    bundles = sorted((REPO / "results").rglob("*.tar.gz"))
    assert len(bundles) >= 40
    for bundle in bundles:
        with tarfile.open(bundle, "r:gz") as tar:  # trusted files: they ship with ddibench
            expected = {m.name: tar.extractfile(m).read() for m in tar}  # type: ignore[union-attr]
        assert read_bundle(bundle) == expected, bundle


# -- the child process's limits: a check that spins, swells or crashes ends as one line ----------


def _spin(path: Path, **kwargs: object) -> None:
    while True:
        pass


def _swell(path: Path, **kwargs: object) -> None:
    hoard = []
    while True:
        hoard.append(bytearray(64 * 2**20))


def _crash(path: Path, **kwargs: object) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


@pytest.mark.parametrize(("check", "said"), [("_spin", "s of CPU"), ("_swell", "GiB of memory"), ("_crash", "SIGKILL")])
def test_a_check_that_runs_out_is_one_line(monkeypatch: pytest.MonkeyPatch, check: str, said: str) -> None:
    """The child runs one of the checks above (this module: the child gets this process's import path)
    in place of verify, under limits lowered to keep the test short."""
    import time

    import ddibench.sandbox as sandbox
    from ddibench.errors import DataError

    monkeypatch.syspath_prepend(str(Path(__file__).parent))  # the child imports what this process can
    monkeypatch.setattr(sandbox, "CPU_LIMIT_S", 1)
    monkeypatch.setattr(sandbox, "MEMORY_LIMIT", 512 * 2**20)
    start = time.perf_counter()
    with pytest.raises(DataError, match=said) as caught:
        sandbox.verify_isolated(SMALL_BUNDLE, check=f"{Path(__file__).stem}:{check}")
    assert "\n" not in str(caught.value) and time.perf_counter() - start < 20
