"""DrugRAG's property graph: ingestion from a text corpus, and read-only querying.

Schema: ``Drug`` (the task's drugs) and ``Compound`` (other DrugBank entries) nodes with
``drugbank_id``, ``name`` and ``description``; ``SideEffect`` nodes with ``cui`` and ``name``;
``(Drug)-[:INTERACTS_WITH {description}]->(Drug)`` and ``(Drug|Compound)-[:CAUSES_SIDE_EFFECT]->(SideEffect)``.

Ingestion runs the dictionary NER over three corpora: the DrugBank 4.2 monographs (a node's
description), the training split's interaction sentences (a sentence naming exactly two drugs gives an
INTERACTS_WITH edge, in the order they are named) and SIDER facts written as sentences ("X causes Y",
from Hetionet's CcSE edges; a sentence naming one drug and one side effect gives a CAUSES_SIDE_EFFECT
edge). Sentences the NER cannot resolve are counted, not guessed.

Backends: the embedded ``ladybug`` database (default; bulk-loaded from CSV, queried through a
``read_only`` connection) and Neo4j through the ``neo4j`` driver when a bolt URI is given (queries in
READ sessions).
"""

from __future__ import annotations

import csv
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ddibench.errors import ConfigError

if TYPE_CHECKING:
    from ddibench.systems.drugrag.ner import Dictionary

# the CSV dialect Python's csv module writes; auto-detection would miss quoting that starts late in a file
CSV_OPTIONS = "(header=false, quote='\"', escape='\"', auto_detect=false)"
LABELS = frozenset({"Drug", "Compound", "SideEffect"})
RELATIONS = frozenset({"INTERACTS_WITH", "CAUSES_SIDE_EFFECT"})
SCHEMA_TEXT = """Nodes: (:Drug {drugbank_id, name, description}), (:Compound {drugbank_id, name, description}), (:SideEffect {cui, name})
Relationships: (:Drug)-[:INTERACTS_WITH {description}]->(:Drug), (:Drug)-[:CAUSES_SIDE_EFFECT]->(:SideEffect), (:Compound)-[:CAUSES_SIDE_EFFECT]->(:SideEffect)
Names are stored with their usual capitalisation, e.g. 'Warfarin'."""


def extract(train: Iterable[Any], labels: Any) -> dict[str, Any]:
    """Nodes and edges from the three corpora (see the module docstring), with counts."""
    from ddibench.systems.drugrag.ner import dictionary

    ner = dictionary()
    stats = {
        "interaction_sentences": 0,
        "interaction_edges": 0,
        "interaction_unresolved": 0,
        "side_effect_sentences": 0,
        "side_effect_edges": 0,
        "side_effect_unresolved": 0,
    }
    drugs, compounds, side_effects = _dictionary_nodes(ner)
    _add_descriptions(drugs, compounds)
    interactions = _interaction_edges(ner, train, labels, stats)
    causes = _side_effect_edges(ner, stats)
    return {
        "drugs": drugs,
        "compounds": compounds,
        "side_effects": side_effects,
        "interactions": interactions,
        "causes": causes,
        "stats": stats,
    }


def _dictionary_nodes(ner: Dictionary) -> tuple[dict[str, dict[str, str]], dict[str, dict[str, str]], dict[str, str]]:
    """Every name the NER dictionary knows as a node: drugs and compounds (no description yet) and side effects."""
    drugs: dict[str, dict[str, str]] = {}
    compounds: dict[str, dict[str, str]] = {}
    side_effects: dict[str, str] = {}
    for kind, key, name in ner.names.values():
        if kind == "Drug":
            drugs.setdefault(key, {"name": name, "description": ""})
        elif kind == "Compound":
            compounds.setdefault(key, {"name": name, "description": ""})
        else:
            side_effects.setdefault(key, name)
    return drugs, compounds, side_effects


def _add_descriptions(drugs: dict[str, dict[str, str]], compounds: dict[str, dict[str, str]]) -> None:
    """Sets each node's description from its DrugBank monograph (a monograph the dictionary lacks adds a compound)."""
    from ddibench.toolkit import corpus

    for chunk in corpus.drug_monographs(words=10_000):  # one passage per drug: the whole description
        db = chunk.id.split(":")[1]
        text = chunk.text.split(": ", 1)[1] if ": " in chunk.text else chunk.text
        (drugs if db in drugs else compounds).setdefault(db, {"name": chunk.title, "description": ""})[
            "description"
        ] = text


def _interaction_edges(
    ner: Dictionary, train: Iterable[Any], labels: Any, stats: dict[str, int]
) -> dict[tuple[str, str], list[str]]:
    """The INTERACTS_WITH edges, each with its sentences: one per training sentence naming exactly two drugs."""
    from ddibench.toolkit import corpus

    interactions: dict[tuple[str, str], list[str]] = {}
    for chunk in corpus.interaction_chunks(train, labels):
        stats["interaction_sentences"] += 1
        found = [e for e in ner.find(chunk.text) if e.kind == "Drug"]
        keys = list(dict.fromkeys(e.key for e in found))
        if len(keys) != 2:
            stats["interaction_unresolved"] += 1
            continue
        interactions.setdefault((keys[0], keys[1]), []).append(chunk.text)
    stats["interaction_edges"] = len(interactions)
    return interactions


def _side_effect_edges(ner: Dictionary, stats: dict[str, int]) -> set[tuple[str, str, str]]:
    """The CAUSES_SIDE_EFFECT edges as ``(node kind, drugbank id, cui)``, read back from SIDER facts as sentences."""
    from ddibench.kg import load_hetionet

    hetionet = load_hetionet()
    causes: set[tuple[str, str, str]] = set()
    ids, names = hetionet.node_ids, hetionet.node_names
    for src, dst in hetionet.edges["CcSE"].tolist():
        stats["side_effect_sentences"] += 1
        found = ner.find(f"{names[src]} causes {names[dst]}.")
        compound = next((e for e in found if e.kind in ("Drug", "Compound")), None)
        effect = next((e for e in found if e.kind == "SideEffect"), None)
        if compound is None or effect is None or compound.key != ids[src].split("::")[1]:
            stats["side_effect_unresolved"] += 1
            continue
        causes.add((compound.kind, compound.key, effect.key))
    stats["side_effect_edges"] = len(causes)
    return causes


def _csv(path: Path, rows: Iterable[Iterable[Any]]) -> Path:
    with open(path, "w", encoding="utf-8", newline="") as fh:
        csv.writer(fh).writerows(rows)
    return path


class LadybugGraph:
    backend = "ladybug"

    def __init__(self, path: Path) -> None:
        self.path = path
        self._conn: Any = None

    @staticmethod
    def build(path: Path, data: dict[str, Any], scratch: Path) -> None:
        import ladybug

        conn = ladybug.Connection(ladybug.Database(str(path)))
        conn.execute(
            "CREATE NODE TABLE Drug(drugbank_id STRING, name STRING, description STRING, PRIMARY KEY(drugbank_id))"
        )
        conn.execute(
            "CREATE NODE TABLE Compound(drugbank_id STRING, name STRING, description STRING, PRIMARY KEY(drugbank_id))"
        )
        conn.execute("CREATE NODE TABLE SideEffect(cui STRING, name STRING, PRIMARY KEY(cui))")
        conn.execute("CREATE REL TABLE INTERACTS_WITH(FROM Drug TO Drug, description STRING)")
        conn.execute("CREATE REL TABLE CAUSES_SIDE_EFFECT(FROM Drug TO SideEffect, FROM Compound TO SideEffect)")
        files = {
            "Drug": _csv(scratch / "drug.csv", ((k, v["name"], v["description"]) for k, v in data["drugs"].items())),
            "Compound": _csv(
                scratch / "compound.csv", ((k, v["name"], v["description"]) for k, v in data["compounds"].items())
            ),
            "SideEffect": _csv(scratch / "side_effect.csv", data["side_effects"].items()),
        }
        for table, file in files.items():
            conn.execute(f"COPY {table} FROM '{file}' {CSV_OPTIONS}")
        _csv(scratch / "interacts.csv", ((a, b, " ".join(texts)) for (a, b), texts in data["interactions"].items()))
        conn.execute(f"COPY INTERACTS_WITH FROM '{scratch / 'interacts.csv'}' {CSV_OPTIONS}")
        for kind in ("Drug", "Compound"):
            _csv(scratch / f"causes_{kind}.csv", ((k, e) for src, k, e in data["causes"] if src == kind))
            conn.execute(
                f"COPY CAUSES_SIDE_EFFECT FROM '{scratch / f'causes_{kind}.csv'}' (from='{kind}', to='SideEffect', {CSV_OPTIONS[1:-1]})"
            )
        del conn

    def connection(self) -> Any:
        if self._conn is None:
            import ladybug

            self._conn = ladybug.Connection(ladybug.Database(str(self.path), read_only=True))
        return self._conn

    def query(
        self, cypher: str, params: dict[str, Any] | None = None, max_rows: int = 50
    ) -> tuple[list[str], list[list[Any]]]:
        result = self.connection().execute(cypher, params or {})
        names = result.get_column_names()
        rows: list[list[Any]] = []
        while result.has_next() and len(rows) < max_rows:
            rows.append(result.get_next())
        return names, rows

    def checksum(self) -> str:
        import hashlib

        digest = hashlib.sha256()
        for file in sorted(p for p in self.path.parent.rglob("*") if p.is_file()):
            digest.update(file.name.encode())
            digest.update(file.read_bytes())
        return digest.hexdigest()


class Neo4jGraph:
    """A Neo4j server (``neo4j_uri``; user and password from $NEO4J_USER / $NEO4J_PASSWORD)."""

    backend = "neo4j"

    def __init__(self, uri: str) -> None:
        try:
            import neo4j
        except ImportError:
            raise ConfigError("the Neo4j backend needs the neo4j driver", "pip install neo4j") from None
        auth = (os.environ.get("NEO4J_USER", "neo4j"), os.environ.get("NEO4J_PASSWORD", ""))
        self.driver = neo4j.GraphDatabase.driver(uri, auth=auth)

    def build(self, data: dict[str, Any]) -> None:
        with self.driver.session() as session:
            for kind in ("Drug", "Compound"):
                rows = [
                    {"id": k, "name": v["name"], "description": v["description"]}
                    for k, v in data[kind.lower() + "s"].items()
                ]
                session.run(
                    f"UNWIND $rows AS r MERGE (n:{kind} {{drugbank_id: r.id}}) SET n.name = r.name, n.description = r.description",
                    rows=rows,
                )
            session.run(
                "UNWIND $rows AS r MERGE (n:SideEffect {cui: r.cui}) SET n.name = r.name",
                rows=[{"cui": k, "name": v} for k, v in data["side_effects"].items()],
            )
            session.run(
                "UNWIND $rows AS r MATCH (a:Drug {drugbank_id: r.a}), (b:Drug {drugbank_id: r.b}) MERGE (a)-[e:INTERACTS_WITH]->(b) SET e.description = r.d",
                rows=[{"a": a, "b": b, "d": " ".join(t)} for (a, b), t in data["interactions"].items()],
            )
            for kind in ("Drug", "Compound"):
                session.run(
                    f"UNWIND $rows AS r MATCH (a:{kind} {{drugbank_id: r.a}}), (s:SideEffect {{cui: r.s}}) MERGE (a)-[:CAUSES_SIDE_EFFECT]->(s)",
                    rows=[{"a": k, "s": e} for src, k, e in data["causes"] if src == kind],
                )

    def query(
        self, cypher: str, params: dict[str, Any] | None = None, max_rows: int = 50
    ) -> tuple[list[str], list[list[Any]]]:
        import neo4j

        with self.driver.session(default_access_mode=neo4j.READ_ACCESS) as session:
            result = session.execute_read(lambda tx: list(tx.run(cypher, params or {}))[:max_rows])
        names = list(result[0].keys()) if result else []
        return names, [list(r.values()) for r in result]
