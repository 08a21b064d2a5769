"""Issue 51: inputs that ended in a traceback, a message blaming ddibench, or an exit 0 after doing nothing useful.
Each now ends with a non-zero exit and one line on stderr naming the problem and the fix."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

LIMIT = 20


def one_line_error(code: int, err: str, *needles: str) -> str:
    """The single error line, after checking the exit, the line count, the absence of a traceback and the needles."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert code not in (0, None), f"exit {code}: {err}"
    assert "Traceback" not in err and len(lines) == 1, f"stderr is not one line:\n{err}"
    line = lines[0]
    assert line.startswith("error: ") and ";" in line, line  # the problem; the fix
    for needle in needles:
        assert needle in line, f"{needle!r} not in: {line}"
    return line


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A scored majority run of 20 samples (no model: about two seconds)."""
    from ddibench.cli import main

    run_dir = tmp_path_factory.mktemp("messages") / "run"
    try:
        main(["run", "-s", "majority", "-t", "drugbank_s1", "--limit", str(LIMIT), "--run-dir", str(run_dir)])
    except SystemExit as exc:
        assert not exc.code
    assert (run_dir / "results.json").exists()
    return run_dir


def _edit_journal(run_dir: Path, label: int, first_only: bool) -> None:
    path = run_dir / "journal.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for record in records[:1] if first_only else records:
        record["prediction"]["label"] = label
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


# 1. submit --compact of a run whose journal was edited after scoring


def test_compact_of_an_edited_journal_names_the_disagreement_and_the_rescore(
    cli, finished_run: Path, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(finished_run, run_dir)
    gold_majority = json.loads((run_dir / "journal.jsonl").read_text().splitlines()[0])["prediction"]["label"]
    _edit_journal(run_dir, (gold_majority + 1) % 86, first_only=False)  # every answer changed: accuracy moves
    code, _, err = cli("submit", "--compact", str(run_dir), "--out", str(tmp_path / "b.tar.gz"))
    line = one_line_error(
        code,
        err,
        f"{run_dir / 'journal.jsonl'} and {run_dir / 'results.json'} disagree",
        "the journal scores accuracy",
        "edited after the run was scored",
        f"run 'ddibench rescore {run_dir}'",
    )
    assert "bug" not in line and not (tmp_path / "b.tar.gz").exists()
    # the fix the message names works: rescored, the compact bundle is packed
    code, _, err = cli("rescore", str(run_dir))
    assert code == 0, err
    code, out, err = cli("submit", "--compact", str(run_dir), "--out", str(tmp_path / "b.tar.gz"))
    assert code == 0 and (tmp_path / "b.tar.gz").exists(), err


def test_compact_of_a_journal_edited_out_of_the_label_space_names_the_sample(
    cli, finished_run: Path, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(finished_run, run_dir)
    first = json.loads((run_dir / "journal.jsonl").read_text().splitlines()[0])["prediction"]["sample_id"]
    _edit_journal(run_dir, 9999, first_only=True)
    code, _, err = cli("submit", "--compact", str(run_dir), "--out", str(tmp_path / "b.tar.gz"))
    line = one_line_error(code, err, "no longer scores as", first, "9999", "ddibench rescore")
    assert "bug" not in line


def test_compact_of_an_untouched_run_still_packs(cli, finished_run: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(finished_run, run_dir)
    code, _, err = cli("submit", "--compact", str(run_dir), "--out", str(tmp_path / "b.tar.gz"))
    assert code == 0 and (tmp_path / "b.tar.gz").exists(), err


# 2. kg paths with a count or a hop limit out of range


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["-k", "-1"], ["-k -1 is out of range", "give -k between 1 and 200"]),
        (["-k", "0"], ["-k 0 is out of range", "give -k between 1 and 200"]),
        (["-k", "201"], ["-k 201 is out of range", "give -k between 1 and 200"]),
        (["--max-hops", "0"], ["--max-hops 0 is out of range", "give --max-hops between 1 and 10"]),
        (["--max-hops", "-3"], ["--max-hops -3 is out of range", "give --max-hops between 1 and 10"]),
        (["--max-hops", "11"], ["--max-hops 11 is out of range", "give --max-hops between 1 and 10"]),
    ],
    ids=["k -1", "k 0", "k 201", "max-hops 0", "max-hops -3", "max-hops 11"],
)
def test_kg_paths_out_of_range_is_one_line(cli, args: list[str], needles: list[str]) -> None:
    code, out, err = cli("kg", "paths", "DB00682", "DB00945", *args)
    one_line_error(code, err, *needles)
    assert "paths in" not in out


def test_kg_paths_at_the_bounds_still_answers(cli) -> None:
    code, out, err = cli("kg", "paths", "DB00682", "DB00945", "-k", "1", "--max-hops", "10")
    assert code == 0, err
    assert " 1. Warfarin " in out and "1 paths in" in out


# 3. report --published with no run to compare


def test_report_published_of_a_directory_without_runs(cli, tmp_path: Path) -> None:
    empty = tmp_path / "runs"
    empty.mkdir()
    code, out, err = cli("report", "--published", str(empty))
    one_line_error(code, err, f"no runs were found under {empty}", "ddibench run", f"--runs-dir {empty}")
    assert "published numbers beside ours" not in out


def test_report_published_of_unfinished_runs(cli, finished_run: Path, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    shutil.copytree(finished_run, runs / "a")
    (runs / "a" / "results.json").unlink()
    code, out, err = cli("report", "--published", str(runs))
    one_line_error(code, err, f"none of the 1 run(s) under {runs} is finished", "same 'ddibench run' command")
    assert "published numbers beside ours" not in out


def test_report_published_of_a_file(cli, tmp_path: Path) -> None:
    afile = tmp_path / "bundle.tar.gz"
    afile.write_bytes(b"not a directory")
    code, _, err = cli("report", "--published", str(afile))
    one_line_error(code, err, "is a file, not a directory of runs", "give a run directory")


def test_report_published_of_a_finished_run_still_shows_the_table(cli, finished_run: Path) -> None:
    code, out, err = cli("report", "--published", str(finished_run.parent))
    assert code == 0 and "published numbers beside ours" in out, err


# 4. a seed of the option order that numpy refuses


@pytest.mark.parametrize(
    ("value", "shown"), [("-1", "-1"), ("true", "true"), ('"abc"', '"abc"'), ("1.5", "1.5"), ("[1]", "[1]")]
)
def test_a_bad_shuffle_seed_is_refused_before_the_run(cli, tmp_path: Path, value: str, shown: str) -> None:
    run_dir = tmp_path / "run"
    code, _, err = cli(
        "run", "-s", "zero-shot", "-t", "drugbank_s1", "--limit", "2", "-C", f"shuffle_options={value}",
        "--run-dir", str(run_dir),
    )  # fmt: skip
    one_line_error(
        code, err, "config 'shuffle_options'", "must be a seed (an integer >= 0) or unset", f"got {shown}",
        "-C shuffle_options=1", "omit it",
    )  # fmt: skip
    assert not run_dir.exists()  # refused where the configuration is read: no model started, nothing written


def test_shuffle_seeds_pydantic_took_before_are_still_taken() -> None:
    from ddibench.errors import ConfigError
    from ddibench.systems.kaping import KAPINGSystem  # a subclass's config inherits the check
    from ddibench.toolkit.label_choice import LabelChoiceConfig, option_order

    for given, seed in ((None, None), (0, 0), (3, 3), (3.0, 3), ("7", 7)):
        assert LabelChoiceConfig(shuffle_options=given).shuffle_options == seed
    assert sorted(option_order(86, 0)) == list(range(86))
    with pytest.raises(ConfigError, match="kaping config 'shuffle_options': must be a seed .* got -1"):
        KAPINGSystem.build({"shuffle_options": -1})
