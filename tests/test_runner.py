"""Runs against a real OpenAI-compatible server on loopback (the stub): journal, resume, cache,
manifests, refusals. The embedded model's end-to-end runs are in test_embedded.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import kill_run_after

from ddibench.llm.stub import StubConfig, running_stub
from ddibench.registry import get_task
from ddibench.runner.journal import Journal
from ddibench.runner.selection import stratified_subset


def journal_ids(run_dir: Path) -> list[str]:
    return [
        json.loads(line)["prediction"]["sample_id"] for line in (run_dir / "journal.jsonl").read_text().splitlines()
    ]


def only_run_dir(root: Path) -> Path:
    dirs = [p.parent for p in root.rglob("run.json")]
    assert len(dirs) == 1, dirs
    return dirs[0]


def test_zero_shot_run_resume_cache_and_manifest(cli, stub, tmp_path: Path, fresh_cache: Path) -> None:
    model = f"vllm:stub-model@{stub.base_url}"
    args = [
        "run",
        "--system",
        "zero-shot",
        "--task",
        "drugbank_s2",
        "--limit",
        "40",
        "--model",
        model,
        "--runs-dir",
        str(tmp_path / "runs"),
        "--concurrency",
        "16",
    ]
    code, out, err = cli(*args)
    assert code == 0, err
    assert "macro-F1" in out and "95% CI" in out and "not submittable: --limit was used" in out
    run_dir = only_run_dir(tmp_path / "runs")
    assert run_dir.parent.name == "zero-shot" and run_dir.parent.parent.name == "drugbank_s2"
    ids = journal_ids(run_dir)
    assert len(ids) == len(set(ids)) == 40
    assert len(stub.requests) == 40

    results = json.loads((run_dir / "results.json").read_text())
    ev, man = results["evaluation"], results["manifest"]
    assert ev["n"] == 40 and set(ev["metrics"]) == {"accuracy", "macro_f1", "kappa"}
    for m in ev["metrics"].values():
        assert m["ci_low"] <= m["value"] <= m["ci_high"]
    assert man["submittable"] is False and man["limit"] == 40
    assert man["task"]["name"] == "drugbank_s2" and len(man["task"]["data_sha256"]) == 64
    assert man["system"]["name"] == "zero-shot" and man["system"]["config"]["temperature"] == 0.0
    assert man["models"]["generator"]["identity"] == {
        "provider": "vllm",
        "model": "stub-model",
        "base_url": stub.base_url,
    }
    assert man["profile"]["declared"]["name"] == "cpu" and man["profile"]["detected"]["cpu_count"] >= 1
    assert {"ddibench_version", "git_commit", "git_dirty"} <= set(man)
    assert man["packages"]["numpy"] and man["packages"]["openai"]
    assert results["cost"]["per_item"]["generator"]["calls"] == 1.0
    # the trace keeps the raw answer and the exchange; the shared system prompt is stored once
    first = json.loads((run_dir / "journal.jsonl").read_text().splitlines()[0])["prediction"]
    call = first["trace"]["llm"][0]
    assert call["response"] == first["text"] and call["messages"][1]["role"] == "user"
    assert (run_dir / "texts" / f"{call['messages'][0]['sha256']}.txt").exists()

    # the same command again: nothing predicted, same numbers
    code, out, _ = cli(*args)
    assert code == 0 and "nothing was predicted again" in out
    assert len(stub.requests) == 40
    assert json.loads((run_dir / "results.json").read_text())["evaluation"] == ev

    # another run directory, same configuration: every answer comes from the response cache
    code, out, _ = cli(*args[:-4], "--run-dir", str(tmp_path / "again"))
    assert code == 0
    assert len(stub.requests) == 40
    again = json.loads((tmp_path / "again" / "results.json").read_text())
    assert again["evaluation"]["metrics"] == ev["metrics"]
    assert again["cost"]["by_role"]["generator"]["served_from_cache"] == 40
    session = json.loads((tmp_path / "again" / "sessions.jsonl").read_text().splitlines()[-1])
    assert session["llm_usage"]["generator"]["calls"] == 0 and session["llm_usage"]["generator"]["cache_hits"] == 40


def test_run_dir_of_another_run_is_refused_untouched(cli, stub, tmp_path: Path) -> None:
    model = f"vllm:stub-model@{stub.base_url}"
    run_dir = tmp_path / "mine"
    code, _, err = cli(
        "run", "-s", "zero-shot", "-t", "drugbank_s2", "--limit", "5", "-m", model, "--run-dir", str(run_dir)
    )
    assert code == 0, err
    before = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}
    for other in (
        ["-t", "drugbank_s1"],
        ["-t", "drugbank_s2", "--seed", "1"],
        ["-t", "drugbank_s2", "-C", "temperature=0.5"],
    ):
        code, out, err = cli("run", "-s", "zero-shot", "--limit", "5", "-m", model, "--run-dir", str(run_dir), *other)
        assert code == 2
        assert "belongs to another run" in err and "use another --run-dir" in err
        assert len(err.strip().splitlines()) == 1
    after = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}
    assert after == before


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--limit", "0"], "--limit must be a positive number of samples, got 0"),
        (["--limit", "-3"], "--limit must be a positive number of samples, got -3"),
        (["--task", "drugbank_s3"], "unknown task 'drugbank_s3'; did you mean"),
        (["--system", "zero_shot"], "unknown system 'zero_shot'; did you mean 'zero-shot'?"),
        (["--profile", "a100"], "unknown profile 'a100'; did you mean 'a100-80g'"),
        (["-C", "temprature=0.3"], "unknown zero-shot config key 'temprature'; did you mean 'temperature'?"),
        (["-C", "max_tokens=many"], "zero-shot config 'max_tokens'"),
        (["--model", "vllm:m@http://127.0.0.1:9/v1"], "cannot reach model endpoint http://127.0.0.1:9/v1"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(cli, tmp_path: Path, args: list[str], message: str) -> None:
    base = {"--task": "drugbank_s2", "--system": "zero-shot", "--model": "vllm:m@http://127.0.0.1:9/v1"}
    for i in range(0, len(args), 2):
        base.pop(args[i], None)
    flat = [x for kv in base.items() for x in kv]
    code, out, err = cli("run", *flat, *args, "--runs-dir", str(tmp_path / "runs"))
    assert code != 0
    assert message in err, err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()


def test_unparsable_and_empty_answers_count_as_wrong(cli, tmp_path: Path) -> None:
    for reply, reason in (("I am not sure about this pair.", "no option number"), ("", "empty answer")):
        with running_stub(StubConfig(reply=reply)) as stub:
            run_dir = tmp_path / f"run-{len(reply)}"
            code, out, err = cli(
                "run",
                "-s",
                "zero-shot",
                "-t",
                "drugbank_s2",
                "--limit",
                "6",
                "-m",
                f"vllm:stub-model@{stub.base_url}",
                "--run-dir",
                str(run_dir),
                "--no-cache",
            )
            assert code == 0, err
            results = json.loads((run_dir / "results.json").read_text())
            assert results["evaluation"]["n_invalid"] == 6
            assert results["evaluation"]["metrics"]["accuracy"]["value"] == 0.0
            assert reason in results["evaluation"]["invalid_examples"][0]["error"]
            assert "invalid (unparsable) predictions: 6 of 6" in out


def test_failing_endpoint_aborts_and_resumes(cli, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with running_stub(StubConfig(script=[500] * 5, retry_after=None)) as stub:
        model = f"vllm:stub-model@{stub.base_url}"
        args = [
            "run",
            "-s",
            "zero-shot",
            "-t",
            "drugbank_s2",
            "--limit",
            "12",
            "-m",
            model,
            "--run-dir",
            str(run_dir),
            "--max-retries",
            "0",
            "--concurrency",
            "1",
        ]
        code, _, err = cli(*args)
        assert code == 3
        assert "stopped after 5 consecutive failed calls" in err and "re-run the same command to resume" in err
        assert not (run_dir / "results.json").exists()
        assert journal_ids(run_dir) == [] if (run_dir / "journal.jsonl").exists() else True
        code, out, err = cli(*args)  # the server is healthy now
        assert code == 0, err
    assert len(set(journal_ids(run_dir))) == 12


def test_sigkill_halfway_then_resume_keeps_every_sample_exactly_once(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with running_stub(StubConfig(delay=0.02)) as stub:
        cmd = [
            sys.executable,
            "-m",
            "ddibench",
            "run",
            "-s",
            "zero-shot",
            "-t",
            "drugbank_s1",
            "--limit",
            "300",
            "-m",
            f"vllm:stub-model@{stub.base_url}",
            "--run-dir",
            str(run_dir),
            "--concurrency",
            "4",
        ]
        env = {**os.environ, "COLUMNS": "200"}
        kill_run_after(cmd, run_dir / "journal.jsonl", 100, timeout=120)
        partial = journal_ids(run_dir)
        assert 100 <= len(partial) < 300
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        assert "resumed:" in done.stdout
    ids = journal_ids(run_dir)
    assert len(ids) == len(set(ids)) == 300
    assert ids[: len(partial)] == partial
    results = json.loads((run_dir / "results.json").read_text())
    assert results["evaluation"]["n"] == 300
    # the killed session reported no counters: the run's counts cover the resumed session and say so
    counters = results["system_info"]["counters"]
    assert counters.get("answered", 0) + counters.get("invalid", 0) == 300 - len(partial)
    assert results["system_info"]["counters_cover"].startswith("1 of 2 sessions")


def test_a_resumed_runs_counters_are_summed_over_its_sessions() -> None:
    from ddibench.runner.manifest import _run_system_info
    from ddibench.runner.records import SessionRecord

    def session(state: str, info: dict) -> SessionRecord:
        return SessionRecord(started="2026-01-01T00:00:00+00:00", state=state, system_info=info)

    interrupted = session("interrupted", {"counters": {"answered": 22, "sql_rejected": 6}, "lambda": 0.5})
    finished = session("finished", {"counters": {"answered": 28, "sql_non_empty": 4}, "lambda": 0.25})
    rescored = session("finished", {"counters": {}, "lambda": 0.25})  # a re-run that predicted nothing
    info = _run_system_info([interrupted, finished, rescored])
    assert info == {"counters": {"answered": 50, "sql_rejected": 6, "sql_non_empty": 4}, "lambda": 0.25}
    killed = session("killed", {}).model_copy(update={"predicted": 20})
    info = _run_system_info([killed, finished])
    assert info["counters"] == {"answered": 28, "sql_non_empty": 4} and info["counters_cover"].startswith("1 of 2")
    assert "counters_cover" not in _run_system_info([session("killed", {}), finished])  # killed before it predicted
    assert _run_system_info([session("finished", {"gnn": {"epochs": 3}})]) == {"gnn": {"epochs": 3}}


def test_torn_journal_line_is_cut_and_rerun(tmp_path: Path) -> None:
    from ddibench.schema import Prediction

    journal = Journal(tmp_path / "journal.jsonl")
    journal.append([Prediction(sample_id="a", label=1), Prediction(sample_id="b", label=2)])
    journal.close()
    with open(tmp_path / "journal.jsonl", "a") as fh:
        fh.write('{"v":1,"t":0,"prediction":{"sample_id":"c","lab')  # killed mid-write
    assert set(Journal(tmp_path / "journal.jsonl").load()) == {"a", "b"}
    assert (tmp_path / "journal.jsonl").read_text().endswith("\n")
    with open(tmp_path / "journal.jsonl", "a") as fh:
        fh.write("not json\n")
    with pytest.raises(Exception, match="not a readable journal record"):
        Journal(tmp_path / "journal.jsonl").load()


def test_limit_is_stratified_and_seeded() -> None:
    samples = get_task("drugbank_s1").load().split("test")
    a = stratified_subset(samples, 500, seed=0)
    assert [s.id for s in a] == [s.id for s in stratified_subset(samples, 500, seed=0)]
    assert [s.id for s in a] != [s.id for s in stratified_subset(samples, 500, seed=1)]
    assert len(a) == 500 and len({s.id for s in a}) == 500
    from collections import Counter

    full, sub = Counter(s.target for s in samples), Counter(s.target for s in a)
    for label, count in full.most_common(5):
        assert abs(sub[label] - 500 * count / len(samples)) <= 1


def test_report_shows_runs_and_incomplete_runs(cli, stub, tmp_path: Path) -> None:
    root = tmp_path / "runs"
    code, _, err = cli(
        "run",
        "-s",
        "zero-shot",
        "-t",
        "drugbank_s2",
        "--limit",
        "4",
        "-m",
        f"vllm:stub-model@{stub.base_url}",
        "--runs-dir",
        str(root),
    )
    assert code == 0, err
    run_dir = only_run_dir(root)
    code, out, _ = cli("report", str(run_dir))
    assert code == 0 and "zero-shot on drugbank_s2" in out and "macro-F1" in out
    code, out, _ = cli("report", str(root))
    assert code == 0 and "drugbank_s2" in out and "complete" in out
    code, out, _ = cli("report", str(run_dir), "--json")
    assert code == 0 and json.loads(out)["evaluation"]["n"] == 4
    (run_dir / "results.json").unlink()
    code, out, _ = cli("report", str(run_dir))
    assert code == 1 and "incomplete run" in out and "4 of 4 samples journalled" in out
    code, _, err = cli("report", str(tmp_path / "nothing"))
    assert code == 2 and "does not exist" in err


def test_corrupt_mirror_stops_the_run_with_one_line(cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    from ddibench.data.resolve import mirror_root
    from ddibench.tasks import drugbank

    task = get_task("drugbank_s2")
    mirror = tmp_path / "mirror"
    for src in task.sources:
        target = mirror / src.relpath
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(mirror_root() / src.relpath, target)  # type: ignore[operator]
    bad = task.split_source("test")
    (mirror / bad.relpath).write_text("0 1 2\n" * 10)
    monkeypatch.setenv("DDIBENCH_MIRROR", str(mirror))
    monkeypatch.setitem(task.__dict__, "_loaded", None)  # force a reload from the (corrupt) mirror
    drugbank.read_triples.cache_clear()
    try:
        code, _, err = cli(
            "run", "-s", "zero-shot", "-t", "drugbank_s2", "--limit", "5", "--runs-dir", str(tmp_path / "runs")
        )
        assert code == 2
        assert "test_S2.txt" in err and "sha256" in err and "re-sync the mirror" in err
        assert len(err.strip().splitlines()) == 1
        assert not (tmp_path / "runs").exists()
        code, out, err = cli("data", "verify", "--task", "drugbank_s2")
        assert code == 2 and "BAD" in out
    finally:
        drugbank.read_triples.cache_clear()


def test_finished_run_asked_again_reuses_its_results_unless_an_input_changed(cli, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    args = ["run", "-s", "majority", "-t", "drugbank_s2", "--limit", "300", "--run-dir", str(run_dir)]
    code, out, err = cli(*args)
    assert code == 0, err
    first = (run_dir / "results.json").read_bytes()
    assert json.loads(first)["scored_from"]

    code, out, _ = cli(*args)  # nothing changed: the results are reused as they are, not even rewritten
    assert code == 0 and "nothing was predicted again" in out and "accuracy" in out
    assert (run_dir / "results.json").read_bytes() == first

    code, _, _ = cli(*args, "--bootstrap", "200")  # another bootstrap: scored again
    assert code == 0
    assert json.loads((run_dir / "results.json").read_text())["evaluation"]["bootstrap"]["replicates"] == 200
    code, _, _ = cli(*args)  # and back: the first numbers again, from a new scoring
    again = json.loads((run_dir / "results.json").read_text())
    assert (
        again["evaluation"] == json.loads(first)["evaluation"]
        and again["manifest"]["created"] != json.loads(first)["manifest"]["created"]
    )

    journal = run_dir / "journal.jsonl"  # a changed journal (every answer moved to the next label) is scored again
    records = [json.loads(line) for line in journal.read_text().splitlines()]
    for record in records:
        record["prediction"]["label"] = (record["prediction"]["label"] + 1) % 86
    journal.write_text("".join(json.dumps(r) + "\n" for r in records))
    code, _, err = cli(*args)
    assert code == 0, err
    changed = json.loads((run_dir / "results.json").read_text())
    assert changed["scored_from"] != again["scored_from"]
    assert changed["evaluation"]["metrics"]["accuracy"]["value"] != again["evaluation"]["metrics"]["accuracy"]["value"]


def test_rescore_needs_only_the_recorded_system(cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A scored run scores again where its system is not installed (as verify recomputes a bundle): the card,
    its deviations and provenance stay the recorded ones, the numbers the same, the intervals the new ones."""
    import ddibench.registry as registry

    run_dir = tmp_path / "run"
    code, _, err = cli(
        "run", "-s", "majority", "-t", "drugbank_s1", "--limit", "40", "--bootstrap", "200", "--run-dir", str(run_dir)
    )
    assert code == 0, err
    before = json.loads((run_dir / "results.json").read_text())
    installed = registry._system_entry_points()
    monkeypatch.setattr(
        registry, "_system_entry_points", lambda: {k: v for k, v in installed.items() if k != "majority"}
    )
    code, _, err = cli(
        "run", "-s", "majority", "-t", "drugbank_s1", "--limit", "40", "--run-dir", str(tmp_path / "other")
    )
    assert code != 0 and "majority" in err  # really not installed now
    code, _, err = cli("rescore", str(run_dir), "--bootstrap", "300")
    assert code == 0, err
    after = json.loads((run_dir / "results.json").read_text())
    assert after["run_id"] == before["run_id"] and after["manifest"]["system"] == before["manifest"]["system"]
    assert after["manifest"]["system"]["provenance"]  # the code that answered, not this checkout's
    assert (
        after["evaluation"]["bootstrap"]["replicates"] == 300 and before["evaluation"]["bootstrap"]["replicates"] == 200
    )
    for name, metric in before["evaluation"]["metrics"].items():
        assert after["evaluation"]["metrics"][name]["value"] == metric["value"]


def test_long_texts_are_kept_once_by_hash(tmp_path: Path) -> None:
    """A system prompt shared by every sample is written once as texts/<sha256>.txt, by the run's context and by
    the model pool alike (one helper), and traces refer to it by that hash."""
    from ddibench.hashing import keep_text, sha256_text

    digest = keep_text(tmp_path, "You classify drug pairs.")
    path = tmp_path / "texts" / f"{digest}.txt"
    assert digest == sha256_text("You classify drug pairs.") and path.read_text() == "You classify drug pairs."
    before = path.stat().st_mtime_ns
    assert keep_text(tmp_path, "You classify drug pairs.") == digest and path.stat().st_mtime_ns == before
    assert [p.name for p in (tmp_path / "texts").iterdir()] == [path.name]  # no temporary file left behind


def test_writers_keeping_the_same_new_text_at_once_all_succeed(tmp_path: Path) -> None:
    """Ray workers and threads of one run keep the same system prompt at the same moment: none may fail because
    another renamed a shared temporary file away first (CI saw exactly that in a two-worker Ray run)."""
    import threading

    from ddibench.hashing import keep_text, sha256_text

    texts = [f"prompt {i} " * 2000 for i in range(60)]
    start = threading.Barrier(6)
    errors: list[BaseException] = []

    def writer() -> None:
        for text in texts:
            try:
                start.wait()
                keep_text(tmp_path, text)
            except BaseException as exc:  # noqa: BLE001 - the test reports whatever any writer raised
                errors.append(exc)

    threads = [threading.Thread(target=writer) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    kept = sorted(p.name for p in (tmp_path / "texts").iterdir())
    assert kept == sorted(f"{sha256_text(t)}.txt" for t in texts)  # every text once, no temporary file left
    assert all((tmp_path / "texts" / f"{sha256_text(t)}.txt").read_text() == t for t in texts)
