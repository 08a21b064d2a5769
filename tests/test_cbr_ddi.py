"""CBR-DDI and the LLM baselines it is compared with (naive-cbr, kaping, k-paths), against a real
OpenAI-compatible server on loopback (the stub): retrieval, leakage, ablations, bad answers."""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch", reason="cbr-ddi needs the 'ml' extra")
pytest.importorskip("sentence_transformers", reason="cbr-ddi needs the 'embed' extra")

from ddibench.artifacts import ArtifactStore  # noqa: E402
from ddibench.llm.stub import StubConfig, running_stub  # noqa: E402
from ddibench.profiles import get_profile  # noqa: E402
from ddibench.registry import get_task  # noqa: E402
from ddibench.system import RunContext, TrainingView  # noqa: E402
from ddibench.systems.cbr_ddi.repository import Case, Repository, k_medoids, normalise, representative_sample  # noqa: E402

GNN = 'gnn={"max_epochs": 1, "train_pairs_per_epoch": 128, "valid_pairs": 64}'
SMALL_PAPER = [  # a small budget with the default (the paper's) GNN features: the catalogue's descriptions
    "-C",
    "repository_size=24",
    "-C",
    "refine_cases=4",
    "-C",
    "lambda_valid_pairs=6",
    "-C",
    "min_per_class=1",
    "-C",
    GNN,
]
# Morgan features spare a run the 1,710 descriptions of the catalogue (about 25 s with the stub on 2 cores): the tests
# of other stages use them, the end-to-end test and those of the description features do not
SMALL = [*SMALL_PAPER, "-C", "gnn_features=morgan"]
CATALOGUE = 1710  # drugs of the DrugBank tasks' catalogue: the GNN module's nodes


def results(run_dir: Path) -> dict:
    return json.loads((run_dir / "results.json").read_text())


def journal(run_dir: Path) -> list[dict]:
    return [json.loads(line)["prediction"] for line in (run_dir / "journal.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def s2():
    task = get_task("drugbank_s2")
    return task, task.load()


def test_cbr_ddi_end_to_end_and_repository_reuse(cli, stub, tmp_path: Path, fresh_cache: Path) -> None:
    args = [
        "run",
        "-s",
        "cbr-ddi",
        "-t",
        "drugbank_s2",
        "--limit",
        "5",
        "-m",
        f"vllm:stub-model@{stub.base_url}",
        "--profile",
        "cpu",
        *SMALL_PAPER,
    ]
    code, out, err = cli(*args, "--run-dir", str(tmp_path / "a"))
    assert code == 0, err
    res = results(tmp_path / "a")
    info = res["system_info"]
    assert info["repository_built"] is True and info["repository"]["built_from"] == 24
    assert info["repository"]["refinement"]["checked"] == 4
    assert 0 < info["repository"]["cases"] <= 24 and "lambda" in info
    # the GNN module gets the profile's EmerGNN budget for this task (drugbank_s2's own schedule), under -C gnn=
    gnn = info["gnn"]["resolved_config"]
    cpu = get_profile("cpu")
    assert gnn["epoch_per_test"] == cpu.budget_for("emergnn", "drugbank_s2")["epoch_per_test"]
    assert gnn["epoch_per_test"] != cpu.budget_for("emergnn")["epoch_per_test"]
    assert gnn["max_epochs"] == 1 and gnn["predict_facts"] == "train"
    assert gnn["feature"] == "external" and info["gnn"]["node_features"]["drugs"] == CATALOGUE  # the descriptions
    assert set(res["cost"]["per_item"]) == {"generator", "describer"}
    # every phase the run went through is timed, in order (benchmarks/paper_scale.py reads them)
    phases = info["phases"]
    assert [p["phase"] for p in phases] == [
        "catalogue descriptions",
        "catalogue embeddings",
        "GNN training",
        "case drug descriptions",
        "case pair representations (GNN)",
        "insights",
        "case embeddings",
        "refinement",
        "K-medoids sampling",
        "repository save",
        "choice of lambda",
        "queries",
    ]
    assert all(p["wall_s"] >= 0 and p["cpu_s"] >= 0 for p in phases)
    assert all(a["started_at"] <= b["started_at"] for a, b in zip(phases, phases[1:]))
    # and what each role spent in it (benchmarks/headline.py reads them): the LLM phases, and only those
    llm = {p["phase"]: p["llm"] for p in phases}
    assert set(llm["catalogue descriptions"]) == {"describer"}
    described = llm["catalogue descriptions"]["describer"]
    assert described["calls"] + described["cache_hits"] == CATALOGUE and described["prompt_tokens"] > 0
    assert set(llm["insights"]) == {"describer"} and llm["insights"]["describer"]["completion_tokens"] > 0  # its role
    assert llm["catalogue embeddings"] == llm["GNN training"] == llm["K-medoids sampling"] == {}
    assert llm["queries"]["generator"]["calls"] == 5
    # the queries' phase holds exactly the calls the journalled predictions trace
    queried = {role: r["calls"] + r["cache_hits"] for role, r in llm["queries"].items()}
    assert queried == {role: r["calls"] for role, r in res["cost"]["by_role"].items()}, (llm, res["cost"])
    for pred in journal(tmp_path / "a"):
        trace = pred["trace"]
        assert len(trace["cases"]) == 5 and len(trace["candidates"]) == 3
        assert pred["label"] in [c[0] for c in trace["candidates"]]  # the answer is one of the GNN's candidates
        assert pred["rationale"] and trace["llm"][-1]["response"] == pred["text"]
        assert trace["descriptions"][0]
    code, _, err = cli(*args, "--run-dir", str(tmp_path / "b"))
    assert code == 0, err
    again = results(tmp_path / "b")["system_info"]
    assert again["repository_built"] is False and again["gnn"]["loaded_from_cache"] is True
    assert "insights" not in [p["phase"] for p in again["phases"]]  # a repository loaded: none of its phases ran
    # the texts every run embeds whole are read back from the store, and lam comes out the same from them
    stored = info["text_vectors"]
    assert {k: (v["texts"], v["built"]) for k, v in stored.items()} == {
        "catalogue": (CATALOGUE, True),
        "validation pairs": (6, True),
    }
    assert {k: (v["built"], v["artifact"]) for k, v in again["text_vectors"].items()} == {
        k: (False, v["artifact"]) for k, v in stored.items()
    }
    assert again["lambda"] == info["lambda"]
    assert again["gnn"]["node_features"]["sha256"] == info["gnn"]["node_features"]["sha256"]


@pytest.mark.parametrize(
    ("switches", "check"),
    [
        (["-C", "use_cases=false"], lambda t: t["cases"] == []),
        (["-C", "use_candidates=false"], lambda t: len(t["candidates"]) == 20),  # all 86 offered; trace keeps 20
        (["-C", "use_paths=false"], lambda t: t["paths"] == []),
        (["-C", "lam=1", "-C", "k_cases=2"], lambda t: len(t["cases"]) == 2 and t["lambda"] == 1.0),
        (["-C", "repository_size=0"], lambda t: t["cases"] == []),
    ],
)
def test_ablations_are_switches(cli, stub, tmp_path: Path, switches: list[str], check) -> None:
    code, _, err = cli(
        "run",
        "-s",
        "cbr-ddi",
        "-t",
        "drugbank_s2",
        "--limit",
        "2",
        "-m",
        f"vllm:stub-model@{stub.base_url}",
        *SMALL,
        *switches,
        "--run-dir",
        str(tmp_path / "r"),
    )
    assert code == 0, err
    assert all(check(p["trace"]) for p in journal(tmp_path / "r"))


def _run_args(task: str, limit: int, *extra: str) -> list[str]:
    return ["run", "-s", "cbr-ddi", "-t", task, "--limit", str(limit), *SMALL, *extra]


def _forecast(task: str, limit: int, model: str | None, seed: int = 0, use_cache: bool = True, **config):  # noqa: ANN003, ANN202
    from ddibench.llm import parse_model_options
    from ddibench.runner.forecast import forecast
    from ddibench.runner.plan import RunRequest

    small = {
        "repository_size": 24,
        "refine_cases": 4,
        "lambda_valid_pairs": 6,
        "min_per_class": 1,
        "gnn": json.loads(GNN.split("=", 1)[1]),
        "gnn_features": "morgan",  # as SMALL
    }
    models = parse_model_options([model] if model else [])
    config = {**small, **config}
    return forecast(
        RunRequest(
            task=task, system="cbr-ddi", models=models, limit=limit, config=config, seed=seed, use_cache=use_cache
        )
    )


def test_without_cases_no_repository_is_built_and_no_lam_chosen(cli, tmp_path: Path, fresh_cache: Path) -> None:
    """use_cases=false: the only LLM calls are the query drugs' descriptions and the answers, as the plan counts."""
    from ddibench.systems.cbr_ddi import prompts

    with running_stub(StubConfig()) as server:
        model = f"vllm:stub-model@{server.base_url}"
        args = _run_args("drugbank_s2", 3, "-C", "use_cases=false", "-m", model, "--no-cache")
        code, _, err = cli(*args, "--run-dir", str(tmp_path / "r"))
        assert code == 0, err
        systems = [body["messages"][0]["content"] for body in server.requests]
    res = results(tmp_path / "r")
    info = res["system_info"]
    assert not {"repository", "repository_built", "lambda"} & set(info)
    assert not (fresh_cache / "artifacts" / "cbr-ddi-repository").exists()
    preds = journal(tmp_path / "r")
    drugs = {(d["node_id"], d["name"]) for p in preds for d in _pair_of(tmp_path / "r", p["sample_id"])}
    assert systems.count(prompts.DESCRIBE_SYSTEM) == len(drugs)  # the query drugs only: no case or validation drug
    assert len(systems) == len(drugs) + 3  # and one answer a query: no insight, no refinement
    for pred in preds:
        trace = pred["trace"]
        assert trace["cases"] == [] and trace["context_labels"] == [] and trace["lambda"] is None
        assert "Solved cases" not in trace["llm"][-1]["messages"][1]["content"]
    planned = _forecast("drugbank_s2", 3, model, use_cases=False)
    assert [c.phase.name for c in planned.phases if c.phase.calls] == ["describing query drugs", "answering queries"]
    assert planned.calls("describer") == len(drugs) and planned.calls("generator") == 3
    assert not any("lam is chosen" in d for d in res["manifest"]["system"]["deviations"])


def _pair_of(run_dir: Path, sample_id: str) -> list[dict]:
    """The two drugs of a run's sample, as the task gives them."""
    task = get_task(json.loads((run_dir / "run.json").read_text())["task"]["name"])
    sample = next(s for split in ("valid", "test") for s in task.load().split(split) if s.id == sample_id)
    return [{"node_id": d.node_id, "name": d.name} for d in (sample.pair.head, sample.pair.tail)]


def test_without_paths_no_path_is_extracted_for_cases_or_queries(
    cli, stub, tmp_path: Path, fresh_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ddibench.systems.emergnn import EmerGNNSystem

    def no_paths(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("use_paths=false extracted a path")

    monkeypatch.setattr(EmerGNNSystem, "explain", no_paths)
    args = _run_args("drugbank_s2", 2, "-C", "use_paths=false", "-m", f"vllm:stub-model@{stub.base_url}")
    code, _, err = cli(*args, "--run-dir", str(tmp_path / "r"))
    assert code == 0, err
    info = results(tmp_path / "r")["system_info"]
    assert info["repository_built"] is True  # built here (a fresh cache), with no path
    artifact = Path(info["repository"]["artifact"])
    assert json.loads((artifact / "key.json").read_text())["config"]["use_paths"] is False
    assert all(case.paths == [] for case in Repository.load(artifact).cases)
    assert all(p["trace"]["paths"] == [] for p in journal(tmp_path / "r"))


def test_the_gnn_module_alone_answers_its_top_candidates_with_no_model(
    cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """answer=gnn on Morgan features needs no -m and starts no model server; its answers are the GNN's first
    candidates, recorded as the full system records them; the plan counts no LLM call, and the bundle verifies
    with no model roles."""
    from ddibench.llm._pool import LLMPool
    from ddibench.submission import submit, verify

    def no_server(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("a model server was started")

    monkeypatch.setattr(LLMPool, "start", no_server)
    for task, limit in (("drugbank_s2", 4), ("twosides_s2", 2)):
        run_dir = tmp_path / task
        code, out, err = cli(*_run_args(task, limit, "-C", "answer=gnn"), "--run-dir", str(run_dir))
        assert code == 0, err
        assert "qwen2.5-coder" not in out.strip().splitlines()[-1]  # no reader to advise on: no model ran
        res = results(run_dir)
        assert res["manifest"]["models"] == {} and json.loads((run_dir / "run.json").read_text())["models"] == {}
        assert not {"repository", "lambda"} & set(res["system_info"])
        assert any("GNN-only ablation" in d for d in res["manifest"]["system"]["deviations"])
        for pred in journal(run_dir):
            trace = pred["trace"]
            assert "llm" not in trace and trace["cases"] == [] and trace["paths"] == []
            scores = [c[1] for c in trace["candidates"]]
            assert scores == sorted(scores, reverse=True)
            ranked = [c[0] for c in trace["candidates"]]
            if task == "drugbank_s2":
                assert len(ranked) == 3 and pred["label"] == ranked[0]
            else:  # the top 5 of the GNN's 10 candidates
                assert len(ranked) == 10 and pred["ranked"] == ranked[:5]
        planned = _forecast(task, limit, None, answer="gnn")
        assert planned.calls("generator") == planned.calls("describer") == 0
        assert all(c.phase.role is None for c in planned.phases)
        verdict = verify(submit(run_dir, tmp_path / f"{task}.tar.gz", compact=True))
        assert verdict.is_preview(), verdict.reasons  # the system check accepts a run that names no model


def test_retrieval_alone_votes_the_cases_labels_from_a_per_type_repository_and_reports_coverage_by_lam(
    cli, tmp_path: Path, fresh_cache: Path
) -> None:
    """answer=cases with repository_per_type=1: one case of every training type, no insight and no answer call
    (the describer only, as the plan counts); each answer is the label its top-K cases carry most often; every trace
    records the cases' labels at each lam of the grid, and `report --ceilings` (from the run and from a compact
    bundle) prints coverage by lam, equal to what the traces give."""
    from ddibench.submission import submit
    from ddibench.systems.cbr_ddi import prompts

    run_dir = tmp_path / "r"
    with running_stub(StubConfig()) as server:
        model = f"vllm:stub-model@{server.base_url}"
        args = _run_args("drugbank_s2", 6, "-C", "answer=cases", "-C", "repository_per_type=1", "-m", model)
        code, _, err = cli(*args, "--run-dir", str(run_dir))
        assert code == 0, err
        systems = [body["messages"][0]["content"] for body in server.requests]
        asked = [body["messages"][1]["content"] for body in server.requests]
    assert set(systems) == {prompts.DESCRIBE_SYSTEM}  # no insight, no refinement, no answer
    res = results(run_dir)
    data = get_task("drugbank_s2").load()
    types = {s.label for s in data.split("train")}
    artifact = Path(res["system_info"]["repository"]["artifact"])
    cases = Repository.load(artifact).cases
    assert sorted(c.label for c in cases) == sorted(types)  # one case of each training type
    assert all(c.insight == "" and c.paths == [] for c in cases)
    key = json.loads((artifact / "key.json").read_text())
    assert key["insights"] is False and key["repository_per_type"] == 1
    assert "sampling" not in res["system_info"]["repository"] and "refinement" not in res["system_info"]["repository"]
    assert any("retrieval alone" in d for d in res["manifest"]["system"]["deviations"])
    gold = {s.id: s.label for s in data.split("test")}
    by_lam: dict[str, list[float]] = {}
    for pred in journal(run_dir):
        trace = pred["trace"]
        stated = trace["context_labels"]
        assert len(stated) == 5 and stated == trace["context_labels_by_lambda"][str(float(trace["lambda"]))]
        top = max(stated, key=lambda label: (stated.count(label), -stated.index(label)))
        assert pred["valid"] and pred["label"] == top
        assert set(trace["context_labels_by_lambda"]) == {"0.0", "0.25", "0.5", "0.75", "1.0"}
        for lam, labels in trace["context_labels_by_lambda"].items():
            by_lam.setdefault(lam, []).append(float(gold[pred["sample_id"]] in labels))
    planned = _forecast("drugbank_s2", 6, model, answer="cases", repository_per_type=1)
    # a query drug met among the cases is answered by the (fresh) response cache: one call per distinct drug
    assert planned.calls("generator") == 0 and planned.calls("describer") == len(set(asked))

    bundle = submit(run_dir, tmp_path / "b.tar.gz", compact=True)
    for where in (run_dir, bundle):
        code, out, _ = cli("report", "--ceilings", "--json", str(where))
        assert code == 0
        (found,) = json.loads(out)
        assert found["coverage_by_lambda"] == pytest.approx({k: sum(v) / len(v) for k, v in by_lam.items()})
        assert found["lambda"] == str(float(res["system_info"]["lambda"]["chosen"]))
    code, out, _ = cli("report", "--ceilings", str(bundle))
    assert code == 0 and "gold among the retrieved cases' labels by lambda: 0.0 " in out and "(the run's)" in out


@pytest.mark.parametrize(
    ("switches", "named"),
    [
        (["-C", "answer=cases", "-C", "sampling=true"], "nothing to sampling"),
        (["-C", "answer=cases", "-C", "use_cases=false"], "retrieves none"),
    ],
)
def test_retrieval_alone_refuses_switches_it_cannot_honour(
    cli, stub, tmp_path: Path, switches: list[str], named: str
) -> None:
    code, _, err = cli(*_run_args("drugbank_s2", 2, *switches, "-m", f"vllm:stub-model@{stub.base_url}"))
    assert code == 2 and named in err and len(err.strip().splitlines()) == 1, err


def test_description_features_describe_every_catalogue_drug_and_key_the_gnn_by_them(
    cli, tmp_path: Path, fresh_cache: Path
) -> None:
    """The paper's GNN features: the describer describes each drug of the catalogue once (the plan counts the same),
    the GNN trains on their embeddings (one row a drug, the encoder's width), a second run is served by the caches,
    and other descriptions train another GNN (the feature matrix's hash is in its artifact key)."""
    from ddibench.embeddings import shared_encoder
    from ddibench.runner.forecast import render
    from ddibench.systems.cbr_ddi import prompts

    def run(server, name: str, *extra: str) -> dict:  # noqa: ANN001 - a StubServer
        args = _run_args("drugbank_s2", 2, "-C", "gnn_features=descriptions", "-C", "answer=gnn", *extra)
        code, _, err = cli(*args, "-m", f"vllm:stub-model@{server.base_url}", "--run-dir", str(tmp_path / name))
        assert code == 0, err
        return results(tmp_path / name)

    def plan(server, **options):  # noqa: ANN001, ANN003, ANN202 - the plan of the same run
        model = f"vllm:stub-model@{server.base_url}"
        return _forecast("drugbank_s2", 2, model, answer="gnn", gnn_features="descriptions", **options)

    with running_stub(StubConfig()) as server:
        assert plan(server).cached() == 0  # an empty cache: every description is a call to make
        first = run(server, "a")
        # the plan looks the same requests up and finds every answer, for any seed; none under --no-cache
        assert plan(server).cached("describer") == plan(server, seed=1).cached() == CATALOGUE
        assert plan(server, use_cache=False).cached() == 0
        assert f"all {CATALOGUE:,} answered by the response cache" in "\n".join(render(plan(server)))
        systems = [body["messages"][0]["content"] for body in server.requests]
        asked = [body["messages"][1]["content"] for body in server.requests]
        assert systems == [prompts.DESCRIBE_SYSTEM] * CATALOGUE and len(set(asked)) == CATALOGUE
        again = run(server, "b")
        assert len(server.requests) == CATALOGUE  # every description from the response cache
        reseeded = run(server, "b1", "--seed", "1")  # the run seed draws and trains; it never re-describes
        assert len(server.requests) == CATALOGUE
    features = first["system_info"]["gnn"]["node_features"]
    assert features["drugs"] == CATALOGUE and features["dim"] == shared_encoder("minilm").dim == 384
    assert first["manifest"]["models"].keys() == {"describer"}  # the module alone still needs the describer
    assert again["system_info"]["gnn"]["loaded_from_cache"] is True
    assert again["system_info"]["gnn"]["node_features"]["sha256"] == features["sha256"]
    assert reseeded["system_info"]["gnn"]["node_features"]["sha256"] == features["sha256"]
    artifact = Path(first["system_info"]["gnn"]["artifact"])
    assert json.loads((artifact / "key.json").read_text())["node_features_sha256"] == features["sha256"]
    with running_stub(StubConfig(reply="echo")) as server:  # other descriptions (the prompt itself)
        other = run(server, "c")
    assert other["system_info"]["gnn"]["loaded_from_cache"] is False
    assert other["system_info"]["gnn"]["node_features"]["sha256"] != features["sha256"]
    assert Path(other["system_info"]["gnn"]["artifact"]) != artifact
    planned = _forecast(
        "drugbank_s2", 2, "vllm:stub-model@http://127.0.0.1:1/v1", answer="gnn", gnn_features="descriptions"
    )
    assert [(c.phase.name, c.phase.calls) for c in planned.phases if c.phase.calls] == [
        ("describing every drug (the GNN module's features)", CATALOGUE)
    ]
    assert planned.calls("generator") == 0


def test_the_full_plan_describes_the_catalogue_first_and_no_drug_again() -> None:
    """With description features, the case, validation and query drugs are among the catalogue's, described before
    the GNN module trains: the later phases count no description call."""
    model = "vllm:stub-model@http://127.0.0.1:1/v1"
    paper = _forecast("drugbank_s2", 3, model, gnn_features="descriptions")
    morgan = _forecast("drugbank_s2", 3, model)
    described = {c.phase.name: c.phase.calls for c in paper.phases if c.phase.name.startswith("describing")}
    assert described == {"describing every drug (the GNN module's features)": CATALOGUE}
    assert "describing every drug (the GNN module's features)" not in [c.phase.name for c in morgan.phases]
    insights = paper.calls("describer") - CATALOGUE  # the insights and rewrites, the same with either features
    assert insights == morgan.calls("describer") - sum(
        c.phase.calls for c in morgan.phases if c.phase.name.startswith("describing")
    )
    assert paper.calls("generator") == morgan.calls("generator")


def _gnn_key(s2, **config) -> tuple[str, str]:  # noqa: ANN001, ANN003
    """The GNN module's configuration hash and artifact key hash under a cbr-ddi configuration (drugbank_s2, the
    cpu profile, the tests' small GNN budget, seed 0), without training it."""
    from ddibench.hashing import config_hash
    from ddibench.kg import load_kg
    from ddibench.system import system_config_hash
    from ddibench.systems.cbr_ddi import CBRDDISystem

    task, data = s2
    view = TrainingView(task, data.split("train"), data.split("valid"), data.resources)
    ctx = RunContext(task=task, profile=get_profile("cpu"), seed=0, artifacts=ArtifactStore(Path(tempfile.mkdtemp())))
    system = CBRDDISystem.build(
        get_profile("cpu").budget_for("cbr-ddi", task.name), {"gnn": json.loads(GNN.split("=", 1)[1]), **config}
    )
    gnn = system.gnn_module(view, ctx)
    if gnn.config.feature == "external":
        gnn.use_node_features(np.eye(len(data.resources["drugs"].drugs), 4, dtype=np.float32))
    cfg = gnn.resolved(task.setting)
    return system_config_hash(gnn), config_hash(gnn._artifact_key(view, cfg, load_kg("drugbank"), 0))


def test_morgan_features_key_the_gnn_module_as_before(s2) -> None:
    """gnn_features=morgan is the GNN module every run made before the key: the same EmerGNN configuration and
    artifact key (computed with ddibench at 6cc933a, before description features), so its trained models and the
    repositories built on them are reused; description features key another model."""
    before = ("9ad1990c8a25948c", "1cc4142a71275106")  # drugbank_s2, the cpu profile, GNN above, seed 0
    assert _gnn_key(s2, gnn_features="morgan") == before
    assert _gnn_key(s2)[0] != before[0] and _gnn_key(s2)[1] != before[1]


def test_a_recorded_configuration_without_gnn_features_reads_as_morgan() -> None:
    """Every shipped cbr-ddi run was made before gnn_features, with Morgan features: its record (no such key) is
    accepted as it is, reads as morgan for its roles, its board variant and a reproduction, and keeps its hash;
    a new run records the key, so a default run never shares a configuration hash with a recorded one."""
    import tarfile

    from ddibench.hashing import config_hash
    from ddibench.runner.records import RunIdentity
    from ddibench.submission.checks import _check_system
    from ddibench.submission.verdict import Verdict
    from ddibench.systems.cbr_ddi import CBRDDIConfig, CBRDDISystem

    runs = []
    for path in sorted((Path(__file__).resolve().parent.parent / "results").glob("*/cbr-ddi/*.tar.gz")):
        with tarfile.open(path) as bundle:
            runs.append(RunIdentity.model_validate(json.load(bundle.extractfile("run.json"))))
    before = [run for run in runs if "gnn_features" not in run.system.config]
    assert len(before) == 4  # the four published before the key existed; later ones record it
    assert all(run.system.config["gnn_features"] in ("descriptions", "morgan") for run in runs if run not in before)
    for run in before:
        recorded = run.system.config
        config = CBRDDIConfig.from_record(recorded)
        assert config.gnn_features == "morgan" and CBRDDISystem.used_roles(config) == ("generator", "describer")
        assert CBRDDISystem.variant(recorded).endswith("gnn_features=morgan")
        verdict = Verdict(False, "self-reported")
        _check_system(verdict, run)
        assert not verdict.reasons, verdict.reasons
        assert config_hash({"system": "cbr-ddi", "version": "1.0.0", "config": recorded}) == run.system.config_hash
    default = CBRDDIConfig().model_dump(mode="json")
    assert default["gnn_features"] == "descriptions" and CBRDDISystem.variant(default) == ""
    assert CBRDDIConfig.from_record(default).gnn_features == "descriptions"
    morgan = CBRDDIConfig(gnn_features="morgan").model_dump(mode="json")
    assert morgan != {k: v for k, v in morgan.items() if k != "gnn_features"}  # recorded, not left out at a value
    with pytest.raises(ValueError):
        CBRDDIConfig.from_record({**default, "gnn_features": "fingerprints"})


def test_roles_and_deviations_follow_the_gnn_features() -> None:
    from ddibench.systems.cbr_ddi import CBRDDIConfig, CBRDDISystem

    roles = CBRDDISystem.used_roles
    assert roles(CBRDDIConfig(answer="gnn")) == ("describer",)  # the module alone still describes the catalogue
    assert roles(CBRDDIConfig(answer="gnn", gnn_features="morgan")) == ()
    assert roles(CBRDDIConfig()) == roles(CBRDDIConfig(gnn_features="morgan")) == ("generator", "describer")

    def deviations(**config) -> list[str]:  # noqa: ANN003
        return CBRDDISystem(CBRDDIConfig(**config)).deviations()

    morgan_line = [d for d in deviations(gnn_features="morgan") if "Morgan fingerprints" in d]
    assert len(morgan_line) == 1 and "descriptions" in morgan_line[0]
    assert not any("Morgan" in d for d in deviations())
    for config in ({}, {"answer": "gnn"}, {"use_cases": False}):  # the encoder embeds the GNN's features
        assert any("MiniLM" in d and "GNN module's drug features" in d for d in deviations(**config)), config
    assert not any("MiniLM" in d for d in deviations(answer="gnn", gnn_features="morgan"))  # no encoder used


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ("I cannot tell which one.", "no option number"),
        ("It is either 1 or 2.", "names 2 options"),
        ("NONE", "no option number"),
    ],
)
def test_bad_answers_are_counted_not_crashes(cli, tmp_path: Path, reply: str, reason: str) -> None:
    with running_stub(StubConfig(reply=reply)) as stub:
        code, _, err = cli(
            "run",
            "-s",
            "cbr-ddi",
            "-t",
            "drugbank_s2",
            "--limit",
            "3",
            "-m",
            f"vllm:stub-model@{stub.base_url}",
            *SMALL,
            "--no-cache",
            "--run-dir",
            str(tmp_path / "r"),
        )
    assert code == 0, err
    res = results(tmp_path / "r")
    assert res["evaluation"]["n_invalid"] == 3
    assert reason in res["evaluation"]["invalid_examples"][0]["error"]
    assert res["system_info"]["counters"]["invalid_answers"] == 3
    if reply == "NONE":  # the LLM declined every insight: cases keep an empty one
        assert res["system_info"]["repository"]["empty_insights"] == 24


def test_cut_off_answer_is_invalid_with_its_reason() -> None:
    from ddibench.llm import ChatResult
    from ddibench.tasks.drugbank import load_labels
    from ddibench.toolkit.label_choice import answer_to_prediction, option_texts

    options = option_texts(load_labels())[5:8]
    cut = ChatResult('{"mechanism": "Both inhibit CYP3A4 and so the', "length", 10, 24, 0.1, False, "m")
    pred = answer_to_prediction("s", cut, options, [5, 6, 7], {})
    assert not pred.valid and "cut off at the token limit" in (pred.error or "")
    whole = ChatResult('{"mechanism": "x", "type": 2}', "stop", 10, 24, 0.1, False, "m")
    assert answer_to_prediction("s", whole, options, [5, 6, 7], {}).label == 6


@pytest.mark.parametrize("system", ["naive-cbr", "kaping", "k-paths"])
def test_baselines_run_with_their_context(cli, stub, tmp_path: Path, system: str) -> None:
    code, _, err = cli(
        "run",
        "-s",
        system,
        "-t",
        "drugbank_s2",
        "--limit",
        "4",
        "-m",
        f"vllm:stub-model@{stub.base_url}",
        "--run-dir",
        str(tmp_path / "r"),
    )
    assert code == 0, err
    preds = journal(tmp_path / "r")
    context = [p["trace"]["context"] for p in preds]
    key = {"naive-cbr": "examples", "kaping": "facts", "k-paths": "paths"}[system]
    assert all(key in c for c in context)
    if system == "naive-cbr":
        assert all(len(c["examples"]) == 10 for c in context)
    if system == "kaping":
        assert all(len(c["facts"]) == 10 for c in context)
    user = preds[0]["trace"]["llm"][0]["messages"][1]["content"]
    assert "Drug A:" in user and preds[0]["trace"]["llm"][0]["messages"][0]["role"] == "system"


def _prepare(system, task, data):
    view = TrainingView(task, data.split("train"), data.split("valid"), data.resources)
    ctx = RunContext(task=task, profile=get_profile("cpu"), seed=0, artifacts=ArtifactStore(Path(tempfile.mkdtemp())))
    asyncio.run(system.prepare(view, ctx))
    return system


def test_no_retrieval_index_holds_a_validation_or_test_pair(s2, stub, tmp_path: Path) -> None:
    from ddibench.systems.k_paths import KPathsSystem
    from ddibench.systems.kaping import KAPINGSystem
    from ddibench.systems.naive_cbr import NaiveCBRSystem

    task, data = s2
    train = {(s.input.head.node_id, s.input.tail.node_id, s.target) for s in data.split("train")}
    held_out = {(s.input.head.node_id, s.input.tail.node_id) for split in ("valid", "test") for s in data.split(split)}
    naive = _prepare(NaiveCBRSystem(), task, data)
    assert set(zip(naive._heads.tolist(), naive._tails.tolist(), naive._labels.tolist())) <= train
    for cls in (KAPINGSystem, KPathsSystem):
        kg = _prepare(cls(), task, data)._kg
        ddi = kg.rel < kg.card["relation_base"]
        edges = set(zip(kg.head[ddi].tolist(), kg.tail[ddi].tolist(), kg.rel[ddi].tolist()))
        assert edges == train
        assert not {(h, t) for h, t, _ in edges} & held_out


def test_cbr_repository_holds_training_pairs_only(cli, stub, tmp_path: Path) -> None:
    code, _, err = cli(
        "run",
        "-s",
        "cbr-ddi",
        "-t",
        "drugbank_s2",
        "--limit",
        "2",
        "-m",
        f"vllm:stub-model@{stub.base_url}",
        *SMALL,
        "--run-dir",
        str(tmp_path / "r"),
    )
    assert code == 0, err
    repo = Repository.load(Path(results(tmp_path / "r")["system_info"]["repository"]["artifact"]))
    data = get_task("drugbank_s2").load()
    train = {(s.input.head.node_id, s.input.tail.node_id, s.target) for s in data.split("train")}
    held_out = {(s.input.head.node_id, s.input.tail.node_id) for split in ("valid", "test") for s in data.split(split)}
    assert len(repo) and all((c.head, c.tail, c.label) in train for c in repo.cases)
    assert not {(c.head, c.tail) for c in repo.cases} & held_out


def test_refinement_reads_answers_between_cases_and_shows_the_insights_from_before_the_pass(
    cli, stub, tmp_path: Path, fresh_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Refining every case of the repository against a stub that answers at once: the loop reads answers (and
    sends rewrites) while later cases are still being prepared, yet every answer's prompt shows the insights as
    they stood before the pass, so the repository is the one built when a slow server answers nothing before
    the last prompt (every prompt first, as the pass was once written)."""
    args = ["run", "-s", "cbr-ddi", "-t", "drugbank_s2", "--limit", "1", "--no-cache", "--concurrency", "64"]
    args += [*SMALL, "-C", "refine_cases=null"]
    from ddibench.systems.cbr_ddi import prompts

    def refinement_order(server) -> tuple[list[int], list[int]]:
        """Request positions of the refinement's answers and of its rewrites."""

        def user(r: dict) -> str:
            return next(m["content"] for m in r["messages"] if m["role"] == "user")

        rewrites = [n for n, r in enumerate(server.requests) if user(r).startswith("Your explanation of a drug pair")]
        answers = [n for n, r in enumerate(server.requests) if r["messages"][0]["content"] == prompts.PREDICT_SYSTEM]
        return answers, rewrites

    def built(run_dir: Path) -> tuple[bytes, dict]:
        info = results(run_dir)["system_info"]["repository"]
        return (Path(info["artifact"]) / "cases.json").read_bytes(), info["refinement"]

    with running_stub(StubConfig(delay=3.0)) as slow:  # 24 cases' CPU work takes well under 3 s
        code, _, err = cli(*args, "-m", f"vllm:stub-model@{slow.base_url}", "--run-dir", str(tmp_path / "slow"))
        assert code == 0, err
        answers, rewrites = refinement_order(slow)
    reference, stats = built(tmp_path / "slow")
    assert stats["checked"] == 24 and stats["rewritten"] > 0
    assert max(answers[:24]) < min(rewrites)  # every answer asked before any rewrite: prompts all built first

    shutil.rmtree(fresh_cache / "artifacts" / "cbr-ddi-repository")  # built again, on the same GNN module
    code, _, err = cli(*args, "-m", f"vllm:stub-model@{stub.base_url}", "--run-dir", str(tmp_path / "fast"))
    assert code == 0, err
    answers, rewrites = refinement_order(stub)
    assert min(rewrites) < max(answers[:24])  # rewrites went out while later cases were still being prepared
    again, stats_again = built(tmp_path / "fast")
    assert stats_again == stats and again == reference
    # candidates read from the cases' batch forward where they are well apart: the repository every case's own
    # forward builds (CANDIDATE_TIE infinite: every case alone, as the pass once was)
    assert stats["candidates_alone"] < 24
    import ddibench.systems.cbr_ddi as cbr

    shutil.rmtree(fresh_cache / "artifacts" / "cbr-ddi-repository")
    monkeypatch.setattr(cbr, "CANDIDATE_TIE", float("inf"))
    code, _, err = cli(*args, "-m", f"vllm:stub-model@{stub.base_url}", "--run-dir", str(tmp_path / "alone"))
    assert code == 0, err
    alone, stats_alone = built(tmp_path / "alone")
    assert stats_alone == {**stats, "candidates_alone": 24} and alone == reference


def test_k_paths_guard_removes_the_pairs_own_interaction(s2) -> None:
    from ddibench.systems.k_paths import KPathsSystem

    task, data = s2
    system = _prepare(KPathsSystem(), task, data)
    train = data.split("train")[0]
    u, v = train.input.head.node_id, train.input.tail.node_id
    lines, trace = system.paths(v, u)  # the reversed training pair: its interaction edge joins the two drugs
    assert trace["guarded"] >= 1 and system.counters["paths_removed_by_label_guard"] >= 1
    template = task.label_space[train.target].render(train.input.head.name, train.input.tail.name)
    assert all(template not in line for line in lines)


def test_naive_cbr_similarity_is_tanimoto_position_wise(s2) -> None:
    from rdkit import Chem, DataStructs
    from rdkit.Chem import rdFingerprintGenerator

    from ddibench.systems.naive_cbr import NaiveCBRSystem

    task, data = s2
    system = _prepare(NaiveCBRSystem(), task, data)
    drugs = data.resources["drugs"].drugs
    gen = rdFingerprintGenerator.GetMorganGenerator(radius=2, fpSize=1024)
    fps = {i: gen.GetFingerprint(Chem.MolFromSmiles(drugs[i].smiles)) for i in (0, 1, 2, 3)}
    for a, b in ((0, 1), (2, 3), (1, 2)):
        assert system._sim[a, b] == pytest.approx(DataStructs.TanimotoSimilarity(fps[a], fps[b]), abs=1e-6)
    top, scores = system.examples(5, 9)
    brute = (system._sim[5, system._heads] + system._sim[9, system._tails]) / 2
    assert scores[0] == pytest.approx(brute.max()) and list(scores) == sorted(scores, reverse=True)


def test_naive_cbr_cases_number_their_types_as_the_options_list_does(s2) -> None:
    """With the options shuffled, a case's "type N" is the number the list shows for its label, so the shuffled
    run measures position bias, not a mismatch between the cases' numbers and the list's."""
    from ddibench.systems.naive_cbr import NaiveCBRConfig, NaiveCBRSystem
    from ddibench.toolkit.label_choice import option_texts

    task, data = s2
    sample = data.split("test")[0]
    for seed in (None, 3):
        system = _prepare(NaiveCBRSystem(NaiveCBRConfig(shuffle_options=seed)), task, data)
        assert (system.order == list(range(len(task.label_space)))) == (seed is None)
        lines, trace = asyncio.run(system.context(sample, None))
        assert len(lines) == len(trace["context_labels"]) == 10
        for line, label in zip(lines, trace["context_labels"]):
            number = int(line.split(": type ")[1].split(" ")[0])
            assert system.order[number - 1] == label and (seed is not None or number == label + 1)
            listed = system.system_prompt.split(f"\n{number}. ")[1].split("\n")[0]
            assert listed == system.options[number - 1] == option_texts(task.label_space)[label]


def test_retrieval_and_sampling() -> None:
    rng = np.random.default_rng(0)
    n = 200
    cases = [Case(i, i + 1, int(i % 4), "", "", [], f"insight {i}") for i in range(n)]
    repo = Repository(
        cases,
        normalise(rng.normal(size=(n, 8))),
        normalise(rng.normal(size=(n, 6))),
        normalise(rng.normal(size=(n, 8))),
    )
    q_text, q_pair = normalise(rng.normal(size=8)), normalise(rng.normal(size=6))
    for lam in (0.0, 0.3, 1.0):
        idx, scores = repo.retrieve(q_text, q_pair, 5, lam)
        brute = lam * repo.text @ q_text + (1 - lam) * repo.pair @ q_pair
        assert list(idx) == list(np.argsort(-brute, kind="stable")[:5])
        assert np.allclose(scores, brute[idx])
    texts, pairs = normalise(rng.normal(size=(37, 8))), normalise(rng.normal(size=(37, 6)))
    for lam in (0.0, 0.3, 1.0):  # many queries at once (the lam search) retrieve what one query at a time does
        batched = repo.retrieve_many(texts, pairs, 5, lam, chunk=10)
        alone = [repo.retrieve(t, q, 5, lam) for t, q in zip(texts, pairs)]
        assert [b[0].tolist() for b in batched] == [a[0].tolist() for a in alone]
        assert all(np.array_equal(b[1], a[1]) for b, a in zip(batched, alone))
    own = np.arange(0, 37)  # leave-one-out, as the refinement retrieves: a case never retrieves itself
    loo = repo.retrieve_many(repo.text[own], repo.pair[own], 5, 0.5, exclude=own, chunk=8)
    assert [b[0].tolist() for b in loo] == [
        repo.retrieve(repo.text[i], repo.pair[i], 5, 0.5, i)[0].tolist() for i in own
    ]
    assert all(i not in b[0] for i, b in zip(own, loo))
    best = int(repo.retrieve(q_text, q_pair, 1, 0.5)[0][0])
    assert best not in repo.retrieve(q_text, q_pair, 5, 0.5, exclude=best)[0].tolist()
    medoids = k_medoids(repo.insight[:50], 7, rng)
    assert len(set(medoids.tolist())) == 7 and medoids.max() < 50
    keep, per_class = representative_sample(repo, 0.05, 10, rng)
    assert per_class == {"0": 10, "1": 10, "2": 10, "3": 10} and len(keep) == 40
    assert (
        Repository([], np.zeros((0, 8)), np.zeros((0, 6)), np.zeros((0, 8))).retrieve(q_text, q_pair, 5, 0.5)[0].size
        == 0
    )


def test_a_query_retrieves_the_same_cases_alone_or_in_a_batch_among_near_ties() -> None:
    """Cases that differ at float32 resolution: a BLAS product sums a row in an order its shapes decide, so ranking
    by it alone gave a batch of queries other cases than each query alone (every one of 64 here, before)."""
    rng = np.random.default_rng(1)
    n, m = 3000, 64
    base_text, base_pair = normalise(rng.normal(size=(1, 384))), normalise(rng.normal(size=(1, 128)))
    text = normalise(base_text + 3e-7 * rng.normal(size=(n, 384)))
    pair = normalise(base_pair + 3e-7 * rng.normal(size=(n, 128)))
    text[17] = text[2900] = normalise(rng.normal(size=384))  # two cases unlike the others, tied exactly
    pair[17] = pair[2900] = normalise(rng.normal(size=128))
    repo = Repository([Case(i, i + 1, i % 4, "", "", [], "") for i in range(n)], text, pair, np.zeros((n, 1)))
    queries = normalise(base_text + 0.1 * rng.normal(size=(m, 384)))
    query_pairs = normalise(base_pair + 0.1 * rng.normal(size=(m, 128)))
    queries[0], query_pairs[0] = text[17], pair[17]
    for chunk in (1, 16, 64):
        batched = repo.retrieve_many(queries, query_pairs, 5, 0.5, chunk=chunk)
        for i in range(m):
            idx, scores = repo.retrieve(queries[i], query_pairs[i], 5, 0.5)
            assert batched[i][0].tolist() == idx.tolist() and np.array_equal(batched[i][1], scores), (chunk, i)
    assert repo.retrieve(queries[0], query_pairs[0], 2, 0.5)[0].tolist() == [17, 2900]  # a tie: the lower index first


def _k_medoids_before(vectors: np.ndarray, k: int, rng: np.random.Generator, iterations: int = 30) -> np.ndarray:
    """K-medoids as it was before the paper-scale rehearsal (whole matrix, seeding over every medoid's column)."""
    n = len(vectors)
    if k >= n:
        return np.arange(n)
    dist = 1.0 - np.clip(vectors @ vectors.T, -1.0, 1.0)
    medoids = [int(rng.integers(n))]
    for _ in range(1, k):
        nearest = dist[:, medoids].min(axis=1)
        weights = nearest**2
        total = weights.sum()
        medoids.append(
            int(rng.choice(n, p=weights / total)) if total > 0 else int(rng.choice(np.setdiff1d(np.arange(n), medoids)))
        )
    medoids_arr = np.array(sorted(set(medoids)), dtype=np.int64)
    for _ in range(iterations):
        assign = dist[:, medoids_arr].argmin(axis=1)
        updated = []
        for c in range(len(medoids_arr)):
            members = np.flatnonzero(assign == c)
            if members.size == 0:
                updated.append(int(medoids_arr[c]))
                continue
            updated.append(int(members[dist[np.ix_(members, members)].sum(axis=1).argmin()]))
        new = np.array(sorted(set(updated)), dtype=np.int64)
        if np.array_equal(new, medoids_arr):
            break
        medoids_arr = new
    return medoids_arr


@pytest.mark.parametrize(("n", "k", "seed"), [(50, 7, 0), (300, 15, 1), (1000, 50, 2), (400, 40, 3)])
def test_k_medoids_picks_what_it_picked_before_from_a_whole_matrix_or_from_blocks(n: int, k: int, seed: int) -> None:
    """Seeding by the newest medoid's column, and distances computed when asked for (a class too large for its
    matrix: forced here with full_matrix=0), pick the same medoids as the whole-matrix implementation did; the
    random draws after them match too (the same number taken from the generator)."""
    data = np.random.default_rng(seed).normal(size=(n, 16))
    data[: n // 10] = data[0]  # a block of identical insights: zero distances and ties, as empty insights make
    vectors = normalise(data)
    before_rng, whole_rng, blocks_rng = (np.random.default_rng(seed) for _ in range(3))
    before = _k_medoids_before(vectors, k, before_rng)
    assert k_medoids(vectors, k, whole_rng).tolist() == before.tolist()
    assert k_medoids(vectors, k, blocks_rng, full_matrix=0).tolist() == before.tolist()
    assert before_rng.random() == whole_rng.random() == blocks_rng.random()


def test_representative_sample_groups_each_class_in_one_pass_as_before() -> None:
    rng = np.random.default_rng(5)
    n = 400
    sets = [sorted({int(x) for x in rng.integers(0, 6, size=rng.integers(1, 3))}) for _ in range(n)]
    cases = [Case(i, i + 1, s[0], "", "", [], "", labels=s) for i, s in enumerate(sets)]
    repo = Repository(
        cases,
        normalise(rng.normal(size=(n, 8))),
        normalise(rng.normal(size=(n, 4))),
        normalise(rng.normal(size=(n, 8))),
    )
    keep, per_class = representative_sample(repo, 0.1, 5, np.random.default_rng(9))
    before_rng, expected, counts = np.random.default_rng(9), [], {}
    for label in sorted({lb for s in sets for lb in s}):
        members = np.array([i for i, s in enumerate(sets) if label in s], dtype=np.int64)
        chosen = members[_k_medoids_before(repo.insight[members], max(5, int(np.ceil(0.1 * members.size))), before_rng)]
        expected.append(chosen)
        counts[str(label)] = int(chosen.size)
    assert keep.tolist() == np.unique(np.concatenate(expected)).tolist() and per_class == counts


def test_a_compact_bundle_keeps_the_evidence_of_every_sample_and_whole_traces_of_a_seeded_few(
    cli, stub, tmp_path: Path
) -> None:
    """Every sample of a compact cbr-ddi bundle keeps the GNN's candidates and the retrieved cases' labels, in
    order; the whole traces are a draw seeded by the run's seed, listed in the bundle; the ceilings read from the
    bundle are the run's, and the board shows the samples whose whole trace it holds."""
    from ddibench.leaderboard.data import first_samples
    from ddibench.results.store import add_run
    from ddibench.runner.selection import Selection, run_samples
    from ddibench.submission import read_bundle, verify
    from ddibench.submission.pack import whole_trace_ids

    run_dir, bundle = tmp_path / "r", tmp_path / "b.tar.gz"
    code, _, err = cli(
        *_run_args("drugbank_s2", 12, "-m", f"vllm:stub-model@{stub.base_url}"), "--run-dir", str(run_dir)
    )
    assert code == 0, err
    code, _, err = cli("submit", "--compact", str(run_dir), "--out", str(bundle))
    assert code == 0, err
    members = read_bundle(bundle)
    lines = {line["sample_id"]: line for line in map(json.loads, members["predictions.jsonl"].splitlines())}
    run = {p["sample_id"]: p for p in journal(run_dir)}
    for sid, pred in run.items():
        kept = lines[sid]["trace"]
        assert [c[0] if isinstance(c, list) else c for c in kept["candidates"]] == [
            c[0] for c in pred["trace"]["candidates"]
        ]
        assert kept["context_labels"] == [c["label"] for c in pred["trace"]["cases"]]  # the cases', in order
    task = get_task("drugbank_s2")
    ids = [s.id for s in run_samples(task, Selection("test", 12, 0))]
    compact = json.loads(members["bundle.json"])["compact"]
    assert compact["whole_trace_seed"] == 0 and compact["whole_trace_ids"] == whole_trace_ids(ids, 5, 0)
    assert compact["whole_trace_ids"] != ids[:5]  # not the first five (the lowest labels of a --limit draw)
    whole = {sid for sid, line in lines.items() if "messages" in line["trace"]["llm"][-1]}
    assert whole == set(compact["whole_trace_ids"])

    code, from_run, _ = cli("report", "--ceilings", "--json", str(run_dir))
    assert code == 0
    code, from_bundle, _ = cli("report", "--ceilings", "--json", str(bundle))
    assert code == 0
    (mine,), (theirs,) = json.loads(from_run), json.loads(from_bundle)
    assert {**mine, "run_dir": ""} == {**theirs, "run_dir": ""}
    samples = {s.id: s for s in task.load().split("test")}
    offered = {sid: [c[0] for c in p["trace"]["candidates"]] for sid, p in run.items()}
    assert mine["candidates"]["coverage"] == pytest.approx(sum(samples[sid].label in offered[sid] for sid in run) / 12)
    assert mine["candidates"]["first"] == pytest.approx(sum(samples[sid].label == offered[sid][0] for sid in run) / 12)
    moves = mine["candidates"]["moves"]
    kept = sum(p["valid"] and p["label"] == offered[sid][0] for sid, p in run.items())
    assert moves["kept"] == kept and sum(moves.values()) == 12
    code, out, _ = cli("report", "--ceilings", str(bundle))
    assert code == 0 and "gold among the 3 candidates offered" in out and "the reader left candidate 1 on" in out

    pytest.importorskip("duckdb", reason="the board needs the 'board' extra")
    store = tmp_path / "board.duckdb"
    add_run(store, verify(bundle, keep_traces=True))
    shown = first_samples(store, json.loads(members["run.json"])["run_id"], 5)
    assert [s["sample_id"] for s in shown] == compact["whole_trace_ids"]
    assert all("messages" in s["trace"]["llm"][-1] for s in shown)


def test_a_shipped_cbr_ddi_bundle_packed_under_the_first_five_rule_still_verifies() -> None:
    """Bundles packed before the seeded draw list no ids: their whole traces are the first five samples, as the
    verification, the ceilings and the board read them."""
    from ddibench.runner.records import BundleIndex
    from ddibench.submission import read_bundle, verify

    bundle = Path(__file__).resolve().parent.parent / "results" / "drugbank_s1" / "cbr-ddi" / "0d77237e96321044.tar.gz"
    verdict = verify(bundle)
    assert verdict.is_preview(), verdict.reasons  # a --limit run: everything else checks out
    compact = BundleIndex.model_validate(json.loads(read_bundle(bundle)["bundle.json"])).compact
    assert compact is not None and compact.whole_trace_ids is None
    order = [s.id for s in verdict.samples]
    lines = [json.loads(line) for line in read_bundle(bundle)["predictions.jsonl"].splitlines()]
    whole = [line["sample_id"] for line in lines if "messages" in line["trace"]["llm"][-1]]
    assert compact.whole_ids(order) == order[:5] == whole


def test_the_repository_is_stored_under_the_key_it_always_had(s2) -> None:
    """The case repository's key (drugbank_s2, the default configuration, seed 0, no LLM, a GNN trained under a given
    artifact) hashes as it did before BaseSystem.artifact_key made it: the repositories users built are found."""
    from ddibench.hashing import config_hash
    from ddibench.systems.cbr_ddi import CBRDDISystem

    task, data = s2
    view = TrainingView(task, data.split("train"), data.split("valid"), data.resources)
    ctx = RunContext(task=task, profile=get_profile("cpu"), seed=0, artifacts=ArtifactStore(Path(tempfile.mkdtemp())))
    system = CBRDDISystem.build({})
    system._read_task(view)
    system.gnn = system.gnn_module(view, ctx)
    system.gnn.training_log = {"artifact": "/cache/artifacts/emergnn/abc"}
    key = system._repository_key(view, ctx)
    assert "config_hash" not in key  # answer-side options share the repository
    assert config_hash(key, 24) == "0be076a625082fabfacbc3bd"
    import torch

    from ddibench.embeddings import TextEncoder
    from ddibench.errors import ConfigError

    if not torch.cuda.is_available():  # asked for where there is none: a configuration error before any work
        with pytest.raises(ConfigError, match="encoder_device=cpu"):
            CBRDDISystem.build({"encoder_device": "cuda"})._read_task(view)
    system._encoder = TextEncoder(system.config.encoder)
    system._encoder.device = "cuda"  # (as one built on a GPU machine: its vectors round otherwise)
    assert system._repository_key(view, ctx)["encoder"] == {**key["encoder"], "device": "cuda"}
