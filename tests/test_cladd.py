"""CLADD: the agent graph against the local stub server (which calls happen, in which order, for each
planner decision and each ablation), its KG searches against a brute-force count on the real Hetionet,
the leakage rules (no Hub line of a target query, never its own anchor), a user's PrimeKG and
annotation files, and the leak audit."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from ddibench.registry import get_task

FULL = ["annotation_planner", "kg_planner", "drugrel", "biorel", "molecule_understanding", "predictor"]
# every agent parses what it needs from one fixed answer: the planners "decision", the predictor "answer"
YES = '{"decision": "yes", "reason": "worth it", "answer": "yes", "targets": ["DRD2", "ADRB2", "OPRM1", "HTR1A", "PPARG"]}'
NO = '{"decision": "no", "reason": "not needed", "answer": "no"}'


@pytest.fixture(scope="module")
def stubs() -> Iterator[dict[str, str]]:
    from ddibench.llm.stub import StubConfig, running_stub

    with running_stub(StubConfig(reply=YES)) as yes, running_stub(StubConfig(reply=NO)) as no:
        yield {"yes": f"vllm:stub-model@{yes.base_url}", "no": f"vllm:stub-model@{no.base_url}"}


def traces(run_dir: Path) -> list[dict]:
    lines = (run_dir / "journal.jsonl").read_text().splitlines()
    return [json.loads(line)["prediction"] for line in lines if line.strip()]


def run_cladd(
    cli, tmp_path: Path, model: str, name: str, *config: str, task: str = "tox_carcinogens", limit: str = "2"
) -> list[dict]:
    run_dir = tmp_path / name
    options = [x for item in config for x in ("--config", item)]
    code, out, err = cli(
        "run",
        "-s",
        "cladd",
        "-t",
        task,
        "--limit",
        limit,
        "-m",
        model,
        "--run-dir",
        str(run_dir),
        "--no-cache",
        *options,
    )
    assert code == 0, out + err
    preds = traces(run_dir)
    assert len(preds) == int(limit) and all(p["valid"] for p in preds), preds
    return preds


def test_agent_graph_for_each_planner_decision(cli, stubs, tmp_path: Path) -> None:
    yes = run_cladd(cli, tmp_path, stubs["yes"], "yes")
    for p in yes:
        trace = p["trace"]
        assert trace["calls"] == FULL and [c["role"] for c in trace["llm"]] == FULL
        assert (
            trace["planner"]["annotation_planner"]["decision"] == "yes"
            and trace["planner"]["kg_planner"]["decision"] == "yes"
        )
        assert (
            trace["caption_tool"]["kind"] == "nearest ChEBI-20 neighbour's description"
            and trace["caption_tool"]["text"] in trace["retrieved"]
        )
        kg = trace["kg"]
        assert 1 <= len(kg["related"]) <= 5 and kg["anchor"]["drug"] not in {r["drug"] for r in kg["related"]}
        assert kg["paths"] and set(kg["paths"]) <= set(trace["retrieved"])
        assert set(trace["reports"]) == {"drugrel", "biorel", "molecule_understanding"}
        # the predictor reads every report
        question = trace["llm"][-1]["messages"][-1]["content"]
        assert (
            "Molecule report:" in question
            and "Related-drug report" in question
            and "Knowledge-graph report" in question
        )
    no = run_cladd(cli, tmp_path, stubs["no"], "no")
    for p in no:
        trace = p["trace"]
        assert trace["calls"] == ["annotation_planner", "kg_planner", "molecule_understanding", "predictor"]
        assert "caption_tool" not in trace and "related" not in trace["kg"]
        assert p["label"] == 0
    results = json.loads((tmp_path / "yes" / "results.json").read_text())
    assert set(results["cost"]["by_role"]) == set(FULL)
    assert (
        results["system_info"]["counters"]["kg_team.called"] == 2
        and results["system_info"]["counters"]["captioning_tool.called"] == 2
    )


@pytest.mark.parametrize(
    ("config", "removed", "tool"),
    [
        ("use_drugrel=false", {"drugrel"}, True),
        ("use_biorel=false", {"biorel"}, True),
        ("use_mu=false", {"molecule_understanding"}, True),
        ("use_kg_team=false", {"kg_planner", "drugrel", "biorel"}, True),
        ("use_captioning_tool=false", {"annotation_planner"}, False),
        ("annotations=expert", {"annotation_planner"}, False),
        ("annotations=generated", {"annotation_planner"}, True),
    ],
)
def test_each_ablation_removes_exactly_its_agents_call(
    cli, stubs, tmp_path: Path, config: str, removed: set[str], tool: bool
) -> None:
    preds = run_cladd(cli, tmp_path, stubs["yes"], "ablation", config)
    for p in preds:
        trace = p["trace"]
        assert trace["calls"] == [c for c in FULL if c not in removed]
        assert ("caption_tool" in trace) is tool
        if config == "use_mu=false":  # the predictor then reads the annotations themselves
            assert "[captioning tool:" in trace["llm"][-1]["messages"][-1]["content"]
        if config == "annotations=generated":
            assert trace["annotations"] == []


def test_targets_never_retrieve_the_querys_hub_line_nor_anchor_on_itself(cli, stubs, tmp_path: Path) -> None:
    from ddibench.kg import compound_index

    task = get_task("targets_activate")
    test = {s.id: s for s in task.load().splits["test"]}
    preds = run_cladd(cli, tmp_path, stubs["yes"], "targets", task="targets_activate", limit="12")
    overlap = 0
    for p in preds:
        trace = p["trace"]
        assert all(a["source"] != "repurposing-hub" for a in trace["annotations"])
        assert 1 <= len(p["ranked"]) <= 5
        own = set(trace["kg"]["excluded_self"])
        assert trace["kg"]["anchor"]["drug"] not in own and not own & {r["drug"] for r in trace["kg"]["related"]}
        molecule = test[p["sample_id"]].input
        in_kg = {i for i in compound_index("drugbank").match(molecule.inchikey, [molecule.name]) if i < 1710}  # type: ignore[union-attr]
        assert in_kg <= own  # every KG drug that is the molecule itself is left out
        if test[p["sample_id"]].meta["kg"] == "overlap":
            overlap += len(own)
        else:
            assert not own
    assert overlap >= 1


def test_captioning_captions_every_split_through_the_full_graph(cli, stubs, tmp_path: Path) -> None:
    preds = run_cladd(cli, tmp_path, stubs["yes"], "caption", task="caption_bace", limit="3")
    splits = {s.id: s.meta["split"] for v in get_task("caption_bace").load().splits.values() for s in v}
    assert sorted(splits[p["sample_id"]] for p in preds) == ["test", "train", "valid"]
    for p in preds:
        assert p["trace"]["calls"] == FULL and p["text"] == YES
        assert "BACE-1" in p["trace"]["llm"][0]["messages"][-1]["content"]  # every agent is told the task


def test_two_hop_counts_equal_a_brute_force_walk_of_the_kg() -> None:
    from collections import Counter

    from ddibench.systems.cladd.graph import hetionet_graph

    graph = hetionet_graph()
    kg = graph.kg
    for anchor in (0, 521, 1709):
        brute: Counter[int] = Counter()
        for _, mid in kg.neighbours(anchor):
            if mid == anchor:
                continue
            for _, drug in kg.neighbours(mid):
                if drug < kg.n_drugs and drug != anchor:
                    brute[drug] += 1
        found = graph.related(anchor, 10)
        top = sorted(brute.items(), key=lambda kv: (-kv[1], kv[0]))[:10]
        assert [(r.drug, r.paths) for r in found] == top
        assert all(
            kg.name(anchor) in p and any(r.name in p for r in found[:2]) for p in graph.paths(anchor, found[:2], 2)
        )
    aspirin = "CC(=O)Oc1ccccc1C(=O)O"
    from ddibench.chem import morgan_matrix, tanimoto_matrix

    assert graph.similarities(aspirin) == pytest.approx(
        tanimoto_matrix(morgan_matrix([aspirin])[0], graph.fingerprints)[0], abs=1e-6
    )
    own = graph.same_structure("BSYNRYMUTXBXSQ-UHFFFAOYSA-N")
    assert [kg.name(i) for i in own] == ["Acetylsalicylic acid"]
    assert graph.anchor(aspirin).drug == own[0]  # type: ignore[union-attr]
    assert graph.anchor(aspirin, own).drug != own[0]  # type: ignore[union-attr]


def test_a_users_primekg_and_annotation_files(cli, stubs, tmp_path: Path) -> None:
    from ddibench.systems.cladd.graph import primekg_graph

    header = "relation,display_relation,x_index,x_id,x_type,x_name,x_source,y_index,y_id,y_type,y_name,y_source\n"
    rows = [
        ("drug_protein", "DB00945", "Aspirin", "PTGS1"),
        ("drug_protein", "DB01050", "Ibuprofen", "PTGS1"),
        ("drug_protein", "DB00788", "Naproxen", "PTGS1"),
        ("drug_protein", "DB01050", "Ibuprofen", "PTGS2"),
        ("drug_protein", "DB00945", "Aspirin", "PTGS2"),
    ]
    lines = [
        f"{rel},target,0,{db},drug,{name},DrugBank,1,{gene},gene/protein,{gene},NCBI\n" for rel, db, name, gene in rows
    ]
    kg_file = tmp_path / "kg.csv"
    kg_file.write_text(header + "".join(lines))
    graph = primekg_graph(str(kg_file))
    assert graph.n_drugs == 3 and graph.identity["sha256"] and int(graph.has_structure.sum()) == 3
    aspirin = graph.anchor("CC(=O)Oc1ccccc1C(=O)O")
    assert aspirin is not None and aspirin.name == "Aspirin" and aspirin.similarity == 1.0
    related = graph.related(aspirin.drug, 5)
    assert [(r.name, r.paths) for r in related] == [("Ibuprofen", 2), ("Naproxen", 1)]
    assert graph.paths(aspirin.drug, related, 1)[1] == "Aspirin drug protein PTGS1; Naproxen drug protein PTGS1"
    # through the CLI: the user's KG and annotation dump, the file's hash in the results
    test = get_task("tox_carcinogens").load().splits["test"]
    dump = tmp_path / "pubchem.tsv"
    dump.write_text(
        "inchikey\tdescription\n" + "".join(f"{s.input.inchikey}\tA user's note about this molecule.\n" for s in test)
    )  # type: ignore[union-attr]
    preds = run_cladd(cli, tmp_path, stubs["yes"], "primekg", f"kg={kg_file}", f"pubchem={dump}", limit="1")
    assert {"source": "pubchem", "text": "A user's note about this molecule."} in preds[0]["trace"]["annotations"]
    results = json.loads((tmp_path / "primekg" / "results.json").read_text())
    assert results["system_info"]["kg"]["sha256"] == graph.identity["sha256"]
    assert any("PrimeKG" in d for d in results["manifest"]["system"]["deviations"])


def test_leak_audit_counts_a_context_that_states_the_gold(cli, stubs, tmp_path: Path) -> None:
    import runpy

    from ddibench.systems.cladd.audit import leaked, stated_labels

    task = get_task("tox_carcinogens")
    test = task.load().splits["test"]
    labels = task.label_space
    dump = tmp_path / "leak.tsv"
    rows = [f"{s.molecule.inchikey}\tThis molecule {labels[s.label].template}." for s in test]
    dump.write_text("inchikey\tdescription\n" + "\n".join(rows) + "\n")
    preds = run_cladd(cli, tmp_path, stubs["no"], "leak", f"pubchem={dump}", "use_kg_team=false")
    audit = runpy.run_path(str(Path(__file__).resolve().parent.parent / "scripts" / "cladd_leak_audit.py"))["audit"]
    found = audit(tmp_path / "leak")
    assert found["audited"] == found["leaked"] == 2 and set(found["samples"]) == {p["sample_id"] for p in preds}
    from ddibench.runner.ceilings import compute  # the same rule over every label: what report --ceilings reads

    ceilings = compute(tmp_path / "leak")
    assert ceilings is not None and ceilings.with_context == 2 and ceilings.coverage == 1.0
    positive = next(s for s in test if s.target == 1)
    assert leaked(task.answer.kind, labels, positive, ["It is not carcinogenic."]) == []
    assert leaked(task.answer.kind, labels, positive, ["It Is Carcinogenic in rats."]) == ["is carcinogenic"]
    targets = get_task("targets_activate")
    sample = next(s for s in targets.load().splits["test"] if s.target)
    symbol = targets.label_space[sample.label_ids[0]].name
    assert leaked(targets.answer.kind, targets.label_space, sample, [f"binds {symbol}."]) == [symbol]
    assert leaked(targets.answer.kind, targets.label_space, sample, [f"binds {symbol}X and x{symbol}"]) == []
    assert leaked(get_task("caption_bace").answer.kind, labels, positive, ["anything"]) is None
    assert stated_labels(task.answer.kind, labels, ["It is not carcinogenic; at high doses it is carcinogenic."]) == [
        0,
        1,
    ]
    assert stated_labels(targets.answer.kind, targets.label_space, [f"binds {symbol}-like and {symbol}."]) == [
        sample.target[0]
    ]


def test_an_ablation_is_shown_apart_from_the_full_system_and_the_shipped_ablations_are_named() -> None:
    """The paper's ablation switches are variant keys: a run without a component gets its own board column
    ('cladd [use_mu=false]'), so its score never stands as CLADD's; a shipped CLADD run is the full system or
    one of the paper's ablations, one component off, under its own column."""
    import json
    from pathlib import Path

    from ddibench.registry import get_system_class
    from ddibench.runner.records import SystemCard
    from leaderboard.data import entry

    cls = get_system_class("cladd")
    assert cls.variant(cls.build({}).config.model_dump(mode="json")) == ""
    # the paper's Table 6, as run on tox_herg (docs/systems/cladd.md)
    ablations = {"use_kg_team=false", "use_mu=false", "annotations=expert", "annotations=generated"}
    for ablation in ablations:
        key, value = ablation.split("=")
        config = {key: value == "true" if value in ("true", "false") else value}
        assert cls.variant(cls.build(config).config.model_dump(mode="json")) == ablation
    assert cls.variant(cls.build({"use_mu": False}).config.model_dump(mode="json")) == "use_mu=false"
    assert (
        cls.variant(cls.build({"use_kg_team": False, "annotations": "expert"}).config.model_dump(mode="json"))
        == "use_kg_team=false, annotations=expert"
    )
    cbr = get_system_class("cbr-ddi")
    assert cbr.variant(cbr.build({"answer": "gnn"}).config.model_dump(mode="json")) == "answer=gnn"
    index = json.loads((Path(__file__).parents[1] / "results" / "index.json").read_text())
    for run in (r for r in index["runs"] if r["system"] in ("cladd", "cbr-ddi")):
        with __import__("tarfile").open(Path(__file__).parents[1] / "results" / run["path"]) as bundle:
            card = SystemCard.model_validate(json.load(bundle.extractfile("results.json"))["manifest"]["system"])
        variant = card.variant  # as the board reads it: recorded, or derived for a card written before it was
        # cbr-ddi: made before gnn_features (Morgan features), or the paper's default or its ablations
        if run["system"] == "cbr-ddi":
            made_before = ("gnn_features=morgan", "shuffle_options=1, gnn_features=morgan")
            paper = ("", "answer=gnn", "answer=gnn, gnn_features=morgan", "use_cases=false", "use_paths=false")
            # a repository drawn per type, kept whole (no K-medoids): its draw is in its configuration and manifest
            drawn = ("sampling=false",) if card.config.get("repository_per_type") is not None else ()
            assert variant in made_before + paper + drawn, run["path"]
            assert entry("cbr-ddi", variant) == (f"cbr-ddi [{variant}]" if variant else "cbr-ddi")
        else:  # the full system (in an option order), or one component off
            assert variant == "" or variant.startswith("shuffle_options=") or variant in ablations, run["path"]
            assert entry("cladd", variant) == (f"cladd [{variant}]" if variant else "cladd")
