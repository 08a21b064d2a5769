"""Hetionet rebuilt from pinned sources, mapped into the EmerGNN id spaces, and its queries."""

from __future__ import annotations

import csv
import gzip
import itertools
from collections import deque

import numpy as np
import pytest
from conftest import reference_dir

from ddibench.data import fetch, source
from ddibench.errors import DataError
from ddibench.kg import (
    Hetionet,
    check_full_edge_file,
    get_space,
    load_hetionet,
    load_kg,
    map_to_space,
    shortest_path,
    split_visibility,
    yen_paths,
)
from ddibench.registry import get_task

REFERENCE = reference_dir() / "ddi2_derived"
needs_reference = pytest.mark.skipif(not REFERENCE.is_dir(), reason="independent reference tables not available")


@pytest.fixture(scope="module")
def hetionet() -> Hetionet:
    return load_hetionet()


@pytest.fixture(scope="module")
def kg():
    return load_kg("drugbank")


def test_every_rebuilt_metaedge_has_its_published_count(hetionet: Hetionet) -> None:
    assert len(hetionet.edges) == 20 and hetionet.n_edges() == 993_498
    for abbrev, edges in hetionet.edges.items():
        assert len(edges) == hetionet.published_counts[abbrev], abbrev
    assert sorted(hetionet.missing) == ["AeG", "GpBP", "GpCC", "GpMF"]
    assert hetionet.dropped["CcSE"] == 14_719 and sum(hetionet.dropped.values()) == 14_719
    assert len(hetionet.node_ids) == 47_031


@needs_reference
@pytest.mark.parametrize("abbrev", ["CbG", "CcSE", "GpPW", "PCiC", "DpS", "GiG", "Gr>G", "CrC"])
def test_metaedges_equal_the_independent_rebuild(hetionet: Hetionet, abbrev: str) -> None:
    path = REFERENCE / "hetionet_edges" / f"{abbrev.replace('>', '_')}.sif.gz"
    with gzip.open(path, "rt", newline="") as fh:
        rows = list(csv.reader(fh, delimiter="\t"))[1:]
    assert hetionet.sorted_edge_ids(abbrev) == [(s, t) for s, _, t in rows]


@needs_reference
@pytest.mark.parametrize("space", ["drugbank", "twosides"])
def test_kg_in_emergnn_id_space_equals_the_independent_mapping(space: str) -> None:
    graph = load_kg(space)
    ref = np.loadtxt(REFERENCE / "emergnn_kg" / f"{space}_KG_hetionet_20rel.tsv.gz", dtype=np.int64)
    assert np.array_equal(ref, np.stack([graph.head, graph.tail, graph.rel], 1))
    assert graph.n_entities == (34_124 if space == "drugbank" else 34_048)


def _edge_set(graph) -> set[tuple[int, int, int]]:
    return set(zip(graph.head.tolist(), graph.tail.tolist(), graph.rel.tolist()))


def test_every_emergnn_kg_delta_edge_is_reproduced(kg) -> None:
    ours = _edge_set(kg)
    for name in ("valid_KG.txt", "test_KG.txt"):
        path = fetch(source("emergnn-drugbank-kg", f"DrugBank/data/emerging/{name}"))
        theirs = {tuple(map(int, line.split())) for line in path.read_text().splitlines() if line}
        assert theirs and theirs <= ours, name
    twosides = _edge_set(load_kg("twosides"))
    for split, seed, part in itertools.product(("S1", "S2"), (1, 12, 123, 1234, 12345), ("valid", "test")):
        path = fetch(source("emergnn-twosides", f"data/{split}_{seed}/{part}_KG.txt"))
        theirs = {tuple(map(int, line.split())) for line in path.read_text().splitlines() if line}
        assert theirs and theirs <= twosides, (split, seed, part)


def test_split_visibility_hides_new_drugs(kg) -> None:
    data = get_task("drugbank_s1_emergnn").load()
    pairs = {
        s: [(x.input.head.node_id, x.input.tail.node_id) for x in data.split(s)] for s in ("train", "valid", "test")
    }
    hidden = split_visibility(pairs["train"], pairs["valid"], pairs["test"])
    train_drugs = {d for p in pairs["train"] for d in p}
    test_drugs = {d for p in pairs["test"] for d in p} - train_drugs
    assert hidden["test"] == set() and hidden["valid"] <= test_drugs and test_drugs - hidden["train"] == set()
    train_graph = kg.without_entities(hidden["train"])
    touched = set(train_graph.head.tolist()) | set(train_graph.tail.tolist())
    assert not touched & hidden["train"]
    assert len(train_graph) < len(kg.without_entities(hidden["valid"])) < len(kg)


def test_names_kinds_and_verbalised_triples(kg) -> None:
    from ddibench.tasks.drugbank import load_catalog

    drug = load_catalog().by_drugbank_id["DB01320"].node_id
    assert kg.name(drug) == "Fosphenytoin" and kg.entity_kinds[drug] == "Drug"
    sentences = [kg.verbalise(*t) for t in kg.triples_of(drug)]
    assert "Fosphenytoin binds CYP3A4" in sentences
    cbg = kg.card["relation_base"] + 6  # CbG is index 6 in KnowDDI's relation order
    genes = [n for r, n in kg.neighbours(drug, [cbg])]
    assert genes and all(kg.entity_kinds[g] == "Gene" for g in genes)
    assert set(kg.k_hop(drug, 1).tolist()) == {drug} | {n for _, n in kg.neighbours(drug)}
    with_ddi = kg.with_interactions([(drug, 0, 3)], templates=[f"#Drug1 and #Drug2 {i}" for i in range(86)])
    assert with_ddi.verbalise(drug, 3, 0) == f"Fosphenytoin and {kg.name(0)} 3"
    assert len(with_ddi) == len(kg) + 1


def _bfs_distance(kg, src: int, dst: int, limit: int) -> int | None:
    indptr, nbr, _ = kg.csr
    seen, queue = {src: 0}, deque([src])
    while queue:
        node = queue.popleft()
        if seen[node] == limit:
            continue
        for nxt in nbr[indptr[node] : indptr[node + 1]].tolist():
            if nxt not in seen:
                seen[nxt] = seen[node] + 1
                if nxt == dst:
                    return seen[nxt]
                queue.append(nxt)
    return None


def _valid(kg, steps) -> bool:
    indptr, nbr, rel = kg.csr
    for a, r, b in steps:
        row = slice(indptr[a], indptr[a + 1])
        if not np.any((nbr[row] == b) & (rel[row] == r)):
            return False
    return True


def test_shortest_paths_match_breadth_first_search(kg) -> None:
    rng = np.random.default_rng(3)
    for u, v in rng.integers(0, kg.n_drugs, (40, 2)).tolist():
        if u == v:
            continue
        path = shortest_path(kg, u, v, 3)
        expected = _bfs_distance(kg, u, v, 3)
        assert (None if path is None else len(path)) == expected, (u, v)
        if path is not None:
            assert path.nodes[0] == u and path.nodes[-1] == v and _valid(kg, path.steps)


def test_yen_paths_are_simple_valid_shortest_first_and_diverse(kg) -> None:
    rng = np.random.default_rng(5)
    checked = 0
    for u, v in rng.integers(0, kg.n_drugs, (30, 2)).tolist():
        paths = yen_paths(kg, u, v, k=10, max_hops=3)
        if not paths:
            continue
        checked += 1
        assert [len(p) for p in paths] == sorted(len(p) for p in paths)
        assert len({p.pattern(kg) for p in paths}) == len(paths)
        for p in paths:
            assert len(set(p.nodes)) == len(p.nodes) and p.nodes[0] == u and p.nodes[-1] == v and _valid(kg, p.steps)
        plain = yen_paths(kg, u, v, k=10, max_hops=3, diverse=False)
        assert len(set(plain)) == len(plain) and [len(p) for p in plain] == sorted(len(p) for p in plain)
    assert checked >= 5


def test_yen_finds_every_short_path_in_order(kg) -> None:
    """Against brute force: all simple paths of at most 2 hops between two drugs, shortest first."""
    indptr, nbr, rel = kg.csr
    u, v = 10, 1  # Riboflavin and Verteporfin
    brute = set()
    for i in range(indptr[u], indptr[u + 1]):
        a, r1 = int(nbr[i]), int(rel[i])
        if a == v:
            brute.add(((u, r1, v),))
        for j in range(indptr[a], indptr[a + 1]):
            b, r2 = int(nbr[j]), int(rel[j])
            if b == v and a not in (u, v):
                brute.add(((u, r1, a), (a, r2, v)))
    paths = yen_paths(kg, u, v, k=len(brute), max_hops=2, diverse=False, max_candidates=len(brute) + 5)
    assert {p.steps for p in paths} == brute


def test_bad_kg_inputs_are_clear_errors(hetionet: Hetionet, tmp_path) -> None:
    wrong = tmp_path / "hetionet-v1.0-edges.sif.gz"
    wrong.write_bytes(gzip.compress(b"source\tmetaedge\ttarget\n"))
    with pytest.raises(DataError, match="not Hetionet v1.0's hetionet-v1.0-edges.sif.gz"):
        check_full_edge_file(wrong)
    with pytest.raises(DataError, match="does not exist"):
        check_full_edge_file(tmp_path / "missing.sif.gz")
    extra_node = Hetionet(
        [*hetionet.node_ids, "Gene::999999999"],
        [*hetionet.node_names, "made up"],
        [*hetionet.node_kinds, "Gene"],
        {"CbG": np.array([[hetionet.node_ids.index("Compound::DB01320"), len(hetionet.node_ids)]], dtype=np.int32)},
        {},
        hetionet.published_counts,
    )
    with pytest.raises(DataError, match="outside the drugbank id space .*Gene::999999999"):
        map_to_space(extra_node, get_space("drugbank"))
    unknown_relation = Hetionet(
        hetionet.node_ids, hetionet.node_names, hetionet.node_kinds, {"XyZ": np.zeros((1, 2), dtype=np.int32)}, {}, {}
    )
    with pytest.raises(DataError, match="metaedge XyZ has no relation id"):
        map_to_space(unknown_relation, get_space("drugbank"))


def test_kg_paths_finds_drugs_by_any_case_and_by_common_name(cli) -> None:
    """DrugBank calls aspirin "Acetylsalicylic acid": the Repurposing Hub's name leads there through its InChIKey."""
    pytest.importorskip("rdkit")
    from ddibench.data.drugbank import find_drug, find_drug_by_synonym

    aspirin = find_drug("Aspirin")
    assert aspirin is not None and (aspirin.drugbank_id, aspirin.name) == ("DB00945", "Acetylsalicylic acid")
    found = find_drug_by_synonym("ASPIRIN")
    assert found is not None and found[0] == aspirin and "BSYNRYMUTXBXSQ-UHFFFAOYSA-N" in found[1]
    assert find_drug("wArFaRiN") == find_drug("DB00682") and find_drug_by_synonym("not a drug at all") is None
    code, out, err = cli("kg", "paths", "warfarin", "Aspirin", "-k", "2")
    assert code == 0, err
    assert (
        "Aspirin is Acetylsalicylic acid (DB00945)" in out
        and " 1. Warfarin " in out
        and "Acetylsalicylic acid" in out.split(" 1. ")[1]
    )
    code, _, err = cli("kg", "paths", "warfarin", "zzzzzz")
    assert code != 0 and "unknown drug 'zzzzzz'" in err and "common name" in err
