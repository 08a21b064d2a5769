"""Export a task's splits as a Hugging Face dataset (``ddibench data export``).

Every split becomes a table with typed ``Features``: the sample id, the input's fields (drug ids,
names and SMILES of a pair; a molecule's SMILES, InChIKey and name; a question), the target (a
``ClassLabel`` with the task's label names, a sequence of them for label sets, or the reference
answer), the cluster keys the bootstrap resamples, and the sample's metadata as JSON. Beside the data
goes a dataset card (``README.md``): source files with their URLs, sha256 and licences (non-commercial
ones marked), the setting, the deviations, and the task's ``data_sha256``, so an exported copy can
always be traced back to the pinned sources.

Splits carry the Hub's standard names (``train``, ``validation``, ``test``; ddibench calls the second
``valid``). Formats: ``parquet`` (``data/<split>.parquet``, declared in the card's ``configs:`` front
matter, so ``datasets.load_dataset(PATH)`` reads the folder as it would a Hub repository) or ``hf``
(``DatasetDict.save_to_disk``; load with ``datasets.load_from_disk``). Exporting twice gives the same bytes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ddibench.errors import ConfigError
from ddibench.schema import DrugPair, Molecule, Question, Sample
from ddibench.task import Task

FORMATS = ("parquet", "hf")
NON_COMMERCIAL = ("NC", "non-commercial")
HUB_SPLITS = {"train": "train", "valid": "validation", "test": "test"}  # ddibench's split names -> the Hub's


def _features(task: Task, kind: str) -> Any:
    from datasets import ClassLabel, Features, Sequence, Value

    names = [label.name or label.template for label in task.label_space] or ["(none)"]
    columns: dict[str, Any] = {"id": Value("string")}
    if task.input_kind == "drug_pair":
        for side in ("head", "tail"):
            columns.update(
                {
                    f"{side}_node_id": Value("int32"),
                    f"{side}_drugbank_id": Value("string"),
                    f"{side}_name": Value("string"),
                    f"{side}_smiles": Value("string"),
                }
            )
    elif task.input_kind == "molecule":
        columns.update(
            {
                "smiles": Value("string"),
                "inchikey": Value("string"),
                "name": Value("string"),
                "molecule_id": Value("string"),
            }
        )
    else:
        columns.update(
            {
                "question": Value("string"),
                "focus": Value("string"),
                "qtype": Value("string"),
                "source": Value("string"),
                "pair_head": Value("string"),
                "pair_tail": Value("string"),
            }
        )
    if kind == "label":
        columns["label"] = ClassLabel(names=names)
    elif kind == "labels":
        columns["labels"] = Sequence(ClassLabel(names=names))
    elif kind == "answer":
        columns.update({"answer": Value("string"), "label": ClassLabel(names=names)})
    else:
        columns["target"] = Value("string")  # any other target, as JSON
    columns["clusters"] = Sequence(Value("string"))
    columns["meta"] = Value("string")
    return Features(columns)


def _target_kind(samples: Sequence[Sample]) -> str:
    target = next((s.target for s in samples if s.target is not None), None)
    if isinstance(target, int) and not isinstance(target, bool):
        return "label"
    if isinstance(target, (tuple, list)):
        return "labels"
    if isinstance(target, Mapping) and "answer" in target:
        return "answer"
    return "json"


def _row(sample: Sample, kind: str) -> dict[str, Any]:
    row: dict[str, Any] = {"id": sample.id}
    inp = sample.input
    if isinstance(inp, DrugPair):
        for side, drug in (("head", inp.head), ("tail", inp.tail)):
            row.update(
                {
                    f"{side}_node_id": drug.node_id,
                    f"{side}_drugbank_id": drug.drugbank_id,
                    f"{side}_name": drug.name,
                    f"{side}_smiles": drug.smiles,
                }
            )
    elif isinstance(inp, Molecule):
        row.update({"smiles": inp.smiles, "inchikey": inp.inchikey, "name": inp.name, "molecule_id": inp.id})
    elif isinstance(inp, Question):
        row.update(
            {
                "question": inp.text,
                "focus": inp.focus,
                "qtype": inp.qtype,
                "source": inp.source,
                "pair_head": inp.pair.head.drugbank_id if inp.pair else "",
                "pair_tail": inp.pair.tail.drugbank_id if inp.pair else "",
            }
        )
    target = sample.target
    if kind == "label":
        row["label"] = sample.label
    elif kind == "labels":
        row["labels"] = list(sample.label_ids)
    elif kind == "answer":
        assert isinstance(target, Mapping)
        row["answer"] = str(target["answer"])
        row["label"] = -1 if target.get("label") is None else int(target["label"])  # ClassLabel's "no label"
    else:
        row["target"] = json.dumps(target, sort_keys=True, default=str)
    row["clusters"] = list(sample.clusters)
    row["meta"] = json.dumps(dict(sample.meta), sort_keys=True, default=str)
    return row


def dataset_card(task: Task, sizes: Mapping[str, int], fmt: str) -> str:
    """The README.md that travels with the exported data."""
    licences = sorted({s.license for s in task.sources})
    restricted = [lic for lic in licences if any(mark in lic for mark in NON_COMMERCIAL)]
    configs = []
    if fmt == "parquet":  # the files of each split, so load_dataset(PATH) reads them under these split names
        configs = ["configs:", "- config_name: default", "  data_files:"]
        configs += [f"  - split: {name}\n    path: data/{name}.parquet" for name in sizes]
    lines = [
        "---",
        f"pretty_name: ddibench {task.name}",
        "license: other",
        *configs,
        "---",
        f"# ddibench task `{task.name}` {task.version}",
        "",
        task.title,
        "",
        f"- family: `{task.family}`, setting: `{task.setting}`, input: `{task.input_kind}`, evaluation split: `{task.eval_split}`",
        f"- data sha256 (ddibench's pinned sources + recipe): `{task.data_sha256}`",
        "- splits: "
        + ", ".join(f"{name} {n:,}" for name, n in sizes.items())
        + " (ddibench's `valid` split is `validation` here)",
        f"- format: {fmt}; exported by ddibench; score predictions with `ddibench` (`ddibench run` or `ddibench import lm-eval`)",
        "",
        "## Licences",
        "",
    ]
    if restricted:
        lines += [
            f"**Non-commercial terms apply**: {', '.join(restricted)}. Check them before redistributing this data.",
            "",
        ]
    lines += [f"- `{lic}`" for lic in licences] + ["", "## Sources", ""]
    lines += [f"- {s.url} (sha256 `{s.sha256}`, {s.license})" for s in task.sources]
    if task.deviations:
        lines += ["", "## Deviations from the upstream definition", ""] + [f"- {d}" for d in task.deviations]
    return "\n".join(lines) + "\n"


def export(task: Task, out: Path, fmt: str = "parquet", splits: Sequence[str] | None = None) -> dict[str, Any]:
    """Write the task's splits to ``out``; returns what was written (paths, sizes, bytes)."""
    if fmt not in FORMATS:
        raise ConfigError(f"unknown export format '{fmt}'", f"use one of: {', '.join(FORMATS)}")
    shown, out = out, Path(os.path.abspath(out))  # '.' or '..' named as given, written by its real path
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"{shown} exists and is not an empty directory", "give a new or empty directory")
    if not out.parent.is_dir():
        raise ConfigError(
            f"the directory {out.parent} does not exist", "create it first, or give a path in an existing directory"
        )
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    try:
        import datasets
    except ImportError:
        raise ConfigError(
            "exporting a Hugging Face dataset needs the datasets package", "pip install 'ddibench[interop]'"
        ) from None
    datasets.disable_progress_bars()
    data = task.load()
    chosen = list(splits or [s for s in ("train", "valid", "test") if s in data.splits])
    kind = _target_kind([s for name in chosen for s in data.split(name)])
    features = _features(task, kind)
    tables = {}
    for name in chosen:
        rows = [_row(s, kind) for s in data.split(name)]
        columns = {key: [r.get(key, "") for r in rows] for key in features}
        tables[HUB_SPLITS.get(name, name)] = datasets.Dataset.from_dict(columns, features=features)
    sizes = {name: len(t) for name, t in tables.items()}
    _write(out, lambda tmp: _write_tables(datasets, tables, tmp, fmt, dataset_card(task, sizes, fmt)))
    files = sorted(p for p in out.rglob("*") if p.is_file())
    return {
        "out": str(out),
        "format": fmt,
        "sizes": sizes,
        "bytes": sum(p.stat().st_size for p in files),
        "files": [str(p.relative_to(out)) for p in files],
    }


def _write_tables(datasets: Any, tables: Mapping[str, Any], folder: Path, fmt: str, card: str) -> None:
    if fmt == "parquet":
        (folder / "data").mkdir()
        for name, table in tables.items():
            table.to_parquet(str(folder / "data" / f"{name}.parquet"))
    else:
        datasets.DatasetDict(tables).save_to_disk(str(folder))
    (folder / "README.md").write_text(card, encoding="utf-8")


def _write(out: Path, fill: Callable[[Path], None]) -> None:
    """Fill a fresh temporary directory beside ``out`` (a name of its own, so no file of the user's is ever
    touched), then move it into place: ``out`` holds the whole export or nothing of it."""
    import shutil
    import tempfile

    from ddibench.errors import write_error

    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".part", dir=out.parent))
    except OSError as exc:
        raise write_error(exc, out.parent) from None
    try:
        fill(tmp)
        if out.is_dir():  # an empty directory given (perhaps '.'): the files move into it, the directory stays
            for entry in sorted(tmp.iterdir()):
                entry.rename(out / entry.name)
            tmp.rmdir()
        else:
            tmp.rename(out)
    except OSError as exc:
        raise write_error(exc, out) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
