"""``Pool.from_config("exitpool.toml")``: a pool from a TOML file.

The file holds the keywords of ``Pool(...)`` at its top level, and the exits as a proxy-list
file (``exits_file``, relative to the TOML file) and/or ``[[exit]]`` tables. Every mistake
raises :class:`~exitpool.InvalidInput` as ``FILE:LINE: KEY: problem``, with credentials
masked. ``tomllib`` reports values but no positions, so the lines come from a small scan of the
text (``_KeyLines``), done only once the text is known to be valid TOML.
"""

from __future__ import annotations

import bisect
import datetime
import os
import re
import stat
import urllib.parse
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

from ._clients import _scrub
from ._core import Exit, _check_ring_size, _mask_raw
from ._errors import Error, InvalidInput
from ._exits import load_exits

try:
    import tomllib as _toml
except ImportError:  # Python < 3.11: the same parser, from PyPI
    try:
        import tomli as _toml  # type: ignore[no-redef,import-not-found,unused-ignore]
    except ImportError:
        _toml = None  # type: ignore[assignment,unused-ignore]

__all__ = ["from_config"]

Path = Tuple[Union[str, int], ...]

# The keywords of Pool(...) a file may set. `clock` is left to code: it only makes sense there.
_POOL_KEYS = (
    "strategy",
    "replicas",
    "session_ttl",
    "lease_ttl",
    "max_leases",
    "balance_factor",
    "warmup",
    "seed",
    "cooldown",
    "health",
    "calibrate",
    "store",
    "namespace",
)
_EXIT_SOURCES = ("exits_file", "exit")
_EXIT_KEYS = ("id", "proxy", "ip", "capacity", "tags")
_U64_MAX = 2**64 - 1
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
# A key found in an exitpool error message must stand alone, not inside a longer name.
_WORD = r"(?<![A-Za-z0-9_]){}(?![A-Za-z0-9_])"


class _ConfigError(Exception):
    """A problem at a key; turned into InvalidInput once the file and line are known."""

    def __init__(self, path: Path, message: str) -> None:
        super().__init__(message)
        self.path = path
        self.message = message


class _OverrideError(Exception):
    """A bad value given in code as a keyword of from_config, not written in the file."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key
        self.message = message


def from_config(cls: Callable[..., Any], path: Union[str, os.PathLike[str]], **overrides: Any) -> Any:
    """Build ``cls(exits, **options)`` from the TOML file at ``path``.

    ``overrides`` are keywords of ``Pool(...)`` given in code (``clock=ManualClock()`` in tests);
    they win over the file, and their mistakes are theirs: a keyword ``Pool`` does not take is a
    ``TypeError``, a bad value an :class:`InvalidInput` that names the keyword, not the file. A
    missing or unreadable file raises ``OSError`` as ``open`` does; everything wrong inside it
    (a proxy list that cannot be read included) raises :class:`InvalidInput` naming the key and
    its line.
    """
    fspath = os.fspath(path)
    name = fspath if isinstance(fspath, str) else os.fsdecode(fspath)
    try:
        with open(fspath, "rb") as f:
            raw = f.read()
    except UnicodeEncodeError as e:  # a lone surrogate the file system cannot take
        raise InvalidInput(f"path is not valid text: it holds a lone surrogate at position {e.start}") from None
    except ValueError as e:  # not an OSError: a NUL in the path ("embedded null byte")
        raise InvalidInput(f"{name!r}: not a usable path: {e}") from None
    try:
        return _build(cls, name, raw, overrides)
    except InvalidInput:
        raise
    except Error as e:  # another of ours: keep its class and attributes, name the file
        e.args = (_scrub(f"{name}: {e}", _raw_secrets(raw)),) + e.args[1:]
        raise


def _build(cls: Callable[..., Any], name: str, raw: bytes, overrides: Dict[str, Any]) -> Any:
    secrets = _raw_secrets(raw)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise InvalidInput(f"{name}:{line}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    doc = _parse_toml(name, text, secrets)
    secrets = sorted(set(secrets) | set(_doc_secrets(doc)), key=len, reverse=True)
    lines = _KeyLines.scan(text)

    def fail(path: Path, message: str) -> InvalidInput:
        where = f"{name}:{lines.line(path)}" if lines.line(path) else name
        key = f" {_dotted(path)}:" if path else ""
        return InvalidInput(_scrub(f"{where}:{key} {message}", secrets))

    try:
        options, exits = _read(doc, name)
        options.update(overrides)
        return _construct(cls, options, exits, doc, overrides)
    except _ConfigError as e:
        raise fail(e.path, e.message) from None
    except _OverrideError as e:  # a keyword given in code: the file is not to blame
        message = f"keyword argument {e.key} (given in code, not read from {name}): {e.message}"
        raise InvalidInput(_scrub(message, secrets + _override_secrets(overrides))) from None


def _parse_toml(name: str, text: str, secrets: List[str]) -> Dict[str, Any]:
    if _toml is None:
        raise ModuleNotFoundError("Pool.from_config needs tomli on Python < 3.11: pip install tomli")
    try:
        return _toml.loads(text)
    except RecursionError:
        raise InvalidInput(f"{name}: invalid TOML: arrays or tables nested too deeply") from None
    except ValueError as e:  # TOMLDecodeError, and the interpreter's limit on long integers
        message = str(e)
        m = re.search(r" \(at line (\d+), column (\d+)\)$", message)
        lineno = getattr(e, "lineno", None) or (int(m.group(1)) if m else None)
        if m:
            message = message[: m.start()]
        message = re.sub(r" \(at end of document\)$", "", message)
        if lineno is None and "end of document" in str(e):
            lineno = len(text.rstrip().splitlines()) or 1
        where = f"{name}:{lineno}" if lineno else name
        near = ""
        if lineno:
            src = text.splitlines()[lineno - 1] if lineno <= len(text.splitlines()) else ""
            k = re.match(r"\s*([A-Za-z0-9_.-]+)\s*=", src)
            near = f" (key {k.group(1)})" if k else ""
        raise InvalidInput(_scrub(f"{where}: invalid TOML{near}: {message}", secrets)) from None


def _read(doc: Dict[str, Any], name: str) -> Tuple[Dict[str, Any], List[Tuple[Path, Exit]]]:
    """Type-checks the document; returns Pool's keywords and the exits with where each came from."""
    options: Dict[str, Any] = {}
    for key, value in doc.items():
        path: Path = (key,)
        if key in _EXIT_SOURCES:
            continue
        if key not in _POOL_KEYS:
            known = ", ".join(_POOL_KEYS + _EXIT_SOURCES)
            raise _ConfigError(path, f"unknown key (the keys are {known})")
        options[key] = _check_option(key, value)
    exits: List[Tuple[Path, Exit]] = []
    if "exits_file" in doc:
        exits.extend(_read_exits_file(doc["exits_file"], name))
    if "exit" in doc:
        tables = doc["exit"]
        if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
            raise _ConfigError(("exit",), f"must be [[exit]] tables, got {_kind(tables)}")
        for i, table in enumerate(tables):
            exits.append((("exit", i), _read_exit(("exit", i), table)))
    if not exits:
        where: Path = ("exits_file",) if "exits_file" in doc else ()
        raise _ConfigError(where, "no exits: set exits_file or add [[exit]] tables")
    seen: Dict[str, Path] = {}
    for path, e in exits:
        if e.exit_id in seen:
            first = seen[e.exit_id]
            raise _ConfigError(path, f"duplicate exit id {e.exit_id!r} (also at {_dotted(first)})")
        seen[e.exit_id] = path
    return options, exits


def _check_option(key: str, value: Any) -> Any:
    path: Path = (key,)
    if key in ("strategy", "store", "namespace"):
        return _need(path, value, str, "a string")
    if key == "calibrate":
        return _need(path, value, bool, "true or false")
    if key in ("replicas", "max_leases", "seed"):
        n = _need(path, value, int, "a whole number")
        if key == "max_leases" and n < 1:
            raise _ConfigError(path, f"must be at least 1, got {n} (leave it out for no limit)")
        if key == "seed" and not 0 <= n <= _U64_MAX:
            raise _ConfigError(path, f"must be in 0..={_U64_MAX}, got {n}")
        return n
    if key in ("session_ttl", "lease_ttl", "cooldown", "balance_factor"):
        return _number(path, value)
    if key == "warmup":
        if isinstance(value, dict):
            return {k: _number(path + (k,), v) for k, v in value.items()}
        if isinstance(value, bool):
            return value
        return _number(path, value, "true, false, a ramp in seconds or a [warmup] table")
    if key == "health":
        if not isinstance(value, dict):
            raise _ConfigError(path, f"must be a [health] table, got {_kind(value)}")
        return {k: _number(path + (k,), v) for k, v in value.items()}
    raise AssertionError(key)  # pragma: no cover: _POOL_KEYS and this function agree


def _read_exits_file(value: Any, name: str) -> List[Tuple[Path, Exit]]:
    """The exits of the proxy list the file names. Every way the path can fail at the OS (a
    NUL, a directory, a dangling or looping link, no permission, a name too long, bytes that
    are not UTF-8) is an InvalidInput at this key, never an OSError or a bare ValueError."""
    path: Path = ("exits_file",)
    rel = _need(path, value, str, "a path (relative to this file)")
    if "\0" in rel:  # the OS takes no NUL in a path: expanduser and open raise ValueError
        raise _ConfigError(path, f"{_show(rel)} is not a usable path: it contains a NUL character")
    try:
        full = os.path.join(os.path.dirname(os.path.abspath(name)), os.path.expanduser(rel))
    except (OSError, ValueError) as e:  # the working directory gone, a user name expanduser refuses
        raise _ConfigError(path, f"{_show(rel)} cannot be resolved: {_os_reason(e)}") from None
    try:
        st = os.stat(full)
    except FileNotFoundError:
        raise _ConfigError(path, f"{_show(rel)} does not exist (read as {full!r})") from None
    except (OSError, ValueError) as e:  # permission denied, a name too long, a link loop, ...
        raise _ConfigError(path, f"{_show(rel)} cannot be opened: {_os_reason(e)} (read as {full!r})") from None
    # Only a regular file: a FIFO or a device would block or never end.
    if not stat.S_ISREG(st.st_mode):
        raise _ConfigError(path, f"{_show(rel)} is not a file (read as {full!r})")
    try:
        exits = load_exits(full)
    except InvalidInput as e:
        raise _ConfigError(path, str(e)) from None
    except (OSError, ValueError) as e:
        raise _ConfigError(path, f"cannot read {full!r}: {_os_reason(e)}") from None
    if not exits:
        raise _ConfigError(path, f"{_show(rel)} holds no exits")
    return [(path, e) for e in exits]


def _os_reason(e: BaseException) -> str:
    return (e.strerror if isinstance(e, OSError) else None) or str(e)


def _read_exit(path: Path, table: Dict[str, Any]) -> Exit:
    for key in table:
        if key not in _EXIT_KEYS:
            raise _ConfigError(path + (key,), f"unknown key (an [[exit]] has {', '.join(_EXIT_KEYS)})")
    if "proxy" not in table:
        raise _ConfigError(path, "needs a proxy (a URL: http, https, socks5 or socks5h)")
    proxy = _need(path + ("proxy",), table["proxy"], str, "a proxy URL string")
    ip = _need(path + ("ip",), table["ip"], str, "an IP address string") if "ip" in table else None
    capacity = _need(path + ("capacity",), table["capacity"], int, "a whole number") if "capacity" in table else 1
    tags = table.get("tags", {})
    if not isinstance(tags, dict):
        raise _ConfigError(path + ("tags",), f"must be a table of strings, got {_kind(tags)}")
    for k, v in tags.items():
        _need(path + ("tags", k), v, str, "a string")
    # One field at a time, so that the error names the field that is wrong.
    parsed = _exit_or_fail(path + ("proxy",), lambda: Exit("_", proxy))
    if "id" in table:
        exit_id = _need(path + ("id",), table["id"], str, "a string")
        _exit_or_fail(path + ("id",), lambda: Exit(exit_id, proxy))
    else:
        # As in proxy lists: `user@host:port`, which survives a password change. An id made
        # from the proxy that Exit refuses is the proxy's fault: the table has no id to blame.
        user = parsed.username
        exit_id = f"{user}@{parsed.host}:{parsed.port}" if user else f"{parsed.host}:{parsed.port}"
        _exit_or_fail(
            path + ("proxy",), lambda: Exit(exit_id, proxy), why=" (the id an [[exit]] without `id` gets: user@host:port of its proxy)"
        )
    _exit_or_fail(path + ("ip",), lambda: Exit(exit_id, proxy, ip=ip))
    _exit_or_fail(path + ("capacity",), lambda: Exit(exit_id, proxy, capacity=capacity))
    _exit_or_fail(path + ("tags",), lambda: Exit(exit_id, proxy, tags=tags))
    return _exit_or_fail(path, lambda: Exit(exit_id, proxy, ip=ip, capacity=capacity, tags=tags))


def _exit_or_fail(path: Path, make: Callable[[], Exit], why: str = "") -> Exit:
    try:
        return make()
    except (Error, ValueError, TypeError, OverflowError) as e:
        raise _ConfigError(path, _strip_key(path[-1:], str(e)) + why) from None


def _construct(
    cls: Callable[..., Any], options: Dict[str, Any], exits: List[Tuple[Path, Exit]], doc: Dict[str, Any], overrides: Dict[str, Any]
) -> Any:
    try:
        return cls([e for _, e in exits], **options)
    except (ValueError, TypeError, OverflowError) as e:  # InvalidInput is a ValueError
        error = e
    if isinstance(error, TypeError):
        path, message = _blame(options, doc, str(error), overrides)
    else:
        path, message = _culprit(options, [e for _, e in exits], str(error))
    from_code = bool(path) and path[0] in overrides
    # The file's values are type-checked before Pool sees them: a TypeError (an unknown or
    # repeated keyword, a clock that is no ManualClock) or an OverflowError is about a keyword
    # given in code, and stays what Pool(...) raises in code.
    if not isinstance(error, ValueError) and (from_code or (not path and overrides)):
        if not path:
            error.args = (f"{error} (in a keyword argument given in code: {', '.join(overrides)})",) + error.args[1:]
        raise error
    if from_code:
        raise _OverrideError(_dotted(path), message)
    raise _ConfigError(path, message)


# One exit for trying settings one at a time: a ring of 160 points, no network.
_PROBE_EXIT = Exit("probe", "http://127.0.0.1:9")
# Settings that only a pool with its store can judge: trying them would connect to it.
_STORE_KEYS = ("store", "namespace")


def _culprit(options: Dict[str, Any], exits: List[Exit], message: str) -> Tuple[Path, str]:
    """The key a refusal of Pool(...) is about, found by structure: each setting is tried
    alone on a one-exit pool (a table's settings one by one, then the table whole), then the
    ring's size with these exits; the first that is refused is the culprit, with its own
    message. Only the store's settings, which need the store, fall back to the message's words."""
    from ._core import Pool  # the plain Pool: a subclass's constructor may do more than judge

    def refused(**kwargs: Any) -> Optional[str]:
        try:
            Pool([_PROBE_EXIT], **kwargs)
        except (ValueError, OverflowError) as e:
            return str(e)
        return None

    for key, value in options.items():
        if key in _STORE_KEYS:
            continue
        if isinstance(value, dict):
            for leaf, v in value.items():
                why = refused(**{key: {leaf: v}})
                if why is not None:
                    return (key, leaf), _strip_key((key, leaf), why)
        why = refused(**{key: value})
        if why is not None:
            return (key,), _strip_key((key,), why)
    try:
        _check_ring_size(exits, options.get("replicas"))
    except (ValueError, OverflowError) as e:
        return (("replicas",) if "replicas" in options else ()), str(e)
    store_options = {k: v for k, v in options.items() if k in _STORE_KEYS}
    return _blame(store_options, store_options, message, {})


def _blame(options: Dict[str, Any], doc: Dict[str, Any], message: str, overrides: Dict[str, Any]) -> Tuple[Path, str]:
    """The key a message from Pool(...) is about: Pool names the setting first ("health window
    70 must be ..."), so the earliest key that the message names is the culprit: a key of the
    file, or a keyword given in code (overrides win, so their values are the ones Pool saw).
    Tables (health, warmup) are the fallback when none of their settings is named."""
    leaves: List[Path] = []
    tables: List[Path] = []
    for key in set(options) | set(overrides):
        value = overrides[key] if key in overrides else doc.get(key)
        if key not in overrides and key not in doc:
            continue
        if isinstance(value, dict):
            tables.append((key,))
            leaves.extend((key, k) for k in value if isinstance(k, str))
        else:
            leaves.append((key,))
    for group in (leaves, tables):
        hits = []
        for path in group:
            m = re.search(_WORD.format(re.escape(str(path[-1]))), message)
            if m:
                hits.append((m.start(), -len(path), str(path), path))
        if hits:
            path = min(hits)[3]
            return path, _strip_key(path, message)
    return (), message


def _strip_key(path: Path, message: str) -> str:
    """'health window must be ...' at key health.window reads 'must be ...'."""
    for prefix in (" ".join(map(str, path)) + " ", _dotted(path) + " "):
        if message.startswith(prefix):
            return message[len(prefix) :]
    return message


def _need(path: Path, value: Any, kind: type, what: str) -> Any:
    if isinstance(value, kind) and not (kind is int and isinstance(value, bool)):
        return value
    raise _ConfigError(path, f"must be {what}, got {_kind(value)}")


def _number(path: Path, value: Any, what: str = "a number") -> Union[int, float]:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    raise _ConfigError(path, f"must be {what}, got {_kind(value)}")


def _kind(value: Any) -> str:
    """A value as an error may show it: numbers and booleans as written, strings masked."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return f"{value!r}"
    if isinstance(value, str):
        return f"the string {_show(value)}"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, (datetime.date, datetime.time)):
        return "a date or time"
    return type(value).__name__


def _show(s: str) -> str:
    """A string as an error may show it: a password masked as repr(Exit) masks it."""
    s = _mask_raw(s)
    return repr(s if len(s) <= 80 else s[:77] + "...")


def _dotted(path: Path) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            bare = re.fullmatch(r"[A-Za-z0-9_-]+", part)
            shown = part if bare else _show(part)
            out += f".{shown}" if out else shown
    return out or "(top level)"


# --- credentials: whatever goes into a message is scrubbed of every password in the input ---


def _passwords(s: str) -> List[str]:
    """The passwords a proxy string may carry, in every shape Exit and proxy lists accept."""
    found = []
    m = _SCHEME.match(s)
    rest = s[m.end() :] if m else s
    if "@" in rest:
        userinfo = rest[: rest.rfind("@")]
        if ":" in userinfo:
            found.append(userinfo.split(":", 1)[1])
    elif m and ":" in rest:
        found.append(rest.split(":", 1)[1])
    parts = rest.split(":", 3)
    if len(parts) == 4:
        found.append(parts[3])
    found += [urllib.parse.unquote(p) for p in found]
    # A message may show a password escaped (Rust's {:?} writes "\0" and "\u{56874}", repr
    # writes "\x00"), so its printable runs are scrubbed too.
    for p in list(found):
        found += "".join(c if c.isprintable() and c not in "\"'\\" else "\0" for c in p).split("\0")
    # Shorter strings would scrub ordinary words; Exit's own masking covers them.
    return [p for p in found if len(p) >= 3]


def _raw_secrets(raw: bytes) -> List[str]:
    text = raw.decode("utf-8", "replace")
    out: List[str] = []
    for token in re.split(r"[\s\"']+", text):
        out += _passwords(token)
    return out


def _doc_secrets(doc: Dict[str, Any]) -> List[str]:
    out: List[str] = []
    stack: List[Any] = [doc]
    while stack:  # no recursion: nesting depth is the input's choice
        item = stack.pop()
        if isinstance(item, dict):
            for k, v in item.items():
                out += _passwords(k)
                stack.append(v)
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str):
            out += _passwords(item)
            for token in item.split():
                out += _passwords(token)
    return out


def _override_secrets(overrides: Dict[str, Any]) -> List[str]:
    return _doc_secrets({k: v for k, v in overrides.items() if isinstance(v, (str, dict, list))})


# --- where keys are written ---


class _KeyLines:
    """The line of every key, table and array element of a valid TOML text."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.found: Dict[Path, int] = {}
        self.newlines = [m.start() for m in re.finditer("\n", text)]

    @classmethod
    def scan(cls, text: str) -> _KeyLines:
        lines = cls(text)
        try:
            lines._document()
        except Exception:  # a text tomllib accepted and this scan does not: keep what it found
            pass
        return lines

    def line(self, path: Path) -> Optional[int]:
        """The line of ``path``, else of its nearest enclosing key that has one."""
        for n in range(len(path), 0, -1):
            if path[:n] in self.found:
                return self.found[path[:n]]
        return None

    def _here(self) -> int:
        return bisect.bisect_left(self.newlines, self.pos) + 1

    def _mark(self, path: Path) -> None:
        self.found.setdefault(path, self._here())

    def _peek(self, n: int = 1) -> str:
        return self.text[self.pos : self.pos + n]

    def _blank(self, newlines: bool) -> None:
        while self.pos < len(self.text):
            c = self.text[self.pos]
            if c in " \t" or (newlines and c in "\r\n"):
                self.pos += 1
            elif c == "#" and newlines:
                end = self.text.find("\n", self.pos)
                self.pos = len(self.text) if end < 0 else end
            else:
                return

    def _document(self) -> None:
        table: Path = ()
        arrays: Dict[Path, int] = {}  # [[x]] seen so far, by resolved path
        while True:
            self._blank(newlines=True)
            if self.pos >= len(self.text):
                return
            if self._peek() == "[":
                array = self._peek(2) == "[["
                self.pos += 2 if array else 1
                self._blank(newlines=False)
                parts = self._key()
                resolved: Path = ()
                for part in parts[:-1] if array else parts:
                    resolved += (part,)
                    # `[exit.tags]` defines `exit` too, implicitly, here if nowhere before.
                    self._mark(resolved)
                    if resolved in arrays:
                        resolved += (arrays[resolved] - 1,)
                if array:
                    resolved += (parts[-1],)
                    self._mark(resolved)
                    index = arrays.get(resolved, 0)
                    arrays[resolved] = index + 1
                    resolved += (index,)
                self._mark(resolved)
                table = resolved
                end = self.text.find("\n", self.pos)
                self.pos = len(self.text) if end < 0 else end
                continue
            start = self.pos
            parts = self._key()
            self._assignment(table + parts)
            if self.pos == start:  # never loop in place on a text this scan misreads
                return

    def _assignment(self, path: Path) -> None:
        for n in range(1, len(path) + 1):
            self._mark(path[:n])
        self._blank(newlines=False)
        if self._peek() == "=":
            self.pos += 1
        self._blank(newlines=False)
        self._value(path)

    def _key(self) -> Path:
        parts: List[str] = []
        while True:
            self._blank(newlines=False)
            c = self._peek()
            if c == '"' or c == "'":
                start = self.pos
                self._string()
                quoted = self.text[start : self.pos]
                parts.append(_toml.loads(f"k = {quoted}")["k"] if _toml else quoted[1:-1])
            else:
                m = re.compile(r"[A-Za-z0-9_-]+").match(self.text, self.pos)
                if not m:
                    return tuple(parts)
                parts.append(m.group())
                self.pos = m.end()
            self._blank(newlines=False)
            if self._peek() != ".":
                return tuple(parts)
            self.pos += 1

    def _string(self) -> None:
        q = self._peek()
        if self._peek(3) == q * 3:
            close = self.text.index(q * 3, self.pos + 3) if q == "'" else self._basic_end(self.pos + 3, q * 3)
            end = close
            # The closing quotes may follow up to two quotes of content: """a""""" is 'a""'.
            while end < len(self.text) and self.text[end] == q and end - close < 5:
                end += 1
            self.pos = end
        elif q == "'":
            self.pos = self.text.index("'", self.pos + 1) + 1
        else:
            self.pos = self._basic_end(self.pos + 1, '"') + 1

    def _basic_end(self, i: int, close: str) -> int:
        while True:
            c = self.text[i]
            if c == "\\":
                i += 2
            elif self.text.startswith(close, i):
                return i
            else:
                i += 1

    def _value(self, path: Path) -> None:
        # Containers are walked with an explicit stack: nesting depth is the input's choice.
        stack: List[Tuple[str, Path, int]] = []
        self._open(path, stack)
        while stack:
            kind, at, index = stack[-1]
            self._blank(newlines=True)
            c = self._peek()
            if c == "" or c in "]}":
                self.pos += 1
                stack.pop()
                self._blank(newlines=False)
                continue
            if c == ",":
                self.pos += 1
                if kind == "array":
                    stack[-1] = (kind, at, index + 1)
                continue
            if kind == "array":
                self._mark(at + (index,))
                self._open(at + (index,), stack)
            else:
                parts = self._key()
                for n in range(1, len(parts) + 1):
                    self._mark(at + parts[:n])
                self._blank(newlines=False)
                if self._peek() == "=":
                    self.pos += 1
                self._blank(newlines=False)
                self._open(at + parts, stack)

    def _open(self, path: Path, stack: List[Tuple[str, Path, int]]) -> None:
        """Consume a scalar, or open a container and push it."""
        c = self._peek()
        if c == "[":
            self.pos += 1
            stack.append(("array", path, 0))
        elif c == "{":
            self.pos += 1
            stack.append(("table", path, 0))
        elif c in "\"'":
            self._string()
        else:
            m = re.compile(r"[^,\]}\n#]*").match(self.text, self.pos)
            self.pos = m.end() if m and m.end() > self.pos else self.pos + 1
