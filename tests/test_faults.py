"""Correctness under faults: a run through a fault-injecting proxy ends with the metrics of a clean run.

The proxy (``ddibench.llm.stub.FaultProxy``) sits in front of a healthy stub server and answers a share
of the chat requests with 5xx, 429 with Retry-After, no answer at all, bodies that are not JSON or are
cut short, and 200 responses that are not completions (an error object, ``"choices": []``, a message
without content). Every such response must be retried, never cached, and a sample whose calls all fail
must end as failed with the reason; a run's numbers must not move.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from ddibench.llm import LLMCallError, LLMPool, ModelSpec, ResponseCache, unusable_reason
from ddibench.llm.stub import FAULTS, StubConfig, running_proxy, running_stub

FAULT_SHARES = {
    "500": 0.03,
    "503": 0.02,
    "429": 0.04,
    "hang": 0.015,
    "garbage": 0.03,
    "truncated": 0.02,
    "list": 0.02,
    "error200": 0.04,
    "empty_choices": 0.04,
    "null_content": 0.03,
}
N_ITEMS = 300


def journal(run_dir: Path) -> dict[str, dict]:
    lines = (run_dir / "journal.jsonl").read_text().splitlines() if (run_dir / "journal.jsonl").exists() else []
    return {p["sample_id"]: p for p in (json.loads(line)["prediction"] for line in lines)}


def answers(preds: dict[str, dict]) -> dict[str, tuple]:
    return {sid: (p["label"], p["text"], p["valid"]) for sid, p in preds.items()}


def test_a_run_through_a_faulty_proxy_ends_with_the_clean_runs_metrics(
    cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    common = ["run", "-s", "zero-shot", "-t", "drugbank_s1", "--limit", str(N_ITEMS), "--concurrency", "16"]
    with running_stub(StubConfig()) as stub:
        monkeypatch.setenv("DDIBENCH_CACHE", str(tmp_path / "clean-cache"))
        code, _, err = cli(*common, "-m", f"vllm:stub-model@{stub.base_url}", "--run-dir", str(tmp_path / "clean"))
        assert code == 0, err
        clean = json.loads((tmp_path / "clean" / "results.json").read_text())

        monkeypatch.setenv("DDIBENCH_CACHE", str(tmp_path / "cache"))
        with running_proxy(stub.base_url, FAULT_SHARES, seed=1) as proxy:
            run_dir = tmp_path / "faulty"
            args = [*common, "-m", f"vllm:stub-model@{proxy.base_url}", "--run-dir", str(run_dir)]
            for _ in range(
                4
            ):  # a sample whose six attempts all fail ends failed-with-reason; the same command retries it
                code, _, err = cli(*args)
                sessions = [json.loads(line) for line in (run_dir / "sessions.jsonl").read_text().splitlines()]
                last = sessions[-1]
                assert last["state"] in ("finished", "failed") and last["session_id"] == sessions[-2]["session_id"]
                done = journal(run_dir)
                assert set(done).isdisjoint(last["failed"])
                assert all("failed after 6 attempts" in reason for reason in last["failed"].values())
                assert (
                    len(done) + len(last["failed"]) == N_ITEMS or code == 0
                )  # every sample scored or failed with its reason
                if code == 0:
                    break
                assert (
                    code == 3
                    and "samples got no answer from the model endpoint (e.g. " in err
                    and len(err.strip().splitlines()) == 1
                )
            assert code == 0, err
            injected = dict(proxy.injected)
            faulty = json.loads((run_dir / "results.json").read_text())

            # no failure was cached: every entry holds a completion, and a rerun through the healed proxy
            # (the same endpoint, so the same cache keys) is served from the cache alone
            with sqlite3.connect(tmp_path / "cache" / "llm-cache.sqlite") as conn:
                cached = [json.loads(r[0]) for r in conn.execute("SELECT response FROM responses")]
            assert len(cached) == N_ITEMS and all(c["text"] and c["finish_reason"] == "stop" for c in cached)
            proxy.faults = {}
            before = len(stub.requests)
            code, _, err = cli(*args[:-1], str(tmp_path / "from-cache"))
            assert code == 0, err
            assert len(stub.requests) == before
            again = json.loads((tmp_path / "from-cache" / "results.json").read_text())
            assert again["evaluation"]["metrics"] == clean["evaluation"]["metrics"]

        # the numbers did not move: every prediction is the clean run's
        assert faulty["evaluation"]["metrics"] == clean["evaluation"]["metrics"]
        wrong = sum(1 for sid, a in answers(journal(run_dir)).items() if answers(journal(tmp_path / "clean"))[sid] != a)
        assert wrong == 0
        assert set(injected) == set(FAULT_SHARES) and sum(injected.values()) >= 0.2 * N_ITEMS, injected
        print(f"\nfaults injected: {sum(injected.values())} {injected}; samples wrong: {wrong} of {N_ITEMS}")
        usage = Counter()
        for s in sessions:
            for key, value in s.get("llm_usage", {}).get("generator", {}).items():
                usage[key] += value
        assert (
            usage["unusable"] > 0
            and usage["timeouts"] > 0
            and usage["retries"] >= sum(injected.values()) - usage["failures"]
        )


@pytest.mark.parametrize("fault", [f for f in FAULTS if f != "hang"])
def test_a_fault_that_persists_fails_the_call_with_its_reason_and_caches_nothing(tmp_path: Path, fault: str) -> None:
    cache = ResponseCache(tmp_path / "cache.sqlite")
    with running_stub(StubConfig(script=[fault] * 3)) as stub:
        spec = ModelSpec.parse(f"vllm:stub-model@{stub.base_url}")

        async def ask() -> str:
            pool = LLMPool({"generator": spec}, cache=cache, max_retries=2)
            pool.served[spec.display()] = {}
            await pool.start(["generator"])
            client = pool.client("generator")
            client.backoff_base = 0.001
            try:
                return (await client.chat([{"role": "user", "content": "Warfarin and aspirin?"}])).text
            finally:
                await pool.close()

        with pytest.raises(LLMCallError, match="failed after 3 attempts") as info:
            asyncio.run(ask())
        assert "re-run the same command" in str(info.value)
        assert cache.stats() == {}
        assert asyncio.run(ask()).startswith(
            "A plausible mechanism"
        )  # the script is spent: a healthy answer, now cached
    assert sum(cache.stats().values()) == 1


def test_what_counts_as_a_usable_completion() -> None:
    def completion(**fields: object) -> dict:
        choice = {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
        return {"id": "x", "choices": [choice], **fields}

    assert unusable_reason(completion()) is None
    empty = completion()
    empty["choices"][0]["message"]["content"] = ""
    assert unusable_reason(empty) is None  # an empty answer is the model's answer (scored as unparsable)
    refusal = completion()
    refusal["choices"][0]["message"] = {"role": "assistant", "content": None, "refusal": "I cannot help with that."}
    assert unusable_reason(refusal) is None
    assert "error object" in unusable_reason({"error": {"message": "overloaded"}})
    assert "error object" in unusable_reason(completion(error={"message": "partial failure"}))
    assert unusable_reason({"choices": []}) == "no choices"
    assert unusable_reason({"id": "x"}) == "no choices"
    assert unusable_reason({"choices": "nope"}) == "choices is not a list"
    aborted = completion()
    aborted["choices"][0]["finish_reason"] = "abort"
    assert unusable_reason(aborted) == "finish_reason 'abort'"
    assert "not a completion object" in unusable_reason([])
    assert (
        unusable_reason({"choices": [{"message": {"role": "assistant", "content": None}}]})
        == "a message without content"
    )


def test_an_error_body_cached_by_an_older_version_is_asked_again(tmp_path: Path) -> None:
    from ddibench.llm import cache_key

    cache = ResponseCache(tmp_path / "cache.sqlite")
    with running_stub(StubConfig(reply="a real answer")) as stub:
        spec = ModelSpec.parse(f"vllm:stub-model@{stub.base_url}")
        messages = [{"role": "user", "content": "Warfarin and aspirin?"}]
        params = {"temperature": 0.0, "max_tokens": 256}
        key = cache_key(spec.identity(), messages, params, 0)
        cache.put(
            key, spec.identity(), {}, {"text": "", "finish_reason": None, "prompt_tokens": 0, "completion_tokens": 0}
        )

        async def ask() -> tuple[str, bool]:
            pool = LLMPool({"generator": spec}, cache=cache)
            pool.served[spec.display()] = {}
            await pool.start(["generator"])
            try:
                result = await pool.client("generator").chat(messages)
                return result.text, result.cached
            finally:
                await pool.close()

        assert asyncio.run(ask()) == ("a real answer", False)
        assert asyncio.run(ask()) == ("a real answer", True)
        assert len(stub.requests) == 1


def test_the_endpoint_policy_adapts_its_deadline_and_concurrency() -> None:
    from ddibench.llm import EndpointPolicy
    from ddibench.llm._policy import FLOOR, MIN_OBSERVED

    policy = EndpointPolicy(16, timeout=120)
    assert policy.deadline(0) == 120  # nothing seen yet: the full timeout
    for _ in range(MIN_OBSERVED):
        policy.answered(0.01)
    assert policy.deadline(0) == FLOOR and policy.deadline(1) == 2 * FLOOR and policy.deadline(10) == 120
    for _ in range(200):
        policy.answered(1.0)
    assert policy.deadline(0) == 8.0  # 8 x the recent p95
    policy.timed_out()
    assert policy.limit == 16  # one timeout among answers: a slow request, not a stalled endpoint
    policy.timed_out()
    policy.timed_out()
    assert policy.limit == 4 and policy.lowest_limit == 4  # repeated, with no answer in between: halved each time
    policy.answered(0.5)
    assert policy.limit == 5 and policy.consecutive_timeouts == 0
    policy.overloaded()
    assert policy.limit == 2
    assert EndpointPolicy(4, timeout=30, adaptive=False).deadline(3) == 30

    async def slots() -> list[int]:
        small = EndpointPolicy(2, timeout=10)
        seen: list[int] = []

        async def one() -> None:
            async with small:
                seen.append(small.active)
                await asyncio.sleep(0.01)

        await asyncio.gather(*(one() for _ in range(10)))
        return seen

    assert max(asyncio.run(slots())) == 2


def test_a_held_slot_keeps_a_series_of_requests_together() -> None:
    """The likelihood walk's requests continue one prompt: while one sample holds the endpoint's only slot, no
    other sample's request comes in between (a one-slot llama.cpp server would evaluate the long prompt again)."""
    from ddibench.llm import EndpointPolicy

    async def order(hold: bool) -> list[str]:
        policy = EndpointPolicy(1, timeout=10, adaptive=False)
        seen: list[str] = []

        async def request(name: str) -> None:
            async with policy:
                seen.append(name)
                await asyncio.sleep(0.005)

        async def series(name: str) -> None:
            async def three() -> None:
                for _ in range(3):
                    await request(name)

            if hold:
                async with policy.hold(), policy.hold():  # the inner hold is nested: the outer slot, no second one
                    await three()
            else:
                await three()

        await asyncio.gather(series("a"), series("b"), series("c"))
        assert policy.active == 0
        return seen

    assert asyncio.run(order(hold=False)) == list("abcabcabc")  # one slot, taken in turn: every request interleaves
    assert asyncio.run(order(hold=True)) == list("aaabbbccc")


def test_serial_requests_go_one_at_a_time_while_generating_ones_fill_the_slots() -> None:
    """The embedded server's policy: prompt-bound roles one request at a time, generation roles up to the slots;
    a serial request waiting for its turn does not keep a generating one from a free slot, and a held series of
    serial requests counts as the one serial request in flight."""
    from ddibench.llm import EndpointPolicy

    async def run() -> tuple[EndpointPolicy, list[tuple[int, int]], list[str]]:
        policy = EndpointPolicy(4, timeout=10, adaptive=False, serial_limit=1)
        seen: list[tuple[int, int]] = []  # (in flight, serial in flight) as each request starts
        order: list[str] = []

        async def request(name: str, serial: bool) -> None:
            async with policy.slot(serial):
                seen.append((policy.active, policy.active_serial))
                order.append(name)
                await asyncio.sleep(0.01)

        async def held_series() -> None:
            async with policy.hold(serial=True):
                for _ in range(3):
                    await request("h", serial=True)

        await asyncio.gather(
            *(request(f"s{i}", serial=True) for i in range(3)),
            *(request(f"g{i}", serial=False) for i in range(6)),
            held_series(),
        )
        return policy, seen, order

    policy, seen, order = asyncio.run(run())
    assert policy.active == 0 and policy.active_serial == 0
    assert max(active for active, _ in seen) == 4  # the slots were filled...
    assert max(serial for _, serial in seen) == 1  # ...never by two serial requests
    # the three generating requests after the first serial one started at once, while s1 and s2 waited
    assert order[:4] == ["s0", "g0", "g1", "g2"]
    assert order.count("h") == 3 and policy.stats()["serial_concurrency"] == 1


def test_hung_requests_are_cut_long_before_the_timeout(tmp_path: Path) -> None:
    import time

    with running_stub(StubConfig()) as stub, running_proxy(stub.base_url, {"hang": 0.1}, seed=2) as proxy:
        spec = ModelSpec.parse(f"vllm:stub-model@{proxy.base_url}")

        async def ask_all() -> tuple[LLMPool, list[str]]:
            pool = LLMPool({"generator": spec}, cache=None, concurrency=8)  # the default 120 s timeout
            pool.served[spec.display()] = {}
            await pool.start(["generator"])
            client = pool.client("generator")
            try:
                results = await asyncio.gather(
                    *(client.chat([{"role": "user", "content": f"pair {i}?"}]) for i in range(80))
                )
            finally:
                await pool.close()
            return pool, [r.text for r in results]

        start = time.perf_counter()
        pool, texts = asyncio.run(ask_all())
        wall = time.perf_counter() - start
    usage = pool.ledger.roles["generator"]
    assert len(texts) == 80 and all(texts) and proxy.injected["hang"] >= 4
    assert usage.timeouts == proxy.injected["hang"] and usage.failures == 0
    assert wall < 40, wall  # each hung request cost seconds (a few deadlines), not the 120 s timeout
    stats = pool.endpoint_stats()[spec.display()]
    assert stats["timeouts"] == usage.timeouts and stats["deadline_s"] is not None and stats["timeout_s"] == 120
