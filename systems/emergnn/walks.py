"""The subgraph of length-L walks between the two drugs of each pair (EmerGNN's flow, restricted).

EmerGNN propagates a pair's state from drug u over the whole graph for L layers and reads it at drug v.
The paper's propagation equations have no bias (its code's linear layers do: a deviation named in the
system card), so a node's state stays zero until the flow from u reaches it, and only nodes that can
still reach v in the remaining layers influence v's final state. Computing on the
walk subgraph — at layer l the nodes within l hops of u and within L - l hops of v — therefore gives
exactly the same states at v as the dense computation, at a small fraction of the cost. Identity
(self-loop) steps let shorter paths take part, as in EmerGNN.

For L <= 3 (EmerGNN uses 3) the middle layers are found by joining u's and v's 1-hop neighbourhoods
through the graph's CSR, vectorised over a batch of pairs. The join of L = 3 (the edges from u's to v's
neighbourhood) is most of a training step's extraction; it reads the CSR rows of whichever side's
neighbourhood has fewer edges, chosen per pair (hub genes make the two sides differ by orders of magnitude),
and fetches the columns of only the rows it keeps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from ddibench.kg import gather_rows


@dataclass
class MessageGraph:
    """A directed multigraph in CSR form; every edge also appears reversed (relation + n_base)."""

    n_nodes: int
    n_base: int  # relations of the stored graph; r + n_base is r reversed; 2 * n_base is identity
    indptr: np.ndarray
    nbr: np.ndarray
    rel: np.ndarray

    @property
    def identity(self) -> int:
        return 2 * self.n_base

    @property
    def n_relations(self) -> int:
        return 2 * self.n_base + 1

    @classmethod
    def from_triples(
        cls, head: np.ndarray, tail: np.ndarray, rel: np.ndarray, n_nodes: int, n_base: int
    ) -> MessageGraph:
        src = np.concatenate([head, tail]).astype(np.int64)
        dst = np.concatenate([tail, head]).astype(np.int64)
        r = np.concatenate([rel, rel + n_base]).astype(np.int64)
        order = np.lexsort((r, dst, src))
        src, dst, r = src[order], dst[order], r[order]
        indptr = np.zeros(n_nodes + 1, dtype=np.int64)
        np.cumsum(np.bincount(src, minlength=n_nodes), out=indptr[1:])
        return cls(n_nodes, n_base, indptr, dst, r)

    def reverse(self, relation: np.ndarray) -> np.ndarray:
        return np.where(
            relation == self.identity,
            relation,
            np.where(relation >= self.n_base, relation - self.n_base, relation + self.n_base),
        )


@dataclass
class WalkBatch:
    """Layered states and edges of the u -> v walk subgraphs of a batch of pairs.

    ``states[l]`` are (pair, node) rows for layer l = 0..L; ``edges[l-1]`` connect layer l-1 to layer l
    as (source state, target state, relation, pair) rows (state = row index into the layer's states).
    Layer 0 is one state per pair (u); layer L is one state per pair (v), in pair order.
    """

    n_pairs: int
    states: list[np.ndarray]  # each (n, 2): pair, node
    edges: list[np.ndarray]  # each (m, 4): src state, dst state, relation, pair

    def reversed(self, graph: MessageGraph) -> WalkBatch:
        """The v -> u walk subgraph: the same walks read backwards."""
        states = self.states[::-1]
        edges = [np.stack([e[:, 1], e[:, 0], graph.reverse(e[:, 2]), e[:, 3]], axis=1) for e in self.edges[::-1]]
        return WalkBatch(self.n_pairs, states, edges)

    @property
    def n_edges(self) -> int:
        return int(sum(len(e) for e in self.edges))

    def split(self) -> list[WalkBatch]:
        """One walk subgraph per pair, each a batch of its own (pair 0): the pair's states, in their order here,
        and its edges, in their order here, renumbered. Reading one pair's walks from a batch filters every
        layer's states and edges for that pair; over a batch's pairs one by one that is quadratic in the
        batch, so the whole batch is grouped by pair once (stable sorts keep each pair's order, so a search over
        a piece gives what it gives over the batch)."""
        local: list[np.ndarray] = []  # each state's index among its own pair's states
        states: list[list[np.ndarray]] = []
        for layer in self.states:
            order = np.argsort(layer[:, 0], kind="stable")
            bounds = np.searchsorted(layer[order, 0], np.arange(self.n_pairs + 1))
            index = np.empty(len(layer), dtype=np.int64)
            index[order] = np.arange(len(layer)) - np.repeat(bounds[:-1], np.diff(bounds))
            local.append(index)
            states.append([layer[order[bounds[p] : bounds[p + 1]]] for p in range(self.n_pairs)])
        edges: list[list[np.ndarray]] = []
        for i, e in enumerate(self.edges):
            order = np.argsort(e[:, 3], kind="stable")
            bounds = np.searchsorted(e[order, 3], np.arange(self.n_pairs + 1))
            mine = e[order]
            renumbered = np.stack(
                [local[i][mine[:, 0]], local[i + 1][mine[:, 1]], mine[:, 2], np.zeros(len(mine), dtype=mine.dtype)],
                axis=1,
            ).reshape(-1, 4)
            edges.append([renumbered[bounds[p] : bounds[p + 1]] for p in range(self.n_pairs)])
        return [
            WalkBatch(1, [layer[p] for layer in states], [layer[p] for layer in edges]) for p in range(self.n_pairs)
        ]


def _rows(
    graph: MessageGraph, pairs: np.ndarray, nodes: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every CSR entry of each (pair, node): (pair, node, relation, neighbour) columns."""
    pos, owner = gather_rows(graph.indptr, nodes)
    return pairs[owner], nodes[owner], graph.rel[pos], graph.nbr[pos]


def _join(
    graph: MessageGraph, pairs: np.ndarray, nodes: np.ndarray, allowed: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The CSR entries of each (pair, node) whose (pair, neighbour) key is ``allowed``, as ``_rows`` gives
    them; only the neighbour column is read for every entry, the others for the entries kept."""
    pos, owner = gather_rows(graph.indptr, nodes)
    keep = allowed[(pairs * graph.n_nodes)[owner] + graph.nbr[pos]]
    pos, owner = pos[keep], owner[keep]
    return pairs[owner], nodes[owner], graph.rel[pos], graph.nbr[pos]


def _mask(keys: np.ndarray, size: int) -> np.ndarray:
    mask = np.zeros(size, dtype=bool)
    mask[keys] = True
    return mask


def walk_batch(
    graph: MessageGraph,
    sources: np.ndarray,
    targets: np.ndarray,
    length: int,
    hide_pair_below: int = 0,
    join: Literal["smaller", "source", "target"] = "smaller",
) -> WalkBatch:
    """Walk subgraphs of ``length`` (1..3) steps from ``sources[p]`` to ``targets[p]``.

    ``hide_pair_below``: edges between the pair's own two drugs with a relation id below this (their
    interaction labels) are left out, so a training pair looks like a query pair, whose label the graph
    cannot hold. ``join`` (L = 3): which neighbourhood's CSR rows the middle layer reads — the smaller
    one per pair, or always the source's or the target's (the same edges; the tests compare them).
    """
    # over 60 lines: one vectorised kernel over all pairs of the batch; each layer's arrays feed the next, and
    # pieces would pass a dozen index arrays between them (benchmarks/emergnn_step.py times it)
    if not 1 <= length <= 3:
        raise ValueError("walk subgraphs support 1 to 3 layers")
    n, b = graph.n_nodes, len(sources)
    sources = np.asarray(sources, dtype=np.int64)
    targets = np.asarray(targets, dtype=np.int64)
    pair_ids = np.arange(b, dtype=np.int64)
    ident = graph.identity
    # rows of u and of v: u's out-edges, and v's edges read backwards (x -> v)
    u_pair, u_node, u_rel, u_nbr = _rows(graph, pair_ids, sources)
    v_pair, v_node, v_rel, v_nbr = _rows(graph, pair_ids, targets)
    v_rel = graph.reverse(v_rel)
    # F1 / B1: within one hop of u / v (the drug itself included), as pair * n + node keys
    f_key = np.unique(np.concatenate([pair_ids * n + sources, u_pair * n + u_nbr]))
    b_key = np.unique(np.concatenate([pair_ids * n + targets, v_pair * n + v_nbr]))
    layer0 = np.stack([pair_ids, sources], 1)  # state index = pair id
    layer_last = np.stack([pair_ids, targets], 1)

    def rows(
        pair: np.ndarray, frm: np.ndarray, rel: np.ndarray, to: np.ndarray, keep: np.ndarray | None = None
    ) -> np.ndarray:
        """(pair, from, relation, to) rows of the kept edges, without the pair's own label edges when hidden."""
        keep = np.ones(len(pair), dtype=bool) if keep is None else keep
        if hide_pair_below:
            u, v = sources[pair], targets[pair]
            own = ((frm == u) & (to == v)) | ((frm == v) & (to == u))
            label = (rel != ident) & (rel % graph.n_base < hide_pair_below)
            keep &= ~(own & label)
        return np.stack([pair[keep], frm[keep], rel[keep], to[keep]], 1)

    def into(
        allowed: np.ndarray, pair: np.ndarray, frm: np.ndarray, rel: np.ndarray, to: np.ndarray, key_of: np.ndarray
    ) -> np.ndarray:
        return rows(pair, frm, rel, to, allowed[key_of])

    if length == 1:  # u -> v directly
        hit = u_nbr == targets[u_pair]
        if hide_pair_below:
            hit &= u_rel % graph.n_base >= hide_pair_below
        e = np.stack([u_pair[hit], u_node[hit], u_rel[hit], u_nbr[hit]], 1)
        return WalkBatch(b, [layer0, layer_last], [_layer(e, e[:, 0], e[:, 0])])

    if length == 2:  # u -> m -> v with m within one hop of both
        mid_key = np.intersect1d(f_key, b_key)
        mid_mask = _mask(mid_key, b * n)
        first = into(mid_mask, u_pair, u_node, u_rel, u_nbr, u_pair * n + u_nbr)
        first = np.concatenate([first, _identity_steps(pair_ids, sources, mid_mask, n, ident)])
        second = into(mid_mask, v_pair, v_nbr, v_rel, v_node, v_pair * n + v_nbr)
        second = np.concatenate([second, _identity_steps(pair_ids, targets, mid_mask, n, ident)])
        index = _index(mid_key, b * n)
        mid = np.stack([mid_key // n, mid_key % n], 1)
        return WalkBatch(
            b,
            [layer0, mid, layer_last],
            [
                _layer(first, first[:, 0], index[first[:, 0] * n + first[:, 3]]),
                _layer(second, index[second[:, 0] * n + second[:, 1]], second[:, 0]),
            ],
        )

    # length 3: u -> S1 -> S2 -> v, S1 within F1 and S2 within B1, joined by the middle edges
    f_mask, b_mask = _mask(f_key, b * n), _mask(b_key, b * n)
    f_pair, f_node = f_key // n, f_key % n
    b_pair, b_node = b_key // n, b_key % n
    degree = np.diff(graph.indptr)
    if join == "smaller":
        from_source = np.bincount(f_pair, degree[f_node], b) <= np.bincount(b_pair, degree[b_node], b)
    else:
        from_source = np.full(b, join == "source")
    on_f, on_b = from_source[f_pair], ~from_source[b_pair]
    p_, i_, r_, j_ = _join(graph, f_pair[on_f], f_node[on_f], b_mask)
    # from v's side: entries j -> i read backwards are the middle edges i -> j
    q_, j2, r2, i2 = _join(graph, b_pair[on_b], b_node[on_b], f_mask)
    pair_, frm = np.concatenate([p_, q_]), np.concatenate([i_, i2])
    rel_, to = np.concatenate([r_, graph.reverse(r2)]), np.concatenate([j_, j2])
    middle = rows(pair_, frm, rel_, to)
    both = np.intersect1d(f_key, b_key)
    middle = np.concatenate([middle, np.stack([both // n, both % n, np.full(both.size, ident), both % n], 1)])
    from_key, to_key = middle[:, 0] * n + middle[:, 1], middle[:, 0] * n + middle[:, 3]
    s1_mask, s2_mask = _mask(from_key, b * n), _mask(to_key, b * n)
    s1_key, s2_key = np.flatnonzero(s1_mask), np.flatnonzero(s2_mask)  # sorted, as np.unique would give, without a sort
    first = into(s1_mask, u_pair, u_node, u_rel, u_nbr, u_pair * n + u_nbr)
    first = np.concatenate([first, _identity_steps(pair_ids, sources, s1_mask, n, ident)])
    last = into(s2_mask, v_pair, v_nbr, v_rel, v_node, v_pair * n + v_nbr)
    last = np.concatenate([last, _identity_steps(pair_ids, targets, s2_mask, n, ident)])
    s1_index, s2_index = _index(s1_key, b * n), _index(s2_key, b * n)
    edges = [
        _layer(first, first[:, 0], s1_index[first[:, 0] * n + first[:, 3]]),
        _layer(middle, s1_index[from_key], s2_index[to_key]),
        _layer(last, s2_index[last[:, 0] * n + last[:, 1]], last[:, 0]),
    ]
    states = [layer0, np.stack([s1_key // n, s1_key % n], 1), np.stack([s2_key // n, s2_key % n], 1), layer_last]
    return WalkBatch(b, states, edges)


def _identity_steps(pairs: np.ndarray, nodes: np.ndarray, allowed: np.ndarray, n: int, identity: int) -> np.ndarray:
    keep = allowed[pairs * n + nodes]
    return np.stack([pairs[keep], nodes[keep], np.full(int(keep.sum()), identity), nodes[keep]], 1)


def _index(sorted_keys: np.ndarray, size: int) -> np.ndarray:
    index = np.full(size, -1, dtype=np.int64)
    index[sorted_keys] = np.arange(sorted_keys.size)
    return index


def _layer(edges: np.ndarray, src_state: np.ndarray, dst_state: np.ndarray) -> np.ndarray:
    """(pair, from, r, to) rows and their state indices -> (src state, dst state, r, pair) rows."""
    return np.stack([src_state, dst_state, edges[:, 2], edges[:, 0]], 1).astype(np.int64, copy=False).reshape(-1, 4)
