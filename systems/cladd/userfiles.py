"""The files a user gives CLADD by path (``kg=PATH``, ``pubchem=PATH``), read whole and checked.

:func:`read_table` returns a delimited text file's header and rows, or raises a one-line
:class:`~ddibench.errors.DataError` that names the file (and the line) for every way such a file goes
wrong: missing, not UTF-8, not delimited text, or cut short (a row with fewer fields than the header).
"""

from __future__ import annotations

import csv
from pathlib import Path

from ddibench.errors import DataError


def read_table(path: str, option: str, what: str, delimiter: str = ",") -> tuple[Path, list[str], list[dict[str, str]]]:
    """The file at ``path`` (given as ``option=PATH``, holding ``what``): its path, header and rows."""
    file = Path(path).expanduser()
    fix = f"pass {option}=PATH to {what}"
    if not file.is_file():
        raise DataError(f"no {option} file at {file}", fix)
    kind = "tab-separated" if delimiter == "\t" else "comma-separated"
    rows: list[dict[str, str]] = []
    line = 0
    try:
        with open(file, encoding="utf-8", newline="") as fh:
            reader = csv.DictReader(fh, delimiter=delimiter)
            header = list(reader.fieldnames or ())
            for row in reader:
                line = reader.line_num
                if None in row or None in row.values():
                    fields = sum(v is not None for k, v in row.items() if k is not None) + len(row.get(None) or ())  # type: ignore[call-overload]
                    raise DataError(
                        f"{file}:{line} has {fields} fields where its header has {len(header)} (a file cut short, or a stray delimiter)",
                        f"restore the whole file, or {fix}",
                    )
                rows.append(row)
    except UnicodeDecodeError:
        raise DataError(f"{option} file {file} is not UTF-8 text", f"save it as UTF-8, or {fix}") from None
    except csv.Error as exc:
        raise DataError(f"{file}:{line + 1} is not {kind} text ({exc})", f"restore the whole file, or {fix}") from None
    except OSError as exc:
        raise DataError(f"cannot read {option} file {file}: {exc.strerror or exc}", fix) from None
    return file, header, rows
