"""Classifying the exception that ended a request, for the pool's health: the one table.

The lease (an exception leaving a ``with pool.lease()`` block), the Scrapy middleware (a
download error) and the probes all classify with :func:`_classify`. Only modules the program
has already imported are looked at, so classifying never imports requests, httpx, aiohttp,
curl_cffi, Playwright or Twisted on its own."""

from __future__ import annotations

import re
import sys
from typing import Optional, Tuple, Type

# (module, class, kind), checked in order. The kinds are the core's error names ('proxy' is
# counted as 'connect', and tells a proxy's refusal apart where a caller shows it). A connect
# timeout comes first and is 'connect': through a proxy the client's only connect is to the
# proxy, so it is evidence about the tunnel (a gateway that drops connections), never about
# the site. Other timeouts come next, because several libraries make their timeouts subclasses
# of their connection errors (aiohttp's SocketTimeoutError is a ClientConnectionError): a read
# timeout may be the site's slowness and says nothing about the tunnel. Recent Scrapy wraps
# Twisted's errors in its own classes; older versions raise Twisted's.
_KINDS: Tuple[Tuple[str, str, str], ...] = (
    ("requests.exceptions", "ConnectTimeout", "connect"),
    ("urllib3.exceptions", "ConnectTimeoutError", "connect"),
    ("httpx", "ConnectTimeout", "connect"),
    ("aiohttp", "ConnectionTimeoutError", "connect"),  # aiohttp >= 3.10: the sock_connect timeout
    ("twisted.internet.error", "TCPTimedOutError", "connect"),
    ("curl_cffi.requests.exceptions", "ConnectTimeout", "connect"),
    ("aiohttp_socks", "ProxyTimeoutError", "connect"),  # connecting or talking to the SOCKS exit
    ("builtins", "TimeoutError", "timeout"),
    ("socket", "timeout", "timeout"),
    ("asyncio", "TimeoutError", "timeout"),
    ("requests.exceptions", "Timeout", "timeout"),
    ("httpx", "TimeoutException", "timeout"),
    ("aiohttp", "ServerTimeoutError", "timeout"),
    ("urllib3.exceptions", "TimeoutError", "timeout"),
    ("scrapy.exceptions", "DownloadTimeoutError", "timeout"),
    ("twisted.internet.error", "TimeoutError", "timeout"),
    ("curl_cffi.requests.exceptions", "Timeout", "timeout"),
    ("playwright._impl._errors", "TimeoutError", "timeout"),
    # A request Scrapy dropped or cancelled says nothing about the exit.
    ("scrapy.exceptions", "IgnoreRequest", "other"),
    ("scrapy.exceptions", "DownloadCancelledError", "other"),
    # The proxy refused the tunnel (aiohttp's is also a ClientResponseError).
    ("aiohttp", "ClientHttpProxyError", "proxy"),
    ("scrapy.core.downloader.handlers.http11", "TunnelError", "proxy"),
    ("aiohttp_socks", "ProxyError", "proxy"),  # the SOCKS exit refused: credentials or the request
    ("aiohttp_socks", "ProxyConnectionError", "connect"),
    ("builtins", "ConnectionError", "connect"),
    ("socket", "gaierror", "connect"),
    ("requests.exceptions", "ConnectionError", "connect"),
    ("requests.exceptions", "ProxyError", "connect"),
    ("httpx", "ProxyError", "connect"),
    ("httpx", "NetworkError", "connect"),
    ("httpx", "RemoteProtocolError", "connect"),
    ("aiohttp", "ClientProxyConnectionError", "connect"),
    ("aiohttp", "ClientConnectionError", "connect"),
    ("urllib3.exceptions", "ProxyError", "connect"),
    ("urllib3.exceptions", "NewConnectionError", "connect"),
    ("urllib3.exceptions", "ProtocolError", "connect"),
    ("scrapy.exceptions", "DownloadConnectionRefusedError", "connect"),
    ("scrapy.exceptions", "CannotResolveHostError", "connect"),
    ("scrapy.exceptions", "DownloadFailedError", "connect"),
    ("scrapy.exceptions", "ResponseDataLossError", "connect"),
    ("twisted.internet.error", "ConnectError", "connect"),
    ("twisted.internet.error", "ConnectionLost", "connect"),
    ("twisted.internet.error", "ConnectionDone", "connect"),
    ("twisted.web._newclient", "ResponseNeverReceived", "connect"),
    ("twisted.web._newclient", "ResponseFailed", "connect"),
    ("twisted.web._newclient", "RequestTransmissionFailed", "connect"),
    # curl_cffi's errors are OSErrors, not the builtin ConnectionError.
    ("curl_cffi.requests.exceptions", "ProxyError", "connect"),
    ("curl_cffi.requests.exceptions", "ConnectionError", "connect"),
)


def _loaded(module: str, name: str) -> Tuple[Type[BaseException], ...]:
    """The exception class ``module.name`` if that module is imported, else nothing."""
    mod = sys.modules.get(module)
    cls = getattr(mod, name, None) if mod is not None else None
    return (cls,) if isinstance(cls, type) and issubclass(cls, BaseException) else ()


# Chromium's network errors reach Playwright's callers as its one generic Error, named only in
# the message ("Page.goto: net::ERR_PROXY_CONNECTION_FAILED at http://..."): those about the
# way out (the proxy, the tunnel, the connection) are 'connect', a plain ERR_TIMED_OUT 'timeout'.
_CHROMIUM_NET = re.compile(
    r"net::ERR_(TIMED_OUT|PROXY_\w+|TUNNEL_CONNECTION_FAILED|SOCKS_\w+|EMPTY_RESPONSE|CONNECTION_(?:REFUSED|RESET|CLOSED|FAILED|TIMED_OUT))\b"
)


def _classify(exc: BaseException) -> str:
    """'timeout', 'proxy', 'connect' or 'other' for an exception that ended a request."""
    for module, name, kind in _KINDS:
        if isinstance(exc, _loaded(module, name)):
            return kind
    if isinstance(exc, _loaded("playwright._impl._errors", "Error")):
        m = _CHROMIUM_NET.search(str(exc))
        if m:
            return "timeout" if m.group(1) == "TIMED_OUT" else "connect"
    return "other"


# A proxy's answer to CONNECT, as the clients spell it in their errors: http.client's "Tunnel
# connection failed: 407 Proxy Authentication Required" (requests, urllib3), httpx's "407 Proxy
# Authentication Required", Scrapy's "{'status': 407, ...}", libcurl's (curl_cffi) "CONNECT tunnel
# failed, response 407".
_PROXY_STATUS = re.compile(
    r"(?:^|Tunnel connection failed: )([1-5][0-9]{2}) [A-Z]|'status': ([1-5][0-9]{2})\b|CONNECT tunnel failed, response ([1-5][0-9]{2})\b"
)


def _proxy_status(exc: BaseException) -> Optional[int]:
    """The status a proxy answered a failed tunnel with, if the exception carries one: aiohttp
    keeps it as ``status``; requests, urllib3, httpx and Scrapy only in their message."""
    if isinstance(exc, _loaded("aiohttp", "ClientHttpProxyError")):
        status = getattr(exc, "status", None)
        return status if isinstance(status, int) and 100 <= status <= 599 else None
    m = _PROXY_STATUS.search(str(exc))
    return int(m.group(1) or m.group(2) or m.group(3)) if m else None


def _classify_failure(exc: BaseException) -> Tuple[str, Optional[int]]:
    """The class of an exception that ended a request and, for a proxy's refusal, the status
    the proxy answered: a 407 to CONNECT is the gateway refusing its credentials, which the
    pool's health must see as such (``status=407, error="connect"``), not as a broken tunnel."""
    kind = _classify(exc)
    return kind, _proxy_status(exc) if kind in ("proxy", "connect") else None
