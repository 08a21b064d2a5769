"""EmerGNN's network (Zhang et al., Nat. Comput. Sci. 2023), reimplemented in PyTorch.

For a pair (u, v) the state flows from u for L layers over the graph (KG + known interactions, every
edge also reversed, plus identity steps); at layer l an edge (a, r, b) carries
``h_a * alpha_l(u, v)[r] * R_l[r]`` into b, where ``alpha_l(u, v) = sigmoid(A_l relu(B_l [x_u; x_v]))``
is the pair-specific relation attention and ``R_l`` a relation embedding; incoming messages are summed,
multiplied by ``W_l`` and passed through ReLU. The state at v after L layers is ``h_uv``; flowing from v
gives ``h_vu``. The pair representation ``h_p = [h_uv; h_vu]`` (with the drug embeddings prepended in the
embedding-feature variant used for S0, and with Morgan features when ``drugs_in_classifier``) goes through a linear classifier over the interaction types.

Drug features: Morgan fingerprints projected to ``dim`` (S1/S2, so new drugs have features), or
learned embeddings (S0); any other fixed matrix passed as ``fingerprints`` is projected the same way (CBR-DDI's
embedded drug descriptions). The propagation layers have no bias (see walks.py for why that matters).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from ddibench.systems.emergnn.walks import MessageGraph, WalkBatch, walk_batch


@dataclass
class Layer:
    """One layer's edges grouped by (target state, relation): the messages of a group share their
    coefficient, so they are summed first (a sparse product) and scaled once per group."""

    gather: torch.Tensor  # sparse CSR (groups x source states), entry = number of such edges
    scatter: torch.Tensor  # its transpose (source states x groups): the backward pass of the product
    target: torch.Tensor  # (groups,) target state of each group
    relation: torch.Tensor  # (groups,)
    pair: torch.Tensor  # (groups,)
    n_targets: int


class _GroupSum(torch.autograd.Function):
    """``gather @ h`` whose gradient is a product with the precomputed transpose. Autograd through a sparse
    CSR product transposes (and sorts) the matrix on every backward pass, which cost more than the rest of
    the step; scipy builds both orientations in linear time when the batch is prepared."""

    @staticmethod
    def forward(ctx: Any, h: torch.Tensor, gather: torch.Tensor, scatter: torch.Tensor) -> torch.Tensor:
        ctx.scatter = scatter
        return gather @ h

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        return ctx.scatter @ grad, None, None


def _csr(matrix: Any, device: torch.device) -> torch.Tensor:
    with warnings.catch_warnings():  # sparse CSR support is labelled beta; its product is what we need
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(
            torch.from_numpy(matrix.indptr.astype(np.int64, copy=False)),
            torch.from_numpy(matrix.indices.astype(np.int64, copy=False)),
            torch.from_numpy(matrix.data),
            matrix.shape,
        ).to(device)


@dataclass
class TensorWalks:
    layers: list[Layer]

    @classmethod
    def of(cls, walks: WalkBatch, device: torch.device) -> TensorWalks:
        from scipy import sparse

        layers = []
        for i, edges in enumerate(walks.edges):
            n_src, n_dst = len(walks.states[i]), len(walks.states[i + 1])
            src, dst, rel = edges[:, 0], edges[:, 1], edges[:, 2]
            n_rel = int(rel.max(initial=0)) + 1
            # one row per target state, columns (relation, source state): the COO -> CSR conversion sums
            # repeated edges and sorts each row's columns, so a row's groups are its runs of one relation
            by_target = sparse.csr_matrix(
                (np.ones(len(edges), dtype=np.float32), (dst, rel * n_src + src)), shape=(n_dst, n_rel * n_src)
            )
            row = np.repeat(np.arange(n_dst), np.diff(by_target.indptr))
            relation = by_target.indices // n_src
            starts = np.flatnonzero(np.diff(row, prepend=-1) | np.diff(relation, prepend=-1))
            gather = sparse.csr_matrix(
                (by_target.data, by_target.indices % n_src, np.append(starts, len(row))), shape=(len(starts), n_src)
            )
            target = row[starts]
            layers.append(
                Layer(
                    _csr(gather, device),
                    _csr(gather.T.tocsr(), device),
                    torch.from_numpy(target).to(device),
                    torch.from_numpy(relation[starts].astype(np.int64, copy=False)).to(device),
                    torch.from_numpy(walks.states[i + 1][target, 0]).to(device),
                    n_dst,
                )
            )
        return cls(layers)


@dataclass
class PairBatch:
    """A batch of pairs ready for the network: the drug ids and the walk subgraphs in both directions."""

    heads: torch.Tensor
    tails: torch.Tensor
    uv: TensorWalks
    vu: TensorWalks
    walks: WalkBatch

    @classmethod
    def of(
        cls,
        graph: MessageGraph,
        heads: np.ndarray,
        tails: np.ndarray,
        length: int,
        device: torch.device,
        hide_pair_below: int = 0,
    ) -> PairBatch:
        heads, tails = np.asarray(heads, dtype=np.int64), np.asarray(tails, dtype=np.int64)
        walks = walk_batch(graph, heads, tails, length, hide_pair_below)
        return cls(
            torch.from_numpy(heads).to(device),
            torch.from_numpy(tails).to(device),
            TensorWalks.of(walks, device),
            TensorWalks.of(walks.reversed(graph), device),
            walks,
        )


class EmerGNNNet(nn.Module):
    fingerprints: torch.Tensor  # a buffer (Morgan features), present when use_fingerprints

    def __init__(
        self,
        n_drugs: int,
        n_relations: int,  # message relations incl. reverses and identity (2R + 1)
        n_labels: int,
        dim: int = 64,
        length: int = 3,
        fingerprints: np.ndarray | None = None,  # (n_drugs, d): Morgan or external features; None = learned embeddings
        attention_hidden: int = 5,
        drugs_in_classifier: bool = False,  # Morgan features: also give the classifier [x_u; x_v] (not the paper's)
    ) -> None:
        super().__init__()
        self.length = length
        self.dim = dim
        self.use_fingerprints = fingerprints is not None
        # the drug features reach the classifier with learned embeddings (the paper's S0 variant) or when asked
        self.drugs_in_classifier = drugs_in_classifier or not self.use_fingerprints
        if fingerprints is not None:
            self.register_buffer("fingerprints", torch.as_tensor(fingerprints, dtype=torch.float32))
            self.project = nn.Linear(fingerprints.shape[1], dim)
        else:
            self.embedding = nn.Embedding(n_drugs, dim)
        self.relations = nn.ModuleList([nn.Embedding(n_relations, dim) for _ in range(length)])
        self.propagate_w = nn.ModuleList([nn.Linear(dim, dim, bias=False) for _ in range(length)])
        self.attention_in = nn.ModuleList([nn.Linear(2 * dim, attention_hidden) for _ in range(length)])
        self.attention_out = nn.ModuleList([nn.Linear(attention_hidden, n_relations) for _ in range(length)])
        self.classifier = nn.Linear((4 if self.drugs_in_classifier else 2) * dim, n_labels)
        for param in self.parameters():
            if param.ndim > 1 and param.requires_grad:
                nn.init.xavier_uniform_(param)

    def drugs(self, ids: torch.Tensor) -> torch.Tensor:
        if self.use_fingerprints:
            return self.project(self.fingerprints[ids])
        return self.embedding(ids)

    def attention(self, x_u: torch.Tensor, x_v: torch.Tensor) -> list[torch.Tensor]:
        pair = torch.cat([x_u, x_v], dim=1)
        return [torch.sigmoid(out(torch.relu(inp(pair)))) for inp, out in zip(self.attention_in, self.attention_out)]

    def flow(self, walks: TensorWalks, start: torch.Tensor, alpha: list[torch.Tensor]) -> torch.Tensor:
        """States after ``length`` layers, one per pair (layer L states are the pairs, in order)."""
        h = start
        n_rel = alpha[0].shape[1]
        for layer, step in enumerate(walks.layers):
            # coefficient of (pair, relation): attention weight times the relation embedding
            relation: torch.Tensor = self.relations[layer].weight  # type: ignore[assignment]  # an nn.Embedding's weight
            table = (alpha[layer].unsqueeze(2) * relation.unsqueeze(0)).reshape(-1, self.dim)
            grouped = (
                _GroupSum.apply(h, step.gather, step.scatter)
                if h.shape[0]
                else h.new_zeros(step.gather.shape[0], self.dim)
            )
            messages = grouped * table[step.pair * n_rel + step.relation]
            summed = torch.zeros(step.n_targets, self.dim, dtype=h.dtype, device=h.device)
            summed.index_add_(0, step.target, messages)
            h = torch.relu(self.propagate_w[layer](summed))
        return h

    def forward(self, batch: PairBatch) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        """Class logits, the pair representation [h_uv; h_vu], and the per-layer relation attention."""
        x_u, x_v = self.drugs(batch.heads), self.drugs(batch.tails)
        alpha = self.attention(x_u, x_v)
        h_uv = self.flow(batch.uv, x_u, alpha)
        h_vu = self.flow(batch.vu, x_v, alpha)
        pair = torch.cat([h_uv, h_vu], dim=1)
        features = torch.cat([x_u, x_v, pair], dim=1) if self.drugs_in_classifier else pair
        return self.classifier(features), pair, alpha


Path = tuple[float, list[tuple[int, int, int]]]  # (mean attention of its steps, its (head, relation, tail) steps)


def top_paths(walks: WalkBatch, alpha: list[np.ndarray], graph: MessageGraph, top: int) -> list[list[Path]]:
    """Each pair's ``top`` highest-attention walks u -> v (beam search over its walk subgraph), in pair order;
    ``alpha[l]`` holds each pair's relation attention at layer l, one row per pair.

    A walk's score is the mean attention weight of its steps, as in EmerGNN's explanations; identity
    steps (standing still) are dropped from the returned steps. Vectorised: each layer scores every (edge, beam)
    candidate of every pair at once and keeps the best ``top`` per target state. A state belongs to one pair, so
    its candidates are its own pair's, in the order of that pair's edges; the sort is stable; so a pair's paths are
    the same searched alone or in a batch (EmerGNN searches each pair's piece of a batch: see ``_paths``).
    """
    length = len(walks.edges)
    scores = np.full((len(walks.states[0]), top), -np.inf)
    scores[:, 0] = 0.0  # layer 0 is each pair's u, in pair order
    back: list[tuple[np.ndarray, np.ndarray]] = []  # per layer, per (state, slot): the edge and beam it came from
    for layer in range(length):
        e = walks.edges[layer]
        n_next = len(walks.states[layer + 1])
        # the (edge, beam) candidates with a finite score, edge by edge and beam by beam: a state's finite beams
        # are its first ones, and most states of a layer are reached one way only, so far fewer than (m, top)
        finite = np.isfinite(scores).sum(axis=1)[e[:, 0]]
        edge_idx = np.repeat(np.arange(len(e)), finite)
        slot_idx = np.arange(edge_idx.size) - np.repeat(np.cumsum(finite) - finite, finite)
        src = e[edge_idx, 0]
        flat = scores[src, slot_idx] + alpha[layer][e[edge_idx, 3], e[edge_idx, 2]]
        dst = e[edge_idx, 1]
        order = np.lexsort((-flat, dst))
        flat, edge_idx, slot_idx, dst = flat[order], edge_idx[order], slot_idx[order], dst[order]
        position = np.arange(dst.size)
        first = np.ones(dst.size, dtype=bool)
        first[1:] = dst[1:] != dst[:-1]
        rank = position - np.maximum.accumulate(np.where(first, position, 0))  # place within its target's group
        keep = rank < top
        new_scores = np.full((n_next, top), -np.inf)
        new_edge = np.full((n_next, top), -1, dtype=np.int64)
        new_slot = np.full((n_next, top), -1, dtype=np.int64)
        new_scores[dst[keep], rank[keep]] = flat[keep]
        new_edge[dst[keep], rank[keep]] = edge_idx[keep]
        new_slot[dst[keep], rank[keep]] = slot_idx[keep]
        back.append((new_edge, new_slot))
        scores = new_scores
    return [_walked_back(walks, back, scores, graph, pair) for pair in range(walks.n_pairs)]


def _walked_back(
    walks: WalkBatch,
    back: list[tuple[np.ndarray, np.ndarray]],
    scores: np.ndarray,
    graph: MessageGraph,
    pair: int,
) -> list[Path]:
    """One pair's best walks, read back from its v (the last layer's state ``pair``), best first, each once."""
    length = len(walks.edges)
    out: dict[tuple, Path] = {}
    for slot in range(scores.shape[1]):
        if not np.isfinite(scores[pair, slot]):
            continue
        steps = []
        state, s = pair, slot
        for layer in range(length - 1, -1, -1):
            new_edge, new_slot = back[layer]
            row = walks.edges[layer][new_edge[state, s]]
            src_state, dst_state, rel = int(row[0]), int(row[1]), int(row[2])
            if rel != graph.identity:
                steps.append((int(walks.states[layer][src_state, 1]), rel, int(walks.states[layer + 1][dst_state, 1])))
            state, s = src_state, int(new_slot[state, s])
        steps.reverse()
        key = tuple(steps)
        if steps and key not in out:
            out[key] = (float(scores[pair, slot]) / length, steps)
    return sorted(out.values(), key=lambda x: -x[0])
