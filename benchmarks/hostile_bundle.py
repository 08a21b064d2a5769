#!/usr/bin/env python3
"""Peak memory and time of refusing bundles whose *members* are hostile: gzip bombs in sessions.jsonl,
predictions.jsonl and scores/, one endless line, deeply nested JSON, huge JSON numbers and strings.

Each bundle starts from a real shipped one (results/, a small tox_carcinogens run), with one member replaced
and bundle.json's hashes rewritten to match, so nothing but the hostile member gives it away. Big members are
written compressed, a mebibyte at a time (never whole in memory); a 500 MiB member of zeros is a ~0.5 MB file.

Every bundle goes through the entries that read bundles, each in a fresh process whose peak RSS (with its
children: ``verify`` checks a bundle in a child process) and wall time come from ``wait4``:

* ``verify``: ``python -m ddibench verify BUNDLE``;
* ``recorded``: :func:`ddibench.submission.recorded_verdict`, what the board's fast path reads a shipped
  bundle with once its hash matches results/index.json (a hostile pull request can change both);
* ``publish`` (with ``--publish``): ``ddibench board publish BUNDLE --results COPY`` into a temporary copy
  of results/ (slower: it also checks the shipped bundles by hash).

    python benchmarks/hostile_bundle.py [--only sessions-zeros-500mib ...] [--real] [--publish] [--entries verify,recorded]

Prints a table; targets: every refusal in one line within 5 s and 300 MB peak RSS (the interpreter and
ddibench's imports included). Asserts nothing. Measured on a loaded 2-core machine (``verify`` itself costs
2-4 s of imports and task loading there, a real tiny bundle 3.7-6 s): before the per-member caps a 500 MiB
sessions.jsonl of zeros was *accepted* at 1,058 MB in 5.7 s (recorded: 1,064 MB), a predictions flood ran
past 60 s; after them every case is refused in one line at 50-104 MB in 1.1-4.7 s, but for the two bundles
that pass every cap (a 60 MiB text flood, a 2-million-value flood), which verify's checks reject at
168-237 MB in 3.3-8 s, about what verifying a real bundle costs there.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import tarfile
import tempfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hostile_bundles import REPO, SMALL_BUNDLE, header, run_measured  # noqa: E402

BIGGEST_BUNDLE = REPO / "results" / "drugbank_s0" / "mlp" / "81ba43c23a43dac2.tar.gz"  # 5.5 MB of predictions
MIB = 2**20
BOMB = 500 * MIB

# A member's content: bytes, or an iterator of byte chunks (a big member, made a piece at a time).
Content = bytes | Callable[[], Iterator[bytes]]


def real_members(bundle: Path = SMALL_BUNDLE) -> dict[str, bytes]:
    """The members of a shipped bundle (trusted: it ships with ddibench), in archive order."""
    with tarfile.open(bundle, "r:gz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar}  # type: ignore[union-attr]


def repeated(unit: bytes, size: int) -> Callable[[], Iterator[bytes]]:
    """``unit`` repeated to ``size`` bytes (the last copy cut short), in chunks of about a mebibyte."""

    def chunks() -> Iterator[bytes]:
        block = unit * max(1, MIB // len(unit))
        left = size
        while left > 0:
            yield block[:left]
            left -= len(block[:left])

    return chunks


def distinct_lines(template: bytes, size: int) -> Callable[[], Iterator[bytes]]:
    """Lines ``template % i`` for i = 0, 1, ... up to ``size`` bytes (whole lines only)."""

    def chunks() -> Iterator[bytes]:
        left, i = size, 0
        while left > 0:
            lines = []
            got = 0
            while got < MIB and got < left:
                line = template % i + b"\n"
                i += 1
                if got + len(line) > left:
                    break
                lines.append(line)
                got += len(line)
            if not lines:
                return
            block = b"".join(lines)
            left -= len(block)
            yield block

    return chunks


def _pieces(content: Content) -> Iterable[bytes]:
    return [content] if isinstance(content, bytes) else content()


def _measure(content: Content) -> tuple[int, str]:
    size, digest = 0, hashlib.sha256()
    for piece in _pieces(content):
        size += len(piece)
        digest.update(piece)
    return size, digest.hexdigest()


def write_bundle(path: Path, members: dict[str, Content]) -> Path:
    """A gzip'd ustar bundle of ``members``, bundle.json's hashes rewritten to match the others."""
    sized = {name: _measure(content) for name, content in members.items() if name != "bundle.json"}
    index = json.loads(members["bundle.json"]) if isinstance(members["bundle.json"], bytes) else {}
    if isinstance(index, dict) and "hashes" in index:
        index["hashes"] = {name: digest for name, (_, digest) in sorted(sized.items())}
        members = {**members, "bundle.json": json.dumps(index, indent=2).encode()}
        sized["bundle.json"] = _measure(members["bundle.json"])
    z = zlib.compressobj(6, zlib.DEFLATED, 31)
    with open(path, "wb") as fh:
        for name, content in members.items():
            size = sized[name][0] if name in sized else _measure(content)[0]
            fh.write(z.compress(header(name.encode(), size)))
            for piece in _pieces(content):
                fh.write(z.compress(piece))
            fh.write(z.compress(bytes(-size % 512)))
        fh.write(z.compress(bytes(1024)))
        fh.write(z.flush())
    return path


def _with(name: str, content: Content) -> Callable[[Path], Path]:
    def build(path: Path) -> Path:
        members: dict[str, Content] = dict(real_members())
        members[name] = content
        return write_bundle(path, members)

    return build


def _prediction_line() -> bytes:
    return real_members()["predictions.jsonl"].splitlines()[0] + b"\n"


def _session_line() -> bytes:
    return real_members()["sessions.jsonl"].splitlines()[0] + b"\n"


def _huge_string_predictions(path: Path) -> Path:
    """40 predictions whose text is 12 MiB each (each line under the old 16 MiB line cap; 480 MiB)."""
    record = json.loads(_prediction_line())

    def chunks() -> Iterator[bytes]:
        for i in range(40):
            yield json.dumps({**record, "sample_id": f"big-{i}", "text": "a" * (12 * MIB)}).encode() + b"\n"

    return _with("predictions.jsonl", chunks)(path)


def _text_flood(path: Path) -> Path:
    """Predictions whose text fills lines just under 4 MiB (the line cap), 60 MiB in all (the predictions cap
    is 64 MiB): what a bundle under every cap may make the reader keep (its text)."""
    record = json.loads(_prediction_line())

    def chunks() -> Iterator[bytes]:
        for i in range(15):
            yield json.dumps({**record, "sample_id": f"big-{i}", "text": "a" * (4 * MIB - 300)}).encode() + b"\n"

    return _with("predictions.jsonl", chunks)(path)


def _values_flood(path: Path) -> Path:
    """Predictions whose scores hold distinct labels, just under the 2 million JSON values the reader parses."""

    def chunks() -> Iterator[bytes]:
        for i in range(10):
            scores = ",".join(f'"{i}-{k}":0.5' for k in range(99_000))
            yield f'{{"sample_id":"v{i}","label":0,"valid":true,"scores":{{{scores}}}}}\n'.encode()

    return _with("predictions.jsonl", chunks)(path)


def _huge_number_prediction(path: Path) -> Path:
    record = _prediction_line().rstrip(b"\n")[:-1]  # the object without its closing brace
    return _with("predictions.jsonl", record + b',"n":' + b"7" * (12 * MIB) + b"}\n")(path)


# kind -> (builder, what the refusal is about)
CASES: dict[str, tuple[Callable[[Path], Path], str]] = {
    "sessions-zeros-500mib": (_with("sessions.jsonl", repeated(b"\x00", BOMB)), "sessions.jsonl"),
    "sessions-lines-500mib": (lambda p: _with("sessions.jsonl", repeated(_session_line(), BOMB))(p), "sessions.jsonl"),
    "predictions-zeros-500mib": (_with("predictions.jsonl", repeated(b"\x00", BOMB)), "predictions.jsonl"),
    "predictions-repeat-500mib": (
        lambda p: _with("predictions.jsonl", repeated(_prediction_line(), BOMB))(p),
        "predictions.jsonl",
    ),
    "predictions-distinct-200mib": (
        _with(
            "predictions.jsonl",
            distinct_lines(b'{"sample_id":"s%d","label":0,"valid":true}', 200 * MIB),
        ),
        "predictions.jsonl",
    ),
    "predictions-distinct-60mib": (
        _with(
            "predictions.jsonl",
            distinct_lines(b'{"sample_id":"s%d","label":0,"valid":true}', 60 * MIB),
        ),
        "predictions.jsonl",
    ),
    "predictions-text-flood-60mib": (_text_flood, "predictions.jsonl"),
    "predictions-values-flood": (_values_flood, "predictions.jsonl"),
    "predictions-newlines-500mib": (_with("predictions.jsonl", repeated(b"\n", BOMB)), "predictions.jsonl"),
    "predictions-one-line-500mib": (_with("predictions.jsonl", repeated(b"a", BOMB)), "predictions.jsonl"),
    "predictions-huge-strings": (_huge_string_predictions, "predictions.jsonl"),
    "predictions-huge-number": (_huge_number_prediction, "predictions.jsonl"),
    "predictions-newlines-100mib": (_with("predictions.jsonl", repeated(b"\n", 100 * MIB)), "predictions.jsonl"),
    "scores-line-breaks-16mib": (_with("scores/x.jsonl", repeated(b"\r", 16 * MIB)), "scores"),
    "scores-zeros-500mib": (_with("scores/x.jsonl", repeated(b"\x00", BOMB)), "scores/x.jsonl"),
    "scores-lines-500mib": (_with("scores/x.jsonl", repeated(b'{"sample_id":"a","grade":1}\n', BOMB)), "scores"),
    "results-deep-4mib": (_with("results.json", b"[" * (4 * MIB - 1)), "results.json"),
    "results-huge-number": (_with("results.json", b"9" * (4 * MIB - 1)), "results.json"),
    "results-huge-string": (_with("results.json", b'"' + b"a" * (4 * MIB - 3) + b'"'), "results.json"),
    "all-members-500mib": (
        lambda p: write_bundle(
            p,
            {
                **real_members(),
                "sessions.jsonl": repeated(b"\x00", 170 * MIB),
                "scores/a.jsonl": repeated(b"\x00", 170 * MIB),
                "scores/b.jsonl": repeated(b"\x00", 170 * MIB),
            },
        ),
        "bundle",
    ),
}

_RECORDED = (
    "import sys; from pathlib import Path; from ddibench.errors import DdibenchError\n"
    "from ddibench.submission import recorded_verdict\n"
    "try:\n"
    "    v = recorded_verdict(Path(sys.argv[1]), 'recomputed', None, False)\n"
    "    print('accepted' if v.accepted else 'refused: ' + '; '.join(v.reasons)[:300])\n"
    "except DdibenchError as exc:\n"
    "    print('error: ' + str(exc)); sys.exit(1)\n"
)


def entry_args(entry: str, bundle: Path, results_copy: Path | None) -> list[str]:
    if entry == "verify":
        return [sys.executable, "-m", "ddibench", "verify", str(bundle)]
    if entry == "recorded":
        return [sys.executable, "-c", _RECORDED, str(bundle)]
    if entry == "publish":
        assert results_copy is not None
        return [sys.executable, "-m", "ddibench", "board", "publish", str(bundle), "--results", str(results_copy)]
    raise ValueError(entry)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=None, help="Cases to run (default: all).")
    parser.add_argument("--entries", default="verify,recorded", help="Comma-separated: verify, recorded, publish.")
    parser.add_argument("--publish", action="store_true", help="Also run 'board publish' into a copy of results/.")
    parser.add_argument("--timeout", type=float, default=120)
    parser.add_argument(
        "--real",
        action="store_true",
        help="Also the shipped bundles the cases start from and the biggest one (what a bundle that verifies costs).",
    )
    args = parser.parse_args()
    entries = args.entries.split(",") + (["publish"] if args.publish else [])
    kinds = args.only or list(CASES)
    print(f"{'case':<28} {'entry':<9} {'file KB':>8} {'exit':>4} {'wall s':>7} {'peak MB':>8}  last line")
    with tempfile.TemporaryDirectory(prefix="ddibench-hostile-") as tmp:
        folder = Path(tmp)
        results_copy = None
        if "publish" in entries:
            results_copy = folder / "results"
            shutil.copytree(REPO / "results", results_copy)
        real = [SMALL_BUNDLE, BIGGEST_BUNDLE] if args.real else []
        for bundle in real:
            for entry in entries:
                code, text, wall, peak = run_measured(entry_args(entry, bundle, results_copy), args.timeout)
                lines = text.strip().splitlines()
                name = f"real {bundle.parent.parent.name}/{bundle.parent.name}"
                print(
                    f"{name:<28} {entry:<9} {bundle.stat().st_size // 1024:>8,} {code:>4} {wall:>7.2f} {peak:>8.0f}"
                    f"   [{len(lines)} lines] {lines[-1][:120] if lines else ''}",
                    flush=True,
                )
        for kind in kinds:
            bundle = CASES[kind][0](folder / f"{kind}.tar.gz")
            for entry in entries:
                code, text, wall, peak = run_measured(entry_args(entry, bundle, results_copy), args.timeout)
                lines = text.strip().splitlines()
                last = lines[-1] if lines else ""
                flag = "" if (wall < 5 and peak < 300 and code != 0) else " !"
                print(
                    f"{kind:<28} {entry:<9} {bundle.stat().st_size // 1024:>8,} {code:>4} {wall:>7.2f} {peak:>8.0f}"
                    f"{flag:<2} [{len(lines)} lines] {last[:120]}",
                    flush=True,
                )
            bundle.unlink()


if __name__ == "__main__":
    main()
