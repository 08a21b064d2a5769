"""Read the first worksheet of an .xlsx file with the standard library (no spreadsheet dependency).

Cells are returned as strings exactly as stored (shared or inline strings, or the raw value text);
cells without a value are absent from their row's dict.
"""

from __future__ import annotations

import re
import zipfile
from pathlib import Path
from xml.etree import ElementTree

_NS = {"m": "http://schemas.openxmlformats.org/spreadsheetml/2006/main"}
_COLUMN = re.compile(r"([A-Z]+)")


def _text(node: ElementTree.Element) -> str:
    return "".join(t.text or "" for t in node.iter(f"{{{_NS['m']}}}t"))


def read_first_sheet(path: Path) -> list[dict[str, str]]:
    """Rows of the first worksheet as ``{column letter: value}``, in sheet order (header row included)."""
    with zipfile.ZipFile(path) as zf:
        shared: list[str] = []
        if "xl/sharedStrings.xml" in zf.namelist():
            root = ElementTree.fromstring(zf.read("xl/sharedStrings.xml"))
            shared = [_text(si) for si in root.findall("m:si", _NS)]
        sheet = ElementTree.fromstring(zf.read("xl/worksheets/sheet1.xml"))
    rows: list[dict[str, str]] = []
    for row in sheet.iterfind("m:sheetData/m:row", _NS):
        cells: dict[str, str] = {}
        for cell in row.iterfind("m:c", _NS):
            match = _COLUMN.match(cell.get("r", ""))
            if match is None:
                continue
            kind = cell.get("t")
            if kind == "inlineStr":
                node = cell.find("m:is", _NS)
                value = _text(node) if node is not None else None
            else:
                v = cell.find("m:v", _NS)
                value = v.text if v is not None else None
                if value is not None and kind == "s":
                    value = shared[int(value)]
            if value is not None:
                cells[match.group(1)] = value
        rows.append(cells)
    return rows
