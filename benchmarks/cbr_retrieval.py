#!/usr/bin/env python3
"""CBR-DDI retrieval latency against a large repository.

The repository holds 35,000 cases (``--cases``) with the production dimensions: 384-dim description
embeddings (all-MiniLM-L6-v2) and 128-dim EmerGNN pair representations. The vectors are random unit
vectors — retrieval cost depends on the sizes, not the values — and each query is scored against every
case with the hybrid similarity, then the top 5 are selected. Before and after, in one run, query by
query: the two matrix-vector products of the formula (how ``Repository.retrieve`` worked before) and
the one product over ``[text | pair]`` it does now; every query's retrieved cases must be the same
(the run stops if not) and the largest score difference (rounding) is printed. Then the batched path
(``Repository.retrieve_many``, one matrix-matrix product for many queries, as CBR-DDI's lam search uses it), and
the refinement pass's leave-one-out retrieval one case at a time against chunks of 256 cases, projected to a pass
over every case (the same cases and scores, or the run stops). Also times embedding one query text with the real
encoder when the 'embed' extra is installed.

    python benchmarks/cbr_retrieval.py [--cases 35000] [--queries 1000]

Prints median and p95 latency of both and their ratio.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from ddibench.systems.cbr_ddi import REFINE_RETRIEVAL_CHUNK
from ddibench.systems.cbr_ddi.repository import Case, LeaveOneOut, Repository, normalise


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=35_000)
    parser.add_argument("--queries", type=int, default=1000)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    n = args.cases
    cases = [Case(i % 1710, (i * 7) % 1710, i % 86, "", "", [], "") for i in range(n)]
    repo = Repository(
        cases, normalise(rng.normal(size=(n, 384))), normalise(rng.normal(size=(n, 128))), np.zeros((n, 1), np.float32)
    )
    texts = normalise(rng.normal(size=(args.queries, 384)))
    pairs = normalise(rng.normal(size=(args.queries, 128)))

    def before(text: np.ndarray, pair: np.ndarray, k: int, lam: float) -> tuple[np.ndarray, np.ndarray]:
        """Retrieval as it was: two matrix-vector products, then argpartition and a stable order."""
        scores = lam * (repo.text @ text) + (1 - lam) * (repo.pair @ pair)
        top = np.argpartition(-scores, k - 1)[:k]
        top = top[np.lexsort((top, -scores[top]))]
        return top, scores[top]

    old, new, worst = [], [], 0.0
    for i in range(args.queries):  # interleaved: the machine's load falls on both alike
        t0 = time.perf_counter()
        a = before(texts[i], pairs[i], 5, 0.5)
        t1 = time.perf_counter()
        b = repo.retrieve(texts[i], pairs[i], 5, 0.5)
        t2 = time.perf_counter()
        old.append(t1 - t0)
        new.append(t2 - t1)
        if not np.array_equal(a[0], b[0]):
            raise SystemExit(f"query {i}: retrieved {b[0].tolist()}, the formula gives {a[0].tolist()}")
        worst = max(worst, float(np.max(np.abs(a[1] - b[1]))))
    before_ms, after_ms = np.asarray(old) * 1000, np.asarray(new) * 1000
    print(
        f"hybrid retrieval, {n:,} cases (384 + 128 dims), top 5, {args.queries} queries: the same cases for every query, scores within {worst:.1e}"
    )
    print(
        f"  before (two products):        median {np.median(before_ms):.2f} ms, p95 {np.percentile(before_ms, 95):.2f} ms"
    )
    print(
        f"  after (one product, [t | p]): median {np.median(after_ms):.2f} ms, p95 {np.percentile(after_ms, 95):.2f} ms"
    )
    print(f"  ratio of medians (before / after): {np.median(before_ms) / np.median(after_ms):.2f}x")
    # many queries at once, as CBR-DDI's lam search asks them (its 200 validation pairs for each lam of the grid)
    batch = min(200, args.queries)
    rounds = []
    for _ in range(5):
        t0 = time.perf_counter()
        many = repo.retrieve_many(texts[:batch], pairs[:batch], 5, 0.5)
        rounds.append((time.perf_counter() - t0) / batch * 1000)
    same = sum(np.array_equal(many[i][0], repo.retrieve(texts[i], pairs[i], 5, 0.5)[0]) for i in range(batch))
    print(
        f"  batched ({batch} queries a call, 5 calls): median {np.median(rounds):.2f} ms per query, "
        f"{np.median(after_ms) / np.median(rounds):.1f}x faster than one at a time; the same cases for {same} of {batch} queries"
    )
    # the refinement pass: every case retrieves over the others (leave-one-out), one at a time as it did, or in
    # chunks of REFINE_RETRIEVAL_CHUNK as it does now; timed on --queries cases, projected to all n
    own = rng.choice(n, size=min(args.queries, n), replace=False)
    t0 = time.perf_counter()
    one = [repo.retrieve(repo.text[i], repo.pair[i], 5, 0.5, int(i)) for i in own]
    t1 = time.perf_counter()
    passing = LeaveOneOut(repo, own, 5, 0.5, REFINE_RETRIEVAL_CHUNK)  # as the refinement asks for them
    chunked = [passing.at(position) for position in range(len(own))]
    t2 = time.perf_counter()
    if any(not np.array_equal(a[0], b[0]) or not np.array_equal(a[1], b[1]) for a, b in zip(one, chunked)):
        raise SystemExit("the refinement's chunked retrieval retrieved other cases than one case at a time")
    per_one, per_chunk = (t1 - t0) / len(own), (t2 - t1) / len(own)
    print(
        f"refinement retrieval (leave-one-out, {len(own):,} of {n:,} cases; the same cases and scores): one at a time "
        f"{per_one * 1000:.2f} ms a case, in chunks of {REFINE_RETRIEVAL_CHUNK} {per_chunk * 1000:.2f} ms ({per_one / per_chunk:.1f}x); "
        f"a pass over all {n:,}: {per_one * n / 60:.1f} min against {per_chunk * n / 60:.1f} min"
    )
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
