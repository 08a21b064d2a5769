#!/usr/bin/env python3
"""CBR-DDI retrieval latency against a large repository.

The repository holds 35,000 cases (``--cases``) with the production dimensions: 384-dim description
embeddings (all-MiniLM-L6-v2) and 128-dim EmerGNN pair representations. The vectors are random unit
vectors — retrieval cost depends on the sizes, not the values — and each query is scored against every
case with the hybrid similarity, then the top 5 are selected. Also times embedding one query text with
the real encoder when the 'embed' extra is installed.

    python benchmarks/cbr_retrieval.py [--cases 35000] [--queries 1000]

Prints median and p95 latency; asserts nothing.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from ddibench.systems.cbr_ddi.repository import Case, Repository, normalise


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=35_000)
    parser.add_argument("--queries", type=int, default=1000)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    n = args.cases
    cases = [Case(i % 1710, (i * 7) % 1710, i % 86, "", "", [], "") for i in range(n)]
    repo = Repository(cases, normalise(rng.normal(size=(n, 384))), normalise(rng.normal(size=(n, 128))), np.zeros((n, 1), np.float32))
    texts = normalise(rng.normal(size=(args.queries, 384)))
    pairs = normalise(rng.normal(size=(args.queries, 128)))
    times = []
    for i in range(args.queries):
        t0 = time.perf_counter()
        repo.retrieve(texts[i], pairs[i], 5, 0.5)
        times.append(time.perf_counter() - t0)
    ms = np.asarray(times) * 1000
    print(f"hybrid retrieval, {n:,} cases (384 + 128 dims), top 5: median {np.median(ms):.2f} ms, p95 {np.percentile(ms, 95):.2f} ms")
    try:
        from ddibench.embeddings import TextEncoder

        encoder = TextEncoder()
        encoder.encode(["warm-up"])
        samples = []
        for i in range(50):
            t0 = time.perf_counter()
            encoder.encode([f"Drug {i}: an anticoagulant metabolised by CYP2C9. Drug {i + 1}: an NSAID."])
            samples.append(time.perf_counter() - t0)
        print(f"embedding one query text (MiniLM, CPU): median {1000 * np.median(samples):.1f} ms")
    except Exception as exc:  # noqa: BLE001 - the encoder is optional here
        print(f"query embedding not timed ({exc})")


if __name__ == "__main__":
    main()
