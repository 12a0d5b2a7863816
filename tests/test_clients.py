"""The client helpers, each driven with the real client through the loopback testbed:
exitpool.requests (session_for, report), exitpool.httpx (Clients, AsyncClients, report) and
exitpool.aiohttp (request_kwargs, ExitSession). What a scraper relies on: the request leaves by
the leased exit (the target sees the exit's 127.0.1.N address), nothing in the environment
reroutes it, a sticky account stays on one exit, outcomes land in the pool, clients are reused
per exit and closed, and no proxy password shows anywhere."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gc
import logging
import socket
import ssl
import sys
import threading
import warnings
from typing import Any, Dict, List

import aiohttp
import httpx
import pytest
import requests
import trustme
from aiohttp import web

from exitpool import Cooling, Exit, InvalidInput, ManualClock, Pool
from exitpool import aiohttp as ep_aiohttp
from exitpool import httpx as ep_httpx
from exitpool import requests as ep_requests

T = 5.0  # every client call is bounded
SWITCH = 1e-5
PROXY_ENV = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")
NO_PROXY_ENV = ("NO_PROXY", "no_proxy")


# -- helpers -----------------------------------------------------------------------------------


@contextlib.contextmanager
def leak_check(found: List[str]):
    """Collects ResourceWarnings (unclosed sockets, transports, aiohttp sessions) and exceptions
    raised in finalizers while the block runs and at a final garbage collection. Deprecation
    warnings raise at once, so a helper using a deprecated client API fails its test."""
    hook = sys.unraisablehook
    sys.unraisablehook = lambda u: found.append(f"unraisable: {u.exc_value!r} in {u.object!r}")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ResourceWarning)
            warnings.simplefilter("error", DeprecationWarning)
            try:
                yield
            finally:
                gc.collect()
                gc.collect()
        found += [f"{w.category.__name__}: {w.message}" for w in caught if issubclass(w.category, ResourceWarning)]
    finally:
        sys.unraisablehook = hook


@pytest.fixture
def no_leaks():
    found: List[str] = []
    with leak_check(found):
        yield
    assert not found, found


@pytest.fixture
def refused_url():
    """A proxy URL (with credentials) on a port that refuses connections."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))  # bound, never listening: connecting is refused
    try:
        yield f"http://envuser:envsecret@127.0.0.1:{s.getsockname()[1]}"
    finally:
        s.close()


def set_env_proxies(monkeypatch, url, no_proxy=None):
    for name in PROXY_ENV:
        monkeypatch.setenv(name, url)
    for name in NO_PROXY_ENV:
        if no_proxy is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, no_proxy)


def key_for(pool, exit_id):
    """A key whose ring exit is ``exit_id``."""
    for i in range(10_000):
        if pool.assign(f"k{i}").exit_id == exit_id:
            return f"k{i}"
    raise AssertionError(f"no key lands on {exit_id}")


def exit_outcomes(pool, exit_id):
    for e in pool.snapshot()["exits"]:
        if e["exit_id"] == exit_id:
            return {k: v for k, v in e["outcomes"].items() if v}
    raise KeyError(exit_id)


def secrets_of(tb):
    return [p.password for p in tb.proxies] + [p.auth_header.split(" ", 1)[1] for p in tb.proxies]


def assert_no_secret(tb, *texts):
    for text in texts:
        for s in secrets_of(tb):
            assert s not in text


class RecordingLease:
    """Stands in for a Lease to see exactly what a report helper passes on."""

    def __init__(self):
        self.reported: Dict[str, Any] = {}

    def report(self, **kwargs):
        self.reported = kwargs


class Echo:
    """An extra target on loopback, plain http and https (a trustme CA), for what the testbed
    site does not do: echo the headers it received, set a cookie, redirect to another host."""

    BIG = 4 << 20  # bytes of /big: more than one read, so a pool closed mid-body breaks it

    def __init__(self):
        self.ca = trustme.CA()
        self._server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.ca.issue_cert("127.0.0.1").configure_cert(self._server_ctx)
        self._runner = None
        self._stopping = None
        self.http_url = self.https_url = ""

    def client_ssl(self):
        ctx = ssl.create_default_context()
        self.ca.configure_trust(ctx)
        return ctx

    @staticmethod
    async def _headers(request):
        return web.json_response({"ip": request.remote, "headers": dict(request.headers)})

    @staticmethod
    async def _cookie(request):
        r = web.json_response({"ip": request.remote, "cookie": request.headers.get("Cookie")})
        r.set_cookie("sid", request.query.get("account", "none"))
        return r

    @staticmethod
    async def _redirect(request):
        raise web.HTTPFound(request.query["to"])

    async def _drip(self, request):
        # The headers and a first byte at once, the rest after `delay` seconds (or at stop).
        r = web.StreamResponse(headers={"Content-Length": "2"})
        await r.prepare(request)
        await r.write(b"x")
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), float(request.query.get("delay", "2")))
        with contextlib.suppress(ConnectionError):
            await r.write(b"y")
        return r

    @staticmethod
    async def _big(request):
        return web.Response(body=b"b" * Echo.BIG, content_type="application/octet-stream")

    async def start(self):
        self._stopping = asyncio.Event()
        app = web.Application()
        app.router.add_get("/headers", self._headers)
        app.router.add_get("/cookie", self._cookie)
        app.router.add_get("/redirect", self._redirect)
        app.router.add_get("/drip", self._drip)
        app.router.add_get("/big", self._big)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        plain = web.TCPSite(self._runner, "127.0.0.1", 0)
        tls = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=self._server_ctx)
        await plain.start()
        await tls.start()
        self.http_url = f"http://127.0.0.1:{plain._server.sockets[0].getsockname()[1]}"
        self.https_url = f"https://127.0.0.1:{tls._server.sockets[0].getsockname()[1]}"
        return self

    async def stop(self):
        if self._stopping is not None:
            self._stopping.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


@pytest.fixture
def echo(exitpool_testbed):
    tb = exitpool_testbed
    e = tb.run(Echo().start(), timeout=T)
    yield e
    tb.run(e.stop(), timeout=T)


def test_the_leak_check_sees_an_unclosed_client(exitpool_testbed):
    # Without this, the no_leaks fixture could pass by never seeing anything.
    tb = exitpool_testbed
    found: List[str] = []
    with leak_check(found):
        c = httpx.Client(transport=httpx.HTTPTransport(proxy=httpx.Proxy(tb.exits[0].proxy)), timeout=T)  # never closed
        assert c.get(tb.control_url).status_code == 200
        del c
    assert any("unclosed" in f for f in found), found


# -- requests ----------------------------------------------------------------------------------


@pytest.mark.exitpool_testbed(n_exits=4)
def test_requests_session_for_leaves_by_the_leased_exit(exitpool_testbed, no_leaks):
    tb = exitpool_testbed
    pool = Pool(tb.exits)
    seen = set()
    for i in range(8):
        with pool.lease(f"acct-{i}", site="control") as lease, ep_requests.session_for(lease) as s:
            r = s.get(tb.control_url, timeout=T)
            assert r.json() == {"ip": lease.exit.ip}
            seen.add(lease.exit_id)
    assert len(seen) > 1
    # An Exit works as well as a Lease.
    with ep_requests.session_for(tb.exits[2]) as s:
        assert s.get(tb.control_url, timeout=T).json() == {"ip": tb.exits[2].ip}


@pytest.mark.parametrize("no_proxy", [None, "*"])
@pytest.mark.exitpool_testbed(n_exits=2)
def test_requests_environment_proxies_never_override_the_exit(exitpool_testbed, echo, no_leaks, refused_url, monkeypatch, no_proxy):
    tb = exitpool_testbed
    pool = Pool(tb.exits)
    set_env_proxies(monkeypatch, refused_url, no_proxy)
    with pool.lease("acct-1") as lease:
        if no_proxy is None:
            # The environment is live: it beats a plain session's own proxies (psf/requests#2018).
            with requests.Session() as naive:
                naive.proxies = dict(lease.proxies)
                with pytest.raises(requests.ConnectionError):
                    naive.get(tb.control_url, timeout=T)
                lease.report(status=200)  # the naive failure is not the exit's
        with ep_requests.session_for(lease) as s:
            assert s.trust_env  # not needed: the adapter ignores every other proxy mapping
            assert s.get(tb.control_url, timeout=T).json() == {"ip": lease.exit.ip}
            # A per-call proxies= cannot reroute it either.
            bogus = {"http": refused_url, "https": refused_url}
            assert s.get(tb.control_url, proxies=bogus, timeout=T).json() == {"ip": lease.exit.ip}
            # Nor a redirect to another host, where requests resolves the proxies again.
            r = s.get(echo.http_url + "/redirect", params={"to": tb.control_url}, timeout=T)
            assert r.json() == {"ip": lease.exit.ip} and len(r.history) == 1


@pytest.mark.exitpool_testbed(n_exits=4, rate=1000.0)
def test_requests_sticky_account_keeps_its_exit_and_its_adapter(exitpool_testbed, no_leaks):
    tb = exitpool_testbed
    pool = Pool(tb.exits)
    site = tb.site.host_port
    adapters = set()
    with requests.Session() as account_session:  # one session per account, for its cookies
        for _ in range(6):
            with pool.lease("acct-7", site=site) as lease:
                s = ep_requests.session_for(lease, account_session)
                assert s is account_session
                r = s.get(tb.site_url + "/page", headers={"X-Account": "acct-7"}, timeout=T)
                ep_requests.report(lease, r)
                assert r.status_code == 200
                adapters.add(id(s.get_adapter(tb.site_url)))
                home = lease.exit_id
        assert len(adapters) == 1  # the same exit keeps its adapter and connections
        assert tb.site.account_ips("acct-7") == [tb.proxy(home).source_ip]
        assert tb.site.teleports("acct-7") == 0
        assert exit_outcomes(pool, home) == {"success": 6}
        # Pointed at another exit, the session drops (and closes) the old adapter.
        old = account_session.get_adapter(tb.site_url)
        other = next(e for e in tb.exits if e.exit_id != home)
        ep_requests.session_for(other, account_session)
        assert account_session.get_adapter(tb.site_url) is not old
        assert not old.poolmanager.pools
        r = account_session.get(tb.control_url, timeout=T)
        assert r.json() == {"ip": other.ip}


@pytest.mark.exitpool_testbed(n_exits=4, rate=0.01, burst=1)
def test_requests_report_records_each_outcome(exitpool_testbed, no_leaks):
    tb = exitpool_testbed
    pool = Pool(tb.exits)
    site = tb.site.host_port
    tb.site.ban(tb.proxy("exit-1").source_ip)
    tb.site.flag(tb.proxy("exit-2").source_ip)
    is_captcha = lambda r: "captcha" in r.text  # noqa: E731
    for exit_id, n in (("exit-0", 1), ("exit-1", 1), ("exit-2", 1), ("exit-3", 2)):
        key = key_for(pool, exit_id)
        for _ in range(n):
            with pool.lease(key, site=site) as lease, ep_requests.session_for(lease) as s:
                ep_requests.report(lease, s.get(tb.site_url + "/page", timeout=T), captcha=is_captcha)
    assert exit_outcomes(pool, "exit-0") == {"success": 1}
    assert exit_outcomes(pool, "exit-1") == {"block": 1}
    assert exit_outcomes(pool, "exit-2") == {"captcha": 1}
    assert exit_outcomes(pool, "exit-3") == {"success": 1, "rate_limited": 1}
    # What reaches the lease: the status, r.elapsed, and the 429's Retry-After.
    with ep_requests.session_for(tb.exits[3]) as s:
        r = s.get(tb.site_url + "/page", timeout=T)
    assert r.status_code == 429
    rec = RecordingLease()
    ep_requests.report(rec, r)
    assert rec.reported["status"] == 429 and rec.reported["captcha"] is False
    assert rec.reported["retry_after"] == float(r.headers["Retry-After"]) >= 1
    assert rec.reported["latency"] == r.elapsed.total_seconds()
    # A caught exception is reported as an error.
    err = requests.ConnectionError("boom")
    ep_requests.report(rec, err)
    assert rec.reported == {"error": err}


@pytest.mark.exitpool_testbed(n_exits=3)
def test_requests_dead_proxy_is_a_connection_failure(exitpool_testbed, no_leaks, caplog):
    caplog.set_level(logging.DEBUG)
    tb = exitpool_testbed
    pool = Pool(tb.exits)
    key = key_for(pool, "exit-1")
    tb.proxy("exit-1").kill()
    with pytest.raises(requests.ConnectionError) as info:
        with pool.lease(key, site="control") as lease, ep_requests.session_for(lease) as s:
            s.get(tb.control_url, timeout=T)
    assert exit_outcomes(pool, "exit-1") == {"connect": 1}
    with ep_requests.session_for(tb.exits[1]) as s:
        adapter = repr(s.get_adapter("http://x"))
    assert "exit-1" in adapter and caplog.records  # urllib3 logged its connection attempts
    assert_no_secret(tb, str(info.value), repr(info.value), adapter, *(r.getMessage() for r in caplog.records))


@pytest.mark.exitpool_testbed(n_exits=2)
def test_requests_https_target_tunnels_through_the_exit(exitpool_testbed, echo, no_leaks, tmp_path):
    tb = exitpool_testbed
    ca = tmp_path / "ca.pem"
    echo.ca.cert_pem.write_to_path(str(ca))
    pool = Pool(tb.exits)
    with pool.lease("acct-1") as lease, ep_requests.session_for(lease) as s:
        body = s.get(echo.https_url + "/headers", verify=str(ca), timeout=T).json()
    assert body["ip"] == lease.exit.ip
    assert "Proxy-Authorization" not in body["headers"]  # consumed by the proxy on CONNECT
    assert tb.proxy(lease.exit_id).tunnels == 1


# -- httpx, sync -------------------------------------------------------------------------------


@pytest.mark.exitpool_testbed(n_exits=4)
def test_httpx_clients_one_per_exit_reused_and_closed(exitpool_testbed, no_leaks):
    tb = exitpool_testbed
    pool = Pool(tb.exits)
    clients_of: Dict[str, set] = {}
    with ep_httpx.Clients(timeout=T) as clients:
        for _round in range(3):
            for i in range(8):
                with pool.lease(f"acct-{i}") as lease:
                    c = clients.client(lease)
                    assert isinstance(c, httpx.Client)
                    r = c.get(tb.control_url)
                    ep_httpx.report(lease, r)
                    assert r.json() == {"ip": lease.exit.ip}
                    clients_of.setdefault(lease.exit_id, set()).add(id(c))
        assert all(len(ids) == 1 for ids in clients_of.values())  # one client per exit
        assert len(clients) == len(clients_of) > 1
        # A client of your own on an exit's transport shares its pool; closing it leaves the
        # pool to the cache.
        with httpx.Client(transport=clients.transport(tb.exits[0])) as own:
            assert own.get(tb.control_url).json() == {"ip": tb.exits[0].ip}
        assert clients.client(tb.exits[0]).get(tb.control_url).json() == {"ip": tb.exits[0].ip}
        made = [clients.client(e) for e in tb.exits]
    assert all(c.is_closed for c in made)
    assert clients.closed
    with pytest.raises(RuntimeError):
        clients.client(tb.exits[0])
    assert sum(exit_outcomes(pool, e.exit_id).get("success", 0) for e in tb.exits) == 24


@pytest.mark.parametrize("no_proxy", [None, "*"])
@pytest.mark.exitpool_testbed(n_exits=2)
def test_httpx_environment_proxies_never_override_the_exit(exitpool_testbed, no_leaks, refused_url, monkeypatch, no_proxy):
    tb = exitpool_testbed
    set_env_proxies(monkeypatch, refused_url, no_proxy)
    if no_proxy is None:
        with httpx.Client(timeout=T) as naive:  # the environment is live for a default client
            with pytest.raises((httpx.ProxyError, httpx.ConnectError)):
                naive.get(tb.control_url)
    pool = Pool(tb.exits)
    with ep_httpx.Clients(timeout=T) as clients, pool.lease("acct-1") as lease:
        assert clients.client(lease).get(tb.control_url).json() == {"ip": lease.exit.ip}
        assert clients.client(lease).trust_env is False


@pytest.mark.exitpool_testbed(n_exits=4, rate=0.01, burst=1)
def test_httpx_sticky_account_and_outcomes(exitpool_testbed, no_leaks):
    tb = exitpool_testbed
    pool = Pool(tb.exits)
    site = tb.site.host_port
    tb.site.configure(rate=1000.0)
    with ep_httpx.Clients(timeout=T) as clients:
        homes = set()
        for _ in range(5):
            with pool.lease("acct-3", site=site) as lease:
                r = clients.client(lease).get(tb.site_url + "/page", headers={"X-Account": "acct-3"})
                ep_httpx.report(lease, r)
                homes.add(lease.exit_id)
        (home,) = homes
        assert tb.site.account_ips("acct-3") == [tb.proxy(home).source_ip]
        assert tb.site.teleports("acct-3") == 0
        assert exit_outcomes(pool, home) == {"success": 5}
        # 403 and 429 from the site land as block and rate_limited.
        tb.site.configure(rate=0.01, burst=1)
        others = [e.exit_id for e in tb.exits if e.exit_id != home]
        tb.site.ban(tb.proxy(others[0]).source_ip)
        for exit_id, n in ((others[0], 1), (others[1], 2)):
            key = key_for(pool, exit_id)
            for _ in range(n):
                with pool.lease(key, site=site) as lease:
                    ep_httpx.report(lease, clients.client(lease).get(tb.site_url + "/page"))
        assert exit_outcomes(pool, others[0]) == {"block": 1}
        assert exit_outcomes(pool, others[1]) == {"success": 1, "rate_limited": 1}
        r = clients.client(tb.proxy(others[1]).exit()).get(tb.site_url + "/page")
        rec = RecordingLease()
        ep_httpx.report(rec, r, captcha=lambda r: "captcha" in r.text)
        assert rec.reported["status"] == 429 and rec.reported["captcha"] is False
        assert rec.reported["retry_after"] == float(r.headers["Retry-After"])
        assert rec.reported["latency"] == r.elapsed.total_seconds()


@pytest.mark.exitpool_testbed(n_exits=3)
def test_httpx_dead_proxy_is_a_connection_failure(exitpool_testbed, no_leaks, caplog):
    caplog.set_level(logging.DEBUG)
    tb = exitpool_testbed
    pool = Pool(tb.exits)
    key = key_for(pool, "exit-2")
    tb.proxy("exit-2").kill()
    with ep_httpx.Clients(timeout=T) as clients:
        with pytest.raises(httpx.TransportError) as info:
            with pool.lease(key, site="control") as lease:
                clients.client(lease).get(tb.control_url)
        texts = [str(info.value), repr(info.value), repr(clients), repr(clients.transport(tb.exits[2]))]
    assert exit_outcomes(pool, "exit-2") == {"connect": 1}
    assert caplog.records  # httpx and httpcore logged the attempt
    assert_no_secret(tb, *texts, *(r.getMessage() for r in caplog.records))


@pytest.mark.exitpool_testbed(n_exits=2)
def test_httpx_new_credentials_on_an_exit_get_a_new_client(exitpool_testbed, no_leaks):
    # An exit id whose proxy URL changed must not reuse the connections authenticated with the
    # old credentials: the proxy has to see the new ones.
    tb = exitpool_testbed
    good = tb.exits[0]
    stale = Exit(good.exit_id, good.proxy.replace(tb.proxies[0].password, "wrong-password"), ip=good.ip)
    with ep_httpx.Clients(timeout=T) as clients:
        first = clients.client(good)
        assert first.get(tb.control_url).status_code == 200
        second = clients.client(stale)
        assert second is not first
        assert second.get(tb.control_url).status_code == 407
        assert clients.client(stale) is second
        assert len(clients) == 1
    assert first.is_closed and second.is_closed


def test_httpx_options_that_bypass_the_exit_are_refused():
    for option in ("proxy", "proxies", "mounts", "transport", "trust_env"):
        with pytest.raises(TypeError, match=option):
            ep_httpx.Clients(**{option: None})
        with pytest.raises(TypeError, match=option):
            ep_httpx.AsyncClients(**{option: None})


@pytest.mark.exitpool_testbed(n_exits=1)
def test_httpx_per_exit_client_does_not_carry_cookies_between_accounts(exitpool_testbed, echo, no_leaks):
    tb = exitpool_testbed
    pool = Pool(tb.exits)  # one exit: both accounts share its client
    with ep_httpx.Clients(timeout=T) as clients:
        with pool.lease("alice") as lease:
            clients.client(lease).get(echo.http_url + "/cookie", params={"account": "alice"})
        with pool.lease("bob") as lease:
            body = clients.client(lease).get(echo.http_url + "/cookie", params={"account": "bob"}).json()
        assert body["cookie"] is None
        # A client of the account's own, on the exit's transport, keeps the account's cookies.
        with httpx.Client(transport=clients.transport(tb.exits[0])) as alice:
            alice.get(echo.http_url + "/cookie", params={"account": "alice"})
            assert alice.get(echo.http_url + "/cookie").json()["cookie"] == "sid=alice"


@pytest.mark.exitpool_testbed(n_exits=2)
def test_httpx_https_target_tunnels_through_the_exit(exitpool_testbed, echo, no_leaks):
    tb = exitpool_testbed
    with ep_httpx.Clients(timeout=T, verify=echo.client_ssl()) as clients:
        body = clients.client(tb.exits[1]).get(echo.https_url + "/headers").json()
    assert body["ip"] == tb.exits[1].ip
    assert "proxy-authorization" not in {k.lower() for k in body["headers"]}
    assert tb.proxies[1].tunnels == 1


# -- httpx, async ------------------------------------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.exitpool_testbed(n_exits=3)
async def test_httpx_async_clients_per_exit_through_the_exit_and_closed(exitpool_testbed_async, no_leaks, refused_url, monkeypatch):
    tb = exitpool_testbed_async
    set_env_proxies(monkeypatch, refused_url)
    pool = Pool(tb.exits)
    ids: Dict[str, set] = {}
    async with ep_httpx.AsyncClients(timeout=T) as clients:
        for _ in range(2):
            for i in range(6):
                async with pool.lease(f"acct-{i}") as lease:
                    c = clients.client(lease)
                    assert isinstance(c, httpx.AsyncClient)
                    r = await c.get(tb.control_url)
                    ep_httpx.report(lease, r)
                    assert r.json() == {"ip": lease.exit.ip}
                    ids.setdefault(lease.exit_id, set()).add(id(c))
        assert all(len(v) == 1 for v in ids.values()) and len(clients) == len(ids)
        made = [clients.client(e) for e in tb.exits]
        # A dead exit: the failure leaves the block and is recorded as a connection failure.
        tb.proxy("exit-0").kill()
        key = key_for(pool, "exit-0")
        with pytest.raises(httpx.TransportError):
            async with pool.lease(key) as lease:
                await clients.client(lease).get(tb.control_url)
    assert all(c.is_closed for c in made)
    assert exit_outcomes(pool, "exit-0").get("connect") == 1


# -- aiohttp: request_kwargs -------------------------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.exitpool_testbed(n_exits=3)
async def test_aiohttp_request_kwargs_plain_and_tunnelled(exitpool_testbed_async, no_leaks):
    tb = exitpool_testbed_async
    echo = await Echo().start()
    try:
        pool = Pool(tb.exits)
        async with aiohttp.ClientSession() as s:
            async with pool.lease("acct-1") as lease:
                kw = ep_aiohttp.request_kwargs(lease, tb.control_url, headers={"X-Mine": "1"})
                assert kw["proxy"] == f"http://127.0.0.1:{tb.proxy(lease.exit_id).port}"  # no credentials
                assert kw["proxy_headers"] == {"Proxy-Authorization": tb.proxy(lease.exit_id).auth_header}
                async with s.get(tb.control_url.replace("/ip", "/headers"), **kw) as r:
                    body = await r.json()
                assert body["ip"] == lease.exit.ip
                assert body["headers"]["X-Mine"] == "1"
                assert "Proxy-Authorization" not in body["headers"]  # the proxy consumed it
                # https: the credentials go on the CONNECT only, never into the tunnel.
                url = echo.https_url + "/headers"
                kw = ep_aiohttp.request_kwargs(lease, url)
                assert "headers" not in kw
                async with s.get(url, ssl=echo.client_ssl(), **kw) as r:
                    body = await r.json()
                assert body["ip"] == lease.exit.ip
                assert "Proxy-Authorization" not in body["headers"]
                assert tb.proxy(lease.exit_id).tunnels == 1
        with pytest.raises(InvalidInput):
            ep_aiohttp.request_kwargs(tb.exits[0], "/relative")
        with pytest.raises(InvalidInput):
            ep_aiohttp.request_kwargs(Exit("s", "socks5://u:pw@127.0.0.1:1080"), tb.control_url)
    finally:
        await echo.stop()


# -- aiohttp: ExitSession ----------------------------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.exitpool_testbed(n_exits=4, rate=1000.0)
async def test_aiohttp_exit_session_sticky_accounts_with_outcomes_reported(exitpool_testbed_async, no_leaks):
    tb = exitpool_testbed_async
    pool = Pool(tb.exits)
    site = tb.site.host_port
    homes: Dict[str, str] = {}
    async with ep_aiohttp.ExitSession(pool, timeout=aiohttp.ClientTimeout(total=T)) as http:
        for _ in range(4):
            for i in range(6):
                key = f"acct-{i}"
                req = http.get(tb.site_url + "/page", key=key, headers={"X-Account": key})
                async with req as r:
                    assert r.status == 200
                    assert "Welcome back" in await r.text()
                homes.setdefault(key, req.lease.exit_id)
                assert req.lease.exit_id == homes[key]
                assert req.lease.site == site  # the URL's host:port by default
    for key, exit_id in homes.items():
        assert tb.site.account_ips(key) == [tb.proxy(exit_id).source_ip]
        assert tb.site.teleports(key) == 0
    assert len(set(homes.values())) > 1
    snap = pool.snapshot()
    assert snap["counts"]["outcomes"]["success"] == 24
    assert sum(e["latency"]["count"] for e in snap["exits"]) == 24
    assert [s["site"] for s in snap["sites"]] == [site]


@pytest.mark.asyncio
@pytest.mark.exitpool_testbed(n_exits=4, rate=0.01, burst=1)
async def test_aiohttp_exit_session_reports_block_rate_limit_and_captcha(exitpool_testbed_async, no_leaks):
    tb = exitpool_testbed_async
    pool = Pool(tb.exits)
    tb.site.ban(tb.proxy("exit-1").source_ip)
    tb.site.flag(tb.proxy("exit-2").source_ip)
    hook_saw = []

    async def captcha(r):  # a coroutine hook may read the body
        hook_saw.append(r.status)
        return "captcha" in await r.text()

    async with ep_aiohttp.ExitSession(pool, captcha=captcha, timeout=aiohttp.ClientTimeout(total=T)) as http:
        for exit_id, n in (("exit-0", 1), ("exit-1", 1), ("exit-2", 1), ("exit-3", 2)):
            key = key_for(pool, exit_id)
            for _ in range(n):
                r = await http.get(tb.site_url + "/page", key=key)  # awaited: body read, lease ended
                assert r.status in (200, 403, 429)
                await r.text()  # still readable after the lease ended
    assert exit_outcomes(pool, "exit-0") == {"success": 1}
    assert exit_outcomes(pool, "exit-1") == {"block": 1}
    assert exit_outcomes(pool, "exit-2") == {"captcha": 1}
    assert exit_outcomes(pool, "exit-3") == {"success": 1, "rate_limited": 1}
    assert sorted(hook_saw) == [200, 200, 200, 403, 429]


@pytest.mark.asyncio
@pytest.mark.exitpool_testbed(n_exits=3)
async def test_aiohttp_exit_session_dead_proxy_and_errors_in_the_block(exitpool_testbed_async, no_leaks, caplog):
    caplog.set_level(logging.DEBUG)
    tb = exitpool_testbed_async
    pool = Pool(tb.exits)
    dead, alive = key_for(pool, "exit-0"), key_for(pool, "exit-1")
    tb.proxy("exit-0").kill()
    async with ep_aiohttp.ExitSession(pool, timeout=aiohttp.ClientTimeout(total=T)) as http:
        with pytest.raises(aiohttp.ClientConnectionError) as info:
            async with http.get(tb.control_url, key=dead):
                raise AssertionError("no response through a dead proxy")
        # Your own error inside the block is not the exit's: its status still counts.
        with pytest.raises(KeyError):
            async with http.get(tb.control_url, key=alive) as r:
                (await r.json())["missing"]
        texts = [str(info.value), repr(info.value), repr(http), repr(http.get(tb.control_url, key=alive))]
    assert exit_outcomes(pool, "exit-0") == {"connect": 1}
    assert exit_outcomes(pool, "exit-1") == {"success": 1}
    assert_no_secret(tb, *texts, *(r.getMessage() for r in caplog.records))


@pytest.mark.asyncio
@pytest.mark.exitpool_testbed(n_exits=2)
async def test_aiohttp_exit_session_ignores_environment_and_follows_redirects_across_hosts(
    exitpool_testbed_async, no_leaks, refused_url, monkeypatch
):
    tb = exitpool_testbed_async
    set_env_proxies(monkeypatch, refused_url)
    echo = await Echo().start()
    try:
        pool = Pool(tb.exits)
        async with aiohttp.ClientSession(trust_env=True) as naive:  # the environment is live
            with pytest.raises(aiohttp.ClientConnectionError):
                async with naive.get(tb.control_url, timeout=aiohttp.ClientTimeout(total=T)):
                    pass
        async with ep_aiohttp.ExitSession(pool, trust_env=True, timeout=aiohttp.ClientTimeout(total=T)) as http:
            # A plain-http redirect to another host: the second hop still authenticates.
            req = http.get(echo.http_url + "/redirect", params={"to": tb.control_url}, key="acct-1")
            async with req as r:
                assert r.status == 200
                assert await r.json() == {"ip": req.lease.exit.ip}
                assert len(r.history) == 1
    finally:
        await echo.stop()
    assert exit_outcomes(pool, req.lease.exit_id) == {"success": 1}


@pytest.mark.asyncio
@pytest.mark.exitpool_testbed(n_exits=1)
async def test_aiohttp_exit_session_keeps_no_cookies_between_accounts(exitpool_testbed_async, no_leaks):
    tb = exitpool_testbed_async
    echo = await Echo().start()
    try:
        pool = Pool(tb.exits)
        async with ep_aiohttp.ExitSession(pool, timeout=aiohttp.ClientTimeout(total=T)) as http:
            await http.get(echo.http_url + "/cookie", params={"account": "alice"}, key="alice")
            r = await http.get(echo.http_url + "/cookie", params={"account": "bob"}, key="bob")
            assert (await r.json())["cookie"] is None
    finally:
        await echo.stop()


@pytest.mark.asyncio
async def test_aiohttp_exit_session_refuses_its_own_proxy_and_is_closed(exitpool_testbed_async):
    tb = exitpool_testbed_async
    pool = Pool(tb.exits)
    with pytest.raises(TypeError, match="proxy"):
        ep_aiohttp.ExitSession(pool, proxy="http://127.0.0.1:1")
    http = ep_aiohttp.ExitSession(pool)
    with pytest.raises(TypeError, match="proxy_headers"):
        http.get(tb.control_url, proxy_headers={})
    async with http:
        session = http.session
        assert session is not None and not session.closed
    assert session.closed and http.closed
    with pytest.raises(RuntimeError):
        async with http.get(tb.control_url):
            pass


def established_to(*ports):
    """This host's open (ESTABLISHED) TCP connections towards ``ports`` on loopback: the
    client side of connections to the testbed's proxies."""
    try:
        with open("/proc/net/tcp") as f:
            rows = f.read().splitlines()[1:]
    except OSError:
        pytest.skip("needs /proc/net/tcp to count open connections")
    count = 0
    for row in rows:
        fields = row.split()
        remote, state = fields[2], fields[3]
        if state == "01" and int(remote.split(":")[1], 16) in ports:
            count += 1
    return count


def cooling_for(pool, key, site):
    """How long the pool keeps ``key``'s exit cooling for ``site`` (0 when it serves now)."""
    try:
        lease = pool.acquire(key, site=site, timeout=0)
    except Cooling as e:
        return e.retry_after
    pool.release(lease)
    return 0.0


def assert_masked(tb, info):
    """A request_info that had the proxy's credentials has them as [secure], and nothing else
    of them shows."""
    assert info.headers.get("Proxy-Authorization") == "[secure]"
    assert_no_secret(tb, repr(info), str(dict(info.headers)))


# -- aiohttp: ExitSession, HTTP errors, credentials, automatic reporting -----------------------


@pytest.mark.asyncio
@pytest.mark.exitpool_testbed(n_exits=4, rate=0.01, burst=1)
async def test_aiohttp_exit_session_http_errors_are_recorded_as_their_status(exitpool_testbed_async, no_leaks):
    # raise_for_status, in the block or by aiohttp itself, is an HTTP answer: a 403 is a block,
    # a 429 a rate limit that cools the exit for its Retry-After. Not a failure of the tunnel.
    tb = exitpool_testbed_async
    clock = ManualClock(100.0)
    pool = Pool(tb.exits, clock=clock)
    site = tb.site.host_port
    for exit_id in ("exit-0", "exit-1", "exit-2"):
        tb.site.ban(tb.proxy(exit_id).source_ip)
    timeout = aiohttp.ClientTimeout(total=T)
    async with ep_aiohttp.ExitSession(pool, timeout=timeout) as http:
        # 1. r.raise_for_status() inside the block.
        with pytest.raises(aiohttp.ClientResponseError) as info:
            async with http.get(tb.site_url + "/page", key=key_for(pool, "exit-0")) as r:
                r.raise_for_status()
        assert info.value.status == 403
        # 3. raise_for_status=True for one request: raised from `async with`/`await`.
        rate_key = key_for(pool, "exit-3")
        await http.get(tb.site_url + "/page", key=rate_key)
        with pytest.raises(aiohttp.ClientResponseError) as info:
            await http.get(tb.site_url + "/page", key=rate_key, raise_for_status=True)
        assert info.value.status == 429
        retry_after = float(info.value.headers["Retry-After"])
        assert retry_after >= 10  # the site's bucket refills at 0.01/s
    # 2. raise_for_status=True for the session.
    async with ep_aiohttp.ExitSession(pool, timeout=timeout, raise_for_status=True) as http:
        with pytest.raises(aiohttp.ClientResponseError) as info:
            async with http.get(tb.site_url + "/page", key=key_for(pool, "exit-1")):
                raise AssertionError("raise_for_status raises before the block")
        assert info.value.status == 403
        with pytest.raises(aiohttp.ClientResponseError):
            await http.get(tb.site_url + "/page", key=key_for(pool, "exit-2"))
    assert exit_outcomes(pool, "exit-0") == {"block": 1}
    assert exit_outcomes(pool, "exit-1") == {"block": 1}
    assert exit_outcomes(pool, "exit-2") == {"block": 1}
    assert exit_outcomes(pool, "exit-3") == {"success": 1, "rate_limited": 1}
    assert pool.snapshot()["counts"]["outcomes"]["other"] == 0
    # The 429's Retry-After came along: the exit cools for this site that long, on the pool's
    # clock, and serves again after it.
    assert cooling_for(pool, rate_key, site) == retry_after
    clock.advance(retry_after)
    assert cooling_for(pool, rate_key, site) == 0.0


@pytest.mark.asyncio
@pytest.mark.exitpool_testbed(n_exits=5, rate=0.01, burst=1)
async def test_aiohttp_exit_session_masks_proxy_credentials_in_request_info(exitpool_testbed_async, no_leaks):
    # A plain-http request carries Proxy-Authorization (for the proxy); aiohttp keeps the
    # request's headers in request_info, which responses and ClientResponseError show.
    tb = exitpool_testbed_async
    pool = Pool(tb.exits)
    banned = []  # one key per banned exit: each takes one 403 (two would quarantine it)
    for exit_id in ("exit-0", "exit-1", "exit-2", "exit-3"):
        tb.site.ban(tb.proxy(exit_id).source_ip)
        banned.append(key_for(pool, exit_id))
    echo = await Echo().start()
    texts: List[str] = []
    try:
        async with ep_aiohttp.ExitSession(pool, timeout=aiohttp.ClientTimeout(total=T)) as http:
            # The response, and a redirect's history.
            async with http.get(echo.http_url + "/redirect", params={"to": tb.control_url}, key="acct-1") as r:
                assert r.status == 200 and len(r.history) == 1
                assert_masked(tb, r.request_info)
                assert_masked(tb, r.history[0].request_info)
            # raise_for_status() in the block, and on a response kept after the lease ended.
            with pytest.raises(aiohttp.ClientResponseError) as info:
                async with http.get(tb.site_url + "/page", key=banned[0]) as r:
                    assert_masked(tb, r.request_info)
                    r.raise_for_status()
            assert_masked(tb, info.value.request_info)
            texts += [repr(info.value), str(info.value)]
            r = await http.get(tb.site_url + "/page", key=banned[1])
            with pytest.raises(aiohttp.ClientResponseError) as info:
                r.raise_for_status()
            assert_masked(tb, info.value.request_info)
            texts += [repr(info.value), str(info.value), repr(r.request_info)]
            # raise_for_status=True on the request, after a redirect.
            with pytest.raises(aiohttp.ClientResponseError) as info:
                await http.get(echo.http_url + "/redirect", params={"to": tb.site_url + "/page"}, key=banned[2], raise_for_status=True)
            assert info.value.status == 403
            assert_masked(tb, info.value.request_info)
            texts += [repr(info.value), str(info.value), repr(info.value.args)]
        # raise_for_status=True on the session.
        async with ep_aiohttp.ExitSession(pool, timeout=aiohttp.ClientTimeout(total=T), raise_for_status=True) as http:
            with pytest.raises(aiohttp.ClientResponseError) as info:
                async with http.get(tb.site_url + "/page", key=banned[3]):
                    pass
            assert_masked(tb, info.value.request_info)
            texts += [repr(info.value), str(info.value), repr(info.value.args)]
        # A proxy refusing the CONNECT (wrong password): aiohttp's ClientHttpProxyError
        # carries the CONNECT's headers. Still a proxy failure for the pool.
        wrong = "wrong-pw-0123456789"
        good = tb.exits[4]
        bad_pool = Pool([Exit(good.exit_id, good.proxy.replace(tb.proxies[4].password, wrong), ip=good.ip)])
        async with ep_aiohttp.ExitSession(bad_pool, timeout=aiohttp.ClientTimeout(total=T)) as bad:
            with pytest.raises(aiohttp.ClientHttpProxyError) as proxy_info:
                await bad.get(echo.https_url + "/headers", ssl=echo.client_ssl())
        assert proxy_info.value.status == 407
        assert exit_outcomes(bad_pool, good.exit_id) == {"connect": 1}
        token = base64.b64encode(f"{tb.proxies[4].user}:{wrong}".encode()).decode()
        for text in (repr(proxy_info.value), str(proxy_info.value), repr(proxy_info.value.request_info)):
            assert wrong not in text and token not in text
    finally:
        await echo.stop()
    assert len(texts) == 11
    assert_no_secret(tb, *texts)


@pytest.mark.asyncio
@pytest.mark.exitpool_testbed(n_exits=2)
async def test_aiohttp_exit_session_keeps_credentials_out_of_https_tunnels(exitpool_testbed_async, no_leaks):
    tb = exitpool_testbed_async
    pool = Pool(tb.exits)
    echo = await Echo().start()
    try:
        async with ep_aiohttp.ExitSession(pool, timeout=aiohttp.ClientTimeout(total=T)) as http:
            req = http.get(echo.https_url + "/headers", key="acct-1", ssl=echo.client_ssl())
            async with req as r:
                body = await r.json()
                assert "Proxy-Authorization" not in r.request_info.headers
    finally:
        await echo.stop()
    # The request went through the exit's tunnel, and the target never read the credentials.
    assert body["ip"] == req.lease.exit.ip
    assert tb.proxy(req.lease.exit_id).tunnels == 1
    assert "proxy-authorization" not in {k.lower() for k in body["headers"]}
    assert exit_outcomes(pool, req.lease.exit_id) == {"success": 1}


@pytest.mark.asyncio
@pytest.mark.exitpool_testbed(n_exits=3, rate=0.01, burst=1)
async def test_aiohttp_exit_session_reports_latency_and_retry_after(exitpool_testbed_async, no_leaks):
    tb = exitpool_testbed_async
    clock = ManualClock(100.0)
    pool = Pool(tb.exits, clock=clock)
    site = tb.site.host_port
    slow = key_for(pool, "exit-0")
    tb.proxy("exit-0").slow(0.25)
    limited = key_for(pool, "exit-1")
    async with ep_aiohttp.ExitSession(pool, timeout=aiohttp.ClientTimeout(total=T)) as http:
        # Latency until the response headers: the slow proxy's quarter second shows.
        r = await http.get(tb.control_url, key=slow)
        assert r.status == 200
        # A 429's Retry-After cools that exit for that site for that long.
        await http.get(tb.site_url + "/page", key=limited)
        r = await http.get(tb.site_url + "/page", key=limited)
        assert r.status == 429
        retry_after = float(r.headers["Retry-After"])
    latency = {e["exit_id"]: e["latency"] for e in pool.snapshot()["exits"]}
    assert latency["exit-0"]["count"] == 1
    assert 0.2 <= latency["exit-0"]["p50"] < T
    assert 0 < latency["exit-1"]["p50"] < 0.2
    assert retry_after >= 10
    assert cooling_for(pool, limited, site) == retry_after
    clock.advance(retry_after - 1)
    assert cooling_for(pool, limited, site) == 1.0
    clock.advance(1)
    assert cooling_for(pool, limited, site) == 0.0


@pytest.mark.asyncio
@pytest.mark.exitpool_testbed(n_exits=3)
async def test_aiohttp_exit_session_timeouts_are_recorded_as_timeouts(exitpool_testbed_async, no_leaks):
    tb = exitpool_testbed_async
    pool = Pool(tb.exits)
    echo = await Echo().start()
    try:
        async with ep_aiohttp.ExitSession(pool, timeout=aiohttp.ClientTimeout(total=T)) as http:
            # No response headers in time: a slow proxy, from `async with`.
            tb.proxy("exit-0").slow(1.5)
            with pytest.raises(asyncio.TimeoutError):
                async with http.get(tb.control_url, key=key_for(pool, "exit-0"), timeout=aiohttp.ClientTimeout(total=0.3)):
                    raise AssertionError("no response in time")
            tb.proxy("exit-0").slow(None)
            # The headers came, the body stalls: the timeout is raised in your block (through
            # an https tunnel, where the proxy passes bytes on as they come).
            with pytest.raises(asyncio.TimeoutError):
                async with http.get(
                    echo.https_url + "/drip",
                    key=key_for(pool, "exit-1"),
                    ssl=echo.client_ssl(),
                    timeout=aiohttp.ClientTimeout(sock_read=0.3),
                ) as r:
                    assert r.status == 200
                    await r.read()
    finally:
        await echo.stop()
    assert exit_outcomes(pool, "exit-0") == {"timeout": 1}
    assert exit_outcomes(pool, "exit-1") == {"timeout": 1}


# -- httpx: retired transports, threads ---------------------------------------------------------


@pytest.mark.exitpool_testbed(n_exits=2)
def test_httpx_transport_of_rotated_credentials_closes_once_idle(exitpool_testbed, echo, no_leaks):
    # An exit whose proxy URL keeps changing (rotating credentials) must not pile up pools of
    # open connections: each replaced pool closes as soon as no response is using it.
    tb = exitpool_testbed
    a, b = tb.proxies
    ports = (a.port, b.port)
    as_a, as_b = Exit("rot", a.url, ip=a.source_ip), Exit("rot", b.url, ip=b.source_ip)
    with ep_httpx.Clients(timeout=T) as clients:
        for i in range(6):
            exit = (as_a, as_b)[i % 2]
            assert clients.client(exit).get(tb.control_url).json() == {"ip": exit.ip}
            assert established_to(*ports) == 1  # only the current pool's kept-alive connection
        assert len(clients) == 1
        # A replaced pool busy with a response stays open until that response is closed.
        old = clients.client(as_a)
        with old.stream("GET", echo.http_url + "/big") as r:
            assert clients.client(as_b).get(tb.control_url).json() == {"ip": b.source_ip}
            assert established_to(a.port) == 1
            assert len(r.read()) == Echo.BIG
        assert established_to(a.port) == 0
        # A client still held keeps working, and gives its connection back each time.
        assert old.get(tb.control_url).json() == {"ip": a.source_ip}
        assert established_to(a.port) == 0
        current = clients.client(as_b)
    assert old.is_closed and current.is_closed
    assert established_to(*ports) == 0


@pytest.mark.asyncio
@pytest.mark.exitpool_testbed(n_exits=2)
async def test_httpx_async_transport_of_rotated_credentials_closes_once_idle(exitpool_testbed_async, no_leaks):
    tb = exitpool_testbed_async
    a, b = tb.proxies
    ports = (a.port, b.port)
    as_a, as_b = Exit("rot", a.url, ip=a.source_ip), Exit("rot", b.url, ip=b.source_ip)
    async with ep_httpx.AsyncClients(timeout=T) as clients:
        for i in range(6):
            exit = (as_a, as_b)[i % 2]
            assert (await clients.client(exit).get(tb.control_url)).json() == {"ip": exit.ip}
            for _ in range(100):  # the replaced pool closes on a task of this loop
                if established_to(*ports) == 1:
                    break
                await asyncio.sleep(0.01)
            assert established_to(*ports) == 1
        assert len(clients) == 1
        made = clients.client(as_b)
    assert made.is_closed
    assert established_to(*ports) == 0


@pytest.mark.exitpool_testbed(n_exits=4)
def test_httpx_clients_is_thread_safe(exitpool_testbed, no_leaks):
    # Many threads leasing at once and asking for their exit's client: one client per exit,
    # each request leaving by its lease's exit, no error. Every round starts a new cache with
    # all threads released together, and the interpreter switches threads as often as it can,
    # so that a check-then-create race would show.
    tb = exitpool_testbed
    pool = Pool(tb.exits)
    n_threads, rounds = 12, 4  # a bounded run: 4 x 12 x 6 leases
    errors: List[BaseException] = []
    made: List[httpx.Client] = []

    def work(t: int, clients: ep_httpx.Clients, start: threading.Barrier, seen: Dict[str, set], lock: threading.Lock) -> None:
        try:
            start.wait(timeout=T)
            for i in range(6):
                with pool.lease(f"acct-{(t + i) % 12}") as lease:
                    c = clients.client(lease)
                    with lock:
                        seen.setdefault(lease.exit_id, set()).add(c)
                    if i == 5 and t % 3 == 0:
                        r = c.get(tb.control_url)
                        ep_httpx.report(lease, r)
                        assert r.json() == {"ip": lease.exit.ip}
        except BaseException as e:  # noqa: BLE001 - collected for the assertion below
            errors.append(e)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH)
    try:
        for _ in range(rounds):
            seen: Dict[str, set] = {}
            start = threading.Barrier(n_threads)
            with ep_httpx.Clients(timeout=T) as clients:
                args = (clients, start, seen, threading.Lock())
                threads = [threading.Thread(target=work, args=(t, *args)) for t in range(n_threads)]
                for th in threads:
                    th.start()
                for th in threads:
                    th.join(timeout=T + 5)
                assert not any(th.is_alive() for th in threads)
                assert errors == []
                assert {k: len(v) for k, v in seen.items()} == {e.exit_id: 1 for e in tb.exits}
                assert len(clients) == 4
                made += [c for v in seen.values() for c in v]
    finally:
        sys.setswitchinterval(interval)
    assert all(c.is_closed for c in made)
    assert pool.snapshot()["counts"]["outcomes"]["success"] > 0
