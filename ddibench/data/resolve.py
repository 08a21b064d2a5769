"""Resolve pinned source files: the local mirror, then the user cache, then a verified download.

* ``$DDIBENCH_MIRROR`` — a read-only directory laid out like raw.githubusercontent.com
  (``<owner>/<repo>/<commit>/<path>``); tests and CI point it at a local mirror.
* the user cache — ``$DDIBENCH_CACHE/files`` (default ``~/.cache/ddibench/files``).
* download — from ``$DDIBENCH_DOWNLOAD_BASE`` (default ``https://raw.githubusercontent.com``).

The sha256 is verified wherever the file comes from. Empty files (unless pinned as empty) and HTML
pages are refused with their own message. Downloads stream into a temporary file beside the target
and are renamed into place only once verified, so an interrupted fetch leaves nothing behind.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from collections.abc import Callable, Iterator, MutableMapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

from ddibench.data.sources import SourceFile
from ddibench.errors import DataError, write_error
from ddibench.hashing import sha256_file
from ddibench.net import HttpError, HttpTooLarge, Response, download

MIRROR_ENV = "DDIBENCH_MIRROR"
CACHE_ENV = "DDIBENCH_CACHE"
DOWNLOAD_BASE_ENV = "DDIBENCH_DOWNLOAD_BASE"
DEFAULT_DOWNLOAD_BASE = "https://raw.githubusercontent.com"

ProgressFn = Callable[[int, int], None]  # (bytes so far, total bytes)

# (path, size, mtime_ns) -> sha256 already verified in this process
_verified: dict[tuple[str, int, int], str] = {}
# set inside local_only(): what is running, which must find its files here and download nothing
_LOCAL_ONLY: ContextVar[str | None] = ContextVar("ddibench_local_only", default=None)


@contextmanager
def local_only(purpose: str) -> Iterator[None]:
    """Within it, :func:`fetch` returns a verified local copy (mirror, cache) and never downloads: a file that is
    not here raises :class:`DataError` naming ``purpose`` (e.g. "listing systems"), so a command that only looks
    at what is here stays offline and fast."""
    token = _LOCAL_ONLY.set(purpose)
    try:
        yield
    finally:
        _LOCAL_ONLY.reset(token)


def mirror_root() -> Path | None:
    """The mirror ($DDIBENCH_MIRROR) as an absolute path: a relative value is taken from the current directory."""
    value = os.environ.get(MIRROR_ENV, "").strip()
    return Path(value).expanduser().absolute() if value else None


def cache_root() -> Path:
    """The user cache as an absolute path: $DDIBENCH_CACHE, else $XDG_CACHE_HOME/ddibench or ~/.cache/ddibench."""
    value = os.environ.get(CACHE_ENV, "").strip()
    if value:
        return Path(value).expanduser().absolute()
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    return ((Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "ddibench").absolute()


# the DDIBENCH_* variables that name a place (the results store and the price list are read by ddibench.results.store)
PATH_ENVS = (MIRROR_ENV, CACHE_ENV, "DDIBENCH_MODELS", "DDIBENCH_BOARD", "DDIBENCH_PRICES")


def absolutize_env(environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Rewrite each relative (or ``~``) path in the :data:`PATH_ENVS` variables as an absolute path, in place
    (``os.environ`` by default), so that subprocesses, Ray workers and lm-eval runs that start in another
    directory find the same places. Returns what was rewritten (name -> absolute path)."""
    env = os.environ if environ is None else environ
    rewritten: dict[str, str] = {}
    for name in PATH_ENVS:
        value = env.get(name, "").strip()
        if value and not Path(value).is_absolute():
            env[name] = rewritten[name] = str(Path(value).expanduser().absolute())
    return rewritten


def cached_path(src: SourceFile) -> Path:
    return cache_root() / "files" / src.relpath


def mirrored_path(src: SourceFile) -> Path | None:
    root = mirror_root()
    return root / src.relpath if root is not None else None


@dataclass(frozen=True, slots=True)
class Verification:
    source: SourceFile
    status: str  # "ok", "missing" or "bad"
    origin: str | None  # "mirror" or "cache"
    path: Path | None
    detail: str = ""


def _looks_like_html(head: bytes) -> bool:
    start = head.lstrip()[:64].lower()
    return start.startswith((b"<!doctype html", b"<html", b"<head", b"<body"))


def _problem(path: Path, src: SourceFile) -> str | None:
    """Why the file at ``path`` is not the pinned file, or None when it is."""
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    if _verified.get(key) == src.sha256:
        return None
    if stat.st_size == 0 and not src.expected_empty:
        return "is empty"
    with open(path, "rb") as fh:
        head = fh.read(512)
    if _looks_like_html(head):
        return "is an HTML page, not the data file"
    digest = sha256_file(path)
    if digest != src.sha256:
        return f"has sha256 {digest[:12]}…, pinned {src.sha256[:12]}… ({stat.st_size} bytes, pinned {src.bytes})"
    _verified[key] = digest
    return None


def verify(src: SourceFile) -> Verification:
    """Check the mirrored and cached copies of ``src`` without downloading anything."""
    for origin, path in (("mirror", mirrored_path(src)), ("cache", cached_path(src))):
        if path is not None and path.is_file():
            problem = _problem(path, src)
            if problem:
                return Verification(src, "bad", origin, path, f"{origin} copy {problem}")
            return Verification(src, "ok", origin, path)
    return Verification(src, "missing", None, None)


def locate(src: SourceFile) -> Path | None:
    """The verified local copy of ``src`` (mirror first, then cache), or None if there is none.

    A local copy that exists but does not match its pin is an error, never silently skipped.
    """
    result = verify(src)
    if result.status == "bad":
        where = "mirror" if result.origin == "mirror" else "cache"
        fix = (
            f"re-sync the mirror at ${MIRROR_ENV}, or unset {MIRROR_ENV} to download"
            if where == "mirror"
            else "run 'ddibench data fetch --refresh' to download it again"
        )
        raise DataError(f"{src.relpath}: {result.detail}", fix)
    return result.path


def fetch(src: SourceFile, *, progress: ProgressFn | None = None, refresh: bool = False) -> Path:
    """Return a verified local path for ``src``, downloading it into the cache if needed."""
    if refresh:
        cached = cached_path(src)
        cached.unlink(missing_ok=True)
        mirrored = mirrored_path(src)
        if mirrored is not None and mirrored.is_file():
            return locate(src) or mirrored
    else:
        found = locate(src)
        if found is not None:
            return found
    purpose = _LOCAL_ONLY.get()
    if purpose is not None:
        raise DataError(f"{src.relpath} is not here, and {purpose} downloads nothing", "'ddibench data fetch' gets it")
    return _download(src, cached_path(src), progress)


def _download(src: SourceFile, dest: Path, progress: ProgressFn | None) -> Path:
    base = os.environ.get(DOWNLOAD_BASE_ENV, "").strip().rstrip("/") or DEFAULT_DOWNLOAD_BASE
    url = base + src.url.removeprefix(DEFAULT_DOWNLOAD_BASE)
    hint = f"check network access to {base}, or set {MIRROR_ENV} to a local mirror of the pinned files"
    mirror = mirrored_path(src)
    if mirror is not None:
        hint = f"it is not in the mirror either ({mirror}); " + hint
    return download_verified(
        url, dest, src.sha256, src.bytes, progress=progress, hint=hint, allow_empty=src.expected_empty
    )


def _check_download(
    url: str,
    response: Response,
    head: bytes,
    received: int,
    got_sha256: str,
    pinned: tuple[int, str],
    allow_empty: bool,
    hint: str,
) -> None:
    """Refuses a download that is not the pinned file: an error status, an empty body, an HTML page, another
    size or another hash, each with its own message."""
    size, sha256 = pinned
    if not 200 <= response.status < 300:
        raise DataError(f"cannot download {url}: HTTP {response.status}", hint)
    if received == 0 and not allow_empty:
        raise DataError(f"download of {url} returned an empty file", hint)
    if "text/html" in response.headers.get("content-type", "").lower() or _looks_like_html(head):
        raise DataError(f"download of {url} returned an HTML page, not the data file", hint)
    if received != size:
        raise DataError(f"download of {url} was cut short or is another file: {received} of {size} bytes", hint)
    if got_sha256 != sha256:
        raise DataError(
            f"download of {url} has sha256 {got_sha256[:12]}…, pinned {sha256[:12]}…",
            "the upstream file changed or the download was tampered with; report it",
        )


class _WriteFailed(Exception):
    """Writing a downloaded block failed (a full disk): the file's error, not the server's."""

    def __init__(self, error: OSError) -> None:
        super().__init__(str(error))
        self.error = error


def download_verified(
    url: str,
    dest: Path,
    sha256: str,
    size: int,
    *,
    progress: ProgressFn | None = None,
    hint: str = "check network access",
    allow_empty: bool = False,
) -> Path:
    """Download ``url`` to ``dest``, verified against its pinned ``sha256`` and ``size``.

    The body streams into a temporary file beside ``dest`` and is renamed into place only once verified,
    so an interrupted or refused download leaves nothing behind. Empty bodies (unless ``allow_empty``),
    HTML pages, short bodies and other hashes are refused with their own message (a ``DataError``).
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.part-{os.getpid()}-{secrets.token_hex(4)}")
    digest = hashlib.sha256()
    received = 0
    head = b""
    try:
        with open(tmp, "wb") as out:

            def take(block: bytes) -> None:
                nonlocal received, head
                if len(head) < 512:
                    head += block[: 512 - len(head)]
                try:
                    out.write(block)
                except OSError as exc:
                    raise _WriteFailed(exc) from None
                digest.update(block)
                received += len(block)
                if progress is not None:
                    progress(received, size)

            # at most the pinned size is read (a longer body is refused), within a deadline that scales with it
            response: Response = download(url, take, size=size, headers={"User-Agent": "ddibench (+data fetch)"})
            out.flush()
            os.fsync(out.fileno())
        _check_download(url, response, head, received, digest.hexdigest(), (size, sha256), allow_empty, hint)
        os.replace(tmp, dest)
        _verified[(str(dest), dest.stat().st_size, dest.stat().st_mtime_ns)] = sha256
        return dest
    except HttpTooLarge:
        raise DataError(f"download of {url} is larger than its pinned {size} bytes: another file", hint) from None
    except HttpError as exc:  # refused, a redirect elsewhere, past its deadline, larger than pinned, not HTTP
        raise DataError(f"cannot download: {exc.problem}", hint) from None
    except _WriteFailed as exc:
        raise write_error(exc.error, tmp) from None
    except OSError as exc:  # the temporary file cannot be made or renamed (a full disk, a read-only place)
        raise write_error(exc, dest) from None
    finally:
        tmp.unlink(missing_ok=True)
