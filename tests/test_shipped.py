"""Compact bundles and the shipped results folder: publish, check, tampering, the size budget."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import chrome, free_port, needs_chromium, open_when_up, pack_bundle

from ddibench.errors import DataError
from ddibench.results.shipped import BUDGET_BYTES, check, publish, read_index, shipped_store, write_index
from ddibench.submission import CALL_FIELDS, read_bundle, submit, verify


def _run(*args: str) -> None:
    from ddibench.cli import main

    try:
        main(list(args))
    except SystemExit as exc:
        assert exc.code in (0, None), exc.code


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Small real runs: the majority floor on drugbank_s2, morgan-sklearn on tox_herg (AUROC reads one score),
    the popularity floor on twosides_s2 (a ranking) and a zero-shot preview against the stub server (traces)."""
    from ddibench.llm.stub import StubConfig, running_stub

    root = tmp_path_factory.mktemp("shipped-runs")
    _run("run", "-s", "majority", "-t", "drugbank_s2", "--run-dir", str(root / "majority"))
    _run("run", "-s", "morgan-sklearn", "-t", "tox_herg", "--run-dir", str(root / "morgan"))
    _run("run", "-s", "popularity", "-t", "twosides_s2", "--run-dir", str(root / "popularity"))
    with running_stub(StubConfig()) as stub:
        _run(
            "run",
            "-s",
            "zero-shot",
            "-t",
            "drugbank_s2",
            "--limit",
            "12",
            "-m",
            f"vllm:stub-model@{stub.base_url}",
            "--run-dir",
            str(root / "zs"),
        )
    return {name: root / name for name in ("majority", "morgan", "popularity", "zs")}


def _lines(bundle: Path) -> list[dict]:
    return [json.loads(line) for line in read_bundle(bundle)["predictions.jsonl"].splitlines() if line.strip()]


def test_compact_bundles_keep_what_the_metrics_read_and_verify_the_same(runs: dict[str, Path], tmp_path: Path) -> None:
    for name in ("majority", "morgan", "popularity"):
        full = submit(runs[name], tmp_path / f"{name}.tar.gz")
        compact = submit(runs[name], tmp_path / f"{name}.compact.tar.gz", compact=True)
        a, b = verify(full), verify(compact)
        assert a.accepted and b.accepted, (a.reasons, b.reasons)
        assert {k: v.value for k, v in a.evaluation.metrics.items()} == {
            k: v.value for k, v in b.evaluation.metrics.items()
        }
        assert ("compact", True) in [(c[0], c[1]) for c in b.checks]
        index = json.loads(read_bundle(compact)["bundle.json"])
        assert index["compact"]["whole_traces"] == 5
        lines = _lines(compact)
        if name == "majority":  # 86 class scores a sample in the full bundle, none in the compact one
            assert all(line["scores"] is None for line in lines) and all(line["scores"] for line in _lines(full))
            assert compact.stat().st_size < full.stat().st_size / 2
        if name == "morgan":  # AUROC reads the positive label's score only
            assert all(set(line["scores"]) == {"1"} for line in lines)
        if name == "popularity":  # a ranking cut after its k-th distinct label (k = 5)
            assert all(len(set(line["ranked"])) == len(line["ranked"]) <= 5 for line in lines)


def test_a_compact_bundle_keeps_whole_traces_for_five_samples_and_call_records_for_the_rest(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    compact = submit(runs["zs"], tmp_path / "zs.tar.gz", compact=True)
    lines = _lines(compact)
    assert len(lines) == 12
    whole = [
        line for line in lines if any("messages" in call or "response" in call for call in line["trace"].get("llm", []))
    ]
    assert len(whole) == 5
    for line in lines:
        if line not in whole:
            assert all(set(call) <= set(CALL_FIELDS) for call in line["trace"]["llm"])
    verdict = verify(compact)
    assert verdict.is_preview(), verdict.reasons  # a --limit run: recomputed, its cost checked from the call records


def test_compaction_that_would_change_a_metric_is_refused(
    runs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ddibench.evaluation.classification import ClassificationEvaluator

    monkeypatch.setattr(
        ClassificationEvaluator, "answer_fields", ("scores",)
    )  # an evaluator that under-declares what it reads
    with pytest.raises(DataError, match="would change the metrics|would change metric"):
        submit(runs["majority"], tmp_path / "bad.tar.gz", compact=True)
    assert not (tmp_path / "bad.tar.gz").exists()


def test_compaction_allows_the_float_noise_verification_allows(
    runs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A recomputation off by float noise (a float32 encoder under another thread count) within the evaluator's
    recompute_tolerance packs; one off by more is refused as a changed metric."""
    from ddibench.evaluation.classification import ClassificationEvaluator

    evaluate = ClassificationEvaluator.evaluate

    def shifted(by: float):
        def evaluate_shifted(self, *args, **kwargs):
            result = evaluate(self, *args, **kwargs)
            metrics = {k: v.model_copy(update={"value": v.value + by}) for k, v in result.metrics.items()}
            return result.model_copy(update={"metrics": metrics})

        return evaluate_shifted

    monkeypatch.setattr(ClassificationEvaluator, "recompute_tolerance", 1e-6)
    monkeypatch.setattr(ClassificationEvaluator, "evaluate", shifted(4e-7))
    assert submit(runs["majority"], tmp_path / "noise.tar.gz", compact=True).exists()
    monkeypatch.setattr(ClassificationEvaluator, "evaluate", shifted(4e-6))
    with pytest.raises(DataError, match="would change metric"):
        submit(runs["majority"], tmp_path / "off.tar.gz", compact=True)
    assert not (tmp_path / "off.tar.gz").exists()


@pytest.fixture(scope="module")
def shipped(runs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A results folder with two published runs: the majority floor (reproduced: its run took seconds)
    and morgan-sklearn (published without re-running)."""
    root = tmp_path_factory.mktemp("results")
    work = tmp_path_factory.mktemp("bundles")
    # reproduced explicitly: whether publish re-runs a bundle by default depends on its own run's wall time
    # (test_only_cheap_runs_are_reproduced_by_default), which a loaded machine can push past the limit
    outcomes = publish(root, [submit(runs["majority"], work / "m.tar.gz", compact=True)], reproduce=True)
    outcomes += publish(root, [submit(runs["morgan"], work / "g.tar.gz", compact=True)], reproduce=False)
    assert [o.problem for o in outcomes] == [None, None]
    return root


def test_only_cheap_runs_are_reproduced_by_default() -> None:
    from types import SimpleNamespace

    from ddibench.results.shipped import REPRODUCE_UNDER_S, cheap

    def verdict(wall: float) -> SimpleNamespace:
        return SimpleNamespace(results=SimpleNamespace(timing=SimpleNamespace(wall_s_total=wall)))

    assert cheap(verdict(REPRODUCE_UNDER_S - 0.1)) and not cheap(verdict(REPRODUCE_UNDER_S + 0.1))
    assert not cheap(SimpleNamespace(results=None))


def test_publish_places_verified_bundles_and_indexes_them(shipped: Path) -> None:
    index = read_index(shipped)
    by_system = {e["system"]: e for e in index["runs"]}
    assert set(by_system) == {"majority", "morgan-sklearn"}
    floor = by_system["majority"]
    assert floor["path"] == f"drugbank_s2/majority/{floor['run_id']}.tar.gz" and (shipped / floor["path"]).is_file()
    assert floor["tier"] == "reproduced" and floor["reproduction"]["differing"] == 0
    assert by_system["morgan-sklearn"]["tier"] == "recomputed"
    assert index["total_bytes"] == sum(e["bytes"] for e in index["runs"]) < BUDGET_BYTES
    first = (shipped / "index.json").read_bytes()
    write_index(shipped, reversed(index["runs"]), index["floors"])
    assert (shipped / "index.json").read_bytes() == first  # generated: the same runs give the same bytes
    report = check(shipped)
    assert report.ok, report.problems
    assert [o.entry["tier"] for o in report.outcomes if o.entry] == [e["tier"] for e in index["runs"]]


def test_the_store_of_shipped_results_is_built_once_and_cached(shipped: Path, fresh_cache: Path) -> None:
    from ddibench.leaderboard.data import runs

    seen: list[str] = []
    path = shipped_store(shipped, progress=lambda outcome: seen.append(outcome.entry["path"]))
    assert path.is_file() and path.is_relative_to(fresh_cache) and len(seen) == 2  # every bundle verified on the way
    frame = runs(path).set_index("system")
    assert (
        frame.loc["majority", "tier"] == "reproduced" and frame.loc["morgan-sklearn", "tier"] == "recomputed"
    )  # the index's tiers
    assert (
        shipped_store(shipped, progress=lambda outcome: seen.append("again")) == path and len(seen) == 2
    )  # cached by the index
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left behind


def _copy(shipped: Path, tmp_path: Path) -> Path:
    out = tmp_path / "results"
    shutil.copytree(shipped, out)
    return out


def _edit_index(root: Path, change) -> None:
    index = read_index(root)
    change(index["runs"])
    (root / "index.json").write_text(json.dumps(index), encoding="utf-8")


@pytest.mark.parametrize(
    "tamper, reason",
    [
        (
            lambda root: _edit_index(root, lambda runs: runs[0].update(value=runs[0]["value"] + 0.01)),
            "differs from the index (value",
        ),
        (
            lambda root: _edit_index(root, lambda runs: runs[1].update(tier="reproduced")),
            "differs from the index (reproduction",
        ),
        (lambda root: (root / read_index(root)["runs"][0]["path"]).unlink(), "listed in the index but missing"),
        (
            lambda root: shutil.copyfile(
                root / read_index(root)["runs"][0]["path"], root / "drugbank_s2" / "majority" / "stray.tar.gz"
            ),
            "the index does not list",
        ),
        (
            lambda root: _edit_index(root, lambda runs: runs[0].update(path="../outside.tar.gz")),
            "not where its task, system and run id put it",
        ),
    ],
    ids=["a number", "a claimed reproduction", "a missing bundle", "an unlisted bundle", "a path outside its place"],
)
def test_check_fails_when_the_shipped_results_and_the_index_disagree(
    shipped: Path, tmp_path: Path, tamper, reason: str
) -> None:
    root = _copy(shipped, tmp_path)
    tamper(root)
    report = check(root)
    assert not report.ok
    assert any(reason in p for p in report.problems), report.problems


def test_checks_side_by_side_report_what_one_at_a_time_reports(shipped: Path, tmp_path: Path) -> None:
    """Bundles checked two at a time give the same outcomes, in the index's order, with the same problems (one
    planted: a recomputed number that no longer matches) as one at a time."""
    root = _copy(shipped, tmp_path)
    _edit_index(root, lambda runs: runs[1].update(value=runs[1]["value"] + 0.25))
    reports = [check(root, workers=workers) for workers in (1, 2)]
    for report in reports:
        assert [o.bundle for o in report.outcomes] == [root / e["path"] for e in read_index(root)["runs"]]
        assert [o.problem is None for o in report.outcomes] == [True, False]
    one, two = reports
    assert two.problems == one.problems and any("differs from the index (value" in p for p in two.problems)
    assert [(o.entry, o.checks) for o in two.outcomes] == [(o.entry, o.checks) for o in one.outcomes]


def _hang_on_morgan(path: Path, **kwargs):
    """What the sandboxed child runs in the test below: verify, except that the morgan-sklearn bundle's check hangs."""
    import time

    while "morgan-sklearn" in str(path):
        time.sleep(1)
    return verify(path, **kwargs)


def test_an_interrupted_check_stops_the_checks_running_ahead(
    shipped: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C once the first bundle is done while the second's check (running ahead, in its own child) hangs: the
    check returns at once, the child killed, instead of waiting on it for the sandbox's wall limit."""
    import time

    import psutil

    import ddibench.submission.sandbox as sandbox

    root = _copy(shipped, tmp_path)
    assert "morgan-sklearn" not in read_index(root)["runs"][0]["path"]
    monkeypatch.syspath_prepend(str(Path(__file__).parent))  # the child imports what this process can
    monkeypatch.setattr(sandbox, "CHECK", f"{Path(__file__).stem}:_hang_on_morgan")
    monkeypatch.setattr(sandbox, "WALL_LIMIT_S", 120)  # without the stop, the interrupted check waits this long

    def interrupt(outcome) -> None:
        assert outcome.problem is None, outcome.problem
        raise KeyboardInterrupt

    started = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        check(root, workers=2, reproduce=False, progress=interrupt)
    assert time.perf_counter() - started < 60
    left = [" ".join(p.cmdline()) for p in psutil.Process().children(recursive=True) if p.is_running()]
    assert not [c for c in left if "ddibench.submission.sandbox" in c], left


def test_check_fails_when_a_bundle_changes_under_the_index(shipped: Path, tmp_path: Path) -> None:
    root = _copy(shipped, tmp_path)
    rel = read_index(root)["runs"][0]["path"]
    members = read_bundle(root / rel)
    members["bundle.json"] = members["bundle.json"].replace(
        b'"trust_tier": "self-reported"', b'"trust_tier": "self-reported" '
    )
    pack_bundle(members, root / rel)
    report = check(root, reproduce=False)
    assert any("differs from the index (bytes" in p or "sha256" in p for p in report.problems), report.problems


def test_publish_refuses_rejected_and_oversized_bundles_and_leaves_the_folder_as_it_was(
    shipped: Path, runs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ddibench.results.shipped as shipped_module

    root = _copy(shipped, tmp_path)
    before = (root / "index.json").read_bytes()
    preview = submit(runs["zs"], tmp_path / "zs.tar.gz", compact=True)
    [outcome] = publish(root, [preview])
    assert outcome.problem and "no --limit" in outcome.problem
    monkeypatch.setattr(shipped_module, "MAX_BUNDLE_BYTES", 1000)
    [outcome] = publish(root, [submit(runs["popularity"], tmp_path / "p.tar.gz", compact=True)])
    assert outcome.problem and "ddibench submit --compact" in outcome.problem
    monkeypatch.setattr(shipped_module, "MAX_BUNDLE_BYTES", 8 * 2**20)
    monkeypatch.setattr(shipped_module, "BUDGET_BYTES", read_index(root)["total_bytes"] + 100)
    [outcome] = publish(root, [submit(runs["popularity"], tmp_path / "p.tar.gz", compact=True)], reproduce=False)
    assert outcome.problem and "budget" in outcome.problem
    assert (root / "index.json").read_bytes() == before
    assert not (root / "twosides_s2").exists() or not any((root / "twosides_s2").rglob("*.tar.gz"))


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_the_board_opens_from_recorded_results_without_recomputing_and_leaves_out_a_changed_bundle(
    shipped: Path, tmp_path: Path, fresh_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shipped store trusts what CI verified: no bundle is verified again (the verifier is not called), a
    bundle whose bytes differ from the index is left out with its reason, and the others are on the board."""
    import ddibench.submission.sandbox
    import ddibench.submission.verification
    from ddibench.leaderboard.data import runs

    def refuse(*args, **kwargs):
        raise AssertionError("the board must not verify the shipped bundles again")

    monkeypatch.setattr(ddibench.submission.sandbox, "verify_isolated", refuse)
    monkeypatch.setattr(ddibench.submission.verification, "verify", refuse)
    root = _copy(shipped, tmp_path)
    changed = next(e for e in read_index(root)["runs"] if e["system"] == "majority")
    members = read_bundle(root / changed["path"])
    members["bundle.json"] = members["bundle.json"] + b" "
    pack_bundle(members, root / changed["path"])
    seen = []
    store = shipped_store(root, progress=seen.append, workers=2)
    problems = [o.problem for o in seen if o.problem is not None]
    assert len(seen) == 2 and len(problems) == 1 and "differ from the index" in problems[0], problems
    assert list(runs(store)["system"]) == ["morgan-sklearn"]


def test_publish_writes_the_bundle_the_index_and_the_tables_together(
    shipped: Path, runs: dict[str, Path], tmp_path: Path, fresh_cache: Path
) -> None:
    """A publish checks the shipped bundles by hash (not recomputed), verifies the new one, and writes bundle,
    index (with the tie verdicts and floors) and tables at once; the store it leaves in the cache is the one a
    build from the new index gives, and a full check agrees with the index."""
    from ddibench.results.shipped import TIE, _store_path

    root = _copy(shipped, tmp_path)
    bundle = submit(runs["popularity"], tmp_path / "p.tar.gz", compact=True)
    written: list[Path] = []

    def tables(store: Path) -> dict[Path, str]:
        written.append(store)
        return {root / "TABLE.md": f"table of {store.name}\n"}

    [outcome] = publish(root, [bundle], reproduce=False, tables=tables)
    assert outcome.problem is None, outcome.problem
    index = read_index(root)
    assert (root / outcome.entry["path"]).read_bytes() == bundle.read_bytes()
    assert all(TIE in e for e in index["runs"]) and {f["task"] for f in index["floors"]} == {
        "drugbank_s2",
        "tox_herg",
        "twosides_s2",
    }
    assert (root / "TABLE.md").read_text() == f"table of {written[0].name}\n" and written == [_store_path(root)]
    report = check(root, reproduce=False)
    assert report.ok, report.problems


def test_an_interrupted_or_failed_publish_leaves_the_folder_as_it_was(
    shipped: Path, runs: dict[str, Path], tmp_path: Path, fresh_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    import ddibench.results.shipped as shipped_module

    root = _copy(shipped, tmp_path)
    before = _files(root)
    bundle = submit(runs["popularity"], tmp_path / "p.tar.gz", compact=True)

    def interrupt(store: Path) -> dict[Path, str]:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        publish(root, [bundle], reproduce=False, tables=interrupt)
    assert _files(root) == before
    real_replace = os.replace

    def fail_last(src, dst):  # the bundle and the index are renamed into place, then the table's rename fails
        if Path(dst).name == "README.md":
            raise OSError("disk full")
        return real_replace(src, dst)

    monkeypatch.setattr(shipped_module.os, "replace", fail_last)
    with pytest.raises(OSError, match="disk full"):
        publish(root, [bundle], reproduce=False, tables=lambda store: {root / "README.md": "new\n"})
    monkeypatch.undo()
    assert _files(root) == before, "a failed rename must restore what the earlier renames replaced"
    other = read_index(root)["runs"][0]["path"]
    (root / other).write_bytes((root / other).read_bytes() + b"\0")
    with pytest.raises(DataError, match="differ from their index"):
        publish(root, [bundle], reproduce=False)


# -- the results that ship in this repository ----------------------------------------------------------

REPO_RESULTS = Path(__file__).resolve().parent.parent / "results"
# the first test of the shipped results runs the whole check (every bundle recomputed, the cheap ones re-run,
# a store built from them): minutes, not the default per-test limit's share
CHECK_TIMEOUT = pytest.mark.timeout(3600)


@pytest.fixture(scope="module")
def repo_results(shipped_results_log: list[str], tmp_path_factory: pytest.TempPathFactory):
    """``ddibench board check`` of results/ (every bundle recomputed, the reproduced ones re-run), building a
    results store from the verified runs on the way; each bundle's verdict goes into the session's summary."""

    def log(outcome) -> None:
        e = outcome.entry
        if outcome.problem is not None:
            shipped_results_log.append(f"FAILED {outcome.bundle}: {outcome.problem}")
        else:
            reproduced = (
                f", {e['reproduction']['identical']} of {e['reproduction']['n']} re-run identical"
                if e.get("reproduction")
                else ""
            )
            shipped_results_log.append(
                f"ok {e['path']}: {e['tier']}{reproduced}; {e['primary_metric']} {e['value']:.4f} on n={e['n']}"
            )

    import time

    store = tmp_path_factory.mktemp("shipped-store") / "board.duckdb"
    started = time.perf_counter()
    report = check(REPO_RESULTS, progress=log, add_to=store)
    shipped_results_log.append(
        f"{sum(o.problem is None for o in report.outcomes)} of {len(report.outcomes)} shipped bundles verified in "
        f"{time.perf_counter() - started:.0f} s ('ddibench board check'); results/ holds {report.total_bytes / 2**20:.2f} MiB"
    )
    return report, store


@CHECK_TIMEOUT
def test_every_shipped_bundle_verifies_against_the_index(repo_results) -> None:
    report, _ = repo_results
    assert report.outcomes, "results/ ships no runs"
    assert report.ok, report.problems


@CHECK_TIMEOUT
def test_the_board_built_from_recorded_results_equals_the_board_ci_recomputes(
    repo_results, shipped_results_log: list[str]
) -> None:
    """The store 'board serve' opens on a fresh clone (each bundle's hash checked, its recorded results read,
    the index's ties and floors) holds exactly what the store of the full check holds, row by row: every
    run column but the time it was added, every sample row with its trace, every floor."""
    import time

    from ddibench.results.shipped import recompute_tolerance
    from ddibench.results.store import connect

    _, full = repo_results
    started = time.perf_counter()
    trusted = shipped_store(REPO_RESULTS)
    shipped_results_log.append(
        f"the board's store built from the recorded results ('board serve' on a fresh clone) in "
        f"{time.perf_counter() - started:.0f} s"
    )
    a, b = connect(full, read_only=True), connect(trusted, read_only=True)
    try:
        columns = [
            c
            for (c,) in a.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = 'runs' ORDER BY ordinal_position"
            ).fetchall()
            if c != "added"
        ]
        query = f"SELECT {', '.join(columns)} FROM runs ORDER BY run_id"
        mine, ci = b.execute(query).fetchall(), a.execute(query).fetchall()
        assert [r[0] for r in mine] == [r[0] for r in ci]
        noisy = {  # runs scored by a float32 encoder: an interval bound may move by a replicate's spacing
            run_id
            for run_id, task in a.execute("SELECT run_id, task FROM runs").fetchall()
            if recompute_tolerance(task) > 1e-9
        }
        at = columns.index("reproduction")  # the check re-ran the cheap runs: its record holds more than the index's
        ci = [(*y[:at], _indexed(y[at]), *y[at + 1 :]) for y in ci]
        for x, y in zip(mine, ci):
            tolerance = 1e-3 if x[0] in noisy else 1e-9
            differing = [c for c, u, v in zip(columns, x, y) if not _close(u, v, tolerance)]
            assert not differing, f"run {x[0]}: {differing}"
        for table, order in (("samples", "run_id, sample_id"), ("floors", "task, scoring_variant, name")):
            query = f"SELECT * FROM {table} ORDER BY {order}"
            rows, expected = b.execute(query).fetchall(), a.execute(query).fetchall()
            assert len(rows) == len(expected), table
            for x, y in zip(
                rows, expected
            ):  # a noisy run's per-sample scores are rounded to 4 places: a digit may flip
                tolerance = 1e-3 if table == "samples" and x[0] in noisy else 1e-6
                assert all(_close(u, v, tolerance) for u, v in zip(x, y)), f"{table}: {x[:2]}"
    finally:
        a.close()
        b.close()


def _indexed(reproduction: str | None) -> str | None:
    """A run's reproduction record as the index keeps it (counts and tolerance)."""
    from ddibench.results.shipped import _reproduction

    return None if reproduction is None else json.dumps(_reproduction(json.loads(reproduction)))


def _close(u: object, v: object, tolerance: float) -> bool:
    """Equal, up to the float noise a recomputation may show on another CPU (``tolerance``), in numbers and in
    JSON text holding numbers."""
    if isinstance(u, float) and isinstance(v, float):
        return u == v or abs(u - v) <= tolerance
    if isinstance(u, str) and isinstance(v, str) and u != v and u[:1] in "[{" and v[:1] in "[{":
        try:
            return _close(json.loads(u), json.loads(v), tolerance)
        except ValueError:
            return False
    if isinstance(u, dict) and isinstance(v, dict):
        return u.keys() == v.keys() and all(_close(u[k], v[k], tolerance) for k in u)
    if isinstance(u, list) and isinstance(v, list):
        return len(u) == len(v) and all(_close(p, q, tolerance) for p, q in zip(u, v))
    return u == v


def test_the_results_tables_are_generated_from_the_shipped_results() -> None:
    """results/README.md and docs/results.md hold exactly the full table of the shipped runs, and the README's
    results section the compact ranked one, all as 'ddibench board publish' writes them. Read from the store
    'board serve' opens (the recorded results; the test above holds it equal to the recomputed one row by row),
    so this check takes a minute, not the whole board check."""
    from ddibench.commands.board import RESULTS_MARKERS, RESULTS_PAGE, tables
    from ddibench.leaderboard.static import markdown_table, ranked_table

    store = shipped_store(REPO_RESULTS)
    readme, page = REPO_RESULTS.parent / "README.md", REPO_RESULTS.parent / RESULTS_PAGE
    assert all(RESULTS_MARKERS[0] in p.read_text(encoding="utf-8") for p in (readme, page))
    expected = tables(REPO_RESULTS, store)
    assert sorted(expected) == sorted([REPO_RESULTS / "README.md", readme, page])
    stale = [str(p.relative_to(REPO_RESULTS.parent)) for p, text in expected.items() if p.read_text("utf-8") != text]
    assert not stale, f"{stale} differ from results/: regenerate with 'ddibench board publish'"
    full, compact = markdown_table(store), ranked_table(store)
    assert full in page.read_text(encoding="utf-8") and compact in readme.read_text(encoding="utf-8")
    # the full table: a reader tells the LLM systems' columns from the trained ones' and the floors'
    header = full.splitlines()[0].split(" | ")
    assert "text-rag (LLM)" in header and "no-rag (LLM)" in header and "mlp" in header and "majority" in header
    assert "(LLM): a system whose answers an LLM writes" in full and "`embedded:qwen2.5-coder-1.5b-instruct`" in full
    assert "Previews (`--limit`" in full
    # the compact one: a line per task with ranked runs, its best and its best LLM run marked, no preview
    index = read_index(REPO_RESULTS)
    ranked_tasks = sorted({e["task"] for e in index["runs"] if not e["preview"]})
    rows = [line.split(" | ") for line in compact.splitlines() if line.startswith("| ") and "---" not in line]
    assert rows[0] == ["| task", "metric", "best", "best LLM system", "floors |"]
    assert [r[0].removeprefix("| ") for r in rows[1:]] == ranked_tasks
    assert all("★" in r[2] for r in rows[1:])
    assert any("(LLM)" in r[3] for r in rows[1:]) and "(LLM): a system whose answers an LLM writes" in compact
    assert "Previews" not in compact and len(compact.splitlines()) < len(full.splitlines()) / 2


@CHECK_TIMEOUT
def test_the_shipped_floors_stand_beside_every_task(repo_results) -> None:
    """Every task on the shipped board has its floor: a labelled task the run of its floor system (majority,
    popularity, only-smiles) on the full split; a question-answering task, whose free-text answers have no
    label to count, the run of top-passage on the same samples as every other run of the task (same size,
    same seed: the same stratified draw), because scoring free text on a full split costs an hour here."""
    from ddibench.registry import get_system_class, get_task

    floor_systems = ("majority", "popularity", "only-smiles")
    index = read_index(REPO_RESULTS)
    tasks = {e["task"] for e in index["runs"]}
    with_floor = {t for t in tasks if any(get_system_class(f)().supports(get_task(t)) for f in floor_systems)}
    questions = {t for t in tasks if get_task(t).input_kind == "question"}
    assert with_floor == tasks - questions, sorted(tasks - questions - with_floor)  # every labelled task has one
    floors = {e["task"] for e in index["runs"] if e["system"] in floor_systems and not e["preview"]}
    assert with_floor <= floors, sorted(with_floor - floors)
    assert all(get_system_class("top-passage")().supports(get_task(t)) for t in questions)
    drawn = {(e["task"], e["n"], e["seed"]) for e in index["runs"] if e["task"] in questions}
    floored = {(e["task"], e["n"], e["seed"]) for e in index["runs"] if e["system"] == "top-passage"}
    assert drawn <= floored, sorted(drawn - floored)


def has_column(header: set[str], system: str) -> bool:
    """A system has a board column: under its name, or as ``system [variant]`` where its only full runs were made
    in a variant (CBR-DDI's GNN module alone is ``cbr-ddi [answer=gnn]``)."""
    return system in header or any(name.startswith(f"{system} [") for name in header)


def _counts() -> tuple[int, set[str], set[str]]:
    index = read_index(REPO_RESULTS)
    return len(index["runs"]), {e["task"] for e in index["runs"]}, {e["system"] for e in index["runs"]}


@CHECK_TIMEOUT
@needs_chromium
def test_board_serve_on_a_fresh_clone_shows_every_ranked_shipped_run_in_a_browser(repo_results, tmp_path: Path) -> None:
    import os
    import subprocess
    import sys
    import time

    from selenium.webdriver.common.by import By

    full = [e for e in read_index(REPO_RESULTS)["runs"] if not e["preview"]]  # previews are off by default
    tasks, systems = {e["task"] for e in full}, {e["system"] for e in full}
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("DDIBENCH_BOARD", "DDIBENCH_RESULTS")}
    env["DDIBENCH_CACHE"] = str(tmp_path / "cache")  # as on a fresh clone: the board's store is built by this call
    server = subprocess.Popen(
        [sys.executable, "-m", "ddibench", "board", "serve", "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    driver = None
    try:
        driver = chrome(tmp_path / "chrome")
        deadline = time.time() + 600  # the store is built first (seconds on an idle machine; CI's may be busy)
        open_when_up(driver, f"http://127.0.0.1:{port}/", deadline)
        rows: set[str] = set()
        columns: set[str] = set()
        while time.time() < deadline and not (tasks <= rows and all(has_column(columns, s) for s in systems)):
            try:
                rows = {th.text for th in driver.find_elements(By.CSS_SELECTOR, "table tbody th")}
                columns = {th.text for th in driver.find_elements(By.CSS_SELECTOR, "table thead th")}
            except Exception:  # noqa: BLE001 - the page was drawn again meanwhile
                pass
            time.sleep(1)
        assert tasks <= rows, f"task rows missing: {sorted(tasks - rows)}"
        missing = sorted(s for s in systems if not has_column(columns, s))
        assert not missing, f"system columns missing: {missing}"
        driver.save_screenshot(str(tmp_path / "shipped-board.png"))
    finally:
        if driver is not None:
            driver.quit()
        server.terminate()
        server.wait(timeout=20)


@CHECK_TIMEOUT
@needs_chromium
def test_the_shipped_results_export_as_a_static_site_a_browser_reads(repo_results, cli, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    from ddibench.leaderboard.data import plural

    n_runs, tasks, systems = _counts()
    site = tmp_path / "site"
    code, out, err = cli("board", "export", "--html", str(site))
    assert code == 0, out + err
    driver = chrome(tmp_path / "chrome")
    try:
        driver.get((site / "index.html").as_uri())
        text = driver.find_element(By.TAG_NAME, "body").text
        assert f"{plural(n_runs, 'run')} · {plural(len(tasks), 'task')} · {plural(len(systems), 'system')}" in text
        header = {th.text for th in driver.find_elements(By.CSS_SELECTOR, "table.matrix th")}
        index = read_index(REPO_RESULTS)
        ranked = {e["system"] for e in index["runs"] if not e["preview"]}
        missing = sorted(s for s in ranked if not has_column(header, s))
        assert not missing, missing  # every system with a full run has a column
        previews = {(e["task"], e["system"]) for e in index["runs"] if e["preview"]}
        if previews:  # --limit previews sit in their own table, never in the matrix
            shown = {
                tuple(td.text for td in row.find_elements(By.TAG_NAME, "td")[1:3])
                for row in driver.find_elements(By.CSS_SELECTOR, "table.previews tbody tr")
            }
            assert previews <= shown, sorted(previews - shown)
        assert all(task in text for task in tasks) and systems <= ranked | {system for _, system in previews}
    finally:
        driver.quit()


def test_the_cached_shipped_store_is_keyed_by_the_code_that_decides_its_rows() -> None:
    """The board cache is keyed by the index and by the code that decides what the store holds, the records among
    it (a run's variant and constant-answer flag, which name its board column and its mark, are read from its card
    there): an upgrade that changes a row is never served from a store built before it. No system's code is in
    the key: no row depends on the systems installed where the board is built."""
    from pathlib import Path

    import ddibench
    from ddibench.results.shipped import STORE_CODE, index_digest

    before = index_digest(REPO_RESULTS)
    assert index_digest(REPO_RESULTS) == before  # stable
    package = Path(ddibench.__file__).parent
    assert all(list(package.glob(pattern)) for pattern in STORE_CODE)  # each names code that is there
    assert {"runner/records.py", "runner/selection.py", "results/store.py"} <= set(STORE_CODE)
    assert not any(pattern.startswith("systems") for pattern in STORE_CODE)
