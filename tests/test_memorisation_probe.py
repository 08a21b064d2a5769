"""The memorisation probe (``ddibench probe memorisation``): real DrugBank pairs, a real OpenAI-compatible
stub server, the result file's schema, its place under results/probes/, and the board beside a model's runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ddibench.data.drugbank import load_labels
from ddibench.errors import ConfigError, DataError
from ddibench.llm import ModelSpec
from ddibench.llm.stub import StubConfig, running_stub
from ddibench.registry import get_task
from ddibench.runner.memorisation import ProbeResult, draw_pairs, model_slug, read_probe


def _main(*args: str) -> int:
    from ddibench.cli import main

    try:
        main(list(args))
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return 0


def _probe(spec: str, out: Path, n: int, cache: bool = False) -> ProbeResult:
    args = ("probe", "memorisation", "-m", spec, "--n", str(n), "--seed", "0", "--out", str(out))
    assert _main(*args, *(() if cache else ("--no-cache",))) == 0
    return read_probe(out.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def recalled(tmp_path_factory: pytest.TempPathFactory) -> ProbeResult:
    """A probe whose model answers every question with DrugBank's sentence about the first training pair."""
    pairs, _ = draw_pairs(1, 0)
    first = pairs[0]
    sentence = load_labels()[first.gold].render(first.head.name, first.tail.name)
    with running_stub(StubConfig(reply=sentence)) as stub:
        return _probe(f"vllm:stub-model@{stub.base_url}", tmp_path_factory.mktemp("probe") / "p.json", 1)


def test_a_model_that_states_the_recorded_sentence_recovers_its_type(recalled: ProbeResult) -> None:
    (train,) = [p for p in recalled.pairs if p.slice == "s2_train"]
    assert (train.recovered, train.match) == (train.gold, "template")
    assert recalled.slice("s2_train").recovered == recalled.slice("s2_train").strict_recovered == 1
    assert recalled.slice("s2_train").rate.value == 1.0
    assert recalled.model.identity["model"] == "stub-model"
    assert recalled.generation == {"temperature": 0.0, "max_tokens": 64}
    assert {t.name for t in recalled.tasks} == {"drugbank_s2", "drugbank_time", "drugbank_s0"}


def test_slices_are_seeded_disjoint_and_the_controls_unrecorded() -> None:
    pairs, _ = draw_pairs(30, 7)
    again, _ = draw_pairs(30, 7)
    assert [(p.slice, p.head.node_id, p.tail.node_id) for p in pairs] == [
        (p.slice, p.head.node_id, p.tail.node_id) for p in again
    ]
    keys = [frozenset((p.head.node_id, p.tail.node_id)) for p in pairs]
    assert len(set(keys)) == len(keys) == 4 * 30  # no pair in two slices, in either order
    recorded = set()
    data = get_task("drugbank_s0").load()
    for split in ("train", "valid", "test"):
        recorded |= {frozenset((s.pair.head.node_id, s.pair.tail.node_id)) for s in data.split(split)}
    train = [p for p in pairs if p.slice == "s2_train"]
    controls = [p for p in pairs if p.slice == "control"]
    assert all(frozenset((p.head.node_id, p.tail.node_id)) in recorded for p in train)
    assert not any(frozenset((p.head.node_id, p.tail.node_id)) in recorded for p in controls)
    assert [(c.head, c.gold, c.original_tail) for c in controls] == [(t.head, t.gold, t.tail) for t in train]
    other, _ = draw_pairs(30, 8)
    assert [p.head.node_id for p in other] != [p.head.node_id for p in pairs]


def test_the_result_file_is_validated_strictly(recalled: ProbeResult) -> None:
    raw = json.loads(recalled.model_dump_json())
    assert read_probe(json.dumps(raw)) == recalled
    for change in (
        lambda d: d.update(unknown=1),
        lambda d: d["slices"][0].update(recovered=d["slices"][0]["recovered"] + 1),
        lambda d: d.update(prompt=d["prompt"] + " "),
        lambda d: d.update(schema_version=2),
        lambda d: d["pairs"].pop(),
        lambda d: d["pairs"][-1].update(head_id="DB00001"),  # a control whose head is not its training pair's
        lambda d: d["pair_specific"].update(value=0.5),
    ):
        bad = json.loads(json.dumps(raw))
        change(bad)
        with pytest.raises(ValueError):
            read_probe(json.dumps(bad))


def _results(root: Path) -> Path:
    root.mkdir()
    (root / "index.json").write_text(json.dumps({"format": 1, "total_bytes": 0, "runs": []}), encoding="utf-8")
    (root / "probes").mkdir()
    return root


def test_a_malformed_probe_file_is_refused_by_the_results_check(
    recalled: ProbeResult, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from ddibench.results.shipped import check, shipped_probes

    root = _results(tmp_path / "results")
    good = root / "probes" / f"{model_slug(recalled.model.spec)}.json"
    good.write_text(recalled.model_dump_json(), encoding="utf-8")
    assert check(root, reproduce=False).ok and list(shipped_probes(root)) == [recalled.model.spec]
    (root / "probes" / "other-model.json").write_text(recalled.model_dump_json(), encoding="utf-8")  # misnamed
    (root / "probes" / "broken.json").write_text('{"schema_version": 1}', encoding="utf-8")
    problems = check(root, reproduce=False).problems
    assert any(p.startswith("probes/broken.json: not a valid probe result") for p in problems)
    assert any(p.startswith("probes/other-model.json: probes ") for p in problems)
    with pytest.raises(DataError) as refused:
        shipped_probes(root)
    assert "\n" not in str(refused.value) and "broken.json" in str(refused.value)
    capsys.readouterr()
    assert _main("board", "check", "--results", str(root), "--no-reproduce") == 1
    out = capsys.readouterr().out
    assert "FAILED" in out and "broken.json" in out


def test_a_declared_training_cutoff_is_part_of_the_identity() -> None:
    spec = ModelSpec.parse("openai:gpt-4o-mini#cutoff=2023-10,revision=2024-07-18")
    assert spec.cutoff == "2023-10" and spec.identity()["training_cutoff"] == "2023-10"
    assert spec.display() == ModelSpec.parse("openai:gpt-4o-mini").display()  # the board's model column is unchanged
    for bad in ("2023-13", "2023", "23-10", "2023-1"):
        with pytest.raises(ConfigError, match="YYYY-MM"):
            ModelSpec.parse(f"openai:gpt-4o-mini#cutoff={bad}")


def test_a_declared_cutoff_reuses_the_cached_answers(fresh_cache: Path, tmp_path: Path) -> None:
    with running_stub(StubConfig()) as stub:
        spec = f"vllm:stub-model@{stub.base_url}"
        first = _probe(spec, tmp_path / "a.json", 1, cache=True)
        asked = len(stub.requests)
        again = _probe(f"{spec}#cutoff=2024-06", tmp_path / "b.json", 1, cache=True)
        assert len(stub.requests) == asked  # every answer from the cache: the cutoff cannot change one
    assert [p.answer for p in again.pairs] == [p.answer for p in first.pairs]
    assert again.model.identity == {**first.model.identity, "training_cutoff": "2024-06"}


def test_the_board_shows_a_models_probe_beside_its_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("duckdb", reason="the board needs the 'board' extra")
    from ddibench.leaderboard.static import write_site
    from ddibench.results.store import add_run
    from ddibench.submission import submit, verify

    with running_stub(StubConfig()) as stub:
        spec = f"vllm:stub-model@{stub.base_url}#cutoff=2024-06"
        probed = _probe(spec, tmp_path / "probe.json", 2)
        run_dir = tmp_path / "run"
        args = ("run", "-t", "drugbank_s2", "-s", "zero-shot", "--limit", "5", "-m", spec, "--run-dir", str(run_dir))
        assert _main(*args) == 0
    assert probed.model.identity["training_cutoff"] == "2024-06"
    manifest = json.loads((run_dir / "results.json").read_text())["manifest"]
    assert manifest["models"]["generator"]["identity"]["training_cutoff"] == "2024-06"
    store = tmp_path / "board.duckdb"
    add_run(store, verify(submit(run_dir, tmp_path / "run.tar.gz")))
    site = tmp_path / "site"
    write_site(store, site, {probed.model.spec: probed})
    (page,) = (site / "runs").glob("*.html")
    text = page.read_text()
    assert "memorisation probe" in text and "pair-specific" in text
    (task_page,) = (site / "tasks").glob("*.html")
    assert "memorisation probe" in task_page.read_text() and "vs control" in task_page.read_text()
    write_site(store, tmp_path / "plain", {})
    assert "memorisation probe" not in next((tmp_path / "plain" / "runs").glob("*.html")).read_text()

    # the Streamlit app's run view: the probe of the shipped results beside the run of its model
    from streamlit.testing.v1 import AppTest

    import ddibench.leaderboard
    from ddibench.leaderboard.data import runs

    app_file = str(Path(ddibench.leaderboard.__file__).parent / "app.py")
    monkeypatch.setenv("DDIBENCH_BOARD", str(store))

    def probe_warnings(results: Path) -> list[str]:
        monkeypatch.setenv("DDIBENCH_RESULTS", str(results))
        app = AppTest.from_file(app_file, default_timeout=120)
        app.query_params["run"] = str(runs(store)["run_id"].iloc[0])
        app.run()
        assert not app.exception
        return [w.value for w in app.warning if w.value.startswith("**Memorisation probe**")]

    # first a results folder without the probe, in the same process: the app's cache of the probes (kept
    # across runs of the app) must not hide a probe of another folder, or one published since
    assert probe_warnings(_results(tmp_path / "bare")) == []
    results = _results(tmp_path / "results")
    (results / "probes" / f"{model_slug(probed.model.spec)}.json").write_text(probed.model_dump_json())
    assert any(w.startswith("**Memorisation probe** of this model: `recalls") for w in probe_warnings(results))
