"""``drugrag``: graph RAG over a property graph of drugs, compounds and side effects (DrugRAG).

1. **Ingestion** (once per task data; an artifact) — dictionary + rule NER turns the DrugBank monographs,
   the training split's interaction sentences and SIDER facts into the graph (:mod:`graph`).
2. **Query writer** (role ``query_writer``) — Cypher from the schema and one example.
3. **Check and run** — :mod:`guard` rejects anything that is not a single read; the graph is opened
   read-only. On an error or an empty result the writer is re-prompted with the error once; then the
   agent relaxes to a keyword lookup (the question's entities found by the same NER, and their edges).
4. **Answer writer** (role ``generator``, its own role so a small model can write queries and a large one
   answer, as in the paper) answers from the retrieved facts.

Counters report how many queries were written, passed the check, executed and returned rows, and how
often the keyword fallback was used.
"""

from __future__ import annotations

import json
from typing import Any

from ddibench.schema import Question
from ddibench.system import RunContext, TrainingView, llm_trace
from ddibench.systems.drugrag.graph import LABELS, RELATIONS, SCHEMA_TEXT, LadybugGraph, Neo4jGraph, extract
from ddibench.systems.drugrag.guard import CypherRejected, check_cypher
from ddibench.toolkit.answering import AnswerConfig, AnswerSystem, training_interactions

CYPHER_SYSTEM = f"""You translate questions about drugs into one read-only Cypher query for this graph:
{SCHEMA_TEXT}
Example question: What happens if Warfarin is taken with Fluconazole?
Example query: MATCH (a:Drug {{name: 'Warfarin'}})-[r:INTERACTS_WITH]-(b:Drug {{name: 'Fluconazole'}}) RETURN r.description
Reply with the Cypher query only."""


class DrugRAGConfig(AnswerConfig):
    neo4j_uri: str | None = None  # bolt://...; default: the embedded ladybug graph
    max_rows: int = 20
    fallback_rows: int = 10


class DrugRAGSystem(AnswerSystem):
    name = "drugrag"
    version = "1.0.0"
    description = "NER-built drug graph (ladybug/Neo4j); LLM writes read-only Cypher, falls back to keyword lookup; second LLM answers"
    paper = "DrugRAG (Nile University)"
    Config = DrugRAGConfig
    llm_roles = ("generator", "query_writer")
    config: DrugRAGConfig

    async def prepare_knowledge(self, view: TrainingView, ctx: RunContext) -> None:
        from ddibench.systems.drugrag.ner import dictionary

        train, labels = training_interactions(view)
        self.ner = dictionary()
        key = {"graph": "drugrag", "recipe": 1, "data_sha256": view.task.data_sha256, "task": view.task.name}
        if self.config.neo4j_uri:
            self.graph: LadybugGraph | Neo4jGraph = Neo4jGraph(self.config.neo4j_uri)
            data = extract(train, labels)
            self.graph.build(data)
            self.ingestion = data["stats"]
            return

        def build(directory: Any) -> None:
            bar = ctx.progress.task("building the DrugRAG graph", 1)
            data = extract(train, labels)
            (directory / "graph").mkdir()
            LadybugGraph.build(directory / "graph" / "db", data, directory)
            (directory / "ingestion.json").write_text(json.dumps(data["stats"]), encoding="utf-8")
            for name in (
                "drug.csv",
                "compound.csv",
                "side_effect.csv",
                "interacts.csv",
                "causes_Drug.csv",
                "causes_Compound.csv",
            ):
                (directory / name).unlink(missing_ok=True)
            bar.advance()
            bar.close()

        path, _ = ctx.artifacts.get_or_build("drugrag-graph", key, build)
        self.graph = LadybugGraph(path / "graph" / "db")
        self.ingestion = json.loads((path / "ingestion.json").read_text(encoding="utf-8"))

    def run_info(self) -> dict[str, Any]:
        graph = getattr(self, "graph", None)
        return {
            "counters": self.counters.as_dict(),
            "ingestion": getattr(self, "ingestion", {}),
            "backend": getattr(graph, "backend", None),
        }

    async def answer(self, question: Question, ctx: RunContext) -> tuple[str, dict[str, Any]]:
        calls: list[dict[str, Any]] = []
        trace: dict[str, Any] = {"cypher": []}
        facts = await self._cypher(question.text, ctx, calls, trace)
        if not facts:
            self.count("keyword_fallback")
            facts = self._keyword_lookup(question.text)
            trace["keyword_fallback"] = facts
        text, call = await self.write(question.text, facts, ctx)
        calls.append(call)
        trace["llm"] = calls
        return text, trace

    async def _cypher(
        self, question: str, ctx: RunContext, calls: list[dict[str, Any]], trace: dict[str, Any]
    ) -> list[str]:
        messages = [{"role": "system", "content": CYPHER_SYSTEM}, {"role": "user", "content": question}]
        for attempt in range(2):
            result = await ctx.model("query_writer").chat(messages, temperature=0.0, max_tokens=128, seed=ctx.seed)
            calls.append(llm_trace("query_writer", messages, result))
            record: dict[str, Any] = {"attempt": attempt + 1, "written": result.text}
            trace["cypher"].append(record)
            self.count("cypher_written")
            try:
                checked = check_cypher(result.text, LABELS, RELATIONS, self.config.max_rows)
                record["checked"] = checked.cypher
                self.count("cypher_parsed")
                names, rows = self.graph.query(checked.cypher, max_rows=self.config.max_rows)
                self.count("cypher_executed")
                record["rows"] = [[str(v) for v in row] for row in rows]
                if rows:
                    self.count("cypher_non_empty")
                    return [", ".join(f"{n}={v}" for n, v in zip(names, row)) for row in rows]
                error = "the query returned no rows"
            except CypherRejected as exc:
                self.count("cypher_rejected")
                error = f"rejected: {exc}"
            except Exception as exc:  # noqa: BLE001 - a query error is the model's mistake, reported back to it
                error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            record["error"] = error
            messages = messages + [
                {"role": "assistant", "content": result.text},
                {
                    "role": "user",
                    "content": f"That did not work ({error}). Write a corrected read-only Cypher query for: {question}",
                },
            ]
        return []

    def _keyword_lookup(self, question: str) -> list[str]:
        entities = list({(e.kind, e.key): e for e in self.ner.find(question)}.values())
        n = self.config.fallback_rows
        drugs = [e for e in entities if e.kind in ("Drug", "Compound")]
        facts: list[str] = []
        if len([e for e in drugs if e.kind == "Drug"]) >= 2:
            a, b = [e for e in drugs if e.kind == "Drug"][:2]
            _, rows = self.graph.query(
                "MATCH (a:Drug {drugbank_id: $a})-[r:INTERACTS_WITH]-(b:Drug {drugbank_id: $b}) RETURN r.description",
                {"a": a.key, "b": b.key},
                n,
            )
            facts += [r[0] for r in rows]
        for e in drugs:
            _, rows = self.graph.query(f"MATCH (d:{e.kind} {{drugbank_id: $k}}) RETURN d.description", {"k": e.key}, 1)
            facts += [f"{e.name}: {r[0]}" for r in rows if r[0]]
            if e.kind == "Drug":
                _, rows = self.graph.query(
                    "MATCH (d:Drug {drugbank_id: $k})-[r:INTERACTS_WITH]-(o:Drug) RETURN r.description", {"k": e.key}, n
                )
                facts += [r[0] for r in rows][: n // 2]
            _, rows = self.graph.query(
                f"MATCH (d:{e.kind} {{drugbank_id: $k}})-[:CAUSES_SIDE_EFFECT]->(s:SideEffect) RETURN s.name",
                {"k": e.key},
                n,
            )
            if rows:
                facts.append(f"{e.name} can cause: " + ", ".join(r[0] for r in rows))
        for e in entities:
            if e.kind == "SideEffect":
                _, rows = self.graph.query(
                    "MATCH (d)-[:CAUSES_SIDE_EFFECT]->(s:SideEffect {cui: $k}) RETURN d.name", {"k": e.key}, n
                )
                if rows:
                    facts.append(f"{e.name} is a side effect of: " + ", ".join(r[0] for r in rows))
        return list(dict.fromkeys(facts))
