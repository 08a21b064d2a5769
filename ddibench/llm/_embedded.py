"""The embedded default model: a GGUF file served by a llama.cpp server on 127.0.0.1.

ddibench starts ``python -m ddibench.llm._serve`` (llama.cpp's native server through the prebuilt
``xllamacpp`` wheel) on a free loopback port, waits until ``/v1/models`` answers, talks to it through the
same OpenAI-compatible client as any other model, and stops it when the run ends. The default weights
are SmolLM2-135M-Instruct (Q4_1, Apache-2.0, see ``_weights``); any GGUF path works
(``--model embedded:/path/model.gguf``).

Why a prebuilt wheel: llama-cpp-python ships only a source distribution, and its default build uses
``-march=native``; on a CPU that reports AVX-512 and AMX that build died with a general protection fault
on the first completion, and every install cost a 5-minute compile. The xllamacpp CPU wheel is built
without ``-march=native`` (AVX2, FMA, F16C) and installs in seconds.

The server is watched: :meth:`EmbeddedServer.exit_reason` says whether its process has ended and how
(an exit code or a signal), so a client that loses its connection can stop the run at once with the
log's path instead of retrying a dead port (see ``LLMClient``).
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from ddibench.errors import EndpointGone, ModelEndpointError
from ddibench.llm._weights import INSTALL_HINT
from ddibench.net import HttpError, request


def _die_with_parent() -> None:
    """In the child: ask Linux to SIGKILL us when the parent dies (even by SIGKILL). The server holds
    nothing to save, and a graceful SIGTERM shutdown can take seconds on a loaded machine."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class EmbeddedServer:
    """A llama.cpp server process on loopback; use as a context manager."""

    def __init__(
        self,
        model_path: Path,
        alias: str,
        *,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        parallel: int = 1,
        log_path: Path | None = None,
        startup_timeout: float = 120.0,
    ) -> None:
        self.model_path = model_path
        self.alias = alias
        self.n_ctx = n_ctx
        self.n_threads = n_threads or max(1, os.cpu_count() or 1)
        self.parallel = parallel  # slots: requests decoded together (continuous batching), each with n_ctx of context
        self.log_path = log_path
        self.startup_timeout = startup_timeout
        self.process: subprocess.Popen[bytes] | None = None
        self.port: int | None = None

    @property
    def base_url(self) -> str:
        if self.port is None:
            raise RuntimeError("server not started")
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> str:
        if importlib.util.find_spec("xllamacpp") is None:
            raise ModelEndpointError("the embedded model needs the xllamacpp package", INSTALL_HINT)
        last_error = ""
        for _ in range(3):  # the free port can be taken between probing and binding; retry
            self.port = _free_port()
            log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
            cmd = [
                sys.executable,
                "-m",
                "ddibench.llm._serve",
                "--model",
                str(self.model_path),
                "--alias",
                self.alias,
                "--port",
                str(self.port),
                "--n-ctx",
                str(self.n_ctx),
                "--threads",
                str(self.n_threads),
                "--parallel",
                str(self.parallel),
            ]
            self.process = subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,  # noqa: PLW1509
            )
            if not isinstance(log, int):
                log.close()
            ok, last_error = self._wait_ready()
            if ok:
                return self.base_url
            self.stop()
        raise ModelEndpointError(
            f"the embedded llama.cpp server did not start ({last_error})",
            f"see {self.log_path}; 'ddibench doctor' checks the embedded model"
            if self.log_path
            else "run 'ddibench doctor' to see why",
        )

    def _wait_ready(self) -> tuple[bool, str]:
        assert self.process is not None
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            reason = self.exit_reason()
            if reason is not None:
                return False, reason
            try:
                if request("GET", f"{self.base_url}/models", timeout=2, max_bytes=2**20).status == 200:
                    return True, ""
            except HttpError:
                pass
            time.sleep(0.1)
        return False, f"not ready after {self.startup_timeout:.0f} s"

    def exit_reason(self) -> str | None:
        """None while the server process runs; else how it ended ("killed by signal SIGSEGV", "exited with code 1")."""
        proc = self.process
        if proc is None:
            return "was stopped"
        code = proc.poll()
        if code is None:
            return None
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = str(-code)
            return f"killed by signal {name}"
        return f"exited with code {code}"

    def died_error(self) -> ModelEndpointError | None:
        """The one-line error of a server that died under a run (None while it runs)."""
        reason = self.exit_reason()
        if reason is None or self.process is None:
            return None
        where = f"log: {self.log_path}" if self.log_path else "no log was kept"
        return EndpointGone(
            f"the embedded llama.cpp server (pid {self.process.pid}) {reason} ({where})",
            "run 'ddibench doctor' to check the embedded model, then re-run the same command to resume",
        )

    def stop(self) -> None:
        proc, self.process = self.process, None
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)
        except (ProcessLookupError, PermissionError):
            pass
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)

    def __enter__(self) -> EmbeddedServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
