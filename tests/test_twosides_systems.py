"""Systems on the TWOSIDES top-5 task: the shared top-k answer (prompt, schema, strict parser and its
policy), the LLM systems against the loopback stub server, and the trained systems' multi-label heads,
on small slices."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ddibench.data.twosides import load_labels
from ddibench.llm import ChatResult
from ddibench.llm.stub import StubConfig, running_stub
from ddibench.toolkit.label_choice import answer_to_ranking, parse_choices, topk_schema

NAMES = [lb.name for lb in load_labels()]


def results(run_dir: Path) -> dict:
    return json.loads((run_dir / "results.json").read_text())


def journal(run_dir: Path) -> list[dict]:
    return [json.loads(line)["prediction"] for line in (run_dir / "journal.jsonl").read_text().splitlines()]


def _answer(text: str, finish: str = "stop") -> ChatResult:
    return ChatResult(text, finish, 10, 20, 0.1, False, "m")


def test_parser_matches_names_exactly_and_states_its_policy() -> None:
    # case, spacing and punctuation aside, names must match: no fuzzy matching
    text = json.dumps(
        {"side_effects": ["HYPERCAPNIA", "esophageal  spasm", "Deafness-neurosensory", "appendectomy", "stridor"]}
    )
    parsed = parse_choices(text, NAMES)
    assert [NAMES[i] for i in parsed.indices] == [
        "Hypercapnia",
        "esophageal spasm",
        "Deafness neurosensory",
        "appendectomy",
        "stridor",
    ]
    pred = answer_to_ranking("s", _answer(text), NAMES, range(200), 5, trace := {})
    assert pred.valid and pred.ranked == parsed.indices and trace["parse"]["flags"] == []
    # unknown names are dropped and flagged, repeats dropped, a short list kept as a shorter ranking
    text = json.dumps({"side_effects": ["Hypercapnia", "hypercapnia", "a headache of sorts", "stridor"]})
    pred = answer_to_ranking("s", _answer(text), NAMES, range(200), 5, trace := {})
    assert pred.valid and pred.ranked == [3, 4]
    assert set(trace["parse"]["flags"]) == {"unknown", "repeats", "too_few"} and trace["parse"]["unknown"] == [
        "a headache of sorts"
    ]
    # too many: the first five count
    text = json.dumps({"side_effects": NAMES[:8]})
    pred = answer_to_ranking("s", _answer(text), NAMES, list(range(100, 300)), 5, trace := {})
    assert pred.ranked == [100, 101, 102, 103, 104] and trace["parse"]["flags"] == ["too_many"]
    # without JSON: quoted names, then one name per line (bullets and numbering removed)
    assert parse_choices('I pick "stridor" and "Aphonia".', NAMES).indices == [4, 7]
    assert parse_choices("1. stridor\n2. Aphonia\n- appendicitis", NAMES).indices == [4, 7, 2]


@pytest.mark.parametrize(
    ("text", "finish", "reason"),
    [
        ("I cannot tell which side effects.", "stop", "none of the 1 named items is a listed option"),
        ('{"side_effects": ["a rash", "sadness"]}', "stop", "none of the 2 named items is a listed option"),
        ("", "stop", "empty answer"),
        ('{"mechanism": "Both drugs inhibit CYP3A4 and so the', "length", "cut off at the token limit"),
    ],
)
def test_answers_naming_no_listed_effect_are_invalid_with_their_reason(text: str, finish: str, reason: str) -> None:
    pred = answer_to_ranking("s", _answer(text, finish), NAMES, range(200), 5, {})
    assert not pred.valid and reason in (pred.error or "")


def test_the_stub_answers_a_top_k_schema_from_its_allowed_values() -> None:
    from openai import OpenAI

    schema = topk_schema(NAMES[:10], 5, mechanism=True)
    with running_stub(StubConfig()) as stub:
        client = OpenAI(base_url=stub.base_url, api_key="x")
        reply = client.chat.completions.create(
            model="stub-model",
            messages=[{"role": "user", "content": "q"}],
            extra_body={"response_format": {"type": "json_object", "schema": schema}},
        )
    answer = json.loads(reply.choices[0].message.content)
    assert len(answer["side_effects"]) == len(set(answer["side_effects"])) == 5 and set(answer["side_effects"]) <= set(
        NAMES[:10]
    )
    assert isinstance(answer["mechanism"], str)


@pytest.mark.parametrize("system", ["zero-shot", "naive-cbr", "kaping", "k-paths"])
def test_llm_systems_answer_five_side_effects(cli, stub, tmp_path: Path, system: str) -> None:
    code, _, err = cli(
        "run",
        "-s",
        system,
        "-t",
        "twosides_s2",
        "--limit",
        "4",
        "-m",
        f"vllm:stub-model@{stub.base_url}",
        "--run-dir",
        str(tmp_path / "r"),
    )
    assert code == 0, err
    preds = journal(tmp_path / "r")
    assert len(preds) == 4 and all(p["valid"] and len(set(p["ranked"])) == 5 for p in preds)
    request = stub.requests[-1]
    system_prompt = request["messages"][0]["content"]
    assert all(name in system_prompt for name in NAMES) and "exactly 5 different names" in system_prompt
    fmt = request["response_format"]
    schema = fmt.get("schema") or fmt["json_schema"]["schema"]
    assert schema["properties"]["side_effects"]["minItems"] == 5
    user = preds[0]["trace"]["llm"][0]["messages"][1]["content"]
    assert "Which 5 of the listed side effects" in user
    if system != "zero-shot":
        context = preds[0]["trace"]["context"]
        assert context[{"naive-cbr": "examples", "kaping": "facts", "k-paths": "paths"}[system]] or context.get(
            "fallback_neighbours"
        )
        for pred in preds:  # the labels the context states (read by 'report --ceilings') are labels the prompt shows
            shown = pred["trace"]["llm"][0]["messages"][1]["content"].split("Drug A:")[0].lower()
            stated = pred["trace"]["context"]["context_labels"]
            assert all(NAMES[k].lower() in shown for k in stated), (system, stated)
    if system == "naive-cbr":
        assert "side effects" in user.split("Drug A:")[0]
    res = results(tmp_path / "r")
    assert res["evaluation"]["primary_metric"] == "recall@5" and res["system_info"]["counters"]["answered"] == 4


def test_llm_answers_that_name_unknown_effects_are_counted(cli, tmp_path: Path) -> None:
    reply = json.dumps({"side_effects": ["Hypercapnia", "an invented effect"]})
    with running_stub(StubConfig(reply=reply)) as stub:
        code, _, err = cli(
            "run",
            "-s",
            "zero-shot",
            "-t",
            "twosides_s2",
            "--limit",
            "3",
            "-m",
            f"vllm:stub-model@{stub.base_url}",
            "--no-cache",
            "--run-dir",
            str(tmp_path / "r"),
        )
    assert code == 0, err
    res = results(tmp_path / "r")
    assert res["evaluation"]["n_invalid"] == 0 and res["system_info"]["counters"] == {
        "unknown": 3,
        "too_few": 3,
        "answered": 3,
    }
    assert all(p["ranked"] == [3] for p in journal(tmp_path / "r"))
    with running_stub(StubConfig(reply="Nausea, probably.")) as stub:
        code, _, err = cli(
            "run",
            "-s",
            "zero-shot",
            "-t",
            "twosides_s2",
            "--limit",
            "3",
            "-m",
            f"vllm:stub-model@{stub.base_url}",
            "--no-cache",
            "--run-dir",
            str(tmp_path / "bad"),
        )
    assert code == 0, err
    res = results(tmp_path / "bad")
    assert res["evaluation"]["n_invalid"] == 3 and res["evaluation"]["metrics"]["recall@5"]["value"] == 0.0


torch = pytest.importorskip("torch", reason="the trained systems need the 'ml' extra")
pytest.importorskip("rdkit", reason="the trained systems need the 'ml' extra")


@pytest.mark.parametrize("loss", ["negatives", "bce"])
def test_mlp_has_a_multilabel_head_and_keeps_its_checkpoint(cli, tmp_path: Path, fresh_cache: Path, loss: str) -> None:
    budget = [
        "-C",
        "max_epochs=2",
        "-C",
        "max_train=2000",
        "-C",
        "hidden=[64]",
        "-C",
        "patience=1",
        "-C",
        f"multilabel_loss={loss}",
    ]
    code, _, err = cli("run", "-s", "mlp", "-t", "twosides_s2", *budget, "--run-dir", str(tmp_path / "a"))
    assert code == 0, err
    res = results(tmp_path / "a")
    info = res["system_info"]
    assert res["evaluation"]["n"] == 355 and info["multilabel_loss"] == loss and info["n_train"] == 2000
    assert "best_valid_recall@5" in info and all("valid_recall@5" in e for e in info["epochs"])
    preds = journal(tmp_path / "a")
    assert all(len(set(p["ranked"])) == 5 and p["ranked"] == [k for k, _ in p["trace"]["top10"][:5]] for p in preds)
    scores = [[s for _, s in p["trace"]["top10"]] for p in preds]
    assert all(s == sorted(s, reverse=True) for s in scores)
    assert ("multilabel_loss" in res["manifest"]["system"]["config"]) == (
        loss != "negatives"
    )  # left out at its default
    code, _, err = cli("run", "-s", "mlp", "-t", "twosides_s2", *budget, "--run-dir", str(tmp_path / "b"))
    assert code == 0, err
    again = results(tmp_path / "b")
    assert (
        again["system_info"]["loaded_from_cache"] is True
        and again["evaluation"]["metrics"] == res["evaluation"]["metrics"]
    )


def test_drugbank_identities_of_the_trained_systems_did_not_change() -> None:
    """Options added for label sets stay out of a configuration at their default: DrugBank runs keep their
    config hash (the hashes of the cpu-profile configurations before TWOSIDES existed; EmerGNN's with the 4
    epochs the cpu profile trained then — it trains 10 since the faster step) and cached checkpoints."""
    from ddibench.profiles import get_profile
    from ddibench.runner.plan import build_system
    from ddibench.system import system_config_hash

    assert system_config_hash(build_system("mlp", get_profile("cpu"), {})) == "e306d4d2b58cde50"
    assert system_config_hash(build_system("emergnn", get_profile("cpu"), {"max_epochs": 4})) == "d4deb8dec753474c"
    assert build_system("emergnn", get_profile("cpu"), {}).config.max_epochs == 10
    assert system_config_hash(build_system("mlp", get_profile("cpu"), {"multilabel_loss": "bce"})) != "e306d4d2b58cde50"
    assert (
        system_config_hash(build_system("emergnn", get_profile("cpu"), {"max_epochs": 4, "classifier": "pair"}))
        == "d4deb8dec753474c"
    )
    assert (
        system_config_hash(build_system("emergnn", get_profile("cpu"), {"max_epochs": 4, "classifier": "pair+drugs"}))
        != "d4deb8dec753474c"
    )


def test_generated_negatives_replace_one_drug_and_are_not_known_pairs() -> None:
    from ddibench.toolkit.label_sets import corrupt_pairs, recall_at_k

    rng = np.random.default_rng(0)
    pairs = np.array([[0, 1], [1, 2], [2, 3], [3, 4], [4, 0]])
    negatives = corrupt_pairs(pairs, np.arange(8), rng)
    known = {tuple(p) for p in pairs.tolist()} | {tuple(p[::-1]) for p in pairs.tolist()}
    for (h, t), (nh, nt) in zip(pairs.tolist(), negatives.tolist()):
        assert (nh == h) != (nt == t) and (nh, nt) not in known and nh != nt
    scores = np.array([[0.9, 0.1, 0.8], [0.1, 0.2, 0.3]])
    labels = np.array([[1, 0, 0], [1, 1, 0]], dtype=float)
    assert recall_at_k(scores, labels, 1) == pytest.approx((1 + 0) / 2)
    assert recall_at_k(scores, labels, 2) == pytest.approx((1 + 0.5) / 2)


EMERGNN = ["-C", "max_epochs=1", "-C", "train_pairs_per_epoch=48", "-C", "valid_pairs=32", "-C", "explain_paths=2"]


def test_emergnn_ranks_side_effects_with_the_papers_twosides_settings(cli, tmp_path: Path, fresh_cache: Path) -> None:
    code, _, err = cli(
        "run", "-s", "emergnn", "-t", "twosides_s2", "--limit", "6", *EMERGNN, "--run-dir", str(tmp_path / "s2")
    )
    assert code == 0, err
    res = results(tmp_path / "s2")
    info = res["system_info"]
    cfg = info["resolved_config"]
    assert (cfg["lr"], cfg["batch_size"], cfg["dim"], cfg["multilabel_loss"]) == (3e-3, 64, 64, "negatives")
    assert info["epochs"][0]["pairs"] <= 48 and "valid_recall@5" in info["epochs"][0]
    preds = journal(tmp_path / "s2")
    assert all(len(set(p["ranked"])) == 5 and len(p["trace"]["top10"]) == 10 for p in preds)
    assert any(p["trace"]["paths"] for p in preds) and all(path["text"] for p in preds for path in p["trace"]["paths"])
    deviations = res["manifest"]["system"]["deviations"]
    assert any("side effect as relation" in d for d in deviations)
    assert any(
        "never learns which side effects are frequent" in d for d in deviations
    )  # EmerGNN's objective, named as such
    code, _, err = cli(
        "run",
        "-s",
        "emergnn",
        "-t",
        "twosides_s1",
        "--limit",
        "4",
        *EMERGNN,
        "-C",
        "multilabel_loss=bce",
        "-C",
        "classifier=pair+drugs",
        "--run-dir",
        str(tmp_path / "s1"),
    )
    assert code == 0, err
    res = results(tmp_path / "s1")
    cfg = res["system_info"]["resolved_config"]
    # the paper's S1 batch size, dim and weight decay; the lr of the cpu profile's twosides_s1 budget (the paper: 1e-3)
    assert (cfg["lr"], cfg["batch_size"], cfg["dim"], cfg["weight_decay"], cfg["multilabel_loss"]) == (
        1e-2,
        32,
        32,
        1e-6,
        "bce",
    )
    assert cfg["classifier"] == "pair+drugs"
    deviations = res["manifest"]["system"]["deviations"]
    assert not any("never learns which side effects are frequent" in d for d in deviations)
    assert any("projected Morgan features" in d for d in deviations)


def test_the_classifier_reads_the_drug_features_only_when_asked() -> None:
    torch = pytest.importorskip("torch")
    from ddibench.systems.emergnn.model import EmerGNNNet

    fingerprints = np.random.default_rng(0).integers(0, 2, (6, 16)).astype(np.float32)
    paper = EmerGNNNet(n_drugs=6, n_relations=5, n_labels=3, dim=8, fingerprints=fingerprints)
    diagnostic = EmerGNNNet(
        n_drugs=6, n_relations=5, n_labels=3, dim=8, fingerprints=fingerprints, drugs_in_classifier=True
    )
    embeddings = EmerGNNNet(n_drugs=6, n_relations=5, n_labels=3, dim=8)  # S0: learned embeddings always reach it
    assert (paper.classifier.in_features, diagnostic.classifier.in_features, embeddings.classifier.in_features) == (
        16,
        32,
        32,
    )
    assert isinstance(paper.classifier.weight, torch.Tensor)


pytest.importorskip("sentence_transformers", reason="cbr-ddi needs the 'embed' extra")

GNN = 'gnn={"max_epochs": 1, "train_pairs_per_epoch": 64, "valid_pairs": 32}'
SMALL = [
    "-C",
    "repository_size=16",
    "-C",
    "refine_cases=3",
    "-C",
    "lambda_valid_pairs=4",
    "-C",
    "min_per_class=1",
    "-C",
    GNN,
]


def test_cbr_ddi_chooses_five_of_ten_gnn_candidates(cli, stub, tmp_path: Path) -> None:
    from ddibench.registry import get_task
    from ddibench.systems.cbr_ddi.repository import Repository

    code, _, err = cli(
        "run",
        "-s",
        "cbr-ddi",
        "-t",
        "twosides_s2",
        "--limit",
        "3",
        "-m",
        f"vllm:stub-model@{stub.base_url}",
        *SMALL,
        "--run-dir",
        str(tmp_path / "r"),
    )
    assert code == 0, err
    res = results(tmp_path / "r")
    info = res["system_info"]
    assert info["label_sets"] == {"k": 5, "n_candidates": 10} and info["repository"]["built_from"] == 16
    assert info["repository"]["refinement"]["checked"] == 3 and "label_overlap_at_k" in info["lambda"]
    for pred in journal(tmp_path / "r"):
        trace = pred["trace"]
        assert len(trace["candidates"]) == 10 and len(set(pred["ranked"])) == 5
        assert set(pred["ranked"]) <= {k for k, _ in trace["candidates"]}  # the answer is among the GNN's candidates
        assert all(isinstance(c["label"], list) for c in trace["cases"]) and pred["rationale"]
        assert "Candidate side effects:" in trace["llm"][-1]["messages"][1]["content"]
    repo = Repository.load(Path(info["repository"]["artifact"]))
    train = {
        (s.input.head.node_id, s.input.tail.node_id): s.target for s in get_task("twosides_s2").load().split("train")
    }
    assert repo.cases and all(tuple(c.labels) == train[(c.head, c.tail)] for c in repo.cases)


def test_task_budgets_change_only_the_tasks_they_name() -> None:
    """EmerGNN's cpu budget differs per task where one budget does not fit (S2 epochs are a tenth of S1's): the
    DrugBank S1 run ids stay what they were, and the named tasks get their own schedule."""
    from ddibench.profiles import get_profile
    from ddibench.runner.plan import build_system
    from ddibench.system import system_config_hash

    cpu = get_profile("cpu")
    for task in ("drugbank_s1", "drugbank_s1_emergnn", "drugbank_s0", None):
        assert system_config_hash(build_system("emergnn", cpu, {"max_epochs": 4}, task)) == "d4deb8dec753474c"
        assert build_system("emergnn", cpu, {}, task).config.max_epochs == 10
    s2 = build_system("emergnn", cpu, {}, "drugbank_s2").config
    assert (s2.max_epochs, s2.epoch_per_test, s2.valid_pairs) == (100, 5, 3000)
    twosides = build_system("emergnn", cpu, {"lr": 1e-3}, "twosides_s1").config
    assert (twosides.max_epochs, twosides.lr) == (120, 1e-3)  # --config still wins over the task's budget
    assert build_system("mlp", cpu, {}, "drugbank_s2").config.max_epochs == 30
