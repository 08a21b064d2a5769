"""The embedded server's own process: ``python -m ddibench.llm._serve --model M.gguf --port P ...``.

It runs llama.cpp's native HTTP server (the C++ ``llama-server``, OpenAI-compatible, JSON-schema
constrained output, prompt cache) in-process through the ``xllamacpp`` binding, whose Linux wheels are
prebuilt for any x86-64 CPU with AVX2 (no ``-march=native``), then waits for SIGTERM or SIGINT. Started
and watched by :class:`ddibench.llm._embedded.EmbeddedServer`; kept in its own process so that a crash
in native code ends the server, never the run, and the run can say why.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m ddibench.llm._serve")
    parser.add_argument("--model", required=True)
    parser.add_argument("--alias", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--n-ctx", type=int, default=4096)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--parallel", type=int, default=1)
    args = parser.parse_args(argv)

    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = args.model
    params.model_alias = {args.alias}
    params.hostnames = ["127.0.0.1"]
    params.port = args.port
    params.n_parallel = args.parallel
    params.n_ctx = args.n_ctx * args.parallel  # llama.cpp shares the context among its slots
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    params.cache_prompt = True  # a request that shares a prefix with the last one reuses its KV cache
    params.warmup = False
    params.verbosity = 1  # warnings and errors only; the log stays short
    waited = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, waited)  # the server's threads inherit the mask: the signal comes here
    server = xllamacpp.Server(params)
    print(f"ddibench embedded server: {args.alias} from {args.model} on {server.listening_address}", flush=True)
    signal.sigwait(waited)
    sys.stdout.flush()
    os._exit(0)  # the server holds nothing to save; its threads' orderly shutdown can take seconds


if __name__ == "__main__":
    main()
