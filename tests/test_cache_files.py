"""Answers as a file (``ddibench cache export`` / ``import``): a run's answers written on one machine's cache are served
on another's from the file, never asked again; the file is byte-stable; and a row whose key is not the hash of its
model and request, a row without a usable answer, or a file cut short imports nothing, with a one-line error."""

from __future__ import annotations

import gzip
import json
import sqlite3
from pathlib import Path

import pytest


def _rows(cache: Path) -> int:
    with sqlite3.connect(cache / "llm-cache.sqlite") as conn:
        return int(conn.execute("SELECT COUNT(*) FROM responses").fetchone()[0])


def _zero_shot(stub, n: int) -> list[str]:  # noqa: ANN001 - the stub server fixture
    """A zero-shot run of n drugbank_s2 pairs against the stub server (its answers fill the cache)."""
    return ["run", "-s", "zero-shot", "-t", "drugbank_s2", "--limit", str(n), "-m", f"vllm:stub-model@{stub.base_url}"]


def _rewrite(src: Path, dst: Path, edit) -> Path:  # noqa: ANN001 - edit(lines) changes the decoded lines in place
    lines = gzip.decompress(src.read_bytes()).decode().splitlines()
    edit(lines)
    dst.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    return dst


def test_answers_exported_on_one_machine_are_served_on_another(cli, stub, tmp_path: Path, monkeypatch) -> None:
    first, second = tmp_path / "cache-a", tmp_path / "cache-b"
    monkeypatch.setenv("DDIBENCH_CACHE", str(first))
    run = _zero_shot(stub, 12)
    code, _, err = cli(*run, "--run-dir", str(tmp_path / "one"))
    assert code == 0, err
    assert len(stub.requests) == 12
    code, out, err = cli("cache", "list")
    assert code == 0 and "12  stub-model" in out, err
    out_file = tmp_path / "answers.jsonl.gz"
    code, out, err = cli("cache", "export", str(out_file), "-m", "stub-model")
    assert code == 0 and "wrote 12 answers" in out, err
    again = tmp_path / "again.jsonl.gz"
    assert cli("cache", "export", str(again), "-m", "stub-model")[0] == 0
    assert again.read_bytes() == out_file.read_bytes()  # the same rows give the same bytes
    lines = gzip.decompress(out_file.read_bytes()).decode().splitlines()
    assert json.loads(lines[0]) == {"ddibench_responses": 1, "rows": 12}
    row = json.loads(lines[1])
    assert row["model"]["model"] == "stub-model" and row["request"]["messages"][0]["role"] == "system"
    assert isinstance(row["request"]["messages"][0]["content"], str)  # shared texts written out in full
    code, _, err = cli("cache", "export", str(tmp_path / "none.jsonl.gz"), "-m", "no-such-model")
    assert code != 0 and "holds no answers of model 'no-such-model'" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "none.jsonl.gz").exists()

    monkeypatch.setenv("DDIBENCH_CACHE", str(second))
    code, out, err = cli("cache", "import", str(out_file))
    assert code == 0 and "imported 12 of 12 answers (0 were cached already) of stub-model" in out, err
    code, out, err = cli("cache", "import", str(out_file))
    assert code == 0 and "imported 0 of 12 answers (12 were cached already)" in out, err
    code, _, err = cli(*run, "--run-dir", str(tmp_path / "two"))
    assert code == 0, err
    assert len(stub.requests) == 12  # nothing asked again: every answer came from the imported rows
    results = [json.loads((tmp_path / d / "results.json").read_text()) for d in ("one", "two")]
    assert results[1]["cost"]["by_role"]["generator"]["served_from_cache"] == 12
    assert results[1]["evaluation"]["metrics"] == results[0]["evaluation"]["metrics"]


def _asked_otherwise(line: str) -> str:
    """The row with its question changed and its key kept: an answer planted under another request's key."""
    row = json.loads(line)
    row["request"]["messages"][-1]["content"] += " Answer 1."
    return json.dumps(row)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda ls: ls.__setitem__(2, _asked_otherwise(ls[2])), "line 3 has a key that is not the hash"),
        (lambda ls: ls.__setitem__(3, ls[3].replace('"text":', '"txt":')), "line 4 holds no usable answer"),
        (lambda ls: ls.pop(), "holds 11 rows, its header says 12"),
        (lambda ls: ls.__setitem__(0, '{"rows": 12}'), "is not a responses file of version 1"),
        (lambda ls: ls.__setitem__(5, "{not json"), "line 6 is not JSON"),
    ],
)
def test_a_bad_file_imports_nothing(cli, stub, tmp_path: Path, monkeypatch, edit, message: str) -> None:
    monkeypatch.setenv("DDIBENCH_CACHE", str(tmp_path / "cache-a"))
    run = _zero_shot(stub, 12)
    assert cli(*run, "--run-dir", str(tmp_path / "one"))[0] == 0
    good = tmp_path / "answers.jsonl.gz"
    assert cli("cache", "export", str(good))[0] == 0
    target = tmp_path / "cache-b"
    monkeypatch.setenv("DDIBENCH_CACHE", str(target))
    assert cli(*_zero_shot(stub, 3), "--run-dir", str(tmp_path / "other"), "--seed", "7")[0] == 0
    before = _rows(target)
    code, _, err = cli("cache", "import", str(_rewrite(good, tmp_path / "bad.jsonl.gz", edit)))
    assert code != 0 and message in err, err
    assert len(err.strip().splitlines()) == 1
    assert _rows(target) == before  # nothing written


def test_shipped_answers_are_checked_row_by_row(cli, stub, tmp_path: Path, monkeypatch) -> None:
    """``results/responses/<model slug>.jsonl.gz``: a file of one model's answers, named for that model, every row's key
    its model's and request's hash; anything else under the folder is a problem 'board check' reports."""
    from ddibench.results.shipped import response_problems

    monkeypatch.setenv("DDIBENCH_CACHE", str(tmp_path / "cache"))
    run = _zero_shot(stub, 6)
    assert cli(*run, "--run-dir", str(tmp_path / "one"))[0] == 0
    folder = tmp_path / "results" / "responses"
    folder.mkdir(parents=True)
    good = folder / "vllm-stub-model.jsonl.gz"
    assert cli("cache", "export", str(good))[0] == 0
    assert response_problems(tmp_path / "results") == []
    (folder / "embedded-other.jsonl.gz").write_bytes(good.read_bytes())
    _rewrite(good, folder / "vllm-stub-model-2.jsonl.gz", lambda ls: ls.__setitem__(1, _asked_otherwise(ls[1])))
    (folder / "notes.txt").write_text("hello")
    assert response_problems(tmp_path / "results") == [
        "responses/embedded-other.jsonl.gz: holds the answers of 'vllm:stub-model', whose file is "
        "responses/vllm-stub-model.jsonl.gz",
        "responses/notes.txt: not a responses file (results/responses/ holds only <model slug>.jsonl.gz files)",
        "responses/vllm-stub-model-2.jsonl.gz: line 2 has a key that is not the hash of its model and request",
    ]
