"""The health states an exit can be in, and which of them take it out of service.

The core names the states and decides which ones eject (``src/health/mod.rs``); this module reads
both from it, so the logger, the metrics, the Scrapy middleware, the report and the demo use
the core's own spelling and cannot drift from it.
"""

from __future__ import annotations

from typing import Any, Tuple

from ._core import _EJECTED, _IN_SERVICE, _STATES

#: Health states, best first: the order the core reports them in.
STATES: Tuple[str, ...] = _STATES
HEALTHY, DEGRADED, PROBING, QUARANTINED, DEAD = STATES


def _in_service(state: Any) -> bool:
    """Whether ``state`` is one of an exit in full service: neither out nor on trial."""
    return state in _IN_SERVICE


def _ejected(state: Any) -> bool:
    """Whether ``state`` (a state name, or anything a snapshot or event holds) is one health
    has taken the exit out of service in."""
    return state in _EJECTED
