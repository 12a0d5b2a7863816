"""Watching a proxy list or a config file: when its content changes, ``pool.update`` applies it.

A daemon thread polls the files' modification time, size and content hash every ``interval``
seconds. A file that cannot be read or parsed keeps the old list and is reported as an
``exits_reload_failed`` event; nothing raises into the thread's caller, and nothing crashes the
thread. ``pool.close()`` stops it; so does the pool being garbage collected (the thread holds
only a weak reference)."""

from __future__ import annotations

import hashlib
import logging
import math
import os
import threading
import weakref
from typing import Any, Callable, List, Optional, Sequence, Tuple

from ._errors import InvalidInput

#: The default seconds between two looks at a watched file.
DEFAULT_INTERVAL = 2.0
#: The shortest interval taken: a smaller one would spin on the file system.
MIN_INTERVAL = 0.05

logger = logging.getLogger("exitpool")

Signature = Tuple[Optional[Tuple[int, int, str]], ...]


def check_interval(interval: Any) -> float:
    """``watch_interval`` as seconds, or InvalidInput naming the value."""
    if isinstance(interval, bool) or not isinstance(interval, (int, float)):
        raise InvalidInput(f"watch_interval {interval!r}: need a number of seconds")
    if not (math.isfinite(interval) and MIN_INTERVAL <= interval <= 86_400):
        raise InvalidInput(f"watch_interval {interval!r}: need seconds in {MIN_INTERVAL}..86400")
    return float(interval)


def signature(paths: Sequence[str]) -> Signature:
    """What a change of any file changes: (mtime, size, sha256) per file, None if unreadable."""
    out: List[Optional[Tuple[int, int, str]]] = []
    for path in paths:
        try:
            st = os.stat(path)
            with open(path, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
        except (OSError, ValueError):
            out.append(None)
            continue
        out.append((st.st_mtime_ns, st.st_size, digest))
    return tuple(out)


class Watcher:
    """One pool's watch over ``paths``; ``read()`` returns the exits they hold now."""

    def __init__(self, pool: Any, source: str, paths: List[str], read: Callable[[], list], interval: float) -> None:
        self._pool = weakref.ref(pool)
        self._source = source
        self._paths = paths
        self._read = read
        self._interval = interval
        self._stop = threading.Event()
        self._last = signature(paths)
        self._thread = threading.Thread(target=self._run, name=f"exitpool-watch {source}", daemon=True)

    def start(self) -> Watcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not threading.current_thread() and self._thread.is_alive():
            self._thread.join(timeout=self._interval + 5.0)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            if self._pool() is None:
                return
            try:
                self.check()
            except Exception:  # noqa: BLE001 - the watch must outlive any one bad look
                logger.exception("exitpool: watching %s failed; it carries on", self._source)

    def check(self) -> bool:
        """Applies the files if they changed since the last look; True if a new list applied."""
        now = signature(self._paths)
        if now == self._last:
            return False
        self._last = now
        pool = self._pool()
        if pool is None:
            return False
        try:
            exits = self._read()
            pool.update(exits)
        except Exception as e:  # noqa: BLE001 - a bad file keeps the old list, and says why
            pool._reload_failed(self._source, f"{type(e).__name__}: {e}")
            return False
        return True


def watch(pool: Any, source: str, paths: List[str], read: Callable[[], list], interval: float) -> Watcher:
    """Starts watching ``paths`` for ``pool``; ``pool.close()`` stops it."""
    w = Watcher(pool, source, paths, read, interval)
    pool._on_close(w.stop)
    return w.start()


class WatchedExits(list):  # type: ignore[type-arg]
    """The exits of a proxy-list file read with ``load_exits(path, watch=True)``: a list like any
    other, which a ``Pool`` made from it watches (and ``pool.update`` applies on change)."""

    def __init__(self, exits: list, path: str, interval: float) -> None:
        super().__init__(exits)
        self.path = path
        self.interval = interval

    def _exitpool_watch(self, pool: Any) -> Watcher:
        from ._exits import load_exits

        def read() -> list:
            exits = load_exits(self.path)
            if not exits:
                raise InvalidInput(f"{self.path} holds no exits")
            return exits

        return watch(pool, self.path, [self.path], read, self.interval)
