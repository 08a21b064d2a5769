#!/usr/bin/env python3
"""Print a pinned-dataset block for ddibench/data/sources.toml from a mirror MANIFEST.tsv.

Usage:
    python scripts/pin_sources.py MANIFEST.tsv DATASET_KEY "Title" OWNER/REPO COMMIT PATH [PATH ...]

Each PATH is a file path inside the repository at COMMIT. The url, sha256, size and license are
copied from the manifest row whose url is the raw-GitHub url of that file; a path missing from the
manifest is an error. Paste the printed block into sources.toml (it is the only registry).
"""

from __future__ import annotations

import csv
import sys
from urllib.parse import quote


def raw_url(repo: str, commit: str, path: str) -> str:
    return f"https://raw.githubusercontent.com/{repo}/{commit}/" + "/".join(
        quote(seg, safe="") for seg in path.split("/")
    )


def main(argv: list[str]) -> int:
    if len(argv) < 6:
        print(__doc__, file=sys.stderr)
        return 2
    manifest, key, title, repo, commit, *paths = argv
    with open(manifest, newline="") as fh:
        rows = {row["url"]: row for row in csv.DictReader(fh, delimiter="\t")}
    print(f'[datasets.{key}]\ntitle = "{title}"\nrepo = "{repo}"\ncommit = "{commit}"\n')
    for path in paths:
        row = rows.get(raw_url(repo, commit, path))
        if row is None:
            print(f"error: {repo}@{commit}:{path} is not in {manifest}", file=sys.stderr)
            return 1
        print(f"[[datasets.{key}.files]]")
        print(f'path = "{path}"\nsha256 = "{row["sha256"]}"\nbytes = {row["bytes"]}')
        print(f'license = "{row["license"]}"\n')
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
