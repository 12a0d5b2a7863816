"""exitpool: a native, thread-safe pool of proxy exits for scrapers and multi-account fleets.

>>> from exitpool import Exit, Ring
>>> ring = Ring([Exit("sess-a1b2", "http://user:pw@gw.example:8000", capacity=3),
...              Exit("sess-c3d4", "http://user:pw@gw.example:8001")])
>>> ring.assign("account-3f9").exit_id in ("sess-a1b2", "sess-c3d4")
True
"""

from ._core import DEFAULT_REPLICAS, Exit, Ring, __version__
from ._errors import Error, InvalidInput, NoExitAvailable, UnknownExit
from ._exits import load_exits

__all__ = [
    "DEFAULT_REPLICAS",
    "Error",
    "Exit",
    "InvalidInput",
    "NoExitAvailable",
    "Ring",
    "UnknownExit",
    "__version__",
    "load_exits",
]
