"""The check every LLM-written SQL statement passes before it runs.

Parsed with sqlglot (never matched with regular expressions), the statement must be exactly one
``SELECT`` (unions and ``WITH`` included, no ``SELECT ... INTO``) that reads only allowlisted tables
(or its own CTEs), calls only allowlisted functions, and returns at most ``max_rows`` rows (a ``LIMIT``
is added or lowered). What runs is the statement re-written from the parse tree, not the model's text.
The database side is read-only as well (see database.py): the check is the first of two walls.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

import sqlglot
from sqlglot import exp

ALLOWED_FUNCTIONS = frozenset(
    {
        "count",
        "sum",
        "avg",
        "min",
        "max",
        "lower",
        "upper",
        "length",
        "substr",
        "substring",
        "trim",
        "ltrim",
        "rtrim",
        "coalesce",
        "replace",
        "round",
        "abs",
        "instr",
        "strpos",
        "position",
        "concat",
        "group_concat",
        "string_agg",
        "groupconcat",
        "ifnull",
        "nullif",
        "cast",
        "trycast",
        "distinct",
        "like",
        "ilike",
        "if",
    }
)
WRITE_NODES = tuple(
    getattr(exp, name)
    for name in (
        "Insert",
        "Update",
        "Delete",
        "Create",
        "Drop",
        "Alter",
        "AlterTable",
        "Command",
        "Merge",
        "Into",
        "Copy",
        "Pragma",
        "Set",
        "Transaction",
        "Commit",
        "Rollback",
        "Use",
        "Attach",
        "Detach",
        "Grant",
        "LoadData",
        "Analyze",
    )
    if hasattr(exp, name)
)
logging.getLogger("sqlglot").setLevel(logging.ERROR)


# operators and conditionals that sqlglot models as function nodes (AND, OR and XOR are Func subclasses since
# sqlglot 30): they compute on the row, call nothing, and are never checked against the allowlist
OPERATORS = (exp.Connector, exp.Case, exp.If)


class SQLRejected(ValueError):
    """A statement that may not run, with the reason."""


@dataclass(frozen=True)
class CheckedSQL:
    sql: str  # what will run
    original: str
    limited: bool  # a LIMIT was added or lowered


_FENCE = re.compile(r"```(?:[\w+-]*[ \t]*\n)?(.*?)```", re.DOTALL)  # any info string (```sql, ```sqlite, ```postgresql)


def extract_sql(text: str) -> str:
    """The SQL inside an LLM answer (a fenced block when there is one)."""
    fenced = _FENCE.search(text)
    body = fenced.group(1) if fenced else text
    return body.strip().rstrip(";").strip()


def check_sql(text: str, dialect: str, allowed_tables: frozenset[str], max_rows: int = 50) -> CheckedSQL:
    sql = extract_sql(text)
    if not sql:
        raise SQLRejected("empty statement")
    try:
        statements = [s for s in sqlglot.parse(sql, read=dialect) if s is not None]
    except sqlglot.errors.SqlglotError as exc:
        raise SQLRejected(f"does not parse: {str(exc).splitlines()[0]}") from None
    if len(statements) != 1:
        raise SQLRejected(f"{len(statements)} statements; exactly one SELECT is allowed")
    tree = statements[0]
    if not isinstance(tree, (exp.Select, exp.Union, exp.Intersect, exp.Except)):
        raise SQLRejected(f"{type(tree).__name__.upper()} statement; only SELECT is allowed")
    for node in tree.walk():
        if isinstance(node, WRITE_NODES):
            raise SQLRejected(f"contains {type(node).__name__.upper()}; only reading is allowed")
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    for table in tree.find_all(exp.Table):
        name = table.name.lower()
        if table.args.get("db") or table.args.get("catalog"):
            raise SQLRejected(
                f"table {table.sql(dialect=dialect)} is qualified; only {', '.join(sorted(allowed_tables))} may be read"
            )
        if name not in allowed_tables and name not in ctes:
            raise SQLRejected(f"reads table '{name}'; only {', '.join(sorted(allowed_tables))} may be read")
    for func in tree.find_all(exp.Func):
        if isinstance(func, OPERATORS):
            continue
        name = (func.sql_name() if not isinstance(func, exp.Anonymous) else func.name).lower()
        if name not in ALLOWED_FUNCTIONS and not isinstance(
            func, (exp.Count, exp.Sum, exp.Avg, exp.Min, exp.Max, exp.Lower, exp.Upper, exp.Cast, exp.Coalesce)
        ):
            raise SQLRejected(f"calls function '{name}', which is not allowed")
    limited = False
    limit = tree.args.get("limit")
    value = None
    if limit is not None:
        literal = limit.expression if isinstance(limit, exp.Limit) else None
        value = int(literal.name) if isinstance(literal, exp.Literal) and literal.is_int else None
    if value is None or value > max_rows:
        tree = tree.limit(max_rows)
        limited = True
    return CheckedSQL(tree.sql(dialect=dialect), sql, limited)
