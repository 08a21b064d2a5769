"""Paths between two entities: bounded shortest paths and Yen's k shortest simple paths, with the
relation-sequence diversity filter K-Paths uses.

Paths may traverse an edge against its direction (relation ``r + n_relations``), since a drug pair is
connected through shared genes, side effects or diseases whichever way the Hetionet edges point. The
shortest-path search is a level-synchronous bidirectional BFS over the graph's CSR (numpy), bounded by
``max_hops``; Yen's algorithm calls it once per spur node.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from ddibench.kg._graph import KnowledgeGraph, gather_rows

Step = tuple[int, int, int]  # (from entity, relation, to entity); relation >= n_relations reads backwards


@dataclass(frozen=True, order=True)
class Path:
    steps: tuple[Step, ...]

    def __len__(self) -> int:
        return len(self.steps)

    @property
    def nodes(self) -> tuple[int, ...]:
        if not self.steps:
            return ()
        return (self.steps[0][0], *(s[2] for s in self.steps))

    @property
    def relations(self) -> tuple[int, ...]:
        return tuple(s[1] for s in self.steps)

    def pattern(self, kg: KnowledgeGraph) -> tuple[int, ...]:
        """The relation sequence, with undirected relations read the same both ways (the diversity key)."""
        return tuple(kg.canonical_relation(r) for r in self.relations)

    def verbalise(self, kg: KnowledgeGraph) -> str:
        return "; ".join(kg.verbalise(a, r, b) for a, r, b in self.steps)

    def as_dict(self, kg: KnowledgeGraph) -> dict[str, object]:
        return {
            "steps": [list(s) for s in self.steps],
            "relations": [kg.relation_name(r) for r in self.relations],
            "text": self.verbalise(kg),
        }


def _reverse(relation: int, n_relations: int) -> int:
    return relation - n_relations if relation >= n_relations else relation + n_relations


def shortest_path(
    kg: KnowledgeGraph,
    src: int,
    dst: int,
    max_hops: int,
    blocked_nodes: Iterable[int] = (),
    blocked_first: Iterable[tuple[int, int]] = (),
) -> Path | None:
    """A shortest path of at most ``max_hops`` steps, avoiding ``blocked_nodes`` and the first steps
    ``(relation, next entity)`` in ``blocked_first``; None when there is none. Ties are broken by
    entity and relation id, so the result is deterministic."""
    # over 60 lines: one bidirectional breadth-first search; both frontiers, the parents and the blocked masks are
    # state every step reads and writes, and the tie-breaking that makes the result deterministic spans all of it
    if src == dst:
        return Path(())
    indptr, nbr, rel = kg.csr
    n, n_rel = kg.n_entities, kg.n_relations
    blocked = np.zeros(n, dtype=bool)
    blocked_list = [b for b in blocked_nodes if b not in (src, dst)]
    if blocked_list:
        blocked[np.asarray(blocked_list)] = True
    first_block = set(blocked_first)
    # parent arrays: forward side points back towards src, backward side forward towards dst
    prev_f = np.full(n, -1, dtype=np.int64)
    prel_f = np.full(n, -1, dtype=np.int64)
    next_b = np.full(n, -1, dtype=np.int64)
    nrel_b = np.full(n, -1, dtype=np.int64)
    seen_f = np.zeros(n, dtype=bool)
    seen_b = np.zeros(n, dtype=bool)
    seen_f[src] = seen_b[dst] = True
    front_f = np.array([src], dtype=np.int64)
    front_b = np.array([dst], dtype=np.int64)
    hops = 0
    while hops < max_hops and front_f.size and front_b.size:
        cost_f = int((indptr[front_f + 1] - indptr[front_f]).sum())
        cost_b = int((indptr[front_b + 1] - indptr[front_b]).sum())
        forward = cost_f <= cost_b
        front = front_f if forward else front_b
        pos, owner = gather_rows(indptr, front)
        origin, target, relation = front[owner], nbr[pos], rel[pos]
        if forward:
            keep = ~blocked[target] & ~seen_f[target]
            if first_block:
                from_src = origin == src
                if from_src.any():
                    bad = np.array(
                        [(int(r), int(t)) in first_block for r, t in zip(relation[from_src], target[from_src])]
                    )
                    keep[np.flatnonzero(from_src)[bad]] = False
        else:
            keep = ~blocked[target] & ~seen_b[target]
            if first_block:
                into_src = target == src
                if into_src.any():
                    bad = np.array(
                        [
                            (_reverse(int(r), n_rel), int(o)) in first_block
                            for r, o in zip(relation[into_src], origin[into_src])
                        ]
                    )
                    keep[np.flatnonzero(into_src)[bad]] = False
        origin, target, relation = origin[keep], target[keep], relation[keep]
        # CSR rows come in (origin, target, relation) order and frontiers are sorted, so the first
        # entry reaching a target has the smallest origin and relation: a deterministic parent
        first = np.full(n, target.size, dtype=np.int64)
        np.minimum.at(first, target, np.arange(target.size))
        new = np.flatnonzero(first < target.size)
        origin, relation = origin[first[new]], relation[first[new]]
        hops += 1
        if forward:
            prev_f[new], prel_f[new] = origin, relation
            seen_f[new] = True
            front_f = new
            meet = new[seen_b[new]]
        else:
            next_b[new], nrel_b[new] = origin, np.where(relation >= n_rel, relation - n_rel, relation + n_rel)
            seen_b[new] = True
            front_b = new
            meet = new[seen_f[new]]
        if meet.size:
            return _join(int(meet.min()), src, dst, prev_f, prel_f, next_b, nrel_b)
    return None


def _join(
    meet: int, src: int, dst: int, prev_f: np.ndarray, prel_f: np.ndarray, next_b: np.ndarray, nrel_b: np.ndarray
) -> Path:
    head: list[Step] = []
    node = meet
    while node != src:
        head.append((int(prev_f[node]), int(prel_f[node]), node))
        node = int(prev_f[node])
    head.reverse()
    node = meet
    while node != dst:
        head.append((node, int(nrel_b[node]), int(next_b[node])))
        node = int(next_b[node])
    return Path(tuple(head))


def yen_paths(
    kg: KnowledgeGraph,
    src: int,
    dst: int,
    k: int = 10,
    max_hops: int = 3,
    diverse: bool = True,
    max_candidates: int = 200,
) -> list[Path]:
    """Up to ``k`` simple paths of at most ``max_hops`` steps, shortest first (Yen's algorithm).

    With ``diverse`` (K-Paths' filter) a path is kept only if no kept path has the same relation
    sequence (undirected relations such as "resembles" count the same either way); Yen's iteration
    continues past filtered paths until ``k`` are kept or ``max_candidates`` paths have been examined.
    """
    first = shortest_path(kg, src, dst, max_hops)
    if first is None or not first.steps:
        return []
    accepted: list[Path] = [first]  # every path Yen has produced, filtered or not
    kept: list[Path] = [first]
    patterns = {first.pattern(kg)}
    candidates: list[tuple[int, Path]] = []
    queued: set[Path] = set()
    examined = 1
    while len(kept) < k and examined < max_candidates:
        last = accepted[-1]
        nodes = last.nodes
        for i in range(len(last.steps)):
            spur = nodes[i]
            root = last.steps[:i]
            blocked_first = {
                (p.steps[i][1], p.steps[i][2]) for p in accepted if len(p.steps) > i and p.steps[:i] == root
            }
            spur_path = shortest_path(kg, spur, dst, max_hops - i, blocked_nodes=nodes[:i], blocked_first=blocked_first)
            if spur_path is None or not spur_path.steps:
                continue
            total = Path(root + spur_path.steps)
            if len(set(total.nodes)) != len(total.nodes) or total in queued or total in accepted:
                continue
            heapq.heappush(candidates, (len(total), total))
            queued.add(total)
        if not candidates:
            break
        _, best = heapq.heappop(candidates)
        queued.discard(best)
        accepted.append(best)
        examined += 1
        if not diverse or best.pattern(kg) not in patterns:
            kept.append(best)
            patterns.add(best.pattern(kg))
    return kept[:k]
