"""Question answering: tasks, reference-based scorers, the LLM judge, SelfCheckGPT, rescoring, and the
free-text systems (against a local OpenAI-compatible server)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("sentence_transformers", reason="QA scoring needs the 'embed' extra")

from ddibench.llm.stub import StubConfig, running_stub  # noqa: E402
from ddibench.registry import get_task  # noqa: E402


@pytest.fixture(scope="module")
def encoder():
    from ddibench.embeddings import shared_encoder

    return shared_encoder()


def test_ddi_qa_questions_follow_the_drugbank_pairs() -> None:
    qa, base = get_task("ddi_qa_s2").load(), get_task("drugbank_s2").load()
    for split in ("train", "valid", "test"):
        assert len(qa.split(split)) == len(base.split(split))
    labels = get_task("drugbank_s2").label_space
    for q, b in zip(qa.split("test")[:50], base.split("test")[:50]):
        pair = q.input.pair
        assert pair == b.input and pair.head.name in q.input.text and pair.tail.name in q.input.text
        assert (
            q.target["answer"] == labels[b.target].render(pair.head.name, pair.tail.name)
            and q.target["label"] == b.target
        )
        assert q.clusters == b.clusters
    assert q.blind().target is None


def test_the_lookup_task_asks_what_the_knowledge_holds_and_what_it_does_not(cli, tmp_path: Path) -> None:
    """ddi_qa_lookup: one training pair per type (in the knowledge the systems build from) and pairs of training
    drugs with no recorded interaction (label 86), scored by label recovery per slice. The floor that returns the
    pair's own passage recovers the recorded types and none of the unrecorded answers."""
    task = get_task("ddi_qa_lookup")
    data = task.load()
    assert all(c.ok for c in data.checks) and len(data.split("test")) == 110 and len(data.split("valid")) == 98
    knowledge = {(s.input.pair.head.node_id, s.input.pair.tail.node_id) for s in data.split("train")}
    assert len(data.split("train")) == 20_000 and data.resources["interactions"][0] == data.split("train")
    base = get_task("drugbank_s0").load()
    train_pairs = {(s.pair.head.node_id, s.pair.tail.node_id) for s in base.split("train")}
    every_pair = {
        (s.pair.head.node_id, s.pair.tail.node_id) for split in ("train", "valid", "test") for s in base.split(split)
    }
    slices: dict[str, list] = {}
    for q in data.split("test"):
        slices.setdefault(q.meta["slice"], []).append(q)
        ids = (q.input.pair.head.node_id, q.input.pair.tail.node_id)
        if q.meta["slice"] == "recorded":
            assert ids in train_pairs and ids in knowledge and q.target["label"] < 86
        else:
            assert ids not in every_pair and ids[::-1] not in every_pair and q.target["label"] == 86
            assert q.target["answer"].startswith("No interaction between ")
    assert {k: len(v) for k, v in slices.items()} == {"recorded": 86, "no-interaction": 24}
    assert sorted(q.target["label"] for q in slices["recorded"]) == list(range(86))
    assert task.evaluator().primary_metric == "label_recovery" and len(task.label_space) == 87

    run_dir = tmp_path / "floor"
    code, _, err = cli(
        "run", "-s", "top-passage", "-t", "ddi_qa_lookup", "--no-judge", "--selfcheck", "0", "--run-dir", str(run_dir)
    )
    assert code == 0, err
    evaluation = json.loads((run_dir / "results.json").read_text())["evaluation"]
    assert evaluation["primary_metric"] == "label_recovery"
    recorded, unrecorded = evaluation["breakdown"]["slice=recorded"], evaluation["breakdown"]["slice=no-interaction"]
    assert (recorded["n"], unrecorded["n"]) == (86, 24)
    assert recorded["label_recovery"] > 0.9 and unrecorded["label_recovery"] == 0.0
    total = (recorded["label_recovery"] * 86 + unrecorded["label_recovery"] * 24) / 110
    assert evaluation["metrics"]["label_recovery"]["value"] == pytest.approx(total)


def test_medquad_is_a_fixed_documented_set_apart_from_the_corpus() -> None:
    from ddibench.data.medquad import medquad_documents

    data = get_task("medquad").load()
    assert all(c.ok for c in data.checks), data.checks
    assert len(data.split("test")) == 1039 + 639 + 51
    corpus_docs = {row["doc"] for row in medquad_documents("medquad-corpus")}
    assert corpus_docs and not {s.clusters[0] for s in data.split("test")} & corpus_docs
    assert all(s.target["answer"] for s in data.split("test"))


def test_bertscore_and_embedding_similarity(encoder) -> None:
    from ddibench.evaluation.text_scorers import BertScorer, embedding_similarity

    scorer = BertScorer(encoder)
    ref = "Warfarin may increase the anticoagulant activities of Aspirin."
    scores = scorer.score([ref, "Bananas are rich in potassium.", ""], [ref, ref, ref])
    assert scores[0, 2] == pytest.approx(1.0, abs=1e-5)
    assert scores[1, 2] < 0.6 and scores[2].tolist() == [0, 0, 0]
    sims = embedding_similarity(encoder, [ref, "The weather is nice.", ""], [ref, ref, ref])
    assert sims[0] == pytest.approx(1.0, abs=1e-5) and sims[1] < 0.3 and sims[2] == 0.0


def test_bertscore_is_the_libraries_on_the_same_pairs(encoder) -> None:
    """ddibench's BERTScore is what a direct bert_score.score call on the same weights and layer gives."""
    from bert_score import score

    from ddibench.evaluation.text_scorers import BertScorer

    candidates = ["Taking them together raises the risk of bleeding.", "Aspirin is fine with it.", "Ask your doctor."]
    references = ["Warfarin may increase the anticoagulant activities of Aspirin."] * 3
    scorer = BertScorer(encoder, num_layers=6)
    ours = scorer.score(candidates, references)
    precision, recall, f1 = score(candidates, references, model_type=str(encoder.path), num_layers=6, batch_size=1)
    assert ours[:, 0] == pytest.approx(precision.numpy(), abs=1e-6)
    assert ours[:, 1] == pytest.approx(recall.numpy(), abs=1e-6)
    assert ours[:, 2] == pytest.approx(f1.numpy(), abs=1e-6)
    # a pair's score does not depend on the pairs scored with it (the library's batches would make it so)
    unrelated = [
        "A plausible mechanism for this pair (note 538).",
        "The risk or severity of adverse effects can be increased when Masoprocol is combined with Mycophenolic acid.",
    ]
    alone = scorer.score(unrelated[:1], unrelated[1:])[0, 2]
    together = scorer.score([candidates[0], unrelated[0]], [references[0], unrelated[1]])[1, 2]
    assert alone == pytest.approx(together, abs=1e-6)


def test_label_recovery(encoder) -> None:
    from ddibench.evaluation.text_scorers import LabelRecovery
    from ddibench.tasks.drugbank import load_labels

    labels = load_labels()
    recovery = LabelRecovery(labels, encoder)
    exact = labels[46].render("Warfarin", "Fluconazole")
    assert recovery.recover(f"Be careful. {exact} Ask a doctor.", "Warfarin", "Fluconazole") == (46, "template")
    assert recovery.recover(exact.replace("can be", "could be"), "Warfarin", "Fluconazole") == (46, "string")
    label, how = recovery.recover(
        "Taking them together makes bleeding more likely because the anticoagulant effect rises.", "Warfarin", "Aspirin"
    )
    assert how == "embedding" and 0 <= label < 86
    assert recovery.recover("  ", "a", "b") == (None, "empty answer")


def test_selfcheck_is_low_for_consistent_answers(encoder) -> None:
    from ddibench.evaluation.text_scorers import BertScorer, selfcheck_bertscore

    scorer = BertScorer(encoder)
    answer = "Warfarin raises the bleeding risk. Check the INR often."
    consistent = selfcheck_bertscore(scorer, answer, [answer, answer])
    different = selfcheck_bertscore(scorer, answer, ["Bananas grow in the tropics.", "The stock market fell today."])
    assert consistent is not None and different is not None
    assert consistent < 0.05 < different <= 1.0
    assert selfcheck_bertscore(scorer, answer, []) is None


def test_judge_parsing_and_agreement() -> None:
    from ddibench.evaluation.judge import agreement, parse_grades, weighted_kappa

    assert parse_grades('{"correctness": 4, "clarity": 5}') == (4, 5)
    assert parse_grades("Correctness: 2\nClarity = 3") == (2, 3)
    assert parse_grades("no idea") == (None, None)
    a = np.array([1, 2, 3, 4, 5, 5])
    assert weighted_kappa(a, a, 5) == pytest.approx(1.0)
    first = {str(i): {"correctness": int(v)} for i, v in enumerate(a)}
    second = {str(i): {"correctness": int(max(1, v - 1))} for i, v in enumerate(a)}
    result = agreement(first, second)
    assert result["n"] == 6 and result["within_one"] == 1.0 and result["exact"] < 1.0


def test_qa_run_judge_selfcheck_and_rescore(cli, tmp_path: Path) -> None:
    with running_stub(StubConfig(model="answerer")) as one, running_stub(StubConfig(model="second")) as two:
        run_dir = tmp_path / "run"
        code, out, err = cli(
            "run",
            "-s",
            "no-rag",
            "-t",
            "ddi_qa_s2",
            "--limit",
            "4",
            "--selfcheck",
            "2",
            "-m",
            f"vllm:answerer@{one.base_url}",
            "--run-dir",
            str(run_dir),
        )
        assert code == 0, err
        results = json.loads((run_dir / "results.json").read_text())
        metrics = results["evaluation"]["metrics"]
        assert {
            "embedding_similarity",
            "bertscore_f1",
            "label_recovery",
            "judge_correctness",
            "judge_clarity",
            "judge_overall",
            "selfcheck",
        } <= set(metrics)
        scoring = results["manifest"]["scoring"]
        assert scoring["judge"]["identity"]["model"] == "answerer" and len(scoring["judge"]["rubric_sha256"]) == 64
        assert scoring["selfcheck"]["n"] == 2 and scoring["selfcheck"]["seeds"] == [1000, 1001]
        assert len(results["evaluation"]["per_sample"]) == 4
        # the report's scoring lines come from the evaluator (it reads the manifest section it wrote)
        rubric = scoring["judge"]["rubric_sha256"][:12]
        assert f"judge: {one.base_url} answerer, rubric {rubric}" in out
        assert "SelfCheckGPT: n=2 samples at temperature 1.0, seeds [1000, 1001]" in out
        journal = (run_dir / "journal.jsonl").read_bytes()
        calls = len(one.requests)

        code, out, err = cli("rescore", str(run_dir), "--second-judge", f"vllm:second@{two.base_url}")
        assert code == 0, err
        again = json.loads((run_dir / "results.json").read_text())
        assert again["manifest"]["scoring"]["judge_agreement"]["n"] == 4
        assert len(two.requests) == 4 and len(one.requests) == calls  # first judge and samples reused from scores/
        assert (run_dir / "journal.jsonl").read_bytes() == journal
        assert f"second judge: {two.base_url} second, rubric {rubric}" in out and "judge agreement: {" in out
        code, _, err = cli("rescore", str(run_dir), "--no-judge", "--selfcheck", "0")
        assert code == 0, err
        bare = json.loads((run_dir / "results.json").read_text())["evaluation"]["metrics"]
        assert "judge_overall" not in bare and "selfcheck" not in bare and "bertscore_f1" in bare
        # scores/ still holds the grades and samples of the first scoring: a bundle of the bare run ignores them
        assert any((run_dir / "scores").glob("selfcheck-*")) and any((run_dir / "scores").glob("judge-*"))
        from ddibench.submission import verify

        for compact in (False, True):
            args = ["--compact"] if compact else []
            bundle = tmp_path / f"bare-{compact}.tar.gz"
            code, _, err = cli("submit", *args, str(run_dir), "--out", str(bundle))
            assert code == 0, err
            verdict = verify(bundle)
            assert verdict.is_preview(), verdict.reasons  # a --limit run, recomputed as it was scored
            assert "selfcheck" not in verdict.evaluation.metrics and "judge_overall" not in verdict.evaluation.metrics
    # a judge or SelfCheckGPT only adds scores: the board ranks such runs with the plain ones
    from ddibench.registry import get_task
    from ddibench.results.store import scoring_variant

    evaluator = get_task("ddi_qa_s2").evaluator()
    models = evaluator.configure({"judge": False, "selfcheck": 5, "second_judge": "vllm:x@http://127.0.0.1:1/v1"})
    assert scoring_variant(models) == scoring_variant(evaluator) == f"text scorers v{evaluator.version}"


@pytest.mark.parametrize("system", ["sql-agent", "drugrag", "no-rag"])
def test_free_text_systems_join_the_ddi_matrix(cli, stub, tmp_path: Path, system: str) -> None:
    code, _, err = cli(
        "run",
        "-s",
        system,
        "-t",
        "drugbank_s2",
        "--limit",
        "3",
        "-m",
        f"vllm:stub-model@{stub.base_url}",
        "--run-dir",
        str(tmp_path / "r"),
    )
    assert code == 0, err
    preds = [json.loads(line)["prediction"] for line in (tmp_path / "r" / "journal.jsonl").read_text().splitlines()]
    assert all(isinstance(p["label"], int) and 0 <= p["label"] < 86 and p["text"] for p in preds)
    assert all(p["trace"]["label_recovery"] in ("template", "string", "embedding") for p in preds)


def test_sql_agent_validity_counters(cli, tmp_path: Path) -> None:
    sql = "SELECT description FROM ddi WHERE drug_name = 'Warfarin'"
    with running_stub(StubConfig(reply=sql)) as stub:
        code, _, err = cli(
            "run",
            "-s",
            "sql-agent",
            "-t",
            "ddi_qa_s2",
            "--limit",
            "3",
            "--no-judge",
            "--selfcheck",
            "0",
            "-m",
            f"vllm:stub-model@{stub.base_url}",
            "--run-dir",
            str(tmp_path / "r"),
        )
    assert code == 0, err
    counters = json.loads((tmp_path / "r" / "results.json").read_text())["system_info"]["counters"]
    assert (
        counters["sql_written"] >= 3
        and counters["sql_parsed"] == counters["sql_written"]
        and counters["sql_executed"] == counters["sql_parsed"]
    )
    assert counters["sql_non_empty"] == 3  # Warfarin is a training drug of S2


def test_text_rag_retrieves_from_the_corpus(cli, stub, tmp_path: Path) -> None:
    small = ["-C", "interaction_chunks=200", "-C", "monograph_chunks=200", "-C", "medquad_chunks=200"]
    code, _, err = cli(
        "run",
        "-s",
        "agentic-rag",
        "-t",
        "medquad",
        "--limit",
        "2",
        "--no-judge",
        "--selfcheck",
        "0",
        "-m",
        f"vllm:stub-model@{stub.base_url}",
        *small,
        "--run-dir",
        str(tmp_path / "r"),
    )
    assert code == 0, err
    trace = json.loads((tmp_path / "r" / "journal.jsonl").read_text().splitlines()[0])["prediction"]["trace"]
    assert len(trace["retrieved"]) == 5 and trace["follow_up_query"]
    assert {c["source"] for c in trace["retrieved"] + trace["retrieved_again"]} <= {
        "monograph",
        "interaction",
        "medquad",
    }


def test_scorer_encoder_is_recorded_and_kept_off_the_board(cli, stub, tmp_path: Path) -> None:
    """A user's own encoder path scores QA answers, is recorded, survives rescoring, and keeps the run
    off the board until it is scored again with the task's default encoder."""
    import shutil

    from ddibench.embeddings import encoder_path
    from ddibench.submission import verify

    mine = tmp_path / "my-encoder"
    shutil.copytree(encoder_path("minilm"), mine)  # stands for a local biomedical encoder
    code, _, err = cli(
        "run",
        "-s",
        "no-rag",
        "-t",
        "drugbank_s2",
        "--scorer-encoder",
        str(mine),
        "-m",
        f"vllm:stub-model@{stub.base_url}",
    )
    assert code != 0 and "--scorer-encoder does not apply to drugbank_s2" in err
    code, _, err = cli(
        "run",
        "-s",
        "no-rag",
        "-t",
        "medquad",
        "--scorer-encoder",
        str(tmp_path / "nothing"),
        "-m",
        f"vllm:stub-model@{stub.base_url}",
        "--run-dir",
        str(tmp_path / "never"),
    )
    assert code != 0 and "not a sentence-transformers model directory" in err and not (tmp_path / "never").exists()

    run_dir = tmp_path / "run"
    args = (
        "run",
        "-s",
        "no-rag",
        "-t",
        "medquad",
        "--limit",
        "3",
        "--no-judge",
        "--selfcheck",
        "0",
        "-m",
        f"vllm:stub-model@{stub.base_url}",
    )
    code, _, err = cli(*args, "--scorer-encoder", str(mine), "--run-dir", str(run_dir))
    assert code == 0, err
    results = json.loads((run_dir / "results.json").read_text())
    assert results["manifest"]["scoring"]["scorers"]["embedding"]["encoder"] == str(mine)
    similarity = results["evaluation"]["metrics"]["embedding_similarity"]["value"]
    code, _, err = cli(*args, "--run-dir", str(tmp_path / "default"))
    assert code == 0, err
    default = json.loads((tmp_path / "default" / "results.json").read_text())
    assert default["evaluation"]["metrics"]["embedding_similarity"]["value"] == pytest.approx(
        similarity
    )  # same weights, same scores

    code, _, err = cli("rescore", str(run_dir), "--no-judge")
    assert code == 0, err
    assert json.loads((run_dir / "results.json").read_text())["manifest"]["scoring"]["scorers"]["embedding"][
        "encoder"
    ] == str(mine)
    code, _, err = cli("submit", str(run_dir), "--out", str(tmp_path / "b.tar.gz"))
    assert code == 0, err
    verdict = verify(tmp_path / "b.tar.gz")
    assert any(r.startswith("scoring options: scored with --scorer-encoder") for r in verdict.reasons)
    code, _, err = cli("rescore", str(run_dir), "--no-judge", "--scorer-encoder", "minilm")
    assert code == 0, err
    code, _, err = cli("submit", str(run_dir), "--out", str(tmp_path / "c.tar.gz"))
    assert code == 0, err
    assert not any(r.startswith("scoring options") for r in verify(tmp_path / "c.tar.gz").reasons)


def test_top_passage_answers_with_the_keyword_searchs_first_passage(cli, tmp_path: Path) -> None:
    """The QA floor uses no model: each answer is, verbatim, a training interaction sentence that names one
    of the question's two drugs (the only words a DDI question shares with those sentences); a corpus cut
    to nothing is a one-line error, and no results are written."""
    only_sentences = ["-C", "monograph_chunks=0", "-C", "medquad_chunks=0"]
    run_dir = tmp_path / "floor"
    code, _, err = cli(
        "run", "-s", "top-passage", "-t", "ddi_qa_s1", "--limit", "20", "--no-judge", *only_sentences,
        "--run-dir", str(run_dir),
    )  # fmt: skip
    assert code == 0, err
    results = json.loads((run_dir / "results.json").read_text())
    # SelfCheckGPT is on by default, but no answer has a prompt to sample again: no model starts
    assert results["manifest"]["models"] == {} and "selfcheck" not in results["manifest"]["scoring"]
    assert "selfcheck" not in results["evaluation"]["metrics"] and not (run_dir / "llm-server.log").exists()
    assert results["system_info"]["corpus"] == {"interaction": len(get_task("ddi_qa_s1").load().split("train"))}
    task = get_task("ddi_qa_s1")
    labels = task.label_space
    sentences = {
        f"interaction:{s.id}": labels[s.target["label"]].render(s.input.pair.head.name, s.input.pair.tail.name)
        for s in task.load().split("train")
    }
    questions = {s.id: s.input for s in task.load().split("test")}
    rows = [json.loads(line)["prediction"] for line in (run_dir / "journal.jsonl").read_text().splitlines()]
    assert len(rows) == 20
    for row in rows:
        passage = row["trace"]["passage"]
        assert passage["source"] == "interaction" and row["text"] == sentences[passage["id"]]
        pair = questions[row["sample_id"]].pair
        assert pair.head.name in row["text"] or pair.tail.name in row["text"], (row["text"], pair)
    assert results["evaluation"]["metrics"]["label_recovery"]["value"] < 1.0  # a neighbour's sentence, not the pair's

    code, _, err = cli(
        "run", "-s", "top-passage", "-t", "medquad", "--limit", "2", "--no-judge", "--selfcheck", "0",
        *only_sentences, "--run-dir", str(tmp_path / "empty"),
    )  # fmt: skip
    assert code != 0 and "top-passage has no corpus passage to search on medquad" in err
    assert not (tmp_path / "empty" / "results.json").exists()
