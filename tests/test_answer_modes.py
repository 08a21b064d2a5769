"""Answers that ignore the question: the answer spread and its collapse flag, seeded option orders, and the
likelihood answer mode, against the loopback stub that speaks the OpenAI protocol."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import pytest

from ddibench.evaluation.answers import answer_distribution
from ddibench.llm.stub import StubConfig, running_stub
from ddibench.toolkit.label_choice import option_order

LOG = math.log
PREFIX = '{"type": '
# the option numbers after '{"type": ' as a digit-by-digit tokenizer walks them (options 1..12, so "1" goes on)
TREE = {
    PREFIX: [("1", LOG(0.5)), ("2", LOG(0.3)), (" ", LOG(0.1)), ("3", LOG(0.1))],
    PREFIX + "1": [("0", LOG(0.3)), ("1", LOG(0.3)), ("2", LOG(0.3)), ("}", LOG(0.05)), ("x", LOG(0.05))],
}


def _journal(run_dir: Path) -> list[dict]:
    return [json.loads(line)["prediction"] for line in (run_dir / "journal.jsonl").read_text().splitlines()]


def test_answer_distribution_flags_a_collapse_relative_to_the_gold() -> None:
    gold = [[i % 3] for i in range(30)]  # the gold's most frequent label: a third of the samples
    spread = answer_distribution([i % 3 for i in range(30)], gold, 86)
    assert (
        not spread.collapsed
        and spread.top_share == pytest.approx(1 / 3, abs=1e-4)
        and spread.entropy == pytest.approx(math.log(3) / math.log(30), abs=1e-4)
    )
    collapsed = answer_distribution(
        [0] * 27 + [1, 2, 3], gold, 86, names=["first", "b", "c", "d"], positions=[1] * 27 + [2, 3, 4]
    )
    assert collapsed.collapsed and collapsed.top_share == 0.9 and collapsed.first_position_share == 0.9
    assert "'first' for 90% of 30 valid answers" in collapsed.message and "first option listed" in collapsed.message
    # a yes/no gold of 60% "no": a classifier answering "no" 85% of the time leans to the majority, 95% is collapsed
    yes_no = [[0]] * 60 + [[1]] * 40
    assert not answer_distribution([0] * 85 + [1] * 15, yes_no, 2).collapsed
    assert answer_distribution([0] * 95 + [1] * 5, yes_no, 2).collapsed
    assert not answer_distribution([0] * 9, [[1]] * 9, 86).collapsed  # too few answers to say


def test_likelihood_walks_the_option_tree_and_beats_greedy_digit_by_digit() -> None:
    from ddibench.llm import LLMPool, ModelSpec
    from ddibench.toolkit.likelihood import option_likelihoods

    options = [str(i) for i in range(1, 13)]
    with running_stub(StubConfig(next_tokens=TREE)) as server:
        spec = ModelSpec.parse(f"llamacpp:stub-model@{server.base_url}")

        async def go():  # noqa: ANN202
            pool = LLMPool({"generator": spec}, cache=None)
            await pool.start(["generator"])
            try:
                return await option_likelihoods(
                    pool.client("generator"), [{"role": "user", "content": "which?"}], PREFIX, options
                )
            finally:
                await pool.close()

        scores = asyncio.run(go())
        asked = [r["messages"][-1] for r in server.requests]
    # two requests: the root and "1" (the only node with more than one way on); each continues the answer so far
    assert asked == [{"role": "assistant", "content": PREFIX}, {"role": "assistant", "content": PREFIX + "1"}]
    valid_root = 0.5 + 0.3 + 0.1  # " " leads to no option: left out of the renormalisation
    p = {o: None if lp is None else math.exp(lp) for o, lp in zip(options, scores.logprobs)}
    assert p["2"] == pytest.approx(0.3 / valid_root) and p["3"] == pytest.approx(0.1 / valid_root)
    assert p["10"] == pytest.approx(0.5 / valid_root * 0.3 / 0.95) and p["1"] == pytest.approx(
        0.5 / valid_root * 0.05 / 0.95
    )  # "x" closes nothing
    assert p["4"] is None  # never among the top tokens: not scored
    # greedy would take "1" (0.5) then "0": option 10; the likelihood compares whole options: option 2
    assert options[scores.best()] == "2"


def test_shuffled_options_map_answers_back_and_the_collapse_is_reported(cli, tmp_path: Path) -> None:
    with running_stub(StubConfig(reply='{"type": 1}')) as server:  # always the first option listed
        model = f"llamacpp:stub-model@{server.base_url}"
        args = ["run", "-s", "zero-shot", "-t", "drugbank_s2", "--limit", "12", "-m", model, "--no-cache"]
        code, plain, err = cli(*args, "--run-dir", str(tmp_path / "plain"))
        assert code == 0, err
        code, shuffled, err = cli(*args, "-C", "shuffle_options=3", "--run-dir", str(tmp_path / "shuffled"))
        assert code == 0, err
        system_prompts = {r["messages"][0]["content"] for r in server.requests}
    first = option_order(86, 3)[0]
    assert first != 0 and len(system_prompts) == 2  # one order per run: one system prompt each
    assert {(p["label"], p["position"]) for p in _journal(tmp_path / "plain")} == {(0, 1)}
    assert {(p["label"], p["position"]) for p in _journal(tmp_path / "shuffled")} == {(first, 1)}
    for out in (plain, shuffled):
        assert "warning: collapsed answers: answers label" in out and "100% of 12 valid answers" in out
        assert "first option listed: 100%" in out
    results = json.loads((tmp_path / "shuffled" / "results.json").read_text())
    assert results["evaluation"]["answers"]["collapsed"] and results["evaluation"]["answers"]["top_label"] == first
    assert results["manifest"]["system"]["config"]["shuffle_options"] == 3
    # on the board: both previews, each flagged, the shuffled one under its variant (the bundles are compact:
    # the positions travel with the answers)
    from leaderboard.static import markdown_table, write_site

    store = tmp_path / "board.duckdb"
    for name in ("plain", "shuffled"):
        code, out, err = cli("submit", "--compact", str(tmp_path / name), "--out", str(tmp_path / f"{name}.tar.gz"))
        assert code == 0, out + err
        code, out, err = cli("board", "add", "--previews", "--store", str(store), str(tmp_path / f"{name}.tar.gz"))
        assert code == 0, out + err
    table = markdown_table(store)
    rows = [line for line in table.splitlines() if line.startswith("| drugbank_s2 | zero-shot |")]
    assert len(rows) == 2 and all("⚠ collapsed" in row for row in rows), table
    assert sum("shuffle\\_options=3" in row or "shuffle_options=3" in row for row in rows) == 1, table
    write_site(store, tmp_path / "site")
    index = (tmp_path / "site" / "index.html").read_text()
    assert index.count("⚠ collapsed") == 2 and "shuffle_options=3" in index


def test_shuffled_likelihood_runs_verify_and_reproduce_and_an_endpoint_without_prefill_is_refused(
    cli, tmp_path: Path
) -> None:
    tree = {PREFIX: [("4", LOG(0.6)), ("1", LOG(0.3)), ("}", LOG(0.1))]}  # "}" ends no option: left out
    tree[PREFIX + "1"] = [("}", LOG(0.9)), ("2", LOG(0.1))]
    tree[PREFIX + "4"] = [("}", LOG(0.7)), ("0", LOG(0.3))]
    with running_stub(StubConfig(next_tokens=tree)) as server:
        model = f"llamacpp:stub-model@{server.base_url}"
        run_dir = tmp_path / "likelihood"
        code, out, err = cli(
            "run",
            "-s",
            "zero-shot",
            "-t",
            "drugbank_s2",
            "-m",
            model,
            "-C",
            "answer_mode=likelihood",
            "-C",
            "shuffle_options=5",
            "--run-dir",
            str(run_dir),
            "--no-cache",
        )
        assert code == 0, err
        preds = _journal(run_dir)
        fourth = option_order(86, 5)[3]
        assert len(preds) == 1992 and {(p["label"], p["position"], p["text"]) for p in preds} == {
            (fourth, 4, '{"type": 4}')
        }
        assert all(
            p["trace"]["likelihood"]["requests"] == 3 for p in preds
        )  # the root, "1" and "4" go on (10-19, 40-49)
        code, out, err = cli("submit", "--compact", str(run_dir), "--out", str(tmp_path / "b.tar.gz"))
        assert code == 0, out + err
        code, out, err = cli("verify", "--reproduce", str(tmp_path / "b.tar.gz"))
        assert code == 0 and "FAILED" not in out and "1,992 of 1,992 predictions identical" in out, out + err
        code, out, err = cli(
            "run",
            "-s",
            "zero-shot",
            "-t",
            "drugbank_s2",
            "--limit",
            "2",
            "--base-url",
            server.base_url,
            "-m",
            "stub-model",
            "-C",
            "answer_mode=likelihood",
            "--run-dir",
            str(tmp_path / "refused"),
            "--no-cache",
        )
        assert code != 0 and "cannot continue an answer prefix" in err and len(err.strip().splitlines()) == 1
        code, out, err = cli(
            "run",
            "-s",
            "zero-shot",
            "-t",
            "twosides_s2",
            "--limit",
            "2",
            "-m",
            model,
            "-C",
            "answer_mode=likelihood",
            "--run-dir",
            str(tmp_path / "topk"),
        )
    assert code != 0 and "answer_mode=likelihood chooses one label" in err and len(err.strip().splitlines()) == 1


def test_text_options_cost_one_request_where_they_part() -> None:
    """Options scored by their texts: a stretch all the options still going on share costs no request (the
    constrained decoder takes it) up to the last place a token can end (before a space, never inside a word or
    after a space, where the model's top tokens would miss the options), a text that is also the start of a
    longer one is asked about, and a closing quote ends a text."""
    from ddibench.llm import LLMPool, ModelSpec
    from ddibench.toolkit.likelihood import option_likelihoods

    prefix = '{"interaction": "'
    options = ["A raises B", "A raises B's risk of bleeding", "A lowers B"]
    tree = {
        prefix + "A": [(" raises", LOG(0.6)), (" lowers", LOG(0.3)), (" is", LOG(0.1))],
        prefix + "A raises": [(" B", LOG(0.5)), (" C", LOG(0.1))],
        prefix + "A raises B": [('"', LOG(0.2)), ("'s", LOG(0.6)), (".", LOG(0.2))],
    }
    with running_stub(StubConfig(next_tokens=tree)) as server:
        spec = ModelSpec.parse(f"llamacpp:stub-model@{server.base_url}")

        async def go():  # noqa: ANN202
            pool = LLMPool({"generator": spec}, cache=None)
            await pool.start(["generator"])
            try:
                messages = [{"role": "user", "content": "which?"}]
                return await option_likelihoods(pool.client("generator"), messages, prefix, options, closers='"')
            finally:
                await pool.close()

        scores = asyncio.run(go())
        asked = [r["messages"][-1]["content"] for r in server.requests]
    # "A" (all three) is a shared stretch up to its space; " B" is shared too, but "A raises B" ends one option and
    # goes on with "'s" in the other: no place a token ends, so it is asked about; "lowers" leaves one option
    assert asked == [prefix + "A", prefix + "A raises", prefix + "A raises B"]
    p = [math.exp(lp) for lp in scores.logprobs]  # type: ignore[arg-type]
    a = 0.6 + 0.3  # "is" leads to no option: left out of the renormalisation
    assert p[2] == pytest.approx(0.3 / a) and p[0] == pytest.approx(0.6 / a * 0.2 / 0.8)
    assert p[1] == pytest.approx(0.6 / a * 0.6 / 0.8)  # "." ends nothing
    assert options[scores.best()] == "A raises B's risk of bleeding"


def test_likelihood_text_mode_answers_a_types_text_and_reproduces(cli, tmp_path: Path) -> None:
    from ddibench.registry import get_task
    from ddibench.toolkit.label_choice import option_texts

    texts = option_texts(get_task("drugbank_s2").label_space)
    prefix = '{"interaction": "'
    tree = {prefix: [(texts[4] + '"', LOG(0.6)), (texts[4][:4], LOG(0.3)), ("{", LOG(0.1))]}  # "{" leads nowhere
    with running_stub(StubConfig(next_tokens=tree)) as server:
        model = f"llamacpp:stub-model@{server.base_url}"
        run_dir = tmp_path / "text"
        code, out, err = cli(
            "run",
            "-s",
            "zero-shot",
            "-t",
            "drugbank_s2",
            "-m",
            model,
            "-C",
            "answer_mode=likelihood-text",
            "--run-dir",
            str(run_dir),
            "--no-cache",
        )
        assert code == 0, err
        system = server.requests[0]["messages"][0]["content"]
        assert f"- {texts[4]}\n" in system and '{"interaction": "..."}' in system and "1. " not in system
        preds = _journal(run_dir)
        assert {(p["label"], p["position"], p["text"]) for p in preds} == {(4, 5, prefix + texts[4] + '"}')}
        assert all(p["trace"]["likelihood"]["prefix"] == prefix for p in preds)
        code, out, err = cli("submit", "--compact", str(run_dir), "--out", str(tmp_path / "b.tar.gz"))
        assert code == 0, out + err
        code, out, err = cli("verify", "--reproduce", str(tmp_path / "b.tar.gz"))
        assert code == 0 and "1,992 of 1,992 predictions identical" in out, out + err
        code, _, err = cli(
            "run",
            "-s",
            "kaping",
            "-t",
            "twosides_s2",
            "--limit",
            "2",
            "-m",
            model,
            "-C",
            "answer_mode=likelihood-text",
            "--run-dir",
            str(tmp_path / "topk"),
        )
    assert code != 0 and "answer_mode=likelihood-text chooses one label" in err


@pytest.mark.parametrize(
    ("here", "going_on", "to"),
    [
        ("", ["Drug A may increase the X", "Drug A may decrease the Y"], "Drug A may"),  # before the space
        ("Drug A may", [" increase the X", " inhibit the Y"], "Drug A may"),  # parting inside a word: no jump
        ("", ["Drug A may increase", "Drug A may increase the X"], "Drug A may increase"),  # one ends, one goes on
        ("", ["Drug A, B", "Drug A, C"], "Drug A,"),  # punctuation ends a token as well
        ("", ["1", "10", "11"], ""),  # numbers: nothing shared
    ],
)
def test_a_shared_stretch_ends_where_a_token_can(here: str, going_on: list[str], to: str) -> None:
    from ddibench.toolkit.likelihood import _shared_stretch

    options = [here + o if not o.startswith(here) else o for o in going_on]
    assert options[0][: _shared_stretch(here, options)] == to
