"""exitpool: a native, thread-safe pool of proxy exits for scrapers and multi-account fleets.

>>> from exitpool import Exit, Pool
>>> pool = Pool([Exit("sess-a1b2", "http://user:pw@gw.example:8000", capacity=3),
...              Exit("sess-c3d4", "http://user:pw@gw.example:8001")])
>>> with pool.lease("account-3f9", site="shop.example") as exit:
...     exit.exit_id in ("sess-a1b2", "sess-c3d4")
True
"""

import logging as _logging

from . import _fork  # noqa: F401  (a multiprocessing child's last releases reach the store)
from ._core import DEFAULT_REPLICAS, Exit, Gateway, Lease, ManualClock, Pool, Ring, __version__
from ._errors import (
    Cooling,
    Error,
    InvalidInput,
    NoExitAvailable,
    SessionExitLost,
    UnknownExit,
    WarmingUp,
)
from ._exits import load_exits

# Library etiquette: silent unless the application configures logging.
_logging.getLogger("exitpool").addHandler(_logging.NullHandler())

__all__ = [
    "DEFAULT_REPLICAS",
    "Cooling",
    "Error",
    "Exit",
    "Gateway",
    "InvalidInput",
    "Lease",
    "ManualClock",
    "NoExitAvailable",
    "Pool",
    "Ring",
    "SessionExitLost",
    "UnknownExit",
    "WarmingUp",
    "__version__",
    "load_exits",
]
