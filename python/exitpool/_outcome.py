"""Classifying the exception that ended a lease block, for the pool's health.

Only modules the program has already imported are looked at, so classifying never imports
requests, httpx or aiohttp on its own."""

from __future__ import annotations

import asyncio
import socket
import sys
from typing import Tuple, Type

# (module, attribute, class) checked in order: timeouts first, because several libraries make
# their connect timeouts subclasses of their connection errors.
_TIMEOUTS = (
    ("requests.exceptions", "Timeout"),
    ("httpx", "TimeoutException"),
    ("aiohttp", "ServerTimeoutError"),
    ("urllib3.exceptions", "TimeoutError"),
)
_CONNECT = (
    ("requests.exceptions", "ConnectionError"),
    ("requests.exceptions", "ProxyError"),
    ("httpx", "ProxyError"),
    ("httpx", "NetworkError"),
    ("httpx", "RemoteProtocolError"),
    ("aiohttp", "ClientProxyConnectionError"),
    ("aiohttp", "ClientConnectionError"),
    ("aiohttp", "ClientHttpProxyError"),
    ("urllib3.exceptions", "ProxyError"),
    ("urllib3.exceptions", "NewConnectionError"),
    ("urllib3.exceptions", "ProtocolError"),
)


def _loaded(names: Tuple[Tuple[str, str], ...]) -> Tuple[Type[BaseException], ...]:
    found = []
    for module, attr in names:
        mod = sys.modules.get(module)
        cls = getattr(mod, attr, None) if mod is not None else None
        if isinstance(cls, type) and issubclass(cls, BaseException):
            found.append(cls)
    return tuple(found)


def _classify(exc: BaseException) -> str:
    """'timeout', 'connect' or 'other' for an exception raised inside a lease block."""
    if isinstance(exc, (TimeoutError, socket.timeout, asyncio.TimeoutError) + _loaded(_TIMEOUTS)):
        return "timeout"
    if isinstance(exc, (ConnectionError, socket.gaierror) + _loaded(_CONNECT)):
        return "connect"
    return "other"
