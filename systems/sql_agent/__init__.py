"""``sql-agent``: the "Hybrid LLM Agents for Clinical Support in DDI" design.

1. **Router** — the LLM labels the question DATABASE (an interaction between named drugs) or SEARCH
   (anything else); constrained JSON where the server supports it.
2. **DATABASE** — the query writer (role ``query_writer``, temperature 0–0.3) turns the question into SQL
   from the table's schema and few-shot examples; the statement passes :mod:`guard` and runs read-only
   (:mod:`database`: SQLite by default, PostgreSQL with ``backend=postgres``). A rejected or failing
   statement is re-prompted once with the error; when that fails too, the agent searches instead.
3. **SEARCH** — a ReAct loop (Thought / Action: search[...] / Observation, at most ``react_steps``)
   over a local BM25 search tool on DrugBank 4.2 monographs and the MedQuAD corpus collections, the
   stand-in for SerpApi; with ``SERPAPI_API_KEY`` set (and ``search=serpapi``) the real API is used.
4. **Answer** — the answer writer (role ``generator``, temperature up to 0.3 here) answers from the rows
   or observations.

The table is built from the training split only, both directions, primary key on the id pair. Every
statement the LLM writes, the check's verdict and the rows are kept in the trace; counters report how
many statements parsed, executed and returned rows.
"""

from __future__ import annotations

import json
import os
import re
import urllib.parse
import urllib.request
from typing import Any

from pydantic import Field

from ddibench.errors import ConfigError
from ddibench.hashing import config_hash
from ddibench.schema import Question
from ddibench.system import RunContext, TrainingView, llm_trace
from ddibench.systems.sql_agent.database import (
    PostgresDatabase,
    QueryTimeout,
    SQLiteDatabase,
    interaction_rows,
)
from ddibench.systems.sql_agent.guard import SQLRejected, check_sql
from ddibench.toolkit.answering import AnswerConfig, AnswerSystem, training_interactions

ROUTER = """Decide how to answer the user's question.
DATABASE: the question asks about an interaction between two (or more) named drugs, or which drugs interact with a named drug.
SEARCH: anything else (what a drug is, dosing, side effects, a disease).
Question: {question}
Answer with JSON only: {{"route": "DATABASE"}} or {{"route": "SEARCH"}}"""
ROUTE_SCHEMA = {
    "type": "object",
    "properties": {"route": {"type": "string", "enum": ["DATABASE", "SEARCH"]}},
    "required": ["route"],
}

SQL_SYSTEM = """You write one SQLite/PostgreSQL SELECT statement for a drug-interaction table:
ddi(drug_id TEXT, drug_name TEXT, interacting_drug_id TEXT, interacting_drug_name TEXT, description TEXT)
Each row says what happens when drug_name is combined with interacting_drug_name.
Reply with the SQL statement only."""
SQL_EXAMPLES = [
    (
        "What happens if Warfarin is taken with Fluconazole?",
        "SELECT description FROM ddi WHERE lower(drug_name) = lower('Warfarin') AND lower(interacting_drug_name) = lower('Fluconazole') LIMIT 5",
    ),
    (
        "Which drugs interact with Digoxin?",
        "SELECT interacting_drug_name, description FROM ddi WHERE lower(drug_name) = lower('Digoxin') LIMIT 20",
    ),
]
REACT_SYSTEM = """Answer the question using the search tool. Use this format:
Thought: what you need to find
Action: search[a search query]
After an Observation you may search again, or finish with:
Final Answer: the answer"""


class SQLAgentConfig(AnswerConfig):
    backend: str = "sqlite"  # "sqlite" (embedded) or "postgres"
    postgres_dsn: str | None = None  # default: $DDIBENCH_POSTGRES_DSN
    sql_temperature: float = Field(0.0, ge=0, allow_inf_nan=False)
    max_rows: int = Field(20, gt=0)
    timeout_s: float = Field(2.0, gt=0, allow_inf_nan=False)
    react_steps: int = 3
    search: str = "local"  # "local" (BM25 over monographs and MedQuAD) or "serpapi" (needs SERPAPI_API_KEY)


class SQLAgentSystem(AnswerSystem):
    name = "sql-agent"
    version = "1.0.0"
    description = "router + read-only text-to-SQL over a training-split DDI table + ReAct search; LLM-written answer"
    paper = '"Hybrid LLM Agents for Clinical Support in DDI" (a GitHub project)'
    Config = SQLAgentConfig
    llm_roles = ("generator", "query_writer")
    config: SQLAgentConfig

    async def prepare_knowledge(self, view: TrainingView, ctx: RunContext) -> None:
        from ddibench.toolkit import corpus

        cfg = self.config
        if cfg.backend not in ("sqlite", "postgres"):
            raise ConfigError(f"sql-agent backend '{cfg.backend}' is not sqlite or postgres")
        train, labels = training_interactions(view)
        key = {"table": "ddi", "recipe": 1, "data_sha256": view.task.data_sha256, "task": view.task.name}
        if cfg.backend == "sqlite":
            path, _ = ctx.artifacts.get_or_build(
                "sql-agent-db", key, lambda d: SQLiteDatabase.build(d / "ddi.sqlite", interaction_rows(train, labels))
            )
            self.db: SQLiteDatabase | PostgresDatabase = SQLiteDatabase(path / "ddi.sqlite", cfg.timeout_s)
        else:
            dsn = cfg.postgres_dsn or os.environ.get("DDIBENCH_POSTGRES_DSN")
            if not dsn:
                raise ConfigError(
                    "sql-agent backend=postgres needs a database",
                    "pass --config postgres_dsn=... or set DDIBENCH_POSTGRES_DSN",
                )
            self.db = PostgresDatabase(dsn, f"ddibench_{config_hash(key, 12)}", int(cfg.timeout_s * 1000))
            if not self.db.exists():
                self.db.build(interaction_rows(train, labels))
        self.search_index = corpus.BM25Index(corpus.drug_monographs() + corpus.medquad_chunks())
        if cfg.search == "serpapi" and not os.environ.get("SERPAPI_API_KEY"):
            raise ConfigError("search=serpapi needs an API key", "export SERPAPI_API_KEY=...")

    def search(self, query: str, k: int = 3) -> list[str]:
        if self.config.search == "serpapi":
            return serpapi_search(query, k)
        return [c.text for c, _ in self.search_index.search(query, k)]

    async def answer(self, question: Question, ctx: RunContext) -> tuple[str, dict[str, Any]]:
        calls: list[dict[str, Any]] = []
        messages = [{"role": "user", "content": ROUTER.format(question=question.text)}]
        result = await ctx.model("generator").chat(
            messages, temperature=0.0, max_tokens=32, json_schema=ROUTE_SCHEMA, seed=ctx.seed
        )
        calls.append(llm_trace("generator", messages, result))
        said = result.text.upper()
        # an answer naming neither route goes to the database: the agent's primary tool, guarded like any query
        route = "SEARCH" if "SEARCH" in said and "DATABASE" not in said else "DATABASE"
        self.count(f"route_{route.lower()}")
        trace: dict[str, Any] = {"route": route, "sql": []}
        context: list[str] | None = []
        if route == "DATABASE":
            context = await self._database(question.text, ctx, calls, trace)
            if context is None:
                route = trace["route"] = "SEARCH (after SQL failed)"
        if route.startswith("SEARCH"):
            context = await self._react(question.text, ctx, calls, trace)
        text, call = await self.write(question.text, context or [], ctx)
        calls.append(call)
        trace["llm"] = calls
        return text, trace

    async def _database(
        self, question: str, ctx: RunContext, calls: list[dict[str, Any]], trace: dict[str, Any]
    ) -> list[str] | None:
        messages = [{"role": "system", "content": SQL_SYSTEM}]
        for q, sql in SQL_EXAMPLES:
            messages += [{"role": "user", "content": q}, {"role": "assistant", "content": sql}]
        messages.append({"role": "user", "content": question})
        for attempt in range(2):
            result = await ctx.model("query_writer").chat(
                messages, temperature=self.config.sql_temperature, max_tokens=128, seed=ctx.seed
            )
            calls.append(llm_trace("query_writer", messages, result))
            record: dict[str, Any] = {"attempt": attempt + 1, "written": result.text}
            trace["sql"].append(record)
            self.count("sql_written")
            try:
                checked = check_sql(result.text, self.db.dialect, frozenset({"ddi"}), self.config.max_rows)
                record["checked"] = checked.sql
                self.count("sql_parsed")
                names, rows = self.db.query(checked.sql, self.config.max_rows)
                self.count("sql_executed")
                record["rows"] = [list(map(str, r)) for r in rows]
                if rows:
                    self.count("sql_non_empty")
                    return [", ".join(f"{n}={v}" for n, v in zip(names, row)) for row in rows]
                error = "the query returned no rows"
            except SQLRejected as exc:
                self.count("sql_rejected")
                error = f"rejected: {exc}"
            except QueryTimeout as exc:
                error = str(exc)
            except Exception as exc:  # noqa: BLE001 - a database error is the model's mistake, reported back to it
                error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            record["error"] = error
            messages = messages + [
                {"role": "assistant", "content": result.text},
                {
                    "role": "user",
                    "content": f"That did not work ({error}). Write a corrected SELECT statement for: {question}",
                },
            ]
        return None

    async def _react(
        self, question: str, ctx: RunContext, calls: list[dict[str, Any]], trace: dict[str, Any]
    ) -> list[str]:
        transcript = f"Question: {question}\n"
        observations: list[str] = []
        steps: list[dict[str, Any]] = []
        for _ in range(self.config.react_steps):
            messages = [{"role": "system", "content": REACT_SYSTEM}, {"role": "user", "content": transcript}]
            result = await ctx.model("generator").chat(
                messages, temperature=0.0, max_tokens=96, stop=["Observation:"], seed=ctx.seed
            )
            calls.append(llm_trace("generator", messages, result))
            if "Final Answer:" in result.text:
                steps.append({"final": result.text.split("Final Answer:", 1)[1].strip()})
                break
            match = re.search(r"search\[(.+?)\]", result.text, re.IGNORECASE)
            query = match.group(1).strip() if match else question
            found = self.search(query)
            steps.append(
                {
                    "thought": result.text.strip()[:500],
                    "query": query,
                    "observations": found,
                    "parsed_action": bool(match),
                }
            )
            observations += [o for o in found if o not in observations]
            transcript += f"{result.text.strip()}\nObservation: {' | '.join(found)[:1500]}\n"
            if not match:
                self.count("react_unparsed_action")
                break
        trace["react"] = steps
        return observations


def serpapi_search(query: str, k: int) -> list[str]:
    url = "https://serpapi.com/search.json?" + urllib.parse.urlencode(
        {"q": query, "api_key": os.environ["SERPAPI_API_KEY"], "num": k}
    )
    with urllib.request.urlopen(url, timeout=20) as resp:  # noqa: S310 - fixed https endpoint
        payload = json.loads(resp.read())
    return [f"{r.get('title', '')}: {r.get('snippet', '')}" for r in payload.get("organic_results", [])[:k]]
