"""Submissions and the leaderboard: bundles, tamper detection, the results store, the Streamlit app
(AppTest) and a real headless Chromium loading the served board."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

pytest.importorskip("duckdb", reason="the board needs the 'board' extra")
pytest.importorskip("streamlit", reason="the board needs the 'board' extra")
pytest.importorskip("torch", reason="the runs here use the mlp system ('ml' extra)")

from conftest import chrome, free_port, needs_chromium, open_when_up, pack_bundle  # noqa: E402

from ddibench.results.store import add_run  # noqa: E402
from ddibench.submission import _sha, read_bundle, submit, verify  # noqa: E402

TINY = ["-C", "max_epochs=1", "-C", "max_train=1500", "-C", "hidden=[32]", "-C", "patience=1"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory):
    """Two full-split runs on drugbank_s2 (mlp and zero-shot against the stub) and their bundles."""
    from ddibench.cli import main
    from ddibench.llm.stub import StubConfig, running_stub

    root = tmp_path_factory.mktemp("board-runs")

    def run(*args: str) -> None:
        try:
            main(list(args))
        except SystemExit as exc:
            assert exc.code in (0, None), exc.code

    run("run", "-s", "mlp", "-t", "drugbank_s2", *TINY, "--run-dir", str(root / "mlp"))
    with running_stub(StubConfig()) as stub:
        run(
            "run",
            "-s",
            "zero-shot",
            "-t",
            "drugbank_s2",
            "-m",
            f"vllm:stub-model@{stub.base_url}",
            "--concurrency",
            "16",
            "--run-dir",
            str(root / "zs"),
        )
        run(
            "run",
            "-s",
            "zero-shot",
            "-t",
            "drugbank_s2",
            "--limit",
            "20",
            "-m",
            f"vllm:stub-model@{stub.base_url}",
            "--run-dir",
            str(root / "limited"),
        )
    return {name: (root / name, submit(root / name, root / f"{name}.tar.gz")) for name in ("mlp", "zs", "limited")}


def _rewrite(bundle: Path, out: Path, edit, fix_hashes: bool = True, extra: dict[str, bytes] | None = None) -> Path:
    members = read_bundle(bundle)
    edit(members)
    members.update(extra or {})
    if fix_hashes:
        meta = json.loads(members["bundle.json"])
        meta["hashes"] = {n: _sha(d) for n, d in members.items() if n != "bundle.json"}
        members["bundle.json"] = json.dumps(meta).encode()
    return pack_bundle(members, out)


def _edit_first_prediction(members: dict[str, bytes]) -> None:
    lines = members["predictions.jsonl"].decode().splitlines()
    first = json.loads(lines[0])
    first["label"] = (first["label"] + 1) % 86
    lines[0] = json.dumps(first)
    members["predictions.jsonl"] = ("\n".join(lines) + "\n").encode()


def _edit_json(name: str, change):
    def edit(members: dict[str, bytes]) -> None:
        data = json.loads(members[name])
        change(data)
        members[name] = json.dumps(data).encode()

    return edit


def test_valid_bundle_is_recomputed(runs) -> None:
    verdict = verify(runs["mlp"][1])
    assert verdict.accepted and verdict.tier == "recomputed", verdict.reasons
    claimed = json.loads((runs["mlp"][0] / "results.json").read_text())["evaluation"]["metrics"]
    assert verdict.recomputed.metrics["macro_f1"].value == claimed["macro_f1"]["value"]


def test_verify_recomputes_intervals_with_the_method_the_bundle_records(runs, tmp_path: Path) -> None:
    """New runs record BCa intervals and verify recomputes exactly them; a bundle written before BCa
    (no interval method recorded) still verifies, and its intervals are recomputed as percentile ones."""
    claimed = json.loads((runs["mlp"][0] / "results.json").read_text())["evaluation"]
    assert claimed["bootstrap"]["interval"] == "bca"
    verdict = verify(runs["mlp"][1])
    assert verdict.recomputed.bootstrap["interval"] == "bca"
    assert verdict.recomputed.metrics["macro_f1"].ci_low == claimed["metrics"]["macro_f1"]["ci_low"]

    def as_before_bca(results: dict) -> None:
        for key in ("interval", "interval_description"):
            results["evaluation"]["bootstrap"].pop(key)

    old = verify(_rewrite(runs["mlp"][1], tmp_path / "old.tar.gz", _edit_json("results.json", as_before_bca)))
    assert old.accepted and old.tier == "recomputed", old.reasons
    assert old.recomputed.bootstrap["interval"] == "percentile"
    assert old.recomputed.metrics["macro_f1"].value == claimed["metrics"]["macro_f1"]["value"]
    assert old.recomputed.metrics["macro_f1"].ci_low != claimed["metrics"]["macro_f1"]["ci_low"]


@pytest.mark.parametrize(
    ("case", "edit", "fix", "reason"),
    [
        ("edited prediction", _edit_first_prediction, False, "hash of predictions.jsonl"),
        ("edited prediction, hashes redone", _edit_first_prediction, True, "metric macro_f1: recomputed"),
        (
            "wrong data hash",
            _edit_json("run.json", lambda r: r["task"].update(data_sha256="0" * 64)),
            True,
            "data sha256",
        ),
        (
            "other task version",
            _edit_json("run.json", lambda r: r["task"].update(version="0.9.0")),
            True,
            "task version",
        ),
        (
            "declares a constant answer it did not give",  # would hide the collapsed-answers flag on the board
            _edit_json("results.json", lambda r: r["manifest"]["system"].update(constant_answer=True)),
            True,
            "results.json declares a constant answer",
        ),
        (
            "missing sample",
            lambda m: m.update({"predictions.jsonl": b"\n".join(m["predictions.jsonl"].splitlines()[1:]) + b"\n"}),
            True,
            "every sample once: 1 missing",
        ),
        (
            "repeated sample",
            lambda m: m.update(
                {"predictions.jsonl": m["predictions.jsonl"] + m["predictions.jsonl"].splitlines()[0] + b"\n"}
            ),
            True,
            "1 repeated",
        ),
    ],
)
def test_tampered_bundles_are_rejected_with_their_reason(
    runs, tmp_path: Path, case: str, edit, fix: bool, reason: str
) -> None:
    bad = _rewrite(runs["mlp"][1], tmp_path / "bad.tar.gz", edit, fix)
    verdict = verify(bad)
    assert not verdict.accepted and verdict.tier == "self-reported"
    assert any(reason in r for r in verdict.reasons), verdict.reasons


def test_limit_runs_are_rejected(runs, tmp_path: Path) -> None:
    verdict = verify(runs["limited"][1])
    assert not verdict.accepted and any("--limit 20 was used" in r for r in verdict.reasons)
    # still a preview whose numbers are recomputed on the 20 samples --limit draws, not taken on trust
    assert verdict.is_preview() and verdict.tier == "recomputed" and verdict.recomputed.n == 20
    bad = verify(_rewrite(runs["limited"][1], tmp_path / "bad.tar.gz", _edit_first_prediction, True))
    assert (
        not bad.is_preview()
        and bad.tier == "self-reported"
        and any("metric macro_f1: recomputed" in r for r in bad.reasons)
    )


def test_seed_count_is_checked(runs, monkeypatch: pytest.MonkeyPatch) -> None:
    from ddibench.registry import get_task

    monkeypatch.setattr(type(get_task("drugbank_s2")), "required_seeds", 3, raising=False)
    verdict = verify(runs["mlp"][1])
    assert not verdict.accepted and any("seeds: 1 run(s), the task asks for 3" in r for r in verdict.reasons)


def test_bundles_are_data_never_code(runs, tmp_path: Path) -> None:
    from ddibench.errors import DataError

    evil = tmp_path / "evil.tar.gz"
    with tarfile.open(evil, "w:gz") as tar:
        for name, data in read_bundle(runs["mlp"][1]).items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        info = tarfile.TarInfo("../../outside.py")
        info.size = 5
        tar.addfile(info, io.BytesIO(b"1 / 0"))
    with pytest.raises(DataError, match="not part of the bundle format"):
        verify(evil)
    link = tmp_path / "link.tar.gz"
    with tarfile.open(link, "w:gz") as tar:
        info = tarfile.TarInfo("run.json")
        info.type = tarfile.SYMTYPE
        info.linkname = "/etc/passwd"
        tar.addfile(info)
    with pytest.raises(DataError, match="not a regular file"):
        verify(link)
    assert not (tmp_path.parent.parent / "outside.py").exists()


def test_reproduction_raises_the_trust_tier(runs, tmp_path: Path) -> None:
    from ddibench.submission import reproduce

    verdict = reproduce(verify(runs["mlp"][1]), tmp_path / "again")
    assert verdict.accepted and verdict.tier == "reproduced", verdict.reasons
    # the MLP was trained again into the reproduction's own empty artifact store, not read from the user cache
    assert verdict.reproduction["fresh_caches"] is True and any(
        (tmp_path / "again.artifacts" / "mlp").rglob("key.json")
    )
    assert "with empty caches" in next(detail for name, _, detail in verdict.checks if name == "reproduction")


def _forge(members: dict[str, bytes], system=None, models=None, results=None, predictions=None) -> None:
    """Edit a bundle as a competent forger would: every hash and id that names the edit is recomputed
    (the system's config hash, the run id, bundle.json), so only the checks that read the traces, the
    registry or a re-run can tell."""
    from ddibench.hashing import config_hash

    run, res, index = (json.loads(members[n]) for n in ("run.json", "results.json", "bundle.json"))
    if system:
        run["system"].update(system)
        run["system"]["config_hash"] = config_hash(
            {"system": run["system"]["name"], "version": run["system"]["version"], "config": run["system"]["config"]}
        )
        res["system"] = run["system"]["name"]
        res["manifest"]["system"].update({k: run["system"][k] for k in ("name", "version", "config", "config_hash")})
        index["system"] = {k: run["system"][k] for k in ("name", "version", "config_hash")}
    if models:
        run["models"] = {role: spec_identity for role, (_, spec_identity) in models.items()}
        res["manifest"]["models"] = {role: {"spec": spec, "identity": ident} for role, (spec, ident) in models.items()}
    if predictions:
        lines = [json.loads(x) for x in members["predictions.jsonl"].splitlines()]
        members["predictions.jsonl"] = ("\n".join(json.dumps(predictions(p)) for p in lines) + "\n").encode()
    if results:
        results(res)
    payload = {k: v for k, v in run.items() if k != "run_id"}
    run["run_id"] = res["run_id"] = index["run_id"] = config_hash(payload, 16)
    members["run.json"], members["results.json"], members["bundle.json"] = (
        json.dumps(x).encode() for x in (run, res, index)
    )


def _zero_cost(res: dict) -> None:
    for table in (res["cost"]["by_role"], res["cost"]["per_item"]):
        for values in table.values():
            values.update({k: 0 for k in values})


GPT4O = (
    "openai:gpt-4o@https://api.openai.com/v1",
    {"provider": "openai", "model": "gpt-4o", "base_url": "https://api.openai.com/v1"},
)


@pytest.mark.parametrize(
    ("case", "forge", "reason"),
    [
        (
            "renamed system, hashes redone",
            lambda m: _forge(m, system={"name": "cbr-ddi", "version": "9.9.9"}),
            "system: cbr-ddi 9.9.9 is not the version registered here",
        ),
        (
            "renamed to a registered system and version",
            lambda m: _forge(m, system={"name": "naive-cbr"}),
            "system: the configuration is not one naive-cbr 1.0.0 accepts",
        ),
        (
            "renamed system, config hash left",
            lambda m: _edit_json("run.json", lambda r: r["system"].update(name="cbr-ddi"))(m),
            "run id: run.json's run id is not the hash of its identity",
        ),
        (
            "changed model identity",
            lambda m: _forge(m, models={"generator": GPT4O}),
            "models: 1992 of 1992 traced LLM calls were answered by another model than the manifest names",
        ),
        (
            "changed model in results.json only",
            _edit_json(
                "results.json", lambda r: r["manifest"]["models"]["generator"].update(spec=GPT4O[0], identity=GPT4O[1])
            ),
            "identity: results.json names models generator=openai:gpt-4o, run.json generator=vllm:stub-model",
        ),
        (
            "zeroed cost",
            lambda m: _forge(m, results=_zero_cost),
            "cost: generator calls: 1,992 in the traces, 0 claimed",
        ),
        (
            "zeroed cost, traces too",
            lambda m: _forge(
                m,
                results=_zero_cost,
                predictions=lambda p: {
                    **p,
                    "trace": {
                        **p["trace"],
                        "llm": [{**c, "prompt_tokens": 0, "completion_tokens": 0} for c in p["trace"]["llm"]],
                    },
                },
            ),
            "models: 1992 of 1992 traced LLM calls report no prompt tokens",
        ),
        (
            "a label outside the label space",
            lambda m: _forge(m, predictions=lambda p: {**p, "label": 999 if p is not None else 0}),
            "label space: 1992 predictions name label ids outside the task's 86 labels",
        ),
        (
            "an invalid prediction's label outside the label space",
            lambda m: _forge(m, predictions=lambda p: {**p, "valid": False, "label": 10**30}),
            "label space:",
        ),
        (
            "ranked labels outside the label space",
            lambda m: _forge(m, predictions=lambda p: {**p, "ranked": [0, -1]}),
            "label space:",
        ),
        (
            "a role the system does not have",
            lambda m: _forge(
                m,
                predictions=lambda p: {
                    **p,
                    "trace": {**p["trace"], "llm": [{**c, "role": "judge"} for c in p["trace"]["llm"]]},
                },
            ),
            "models: 1992 of 1992 traced LLM calls are for roles the run does not declare",
        ),
    ],
)
def test_forged_identity_cost_and_labels_are_refused(runs, tmp_path: Path, case: str, forge, reason: str) -> None:
    assert verify(runs["zs"][1]).accepted
    bad = _rewrite(runs["zs"][1], tmp_path / "bad.tar.gz", forge, fix_hashes=True)
    verdict = verify(bad)
    assert not verdict.accepted and verdict.tier == "self-reported", case
    assert any(reason in r for r in verdict.reasons), verdict.reasons


def test_reproduction_compares_every_prediction_and_reports_the_reproduced_metrics(runs, tmp_path: Path) -> None:
    """A bundle whose wrong predictions were edited to gold (1% of them, metrics redone to match) passes
    verify, and --reproduce lists every edited sample and reports the honest metrics."""
    from ddibench.registry import get_task
    from ddibench.submission import reproduce

    gold = {s.id: s.target for s in get_task("drugbank_s2").load().split("test")}
    honest = verify(runs["mlp"][1])
    wrong = [sid for sid, p in honest.predictions.items() if p.label != gold[sid]][:20]
    edit = set(wrong)

    def forge(members: dict[str, bytes]) -> None:
        _forge(members, predictions=lambda p: {**p, "label": gold[p["sample_id"]]} if p["sample_id"] in edit else p)

    staged = _rewrite(runs["mlp"][1], tmp_path / "staged.tar.gz", forge)
    recomputed = verify(staged).recomputed  # what the forger puts into results.json
    forged = _rewrite(
        staged,
        tmp_path / "forged.tar.gz",
        lambda m: _forge(m, results=lambda r: r.update(evaluation=recomputed.model_dump(mode="json"))),
    )
    verdict = verify(forged)
    assert verdict.accepted and verdict.tier == "recomputed", verdict.reasons
    assert verdict.recomputed.metrics["accuracy"].value > honest.recomputed.metrics["accuracy"].value

    strict = reproduce(verdict, tmp_path / "again")
    assert not strict.accepted and strict.tier == "recomputed"
    assert strict.reproduction["differing"] == 20 and set(strict.reproduction["differing_ids"]) == edit
    assert any(
        "1,972 of 1,992 predictions identical" in r and "any difference fails" in r and wrong[0] in r
        for r in strict.reasons
    )
    assert strict.recomputed.metrics["accuracy"].value == honest.recomputed.metrics["accuracy"].value

    lenient = reproduce(verify(forged), tmp_path / "again2", tolerance=0.02)
    assert lenient.accepted and lenient.tier == "reproduced" and lenient.reproduction["tolerance"] == 0.02
    assert (
        lenient.recomputed.metrics["accuracy"].value == honest.recomputed.metrics["accuracy"].value
    )  # the honest numbers are shown
    assert all(lenient.predictions[sid].label != gold[sid] for sid in wrong)


def test_reproduction_tells_answers_apart_but_not_float_noise() -> None:
    """Scores within 1e-6 are the same answer, on either side of a rounding boundary; anything else differs."""
    from ddibench.schema import Prediction
    from ddibench.submission import same_answer

    def pred(label: int = 3, **scores: float) -> Prediction:
        return Prediction(sample_id="s", label=label, scores=scores or None)

    assert same_answer(
        pred(a=0.12345649, b=0.5), pred(a=0.12345651, b=0.5)
    )  # rounded to 6 decimals: 0.123456 vs 0.123457
    assert not same_answer(pred(a=0.1234, b=0.5), pred(a=0.1236, b=0.5))
    assert not same_answer(pred(a=0.5), pred(a=0.5, b=0.0))  # another set of labels scored
    assert not same_answer(pred(label=3, a=0.5), pred(label=4, a=0.5))
    assert same_answer(pred(), pred()) and same_answer(None, None)
    assert not same_answer(pred(), None) and not same_answer(pred(a=0.5), pred())


def test_board_add_gives_each_bundle_its_own_verdict(cli, runs, tmp_path: Path) -> None:
    """A mixed batch: hostile bundles are rejected with their reason, the valid ones are added."""
    not_json = _rewrite(
        runs["mlp"][1], tmp_path / "a-not-json.tar.gz", lambda m: m.update({"results.json": b"{not json"})
    )
    as_list = _rewrite(
        runs["mlp"][1], tmp_path / "b-list.tar.gz", lambda m: m.update({"bundle.json": b"[1, 2]"}), fix_hashes=False
    )
    label = _rewrite(
        runs["zs"][1], tmp_path / "c-label.tar.gz", lambda m: _forge(m, predictions=lambda p: {**p, "label": 999})
    )
    garbage = tmp_path / "d-garbage.tar.gz"
    garbage.write_bytes(b"not a tarball at all")
    missing = tmp_path / "e-missing.tar.gz"
    store = tmp_path / "board.duckdb"
    batch = [not_json, runs["mlp"][1], as_list, label, garbage, missing, runs["zs"][1]]
    code, out, err = cli("board", "add", "--store", str(store), *map(str, batch))
    assert code == 1 and "Traceback" not in out + err
    lines = {line.split(":")[0]: line for line in out.splitlines() if ".tar.gz:" in line}
    assert "added" in lines["mlp.tar.gz"] and "added" in lines["zs.tar.gz"]
    assert "results.json: is not JSON" in lines["a-not-json.tar.gz"]
    assert "bundle.json: is not a valid BundleIndex" in lines["b-list.tar.gz"]
    assert "label space" in lines["c-label.tar.gz"]
    assert (
        "not a readable .tar.gz bundle" in lines["d-garbage.tar.gz"] and "does not exist" in lines["e-missing.tar.gz"]
    )
    import duckdb

    with duckdb.connect(str(store), read_only=True) as conn:
        assert sorted(r[0] for r in conn.execute("SELECT system FROM runs").fetchall()) == ["mlp", "zero-shot"]
        trace = conn.execute(
            "SELECT trace FROM samples WHERE run_id = (SELECT run_id FROM runs WHERE system = 'zero-shot') LIMIT 1"
        ).fetchone()[0]
    assert '"response"' in trace and '"messages"' in trace  # the whole trace, for the drill-down


@pytest.fixture(scope="module")
def store(runs, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("store") / "board.duckdb"
    for name in ("mlp", "zs"):
        add_run(path, verify(runs[name][1]))
    preview = verify(runs["limited"][1])
    add_run(path, preview)  # a preview: rejected only for --limit, shown apart
    return path


def test_store_precomputes_ties(store: Path) -> None:
    import duckdb

    conn = duckdb.connect(str(store), read_only=True)
    rows = conn.execute(
        "SELECT system, submittable, best, tied, diff_low, diff_high, primary_value FROM runs"
    ).fetchall()
    conn.close()
    best = [r for r in rows if r[2]]
    assert len(best) == 1 and best[0][1] is True  # one best, and never a --limit preview
    assert best[0][6] == max(r[6] for r in rows if r[1])
    for _system, _submittable, is_best, tied, low, high, _ in rows:
        if not is_best:
            assert low is not None and tied == (low <= 0 <= high)


def test_incremental_ties_equal_a_full_recomputation(store: Path, tmp_path: Path) -> None:
    import duckdb

    from ddibench.results.store import update_ties

    copy = tmp_path / "copy.duckdb"
    shutil.copy(store, copy)
    query = "SELECT run_id, best, tied, diff, diff_low, diff_high FROM runs ORDER BY run_id"
    conn = duckdb.connect(str(copy))
    incremental = conn.execute(query).fetchall()
    update_ties(conn, "drugbank_s2")  # every run against the best, from scratch
    assert conn.execute(query).fetchall() == incremental
    conn.close()


def test_pareto_front_matches_its_definition() -> None:
    import numpy as np
    import pandas as pd

    from ddibench.leaderboard.data import pareto

    rng = np.random.default_rng(3)
    frame = pd.DataFrame(
        {
            "task": rng.choice(["a", "b", "c"], 400),
            "tokens_per_item": rng.integers(0, 40, 400).astype(float),
            "primary_value": rng.integers(0, 30, 400) / 30,
        }
    )
    front = set(pareto(frame).index)
    for i, row in frame.iterrows():
        same = frame[frame["task"] == row["task"]].drop(index=i)
        # dominated: another run at most as costly and at least as good, strictly better on one, or an identical earlier one
        dominated = (
            (same["tokens_per_item"] <= row["tokens_per_item"])
            & (same["primary_value"] >= row["primary_value"])
            & ((same["tokens_per_item"] < row["tokens_per_item"]) | (same["primary_value"] > row["primary_value"]))
        ).any()
        duplicate_kept = any(
            j in front
            for j in same.index[
                (same["tokens_per_item"] == row["tokens_per_item"]) & (same["primary_value"] == row["primary_value"])
            ]
        )
        if i in front:
            assert not dominated and not duplicate_kept, i  # undominated, and one of identical runs
        else:
            assert dominated or duplicate_kept, i
    assert all((g["primary_value"].diff().dropna() > 0).all() for _, g in pareto(frame).groupby("task"))


def _app():
    import ddibench.leaderboard

    return str(Path(ddibench.leaderboard.__file__).parent / "app.py")


def test_app_renders_matrix_provenance_and_drilldown(store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("DDIBENCH_BOARD", str(store))
    at = AppTest.from_file(_app(), default_timeout=120).run()
    assert not at.exception
    matrix = at.table[0].value.map(lambda v: str(v).replace("\xa0", " ").replace("\u2060", ""))
    assert list(matrix.columns) == ["metric", "mlp", "zero-shot", "floors"]  # no preview, no published numbers
    assert sum("★" in str(v) for v in matrix.loc["drugbank_s2"]) == 1
    # an LLM system's cell names its model (in a code span: the submitter's word); the MLP's names none
    assert (
        matrix.loc["drugbank_s2", "zero-shot"].endswith(" · `stub-model`")
        and "·" not in matrix.loc["drugbank_s2", "mlp"]
    )
    # beside the systems, never ranked: the task's floors, in the metric's unit (macro-F1 in %)
    assert (
        matrix.loc["drugbank_s2", "floors"].startswith("majority ")
        and " · random " in matrix.loc["drugbank_s2", "floors"]
    )
    ranked, systems = (frame.value for frame in at.dataframe)
    assert list(ranked["system"]) == ["mlp", "zero-shot"] or list(ranked["system"]) == ["zero-shot", "mlp"]
    assert dict(zip(ranked["system"], ranked["model"])) == {"mlp": "—", "zero-shot": "stub-model"}
    assert list(ranked["rank"]) == [1, 2] and ranked["mark"].iloc[0] == "★ best"
    systems = systems.set_index("system")
    assert systems.loc["mlp", "card"] == "docs/systems/mlp.md" and systems.loc["zero-shot", "paper"] == "—"
    assert not any("Trust tier:" in m.value for m in at.markdown)  # only the open tab runs

    at.session_state["view"] = "Published"
    at.run()
    assert not at.exception
    published = at.dataframe[0].value
    drugbank_s2 = published[published["task"] == "drugbank_s2"]
    shown = set(zip(drugbank_s2["method"], drugbank_s2["model"], drugbank_s2["published"], drugbank_s2["paper"]))
    # every paper's number, in the metric's unit; the reader model a method's name gives in a column of its own
    assert {("EmerGNN", "", "25.0 ± 2.8", "emergnn"), ("EmerGNN", "", "34.2", "cbr-ddi")} <= shown
    assert ("CBR-DDI", "DeepSeek-V3", "40.7", "cbr-ddi") in shown
    assert set(drugbank_s2["link"]) == {"https://arxiv.org/abs/2311.09261", "https://arxiv.org/abs/2505.23034"}

    at.session_state["view"] = "Run details"
    at.run()
    assert not at.exception
    texts = " ".join(m.value for m in at.markdown)
    assert "Trust tier:" in texts and "Gold:" in texts and "Prediction:" in texts
    assert "Against the task's best:" in texts
    assert "**Card:** docs/systems/" in texts and "**Adapter source:** `entry_point ddibench.systems." in texts

    def select(label: str, value: str) -> None:
        next(box for box in at.selectbox if box.label == label).select(value).run()
        assert not at.exception

    import duckdb

    conn = duckdb.connect(str(store), read_only=True)
    preview = conn.execute("SELECT run_id FROM runs WHERE NOT submittable").fetchone()[0]
    conn.close()
    select("system", "zero-shot")
    select("run", preview)
    against = next(m.value for m in at.markdown if m.value.startswith("**Against the task's best:**"))
    assert "(best minus this run, paired bootstrap on shared samples)" in against
    assert against.endswith(": a preview (--limit), never ranked") and not any(m in against for m in "★☆≈")
    assert any(
        info.value.startswith("Not submittable: `no --limit") for info in at.info
    )  # verify's reason, in a code span
    at.session_state["view"] = "Matrix"
    at.sidebar.checkbox[0].check().run()  # show previews: apart, unranked, unmarked
    assert list(at.table[0].value.columns) == ["metric", "mlp", "zero-shot", "floors"]
    previews = at.table[1].value.map(lambda v: str(v).replace("\xa0", " ").replace("\u2060", ""))
    assert len(previews) == 1 and previews["run"].iloc[0] == f"`{preview}`"
    assert previews["model"].iloc[0] == "`stub-model`" and not any(m in previews.to_string() for m in "★☆≈")
    at.sidebar.multiselect[0].select("drugbank_ddi").run()
    assert not at.exception


@needs_chromium
def test_board_in_a_real_headless_browser(store: Path, tmp_path: Path) -> None:
    import duckdb
    from selenium.webdriver.common.by import By

    from ddibench.commands.board import streamlit_command

    conn = duckdb.connect(str(store), read_only=True)
    run_id, sample_id = conn.execute(
        "SELECT r.run_id, s.sample_id FROM runs r JOIN samples s USING (run_id) WHERE r.system = 'mlp' ORDER BY s.sample_id LIMIT 1"
    ).fetchone()
    conn.close()
    port = free_port()
    server = subprocess.Popen(
        streamlit_command(Path(_app()), port),
        env={**os.environ, "DDIBENCH_BOARD": str(store)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    driver = None
    try:
        driver = chrome(tmp_path / "chrome")
        deadline = time.time() + 90
        open_when_up(driver, f"http://127.0.0.1:{port}/?run={run_id}&sample={sample_id}", deadline)
        text = ""
        while time.time() < deadline:
            text = driver.find_element(By.TAG_NAME, "body").text
            if sample_id in text and "Trace" in text:
                break
            time.sleep(1)
        assert sample_id in text and "Gold:" in text and "Trace" in text  # the deep link opened the run view
        driver.find_element(By.XPATH, "//*[normalize-space(text())='Matrix']").click()
        while time.time() < deadline:
            text = driver.find_element(By.TAG_NAME, "body").text
            if "Tasks × systems" in text and "drugbank_s2" in text and " ★" in text:
                break
            time.sleep(1)
        assert "Tasks × systems" in text and "drugbank_s2" in text and " ★" in text  # a matrix cell marked best
        assert "Deploy" not in text  # the board is for reading, not for deploying Streamlit apps
        shots = Path(os.environ.get("DDIBENCH_SCREENSHOTS") or tmp_path)  # set it to keep the screenshots
        shots.mkdir(parents=True, exist_ok=True)
        heatmap = None
        while time.time() < deadline and heatmap is None:
            found = driver.find_elements(By.CSS_SELECTOR, ".vega-embed svg")
            heatmap = found[0] if found else None
            time.sleep(0.5)
        assert heatmap is not None, "the heatmap is not on the page"
        driver.execute_script("arguments[0].scrollIntoView();", heatmap)
        from ddibench.leaderboard.data import HEATMAP_ROW_PX, cells, runs

        frame = runs(store)
        n_tasks = frame["task"].nunique()
        assert heatmap.size["height"] >= HEATMAP_ROW_PX * n_tasks  # rows tall enough to read, axes included
        labels = {t.text for t in heatmap.find_elements(By.TAG_NAME, "text") if t.text}
        assert (
            set(frame["task"]) <= labels and set(frame["system"]) <= labels
        )  # every axis label whole, none clipped or dropped
        assert "majority " in text and "published (not ranked)" not in text  # the floors; papers' numbers apart
        assert "primary metric (%)" in labels  # the colour legend reads in the cells' unit (macro-F1 in %)
        values = [t for t in labels if t.replace(".", "").isdigit()]
        assert len(values) >= len(cells(frame, ("task", "system")))  # every cell carries its value
        driver.save_screenshot(str(shots / "board-matrix.png"))
        driver.find_element(By.XPATH, "//*[normalize-space(text())='Cost vs quality']").click()
        # the cost table is drawn on a canvas: its column names are not page text, the chart's title is
        while (
            time.time() < deadline
            and "Cost per item against quality" not in driver.find_element(By.TAG_NAME, "body").text
        ):
            time.sleep(0.5)
        assert "Cost per item against quality" in driver.find_element(By.TAG_NAME, "body").text
        time.sleep(1)
        driver.save_screenshot(str(shots / "board-cost.png"))
        driver.find_element(By.XPATH, "//*[normalize-space(text())='Run details']").click()
        while time.time() < deadline and "Trust tier" not in driver.find_element(By.TAG_NAME, "body").text:
            time.sleep(0.5)
        assert "Trust tier" in driver.find_element(By.TAG_NAME, "body").text
        time.sleep(1)
        driver.save_screenshot(str(shots / "board-run.png"))
        assert all((shots / f"board-{tab}.png").stat().st_size > 10_000 for tab in ("matrix", "cost", "run"))
    finally:
        if driver is not None:
            driver.quit()
        server.terminate()
        server.wait(timeout=20)


HEATMAP_PAGE = """
import sys
import pandas as pd
import streamlit as st
from ddibench.leaderboard.data import cells, heatmap_height, heatmap_spec

best = cells(pd.read_json(sys.argv[1], orient="records"), ("task", "system"))
st.vega_lite_chart(spec=heatmap_spec(best), width="stretch", height=heatmap_height(best))
"""


@needs_chromium
def test_heatmap_keeps_every_label_of_nine_systems_at_1400_px(store: Path, tmp_path: Path) -> None:
    """Vega-Lite drops axis labels that overlap: at 1,400 px the board's heatmap once showed 5 of 9 system
    names. The real spec, rendered by Streamlit in Chromium, with the store's runs under 9 system and 7
    task names (names as long as the reference systems' and an outside adapter's), shows every one."""
    import pandas as pd
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    from ddibench.commands.board import streamlit_command
    from ddibench.leaderboard.data import runs

    systems = [
        "cbr-ddi",
        "emergnn",
        "k-paths",
        "kaping",
        "majority",
        "mlp",
        "naive-cbr",
        "zero-shot",
        "an-outside-adapter-system",
    ]
    tasks = [
        "drugbank_s0",
        "drugbank_s1",
        "drugbank_s1_cluster",
        "drugbank_s2",
        "twosides_s1",
        "twosides_s2",
        "tox_herg",
    ]
    run = runs(store).iloc[0].to_dict()
    frame = pd.DataFrame([{**run, "task": t, "system": s, "run_id": f"{t}/{s}"} for t in tasks for s in systems])
    frame.to_json(tmp_path / "frame.json", orient="records")
    (tmp_path / "heatmap.py").write_text(HEATMAP_PAGE)
    port = free_port()
    command = [*streamlit_command(tmp_path / "heatmap.py", port), str(tmp_path / "frame.json")]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    driver = None
    try:
        driver = chrome(tmp_path / "chrome")
        deadline = time.time() + 90
        open_when_up(driver, f"http://127.0.0.1:{port}/", deadline)
        labels: set[str] = set()
        while time.time() < deadline and not set(systems + tasks) <= labels:
            try:
                labels = {t.text for t in driver.find_elements(By.CSS_SELECTOR, ".vega-embed svg text") if t.text}
            except StaleElementReferenceException:  # the chart was drawn again meanwhile
                pass
            time.sleep(0.5)
        assert set(systems + tasks) <= labels, f"labels missing: {sorted(set(systems + tasks) - labels)}"
    finally:
        if driver is not None:
            driver.quit()
        server.terminate()
        server.wait(timeout=20)


def test_store_recomputes_floors_and_never_reads_the_bundles(runs, store: Path, tmp_path: Path) -> None:
    """The floors stored for a task are the evaluator's on its whole test split, the same numbers the runner
    computed for a full run; a bundle's own floors are its author's claim and never read; a store written
    before floors were stored is upgraded (the board's reader names the command), then reads on without them
    and gets them when a run is added."""
    import duckdb

    from ddibench.errors import StorageError
    from ddibench.leaderboard.data import floors, matrix
    from ddibench.leaderboard.data import runs as board_runs
    from ddibench.results.store import connect

    honest = {
        name: floor["metrics"]
        for name, floor in json.loads((runs["mlp"][0] / "results.json").read_text())["floors"].items()
    }
    assert set(honest) == {"majority", "uniform_random"}
    stored = floors(store)
    assert {r.name: r.metrics for r in stored.itertuples()} == {k: pytest.approx(v) for k, v in honest.items()}
    assert "for every sample" in stored.set_index("name").loc["majority", "note"]

    def claim_better_floors(results: dict) -> None:
        results["floors"]["majority"]["metrics"]["macro_f1"] = 0.99

    forged = _rewrite(runs["mlp"][1], tmp_path / "forged.tar.gz", _edit_json("results.json", claim_better_floors))
    fresh = tmp_path / "fresh.duckdb"
    add_run(fresh, verify(forged))
    assert floors(fresh).set_index("name").loc["majority", "metrics"]["macro_f1"] == pytest.approx(
        honest["majority"]["macro_f1"]
    )

    old = tmp_path / "old.duckdb"
    shutil.copy(store, old)
    with duckdb.connect(str(old)) as conn:
        conn.execute("DROP TABLE floors")
    with pytest.raises(StorageError, match=r"earlier ddibench \(floors\.task\).*board upgrade"):
        floors(old)
    connect(old).close()  # what 'ddibench board upgrade' does
    assert floors(old).empty and set(matrix(board_runs(old), floors(old))["floors"]) == {""}
    add_run(old, verify(runs["mlp"][1]))
    assert len(floors(old)) == 2


def test_system_info_names_paper_code_and_card() -> None:
    """Every registered system has a card (its docs page); a reimplemented paper names its citation with a
    URL; an outside system, which this installation does not register, is known by its adapter's source."""
    from ddibench.leaderboard.data import DOCS, system_info
    from ddibench.registry import system_names
    from ddibench.runner.records import Manifest

    for name in system_names():
        info = system_info(name)
        assert info.registered and (DOCS.parent / info.card).is_file(), name
    emergnn = system_info("emergnn")
    assert "arXiv 2311.09261" in emergnn.paper and "https://arxiv.org/abs/2311.09261" in emergnn.paper
    assert emergnn.code == "https://github.com/LARS-research/EmerGNN" and emergnn.card == "docs/systems/emergnn.md"
    assert "https://arxiv.org/abs/2505.23034" in system_info("cbr-ddi").paper
    assert system_info("mlp").paper == "" and system_info("majority").card == "docs/systems/baselines.md"
    manifest = Manifest.model_validate(
        {
            "created": "2026-01-01T00:00:00+00:00",
            "ddibench_version": "0.1.0",
            "split": "test",
            "submittable": True,
            "n_samples": 1,
            "sample_ids_sha256": "0" * 64,
            "seeds": {"run": 0, "bootstrap": 0},
            "profile": {"declared": {"name": "cpu"}, "detected": {}},
            "task": {"name": "drugbank_s2", "version": "1.0.0", "data_sha256": "0" * 64},
            "system": {
                "name": "their-system",
                "version": "2.0",
                "config_hash": "0" * 16,
                "provenance": {
                    "distribution": "their-adapter",
                    "version": "2.0.1",
                    "source": "https://github.com/them/adapter",
                    "commit": "abc123",
                },
            },
        }
    )
    outside = system_info("their-system", manifest)
    assert (
        not outside.registered
        and outside.code == "https://github.com/them/adapter"
        and outside.paper == outside.card == ""
    )
    assert outside.provenance["commit"] == "abc123"


def test_a_system_named_like_a_column_of_the_matrix_keeps_its_own(store: Path) -> None:
    """A system's name is data (an outside adapter's name comes with its bundle): one called 'metric' or
    'floors' is shown under its name, marked as a system, and takes nothing from the task's columns."""
    from ddibench.leaderboard.data import floors, matrix, runs

    frame = runs(store)
    renamed = frame.assign(system=frame["system"].map({"mlp": "metric", "zero-shot": "floors"}))
    table = matrix(renamed, floors(store))
    assert list(table.columns) == ["metric", "floors (system)", "metric (system)", "floors"]
    assert table.loc["drugbank_s2", "metric"] == "macro_f1" and table.loc["drugbank_s2", "floors"].startswith(
        "majority "
    )


def test_a_preview_is_never_marked() -> None:
    """The store may mark a preview best (of a task without full runs) or tied with the best: no view shows it."""
    import pandas as pd

    from ddibench.leaderboard.columns import preview_rows, ranked
    from ddibench.leaderboard.data import cell, matrix

    row = {
        "run_id": "r",
        "task": "t",
        "system": "s",
        "variant": "",
        "model": "embedded:qwen2.5-coder-1.5b-instruct",
        "n": 20,
        "primary_metric": "macro_f1",
        "primary_unit": "fraction",
        "primary_value": 0.3,
        "ci_low": 0.2,
        "ci_high": 0.4,
        "best": True,
        "tied": True,
        "collapsed": False,
        "tier": "recomputed",
        "higher_is_better": True,
        "scoring_variant": "",
    }
    assert cell(pd.Series({**row, "submittable": True})) == "30.0 [20.0, 40.0] ★"
    assert cell(pd.Series({**row, "best": False, "submittable": True})) == "30.0 [20.0, 40.0] ≈"
    assert cell(pd.Series({**row, "submittable": False})) == "30.0 [20.0, 40.0]"
    assert cell(pd.Series({**row, "best": False, "submittable": False})) == "30.0 [20.0, 40.0]"
    previews = pd.DataFrame([{**row, "submittable": False}])
    assert matrix(previews).empty and ranked(previews).empty  # never ranked
    shown = preview_rows(previews).iloc[0]
    assert shown["value [95% CI]"] == "30.0 [20.0, 40.0]" and shown["model"] == "qwen2.5-coder-1.5b-instruct"
    full = pd.DataFrame([{**row, "submittable": True}])
    assert matrix(full, models=True).loc["t", "s"] == "30.0 [20.0, 40.0] ★ · qwen2.5-coder-1.5b-instruct"
    assert matrix(full).loc["t", "s"] == "30.0 [20.0, 40.0] ★"  # the README's table, as before


def test_short_model_names_the_model_without_provider_endpoint_or_path() -> None:
    from ddibench.leaderboard.data import short_model

    assert short_model("embedded:qwen2.5-coder-1.5b-instruct") == "qwen2.5-coder-1.5b-instruct"
    assert short_model("openai:gpt-4o@https://api.openai.com/v1") == "gpt-4o"
    assert short_model("vllm:Qwen/Qwen2.5-7B-Instruct@http://127.0.0.1:8000/v1") == "Qwen2.5-7B-Instruct"
    assert short_model("ollama:llama3:8b") == "llama3:8b"
    assert short_model("—") == short_model("") == short_model(None) == ""
    assert len(short_model("x:" + "a" * 100)) == 40


def test_cost_chart_has_one_unit_per_axis(store: Path) -> None:
    """Fractions are drawn in % on an axis that says so; a chart never mixes units (one per unit)."""
    from ddibench.leaderboard.data import cells, cost_spec, pareto, runs

    best = cells(runs(store))
    spec = cost_spec(best, pareto(best))
    points = spec["layer"][0]
    assert points["encoding"]["y"]["title"] == "primary metric (%)"
    by_run = dict(zip(best["system"], best["primary_value"]))
    for point in points["data"]["values"]:
        assert point["value"] == pytest.approx(100 * by_run[point["system"]], abs=0.05)
    mixed = best.assign(primary_unit=["fraction", "score", *best["primary_unit"][2:]])
    with pytest.raises(ValueError, match="one chart per unit"):
        cost_spec(mixed, pareto(mixed))


def test_a_priced_model_gets_dollars_per_item_and_its_metric_per_dollar(
    runs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a price for the stub's model ($DDIBENCH_PRICES over the shipped table), the store prices the LLM run
    from its recorded tokens, and the cost table writes its primary metric per dollar beside the cost; the trained
    run is free and gets none."""
    from ddibench.leaderboard.data import cells, cost_table, per_dollar
    from ddibench.leaderboard.data import runs as read_runs

    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"stub-model": {"prompt": 0.5, "completion": 2.0}}))
    monkeypatch.setenv("DDIBENCH_PRICES", str(prices))
    path = tmp_path / "board.duckdb"
    for name in ("mlp", "zs"):
        add_run(path, verify(runs[name][1]))
    best = cells(read_runs(path)).set_index("system")
    cost = json.loads((runs["zs"][0] / "results.json").read_text())["cost"]
    (role,) = cost["per_item"]
    item = cost["per_item"][role]
    usd = (item["prompt_tokens"] * 0.5 + item["completion_tokens"] * 2.0) / 1000
    assert best.loc["zero-shot", "usd_per_item"] == pytest.approx(usd)
    shown = 100 * best.loc["zero-shot", "primary_value"]
    assert per_dollar(best.loc["zero-shot"]) == f"{round(shown, 1) / usd:,.0f} macro_f1 points per $ an item"
    assert per_dollar(best.loc["mlp"]) == ""
    table = cost_table(best.reset_index()).set_index("system")
    assert table.loc["zero-shot", "metric per dollar"].endswith("points per $ an item")
    assert table.loc["mlp", "metric per dollar"] == ""


def test_board_serve_listens_on_loopback_and_stops_whole(store: Path) -> None:
    """`board serve` binds 127.0.0.1 by default, and SIGTERM to it leaves no Streamlit child serving."""
    import signal
    import socket
    import urllib.request

    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "ddibench", "board", "serve", "--store", str(store), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.time() + 90
        up = False
        while time.time() < deadline and not up:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as resp:
                    up = resp.status == 200
            except OSError:
                time.sleep(0.5)
        assert up, "the board did not start"
        listening = [
            line.split()[1] for line in Path("/proc/net/tcp").read_text().splitlines()[1:] if line.split()[3] == "0A"
        ]
        assert f"0100007F:{port:04X}" in listening and f"00000000:{port:04X}" not in listening  # loopback only
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        time.sleep(1)
        with socket.socket() as sock:
            assert sock.connect_ex(("127.0.0.1", port)) != 0  # nothing serves the port any more
    finally:
        if proc.poll() is None:
            proc.kill()
