"""Hostile bundles: each kind is refused by ``ddibench verify`` with one line, within bounded time and
memory, without a traceback and without writing anything; a ``board add`` batch goes on past them.

The bundles are built by benchmarks/hostile_bundles.py (which also prints the time and memory of each
refusal): big sizes are declared in headers, big members are compressible zeros, so files stay small.
Members that are hostile inside a real bundle (gzip bombs, floods of lines or JSON values) are built here
the same way; benchmarks/hostile_bundle.py measures the time and peak memory of refusing them.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
from hostile_bundles import HOSTILE, SMALL_BUNDLE, build, header, member, run_measured, verify_cli, write_gz  # noqa: E402

from ddibench.submission import archive  # noqa: E402  (light: the sandbox's child imports this module, under 1 s of CPU)

TIME_LIMIT_S = 30  # the benchmark measures about 1 s each (2.6 s for the 500 MiB line); a loaded CI machine is slower
PEAK_MB = 300  # the CLI process and its child together
MIB = 2**20
REFUSAL = {kind: fragment for kind, (_, fragment) in HOSTILE.items()}


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
    assert lines[0].startswith("error: ") and REFUSAL[kind] in lines[0], lines[0]
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
        assert line.startswith(f"{kind}.tar.gz: rejected: ") and REFUSAL[kind] in line, line
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


# -- hostile members inside a real bundle: refused from the header, or by counting, never read whole ----------


def _real_members() -> dict[str, bytes]:
    with tarfile.open(SMALL_BUNDLE, "r:gz") as tar:  # trusted: it ships with ddibench
        return {m.name: tar.extractfile(m).read() for m in tar}  # type: ignore[union-attr]


def _with_members(path: Path, replaced: dict[str, bytes | int | list[bytes]]) -> Path:
    """The small shipped bundle with members replaced (or added): bytes, a count of zero bytes, or pieces."""
    parts: list[bytes | int] = []
    for name, content in {**_real_members(), **replaced}.items():
        if isinstance(content, bytes):
            parts.append(member(name, content))
            continue
        size = content if isinstance(content, int) else sum(len(p) for p in content)
        parts.append(header(name.encode(), size))
        parts.extend([content] if isinstance(content, int) else content)
        parts.append(bytes(-size % 512))
    return write_gz(path, parts)


def _refusal(call: Callable[[], object]) -> str:
    from ddibench.errors import DataError

    with pytest.raises(DataError) as caught:
        call()
    text = str(caught.value)
    assert "\n" not in text and len(text) < 400, text
    return text


def _every_reader(bundle: Path) -> list[str]:
    """The refusal of each way a bundle is read: verify, the board's recorded path, read_bundle."""
    from ddibench.submission import read_bundle, recorded_verdict, verify

    return [
        _refusal(lambda: verify(bundle)),
        _refusal(lambda: recorded_verdict(bundle, "recomputed", None, False)),
        _refusal(lambda: read_bundle(bundle)),
    ]


@pytest.mark.parametrize(
    ("replaced", "said"),
    [
        (
            {"sessions.jsonl": archive.MAX_SESSIONS_BYTES + 1},
            f"'sessions.jsonl' declares {archive.MAX_SESSIONS_BYTES + 1:,} bytes, over the {archive.MAX_SESSIONS_BYTES // MIB} MiB it may take",
        ),
        (
            {"predictions.jsonl": archive.MAX_PREDICTIONS_BYTES + 1},
            f"'predictions.jsonl' declares {archive.MAX_PREDICTIONS_BYTES + 1:,} bytes, over the {archive.MAX_PREDICTIONS_BYTES // MIB} MiB",
        ),
        (
            {"scores/x.jsonl": archive.MAX_SCORES_BYTES + 1},
            f"'scores/x.jsonl' declares {archive.MAX_SCORES_BYTES + 1:,} bytes, over the {archive.MAX_SCORES_BYTES // MIB} MiB",
        ),
        (
            {"scores/a.jsonl": archive.MAX_SCORES_BYTES // 2, "scores/b.jsonl": archive.MAX_SCORES_BYTES // 2 + 1},
            f"scores/*.jsonl declare {archive.MAX_SCORES_BYTES + 1:,} bytes together, over the {archive.MAX_SCORES_BYTES // MIB} MiB",
        ),
        (
            {"results.json": archive.MAX_SMALL_BYTES + 1},
            f"'results.json' declares {archive.MAX_SMALL_BYTES + 1:,} bytes, over the {archive.MAX_SMALL_BYTES // MIB} MiB",
        ),
    ],
    ids=["sessions", "predictions", "scores", "scores-together", "results"],
)
def test_a_member_over_its_cap_is_refused_from_its_header(
    tmp_path: Path, replaced: dict[str, bytes | int | list[bytes]], said: str
) -> None:
    """One byte over a member's cap (zeros, a gzip bomb) is refused by every reader before it is inflated."""
    bundle = _with_members(tmp_path / "bomb.tar.gz", replaced)
    for text in _every_reader(bundle):
        assert said in text, text


def test_a_500mib_sessions_bomb_is_refused_in_one_line(tmp_path: Path) -> None:
    """The measured case: a real bundle whose sessions.jsonl is 500 MiB of zeros (a 2 MB file) was
    accepted at 1 GB of memory; the CLI refuses it in one line (the benchmark measures ~1 s and ~80 MB)."""
    bundle = _with_members(tmp_path / "sessions-bomb.tar.gz", {"sessions.jsonl": 500 * MIB})
    assert bundle.stat().st_size < 4 * MIB
    code, text, wall, peak_mb = verify_cli(bundle, timeout=TIME_LIMIT_S)
    lines = text.strip().splitlines()
    assert code not in (0, -9) and len(lines) == 1 and "Traceback" not in text, text[:2000]
    assert lines[0].startswith("error: bundle member 'sessions.jsonl' declares 524,288,000 bytes"), lines[0]
    assert wall < TIME_LIMIT_S and peak_mb < PEAK_MB, f"{wall:.1f} s, {peak_mb:.0f} MB"


def _floods() -> dict[str, tuple[dict[str, bytes | int | list[bytes]], str]]:
    """Members under their byte caps that would still build too much: (members replaced, refusal)."""
    from ddibench.submission import stream

    prediction = _real_members()["predictions.jsonl"].splitlines()[0] + b"\n"  # a valid one, of the task
    zeros = b"[" + b"0," * (2 * MIB - 4) + b"0]\n"  # one line just under 4 MiB: about 2 million JSON values
    return {
        "blank-lines": (
            {"predictions.jsonl": b"\n" * (stream.MAX_LINES + 1)},
            f"predictions.jsonl has more than {stream.MAX_LINES:,} lines",
        ),
        "repeated-prediction": (
            {"predictions.jsonl": [prediction * 1000] * (stream.MAX_LINES // 1000 + 1)},
            f"predictions.jsonl has more than {stream.MAX_LINES:,} lines",
        ),
        "one-long-line": (
            {"predictions.jsonl": b"a" * (stream.MAX_LINE + 1)},
            f"predictions.jsonl line 1 is longer than {stream.MAX_LINE // MIB} MiB",
        ),
        "json-values": (
            {"predictions.jsonl": [zeros] * (stream.MAX_VALUES // (2 * MIB) + 1)},
            f"predictions.jsonl holds more than {stream.MAX_VALUES:,} JSON values",
        ),
        "scores-line-breaks": (
            {"scores/x.jsonl": b"\r" * (stream.MAX_SCORES_LINES + 1)},
            f"scores/*.jsonl has more than {stream.MAX_SCORES_LINES:,} lines",
        ),
        "scores-values": (
            {"scores/x.jsonl": zeros * (stream.MAX_SCORES_VALUES // (2 * MIB) + 1)},
            f"scores/*.jsonl holds more than {stream.MAX_SCORES_VALUES:,} JSON values",
        ),
    }


@pytest.mark.parametrize(
    "kind",
    ["blank-lines", "repeated-prediction", "one-long-line", "json-values", "scores-line-breaks", "scores-values"],
)
def test_a_flood_within_the_caps_is_refused_by_counting(tmp_path: Path, kind: str) -> None:
    """Members under their byte caps that would still build too much (lines, JSON values) are refused where
    the count crosses its cap, by every reader that parses them, before the lines past it are parsed."""
    from ddibench.submission import recorded_verdict, verify

    replaced, said = _floods()[kind]
    bundle = _with_members(tmp_path / "flood.tar.gz", replaced)
    assert said in _refusal(lambda: verify(bundle)), said
    assert said in _refusal(lambda: recorded_verdict(bundle, "recomputed", None, False)), said


def test_the_reader_holds_a_chunk_not_a_member(tmp_path: Path) -> None:
    """Reading a bundle whose sessions.jsonl is at its cap (16 MiB) allocates about a chunk for it, never
    the member (tracemalloc: Python's own count of what it allocates)."""
    import tracemalloc

    from ddibench.submission import stream

    bundle = _with_members(tmp_path / "at-cap.tar.gz", {"sessions.jsonl": archive.MAX_SESSIONS_BYTES})
    tracemalloc.start()
    try:
        streamed = stream._stream(bundle, keep_traces=False)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(streamed.predictions) == 56 and "sessions.jsonl" in streamed.hashes
    assert "sessions.jsonl" not in streamed.members  # hashed, not kept
    assert peak < 6 * stream.CHUNK, f"{peak / MIB:.1f} MiB"


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

    import ddibench.submission.sandbox as sandbox
    from ddibench.errors import DataError

    monkeypatch.syspath_prepend(str(Path(__file__).parent))  # the child imports what this process can
    # 1 s of CPU stops the spinning check; the swelling one spends ~1 s of CPU on imports and page faults
    # before it reaches the memory limit, so it gets more (on a loaded machine 1 s sometimes stopped it first)
    monkeypatch.setattr(sandbox, "CPU_LIMIT_S", 1 if check == "_spin" else 5)
    monkeypatch.setattr(sandbox, "MEMORY_LIMIT", 512 * 2**20)
    start = time.perf_counter()
    with pytest.raises(DataError, match=said) as caught:
        sandbox.verify_isolated(SMALL_BUNDLE, check=f"{Path(__file__).stem}:{check}")
    assert "\n" not in str(caught.value) and time.perf_counter() - start < 20
