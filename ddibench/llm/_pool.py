"""The models of one run, by role: :class:`LLMPool` starts the embedded llama.cpp server when a role
uses it, checks remote endpoints before the first sample, and hands out one
:class:`~ddibench.llm._client.LLMClient` per role (one transport and policy per endpoint)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ddibench.errors import ModelEndpointError
from ddibench.llm._cache import ResponseCache
from ddibench.llm._client import LLMClient, UsageLedger
from ddibench.llm._policy import EndpointPolicy
from ddibench.llm._preflight import preflight
from ddibench.llm._spec import ModelSpec
from ddibench.net import Endpoint

# The embedded server is local and watched (its death ends the run at once, see ``LLMClient.liveness``), so its
# deadline guards only against a hung process. It must not cut a request that is merely slow: its slots share the
# CPU, and four 2,000-token prompts on two cores take minutes each (55-709 s measured, 61 of 71 over 120 s).
# Cut at the remote default of 120 s, such requests were retried from the start: one session of the CBR-DDI
# preview logged 16 timeouts and 2 answers in 1,515 s.
EMBEDDED_TIMEOUT = 1800.0


# The embedded server's slots when a run does not set --concurrency. A slot costs its context's memory and
# nothing else: one request alone runs as fast on four slots as on one (SmolLM2-135M, 2 cores: 27.8 s against
# 27.7 s for the same prompts). Requests that mostly generate gain from sharing them (CBR-DDI's descriptions,
# generated tokens/s with 1, 2 and 4 in flight: 70, 92, 94 for SmolLM2-135M; 9.7, 14.0, 19.0 for the 1.5B coder),
# prompt-bound ones do not (two in flight: 5% slower), so only a system's generation_roles fill them.
EMBEDDED_SLOTS = 4

COMPLETION_MAX_BYTES = 16 * 2**20  # a chat completion's body (with log-probabilities: a few kB)


def chat_endpoint(base_url: str, api_key: str, timeout: float) -> Endpoint:
    """The endpoint that carries a model's chat completions: JSON in and out, the key sent only to it."""
    headers = {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json", "Accept": "application/json"}
    return Endpoint(base_url, headers=headers, timeout=timeout, max_bytes=COMPLETION_MAX_BYTES)


class LLMPool:
    """The models of one run, by role; starts and stops the embedded server as needed."""

    def __init__(
        self,
        specs: dict[str, ModelSpec],
        *,
        cache: ResponseCache | None,
        concurrency: int = 4,
        embedded_slots: int = 1,
        generation_roles: tuple[str, ...] | None = None,
        log_dir: Path | None = None,
        n_threads: int | None = None,
        timeout: float = 120.0,
        max_retries: int = 5,
    ) -> None:
        self.specs = specs
        self.cache = cache
        self.concurrency = concurrency
        self.embedded_slots = embedded_slots
        # None: every request may fill the embedded server's slots; else only these roles' requests, the others
        # one at a time (see EMBEDDED_SLOTS)
        self.generation_roles = generation_roles
        self.log_dir = log_dir
        self.n_threads = n_threads
        self.timeout = timeout
        self.max_retries = max_retries
        self.ledger = UsageLedger()
        self.served: dict[str, Any] = {}
        self._identities: dict[ModelSpec, dict[str, Any]] = {}
        self._endpoints: dict[ModelSpec, tuple[Endpoint, EndpointPolicy]] = {}
        self._policies: dict[str, EndpointPolicy] = {}  # kept after close(), for the session record
        self._servers: list[Any] = []
        self._liveness: dict[ModelSpec, Callable[[], ModelEndpointError | None]] = {}
        self._clients: dict[str, LLMClient] = {}
        self._remembered: set[str] = set()

    def identity(self, role: str) -> dict[str, Any]:
        spec = self.specs[role]
        if spec not in self._identities:
            self._identities[spec] = spec.identity()
        return self._identities[spec]

    def identities(self, roles: list[str]) -> dict[str, dict[str, Any]]:
        return {role: self.identity(role) for role in roles}

    def preflight(self) -> None:
        """Check every remote endpoint of the pool (reachable, key accepted, model served)."""
        for spec in dict.fromkeys(self.specs.values()):
            if not spec.is_embedded and spec.display() not in self.served:
                self.served[spec.display()] = preflight(spec)

    async def start(self, roles: list[str]) -> None:
        for role in roles:
            spec = self.specs[role]
            if spec in self._endpoints:
                continue
            if spec.is_embedded:
                # started from this (the main) thread on purpose: the server is asked to die with the
                # thread that forked it, which must live as long as the run
                base_url = self._start_embedded(spec)
            else:
                base_url = spec.base_url or ""
                if spec.display() not in self.served:
                    self.served[spec.display()] = await asyncio.to_thread(preflight, spec)
            timeout = spec.timeout or (max(self.timeout, EMBEDDED_TIMEOUT) if spec.is_embedded else self.timeout)
            # the embedded llama.cpp server answers as many requests at once as it has slots (one by default);
            # queueing more there only inflates latency
            limit = self.embedded_slots if spec.is_embedded else self.concurrency
            serial_limit = 1 if spec.is_embedded and self.generation_roles is not None else None
            policy = EndpointPolicy(limit, timeout, adaptive=not spec.is_embedded, serial_limit=serial_limit)
            transport = chat_endpoint(base_url, spec.api_key(), timeout)
            self._endpoints[spec] = (transport, policy)
            self._policies[spec.display()] = self._endpoints[spec][1]

    def _start_embedded(self, spec: ModelSpec) -> str:
        from ddibench.llm._embedded import EmbeddedServer

        log = self.log_dir / "llm-server.log" if self.log_dir else None
        server = EmbeddedServer(
            spec.gguf_path(), spec.model, n_threads=self.n_threads, parallel=self.embedded_slots, log_path=log
        )
        base_url = server.start()
        self._servers.append(server)
        self._liveness[spec] = server.died_error
        # threads and slots are part of the answers: llama.cpp splits each sum by thread, and requests decoded
        # together round otherwise than alone (docs/models.md); each session's record keeps them
        self.served[spec.display()] = {
            "base_url": base_url,
            "model_path": str(server.model_path),
            "threads": server.n_threads,
            "slots": self.embedded_slots,
            # the roles whose requests share the slots (None: every role's); the others go one at a time
            "slot_roles": list(self.generation_roles) if self.generation_roles is not None else None,
        }
        return base_url

    def client(self, role: str) -> LLMClient:
        if role not in self._clients:
            spec = self.specs[role]
            if spec not in self._endpoints:
                raise RuntimeError(f"model for role '{role}' was not started; list it in the system's llm_roles")
            transport, policy = self._endpoints[spec]
            self._clients[role] = LLMClient(
                spec,
                self.identity(role),
                transport,
                role,
                self.cache,
                self.ledger,
                policy,
                max_retries=self.max_retries,
                json_mode=self.json_mode(role),
                serial=policy.serial_limit is not None and role not in (self.generation_roles or ()),
            )
            self._clients[role].remember = self._remember_text
            self._clients[role].liveness = self._liveness.get(spec)
        return self._clients[role]

    def json_mode(self, role: str) -> str:
        """How the role's answers are constrained: its spec's json mode, or what the probe of an 'auto' endpoint found."""
        spec = self.specs[role]
        if spec.json_mode != "auto":
            return spec.json_mode
        return str((self.served.get(spec.display()) or {}).get("json_mode", "none"))

    def output(self, role: str) -> str:
        """The role's output constraint in words (what manifests and reports say)."""
        from ddibench.llm._spec import OUTPUT

        mode = self.json_mode(role)
        probed = " (probed at the start)" if self.specs[role].json_mode == "auto" else ""
        return OUTPUT.get(mode, mode) + probed

    def endpoint_stats(self) -> dict[str, dict[str, Any]]:
        """Each started endpoint's policy: its concurrency (and the lowest it fell to), timeouts, deadline."""
        return {display: policy.stats() for display, policy in self._policies.items()}

    def _remember_text(self, text: str, digest: str | None = None) -> None:
        """Keep a system prompt once as ``<log_dir>/texts/<sha256>.txt`` (traces refer to it by hash)."""
        from ddibench.hashing import keep_text

        if self.log_dir is None or (digest is not None and digest in self._remembered):
            return
        self._remembered.add(keep_text(self.log_dir, text, digest))

    async def close(self) -> None:
        """Close the connections, stop the embedded server, and commit the answers still queued for the cache."""
        for transport, _ in self._endpoints.values():
            try:
                await transport.close()
            except Exception:  # noqa: BLE001 - closing must not mask the run's own error
                pass
        self._endpoints.clear()
        self._clients.clear()
        for server in self._servers:
            server.stop()
        self._servers.clear()
        if self.cache is not None:
            self.cache.flush()
