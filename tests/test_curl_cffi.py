"""exitpool.curl_cffi driven with real curl_cffi through the loopback testbed: every account
leaves by its exit (HTTP and SOCKS5 exits), stays on it, two exits on one gateway host:port with
different credentials are two IPs even through one session, nothing in the environment or a
call reroutes a request, fresh=True gives a lease a new tunnel, outcomes land in the pool, and
no proxy password shows anywhere."""

from __future__ import annotations

import asyncio
import logging

import pytest

pytest.importorskip("curl_cffi")

from curl_cffi.requests import AsyncSession, Session  # noqa: E402
from curl_cffi.requests.exceptions import RequestException  # noqa: E402

from exitpool import Exit, Pool  # noqa: E402
from exitpool import curl_cffi as ep_curl  # noqa: E402
from exitpool._outcome import _classify_failure  # noqa: E402
from exitpool.testbed import ProviderGateway, Testbed  # noqa: E402

T = 5.0
N = 50  # requests per account
PROXY_ENV = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


def gateway_exits(gw: ProviderGateway, tokens):
    """Exits on one gateway host:port that differ only in their credentials (session token)."""
    return [Exit(f"gw-{t}", f"http://{gw.user}-session-{t}:{gw.password}@127.0.0.1:{gw.port}") for t in tokens]


def key_for(pool, exit_id):
    """An account key whose ring exit is ``exit_id``."""
    return next(f"acct-{i}" for i in range(10_000) if pool.assign(f"acct-{i}").exit_id == exit_id)


def ip_of(session, url) -> str:
    r = session.get(url, timeout=T)
    assert r.status_code == 200, r.status_code
    return r.json()["ip"]


@pytest.fixture
def world():
    # exit-0 http, exit-1 socks5, exit-2 socks5h, each with a user name and password, and a
    # provider gateway whose session tokens are exits on one host:port.
    with Testbed(n_exits=3, scheme=["http", "socks5", "socks5h"], gateways=[ProviderGateway(lifetime=None)]) as tb:
        yield tb


def twin_exits(tb):
    """Per proxy scheme, a second exit on the same host:port with its own credentials and
    its own source address."""
    return [p.add_user(f"twin{i}", source_ip=f"127.0.6.{i + 1}") for i, p in enumerate(tb.proxies)]


def test_accounts_keep_their_exit_ip_across_50_requests(world, capfd, caplog):
    caplog.set_level(logging.DEBUG)
    tb = world
    pool = Pool([*tb.exits, *twin_exits(tb), *gateway_exits(tb.gateway, ["a", "b"])])
    seen = {}
    # One account per exit: every scheme, the twins on one host:port and the gateway's tokens.
    for account in [key_for(pool, e.exit_id) for e in pool.exits]:
        with pool.lease(account) as lease, ep_curl.session_for(lease, impersonate="chrome") as s:
            ips = {ip_of(s, tb.control_url) for _ in range(N)}
            assert len(ips) == 1, ips
            ip = ips.pop()
            if lease.exit.ip is not None:
                assert ip == lease.exit.ip
            else:  # a gateway exit: the address its session token holds at the gateway
                assert ip == tb.gateway.ip_of(lease.exit_id.removeprefix("gw-"))
            seen.setdefault(lease.exit_id, set()).add(ip)
    # Every exit that served an account showed one address, and no two exits shared one.
    assert all(len(v) == 1 for v in seen.values())
    assert len({ip for v in seen.values() for ip in v}) == len(seen)
    assert sorted(seen) == sorted(e.exit_id for e in pool.exits)
    assert_no_secrets(pool, capfd, caplog)


@pytest.mark.parametrize("scheme", ["http", "socks5", "socks5h", "gateway"])
def test_two_exits_on_one_host_port_are_two_ips_through_one_session(world, scheme):
    tb = world
    if scheme == "gateway":
        a, b = gateway_exits(tb.gateway, ["a", "b"])
        ip_a, ip_b = None, None
    else:
        i = ["http", "socks5", "socks5h"].index(scheme)
        a, b = tb.exits[i], twin_exits(tb)[i]
        assert (a.scheme, a.host, a.port) == (b.scheme, b.host, b.port) and a.username != b.username
        ip_a, ip_b = a.ip, b.ip
    with Session(impersonate="chrome") as s:
        # One session, kept for its cookies, pointed at each exit in turn: a connection made
        # with one exit's credentials never carries the other's requests.
        ips = []
        for _ in range(10):
            for exit in (a, b):
                ep_curl.session_for(exit, s)
                ips.append(ip_of(s, tb.control_url))
        if scheme == "gateway":
            ip_a, ip_b = tb.gateway.ip_of("a"), tb.gateway.ip_of("b")
        assert set(ips[0::2]) == {ip_a}
        assert set(ips[1::2]) == {ip_b}
        assert ip_a != ip_b


@pytest.mark.parametrize("no_proxy", [None, "*"])
def test_environment_and_per_call_proxies_never_override_the_exit(world, monkeypatch, no_proxy):
    tb = world
    exit, other = tb.exits[0], tb.exits[1]
    for name in PROXY_ENV:
        monkeypatch.setenv(name, other.proxy)
    if no_proxy is not None:
        monkeypatch.setenv("NO_PROXY", no_proxy)
        monkeypatch.setenv("no_proxy", no_proxy)
    with ep_curl.session_for(exit) as s:
        assert ip_of(s, tb.control_url) == exit.ip
        r = s.get(tb.control_url, proxy=other.proxy, timeout=T)
        assert r.json()["ip"] == exit.ip
        r = s.get(tb.control_url, proxies={"all": other.proxy}, proxy_auth=(other.username, other.password), timeout=T)
        assert r.json()["ip"] == exit.ip


def test_connections_are_kept_per_exit_and_fresh_opens_a_new_tunnel(world):
    tb = world
    exit = tb.exits[0]
    proxy = tb.proxy(exit.exit_id)
    with Session() as s:
        ep_curl.session_for(exit, s)
        for _ in range(5):
            ip_of(s, tb.control_url)
        first = proxy.connections
        assert first == 1  # one connection to the exit, reused
        ep_curl.session_for(exit, s)  # the same exit again: the connection is kept
        ip_of(s, tb.control_url)
        assert proxy.connections == first
        ep_curl.session_for(exit, s, fresh=True)  # a new lease that wants a new tunnel
        for _ in range(3):
            ip_of(s, tb.control_url)
        assert proxy.connections == first + 1
        ep_curl.session_for(tb.exits[1], s)
        assert ip_of(s, tb.control_url) == tb.exits[1].ip
        ep_curl.session_for(exit, s)  # back: the old connection was dropped with the move
        assert ip_of(s, tb.control_url) == exit.ip
        assert proxy.connections == first + 2


def test_a_kept_session_keeps_its_cookies_across_exits(world):
    tb = world
    with Session() as s:
        s.cookies.set("sid", "account-cookie", domain=tb.site.host_port.split(":")[0])
        ep_curl.session_for(tb.exits[0], s)
        ep_curl.session_for(tb.exits[1], s)
        assert s.cookies.get("sid") == "account-cookie"
        assert ip_of(s, tb.control_url) == tb.exits[1].ip


def test_options_for_a_passed_session_are_refused(world):
    with Session() as s, pytest.raises(TypeError, match="impersonate"):
        ep_curl.session_for(world.exits[0], s, impersonate="chrome")


def exit_outcomes(pool, exit_id):
    for e in pool.snapshot()["exits"]:
        if e["exit_id"] == exit_id:
            return {k: v for k, v in e["outcomes"].items() if v}
    raise KeyError(exit_id)


class RecordingLease:
    def __init__(self):
        self.reported = {}

    def report(self, **kwargs):
        self.reported = kwargs


def test_report_records_each_outcome(world, capfd, caplog):
    tb = world
    pool = Pool(tb.exits)
    site = tb.site.host_port
    tb.site.ban(tb.exits[1].ip)
    tb.site.flag(tb.exits[2].ip)
    for exit in tb.exits:
        with pool.lease(None, site=site, avoid=[e.exit_id for e in tb.exits if e != exit]) as lease:
            assert lease.exit_id == exit.exit_id
            with ep_curl.session_for(lease) as s:
                ep_curl.report(lease, s.get(tb.site_url + "/page", timeout=T), captcha=lambda r: "captcha" in r.text)
    assert exit_outcomes(pool, "exit-0") == {"success": 1}
    assert exit_outcomes(pool, "exit-1") == {"block": 1}
    assert exit_outcomes(pool, "exit-2") == {"captcha": 1}
    rec = RecordingLease()
    with ep_curl.session_for(tb.exits[0]) as s:
        r = s.get(tb.site_url + "/page", timeout=T)
    ep_curl.report(rec, r)
    assert rec.reported == {"status": 200, "captcha": False, "latency": r.elapsed.total_seconds()}
    assert_no_secrets(pool, capfd, caplog)


def test_errors_leaving_the_block_are_classified_without_credentials(world, capfd, caplog):
    tb = world
    port = tb.proxy("exit-0").port
    # A wrong password: the gateway's refusal (407 to CONNECT), a connect failure of the exit.
    bad = Exit("bad", f"http://{tb.exits[0].username}:wrong-secret-123@127.0.0.1:{port}")
    pool = Pool([bad])
    with pytest.raises(RequestException) as info:
        with pool.lease("acct") as lease, ep_curl.session_for(lease) as s:
            s.get(tb.control_url.replace("http://", "https://"), timeout=T)
    assert "wrong-secret-123" not in str(info.value)
    assert exit_outcomes(pool, "bad") == {"connect": 1}
    assert _classify_failure(info.value) == ("connect", 407)  # what the Scrapy-style callers read
    # A refused connection to the exit itself.
    tb.proxy("exit-1").kill()
    pool = Pool([tb.exits[1]])
    with pytest.raises(RequestException):
        with pool.lease("acct") as lease, ep_curl.session_for(lease) as s:
            s.get(tb.control_url, timeout=T)
    assert exit_outcomes(pool, "exit-1") == {"connect": 1}
    assert_no_secrets(pool, capfd, caplog, extra=["wrong-secret-123"])


@pytest.mark.asyncio
async def test_async_sessions_per_account_and_two_exits_on_one_host_port():
    async with Testbed(n_exits=2, scheme=["http", "socks5h"], gateways=[ProviderGateway(lifetime=None)]) as tb:
        a, b = gateway_exits(tb.gateway, ["a", "b"])
        exits = [tb.exits[0], tb.exits[1], a, b]

        async def account(exit):
            async with ep_curl.async_session_for(exit, impersonate="chrome") as s:
                ips = set()
                for _ in range(N):
                    r = await s.get(tb.control_url, timeout=T)
                    ips.add(r.json()["ip"])
                return ips

        results = await asyncio.gather(*(account(e) for e in exits))
        assert results[0] == {tb.exits[0].ip} and results[1] == {tb.exits[1].ip}
        assert results[2] == {tb.gateway.ip_of("a")} and results[3] == {tb.gateway.ip_of("b")}
        # One AsyncSession (one multi handle, one connection cache) moved between the two
        # gateway exits: each request leaves with the credentials it was bound to.
        async with AsyncSession() as s:
            for _ in range(5):
                for exit, token in ((a, "a"), (b, "b")):
                    ep_curl.async_session_for(exit, s)
                    r = await s.get(tb.control_url, timeout=T)
                    assert r.json()["ip"] == tb.gateway.ip_of(token)
            # Same exit again: its connection is kept; fresh=True: a new tunnel for the lease.
            proxy = tb.proxy("exit-0")
            ep_curl.async_session_for(tb.exits[0], s)
            for _ in range(3):
                assert (await s.get(tb.control_url, timeout=T)).json()["ip"] == tb.exits[0].ip
            before = proxy.connections
            ep_curl.async_session_for(tb.exits[0], s)
            await s.get(tb.control_url, timeout=T)
            assert proxy.connections == before
            ep_curl.async_session_for(tb.exits[0], s, fresh=True)
            for _ in range(3):
                assert (await s.get(tb.control_url, timeout=T)).json()["ip"] == tb.exits[0].ip
            assert proxy.connections == before + 1


def assert_no_secrets(pool, capfd, caplog, extra=()):
    secrets = [e.password for e in pool.exits if e.password] + list(extra)
    out, err = capfd.readouterr()
    text = out + err + caplog.text + repr(pool) + repr(pool.snapshot())
    for secret in secrets:
        assert secret not in text
