"""CBR-DDI's knowledge repository: cases, hybrid retrieval, and representative sampling.

A case is a *training* pair with the two drugs' LLM descriptions, its GNN drug-association paths, an
LLM-written mechanistic insight (empty when the LLM saw no grounds for one) and its label. Retrieval
scores every case at once: ``s = lam * cos(f(D_q), f(D_c)) + (1 - lam) * cos(h_q, h_c)`` with ``f`` the
text encoder over the pair's descriptions and ``h`` the GNN pair representation.

Retrieval is one product per chunk of queries: the repository keeps ``[f(D_c) | h_c]`` as one contiguous
matrix (``text`` and ``pair`` are views of it) and a query is ``[lam f(D_q) | (1-lam) h_q]``, so a chunk of
queries reads the repository once (memory bandwidth is the cost: 35,000 cases x 512 float32 are 72 MB). The
float32 product only prunes; the cases near the k-th are rescored in float64 in an order that does not depend on
the batch, so a query retrieves the same cases alone or among many (``Repository.retrieve_many``);
``benchmarks/cbr_retrieval.py`` checks it against the formula's two products and times both paths.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np


@dataclass
class Case:
    head: int  # drug ids (DrugBank space)
    tail: int
    label: int
    head_description: str
    tail_description: str
    paths: list[str]
    insight: str
    refined: bool = False
    sample_id: str = ""
    labels: list[int] | None = None  # a label set (TWOSIDES side effects); ``label`` is then its first label


@dataclass
class Repository:
    cases: list[Case]
    text: np.ndarray  # (n, d_text) normalised f(D_c)
    pair: np.ndarray  # (n, d_gnn) normalised h_c
    insight: np.ndarray  # (n, d_text) normalised insight embeddings (for sampling)
    info: dict = field(default_factory=dict)
    joint: np.ndarray = field(init=False, repr=False, compare=False)  # (n, d_text + d_gnn): [text | pair]
    largest_norm: float = field(init=False, repr=False, compare=False)  # of joint's rows (sqrt 2 for unit vectors)

    def __post_init__(self) -> None:
        text, pair = np.asarray(self.text), np.asarray(self.pair)
        self.joint = (
            np.ascontiguousarray(np.concatenate([text, pair], axis=1))
            if len(text) or len(pair)
            else np.zeros((0, 0), text.dtype)
        )
        if text.dtype == pair.dtype == self.joint.dtype and len(text):
            d = text.shape[1]
            self.text, self.pair = self.joint[:, :d], self.joint[:, d:]  # views: the vectors are held once
        self.largest_norm = float(np.linalg.norm(self.joint, axis=1).max()) if self.joint.size else 0.0

    def __len__(self) -> int:
        return len(self.cases)

    def retrieve(
        self, text: np.ndarray, pair: np.ndarray, k: int, lam: float, exclude: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Indices and scores of the ``k`` best cases for one query (normalised vectors): the highest
        ``lam * cos(text) + (1 - lam) * cos(pair)``, best first, ties by index (scores: :meth:`_exact`)."""
        found = self.retrieve_many(
            np.asarray(text)[None], np.asarray(pair)[None], k, lam, None if exclude is None else [exclude]
        )
        return found[0]

    def retrieve_many(
        self,
        texts: np.ndarray,
        pairs: np.ndarray,
        k: int,
        lam: float,
        exclude: Sequence[int] | np.ndarray | None = None,
        chunk: int = 256,
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """:meth:`retrieve` for many queries at once, with the same cases and scores whatever the batch: one
        float32 matrix-matrix product per ``chunk`` of queries reads the repository once for all of them (the
        35,000-case matrix is 72 MB: read once per query it is the whole cost of a retrieval, and CBR-DDI's
        refinement retrieves once per case), and only prunes. A float32 product sums in an order its BLAS
        picks by the shapes (a row's score could differ by ~1e-8 between a batch and a query alone, and reorder
        near-ties); so every case whose float32 score is within twice the rounding bound of the k-th is rescored
        by :meth:`_exact`, which is the same for a row whatever rows come with it, and the order is taken from
        those. ``exclude``: a case each query may not retrieve (its own, leave-one-out), or None."""
        n, m = len(self.cases), len(texts)
        if exclude is not None and len(exclude) != m:
            raise ValueError(f"exclude has {len(exclude)} entries for {m} queries")
        k = min(k, n - (exclude is not None))
        if not n or k <= 0:
            return [(np.zeros(0, dtype=np.int64), np.zeros(0)) for _ in range(m)]
        queries = np.concatenate([lam * np.asarray(texts), (1 - lam) * np.asarray(pairs)], axis=1).astype(
            self.joint.dtype, copy=False
        )
        # |fl(q . r) - q . r| <= gamma_d |q| |r| for a d-term float32 dot product in any order (Higham, Accuracy
        # and Stability of Numerical Algorithms, 2nd ed., section 3.1), and the float64 rescoring is within
        # gamma_d (float64) of the same exact value: the margin bounds the two scores' difference, twice
        d = queries.shape[1]
        gamma = sum(d * u / (1 - d * u) for u in (2.0**-24, 2.0**-53))
        margins = 2 * gamma * np.linalg.norm(queries.astype(np.float64), axis=1) * self.largest_norm
        out: list[tuple[np.ndarray, np.ndarray]] = []
        for start in range(0, m, chunk):
            scores = queries[start : start + chunk] @ self.joint.T  # (chunk, n)
            if exclude is not None:
                scores[np.arange(len(scores)), np.asarray(exclude[start : start + chunk], dtype=np.int64)] = -np.inf
            kth = -np.partition(-scores, k - 1, axis=1)[:, k - 1]
            for row, query, floor in zip(scores, queries[start : start + chunk], kth - margins[start : start + chunk]):
                near = np.flatnonzero(row >= floor)  # holds the exact top k (see the margin)
                exact = self._exact(near, query)
                top = np.lexsort((near, -exact))[:k]
                out.append((near[top], exact[top]))
        return out

    def _exact(self, rows: np.ndarray, query: np.ndarray) -> np.ndarray:
        """The scores of ``rows`` in float64: a float32 product is exact in float64, and numpy sums each row of a
        contiguous matrix alone, pairwise in a fixed order, so a row's score does not depend on the other rows
        scored with it (a BLAS product's does: its blocking follows the shapes)."""
        products = self.joint[rows].astype(np.float64) * np.asarray(query, dtype=np.float64)
        return products.sum(axis=1)

    def subset(self, keep: np.ndarray) -> Repository:
        keep = np.asarray(keep, dtype=np.int64)
        return Repository(
            [self.cases[i] for i in keep], self.text[keep], self.pair[keep], self.insight[keep], dict(self.info)
        )

    def save(self, directory: Path) -> None:
        (directory / "cases.json").write_text(json.dumps([asdict(c) for c in self.cases], indent=1), encoding="utf-8")
        np.savez(directory / "vectors.npz", text=self.text, pair=self.pair, insight=self.insight)
        (directory / "info.json").write_text(json.dumps(self.info, indent=2), encoding="utf-8")

    @classmethod
    def load(cls, directory: Path) -> Repository:
        cases = [Case(**c) for c in json.loads((directory / "cases.json").read_text(encoding="utf-8"))]
        with np.load(directory / "vectors.npz") as npz:
            text, pair, insight = npz["text"], npz["pair"], npz["insight"]
        return cls(cases, text, pair, insight, json.loads((directory / "info.json").read_text(encoding="utf-8")))


class LeaveOneOut:
    """The cases each case of ``order`` retrieves, leaving itself out, asked for in ``order``'s order (CBR-DDI's
    refinement pass): the next ``chunk`` cases' retrievals in one product, as :meth:`Repository.retrieve_many`
    gives them (one product a case read the whole repository once a case: quadratic in its size)."""

    def __init__(self, repo: Repository, order: np.ndarray, k: int, lam: float, chunk: int) -> None:
        self.repo, self.order, self.k, self.lam, self.chunk = repo, np.asarray(order, dtype=np.int64), k, lam, chunk
        self._found: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def at(self, position: int) -> tuple[np.ndarray, np.ndarray]:
        """Indices and scores of the cases retrieved for ``order[position]``."""
        if position not in self._found:  # the next chunk starts here (each position is asked for once)
            rows = self.order[position : position + self.chunk]
            found = self.repo.retrieve_many(self.repo.text[rows], self.repo.pair[rows], self.k, self.lam, rows)
            self._found = dict(zip(range(position, position + len(rows)), found))
        return self._found.pop(position)


def normalise(matrix: np.ndarray) -> np.ndarray:
    matrix = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=-1, keepdims=True)
    return matrix / np.where(norms > 0, norms, 1)


FULL_MATRIX_CASES = 8192  # a class of up to this many cases gets its whole distance matrix (256 MB of float32)


class _Distances:
    """Cosine distances between unit vectors: the whole matrix for a small class (as K-medoids always held it), or
    columns and blocks computed when asked for a large one, the columns of medoids kept while they stay medoids (a
    class of 35,000 cases would need 4.9 GB for its matrix). Same algorithm either way: a distance is
    ``1 - clip(u . v)`` of the same float32 vectors, computed in another order only in the BLAS's blocking."""

    def __init__(self, vectors: np.ndarray, full: bool) -> None:
        self.vectors = vectors
        self.matrix = 1.0 - np.clip(vectors @ vectors.T, -1.0, 1.0) if full else None
        self._columns: dict[int, np.ndarray] = {}

    def column(self, j: int) -> np.ndarray:
        if self.matrix is not None:
            return self.matrix[:, j]
        return self.columns(np.array([j]))[:, 0]

    def columns(self, idx: np.ndarray) -> np.ndarray:
        if self.matrix is not None:
            return self.matrix[:, idx]
        missing = [int(j) for j in idx if int(j) not in self._columns]
        if missing:
            block = 1.0 - np.clip(self.vectors @ self.vectors[missing].T, -1.0, 1.0)
            self._columns.update(zip(missing, block.T))
        keep = {int(j) for j in idx}
        for j in [j for j in self._columns if j not in keep]:  # a medoid no longer: its column is dropped
            del self._columns[j]
        return np.stack([self._columns[int(j)] for j in idx], axis=1)

    def within(self, members: np.ndarray) -> np.ndarray:
        if self.matrix is not None:
            return self.matrix[np.ix_(members, members)]
        part = self.vectors[members]
        return 1.0 - np.clip(part @ part.T, -1.0, 1.0)


def k_medoids(
    vectors: np.ndarray, k: int, rng: np.random.Generator, iterations: int = 30, full_matrix: int = FULL_MATRIX_CASES
) -> np.ndarray:
    """Indices of ``k`` medoids under cosine distance (k-medoids++ seeding, then alternating updates).

    A class of up to ``full_matrix`` cases holds its whole distance matrix; a larger one computes distances as it
    needs them (:class:`_Distances`). Seeding keeps each case's distance to its nearest medoid so far, updated by
    the newest medoid's column (the same minimum as over all the medoids' columns, in time linear in ``k``)."""
    n = len(vectors)
    if k >= n:
        return np.arange(n)
    dist = _Distances(vectors, full=n <= full_matrix)
    medoids = [int(rng.integers(n))]
    nearest = dist.column(medoids[0]).copy()
    for _ in range(1, k):
        weights = nearest**2
        total = weights.sum()
        medoids.append(
            int(rng.choice(n, p=weights / total)) if total > 0 else int(rng.choice(np.setdiff1d(np.arange(n), medoids)))
        )
        np.minimum(nearest, dist.column(medoids[-1]), out=nearest)
    medoids_arr = np.array(sorted(set(medoids)), dtype=np.int64)
    for _ in range(iterations):
        assign = dist.columns(medoids_arr).argmin(axis=1)
        updated = []
        for c in range(len(medoids_arr)):
            members = np.flatnonzero(assign == c)
            if members.size == 0:
                updated.append(int(medoids_arr[c]))
                continue
            within = dist.within(members).sum(axis=1)
            updated.append(int(members[within.argmin()]))
        new = np.array(sorted(set(updated)), dtype=np.int64)
        if np.array_equal(new, medoids_arr):
            break
        medoids_arr = new
    return medoids_arr


def representative_sample(
    repo: Repository, ratio: float, minimum: int, rng: np.random.Generator
) -> tuple[np.ndarray, dict[str, int]]:
    """K-medoids within each class on insight embeddings: keep max(minimum, ratio * size) cases per class.

    With label sets a case belongs to the class of each of its labels; the kept cases are the union."""
    by_label: dict[int, list[int]] = {}  # each class's cases, in the repository's order (one pass over the cases)
    for i, case in enumerate(repo.cases):
        for lb in dict.fromkeys(case.labels if case.labels is not None else [case.label]):
            by_label.setdefault(lb, []).append(i)
    keep: list[np.ndarray] = []
    per_class: dict[str, int] = {}
    for label in sorted(by_label):
        members = np.array(by_label[label], dtype=np.int64)
        k = max(minimum, int(np.ceil(ratio * members.size)))
        chosen = members[k_medoids(repo.insight[members], k, rng)]
        keep.append(chosen)
        per_class[str(int(label))] = int(chosen.size)
    return (np.unique(np.concatenate(keep)) if keep else np.zeros(0, dtype=np.int64)), per_class
