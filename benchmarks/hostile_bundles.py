#!/usr/bin/env python3
"""Time and peak memory of ``ddibench verify`` refusing each kind of hostile bundle, and what checking
a bundle in a child process costs on a real one.

Each hostile bundle is built here (tests/test_hostile_bundles.py builds them with the same functions):
tar headers are written by hand, big sizes are declared in headers rather than written, and big
members are compressible zeros, so every file stays small. Each refusal runs ``python -m ddibench
verify BUNDLE`` in a fresh process; its wall time and the peak RSS of that process and its children
(the child that checks the bundle) come from ``wait4``. Then, on a real bundle, :func:`verify` in
this process against :func:`ddibench.submission.sandbox.verify_isolated` (the best of three each, the task's data
already loaded).

    python benchmarks/hostile_bundles.py [--bundle results/drugbank_s0/mlp/81ba43c23a43dac2.tar.gz]

Prints a table; targets: every refusal within 5 s and 300 MB. Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
REAL_BUNDLE = REPO / "results" / "drugbank_s0" / "mlp" / "81ba43c23a43dac2.tar.gz"
SMALL_BUNDLE = REPO / "results" / "tox_carcinogens" / "majority" / "f6ddbf0012ea9e3e.tar.gz"
GIB = 2**30
MIB = 2**20


# -- building hostile bundles ---------------------------------------------------------------------


def header(
    name: bytes,
    size: int = 0,
    kind: bytes = b"0",
    *,
    size_field: bytes | None = None,
    checksum: bool = True,
    prefix: bytes = b"",
) -> bytes:
    """One 512-byte ustar header; ``size_field`` writes the size field as given (e.g. a negative number)."""
    block = bytearray(512)
    block[0:100] = name[:100].ljust(100, b"\x00")
    block[100:108] = b"0000644\x00"
    block[108:116] = block[116:124] = b"0000000\x00"
    block[124:136] = size_field if size_field is not None else b"%011o\x00" % size
    block[136:148] = b"00000000000\x00"
    block[148:156] = b" " * 8
    block[156:157] = kind
    block[257:265] = b"ustar\x0000"
    block[345:500] = prefix[:155].ljust(155, b"\x00")
    total = sum(block) if checksum else sum(block) + 1
    block[148:156] = b"%06o\x00 " % total
    return bytes(block)


def member(name: str, data: bytes) -> bytes:
    """A regular file's header and content, padded to whole blocks."""
    return header(name.encode(), len(data)) + data + bytes(-len(data) % 512)


def pax(body: bytes, size_field: bytes | None = None) -> bytes:
    return header(b"././@PaxHeader", len(body), b"x", size_field=size_field) + body + bytes(-len(body) % 512)


def write_gz(path: Path, parts: Iterable[bytes | int], end: bool = True) -> Path:
    """Compress ``parts`` (bytes, or zeros given as an int count) into a gzip file, with the tar end marker."""
    z = zlib.compressobj(1, zlib.DEFLATED, 31)
    with open(path, "wb") as fh:
        for part in list(parts) + ([bytes(1024)] if end else []):
            if isinstance(part, int):
                zeros = bytes(MIB)
                for start in range(0, part, MIB):
                    fh.write(z.compress(zeros[: min(MIB, part - start)]))
            else:
                fh.write(z.compress(part))
        fh.write(z.flush())
    return path


def zero_member(name: str, size: int) -> list[bytes | int]:
    """A member of ``size`` zero bytes (written compressed, never whole in memory)."""
    return [header(name.encode(), size), size, bytes(-size % 512)]


def _pax_negative_size(path: Path) -> Path:  # CVE-2025-8194: tarfile loops forever
    return write_gz(path, [pax(b"13 size=-512\n"), member("run.json", b"{}")])


def _pax_cve_2024_6232(path: Path) -> Path:  # a PAX body that sends tarfile's header regex backtracking
    return write_gz(path, [pax(b"0" * 100 + b" 1 " * 60), member("run.json", b"{}")])


def _pax_1gib(path: Path) -> Path:  # a PAX header declaring 1 GiB (tarfile reads it whole)
    return write_gz(path, [header(b"././@PaxHeader", GIB, b"x")], end=False)


def _gnu_long_name_1gib(path: Path) -> Path:  # a GNU long name declaring 1 GiB
    return write_gz(path, [header(b"././@LongLink", GIB, b"L")], end=False)


def _long_line(path: Path) -> Path:  # 500 MiB of zeros in predictions.jsonl, no newline
    return write_gz(path, [member("bundle.json", b"{}"), *zero_member("predictions.jsonl", 500 * MIB)])


def _deep_json(path: Path) -> Path:
    return write_gz(path, [member("bundle.json", b"[" * 100_000)])


def _many_members(path: Path) -> Path:
    return write_gz(path, [member(f"scores/{i}.jsonl", b"") for i in range(100_000)])


def _symlink(path: Path) -> Path:
    return write_gz(path, [header(b"run.json", 0, b"2")])


def _device(path: Path) -> Path:
    return write_gz(path, [header(b"run.json", 0, b"3")])


def _duplicate(path: Path) -> Path:
    return write_gz(path, [member("run.json", b"{}"), member("run.json", b"{}")])


def _bad_checksum(path: Path) -> Path:
    return write_gz(path, [header(b"run.json", 2, checksum=False) + b"{}" + bytes(510)])


def _negative_size(path: Path) -> Path:  # a plain header whose size field is not octal
    return write_gz(path, [header(b"run.json", size_field=b"-0000000001\x00")])


def _long_name(path: Path) -> Path:  # a ustar name prefix making a long path
    return write_gz(path, [header(b"run.json", 0, prefix=b"a" * 150)])


def _truncated_gzip(path: Path) -> Path:
    data = SMALL_BUNDLE.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def _gzip_bomb(path: Path) -> Path:  # 3 x 200 MiB of zeros: each member over its cap, refused from its header
    return write_gz(
        path,
        [
            *zero_member("sessions.jsonl", 200 * MIB),
            *zero_member("scores/a.jsonl", 200 * MIB),
            *zero_member("scores/b.jsonl", 200 * MIB),
        ],
    )


def _not_gzip(path: Path) -> Path:
    path.write_bytes(b"not a tarball at all" * 100)
    return path


# kind -> (builder, a fragment of its one-line refusal)
HOSTILE: dict[str, tuple[Callable[[Path], Path], str]] = {
    "pax-negative-size": (_pax_negative_size, "a PAX extended header"),
    "pax-cve-2024-6232": (_pax_cve_2024_6232, "a PAX extended header"),
    "pax-header-1gib": (_pax_1gib, "a PAX extended header"),
    "gnu-long-name-1gib": (_gnu_long_name_1gib, "a GNU long-name header"),
    "line-500mib": (_long_line, "'predictions.jsonl' declares 524,288,000 bytes, over the 64 MiB"),
    "json-depth-100k": (_deep_json, "nests deeper than 64 levels"),
    "members-100k": (_many_members, "more than 64 members"),
    "symlink": (_symlink, "a symbolic link"),
    "device": (_device, "a character device"),
    "duplicate-name": (_duplicate, "appears twice"),
    "bad-checksum": (_bad_checksum, "checksum does not match"),
    "size-not-octal": (_negative_size, "size that is not an octal number"),
    "name-prefix": (_long_name, "has a name prefix"),
    "truncated-gzip": (_truncated_gzip, "truncated"),
    "gzip-bomb": (_gzip_bomb, "'sessions.jsonl' declares 209,715,200 bytes, over the 16 MiB"),
    "not-gzip": (_not_gzip, "not a readable .tar.gz bundle"),
}


def build(kind: str, folder: Path) -> Path:
    return HOSTILE[kind][0](folder / f"{kind}.tar.gz")


# -- measuring ------------------------------------------------------------------------------------


# Linux starts a forked child's peak RSS (ru_maxrss) at its parent's: a command started straight from a
# 2 GB test process reports 2 GB whatever it uses. A small launcher is started first; the peak it reads
# for its own child (the command, with the command's children) is the command's own.
_LAUNCHER = """
import json, os, subprocess, sys
child = subprocess.Popen(sys.argv[2:])
_, status, usage = os.wait4(child.pid, 0)
with open(sys.argv[1], "w") as fh:
    json.dump([os.waitstatus_to_exitcode(status), usage.ru_maxrss], fh)
"""


def run_measured(args: list[str], timeout: float, cwd: Path | None = None) -> tuple[int, str, float, float]:
    """(exit status, stdout+stderr, wall seconds, peak RSS in MB of the process and its children) of a
    command, killed at ``timeout`` (status -9)."""
    with tempfile.TemporaryFile() as out, tempfile.NamedTemporaryFile("r", suffix=".json") as report:
        start = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-c", _LAUNCHER, report.name, *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env={**os.environ, "COLUMNS": "200"},
            start_new_session=True,
        )
        try:
            proc.wait(timeout)
            code, peak_kb = json.loads(report.read())
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            code, peak_kb = -9, 0
        wall = time.perf_counter() - start
        out.seek(0)
        text = out.read().decode("utf-8", "replace")
    return code, text, wall, peak_kb / 1024


def verify_cli(bundle: Path, timeout: float = 120) -> tuple[int, str, float, float]:
    return run_measured([sys.executable, "-m", "ddibench", "verify", str(bundle)], timeout)


def compare(bundle: Path, rounds: int = 3) -> list[tuple[str, float]]:
    """Best-of-``rounds`` wall seconds of verifying ``bundle`` in this process and in a child."""
    from ddibench.submission import verify
    from ddibench.submission.sandbox import verify_isolated

    verify(bundle)  # loads the task's data once, as a batch's parent has after its first bundle
    ways: list[tuple[str, Callable[[], object]]] = [
        ("in-process verify (keep_traces)", lambda: verify(bundle, keep_traces=True)),
        ("child-process verify, verdict with predictions", lambda: verify_isolated(bundle, keep_traces=True)),
        ("child-process verify, verdict without predictions", lambda: verify_isolated(bundle, predictions=False)),
    ]
    best = {name: float("inf") for name, _ in ways}
    for _ in range(rounds):
        for name, call in ways:
            start = time.perf_counter()
            call()
            best[name] = min(best[name], time.perf_counter() - start)
    return list(best.items())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--bundle", type=Path, default=REAL_BUNDLE, help="A real bundle for the in-process vs child-process comparison."
    )
    args = parser.parse_args()
    print(f"{'hostile bundle':<22} {'bytes':>9} {'exit':>4} {'wall s':>7} {'peak MB':>8}  refusal")
    with tempfile.TemporaryDirectory() as tmp:
        for kind in HOSTILE:
            bundle = build(kind, Path(tmp))
            code, text, wall, peak = verify_cli(bundle)
            line = text.strip().splitlines()[-1] if text.strip() else ""
            print(f"{kind:<22} {bundle.stat().st_size:>9,} {code:>4} {wall:>7.2f} {peak:>8.0f}  {line[:110]}")
    print()
    print(f"real bundle {args.bundle} ({args.bundle.stat().st_size:,} bytes), best of 3:")
    for name, seconds in compare(args.bundle):
        print(f"  {name:<50} {seconds:6.2f} s")


if __name__ == "__main__":
    main()
