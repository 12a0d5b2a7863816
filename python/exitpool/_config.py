"""``Pool.from_config("exitpool.toml")``: a pool from a TOML file.

The file holds the keywords of ``Pool(...)`` at its top level, and the exits as a proxy-list
file (``exits_file``, relative to the TOML file), ``[[exit]]`` tables and/or ``[[gateway]]``
tables (the keywords of :class:`~exitpool.Gateway`). The core parses and
type-checks it (``_core._ConfigFile``, TOML read with serde and spans); every mistake raises
:class:`~exitpool.InvalidInput` as ``FILE:LINE: KEY: problem``, with credentials masked, and
with ``.loc``, ``.file`` and ``.line`` as data. What stays here must be Python: reading the
proxy list with :func:`load_exits`, and calling ``cls(...)``.
"""

from __future__ import annotations

import os
import stat
from typing import Any, Callable, List, Union

from ._core import Exit, Gateway, _ConfigFile, _mask_raw
from ._errors import InvalidInput
from ._exits import load_exits

__all__ = ["from_config"]


def from_config(
    cls: Callable[..., Any], path: Union[str, os.PathLike[str]], *, watch: bool = False, watch_interval: Any = None, **overrides: Any
) -> Any:
    """Build ``cls(exits, **options)`` from the TOML file at ``path``.

    ``overrides`` are keywords of ``Pool(...)`` given in code (``clock=ManualClock()`` in tests);
    they win over the file, and their mistakes are theirs: a keyword ``Pool`` does not take is a
    ``TypeError``, a bad value an :class:`InvalidInput` that names the keyword, not the file. A
    missing or unreadable file raises ``OSError`` as ``open`` does; everything wrong inside it
    (a proxy list that cannot be read included) raises :class:`InvalidInput` naming the key and
    its line.

    With ``watch=True`` the pool polls the TOML file and the proxy list it names every
    ``watch_interval`` seconds (default 2) and applies a changed list of exits with
    ``pool.update`` (the other settings take a restart); a file that fails to parse keeps the old
    list and is an ``exits_reload_failed`` event. ``pool.close()`` stops the watch.
    """
    interval = None
    if watch:
        from ._watch import DEFAULT_INTERVAL, check_interval

        interval = check_interval(DEFAULT_INTERVAL if watch_interval is None else watch_interval)
    elif watch_interval is not None:
        raise InvalidInput("from_config: watch_interval is for watch=True")
    name, file, exits = _read(path)
    options = file.options()
    if "state" in options:  # relative to the file, as exits_file is
        options["state"] = os.path.join(os.path.dirname(os.path.abspath(name)), os.path.expanduser(options["state"]))
    options.update(overrides)
    try:
        pool = cls(exits, **options)
    except InvalidInput as e:
        raise file.blame(e, list(overrides)) from None
    except TypeError as e:
        # The file's values are typed by the core before Pool sees them: a TypeError (an unknown
        # keyword, a clock that is no ManualClock) is about a keyword given in code.
        if overrides:
            e.args = (f"{e} (in a keyword argument given in code: {', '.join(overrides)})",) + e.args[1:]
        raise
    if interval is not None:
        from ._watch import watch as start_watch

        paths = [os.path.abspath(name)]
        if file.exits_file is not None:
            paths.append(os.path.join(os.path.dirname(paths[0]), os.path.expanduser(file.exits_file)))
        start_watch(pool, name, paths, lambda: _read(paths[0])[2], interval)
    return pool


def _read(path: Union[str, os.PathLike[str]]) -> tuple[str, _ConfigFile, List[Union[Exit, Gateway]]]:
    """The file's name as messages show it, the parsed file, and its exits."""
    fspath = os.fspath(path)
    name = fspath if isinstance(fspath, str) else os.fsdecode(fspath)
    try:
        with open(fspath, "rb") as f:
            raw = f.read()
    except UnicodeEncodeError as e:  # a lone surrogate the file system cannot take
        raise InvalidInput(f"path is not valid text: it holds a lone surrogate at position {e.start}") from None
    except ValueError as e:  # not an OSError: a NUL in the path ("embedded null byte")
        raise InvalidInput(f"{name!r}: not a usable path: {e}") from None
    file = _ConfigFile(name, raw)
    listed: List[Exit] = []
    if file.exits_file is not None:
        try:
            listed = _read_exits_file(file.exits_file, name)
        except _ListError as e:
            raise file.error(["exits_file"], str(e)) from None
    exits: List[Union[Exit, Gateway]] = file.exits(listed)
    return name, file, exits


class _ListError(Exception):
    """The proxy list cannot be read: an InvalidInput at exits_file once raised."""


def _show(s: str) -> str:
    """A string as an error may show it: a password masked as repr(Exit) masks it."""
    s = _mask_raw(s)
    return repr(s if len(s) <= 80 else s[:77] + "...")


def _read_exits_file(rel: str, name: str) -> List[Exit]:
    """The exits of the proxy list the file names. Every way the path can fail at the OS (a
    NUL, a directory, a dangling or looping link, no permission, a name too long, bytes that
    are not UTF-8) is an InvalidInput at this key, never an OSError or a bare ValueError."""
    if "\0" in rel:  # the OS takes no NUL in a path: expanduser and open raise ValueError
        raise _ListError(f"{_show(rel)} is not a usable path: it contains a NUL character")
    try:
        full = os.path.join(os.path.dirname(os.path.abspath(name)), os.path.expanduser(rel))
    except (OSError, ValueError) as e:  # the working directory gone, a user name expanduser refuses
        raise _ListError(f"{_show(rel)} cannot be resolved: {_os_reason(e)}") from None
    # The path as messages show it: the name is the user's text, masked as _show masks it (a
    # proxy line pasted as exits_file keeps its password); the directory is the TOML file's.
    shown = os.path.join(os.path.dirname(os.path.abspath(name)), _mask_raw(os.path.expanduser(rel)))
    try:
        st = os.stat(full)
    except FileNotFoundError:
        raise _ListError(f"{_show(rel)} does not exist (read as {shown!r})") from None
    except (OSError, ValueError) as e:  # permission denied, a name too long, a link loop, ...
        raise _ListError(f"{_show(rel)} cannot be opened: {_os_reason(e)} (read as {shown!r})") from None
    # Only a regular file: a FIFO or a device would block or never end.
    if not stat.S_ISREG(st.st_mode):
        raise _ListError(f"{_show(rel)} is not a file (read as {shown!r})")
    try:
        exits = load_exits(full)
    except InvalidInput as e:
        raise _ListError(str(e).replace(full, shown)) from None
    except (OSError, ValueError) as e:
        raise _ListError(f"cannot read {shown!r}: {_os_reason(e)}".replace(full, shown)) from None
    if not exits:
        raise _ListError(f"{_show(rel)} holds no exits")
    return exits


def _os_reason(e: BaseException) -> str:
    return (e.strerror if isinstance(e, OSError) else None) or str(e)
