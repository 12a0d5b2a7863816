"""The health states an exit can be in, and which of them take it out of service.

The core names the states (``src/health/mod.rs``); this is the one Python place that spells them,
so the logger, the metrics, the Scrapy middleware, the report and the demo cannot drift apart.
"""

from __future__ import annotations

from typing import Any, Tuple

HEALTHY = "healthy"
DEGRADED = "degraded"
PROBING = "probing"
QUARANTINED = "quarantined"
DEAD = "dead"

#: Health states, best first: the order the core reports them in.
STATES: Tuple[str, ...] = (HEALTHY, DEGRADED, PROBING, QUARANTINED, DEAD)

#: The states in which health has ejected an exit (taken it out of rotation).
_EJECTED = frozenset({QUARANTINED, DEAD})


def _ejected(state: Any) -> bool:
    """Whether ``state`` (a state name, or anything a snapshot or event holds) is one health
    has taken the exit out of service in."""
    return state in _EJECTED
