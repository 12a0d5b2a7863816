"""Rules Python applies that the core (or one Python helper) owns: the exception classes a failed
request is reported as, the same for a lease block, the Scrapy middleware and the probes."""

from __future__ import annotations

import asyncio
import socket

import aiohttp
import httpx
import pytest
import requests
import scrapy.exceptions
import twisted.internet.error
import twisted.web._newclient
import urllib3
from scrapy.core.downloader.handlers.http11 import TunnelError

from exitpool import Exit, ManualClock, Pool, _core, _outcome, probe
from exitpool import scrapy as ep_scrapy

_KEY = aiohttp.client_reqrep.ConnectionKey("h", 1, False, True, None, None, None)

# An exception of every kind the table knows, from every library, with its class.
CASES = [
    (TimeoutError(), "timeout"),
    (asyncio.TimeoutError(), "timeout"),
    (requests.exceptions.ConnectTimeout(), "connect"),
    (httpx.ConnectTimeout("t"), "connect"),
    (aiohttp.ServerTimeoutError(), "timeout"),
    (aiohttp.ConnectionTimeoutError(), "connect"),
    (twisted.internet.error.TCPTimedOutError(), "connect"),
    (scrapy.exceptions.DownloadTimeoutError(), "timeout"),
    (ConnectionRefusedError(), "connect"),
    (socket.gaierror(), "connect"),
    (requests.exceptions.ConnectionError(), "connect"),
    (httpx.ConnectError("c"), "connect"),
    (aiohttp.ClientConnectorError(_KEY, OSError(111, "refused")), "connect"),
    (twisted.internet.error.ConnectionLost(), "connect"),
    (twisted.web._newclient.ResponseNeverReceived([]), "connect"),
    (scrapy.exceptions.DownloadConnectionRefusedError(), "connect"),
    (aiohttp.ClientHttpProxyError(None, (), status=407), "proxy"),
    (TunnelError(), "proxy"),
    (scrapy.exceptions.IgnoreRequest(), "other"),
    (ValueError("x"), "other"),
]


@pytest.mark.parametrize("exc, kind", CASES, ids=[type(e).__name__ for e, _ in CASES])
def test_a_lease_scrapy_and_the_probes_classify_an_exception_alike(exc, kind):
    # One table: what a lease block reports is what the middleware and a probe say, whichever
    # library raised it (the probe adds only its own bad_body, for a body it cannot read).
    assert _outcome._classify(exc) == kind
    assert ep_scrapy._classify(exc) == kind
    assert probe._classify(exc) == kind


@pytest.mark.parametrize(
    "exc, kind, status",
    [
        # A proxy's refusal of the tunnel, as each client spells its status.
        (aiohttp.ClientHttpProxyError(None, (), status=407), "proxy", 407),
        (httpx.ProxyError("407 Proxy Authentication Required"), "connect", 407),
        (
            requests.exceptions.ProxyError(
                urllib3.exceptions.ProxyError(
                    "Unable to connect to proxy", OSError("Tunnel connection failed: 407 Proxy Authentication Required")
                )
            ),
            "connect",
            407,
        ),
        (urllib3.exceptions.ProxyError("Unable to connect to proxy", OSError("Tunnel connection failed: 502 Bad Gateway")), "connect", 502),
        (
            TunnelError(
                "Could not open CONNECT tunnel with proxy 127.0.0.1:9 [{'status': 407, 'reason': b'Proxy Authentication Required'}]"
            ),
            "proxy",
            407,
        ),
        # No status: a refused connection, a read timeout, anything that is not the proxy's.
        (ConnectionRefusedError(111, "Connection refused"), "connect", None),
        (httpx.ProxyError("Connection reset"), "connect", None),
        (requests.exceptions.ReadTimeout("Read timed out. 407 Proxy"), "timeout", None),
        (ValueError("407 Proxy Authentication Required"), "other", None),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else None,
)
def test_a_proxys_status_is_read_from_the_exception_that_carries_it(exc, kind, status):
    assert _outcome._classify_failure(exc) == (kind, status)


def test_the_probes_own_class_is_only_for_an_answer_they_cannot_read():
    assert probe._classify(aiohttp.ClientPayloadError("cut short")) == "bad_body"
    assert _outcome._classify(aiohttp.ClientPayloadError("cut short")) == "other"


@pytest.mark.parametrize("exc, kind", CASES, ids=[type(e).__name__ for e, _ in CASES])
def test_what_a_lease_block_reports_for_the_exception(exc, kind):
    # 'proxy' is the core's name for a refused tunnel, counted as 'connect'.
    pool = Pool([Exit("e0", "http://127.0.0.1:9")], clock=ManualClock())
    with pytest.raises(type(exc)):
        with pool.lease():
            raise exc
    outcomes = pool.snapshot()["counts"]["outcomes"]
    assert outcomes["connect" if kind == "proxy" else kind] == 1


def test_python_reads_the_state_names_and_the_mask_from_the_core():
    from exitpool import _states, prometheus
    from exitpool import aiohttp as ep_aiohttp

    assert _states.STATES is _core._STATES and prometheus.OUTCOMES is _core._OUTCOMES
    assert [s for s in _states.STATES if _states._ejected(s)] == ["quarantined", "dead"]
    assert [s for s in _states.STATES if _states._in_service(s)] == ["healthy", "degraded"]
    assert ep_aiohttp._MASK is _core._MASK == "[secure]"
