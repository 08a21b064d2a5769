"""The check every LLM-written Cypher query passes before it runs.

Outside string literals and comments, the query may use no clause that writes or reaches outside the
graph (CREATE, MERGE, DELETE, DETACH, SET, REMOVE, DROP, ALTER, LOAD, COPY, CALL, FOREACH, INSTALL,
ATTACH, EXPORT, IMPORT, USE, and transaction control); it must be one statement with MATCH and
RETURN; its node labels and relationship types must be the schema's; a LIMIT is appended when it has
none. The graph is opened read-only as well (see graph.py): the check is the first of two walls.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

FORBIDDEN = (
    "CREATE",
    "MERGE",
    "DELETE",
    "DETACH",
    "SET",
    "REMOVE",
    "DROP",
    "ALTER",
    "LOAD",
    "COPY",
    "CALL",
    "FOREACH",
    "INSTALL",
    "ATTACH",
    "DETACH",
    "EXPORT",
    "IMPORT",
    "USE",
    "BEGIN",
    "COMMIT",
    "ROLLBACK",
    "CHECKPOINT",
    "PROFILE",
)
_STRING = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
_WORD = re.compile(r"[A-Za-z_]+")


class CypherRejected(ValueError):
    pass


@dataclass(frozen=True)
class CheckedCypher:
    cypher: str
    original: str


_FENCE = re.compile(r"```(?:[\w+-]*[ \t]*\n)?(.*?)```", re.DOTALL)  # any info string: small models write ```cypress


def extract_cypher(text: str) -> str:
    fenced = _FENCE.search(text)
    return (fenced.group(1) if fenced else text).strip().rstrip(";").strip()


def check_cypher(text: str, labels: frozenset[str], relations: frozenset[str], max_rows: int = 50) -> CheckedCypher:
    query = extract_cypher(text)
    if not query:
        raise CypherRejected("empty query")
    bare = _COMMENT.sub(" ", _STRING.sub("''", query))
    if ";" in bare:
        raise CypherRejected("more than one statement")
    words = {w.upper() for w in _WORD.findall(bare)}
    bad = sorted(words & set(FORBIDDEN))
    if bad:
        raise CypherRejected(f"uses {', '.join(bad)}; only reading (MATCH ... RETURN) is allowed")
    if "MATCH" not in words or "RETURN" not in words:
        raise CypherRejected("needs MATCH and RETURN")
    for group in re.finditer(r"([(\[])([^()\[\]]*)", bare):
        opener, body = group.group(1), group.group(2).split("{", 1)[0]  # labels and types come before properties
        allowed = labels if opener == "(" else relations
        kind = "label" if opener == "(" else "relationship type"
        for name in re.findall(r"[:|]\s*:?\s*`?([A-Za-z_][A-Za-z0-9_]*)", body):
            if name not in allowed:
                raise CypherRejected(f"unknown {kind} '{name}'; the schema has {', '.join(sorted(allowed))}")
    limited = query
    if "LIMIT" not in words:
        limited = f"{query} LIMIT {max_rows}"
    return CheckedCypher(limited, query)
