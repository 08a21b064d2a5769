"""The SQL agent's interaction table and the read-only ways to query it.

``ddi(drug_id, drug_name, interacting_drug_id, interacting_drug_name, description)`` holds the
*training* pairs of a task in both directions, one row per ordered drug pair (primary key on the id
pair; a pair with several interaction types joins their sentences).

* :class:`SQLiteDatabase` (the embedded default) — a file built once, then opened with
  ``mode=ro`` and ``PRAGMA query_only``, and an authorizer that allows reading the ``ddi`` table and
  nothing else; a progress handler enforces the time limit.
* :class:`PostgresDatabase` — a schema of its own in the user's database; every query runs in a
  ``READ ONLY`` transaction, as a role that may only ``SELECT`` that table, with ``statement_timeout``,
  and is rolled back.
"""

from __future__ import annotations

import hashlib
import sqlite3
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ddibench.errors import ConfigError

COLUMNS = ("drug_id", "drug_name", "interacting_drug_id", "interacting_drug_name", "description")
READER_ROLE = "ddibench_reader"


def interaction_rows(train: Iterable[Any], labels: Any) -> list[tuple[str, str, str, str, str]]:
    """Both directions of every training pair; sentences of the same ordered pair joined."""
    rows: dict[tuple[str, str], list[Any]] = {}
    for s in train:
        pair = s.input if hasattr(s.input, "head") else s.input.pair
        label = int(s.target if isinstance(s.target, int) else s.target["label"])
        sentence = labels[label].render(pair.head.name, pair.tail.name)
        for a, b in ((pair.head, pair.tail), (pair.tail, pair.head)):
            entry = rows.setdefault((a.drugbank_id, b.drugbank_id), [a.drugbank_id, a.name, b.drugbank_id, b.name, []])
            if sentence not in entry[4]:
                entry[4].append(sentence)
    return [(a, an, b, bn, " ".join(sents)) for a, an, b, bn, sents in (rows[k] for k in sorted(rows))]


SCHEMA_SQL = """CREATE TABLE ddi (
    drug_id TEXT NOT NULL,
    drug_name TEXT NOT NULL,
    interacting_drug_id TEXT NOT NULL,
    interacting_drug_name TEXT NOT NULL,
    description TEXT NOT NULL,
    PRIMARY KEY (drug_id, interacting_drug_id)
)"""


class QueryTimeout(RuntimeError):
    pass


class SQLiteDatabase:
    dialect = "sqlite"

    def __init__(self, path: Path, timeout_s: float = 2.0) -> None:
        self.path = path
        self.timeout_s = timeout_s

    @staticmethod
    def build(path: Path, rows: Sequence[tuple[str, ...]]) -> None:
        conn = sqlite3.connect(path)
        try:
            conn.execute(SCHEMA_SQL)
            conn.executemany("INSERT INTO ddi VALUES (?, ?, ?, ?, ?)", rows)
            conn.execute("CREATE INDEX ddi_names ON ddi (drug_name, interacting_drug_name)")
            conn.commit()
        finally:
            conn.close()

    def _authorize(self, action: int, arg1: str | None, arg2: str | None, db: str | None, trigger: str | None) -> int:
        if action == sqlite3.SQLITE_SELECT:
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_READ:
            return sqlite3.SQLITE_OK if (arg1 or "").lower() == "ddi" else sqlite3.SQLITE_DENY
        if action == sqlite3.SQLITE_FUNCTION:
            return sqlite3.SQLITE_OK
        return sqlite3.SQLITE_DENY  # every write, pragma, attach, schema change

    def query(self, sql: str, max_rows: int) -> tuple[list[str], list[tuple[Any, ...]]]:
        conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=self.timeout_s)
        try:
            conn.execute("PRAGMA query_only = ON")
            conn.set_authorizer(self._authorize)
            deadline = time.monotonic() + self.timeout_s
            conn.set_progress_handler(lambda: 1 if time.monotonic() > deadline else 0, 10_000)
            try:
                cursor = conn.execute(sql)
            except sqlite3.OperationalError as exc:
                if "interrupted" in str(exc):
                    raise QueryTimeout(f"query ran past {self.timeout_s:g} s") from None
                raise
            names = [d[0] for d in cursor.description or []]
            return names, cursor.fetchmany(max_rows)
        finally:
            conn.close()

    def checksum(self) -> str:
        return hashlib.sha256(self.path.read_bytes()).hexdigest()


class PostgresDatabase:
    dialect = "postgres"

    def __init__(self, dsn: str, schema: str, timeout_ms: int = 2000) -> None:
        try:
            import psycopg  # noqa: F401
        except ImportError:
            raise ConfigError("the PostgreSQL backend needs psycopg", "pip install 'ddibench[postgres]'") from None
        self.dsn = dsn
        self.schema = schema
        self.timeout_ms = timeout_ms

    def _connect(self) -> Any:
        import psycopg

        try:
            return psycopg.connect(self.dsn, connect_timeout=10)
        except psycopg.OperationalError as exc:
            raise ConfigError(
                f"cannot connect to PostgreSQL ({str(exc).strip().splitlines()[0]})", "check postgres_dsn"
            ) from None

    def exists(self) -> bool:
        with self._connect() as conn:
            row = conn.execute(
                "SELECT 1 FROM information_schema.tables WHERE table_schema = %s AND table_name = 'ddi'", (self.schema,)
            ).fetchone()
            return row is not None

    def build(self, rows: Sequence[tuple[str, ...]]) -> None:
        from psycopg import sql

        schema = sql.Identifier(self.schema)
        with self._connect() as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(schema))
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(schema))
            conn.execute(sql.SQL("SET search_path TO {}").format(schema))
            conn.execute(SCHEMA_SQL)
            with conn.cursor().copy("COPY ddi FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
            conn.execute("CREATE INDEX ddi_names ON ddi (drug_name, interacting_drug_name)")
            role = sql.Identifier(READER_ROLE)
            exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (READER_ROLE,)).fetchone()
            if not exists:
                conn.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(role))
            conn.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(schema, role))
            conn.execute(sql.SQL("GRANT SELECT ON ddi TO {}").format(role))

    def query(self, statement: str, max_rows: int) -> tuple[list[str], list[tuple[Any, ...]]]:
        import psycopg
        from psycopg import sql

        with self._connect() as conn:
            try:
                conn.execute("BEGIN READ ONLY")
                conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(sql.Identifier(self.schema)))
                conn.execute(sql.SQL("SET LOCAL statement_timeout = {}").format(sql.Literal(self.timeout_ms)))
                conn.execute(sql.SQL("SET LOCAL ROLE {}").format(sql.Identifier(READER_ROLE)))
                cursor = conn.execute(statement)  # type: ignore[arg-type]
                names = [d.name for d in cursor.description or []]
                return names, cursor.fetchmany(max_rows)
            except psycopg.errors.QueryCanceled:
                raise QueryTimeout(f"query ran past {self.timeout_ms} ms") from None
            finally:
                conn.rollback()

    def checksum(self) -> str:
        """Digest of the table's rows, the schema's relations and the roles, to prove nothing changed."""
        from psycopg import sql

        with self._connect() as conn:
            conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(self.schema)))
            rows = conn.execute(
                "SELECT md5(string_agg(t::text, '|' ORDER BY drug_id, interacting_drug_id)) FROM ddi t"
            ).fetchone()
            relations = conn.execute(
                "SELECT string_agg(table_schema || '.' || table_name, ',' ORDER BY table_schema, table_name) FROM information_schema.tables "
                "WHERE table_schema NOT IN ('pg_catalog', 'information_schema')"
            ).fetchone()
            roles = conn.execute(
                "SELECT string_agg(rolname || ':' || rolsuper::text, ',' ORDER BY rolname) FROM pg_roles"
            ).fetchone()
        return hashlib.sha256(repr((rows, relations, roles)).encode()).hexdigest()
