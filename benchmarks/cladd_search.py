#!/usr/bin/env python3
"""CLADD's knowledge-graph searches over every KG drug: anchor search and 2-hop related-drug search.

For each of the 1,710 drugs of the project's Hetionet (DrugBank id space), taken as a query molecule
from its own SMILES:

* **anchor search** — Morgan fingerprint of the query, Tanimoto to every KG drug, best match other
  than the query itself (what CLADD's KG planner receives);
* **2-hop related drugs** — the ``k`` drugs with the most anchor - relation - entity - relation - drug
  paths (:meth:`DrugGraph.related`, on the drug-neighbour CSR), then the verbalised paths BioRel reads
  (:meth:`DrugGraph.paths`, 3 per related drug);
* side by side, the same 2-hop counts by gathering the *full* neighbourhood of the anchor's neighbours
  (every entity, then filtered to drugs), which must give the same top k.

One-off costs (loading the KG, fingerprints, building the CSR) are printed apart. Prints latency p50 /
p95 / max; asserts nothing.

    python benchmarks/cladd_search.py [--k 5] [--drugs N]
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def stats(values: list[float]) -> str:
    arr = np.asarray(values) * 1000
    return f"p50 {np.percentile(arr, 50):.2f} ms, p95 {np.percentile(arr, 95):.2f} ms, max {arr.max():.1f} ms (n={arr.size})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--drugs", type=int, default=None, help="only the first N drugs (default: all)")
    args = parser.parse_args()

    from ddibench.kg import gather_neighbours
    from ddibench.systems.cladd.graph import hetionet_graph

    t0 = time.perf_counter()
    graph = hetionet_graph()
    t1 = time.perf_counter()
    _ = graph.fingerprints, graph.fingerprints32
    t2 = time.perf_counter()
    _ = graph.skeletons
    t3 = time.perf_counter()
    _ = graph.kg.csr, graph.drug_csr
    t4 = time.perf_counter()
    print(f"KG: {graph.card()}")
    print(
        f"one-off: load KG {t1 - t0:.2f} s, fingerprints {t2 - t1:.2f} s, InChIKey skeletons {t3 - t2:.2f} s, CSRs {t4 - t3:.2f} s"
    )

    n = graph.n_drugs if args.drugs is None else min(args.drugs, graph.n_drugs)
    anchor_t, related_t, paths_t, naive_t = [], [], [], []
    indptr, nbr, _ = graph.kg.csr
    mismatches = 0
    for drug in range(n):
        smiles = graph.smiles[drug]
        start = time.perf_counter()
        own = graph.same_structure_by_skeleton(drug)
        sims = graph.similarities(smiles)
        anchor = graph.anchor(smiles, own, sims)
        anchor_t.append(time.perf_counter() - start)
        if anchor is None:
            continue
        start = time.perf_counter()
        related = graph.related(anchor.drug, args.k, own, sims)
        related_t.append(time.perf_counter() - start)
        start = time.perf_counter()
        graph.paths(anchor.drug, related, 3)
        paths_t.append(time.perf_counter() - start)
        start = time.perf_counter()
        mids = nbr[indptr[anchor.drug] : indptr[anchor.drug + 1]]
        mids = mids[mids != anchor.drug]
        second = gather_neighbours(indptr, nbr, mids)
        second = second[(second < graph.n_drugs) & (second != anchor.drug)]
        counts = np.bincount(second, minlength=graph.n_drugs)
        if len(own):
            counts[np.asarray(own)] = 0
        top = np.lexsort((np.arange(graph.n_drugs), -counts))[: args.k]
        naive_t.append(time.perf_counter() - start)
        mismatches += [r.drug for r in related] != [int(d) for d in top if counts[d] > 0]
    print(f"anchor search ({n} query drugs): {stats(anchor_t)}")
    print(f"2-hop related drugs, k={args.k}: {stats(related_t)}")
    print(f"verbalised paths (3 per related drug): {stats(paths_t)}")
    print(
        f"2-hop by full-neighbourhood gather (side by side): {stats(naive_t)}; "
        f"ratio full/drug-CSR p50 {np.median(naive_t) / np.median(related_t):.2f}x, "
        f"p95 {np.percentile(naive_t, 95) / np.percentile(related_t, 95):.2f}x; top-k disagreements {mismatches}"
    )


if __name__ == "__main__":
    main()
