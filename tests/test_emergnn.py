"""EmerGNN: the walk-subgraph computation equals dense propagation; paths; training and caching."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="emergnn needs the 'ml' extra")

from ddibench.systems.emergnn.model import EmerGNNNet, TensorWalks, top_paths  # noqa: E402
from ddibench.systems.emergnn.walks import MessageGraph, WalkBatch, walk_batch  # noqa: E402


def _random_graph(rng: np.random.Generator, n: int = 40, m: int = 120, n_base: int = 5) -> MessageGraph:
    head = rng.integers(0, n, m)
    tail = rng.integers(0, n, m)
    keep = head != tail
    return MessageGraph.from_triples(head[keep], tail[keep], rng.integers(0, n_base, int(keep.sum())), n, n_base)


def _dense_flow(
    net: EmerGNNNet,
    graph: MessageGraph,
    sources: np.ndarray,
    targets: np.ndarray,
    start: torch.Tensor,
    alpha: list[torch.Tensor],
) -> torch.Tensor:
    """EmerGNN's original formulation: every node carries a state for every pair."""
    n, b, d = graph.n_nodes, len(sources), net.dim
    src = np.repeat(np.arange(n), np.diff(graph.indptr))
    edges = [(int(a), int(r), int(c)) for a, r, c in zip(src, graph.rel, graph.nbr)] + [
        (i, graph.identity, i) for i in range(n)
    ]
    h = torch.zeros(n, b, d)
    h[torch.from_numpy(sources), torch.arange(b)] = start
    for layer in range(net.length):
        out = torch.zeros(n, b, d)
        weight = net.relations[layer].weight
        for a, r, c in edges:
            out[c] += h[a] * (alpha[layer][:, r].unsqueeze(1) * weight[r])
        h = torch.relu(net.propagate_w[layer](out))
    return h[torch.from_numpy(targets), torch.arange(b)]


@pytest.mark.parametrize("length", [1, 2, 3])
def test_walk_subgraph_flow_equals_dense_propagation(length: int) -> None:
    rng = np.random.default_rng(length)
    graph = _random_graph(rng)
    torch.manual_seed(0)
    net = EmerGNNNet(n_drugs=40, n_relations=graph.n_relations, n_labels=4, dim=8, length=length)
    sources, targets = rng.integers(0, 40, 12), rng.integers(0, 40, 12)
    walks = walk_batch(graph, sources, targets, length)
    with torch.no_grad():
        x_u = net.drugs(torch.from_numpy(sources))
        x_v = net.drugs(torch.from_numpy(targets))
        alpha = net.attention(x_u, x_v)
        fast = net.flow(TensorWalks.of(walks, torch.device("cpu")), x_u, alpha)
        dense = _dense_flow(net, graph, sources, targets, x_u, alpha)
        back = net.flow(TensorWalks.of(walks.reversed(graph), torch.device("cpu")), x_v, alpha)
        dense_back = _dense_flow(net, graph, targets, sources, x_v, alpha)
    assert torch.allclose(fast, dense, atol=1e-5)
    assert torch.allclose(back, dense_back, atol=1e-5)
    assert fast.abs().sum() > 0  # the test graph does connect some pairs


def test_walk_flow_gradients_equal_dense_propagation() -> None:
    """The backward pass multiplies by a precomputed transpose instead of differentiating the sparse product:
    every parameter's gradient equals the dense formulation's."""
    rng = np.random.default_rng(5)
    graph = _random_graph(rng)
    torch.manual_seed(1)
    net = EmerGNNNet(n_drugs=40, n_relations=graph.n_relations, n_labels=4, dim=8, length=3)
    sources, targets = rng.integers(0, 40, 12), rng.integers(0, 40, 12)
    walks = walk_batch(graph, sources, targets, 3)

    def gradients(flow: Callable[[torch.Tensor, list[torch.Tensor]], torch.Tensor]) -> list[torch.Tensor]:
        net.zero_grad()
        x_u = net.drugs(torch.from_numpy(sources))
        alpha = net.attention(x_u, net.drugs(torch.from_numpy(targets)))
        (flow(x_u, alpha) ** 2).sum().backward()
        return [p.grad.clone() for p in net.parameters() if p.grad is not None]

    fast = gradients(lambda x_u, alpha: net.flow(TensorWalks.of(walks, torch.device("cpu")), x_u, alpha))
    dense = gradients(lambda x_u, alpha: _dense_flow(net, graph, sources, targets, x_u, alpha))
    assert len(fast) == len(dense) >= 7
    assert sum(float(g.abs().sum()) for g in fast) > 0
    for a, b in zip(fast, dense):  # relative to each gradient's scale (the states of three layers are small)
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-4 * float(b.abs().max()))


def _canonical(walks: WalkBatch) -> list[np.ndarray]:
    """States as they are (sorted by construction); each layer's edges sorted."""
    edges = [e[np.lexsort(e.T[::-1])] for e in walks.edges]
    return [*walks.states, *edges]


def test_the_middle_join_reads_either_side_to_the_same_walks() -> None:
    """L = 3 joins u's and v's neighbourhoods through the CSR rows of one side, the side with fewer edges chosen
    per pair: reading always u's side or always v's gives the same states and edges, with and without the
    pair's own label edges hidden, in a batch where hubs make the smaller side differ from pair to pair."""
    rng = np.random.default_rng(11)
    n, hubs = 60, [0, 1]
    head = np.concatenate([rng.integers(2, n, 150), np.repeat(hubs, 40)])
    tail = np.concatenate([rng.integers(2, n, 150), rng.integers(2, n, 80)])
    keep = head != tail
    graph = MessageGraph.from_triples(head[keep], tail[keep], rng.integers(0, 4, int(keep.sum())), n, 4)
    sources = np.array([0, 5, 1, 7, 9, 11, 0, 13])
    targets = np.array([6, 0, 8, 1, 10, 12, 1, 14])
    sizes = []
    for nodes in (sources, targets):
        hop = [np.unique(np.r_[x, graph.nbr[graph.indptr[x] : graph.indptr[x + 1]]]) for x in nodes]
        sizes.append(np.array([np.diff(graph.indptr)[h].sum() for h in hop]))
    assert (sizes[0] < sizes[1]).any() and (sizes[0] > sizes[1]).any()  # both sides are read in one batch
    for hide in (0, 2):
        walks = {
            join: walk_batch(graph, sources, targets, 3, hide, join=join) for join in ("smaller", "source", "target")
        }
        assert walks["smaller"].n_edges > 100
        for join in ("source", "target"):
            for a, b in zip(_canonical(walks["smaller"]), _canonical(walks[join])):
                assert np.array_equal(a, b)


def test_batches_are_prepared_ahead_in_order_and_errors_surface() -> None:
    from ddibench.systems.emergnn import _prefetched

    assert list(_prefetched(lambda x: x * x, list(range(9)))) == [x * x for x in range(9)]
    assert list(_prefetched(lambda x: x, [4])) == [4]

    def fails_on_three(x: int) -> int:
        if x == 3:
            raise ValueError("batch 3")
        return x

    seen = []
    with pytest.raises(ValueError, match="batch 3"):
        for x in _prefetched(fails_on_three, list(range(6))):
            seen.append(x)
    assert seen == [0, 1, 2]


def test_top_paths_are_real_walks_in_score_order() -> None:
    rng = np.random.default_rng(7)
    graph = _random_graph(rng, n=30, m=150)
    walks = walk_batch(graph, np.array([0, 3]), np.array([5, 9]), 3)
    alpha = [rng.random((2, graph.n_relations)) for _ in range(3)]
    edges = {
        (int(a), int(r), int(c))
        for a, r, c in zip(np.repeat(np.arange(graph.n_nodes), np.diff(graph.indptr)), graph.rel, graph.nbr)
    }
    for pair, (u, v) in enumerate([(0, 5), (3, 9)]):
        paths = top_paths(walks, alpha, graph, 5)[pair]
        scores = [s for s, _ in paths]
        assert scores == sorted(scores, reverse=True)
        for _, steps in paths:
            assert steps[0][0] == u and steps[-1][2] == v
            assert all(step in edges for step in steps)
            assert all(a[2] == b[0] for a, b in zip(steps, steps[1:]))


def test_a_pairs_paths_are_the_same_searched_alone_or_in_a_batch() -> None:
    """The search keeps the best beams of each target state by a stable sort, and a state's candidates are its own
    pair's, in the order of that pair's edges: with attention on a grid of three values (ties everywhere), each
    pair's paths over the whole batch are those of its piece alone (what EmerGNN searches) and of its own walks."""
    rng = np.random.default_rng(11)
    graph = _random_graph(rng, n=40, m=400)
    heads, tails = np.array([0, 3, 7, 3, 12, 0]), np.array([5, 9, 2, 20, 30, 5])
    walks = walk_batch(graph, heads, tails, 3)
    alpha = [rng.integers(0, 3, (len(heads), graph.n_relations)) / 2 for _ in range(3)]
    together = top_paths(walks, alpha, graph, 4)
    pieces = [top_paths(piece, [a[p : p + 1] for a in alpha], graph, 4)[0] for p, piece in enumerate(walks.split())]
    alone = [
        top_paths(walk_batch(graph, heads[p : p + 1], tails[p : p + 1], 3), [a[p : p + 1] for a in alpha], graph, 4)[0]
        for p in range(len(heads))
    ]
    assert together == pieces == alone
    assert sum(len({score for score, _ in p}) < len(p) for p in together) >= 3, "pairs with tied paths to rank"


def test_missing_metaedges_cannot_enter_a_walk_between_two_drugs() -> None:
    """AeG, GpCC and GpMF join genes to anatomy, cellular components and molecular functions, and none of those
    three kinds has a drug neighbour: the inner nodes of a walk of at most three steps from one drug to another
    are each a neighbour of a drug, so no such node can lie on one. Adding the missing edges (random ones of the
    three metaedges here) leaves every walk subgraph, and so the bias-free flow, exactly as it was."""
    from ddibench.kg import load_kg

    kg = load_kg("drugbank")
    kinds = np.array(kg.entity_kinds)
    drug_neighbour = np.zeros(kg.n_entities, dtype=bool)
    drug_neighbour[kg.tail[kg.head < kg.n_drugs]] = True
    drug_neighbour[kg.head[kg.tail < kg.n_drugs]] = True
    far = ("Anatomy", "Cellular Component", "Molecular Function")
    assert not drug_neighbour[np.isin(kinds, far)].any()
    relation = {name: r for r, name in kg.relation_names.items()}
    rng = np.random.default_rng(0)
    genes = np.flatnonzero(kinds == "Gene")
    extra = []
    for name, kind in [
        ("Anatomy - expresses - Gene", "Anatomy"),
        ("Gene - participates - Cellular Component", "Cellular Component"),
        ("Gene - participates - Molecular Function", "Molecular Function"),
    ]:
        other, gene = rng.choice(np.flatnonzero(kinds == kind), 20_000), rng.choice(genes, 20_000)
        head, tail = (other, gene) if kind == "Anatomy" else (gene, other)
        extra.append(np.stack([head, tail, np.full(head.size, relation[name])], 1))
    added = np.concatenate(extra)
    base = MessageGraph.from_triples(kg.head, kg.tail, kg.rel, kg.n_entities, kg.n_relations)
    full = MessageGraph.from_triples(
        np.concatenate([kg.head, added[:, 0]]),
        np.concatenate([kg.tail, added[:, 1]]),
        np.concatenate([kg.rel, added[:, 2]]),
        kg.n_entities,
        kg.n_relations,
    )
    connected = np.flatnonzero(drug_neighbour[: kg.n_drugs] | np.isin(np.arange(kg.n_drugs), kg.head))
    sources, targets = rng.choice(connected, 48), rng.choice(connected, 48)
    before, after = walk_batch(base, sources, targets, 3), walk_batch(full, sources, targets, 3)
    assert before.n_edges > 1000  # real walks were compared
    for a, b in zip([*before.states, *before.edges], [*after.states, *after.edges]):
        assert np.array_equal(a, b)


BUDGET = ["-C", "max_epochs=1", "-C", "train_pairs_per_epoch=96", "-C", "valid_pairs=64", "-C", "explain_paths=3"]


def test_emergnn_trains_predicts_explains_and_reuses_its_checkpoint(cli, tmp_path: Path, fresh_cache: Path) -> None:
    args = ["run", "-s", "emergnn", "-t", "drugbank_s1_emergnn", "--limit", "24", *BUDGET]
    code, out, err = cli(*args, "--run-dir", str(tmp_path / "a"))
    assert code == 0, err
    results = json.loads((tmp_path / "a" / "results.json").read_text())
    info = results["system_info"]
    assert info["loaded_from_cache"] is False and info["resolved_config"]["feature"] == "morgan"
    assert info["epochs"][0]["pairs"] == 96 and info["valid_pairs_used"] == 64
    assert info["kg"]["kg_edges"] == 993_498 and set(info["kg"]["missing_metaedges"]) == {"AeG", "GpCC", "GpMF"}
    preds = [json.loads(line)["prediction"] for line in (tmp_path / "a" / "journal.jsonl").read_text().splitlines()]
    assert len(preds) == 24 and all(len(p["trace"]["top5"]) == 5 for p in preds)
    explained = [p for p in preds if p["trace"]["paths"]]
    assert explained, "some test pairs are connected within 3 hops"
    assert all(path["text"] for p in explained for path in p["trace"]["paths"])

    # the learning-curve script reads the training log: one validated point per epoch, on the axis of whole epochs
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "emergnn_curve", Path(__file__).parents[1] / "scripts" / "emergnn_curve.py"
    )
    assert spec is not None and spec.loader is not None
    curve = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(curve)
    points, meta = curve.curve(tmp_path / "a")
    assert meta["metric"] == "valid_macro_f1" and len(points) == 1
    assert 0 < points[0][0] < 0.01 and points[0][1] == pytest.approx(100 * info["epochs"][0]["valid_macro_f1"])
    lines = curve.by_frequency(tmp_path / "a")  # every test type in exactly one frequency group
    n_types, n_pairs = (
        int(x.replace(",", "")) for x in re.search(r"\((\d+) types in ([\d,]+) test pairs", lines[0]).groups()
    )  # type: ignore[union-attr]
    assert n_pairs == 24
    assert sum(int(re.search(r"(\d+) types", line).group(1)) for line in lines[1:]) == n_types  # type: ignore[union-attr]

    code, _, err = cli(*args, "--run-dir", str(tmp_path / "b"))
    assert code == 0, err
    again = json.loads((tmp_path / "b" / "results.json").read_text())
    assert again["system_info"]["loaded_from_cache"] is True
    assert again["evaluation"]["metrics"] == results["evaluation"]["metrics"]


def test_checkpoint_of_another_config_is_refused(tmp_path: Path) -> None:
    from ddibench.artifacts import ArtifactStore
    from ddibench.errors import DataError

    store = ArtifactStore(tmp_path)
    key = {"system": "emergnn", "config_hash": "a"}
    path, built = store.get_or_build("emergnn", key, lambda d: (d / "model.pt").write_bytes(b"x"))
    assert built
    (path / "key.json").write_text(json.dumps({"system": "emergnn", "config_hash": "b"}))
    with pytest.raises(DataError, match="built for another configuration"):
        store.get("emergnn", key)


@pytest.fixture(scope="module")
def trained_s1(tmp_path_factory: pytest.TempPathFactory) -> tuple[object, object, str]:
    """EmerGNN after one short epoch on drugbank_s1_emergnn, the task's data and its setting."""
    import asyncio

    from ddibench.artifacts import ArtifactStore
    from ddibench.profiles import get_profile
    from ddibench.registry import get_task
    from ddibench.system import RunContext, TrainingView
    from ddibench.systems.emergnn import EmerGNNConfig, EmerGNNSystem

    task = get_task("drugbank_s1_emergnn")
    data = task.load()
    system = EmerGNNSystem(EmerGNNConfig(max_epochs=1, train_pairs_per_epoch=32, valid_pairs=32))
    view = TrainingView(task, data.split("train"), data.split("valid"), data.resources)
    ctx = RunContext(
        task=task, profile=get_profile("cpu"), seed=0, artifacts=ArtifactStore(tmp_path_factory.mktemp("artifacts"))
    )
    asyncio.run(system.prepare(view, ctx))
    return system, data, task.setting


def test_graphs_follow_the_visibility_rule(trained_s1: tuple) -> None:
    """Validation pairs' new drugs keep their KG edges in the validation graph; test drugs do not."""
    system, data, _ = trained_s1
    degree = {name: np.diff(g.indptr) for name, g in system._graphs.items()}
    train_drugs = {k for s in data.split("train") for k in (s.input.head.node_id, s.input.tail.node_id)}
    valid_new = {k for s in data.split("valid") for k in (s.input.head.node_id, s.input.tail.node_id)} - train_drugs
    test_new = (
        {k for s in data.split("test") for k in (s.input.head.node_id, s.input.tail.node_id)} - train_drugs - valid_new
    )
    assert all(degree["valid"][d] > 0 for d in valid_new if degree["predict"][d] > 0)
    assert all(degree["valid"][d] == 0 for d in test_new)
    assert sum(degree["predict"][d] > 0 for d in test_new) > 100


@pytest.mark.parametrize(("split", "hide_own"), [("test", False), ("train", True)])
def test_paths_read_from_a_batch_are_the_paths_of_each_pair_alone(
    trained_s1: tuple, split: str, hide_own: bool
) -> None:
    """encode_explained takes each pair's paths from the batch's own walk subgraphs (one forward for the batch);
    they are, float for float, the paths explain() finds for the pair alone (query pairs, and training pairs
    with their own edge hidden, as CBR-DDI's cases are), and its probabilities are encode()'s."""
    system, data, setting = trained_s1
    pairs = [s.input for s in data.split(split)[:48]]
    heads, tails = [p.head.node_id for p in pairs], [p.tail.node_id for p in pairs]
    probs, reprs, paths = system.encode_explained(heads, tails, setting, 5, hide_own=hide_own)
    alone = [system.explain(h, t, setting, 5, hide_own=hide_own) for h, t in zip(heads, tails)]
    assert paths == alone
    assert sum(bool(p) for p in paths) >= 10 and any(len(p) == 5 for p in paths), "a test that compares paths"
    encoded = system.encode(heads, tails, setting, hide_own=hide_own)
    assert np.array_equal(probs, encoded[0]) and np.array_equal(reprs, encoded[1])
    # a batch's probabilities may round otherwise than each pair's alone (here ~1e-9), by far less than CBR-DDI's
    # CANDIDATE_TIE / 2 (its refinement reads a case's candidates from the batch where its top ones are that far apart)
    from ddibench.systems.cbr_ddi import CANDIDATE_TIE

    each = np.concatenate([system.encode([h], [t], setting, hide_own=hide_own)[0] for h, t in zip(heads, tails)])
    assert float(np.max(np.abs(each - probs))) < CANDIDATE_TIE / 100
    if hide_own:  # the pair's own interaction edge is not among its paths' steps
        own = [{(h, t), (t, h)} for h, t in zip(heads, tails)]
        assert not any(
            (a, b) in own[i] and r % system._graphs["predict"].n_base < system._n_labels
            for i, found in enumerate(paths)
            for path in found
            for a, r, b in path["steps"]
        )


def test_external_node_features_are_trained_on_and_key_the_checkpoint(tmp_path: Path) -> None:
    """feature=external: the network reads the matrix it is given (projected to dim) in place of Morgan
    fingerprints, the checkpoint's key holds the matrix's hash (another matrix, another model), and a missing
    matrix or one of the wrong size is refused in one line naming the fix."""
    import asyncio

    from ddibench.artifacts import ArtifactStore
    from ddibench.errors import ConfigError
    from ddibench.kg import load_kg
    from ddibench.profiles import get_profile
    from ddibench.registry import get_task
    from ddibench.system import RunContext, TrainingView
    from ddibench.systems.emergnn import EmerGNNConfig, EmerGNNSystem

    task = get_task("drugbank_s2")
    data = task.load()
    view = TrainingView(task, data.split("train"), data.split("valid"), data.resources)
    n_drugs = len(data.resources["drugs"].drugs)
    ctx = RunContext(task=task, profile=get_profile("cpu"), seed=0, artifacts=ArtifactStore(tmp_path))
    budget = {"max_epochs": 1, "train_pairs_per_epoch": 32, "valid_pairs": 32}

    def trained(features: np.ndarray | None) -> EmerGNNSystem:
        system = EmerGNNSystem(EmerGNNConfig(feature="external", **budget))
        if features is not None:
            system.use_node_features(features)
        asyncio.run(system.prepare(view, ctx))
        return system

    features = np.random.default_rng(0).normal(size=(n_drugs, 12)).astype(np.float32)
    system = trained(features)
    assert np.array_equal(system._net.fingerprints.numpy(), features) and system._net.project.in_features == 12
    key = json.loads((Path(system.training_log["artifact"]) / "key.json").read_text())
    assert key["node_features_sha256"] == system.node_features_sha256()
    other = trained(features[::-1].copy())
    assert other.training_log["artifact"] != system.training_log["artifact"]
    assert trained(features).training_log["loaded_from_cache"] is True
    with pytest.raises(ConfigError, match="needs a node feature matrix"):
        trained(None)
    with pytest.raises(ConfigError, match=f"have 3 rows for {n_drugs} drugs"):
        trained(features[:3])
    morgan = EmerGNNSystem(EmerGNNConfig(**budget))  # the key of a Morgan model is what it was
    assert "node_features_sha256" not in morgan._artifact_key(view, morgan.resolved("S2"), load_kg("drugbank"), 0)
