"""Reading proxy lists from files or lines."""

from __future__ import annotations

import os
from typing import Any, Iterable, List, Union

from ._core import Exit, _parse_exits
from ._errors import InvalidInput

__all__ = ["load_exits"]


def load_exits(
    path_or_lines: Union[str, os.PathLike[str], Iterable[str]], *, watch: bool = False, watch_interval: Any = None
) -> List[Exit]:
    """Read exits from a proxy-list file (a path) or from an iterable of lines.

    Each line is ``[ID] PROXY [key=value ...]``; PROXY is a URL (``http``, ``https``,
    ``socks5``, ``socks5h``), ``host:port``, ``host:port:user:pass`` or ``user:pass@host:port``.
    Fields ``id=``, ``ip=`` and ``capacity=`` set those; other fields become tags. ``#`` starts a
    comment. Without an id the exit id is ``user@host:port`` (or ``host:port``), which survives
    a password change. Raises :class:`InvalidInput` naming the line, password masked.

    With ``watch=True`` (a path only) the list is a ``WatchedExits``: a ``Pool`` made from it
    polls the file every ``watch_interval`` seconds (default 2) and applies a changed list with
    ``pool.update``; a file that cannot be read keeps the old list (an ``exits_reload_failed``
    event). ``pool.close()`` stops the watch.
    """
    if watch:
        from ._watch import DEFAULT_INTERVAL, WatchedExits, check_interval

        if not isinstance(path_or_lines, (str, os.PathLike)):
            raise InvalidInput("load_exits(watch=True) needs a file path to watch, not lines")
        interval = check_interval(DEFAULT_INTERVAL if watch_interval is None else watch_interval)
        path = os.path.abspath(os.fspath(path_or_lines))
        return WatchedExits(load_exits(path), path, interval)
    if watch_interval is not None:
        raise InvalidInput("load_exits: watch_interval is for watch=True")
    if isinstance(path_or_lines, (str, os.PathLike)):
        path = os.fspath(path_or_lines)
        try:
            with open(path, encoding="utf-8-sig") as f:
                lines = f.read().splitlines()
        except UnicodeDecodeError as e:
            raise InvalidInput(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
        except UnicodeEncodeError as e:  # a lone surrogate the file system cannot take
            raise InvalidInput(f"path is not valid text: it holds a lone surrogate at position {e.start}") from None
        try:
            return _parse_exits(lines)
        except InvalidInput as e:
            raise InvalidInput(f"{path}: {e}") from None
    if isinstance(path_or_lines, bytes):
        raise TypeError("load_exits takes a path or an iterable of str lines, not bytes")
    lines = []
    for line in path_or_lines:
        if not isinstance(line, str):
            raise TypeError(f"load_exits lines must be str, got {type(line).__name__}")
        lines.extend(line.splitlines() or [""])
    return _parse_exits(lines)
