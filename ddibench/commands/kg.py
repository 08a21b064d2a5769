"""``ddibench kg info|paths``: the shared biomedical knowledge graph."""

from __future__ import annotations

from pathlib import Path

import click

from ddibench.commands.common import console as _console
from ddibench.errors import ConfigError, UnknownNameError

# 'kg paths' bounds: Yen's iteration examines at most 200 candidate paths (yen_paths' max_candidates), so a larger
# -k could never be met; a path of more hops than MAX_HOPS says little about an interaction, and every extra hop
# widens each of the up to 200 spur searches (breadth-first over the whole graph)
MAX_PATHS = 200
MAX_HOPS = 10


@click.group()
def kg() -> None:
    """The biomedical knowledge graph (Hetionet in the EmerGNN DrugBank id space)."""


def _drug_id(text: str) -> int:
    """A catalog drug's node id by DrugBank id, name (any case), node id or synonym; a synonym's match is said."""
    from ddibench.data.drugbank import find_drug, find_drug_by_synonym, load_catalog

    drug = find_drug(text)
    if drug is None:
        raise UnknownNameError(
            "drug",
            text,
            [d.name for d in load_catalog().drugs],
            "give a DrugBank id (DB00945), the catalog's name or a common name (aspirin)",
        )
    if text.strip().lower() not in (drug.name.lower(), drug.drugbank_id.lower(), str(drug.node_id)):
        how = find_drug_by_synonym(text)
        _console().print(
            f"[dim]{text} is {drug.name} ({drug.drugbank_id}): {how[1] if how else 'a synonym'}[/dim]", highlight=False
        )
    return drug.node_id


@kg.command("info")
@click.option(
    "--edges",
    "full_edges",
    type=click.Path(path_type=Path),
    default=None,
    help="Hetionet's full hetionet-v1.0-edges.sif.gz.",
)
def kg_info(full_edges: Path | None) -> None:
    """Entities, relations, edges per metaedge, and what is missing."""
    from rich.table import Table

    from ddibench.kg import load_kg

    graph = load_kg("drugbank", full_edges)
    card = graph.card
    table = Table(
        title=f"KG ({card['space']} id space): {card['entities']:,} entities, {card['kg_edges']:,} edges",
        title_justify="left",
    )
    for col in ("metaedge", "relation id", "edges", "published", "source"):
        table.add_column(col)
    het = card["hetionet"]
    from ddibench.kg import get_space

    index = get_space("drugbank").relation_index()
    for abbrev, idx in sorted(index.items(), key=lambda x: x[1]):
        table.add_row(
            abbrev,
            str(card["relation_base"] + idx),
            f"{card['edges_by_metaedge'].get(abbrev, 0):,}",
            f"{het['published_edges_by_metaedge'].get(abbrev, 0):,}",
            het["provenance"].get(abbrev, ""),
        )
    console = _console()
    console.print(table)
    if card["deviation"]:
        console.print(f"[yellow]{card['deviation']}[/yellow]")


@kg.command("paths")
@click.argument("drug_a")
@click.argument("drug_b")
@click.option("-k", type=int, default=10, show_default=True, help=f"Number of paths (1 to {MAX_PATHS}).")
@click.option("--max-hops", type=int, default=3, show_default=True, help=f"Longest path, in hops (1 to {MAX_HOPS}).")
@click.option("--all-patterns", is_flag=True, help="Do not filter paths with a repeated relation sequence.")
def kg_paths(drug_a: str, drug_b: str, k: int, max_hops: int, all_patterns: bool) -> None:
    """Diverse shortest paths between two drugs (DrugBank id, name or node id)."""
    import time

    from ddibench.kg import load_kg, yen_paths

    _check_paths_options(k, max_hops)
    graph = load_kg("drugbank")
    u, v = _drug_id(drug_a), _drug_id(drug_b)
    t0 = time.perf_counter()
    paths = yen_paths(graph, u, v, k=k, max_hops=max_hops, diverse=not all_patterns)
    elapsed = time.perf_counter() - t0
    console = _console()
    if not paths:
        console.print(
            f"no path of at most {max_hops} hop{'s' if max_hops != 1 else ''} between {graph.name(u)} and {graph.name(v)}"
        )
    for i, path in enumerate(paths, 1):
        console.print(f"{i:2d}. {path.verbalise(graph)}", markup=False)
    console.print(f"[dim]{len(paths)} paths in {1000 * elapsed:.0f} ms[/dim]")


def _check_paths_options(k: int, max_hops: int) -> None:
    """Nothing; a ConfigError for a -k or --max-hops outside its range (before the graph is loaded)."""
    if not 1 <= k <= MAX_PATHS:
        raise ConfigError(
            f"-k {k} is out of range: kg paths shows 1 to {MAX_PATHS} paths",
            f"give -k between 1 and {MAX_PATHS}, e.g. -k 10",
        )
    if not 1 <= max_hops <= MAX_HOPS:
        raise ConfigError(
            f"--max-hops {max_hops} is out of range: a path has 1 to {MAX_HOPS} hops",
            f"give --max-hops between 1 and {MAX_HOPS}, e.g. --max-hops 3",
        )
