"""Typed, versioned records: what older versions wrote still reads, and bad records are one-line errors.

* a journal line of prediction schema 1 (before ``scores``) loads;
* a ``results.json`` of schema 1 (before metric declarations) reads, reports and verifies;
* a results store written before the metric declarations is upgraded in place (the board's reader refuses it
  with the command that does);
* a malformed ``run.json`` / ``results.json`` is a :class:`RunDirError` naming the file, not a KeyError;
* a system card written before cards recorded the run's variant and constant-answer flag reads with both as its
  system declared them then, the same wherever it is read.
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from ddibench.errors import RunDirError
from ddibench.runner.journal import Journal
from ddibench.runner.records import Results, read_identity, read_results
from ddibench.schema import PREDICTION_SCHEMA_VERSION

TINY = ["-C", "max_epochs=1", "-C", "max_train=1500", "-C", "hidden=[32]", "-C", "patience=1"]


def test_a_version_1_journal_line_still_loads(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    v1 = {
        "v": 1,
        "t": 0.0,
        "prediction": {
            "sample_id": "a",
            "label": 3,
            "ranked": None,
            "text": None,
            "rationale": None,
            "valid": True,
            "error": None,
            "trace": {},
        },
    }
    path.write_text(json.dumps(v1) + "\n")
    journal = Journal(path)
    loaded = journal.load()
    assert loaded["a"].label == 3 and loaded["a"].scores is None
    from ddibench.schema import Prediction

    journal.append([Prediction(sample_id="b", scores={"0": 0.2, "1": 0.8})])
    journal.close()
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert [x["v"] for x in lines] == [1, PREDICTION_SCHEMA_VERSION] and Journal(path).load()["b"].scores == {
        "0": 0.2,
        "1": 0.8,
    }
    path.write_text(json.dumps({**v1, "v": 99}) + "\n")
    with pytest.raises(RunDirError, match="schema version 99"):
        Journal(path).load()


def _as_version_1(results: dict) -> dict:
    """A results.json as ddibench wrote it before the typed records (schema 1)."""
    old = json.loads(json.dumps(results))
    old["schema"] = 1
    old["evaluation"].pop("metric_specs")
    old["evaluation"].pop("ceilings")
    old["manifest"].pop("schema")
    old["manifest"]["scoring"].pop("options", None)
    return old


@pytest.fixture(scope="module")
def mlp_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from ddibench.cli import main

    run_dir = tmp_path_factory.mktemp("records") / "mlp"
    try:
        main(["run", "-s", "mlp", "-t", "drugbank_s2", *TINY, "--run-dir", str(run_dir)])
    except SystemExit as exc:
        assert not exc.code
    return run_dir


def test_results_of_schema_1_read_report_and_verify(cli, mlp_run: Path, tmp_path: Path) -> None:
    from ddibench.submission import verify

    current = json.loads((mlp_run / "results.json").read_text())
    old_dir = tmp_path / "old"
    old_dir.mkdir()
    for name in ("run.json", "journal.jsonl", "sessions.jsonl"):
        (old_dir / name).write_bytes((mlp_run / name).read_bytes())
    (old_dir / "results.json").write_text(json.dumps(_as_version_1(current)))
    upgraded = read_results(old_dir / "results.json")
    assert [m.name for m in upgraded.evaluation.metric_specs] == ["accuracy", "macro_f1", "kappa"]
    assert upgraded.evaluation.metrics["macro_f1"].value == current["evaluation"]["metrics"]["macro_f1"]["value"]
    code, out, err = cli("report", str(old_dir))
    assert code == 0 and "macro-F1 (%) *" in out, err
    code, _, err = cli("submit", str(old_dir), "--out", str(tmp_path / "old.tar.gz"))
    assert code == 0, err
    verdict = verify(tmp_path / "old.tar.gz")
    assert verdict.accepted and verdict.tier == "recomputed", verdict.reasons


def test_a_store_written_before_metric_declarations_is_upgraded_in_place(cli, mlp_run: Path, tmp_path: Path) -> None:
    from ddibench.errors import StorageError
    from ddibench.leaderboard.data import cell, runs
    from ddibench.results.store import connect

    code, _, err = cli("submit", str(mlp_run), "--out", str(tmp_path / "b.tar.gz"))
    assert code == 0, err
    store, fresh = tmp_path / "board.duckdb", tmp_path / "fresh.duckdb"
    for path in (store, fresh):
        code, _, err = cli("board", "add", "--store", str(path), str(tmp_path / "b.tar.gz"))
        assert code == 0, err
    conn = connect(store)  # the layout of the builds before the metric declarations
    for column in ("primary_unit", "higher_is_better", "metric_specs", "scoring_variant"):
        conn.execute(f"ALTER TABLE runs DROP COLUMN {column}")
    conn.execute("DROP INDEX samples_run")
    conn.execute("ALTER TABLE samples DROP COLUMN units")
    conn.execute("CREATE INDEX samples_run ON samples (run_id)")
    conn.close()
    with pytest.raises(StorageError, match=r"written by an earlier ddibench \(runs.primary_unit, .*board upgrade"):
        runs(store)  # the board's reader never writes: it names the command that upgrades the store
    code, out, err = cli("board", "upgrade", "--store", str(store))
    assert code == 0 and "upgraded" in out, err
    frame = runs(store)
    assert frame.iloc[0]["primary_unit"] == "fraction" and cell(frame.iloc[0]).endswith("★")
    query = "SELECT sample_id, units FROM samples ORDER BY sample_id"
    with connect(store, read_only=True) as old, connect(fresh, read_only=True) as new:
        assert old.execute(query).fetchall() == new.execute(query).fetchall()  # the unit records a new add writes
    code, _, err = cli("board", "add", "--store", str(store), str(tmp_path / "b.tar.gz"))
    assert code == 0, err
    code, _, err = cli("board", "upgrade", "--store", str(tmp_path / "none.duckdb"))
    assert code != 0 and "no results store at" in err


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("run.json", "", "is not valid JSON"),
        ("run.json", "[1, 2]", "is not a valid RunIdentity record"),
        ("run.json", '{"schema": 1}', "is not a valid RunIdentity record (task: Field required)"),
        ("results.json", '{"schema": 2, "run_id": "x"', "is not valid JSON"),
        ("results.json", '{"schema": 2, "run_id": "x"}', "is not a valid Results record"),
    ],
)
def test_malformed_records_are_one_line_errors(tmp_path: Path, name: str, content: str, message: str) -> None:
    path = tmp_path / name
    path.write_text(content)
    reader = read_identity if name == "run.json" else read_results
    with pytest.raises(RunDirError, match=message.replace("(", r"\(").replace(")", r"\)")) as info:
        reader(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)
    path.write_bytes(b"\xff\xfe")
    with pytest.raises(RunDirError, match="not UTF-8"):
        reader(path)


def test_results_round_trip_exactly(mlp_run: Path) -> None:
    raw = json.loads((mlp_run / "results.json").read_text())
    assert Results.model_validate(raw).dump() == raw


def test_a_bundle_with_a_schema_1_results_member_verifies(mlp_run: Path, tmp_path: Path) -> None:
    from ddibench.submission import _sha, read_bundle, submit, verify

    bundle = submit(mlp_run, tmp_path / "new.tar.gz")
    members = read_bundle(bundle)
    members["results.json"] = json.dumps(_as_version_1(json.loads(members["results.json"]))).encode()
    index = json.loads(members["bundle.json"])
    index["hashes"] = {n: _sha(d) for n, d in members.items() if n != "bundle.json"}
    members["bundle.json"] = json.dumps(index).encode()
    old = tmp_path / "old.tar.gz"
    with tarfile.open(old, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    verdict = verify(old)
    assert verdict.accepted, verdict.reasons


def test_a_card_written_before_it_recorded_its_variant_reads_as_its_system_declared_then() -> None:
    """Most shipped bundles predate the card's variant and constant-answer flag (and are never rewritten): read, each
    card has both as its system, installed here, says for its configuration, from the table of what the systems
    declared then, never from the installed code; a card that records them (a bundle published since) keeps what it
    recorded, and that agrees with the installed system too."""
    from ddibench.registry import get_system_class
    from ddibench.runner.records import SystemCard

    results = Path(__file__).resolve().parents[1] / "results"
    seen = set()
    for entry in json.loads((results / "index.json").read_text())["runs"]:
        with tarfile.open(results / entry["path"]) as bundle:
            raw = json.load(bundle.extractfile("results.json"))["manifest"]["system"]  # type: ignore[arg-type]
        recorded_then = "variant" in raw and "constant_answer" in raw
        assert recorded_then or ("variant" not in raw and "constant_answer" not in raw), entry["path"]
        card = SystemCard.model_validate(raw)
        cls = get_system_class(card.name)
        assert (card.variant, card.constant_answer) == (cls.variant(card.config), cls.constant_answer), entry["path"]
        if not recorded_then:
            seen.add((card.name, bool(card.variant), card.constant_answer))
    assert {("cbr-ddi", True, False), ("gin", True, False), ("majority", False, True)} <= seen  # the table bites
    old = {"name": "majority", "version": "1.0.0", "config_hash": "x"}
    assert SystemCard.model_validate(old).constant_answer
    recorded = SystemCard.model_validate({**old, "variant": "", "constant_answer": False})
    assert not recorded.constant_answer and recorded.dump()["constant_answer"] is False
    cbr = {"name": "cbr-ddi", "version": "1.0.0", "config_hash": "x", "config": {"k_cases": 3}}
    assert SystemCard.model_validate(cbr).variant == "gnn_features=morgan, k_cases=3"  # made before gnn_features


def test_the_board_names_the_model_that_wrote_the_answers_never_one_that_wrote_inputs() -> None:
    """A results row names the model that wrote the answers: the generator's; a run whose only models wrote what the
    system read (CBR-DDI's GNN module alone on the describer's descriptions) or graded the answers (a judge) names
    none, so the board does not rank it as an LLM system; a system without a generator role (CLADD's agents) names
    its first role's model. Read from a shipped CBR-DDI bundle's manifest (generator and describer)."""
    from ddibench.runner.records import Manifest

    results = Path(__file__).resolve().parents[1] / "results"
    entry = next(e for e in json.loads((results / "index.json").read_text())["runs"] if e["system"] == "cbr-ddi")
    with tarfile.open(results / entry["path"]) as bundle:
        raw = json.load(bundle.extractfile("results.json"))["manifest"]  # type: ignore[arg-type]
    manifest = Manifest.model_validate(raw)
    assert set(manifest.models) == {"generator", "describer"}
    reader = manifest.models["generator"].spec
    assert manifest.answer_model == reader == entry["model"]
    describer = manifest.models["describer"]
    gnn_alone = manifest.model_copy(update={"models": {"describer": describer}})
    assert gnn_alone.answer_model == "—"
    judged = manifest.model_copy(update={"models": {"judge": describer, "second_judge": describer}})
    assert judged.answer_model == "—"
    agents = manifest.model_copy(update={"models": {"describer": describer, "predictor": manifest.models["generator"]}})
    assert agents.answer_model == reader
