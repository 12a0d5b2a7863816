"""Reading a snapshot (``pool.snapshot()`` written as JSON) and checking it has the shape the
report reads, with an error that says what is wrong; also the health states a snapshot names.

Its own module because every other part of the report starts from a checked snapshot, and
the shape the report relies on is stated here once.
"""

from __future__ import annotations

import json
import math
import sys
from typing import IO, Any, Dict, Optional, Union

from .._states import STATES as _BEST_FIRST

#: Health states, worst first: the order of the exits table.
STATES = tuple(reversed(_BEST_FIRST))
_STATE_RANK = {s: i for i, s in enumerate(STATES)}


class SnapshotError(ValueError):
    """The input is not a pool snapshot (``pool.snapshot()`` written as JSON)."""


def load(source: Union[str, IO[str]]) -> Dict[str, Any]:
    """Read a snapshot from a path, ``"-"`` (standard input) or an open text file, and check
    it. Raises :class:`SnapshotError` (not JSON, not a snapshot) or :class:`OSError`."""
    if hasattr(source, "read"):
        name, text = getattr(source, "name", "<input>"), source.read()  # type: ignore[union-attr]
    elif source == "-":
        name, text = "<stdin>", sys.stdin.read()
    else:
        name = str(source)
        try:
            with open(name, encoding="utf-8") as f:
                text = f.read()
        except FileNotFoundError:
            raise SnapshotError(f"{name}: no such file") from None
        except IsADirectoryError:
            raise SnapshotError(f"{name}: is a directory, not a snapshot file") from None
        except UnicodeDecodeError:
            raise SnapshotError(f"{name}: not JSON (not UTF-8 text)") from None
    if not text.strip():
        raise SnapshotError(f"{name}: empty, expected a JSON pool snapshot")
    try:
        data = json.loads(text)
    except ValueError as e:
        raise SnapshotError(f"{name}: not JSON ({e})") from None
    try:
        return check(data)
    except SnapshotError as e:
        raise SnapshotError(f"{name}: {e}") from None


def _is_num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _num(x: Any) -> Optional[float]:
    """A finite number, or None for anything else (None, NaN, a string)."""
    if _is_num(x) and math.isfinite(x):
        return float(x)
    return None


def check(snapshot: Any) -> Dict[str, Any]:
    """Return ``snapshot`` if it has the shape the report reads, else raise
    :class:`SnapshotError` saying what is wrong."""

    def need(cond: bool, what: str) -> None:
        if not cond:
            raise SnapshotError(f"not a pool snapshot ({what})")

    need(isinstance(snapshot, dict), f"a JSON {type(snapshot).__name__}, expected an object")
    for key in ("pool", "exits", "matrix"):
        need(key in snapshot, f"no {key!r}")
    pool, exits, m = snapshot["pool"], snapshot["exits"], snapshot["matrix"]
    need(isinstance(pool, dict), "'pool' is not an object")
    need(isinstance(exits, list), "'exits' is not a list")
    for i, e in enumerate(exits):
        need(isinstance(e, dict) and isinstance(e.get("exit_id"), str), f"exits[{i}] has no exit_id")
    need(isinstance(m, dict), "'matrix' is not an object")
    for key in ("exits", "sites", "columns", "cells"):
        need(isinstance(m.get(key), list), f"matrix has no {key!r} list")
    need(all(isinstance(x, str) for x in m["exits"]), "matrix exits are not strings")
    need(all(isinstance(x, str) for x in m["sites"]), "matrix sites are not strings")
    need("success_rate" in m["columns"], "matrix columns have no 'success_rate'")
    need(len(m["cells"]) == len(m["exits"]), "matrix has not one row of cells per exit")
    width = len(m["columns"])
    for i, row in enumerate(m["cells"]):
        need(isinstance(row, list) and len(row) == len(m["sites"]), f"matrix row {i} has not one cell per site")
        for cell in row:
            need(cell is None or (isinstance(cell, list) and len(cell) == width), f"a cell of matrix row {i} is malformed")
    sites = snapshot.get("sites", [])
    need(isinstance(sites, list) and all(isinstance(s, dict) for s in sites), "'sites' is not a list of objects")
    return snapshot
