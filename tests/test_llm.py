"""The LLM layer against real sockets: model specs, cache identity, retries, accounting, failures."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from conftest import gguf_bytes

from ddibench.errors import ConfigError, ModelEndpointError, UnknownNameError
from ddibench.llm import (
    LLMCallError,
    LLMPool,
    ModelSpec,
    ResponseCache,
    cache_key,
    parse_model_options,
    retry_after_seconds,
)
from ddibench.llm.stub import StubConfig, running_stub

MESSAGES = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Warfarin and aspirin?"}]


# ---------------------------------------------------------------------------------------------
# specs


def test_model_spec_syntax() -> None:
    spec = ModelSpec.parse("openai:gpt-4o-mini")
    assert (spec.provider, spec.model, spec.base_url, spec.json_mode) == (
        "openai",
        "gpt-4o-mini",
        "https://api.openai.com/v1",
        "schema",
    )
    spec = ModelSpec.parse("ollama:llama3.1:8b")
    assert (spec.model, spec.base_url) == ("llama3.1:8b", "http://127.0.0.1:11434/v1")
    spec = ModelSpec.parse("vllm:Qwen/Qwen2.5-7B-Instruct@http://gpu:8000/v1#revision=abc123,json=none")
    assert (spec.model, spec.base_url, spec.revision, spec.json_mode) == (
        "Qwen/Qwen2.5-7B-Instruct",
        "http://gpu:8000/v1",
        "abc123",
        "none",
    )
    assert spec.identity() == {
        "provider": "vllm",
        "model": "Qwen/Qwen2.5-7B-Instruct",
        "base_url": "http://gpu:8000/v1",
        "revision": "abc123",
    }
    spec = ModelSpec.parse("my-model", base_url="http://127.0.0.1:8080/v1")
    assert (spec.provider, spec.model) == ("openai-compatible", "my-model")
    roles = parse_model_options(["openai:gpt-4o-mini", "judge=deepseek:deepseek-chat"])
    assert roles.spec("generator").model == "gpt-4o-mini" and roles.spec("judge").provider == "deepseek"
    assert parse_model_options([]).spec("generator").is_embedded


def test_any_role_name_and_unset_roles_fall_back_to_the_generator() -> None:
    roles = parse_model_options(["generator=openai:gpt-4o-mini", "annotation_planner=vllm:planner@http://gpu:8000/v1"])
    assert roles.spec("describer").model == "gpt-4o-mini"  # never named: the generator's model
    assert roles.spec("annotation_planner").model == "planner" and roles.given("annotation_planner")
    assert not roles.given("second_judge")
    roles = parse_model_options(["openai:gpt-4o-mini#revision=2024-07-18"])  # '=' inside a spec is not a role
    assert roles.spec("judge").revision == "2024-07-18" and not roles.explicit
    with pytest.raises(ConfigError, match="names no provider"):
        parse_model_options(["judge=gpt-4o"])


@pytest.mark.parametrize(
    ("text", "error", "match"),
    [
        ("gpt-4o-mini", ConfigError, "names no provider; write 'openai:gpt-4o-mini'"),
        ("opnai:gpt-4o", UnknownNameError, "did you mean 'openai'"),
        ("vllm:some-model", ConfigError, "needs a server URL"),
        ("embedded:/nowhere/model.gguf", ConfigError, "does not exist"),
        ("embedded:/tmp/model.bin", ConfigError, "neither a pinned model nor a .gguf file"),
        ("embedded:qwen2.5-coder", ConfigError, "did you mean 'embedded:qwen2.5-coder-1.5b'"),
        ("openai:gpt-4o#temperature=1", ConfigError, "bad model option"),
    ],
)
def test_bad_model_specs_fail_with_one_line(text: str, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        ModelSpec.parse(text)


def test_openai_without_key_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ConfigError, match=r"needs an API key in \$OPENAI_API_KEY"):
        ModelSpec.parse("openai:gpt-4o-mini").api_key()


# ---------------------------------------------------------------------------------------------
# cache identity: two models never share an entry


def test_cache_key_covers_identity_messages_and_every_parameter(tmp_path: Path) -> None:
    a = tmp_path / "a" / "model.gguf"
    b = tmp_path / "b" / "model.gguf"
    for path, content in ((a, b"weights-one"), (b, b"weights-two")):
        path.parent.mkdir()
        path.write_bytes(gguf_bytes({"general.architecture": "llama"}) + content)
    ident_a = ModelSpec.parse(f"embedded:{a}").identity()
    ident_b = ModelSpec.parse(f"embedded:{b}").identity()
    assert ident_a["model"] == ident_b["model"] == "model"  # same name, different weights
    base = {"temperature": 0.0, "max_tokens": 32}
    keys = {
        cache_key(ident_a, MESSAGES, base, 0),
        cache_key(ident_b, MESSAGES, base, 0),
        cache_key({**ident_a, "revision": "r2"}, MESSAGES, base, 0),
        cache_key({"provider": "vllm", "model": "m", "base_url": "http://h1/v1"}, MESSAGES, base, 0),
        cache_key({"provider": "vllm", "model": "m", "base_url": "http://h2/v1"}, MESSAGES, base, 0),
        cache_key({"provider": "ollama", "model": "m", "base_url": "http://h1/v1"}, MESSAGES, base, 0),
        cache_key(ident_a, MESSAGES[1:], base, 0),
        cache_key(ident_a, MESSAGES, {**base, "temperature": 0.7}, 0),
        cache_key(ident_a, MESSAGES, {**base, "max_tokens": 33}, 0),
        cache_key(ident_a, MESSAGES, {**base, "response_format": {"type": "json_object"}}, 0),
        cache_key(ident_a, MESSAGES, base, 1),
    }
    assert len(keys) == 11
    assert cache_key(ident_a, MESSAGES, dict(reversed(base.items())), 0) == cache_key(ident_a, MESSAGES, base, 0)


def test_parameters_are_remembered_exactly_and_encoded_as_before() -> None:
    """The parameters' JSON (cache key and request body) is remembered between calls: what a call gets is
    what encoding its own parameters gives, even for values that are equal but encode differently."""
    import enum
    import json

    from ddibench.hashing import stable_json
    from ddibench.llm._wire import _encode_params, _params_memo

    class Seed(enum.IntEnum):  # not a plain JSON value: encoded on every call, never remembered
        ONE = 1

    def sdk_tail(params: dict) -> str:  # the body after the messages, as the openai SDK laid it out
        body = {k: params[k] for k in sorted(params) if k not in ("response_format", "extra_body")}
        body.update(params.get("extra_body") or {})
        if "response_format" in params:
            body["response_format"] = params["response_format"]
        return "," + json.dumps(body, ensure_ascii=False, separators=(",", ":"))[1:] if body else "}"

    schema = {"type": "object", "properties": {"type": {"type": "integer", "enum": [1, 2, 3]}}, "required": ["type"]}
    fmt = {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema, "strict": False}}
    variants = [
        {},
        {"temperature": 0.0, "max_tokens": 24},
        {"temperature": 0.0, "max_tokens": 24, "seed": 0, "response_format": fmt},
        {"max_tokens": 24, "temperature": 0.0, "response_format": fmt, "seed": 0},  # another order: the same JSON
        {"temperature": 0, "max_tokens": 24, "seed": 0, "response_format": fmt},  # 0 == 0.0 == False: three JSONs
        {"temperature": False, "max_tokens": 24, "seed": 0, "response_format": fmt},
        {
            "temperature": 0.0,
            "max_tokens": 24,
            "response_format": {"type": "json_object", "schema": {**schema, "required": [True]}},
        },
        {
            "temperature": 0.0,
            "max_tokens": 24,
            "response_format": {"type": "json_object", "schema": {**schema, "required": [1]}},
        },
        {
            "temperature": 0.7,
            "max_tokens": 8,
            "top_p": 0.9,
            "stop": ["\n", "é"],
            "extra_body": {"min_p": 0.1, "top_k": 5},
        },
        {"temperature": 0.0, "max_tokens": 24, "seed": Seed.ONE},
    ]
    _params_memo.clear()
    for params in variants + variants:  # the second time round, from the memo
        assert _encode_params(params) == (stable_json(params), sdk_tail(params))
    assert len(_params_memo) == len(variants) - 1  # the reordered dict is an entry of its own; the enum has none
    assert len({_encode_params(p)[0] for p in variants}) == len(variants) - 1  # only the reordered dict shares its JSON


def test_cache_writes_many_rows_per_statement_and_each_one_reads_back(tmp_path: Path) -> None:
    """The writer inserts hundreds of rows per statement, as many as SQLite's variable limit allows: every
    row lands, whatever the limit, and a row written again replaces the old one."""
    import sqlite3

    from ddibench.llm._cache import FLUSH_ROWS, _insert_rows, encode_messages

    cache = ResponseCache(tmp_path / "cache.sqlite")
    messages = encode_messages(MESSAGES)
    n = FLUSH_ROWS * 2 + 37  # the writer's batches, and a last partial statement
    for i in range(n):
        cache.put_encoded(f"key{i}", '{"model":"m"}', messages, '{"sample_index":0}', f'{{"text":"answer {i}"}}')
    cache.put_encoded("key7", '{"model":"m"}', messages, '{"sample_index":0}', '{"text":"answer 7, again"}')
    cache.close()
    reopened = ResponseCache(tmp_path / "cache.sqlite")
    assert [reopened.get(f"key{i}")["text"] for i in (0, 7, n - 1)] == [
        "answer 0",
        "answer 7, again",
        f"answer {n - 1}",
    ]  # type: ignore[index]
    assert reopened.stats() == {'{"model":"m"}': n}
    assert reopened.text(messages.texts[0][0]) == MESSAGES[0]["content"]
    reopened.close()

    conn = sqlite3.connect(tmp_path / "small.sqlite")
    conn.execute("CREATE TABLE responses (key TEXT PRIMARY KEY, created REAL, model TEXT, request TEXT, response TEXT)")
    conn.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 12)  # two rows per statement
    _insert_rows(conn, {f"k{i}": (0.0, "m", "{}", str(i)) for i in range(5)})
    assert conn.execute("SELECT key, response FROM responses ORDER BY key").fetchall() == [
        (f"k{i}", str(i)) for i in range(5)
    ]


async def _ask(spec: ModelSpec, cache: ResponseCache | None, **kwargs) -> tuple[str, LLMPool]:
    pool = LLMPool({"generator": spec}, cache=cache, concurrency=4, max_retries=kwargs.pop("max_retries", 5))
    if kwargs.pop("skip_preflight", False):
        pool.served[spec.display()] = {}
    await pool.start(["generator"])
    client = pool.client("generator")
    client.backoff_base = kwargs.pop("backoff_base", 0.01)
    try:
        result = await client.chat(MESSAGES, **kwargs)
    finally:
        await pool.close()
    return result.text, pool


def test_two_served_models_never_share_a_cache_entry(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path / "cache.sqlite")
    with (
        running_stub(StubConfig(model="alpha", reply="answer from alpha")) as one,
        running_stub(StubConfig(model="beta", reply="answer from beta")) as two,
        running_stub(StubConfig(model="alpha", reply="answer from another alpha server")) as three,
    ):
        first, _ = asyncio.run(_ask(ModelSpec.parse(f"vllm:alpha@{one.base_url}"), cache))
        second, _ = asyncio.run(_ask(ModelSpec.parse(f"vllm:beta@{two.base_url}"), cache))
        third, _ = asyncio.run(_ask(ModelSpec.parse(f"vllm:alpha@{three.base_url}"), cache))
        again, pool = asyncio.run(_ask(ModelSpec.parse(f"vllm:alpha@{one.base_url}"), cache))
        assert (first, second, third) == ("answer from alpha", "answer from beta", "answer from another alpha server")
        assert again == first and pool.ledger.roles["generator"].cache_hits == 1
        assert (len(one.requests), len(two.requests), len(three.requests)) == (1, 1, 1)
    assert sum(cache.stats().values()) == 3


# ---------------------------------------------------------------------------------------------
# retries, Retry-After, failures


def test_retry_after_is_honoured_and_counted() -> None:
    with running_stub(StubConfig(script=[429, 500, "garbage"], retry_after=1.0)) as stub:
        text, pool = asyncio.run(_ask(ModelSpec.parse(f"vllm:stub-model@{stub.base_url}"), None))
        assert text.startswith("A plausible mechanism")
        assert len(stub.requests) == 4
        assert stub.request_times[1] - stub.request_times[0] >= 0.95  # waited as the 429 asked
        usage = pool.ledger.roles["generator"]
        assert (usage.calls, usage.retries, usage.failures) == (1, 3, 0)
        assert usage.prompt_tokens > 0 and usage.completion_tokens > 0 and usage.latency_s > 0


def test_retry_after_header_forms() -> None:
    assert retry_after_seconds({"retry-after": "2"}) == 2.0
    assert retry_after_seconds({"retry-after-ms": "1500"}) == 1.5
    assert 0 <= retry_after_seconds({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) < 1  # type: ignore[operator]
    assert retry_after_seconds({}) is None


def test_exhausted_retries_fail_with_a_resume_hint() -> None:
    with running_stub(StubConfig(script=[503] * 10, retry_after=None)) as stub:
        with pytest.raises(LLMCallError, match="failed after 3 attempts .*HTTP 503.*re-run the same command"):
            asyncio.run(_ask(ModelSpec.parse(f"vllm:stub-model@{stub.base_url}"), None, max_retries=2))
        assert len(stub.requests) == 3


def test_unknown_model_is_not_retried() -> None:
    with running_stub(StubConfig(model="served-model")) as stub:
        spec = ModelSpec.parse(f"openai-compatible:other-model@{stub.base_url}")
        with pytest.raises(LLMCallError, match="HTTP 404.*check the model name 'other-model'"):
            asyncio.run(_ask(spec, None, skip_preflight=True))
        assert len(stub.requests) == 1


def test_preflight_names_unreachable_endpoints_and_unserved_models() -> None:
    pool = LLMPool({"generator": ModelSpec.parse("vllm:m@http://127.0.0.1:9/v1")}, cache=None)
    with pytest.raises(ModelEndpointError, match="cannot reach model endpoint http://127.0.0.1:9/v1"):
        pool.preflight()
    with running_stub(StubConfig(model="served-model")) as stub:
        pool = LLMPool({"generator": ModelSpec.parse(f"vllm:other@{stub.base_url}")}, cache=None)
        with pytest.raises(ModelEndpointError, match="does not serve model 'other' .*served-model"):
            pool.preflight()


def test_empty_answers_are_returned_not_retried() -> None:
    with running_stub(StubConfig(reply="")) as stub:
        text, pool = asyncio.run(_ask(ModelSpec.parse(f"vllm:stub-model@{stub.base_url}"), None))
    assert text == "" and pool.ledger.roles["generator"].calls == 1


def test_the_stub_fills_answers_to_a_share_of_max_tokens_and_counts_requests_in_flight() -> None:
    """``fill`` makes free text (and a constrained answer's mechanism) a share of max_tokens long at four characters
    a token; the server counts requests in flight, request-seconds and seconds busy, and each answer's tokens."""
    import concurrent.futures
    import time
    import urllib.request

    def post(url: str, body: dict) -> dict:
        request = urllib.request.Request(
            url + "/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())

    free = {"model": "stub-model", "messages": [{"role": "user", "content": "describe"}], "max_tokens": 100}
    schema = {"type": "object", "properties": {"mechanism": {"type": "string"}, "type": {"enum": [1, 2, 3]}}}
    constrained = {
        **free,
        "max_tokens": 160,
        "response_format": {"type": "json_schema", "json_schema": {"schema": schema}},
    }
    with running_stub(StubConfig(fill=0.5, delay=0.3)) as stub:
        assert stub.counters()["in_flight"] == 0
        t0 = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            answers = list(pool.map(lambda body: post(stub.base_url, body), [free, free, constrained]))
        wall = time.monotonic() - t0
        counters = stub.counters()
    text = answers[0]["choices"][0]["message"]["content"]
    assert len(text) == 200 and answers[0]["usage"]["completion_tokens"] == 50  # half of 100 tokens, 4 chars each
    answer = json.loads(answers[2]["choices"][0]["message"]["content"])
    assert answer["type"] in (1, 2, 3) and len(answer["mechanism"]) == 4 * (80 - 16)  # room left for the JSON
    assert stub.peak_in_flight == 3 and counters["in_flight"] == 0 and counters["requests"] == 3
    assert 0.85 <= counters["in_flight_area"] <= 3 * wall  # three requests of 0.3 s each, overlapping
    assert 0.3 <= counters["busy_s"] <= wall
    assert len(stub.answered) == 3 and sum(c for *_, c in stub.answered) == counters["completion_tokens"]
    assert counters["completion_tokens"] == sum(a["usage"]["completion_tokens"] for a in answers)
    with running_stub(StubConfig()) as stub:  # without fill: one short sentence, as before
        assert post(stub.base_url, free)["choices"][0]["message"]["content"].startswith("A plausible mechanism")


def test_a_generic_base_url_is_probed_and_constrained_like_vllm(cli, tmp_path: Path) -> None:
    """--base-url URL -m NAME asks the server how it constrains JSON (a probe whose schema allows one answer),
    then constrains every answer the same way as -m vllm:NAME@URL: no invalid answer on drugbank_s2 either way.
    A server that ignores schemas is named as such, and its answers are counted."""
    from ddibench.llm.stub import StubConfig, running_stub

    with running_stub(StubConfig()) as server:
        for name, model in (
            ("generic", ["--base-url", server.base_url, "-m", "stub-model"]),
            ("vllm", ["-m", f"vllm:stub-model@{server.base_url}"]),
        ):
            code, out, err = cli(
                "run", "-s", "zero-shot", "-t", "drugbank_s2", "--no-cache", "--run-dir", str(tmp_path / name), *model
            )
            assert code == 0, err
            assert "invalid (unparsable) predictions: 0 of 1,992" in out
            output = json.loads((tmp_path / name / "results.json").read_text())["manifest"]["models"]["generator"][
                "output"
            ]
            assert output.startswith("constrained to the JSON schema (response_format json_schema)")
            assert output.endswith("(probed at the start)") == (name == "generic")
        probes = [r for r in server.requests if r["messages"][0]["content"] == "Reply with a JSON object."]
        assert len(probes) == 1  # the generic endpoint only
    with running_stub(StubConfig(reply='{"type": 3}')) as server:  # answers the same whatever the schema says
        code, out, err = cli(
            "run",
            "-s",
            "zero-shot",
            "-t",
            "drugbank_s2",
            "--limit",
            "4",
            "--no-cache",
            "--run-dir",
            str(tmp_path / "ignores"),
            "--base-url",
            server.base_url,
            "-m",
            "stub-model",
        )
        assert code == 0, err
        assert "JSON answers (generator): not constrained: the prompt asks for JSON (probed at the start)" in out
        assert [r.get("response_format") for r in server.requests[2:]] == [
            None
        ] * 4  # after two probes, nothing is asked of it
