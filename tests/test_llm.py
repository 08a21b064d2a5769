"""The LLM layer against real sockets: model specs, cache identity, retries, accounting, failures."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ddibench.errors import ConfigError, ModelEndpointError, UnknownNameError
from ddibench.llm import LLMCallError, LLMPool, ModelSpec, ResponseCache, cache_key, parse_model_options, retry_after_seconds
from ddibench.llm.stub import StubConfig, running_stub

MESSAGES = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Warfarin and aspirin?"}]


# ---------------------------------------------------------------------------------------------
# specs


def test_model_spec_syntax() -> None:
    spec = ModelSpec.parse("openai:gpt-4o-mini")
    assert (spec.provider, spec.model, spec.base_url, spec.json_mode) == ("openai", "gpt-4o-mini", "https://api.openai.com/v1", "schema")
    spec = ModelSpec.parse("ollama:llama3.1:8b")
    assert (spec.model, spec.base_url) == ("llama3.1:8b", "http://127.0.0.1:11434/v1")
    spec = ModelSpec.parse("vllm:Qwen/Qwen2.5-7B-Instruct@http://gpu:8000/v1#revision=abc123,json=none")
    assert (spec.model, spec.base_url, spec.revision, spec.json_mode) == ("Qwen/Qwen2.5-7B-Instruct", "http://gpu:8000/v1", "abc123", "none")
    assert spec.identity() == {"provider": "vllm", "model": "Qwen/Qwen2.5-7B-Instruct", "base_url": "http://gpu:8000/v1", "revision": "abc123"}
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
        ("embedded:/tmp/model.bin", ConfigError, "not a .gguf file"),
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
        path.write_bytes(content)
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
    with running_stub(StubConfig(model="alpha", reply="answer from alpha")) as one, running_stub(
        StubConfig(model="beta", reply="answer from beta")
    ) as two, running_stub(StubConfig(model="alpha", reply="answer from another alpha server")) as three:
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
