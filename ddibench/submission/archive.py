"""A bounded reader of submission bundles: gzip'd ustar archives, read as hostile input.

Why not :mod:`tarfile`: the standard library's reader is the vulnerable part, and it cannot be bounded
from outside. On Python 3.11.7 a 160-byte bundle whose PAX header declares a negative size sends it
into an endless loop (CVE-2025-8194), a 352-byte one costs it 50 s of CPU in its PAX header parser
(CVE-2024-6232), and it reads a PAX header or a GNU long name whole, however large the header says it
is, before any member is seen. A bundle needs none of tar's extensions: ``ddibench submit`` writes
plain ustar members with short names (:data:`MEMBER`). So this module reads the 512-byte headers
itself, over :mod:`zlib` decompression capped at :data:`MAX_BUNDLE_BYTES`, and refuses — before any
member's content is read — a damaged header (its checksum), every extension header (PAX ``x``/``g``,
GNU ``L``/``K``) and every type but a regular file (links, devices, directories), a size that is not
plain octal or is over its member's cap (:func:`member_cap`), a name outside the bundle format, a
repeated name, and more than :data:`MAX_MEMBERS` members. Every refusal is one :class:`DataError` line.

The caps are what real bundles need with a wide margin (the biggest shipped bundle, a compact DrugBank S0
run of 38,419 samples, holds 5.5 MB of predictions; a non-compact one about 92 MB), so a gzip bomb in any
member (500 MiB of zeros packs into a megabyte or two) is refused from its header, before it is inflated,
and what a member under its cap may build once parsed is capped by :mod:`ddibench.submission.stream`.
A member is never read whole here unless its reader asks for it (:class:`MemberReader` reads in pieces).
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from ddibench.errors import DataError

MEMBER = re.compile(
    r"^(bundle\.json|run\.json|results\.json|sessions\.jsonl|predictions\.jsonl|scores/[A-Za-z0-9._-]+\.jsonl)$"
)
MAX_SMALL_BYTES = 4 * 2**20  # bundle.json, run.json, results.json each (the biggest shipped results.json: 0.6 MB)
SMALL_MEMBERS = ("bundle.json", "run.json", "results.json")
MAX_SESSIONS_BYTES = 16 * 2**20  # sessions.jsonl: two lines per invocation of the run (the biggest shipped: 16 kB)
MAX_SCORES_BYTES = 16 * 2**20  # every scores/*.jsonl together (the biggest shipped: 64 kB for 50 judged answers)
# predictions.jsonl: the biggest shipped holds 5.5 MB; a non-compact DrugBank S0 run (92 MB) is packed with --compact
MAX_PREDICTIONS_BYTES = 64 * 2**20
MAX_BUNDLE_BYTES = 3 * MAX_SMALL_BYTES + MAX_SESSIONS_BYTES + MAX_SCORES_BYTES + MAX_PREDICTIONS_BYTES  # 108 MiB
MAX_MEMBERS = 64  # the five fixed members and up to 59 scores/*.jsonl files (a run writes one per LLM judge)
BLOCK = 512
_IN_CHUNK = 1 << 16
_OUT_CHUNK = 1 << 20
_USTAR_MAGIC = (b"ustar\x0000", b"ustar  \x00")  # POSIX ustar (what submit writes) and GNU's spelling of it
_TYPES = {
    b"x": "a PAX extended header",
    b"g": "a PAX global header",
    b"L": "a GNU long-name header",
    b"K": "a GNU long-link header",
    b"1": "a hard link",
    b"2": "a symbolic link",
    b"3": "a character device",
    b"4": "a block device",
    b"5": "a directory",
    b"6": "a FIFO",
    b"7": "a contiguous file",
}
_FIX = "submit the run again with 'ddibench submit'"
_FIX_BIG = "pack the run with 'ddibench submit --compact', which keeps of each prediction what the metrics read"


@dataclass(frozen=True)
class Entry:
    """One member's header: its name and its size in bytes."""

    name: str
    size: int


def member_cap(name: str) -> int:
    """The most bytes member ``name`` may hold (scores/*.jsonl: all of them together)."""
    if name in SMALL_MEMBERS:
        return MAX_SMALL_BYTES
    if name == "sessions.jsonl":
        return MAX_SESSIONS_BYTES
    if name.startswith("scores/"):
        return MAX_SCORES_BYTES
    return MAX_PREDICTIONS_BYTES


def _mib(n: int) -> str:
    return f"{n / 2**20:g} MiB"


def _unreadable(path: Path, why: str) -> DataError:
    return DataError(f"{path} is not a readable .tar.gz bundle ({why})", _FIX)


class _Gunzip:
    """The decompressed bytes of a gzip file, at most ``limit`` of them, never more than asked for at once."""

    def __init__(self, raw: BinaryIO, path: Path, limit: int) -> None:
        self._raw, self._path, self._left = raw, path, limit
        self._z = zlib.decompressobj(wbits=31)

    def read(self, n: int) -> bytes:
        """``n`` bytes, or fewer only where the gzip stream ends."""
        parts: list[bytes] = []
        want = n
        try:
            while want > 0:
                if self._z.eof:  # a gzip member ended: another may follow (concatenated gzip), or nothing
                    rest = self._z.unused_data or self._raw.read(_IN_CHUNK)
                    if not rest:
                        break
                    self._z = zlib.decompressobj(wbits=31)
                    data = self._z.decompress(rest, want)
                elif self._z.unconsumed_tail:
                    data = self._z.decompress(self._z.unconsumed_tail, want)
                else:
                    raw = self._raw.read(_IN_CHUNK)
                    if not raw:
                        raise _unreadable(self._path, "the gzip stream is truncated")
                    data = self._z.decompress(raw, want)
                want -= len(data)
                parts.append(data)
        except zlib.error as exc:
            raise _unreadable(self._path, f"not gzip data: {exc}") from None
        got = n - want
        self._left -= got
        if self._left < 0:
            raise DataError(f"{self._path} decompresses to more than {_mib(MAX_BUNDLE_BYTES)}", _FIX)
        return b"".join(parts)

    def exactly(self, n: int) -> bytes:
        data = self.read(n)
        if len(data) < n:
            raise _unreadable(self._path, "the archive is truncated")
        return data

    def skip(self, n: int) -> None:
        while n > 0:
            n -= len(self.exactly(min(n, _OUT_CHUNK)))


def _octal(field: bytes) -> int | None:
    """A plain octal number field (NUL- or space-padded), else None (base-256, signs and junk are refused)."""
    digits = field.rstrip(b"\x00 ").lstrip(b" ")
    if not digits or not all(48 <= c <= 55 for c in digits):
        return None
    return int(digits, 8)


def _shown(name: bytes) -> str:
    text = name.decode("ascii", "replace")
    return text if text.isprintable() else ascii(text)


def _header(block: bytes, path: Path, seen: set[str], total: int, scores: int) -> Entry:
    """The entry a header block describes, after every check that needs no member content."""
    stored = _octal(block[148:156])
    unsigned = sum(block[:148]) + 8 * 32 + sum(block[156:])
    signed = sum(b - 256 if b > 127 else b for b in block[:148] + block[156:]) + 8 * 32
    if stored is None or stored not in (unsigned, signed):
        raise _unreadable(path, f"a damaged header after {len(seen)} members: its checksum does not match")
    if block[257:265] not in _USTAR_MAGIC:
        raise _unreadable(path, "a header that is not ustar")
    raw_name = block[:100].split(b"\x00", 1)[0]
    kind = block[156:157]
    if kind not in (b"0", b"\x00"):
        what = _TYPES.get(kind, f"an entry of type {kind!r}")
        raise DataError(
            f"bundle member '{_shown(raw_name)}' is not a regular file ({what}; links, devices and tar extension headers are refused)",
            _FIX,
        )
    if block[345:500].strip(b"\x00"):
        raise DataError(
            f"bundle member '{_shown(raw_name)}' has a name prefix: it is not part of the bundle format", _FIX
        )
    name = raw_name.decode("ascii", "replace")
    if not MEMBER.match(name):
        raise DataError(f"bundle member '{_shown(raw_name)}' is not part of the bundle format", _FIX)
    if name in seen:
        raise DataError(f"bundle member '{name}' appears twice in {path}", _FIX)
    if len(seen) >= MAX_MEMBERS:
        raise DataError(f"{path} has more than {MAX_MEMBERS} members; a bundle has at most {MAX_MEMBERS}", _FIX)
    size = _octal(block[124:136])
    if size is None:
        raise _unreadable(path, f"member '{name}' has a size that is not an octal number")
    cap = member_cap(name)
    if size > cap:
        raise DataError(
            f"bundle member '{name}' declares {size:,} bytes, over the {_mib(cap)} it may take",
            _FIX_BIG if name == "predictions.jsonl" else _FIX,
        )
    if name.startswith("scores/") and scores + size > MAX_SCORES_BYTES:
        raise DataError(
            f"bundle members scores/*.jsonl declare {scores + size:,} bytes together, over the {_mib(MAX_SCORES_BYTES)} they may take",
            _FIX,
        )
    if total + size > MAX_BUNDLE_BYTES:
        raise DataError(f"bundle {path} is larger than {_mib(MAX_BUNDLE_BYTES)} decompressed", _FIX)
    return Entry(name, size)


def _walk(path: Path, gz: _Gunzip) -> Iterator[Entry]:
    """Each member's checked header; the caller reads (or skips) its ``size`` bytes before the next."""
    seen: set[str] = set()
    total = scores = 0
    while True:
        block = gz.read(BLOCK)
        if not block or block == bytes(BLOCK):  # the end-of-archive marker, or the end of the stream
            return
        if len(block) < BLOCK:
            raise _unreadable(path, "the archive is truncated")
        entry = _header(block, path, seen, total, scores)
        seen.add(entry.name)
        total += entry.size
        if entry.name.startswith("scores/"):
            scores += entry.size
        yield entry
        gz.skip(-entry.size % BLOCK)


def _open(path: Path) -> BinaryIO:
    if not path.is_file():
        raise DataError(f"bundle {path} does not exist", "give the path 'ddibench submit' printed")
    if path.stat().st_size > MAX_BUNDLE_BYTES:
        raise DataError(f"bundle {path} is larger than {_mib(MAX_BUNDLE_BYTES)}", _FIX)
    try:
        return open(path, "rb")
    except OSError as exc:
        raise _unreadable(path, exc.strerror or str(exc)) from None


class MemberReader:
    """A member's content, read in pieces (never past its size)."""

    def __init__(self, gz: _Gunzip, size: int) -> None:
        self._gz, self.left = gz, size

    def read(self, n: int = -1) -> bytes:
        n = self.left if n < 0 else min(n, self.left)
        data = self._gz.exactly(n)
        self.left -= n
        return data


def entries(path: Path) -> list[Entry]:
    """Every member's header, checked, without keeping any content (the first of :func:`members`' two passes)."""
    with _open(path) as raw:
        gz = _Gunzip(raw, path, MAX_BUNDLE_BYTES + (MAX_MEMBERS + 2) * 2 * BLOCK)
        found = []
        for entry in _walk(path, gz):
            gz.skip(entry.size)
            found.append(entry)
        return found


def members(path: Path) -> Iterator[tuple[str, MemberReader]]:
    """(name, reader) of each member, in archive order. The whole archive's structure is checked first,
    so nothing of a member is read from a bundle that a later header makes unacceptable."""
    entries(path)
    with _open(path) as raw:
        gz = _Gunzip(raw, path, MAX_BUNDLE_BYTES + (MAX_MEMBERS + 2) * 2 * BLOCK)
        for entry in _walk(path, gz):
            reader = MemberReader(gz, entry.size)
            yield entry.name, reader
            gz.skip(reader.left)
