"""Model specifications: which model, behind which OpenAI-compatible endpoint, with what identity.

Syntax (``--model``), with how each constrains answers to the system's JSON schema by default::

    embedded                              the embedded default (SmolLM2-135M-Instruct, llama.cpp)    schema
    embedded:qwen2.5-coder-1.5b           a pinned model by name (see 'ddibench list models')       schema
    embedded:/path/to/model.gguf          any GGUF file, served by the embedded llama.cpp server     schema
    openai:gpt-4o-mini                    OpenAI (key in $OPENAI_API_KEY)                            schema
    deepseek:deepseek-chat                DeepSeek (key in $DEEPSEEK_API_KEY)                        object (JSON only)
    vllm:Qwen/Qwen2.5-7B-Instruct@http://gpu-host:8000/v1                                            schema
    ollama:llama3.1:8b                    Ollama on its default port (or @URL)                       schema
    llamacpp:local@http://127.0.0.1:8080/v1                                                          llamacpp
    openai-compatible:NAME@URL            any other OpenAI chat server (also --base-url URL -m NAME) auto

``auto`` probes the server when the run starts: one short request per form (json_schema, then llama.cpp's
json_object with a schema) whose schema allows a single answer; the first form whose answer obeys it is
used, and when none does the prompt alone asks for JSON. The manifest and the report say which held
(:data:`OUTPUT`), and the report counts the invalid answers.

Options follow a ``#``, comma separated: ``revision=...`` (pins the weights or API snapshot in the
model's identity), ``json=schema|object|llamacpp|auto|none`` (how constrained JSON output is requested),
``key_env=NAME`` (the environment variable holding the API key), ``timeout=SECONDS`` (the longest a
request may take: by default 120 s for a remote endpoint, whose client also cuts requests that take far
longer than it usually does, and 30 minutes for the embedded server; see :mod:`ddibench.llm._policy`).
The timeout is not part of the identity: it cannot change an answer. ``cutoff=YYYY-MM`` declares the
model's training cutoff where it is known (``openai:gpt-4o-mini#cutoff=2023-10``); the identity, and so
every manifest, records it as ``training_cutoff``, but the response cache does not key on it (it cannot
change an answer either), so declaring it later reuses the answers already cached.

A spec's :meth:`ModelSpec.identity` is what the response cache keys on and what manifests record:
provider, base URL, model name, and the weights' sha256 (embedded) or the declared revision.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ddibench.errors import ConfigError, DataError, ModelEndpointError
from ddibench.hashing import sha256_text, stable_json
from ddibench.llm._gguf import read_metadata
from ddibench.llm._weights import PINNED_MODELS, SMOLLM2, model_path, pinned_model, weights_sha256
from ddibench.net import HttpRefused, check_url

ROLES = ("generator", "describer", "query_writer", "judge")  # the roles the reference systems and scorers use
EMBEDDED = "embedded"
EMBEDDED_DEFAULT_NAME = SMOLLM2.name

# json modes: how a JSON schema is passed to the server, so that answers are constrained to it
#   schema   -> response_format {"type": "json_schema", "json_schema": {...}}   (OpenAI, vLLM, Ollama, the embedded server)
#   object   -> response_format {"type": "json_object"}                          (DeepSeek: valid JSON, the schema in the prompt only)
#   llamacpp -> response_format {"type": "json_object", "schema": {...}}         (llama.cpp servers, the python one too)
#   auto     -> probed when the run starts (a generic --base-url server): the first of schema, llamacpp that holds
#               a probe answer to its schema, else none; the manifest records what was used
#   none     -> nothing; the prompt asks for JSON
JSON_MODES = ("schema", "object", "llamacpp", "auto", "none")
OUTPUT = {  # how each json mode constrains answers, as reports and manifests say it
    "schema": "constrained to the JSON schema (response_format json_schema)",
    "llamacpp": "constrained to the JSON schema (llama.cpp's response_format json_object with a schema)",
    "object": "constrained to JSON (response_format json_object); the schema is in the prompt only",
    "none": "not constrained: the prompt asks for JSON",
}
MODEL_OPTIONS = ("revision", "json", "key_env", "timeout", "cutoff")
NOT_ANSWERING = ("training_cutoff",)  # identity fields that cannot change an answer: left out of the cache key
_CUTOFF = re.compile(r"^(19|20)\d\d-(0[1-9]|1[0-2])$")


@dataclass(frozen=True)
class Provider:
    base_url: str | None
    key_env: str | None
    json_mode: str
    needs_key: bool = False
    # how the answer can start with given text (an assistant prefix the model continues), which the
    # likelihood answer mode needs beside token log-probabilities:
    #   native -> a final assistant message is continued (llama.cpp's server)
    #   vllm   -> the same, with continue_final_message and add_generation_prompt=false in the body
    #   none   -> not offered (OpenAI, DeepSeek and unknown servers)
    prefill: str = "none"


PROVIDERS: dict[str, Provider] = {
    "openai": Provider("https://api.openai.com/v1", "OPENAI_API_KEY", "schema", needs_key=True),
    "deepseek": Provider("https://api.deepseek.com/v1", "DEEPSEEK_API_KEY", "object", needs_key=True),
    "vllm": Provider(None, "VLLM_API_KEY", "schema", prefill="vllm"),
    "ollama": Provider("http://127.0.0.1:11434/v1", None, "schema"),
    "llamacpp": Provider(None, None, "llamacpp", prefill="native"),
    "openai-compatible": Provider(None, "OPENAI_API_KEY", "auto"),
    EMBEDDED: Provider(
        None, None, "schema", prefill="native"
    ),  # llama.cpp's native server (xllamacpp) takes the OpenAI shape
}


@dataclass(frozen=True)
class ModelSpec:
    provider: str
    model: str
    base_url: str | None = None
    json_mode: str = "none"
    key_env: str | None = None
    revision: str | None = None
    model_path: str | None = None  # embedded: the GGUF file
    timeout: float | None = None  # seconds a request may take (None: the pool's default)
    cutoff: str | None = None  # the model's declared training cutoff, YYYY-MM (None: not declared)
    options: dict[str, str] = field(default_factory=dict, compare=False)

    @property
    def is_embedded(self) -> bool:
        return self.provider == EMBEDDED

    @property
    def prefill(self) -> str:
        """How this endpoint continues an assistant prefix (see :class:`Provider`)."""
        return PROVIDERS[self.provider].prefill

    @classmethod
    def parse(cls, text: str, base_url: str | None = None) -> ModelSpec:
        text = text.strip()
        if not text:
            raise ConfigError("empty model spec", "use e.g. 'openai:gpt-4o-mini' or 'embedded'")
        if not text.isprintable() or any("\ud800" <= ch <= "\udfff" for ch in text):
            shown = text.encode("utf-8", "backslashreplace").decode("ascii", "backslashreplace")
            raise ConfigError(
                f"model spec '{shown}' contains control characters or bytes that are not UTF-8", "retype the model spec"
            )
        body, _, opt_text = text.partition("#")
        options = _model_options(opt_text, text)
        timeout = _timeout_option(options.get("timeout"), text)
        cutoff = _cutoff_option(options.get("cutoff"), text)
        provider, rest = _provider_of(body, base_url)
        info = PROVIDERS[provider]
        model, url = rest, base_url
        at = rest.rfind("@")
        if at >= 0 and rest[at + 1 :].startswith(("http://", "https://")):
            model, url = rest[:at], rest[at + 1 :]
        json_mode = options.get("json", info.json_mode)
        if json_mode not in JSON_MODES:
            raise ConfigError(f"json mode '{json_mode}' is not one of {', '.join(JSON_MODES)}")
        spec = cls(
            provider=provider,
            model=model,
            base_url=(url or info.base_url),
            json_mode=json_mode,
            key_env=options.get("key_env", info.key_env),
            revision=options.get("revision"),
            timeout=timeout,
            cutoff=cutoff,
            options=options,
        )
        if provider == EMBEDDED:
            return spec._embedded(model)
        if not model:
            raise ConfigError(f"model spec '{text}' names no model", f"write '{provider}:MODEL'")
        if spec.base_url is None:
            raise ConfigError(
                f"{provider} model '{model}' needs a server URL", f"write '{provider}:{model}@http://HOST:PORT/v1'"
            )
        try:
            check_url(spec.base_url)
        except HttpRefused as exc:  # file://, ftp://, no host, a bad port, a control character
            raise ConfigError(f"the server URL of model '{model}': {exc.problem}", exc.fix) from None
        return spec

    def _embedded(self, model: str) -> ModelSpec:
        pinned = pinned_model(model or EMBEDDED_DEFAULT_NAME)
        if pinned is not None:
            return replace(self, model=pinned.name, model_path=None, base_url=None)
        path = Path(model).expanduser()
        if path.suffix != ".gguf":
            names = ", ".join(n for m in PINNED_MODELS.values() for n in (m.name, *m.aliases))
            close = difflib.get_close_matches(
                model, [n for m in PINNED_MODELS.values() for n in (m.name, *m.aliases)], n=1, cutoff=0.6
            )
            hint = (
                f"did you mean 'embedded:{close[0]}'?"
                if close
                else f"give a pinned model ({names}) or the path of a .gguf file"
            )
            raise ConfigError(f"embedded model '{model}' is neither a pinned model nor a .gguf file", hint)
        if not path.is_file():
            raise ConfigError(f"embedded model file {path} does not exist", "check the path")
        try:
            read_metadata(
                path, ("general.architecture",)
            )  # a file that is not GGUF is refused before a server starts on it
        except DataError as exc:
            raise ConfigError(exc.problem, exc.fix) from None
        return replace(self, model=path.stem, model_path=str(path.resolve()), base_url=None)

    def gguf_path(self) -> Path:
        """The weights an embedded spec serves: the given file, or the pinned model's (fetched once)."""
        return Path(self.model_path) if self.model_path else model_path(self.model)

    def api_key(self) -> str:
        key = os.environ.get(self.key_env, "") if self.key_env else ""
        if not key and PROVIDERS[self.provider].needs_key:
            raise ConfigError(f"{self.provider} needs an API key in ${self.key_env}", f"export {self.key_env}=...")
        return key or "not-needed"

    def identity(self) -> dict[str, Any]:
        """What makes two answers comparable: the cache key and the manifest both use this."""
        return self._identity(weights_sha256(self.gguf_path()) if self.is_embedded else "")

    def identity_unfetched(self) -> dict[str, Any]:
        """:meth:`identity` without fetching weights (a plan looks answers up with it): a pinned model's file is
        named by its pinned hash, the only file :func:`~ddibench.llm._weights.fetch_model` serves."""
        if not self.is_embedded:
            return self._identity("")
        if self.model_path:
            return self._identity(weights_sha256(Path(self.model_path)))
        pinned = pinned_model(self.model)
        if pinned is None:
            raise ModelEndpointError(f"no pinned model '{self.model}'", f"pinned models: {', '.join(PINNED_MODELS)}")
        return self._identity(pinned.sha256)

    def _identity(self, weights: str) -> dict[str, Any]:
        ident: dict[str, Any] = {"provider": self.provider, "model": self.model}
        if self.is_embedded:
            ident["weights_sha256"] = weights
            ident["base_url"] = EMBEDDED  # the loopback port changes every run; the weights do not
            ident["engine"] = embedded_engine()  # another build of llama.cpp can answer the same weights differently
        else:
            ident["base_url"] = (self.base_url or "").rstrip("/")
        if self.revision:
            ident["revision"] = self.revision
        if self.cutoff:
            ident["training_cutoff"] = self.cutoff
        return ident

    def display(self) -> str:
        if self.is_embedded:
            return f"embedded:{self.model}"
        return f"{self.provider}:{self.model}@{self.base_url}"


def embedded_engine() -> str:
    """The inference engine behind the embedded model, with its version (part of its identity)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"xllamacpp {version('xllamacpp')}"
    except PackageNotFoundError:
        return "xllamacpp (not installed)"


def identity_summary(identity: Mapping[str, Any]) -> str:
    """What tells one model from another in a line of a report: its weights' hash, its revision or its endpoint."""
    if "weights_sha256" in identity:
        return f"weights {identity['weights_sha256'][:12]}"
    if "revision" in identity:
        return f"revision {identity['revision']}"
    return str(identity.get("base_url", ""))


def identity_digest(identity: dict[str, Any]) -> str:
    """A short digest of a model identity: every LLM call's trace records the one that answered it, so a
    bundle whose manifest names another model than its traces is caught by ``ddibench verify``."""
    return sha256_text(stable_json(identity))[:16]


def _model_options(opt_text: str, text: str) -> dict[str, str]:
    """The options after a spec's ``#`` (``text`` is the whole spec, for the error), by name."""
    options: dict[str, str] = {}
    for item in filter(None, (p.strip() for p in opt_text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or key not in MODEL_OPTIONS:
            raise ConfigError(
                f"bad model option '{item}' in '{text}'", f"options are {', '.join(o + '=' for o in MODEL_OPTIONS)}"
            )
        options[key] = value
    return options


def _provider_of(body: str, base_url: str | None) -> tuple[str, str]:
    """A spec's known provider and what follows its ``:`` (model, and maybe ``@URL``); a bare name is the
    embedded model, or a model of the ``--base-url`` server."""
    provider, sep, rest = body.partition(":")
    if not sep:
        if body == EMBEDDED:
            provider, rest = EMBEDDED, ""
        elif base_url:
            provider, rest = "openai-compatible", body
        else:
            raise ConfigError(
                f"model '{body}' names no provider",
                f"write 'openai:{body}', 'vllm:{body}@URL', or pass --base-url (providers: {', '.join(PROVIDERS)})",
            )
    if provider not in PROVIDERS:
        from ddibench.errors import UnknownNameError

        raise UnknownNameError("provider", provider, PROVIDERS)
    return provider, rest


def _timeout_option(value: str | None, text: str) -> float | None:
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        seconds = float("nan")
    if not 0 < seconds < 86400:  # also refuses nan and inf
        raise ConfigError(
            f"model option timeout={value} in '{text}' is not a number of seconds", "write e.g. '#timeout=30'"
        )
    return seconds


def _cutoff_option(value: str | None, text: str) -> str | None:
    if value is None:
        return None
    if not _CUTOFF.match(value):
        raise ConfigError(
            f"model option cutoff={value} in '{text}' is not a month YYYY-MM", "write e.g. '#cutoff=2023-10'"
        )
    return value


_ROLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class RoleModels:
    """The model of every role a run may ask for (generator, describer, judge, or any role a system or
    scorer names). Roles given explicitly keep their spec; every other role gets the default: the bare
    ``--model SPEC`` when one was given, else the generator's spec, else the embedded model."""

    default: ModelSpec
    explicit: dict[str, ModelSpec] = field(default_factory=dict)

    def spec(self, role: str) -> ModelSpec:
        return self.explicit.get(role) or self.default

    def given(self, role: str) -> bool:
        """Whether the role was named explicitly (optional roles such as ``second_judge`` exist only then)."""
        return role in self.explicit

    def for_roles(self, roles: list[str] | tuple[str, ...]) -> dict[str, ModelSpec]:
        return {role: self.spec(role) for role in roles}

    def with_roles(self, specs: dict[str, ModelSpec]) -> RoleModels:
        return RoleModels(self.default, {**self.explicit, **specs})

    def check_roles(self, whose: str, uses: Sequence[str], scoring: Sequence[str] = ()) -> None:
        """Refuse a role named by ``-m ROLE=SPEC`` that neither ``whose`` (a system: ``uses``, its LLM
        roles) nor its scorers (``scoring``) use, before any model starts: a misspelt role would
        otherwise leave the real role on the default model. ``generator`` is always accepted: it is the
        default of every role not given."""
        known = list(dict.fromkeys([*uses, *scoring]))
        unknown = [role for role in self.explicit if role not in known and role != "generator"]
        if not unknown:
            return
        role = unknown[0]
        used = ", ".join(uses) if uses else "no model roles"
        scored = (
            f"; its scoring uses {', '.join(r for r in scoring if r not in uses)}" if set(scoring) - set(uses) else ""
        )
        close = difflib.get_close_matches(role, [*known, "generator"], n=1, cutoff=0.5)
        fix = (
            f"did you mean '{close[0]}'?" if close else "name one of those roles, or give -m SPEC alone for every role"
        )
        raise ConfigError(f"unknown model role '{role}' in -m {role}=...: {whose} uses {used}{scored}", fix)


def parse_role(value: str) -> tuple[str | None, str]:
    """``ROLE=SPEC`` -> (role, spec); a bare spec -> (None, spec). A role is an identifier; a spec's own
    ``=`` signs come after ``:`` or ``#`` (``openai:gpt-4o#revision=x``), so they never read as a role."""
    role, sep, rest = value.partition("=")
    if sep and _ROLE.match(role.strip()) and ":" not in role:
        return role.strip(), rest
    return None, value


def parse_model_options(values: tuple[str, ...] | list[str], base_url: str | None = None) -> RoleModels:
    """``--model`` values -> :class:`RoleModels`. ``SPEC`` sets the default; ``ROLE=SPEC`` sets one role."""
    default: ModelSpec | None = None
    explicit: dict[str, ModelSpec] = {}
    for value in values:
        role, text = parse_role(value)
        if role is None:
            default = ModelSpec.parse(text, base_url)
        else:
            explicit[role] = ModelSpec.parse(text, base_url)
    if default is None:
        default = explicit.get("generator")
    if default is None:
        if base_url:
            raise ConfigError("--base-url needs --model NAME", "pass the model name the server serves")
        default = ModelSpec.parse(EMBEDDED)
    return RoleModels(default, explicit)
