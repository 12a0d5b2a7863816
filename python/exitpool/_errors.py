"""exitpool's exceptions. Every one derives from :class:`Error`; bad input is also a
``ValueError`` and an unknown exit a ``LookupError``, so existing ``except`` clauses keep working.
No message ever contains a proxy password."""

from __future__ import annotations

__all__ = ["Error", "InvalidInput", "UnknownExit", "NoExitAvailable"]


class Error(Exception):
    """Base class of every exception exitpool raises."""


class InvalidInput(Error, ValueError):
    """Input that can never be valid (an unparsable proxy, a negative capacity, a duplicate id).
    The message names the value, with credentials masked; nothing was changed."""


class UnknownExit(Error, LookupError):
    """An exit id that the pool or ring does not hold."""


class NoExitAvailable(Error):
    """No exit can serve: the ring is empty, or every exit is out of service or full."""
