"""exitpool's exceptions. Every one derives from :class:`Error`; bad input is also a
``ValueError`` and an unknown exit a ``LookupError``, so existing ``except`` clauses keep working.
No message ever contains a proxy password."""

from __future__ import annotations

__all__ = [
    "Cooling",
    "Error",
    "InvalidInput",
    "NoExitAvailable",
    "SessionExitLost",
    "UnknownExit",
    "WarmingUp",
]


class Error(Exception):
    """Base class of every exception exitpool raises."""


class InvalidInput(Error, ValueError):
    """Input that can never be valid (an unparsable proxy, a negative capacity, a duplicate id).
    The message names the value, with credentials masked; nothing was changed.

    Where it is, as data (like pydantic's ``loc``): ``loc`` is the key path of the setting
    (``("health", "window")``, ``("exit", 1, "proxy")``), ``file`` and ``line`` the config file
    and line it was read from; each is None when unknown or not about a file."""

    loc: tuple[str | int, ...] | None = None
    file: str | None = None
    line: int | None = None


class UnknownExit(Error, LookupError):
    """An exit id that the pool or ring does not hold."""


class NoExitAvailable(Error):
    """No exit can serve: the ring is empty, or every exit is out of service or full."""


class SessionExitLost(Error):
    """The key's live session is bound to an exit that can no longer serve it (removed,
    quarantined or dead). The key is never moved silently: end the session with
    ``pool.end_session(key)`` (and, say, log the account in again); the next lease binds afresh.
    When the exit is a gateway slot whose token rotated, the provider's session is over and
    the pool has ended the key's session already: the next lease binds afresh, on the same
    slot with its new token."""

    def __init__(self, message: str, key: str | None = None, exit_id: str | None = None) -> None:
        super().__init__(message)
        self.key = key
        self.exit_id = exit_id


class _RetryLater(Error):
    def __init__(self, message: str, retry_after: float = 0.0) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class WarmingUp(_RetryLater):
    """A new (key, exit) pairing is still in its warm-up ramp; ``retry_after`` seconds from now
    it may lease again."""


class Cooling(_RetryLater):
    """Slow down for this site; retry after ``retry_after`` seconds. Raised when every exit
    used the site within the ``lru`` cooldown, was rate-limited by it (a 429), or (with
    ``pacing=``) has no request budget left for it within the lease's ``timeout``."""
