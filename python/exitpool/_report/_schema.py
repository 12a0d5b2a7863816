"""Reading a snapshot (``pool.snapshot()`` written as JSON) and checking it has the shape the
report reads, with an error that says what is wrong; also the health states a snapshot names.

Its own module because every other part of the report starts from a checked snapshot. The
shape itself is ``exitpool._shapes``; this module says which parts of it the report needs.
"""

from __future__ import annotations

import json
import math
import sys
from typing import IO, Any, Dict, Optional, Union, get_args, get_origin, get_type_hints, is_typeddict

from .._shapes import ExitSnapshot, Matrix, Snapshot
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


# The parts of a snapshot the report cannot do without; everything else it reads with a
# default, so that a trimmed or older snapshot still renders. Their types are the snapshot's
# own (exitpool._shapes, which the stub re-exports and tests/test_shapes.py checks against the
# core): this module states only which parts it needs.
_NEEDS = ("pool", "exits", "matrix")
_SNAPSHOT = get_type_hints(Snapshot)
_EXIT = get_type_hints(ExitSnapshot)
_MATRIX = get_type_hints(Matrix)


def _container(tp: Any) -> type:
    """The JSON container (dict or list) a snapshot type is read from, else the type itself."""
    return dict if is_typeddict(tp) else get_origin(tp) or tp


def _items(tp: Any) -> type:
    """What a list type holds, as a JSON value (an object for a TypedDict)."""
    return _container(get_args(tp)[0])


def _name(kind: type) -> str:
    """A JSON container's name in a message."""
    names: Dict[type, str] = {dict: "object", list: "list"}
    return names.get(kind, kind.__name__)


def check(snapshot: Any) -> Dict[str, Any]:
    """Return ``snapshot`` if it has the shape the report reads, else raise
    :class:`SnapshotError` saying what is wrong."""

    def need(cond: bool, what: str) -> None:
        if not cond:
            raise SnapshotError(f"not a pool snapshot ({what})")

    need(isinstance(snapshot, dict), f"a JSON {type(snapshot).__name__}, expected an object")
    for key in _NEEDS:
        need(key in snapshot, f"no {key!r}")
    for key in _NEEDS:
        kind = _container(_SNAPSHOT[key])
        need(isinstance(snapshot[key], kind), f"{key!r} is not {'an' if kind is dict else 'a'} {_name(kind)}")
    for i, e in enumerate(snapshot["exits"]):
        need(isinstance(e, _items(_SNAPSHOT["exits"])), f"exits[{i}] is not an object")
        need(isinstance(e.get("exit_id"), _EXIT["exit_id"]), f"exits[{i}] has no exit_id")
    m = snapshot["matrix"]
    for key, tp in _MATRIX.items():
        need(isinstance(m.get(key), _container(tp)), f"matrix has no {key!r} {_name(_container(tp))}")
        if _items(tp) is str:
            need(all(isinstance(x, str) for x in m[key]), f"matrix {key} are not strings")
    need("success_rate" in m["columns"], "matrix columns have no 'success_rate'")
    need(len(m["cells"]) == len(m["exits"]), "matrix has not one row of cells per exit")
    width = len(m["columns"])
    for i, row in enumerate(m["cells"]):
        need(isinstance(row, list) and len(row) == len(m["sites"]), f"matrix row {i} has not one cell per site")
        for cell in row:
            need(cell is None or (isinstance(cell, list) and len(cell) == width), f"a cell of matrix row {i} is malformed")
    sites = snapshot.get("sites", [])
    kind = _items(_SNAPSHOT["sites"])
    need(isinstance(sites, list) and all(isinstance(s, kind) for s in sites), f"'sites' is not a list of {_name(kind)}s")
    return snapshot
