"""The loopback testbed (exitpool.testbed) and its pytest plugin, driven with real clients:
requests, httpx and aiohttp through the proxies to the site and the control endpoints."""

import asyncio
import http.client
import importlib.metadata
import socket
import threading
import time
import warnings

import aiohttp
import httpx
import pytest
import requests

from exitpool import Exit, Pool
from exitpool._outcome import _classify
from exitpool.testbed import Proxy, Testbed

pytest_plugins = ["pytester"]

T = 5.0  # every client call is bounded


def get(url, proxy, **kw):
    return requests.get(url, proxies={"http": proxy, "https": proxy}, timeout=T, **kw)


def refused(host, port):
    s = socket.socket()
    s.settimeout(T)
    try:
        s.connect((host, port))
    except ConnectionRefusedError:
        return True
    finally:
        s.close()
    return False


# -- the proxies -------------------------------------------------------------------------------


def test_requests_sees_each_proxys_own_source_ip(exitpool_testbed):
    tb = exitpool_testbed
    assert len(tb.exits) == 5
    seen = []
    for proxy, exit in zip(tb.proxies, tb.exits):
        assert isinstance(exit, Exit)
        assert exit.exit_id == proxy.name and exit.ip == proxy.source_ip and exit.proxy == proxy.url
        assert proxy.url.startswith(f"http://{proxy.user}:{proxy.password}@127.0.0.1:")
        assert proxy.password not in repr(exit)  # Exit masks the password
        r = requests.get(tb.control_url, proxies=exit.proxies, timeout=T)
        assert r.status_code == 200
        assert r.json() == {"ip": proxy.source_ip}
        seen.append(r.json()["ip"])
    assert len(set(seen)) == 5
    assert all(ip.startswith("127.") and ip != "127.0.0.1" for ip in seen)
    # the site sees the same address, on its own /ip and on its pages
    r = get(tb.site_url + "/ip", tb.proxies[2].url)
    assert r.json() == {"ip": tb.proxies[2].source_ip}
    assert get(tb.site_url + "/p/1", tb.proxies[2].url).status_code == 200
    assert tb.site.requests(tb.proxies[2].source_ip) == 1
    assert tb.site.ips() == [tb.proxies[2].source_ip]


def test_httpx_sees_the_source_ip(exitpool_testbed):
    tb = exitpool_testbed
    for proxy in tb.proxies[:2]:
        with httpx.Client(proxy=proxy.url, timeout=T) as client:
            for _ in range(3):  # keep-alive through the proxy
                assert client.get(tb.control_url).json() == {"ip": proxy.source_ip}
            assert client.get(tb.site_url + "/").status_code == 200


def test_keep_alive_post_and_chunked_bodies_are_forwarded(exitpool_testbed):
    tb = exitpool_testbed
    url = tb.proxies[0].url
    with requests.Session() as s:
        s.proxies = {"http": url}
        assert s.post(tb.site_url + "/form", data={"q": "x" * 5000}, timeout=T).status_code == 200
        assert s.post(tb.site_url + "/form", data=(b"part" for _ in range(3)), timeout=T).status_code == 200
        assert s.head(tb.site_url + "/", timeout=T).status_code == 200
        assert s.get(tb.control_url, timeout=T).json()["ip"] == tb.proxies[0].source_ip
    assert tb.proxies[0].connections == 1  # one connection to the proxy, kept alive
    assert tb.proxies[0].requests == 4


@pytest.mark.asyncio
async def test_aiohttp_with_proxy_url_proxy_auth_and_proxy_headers(exitpool_testbed_async):
    tb = exitpool_testbed_async
    p = tb.proxies[1]
    bare = f"http://127.0.0.1:{p.port}"
    headers_url = tb.controls[0].url.replace("/ip", "/headers")
    timeout = aiohttp.ClientTimeout(total=T)
    async with aiohttp.ClientSession(timeout=timeout) as s:
        async with s.get(tb.control_url, proxy=p.url) as r:
            assert await r.json() == {"ip": p.source_ip}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # aiohttp >= 3.12 deprecates proxy_auth
            async with s.get(tb.control_url, proxy=bare, proxy_auth=aiohttp.BasicAuth(p.user, p.password)) as r:
                assert await r.json() == {"ip": p.source_ip}
        # aiohttp sends proxy_headers only on CONNECT (aio-libs/aiohttp#4422): for an http://
        # target the credentials go in the request's own headers, which the proxy strips.
        async with s.get(headers_url, proxy=bare, headers={"Proxy-Authorization": p.auth_header}) as r:
            seen = await r.json()
        assert seen["ip"] == p.source_ip
        assert not {k.lower() for k in seen["headers"]} & {"proxy-authorization", "proxy-connection"}
        assert p.password not in str(seen)
        async with s.get(headers_url, proxy=p.url) as r:
            assert p.password not in await r.text()
        async with s.get(tb.site_url + "/x", proxy=tb.exits[3].proxy, headers={"X-Account": "acct"}) as r:
            assert r.status == 200 and "Welcome back, acct" in await r.text()
        async with s.get(tb.control_url, proxy=bare) as r:
            assert r.status == 407


def test_407_without_or_with_wrong_credentials(exitpool_testbed):
    tb = exitpool_testbed
    p = tb.proxies[0]
    r = get(tb.site_url, f"http://127.0.0.1:{p.port}")
    assert r.status_code == 407
    assert r.headers["Proxy-Authenticate"].startswith("Basic")
    assert get(tb.site_url, f"http://{p.user}:wrong@127.0.0.1:{p.port}").status_code == 407
    other = tb.proxies[1]  # another proxy's credentials
    assert get(tb.site_url, f"http://{other.user}:{other.password}@127.0.0.1:{p.port}").status_code == 407
    with httpx.Client(proxy=f"http://127.0.0.1:{p.port}", timeout=T) as client:
        assert client.get(tb.control_url).status_code == 407
    assert p.auth_failures == 4
    assert tb.site.requests() == 0 and tb.controls[0].requests() == 0


def test_connect_tunnel_leaves_from_the_source_ip(exitpool_testbed):
    tb = exitpool_testbed
    p = tb.proxies[3]
    control = tb.controls[0]
    conn = http.client.HTTPConnection("127.0.0.1", p.port, timeout=T)
    conn.set_tunnel(control.host, control.port, headers={"Proxy-Authorization": p.auth_header})
    try:
        for _ in range(2):  # two requests through one tunnel
            conn.request("GET", "/ip")
            resp = conn.getresponse()
            assert resp.status == 200
            assert resp.read() == b'{"ip": "' + p.source_ip.encode() + b'"}'
    finally:
        conn.close()
    assert p.tunnels == 1

    conn = http.client.HTTPConnection("127.0.0.1", p.port, timeout=T)
    conn.set_tunnel(control.host, control.port)  # no credentials
    with pytest.raises(OSError, match="407"):
        conn.request("GET", "/ip")
    conn.close()


def test_no_destination_off_loopback():
    with pytest.raises(ValueError, match="127"):
        Proxy("x", source_ip="10.0.0.1")
    with pytest.raises(ValueError, match="127"):
        Testbed(2, source_ips=["127.0.1.1", "192.0.2.1"])
    with Testbed(1, n_controls=1) as tb:
        p = tb.proxies[0]
        r = get("http://192.0.2.1/", p.url)  # TEST-NET: refused by the proxy before any connect
        assert r.status_code == 502 and "127.x" in r.text
        conn = http.client.HTTPConnection("127.0.0.1", p.port, timeout=T)
        conn.set_tunnel("example.com", 443, headers={"Proxy-Authorization": p.auth_header})
        with pytest.raises(OSError, match="502"):
            conn.request("GET", "/")
        conn.close()
        assert p.upstream_errors == 0  # never even tried


def test_kill_refuses_connections_and_revive_restores(exitpool_testbed):
    tb = exitpool_testbed
    p = tb.proxies[0]
    session = requests.Session()
    session.proxies = {"http": p.url}
    assert session.get(tb.control_url, timeout=T).status_code == 200  # a kept-alive connection

    p.kill()
    assert p.killed
    assert refused("127.0.0.1", p.port)
    errors = []
    with pytest.raises(requests.exceptions.ConnectionError) as e:
        session.get(tb.control_url, timeout=T)
    errors.append(e.value)
    with pytest.raises(requests.exceptions.ProxyError) as e:
        get(tb.site_url, p.url)
    errors.append(e.value)
    with httpx.Client(proxy=p.url, timeout=T) as client, pytest.raises(httpx.TransportError) as e:
        client.get(tb.control_url)
    errors.append(e.value)

    async def with_aiohttp():
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=T)) as s:
            async with s.get(tb.control_url, proxy=p.url):
                pass

    with pytest.raises(aiohttp.ClientConnectionError) as e:
        asyncio.run(with_aiohttp())
    errors.append(e.value)
    assert [_classify(err) for err in errors] == ["connect"] * 4
    # the others are untouched
    assert get(tb.control_url, tb.proxies[1].url).json()["ip"] == tb.proxies[1].source_ip

    p.revive()
    assert not p.killed
    assert session.get(tb.control_url, timeout=T).json() == {"ip": p.source_ip}
    with httpx.Client(proxy=p.url, timeout=T) as client:
        assert client.get(tb.control_url).json() == {"ip": p.source_ip}
    p.kill()  # twice in a row, and killing a killed proxy, are fine
    p.kill()
    p.revive()
    p.revive()
    assert get(tb.control_url, p.url).status_code == 200
    session.close()


def test_kill_closes_an_open_tunnel(exitpool_testbed):
    tb = exitpool_testbed
    p = tb.proxies[2]
    conn = http.client.HTTPConnection("127.0.0.1", p.port, timeout=T)
    conn.set_tunnel(tb.controls[0].host, tb.controls[0].port, headers={"Proxy-Authorization": p.auth_header})
    conn.request("GET", "/ip")
    assert conn.getresponse().read()
    p.kill()
    with pytest.raises((ConnectionError, http.client.HTTPException)):
        conn.request("GET", "/ip")
        conn.getresponse()
    conn.close()


def test_lease_through_a_killed_exit_is_recorded_as_a_connect_failure(exitpool_testbed):
    tb = exitpool_testbed
    pool = Pool(tb.exits[:2], strategy="round_robin")
    tb.proxy(tb.exits[0].exit_id).kill()
    outcomes = []
    for _ in range(2):
        try:
            with pool.lease(site=tb.site.host_port) as lease:
                r = requests.get(tb.site_url + "/", proxies=lease.proxies, timeout=T)
                lease.report(status=r.status_code)
                outcomes.append((lease.exit_id, r.status_code))
        except requests.exceptions.ConnectionError:
            outcomes.append((lease.exit_id, "connect"))
    assert sorted(outcomes) == [("exit-0", "connect"), ("exit-1", 200)]
    counts = {e["exit_id"]: e["outcomes"] for e in pool.snapshot()["exits"]}
    assert counts["exit-0"]["connect"] == 1 and counts["exit-0"]["success"] == 0
    assert counts["exit-1"]["success"] == 1


def test_slow_delays_responses(exitpool_testbed):
    tb = exitpool_testbed
    p = tb.proxies[0]
    p.slow(0.5)
    t0 = time.monotonic()
    assert get(tb.control_url, p.url).status_code == 200
    assert time.monotonic() - t0 >= 0.5
    with pytest.raises(requests.exceptions.Timeout) as e:
        requests.get(tb.control_url, proxies={"http": p.url}, timeout=0.1)
    assert _classify(e.value) == "timeout"
    p.slow(0)
    t0 = time.monotonic()
    assert get(tb.control_url, p.url).status_code == 200
    assert time.monotonic() - t0 < 0.5
    with pytest.raises(ValueError):
        p.slow(-1)


def test_flaky_drops_that_share_of_connections(exitpool_testbed):
    tb = exitpool_testbed
    p = tb.proxies[0]

    def run(n):
        ok = 0
        for _ in range(n):
            try:
                ok += get(tb.control_url, p.url).status_code == 200
            except requests.exceptions.ConnectionError as e:
                assert _classify(e) == "connect"
        return ok

    p.flaky(1.0)
    assert run(3) == 0
    p.flaky(0.5, seed=7)
    first = run(20)
    p.flaky(0.5, seed=7)
    assert run(20) == first  # reproducible with a seed
    assert 4 <= first <= 16
    p.flaky(0)
    assert run(3) == 3
    assert p.dropped == 3 + 2 * (20 - first)
    with pytest.raises(ValueError):
        p.flaky(1.5)


def test_drift_changes_the_observed_ip(exitpool_testbed):
    tb = exitpool_testbed
    p = tb.proxies[1]
    exit = tb.exits[1]
    assert get(tb.control_url, p.url).json()["ip"] == exit.ip
    p.drift("127.0.9.9")
    assert get(tb.control_url, p.url).json()["ip"] == "127.0.9.9"
    assert exit.ip == "127.0.1.2"  # the exit the pool holds still believes the old address
    assert p.exit().ip == "127.0.9.9"
    with pytest.raises(ValueError):
        p.drift("8.8.8.8")


# -- the site ----------------------------------------------------------------------------------


@pytest.mark.exitpool_testbed(n_exits=2, rate=0.5, burst=5, ban_after=3)
def test_rate_limit_then_ban_that_persists(exitpool_testbed):
    tb = exitpool_testbed
    site, a, b = tb.site, tb.proxies[0], tb.proxies[1]
    with requests.Session() as s:
        s.proxies = {"http": a.url}
        statuses = [s.get(tb.site_url + f"/p/{i}", timeout=T).status_code for i in range(5)]
        assert statuses == [200] * 5  # the burst
        r = s.get(tb.site_url + "/p/5", timeout=T)
        assert r.status_code == 429 and int(r.headers["Retry-After"]) >= 1
        # the third 429 within ban_window bans the IP
        assert [s.get(tb.site_url + "/", timeout=T).status_code for _ in range(3)] == [429, 429, 403]
        assert site.is_banned(a.source_ip)
        site.configure(rate=1000, burst=1000)  # no rate limit left to hit: the ban stays
        assert s.get(tb.site_url + "/", timeout=T).status_code == 403
        assert s.get(tb.control_url, timeout=T).status_code == 200  # control endpoints do not care
    assert get(tb.site_url, b.url).status_code == 200  # other IPs are unaffected
    assert site.outcomes(a.source_ip) == {"ok": 5, "rate_limited": 3, "banned": 2}
    assert site.statuses(a.source_ip) == {200: 5, 429: 3, 403: 2}
    assert site.stats()["banned"] == [a.source_ip]

    site.ban(b.source_ip)
    assert get(tb.site_url, b.url).status_code == 403
    site.unban(b.source_ip)
    assert get(tb.site_url, b.url).status_code == 200


@pytest.mark.exitpool_testbed(n_exits=2, n_sites=2)
def test_sites_are_independent(exitpool_testbed):
    tb = exitpool_testbed
    one, two = tb.sites
    assert tb.site is one and tb.site_url == one.url and one.host_port != two.host_port
    one.ban(tb.exits[0].ip)  # burned on one site...
    assert get(one.url + "/", tb.exits[0].proxy).status_code == 403
    assert get(two.url + "/", tb.exits[0].proxy).status_code == 200  # ...fine on the other
    assert two.requests(tb.exits[0].ip) == 1 and one.statuses() == {403: 1}


def test_captcha_for_poor_reputation_and_at_a_rate(exitpool_testbed):
    tb = exitpool_testbed
    site, a, b = tb.site, tb.proxies[0], tb.proxies[1]
    site.flag(a.source_ip)
    r = get(tb.site_url + "/item", a.url)
    assert r.status_code == 200 and "captcha" in r.text and r.headers["X-Captcha"] == "1"
    r = get(tb.site_url + "/item", b.url)
    assert r.status_code == 200 and "captcha" not in r.text
    site.unflag(a.source_ip)
    assert "captcha" not in get(tb.site_url + "/item", a.url).text
    site.configure(captcha_rate=1.0)
    assert "captcha" in get(tb.site_url + "/item", b.url).text
    assert site.outcomes() == {"captcha": 2, "ok": 2}


@pytest.mark.exitpool_testbed(seed=3, captcha_rate=0.5, rate=100)
def test_captcha_rate_is_a_share_and_reproducible(exitpool_testbed):
    tb = exitpool_testbed
    texts = ["captcha" in get(tb.site_url + "/", tb.proxies[i % 5].url).text for i in range(30)]
    assert 5 <= sum(texts) <= 25
    with Testbed(2, seed=3, captcha_rate=0.5, rate=100, n_controls=1) as again:
        texts2 = ["captcha" in get(again.site_url + "/", again.proxies[i % 2].url).text for i in range(30)]
    assert texts2 == texts


def test_site_incident_answers_503_on_every_exit(exitpool_testbed):
    tb = exitpool_testbed
    tb.site.incident(True)
    assert tb.site.in_incident
    for exit in tb.exits:
        r = requests.get(tb.site_url + "/", proxies=exit.proxies, timeout=T)
        assert r.status_code == 503 and "Retry-After" in r.headers
        assert requests.get(tb.control_url, proxies=exit.proxies, timeout=T).status_code == 200
    assert tb.site.statuses() == {503: 5}
    tb.site.incident(False)
    assert all(get(tb.site_url + "/", e.proxy).status_code == 200 for e in tb.exits)


def test_an_account_seen_from_a_new_ip_is_challenged(exitpool_testbed):
    tb = exitpool_testbed
    site, a, b = tb.site, tb.proxies[0], tb.proxies[1]
    hdr = {"X-Account": "alice"}
    for _ in range(3):
        r = get(tb.site_url + "/feed", a.url, headers=hdr)
        assert r.status_code == 200 and "verify your identity" not in r.text
    r = get(tb.site_url + "/feed", b.url, headers=hdr)
    assert r.status_code == 200 and "verify your identity" in r.text and r.headers["X-Challenge"] == "verify"
    assert site.account_ips("alice") == [a.source_ip, b.source_ip]
    assert site.teleports("alice") == 1 and site.challenges("alice") == 1
    # once known, the second IP is not challenged again, but every switch is a teleport
    assert "verify" not in get(tb.site_url + "/feed", b.url, headers=hdr).text
    assert "verify" not in get(tb.site_url + "/feed", a.url, headers=hdr).text
    assert site.teleports("alice") == 2 and site.challenges("alice") == 1
    # another account on b is fine, and requests with no account are not tracked
    assert "verify" not in get(tb.site_url + "/feed", b.url, headers={"X-Account": "bob"}).text
    assert site.accounts() == {"alice": [a.source_ip, b.source_ip], "bob": [b.source_ip]}
    assert site.outcomes() == {"ok": 6, "challenge": 1}


def test_a_keyed_lease_keeps_its_account_on_one_ip(exitpool_testbed):
    tb = exitpool_testbed
    pool = Pool(tb.exits)
    for i in range(6):
        key = f"acct-{i % 3}"
        with pool.lease(key, site=tb.site.host_port) as lease:
            r = requests.get(tb.site_url + "/home", proxies=lease.proxies, headers={"X-Account": key}, timeout=T)
            lease.report(status=r.status_code, captcha="captcha" in r.text or "verify your identity" in r.text)
    for i in range(3):
        assert tb.site.account_ips(f"acct-{i}") == [pool.assign(f"acct-{i}").ip]
    assert tb.site.teleports() == 0


# -- controls, lifecycle -----------------------------------------------------------------------


def test_control_endpoints_can_fail_garble_and_die(exitpool_testbed):
    tb = exitpool_testbed
    c0, c1 = tb.controls
    assert tb.control_urls == [c0.url, c1.url] and tb.control_url == c0.url
    p = tb.proxies[0]
    c0.fail(500)
    assert get(c0.url, p.url).status_code == 500
    c0.heal()
    c0.garble()
    r = get(c0.url, p.url)
    assert r.status_code == 200 and "ip" not in r.text
    c0.heal()
    c0.kill()
    assert get(c0.url, p.url).status_code == 502  # the proxy cannot reach it
    assert get(c1.url, p.url).json() == {"ip": p.source_ip}
    c0.revive()
    assert get(c0.url, p.url).json() == {"ip": p.source_ip}
    assert c0.requests(p.source_ip) == 3 and c1.requests() == 1


def test_the_testbed_frees_its_ports():
    tb = Testbed(3)
    with tb:
        tb.proxies[1].kill()  # a killed proxy still holds its port
        addresses = [p.address for p in tb.proxies] + [tb.site.address] + [c.address for c in tb.controls]
        assert get(tb.control_url, tb.proxies[0].url).status_code == 200
    assert all(refused(host, port) for host, port in addresses)
    assert not [t for t in threading.enumerate() if t.name == "exitpool-testbed"]
    # a port that was held can be bound again at once
    s = socket.socket()
    s.bind(addresses[1])
    s.close()
    tb.close()  # closing twice is fine
    with pytest.raises(RuntimeError):
        tb.start_thread()


@pytest.mark.asyncio
async def test_async_testbed_frees_its_ports_and_runs_controls_on_the_loop():
    async with Testbed(2, n_controls=1) as tb:
        p = tb.proxies[0]
        p.kill()  # from the loop's own thread: no deadlock
        p.revive()
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=T)) as s:
            async with s.get(tb.control_url, proxy=p.url) as r:
                assert (await r.json())["ip"] == p.source_ip
        addresses = [x.address for x in tb.proxies] + [tb.site.address, tb.controls[0].address]
    assert all(refused(host, port) for host, port in addresses)
    await tb.aclose()  # closing twice is fine
    with pytest.raises(ValueError):
        Testbed(0)


def test_bad_options_are_refused():
    with pytest.raises(TypeError, match="rates"):
        Testbed(2, rates=3)
    with pytest.raises(ValueError):
        Testbed(2, rate=0)
    with pytest.raises(ValueError):
        Testbed(2, source_ips=["127.0.1.1"])


# -- the pytest plugin -------------------------------------------------------------------------


def test_the_plugin_is_registered_by_entry_point():
    eps = importlib.metadata.entry_points()
    group = eps.select(group="pytest11") if hasattr(eps, "select") else eps.get("pytest11", [])
    assert {(ep.name, ep.value) for ep in group} >= {("exitpool", "exitpool.pytest_plugin")}


def test_the_plugin_fixtures_in_a_users_suite(pytester):
    pytester.makeini("[pytest]\nasyncio_mode = strict\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(
        """
        import aiohttp, pytest, requests

        def test_sync(exitpool_testbed):
            tb = exitpool_testbed
            assert len(tb.exits) == 5
            r = requests.get(tb.control_url, proxies=tb.exits[0].proxies, timeout=5)
            assert r.json() == {"ip": tb.exits[0].ip}

        @pytest.mark.exitpool_testbed(n_exits=2, rate=3)
        def test_marker(exitpool_testbed):
            assert len(exitpool_testbed.exits) == 2 and exitpool_testbed.site.rate == 3

        @pytest.mark.asyncio
        @pytest.mark.exitpool_testbed(n_exits=1)
        async def test_async(exitpool_testbed_async):
            tb = exitpool_testbed_async
            async with aiohttp.ClientSession() as s:
                async with s.get(tb.control_url, proxy=tb.exits[0].proxy) as r:
                    assert (await r.json())["ip"] == tb.exits[0].ip
        """
    )
    # (hypothesis's plugin, if installed, imports hypothesis at the end of a session: seconds)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:hypothesispytest", "--strict-markers")
    result.assert_outcomes(passed=3)
