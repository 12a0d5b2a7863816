"""exitpool.probe over real aiohttp on loopback: a tiny forward proxy of our own (absolute-form
GET, Basic Proxy-Authorization, upstream bound to a 127.0.1.N source so /ip sees that address)
and aiohttp control endpoints on 127.0.0.1. No internet; every wait is bounded."""

from __future__ import annotations

import asyncio
import base64
import importlib
import logging
import socket
import sys
import time
from urllib.parse import urlsplit

import pytest
import pytest_asyncio
from aiohttp import web

from exitpool import Exit, InvalidInput, ManualClock, Pool
from exitpool.probe import ProbeLoop, ProbeResult, probe

USER, PASSWORD = "probe-user", "s3cr3t:p@ss/word"


class MiniProxy:
    """An HTTP forward proxy for absolute-form GETs, one request per connection. Its upstream
    connection leaves from ``source_ip``; ``delay`` stalls every request; ``auth`` is the
    (user, password) it demands, or None."""

    def __init__(self, source_ip="127.0.1.1", auth=(USER, PASSWORD), delay=0.0):
        self.source_ip = source_ip
        self.broken = False  # answer 502 to everything, as a proxy with no way out does
        self.auth = auth
        self.delay = delay
        self.requests = 0
        self.seen_auth = []
        self._server = None
        self._tasks = set()

    @property
    def port(self):
        return self._server.sockets[0].getsockname()[1]

    def exit(self, exit_id, *, ip=None, user=USER, password=PASSWORD):
        cred = f"{user}:{password.replace('@', '%40').replace('/', '%2F')}@" if user else ""
        return Exit(exit_id, f"http://{cred}127.0.0.1:{self.port}", ip=ip)

    async def start(self):
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return self

    async def close(self):
        self._server.close()
        for t in list(self._tasks):
            t.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=2)
        await asyncio.wait_for(self._server.wait_closed(), 2)

    async def _handle(self, reader, writer):
        task = asyncio.current_task()
        self._tasks.add(task)
        try:
            await asyncio.wait_for(self._serve(reader, writer), 5)
        except (asyncio.TimeoutError, ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._tasks.discard(task)
            writer.close()

    async def _serve(self, reader, writer):
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, target, _ = lines[0].split(" ", 2)
        headers = {}
        for line in lines[1:]:
            if ":" in line:
                k, v = line.split(":", 1)
                headers[k.strip().lower()] = v.strip()
        self.requests += 1
        self.seen_auth.append(headers.get("proxy-authorization"))
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.auth is not None:
            want = "Basic " + base64.b64encode(f"{self.auth[0]}:{self.auth[1]}".encode()).decode()
            if headers.get("proxy-authorization") != want:
                writer.write(
                    b"HTTP/1.1 407 Proxy Authentication Required\r\n"
                    b'Proxy-Authenticate: Basic realm="mini"\r\nContent-Length: 0\r\n'
                    b"Connection: close\r\n\r\n"
                )
                await writer.drain()
                return
        if method == "CONNECT":  # authenticated, but tunnels are not offered here
            writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            await writer.drain()
            return
        if self.broken:
            writer.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            await writer.drain()
            return
        u = urlsplit(target)
        if method != "GET" or u.scheme != "http" or u.hostname != "127.0.0.1":
            writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            await writer.drain()
            return
        try:
            up_r, up_w = await asyncio.open_connection(u.hostname, u.port, local_addr=(self.source_ip, 0))
        except OSError:
            writer.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            await writer.drain()
            return
        try:
            path = u.path + (f"?{u.query}" if u.query else "")
            up_w.write(f"GET {path or '/'} HTTP/1.1\r\nHost: {u.netloc}\r\nConnection: close\r\n\r\n".encode())
            await up_w.drain()
            writer.write(await up_r.read())  # Connection: close, so EOF ends the response
            await writer.drain()
        finally:
            up_w.close()


async def _ip(request):
    return web.json_response({"ip": request.remote})


async def _down(request):
    return web.Response(status=503, text="down for maintenance")


async def _garbage(request):
    return web.Response(text="<html>hello</html>")


@pytest_asyncio.fixture
async def control():
    """A control site on 127.0.0.1: /ip, /down (503), /garbage (no IP in the body)."""
    app = web.Application()
    app.router.add_get("/ip", _ip)
    app.router.add_get("/down", _down)
    app.router.add_get("/garbage", _garbage)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    base = f"http://127.0.0.1:{port}"
    yield base
    await runner.cleanup()


@pytest.fixture
def urls(control):
    # Three endpoints on one site; distinct query strings make them distinct URLs.
    return [f"{control}/ip?ctl={i}" for i in range(3)]


@pytest_asyncio.fixture
async def proxies():
    made = []

    async def make(**kw):
        p = await MiniProxy(**kw).start()
        made.append(p)
        return p

    yield make
    for p in made:
        await p.close()


def dead_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def no_secret(*texts):
    for t in texts:
        assert PASSWORD not in t and "s3cr3t" not in t
        assert base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode() not in t


# --- probe() -----------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_healthy_exit_probes_ok_with_its_address(proxies, urls, caplog):
    caplog.set_level(logging.DEBUG, logger="exitpool")
    p = await proxies(source_ip="127.0.1.2")
    exit = p.exit("e1", ip="127.0.1.2")
    r = await probe(exit, urls, timeout=3)
    assert isinstance(r, ProbeResult)
    assert (r.ok, r.observed_ip, r.drifted, r.error) == (True, "127.0.1.2", False, None)
    assert r.answered == 3 and r.quorum == 2
    assert 0 < r.latency < 3
    assert [e.ip for e in r.endpoints] == ["127.0.1.2"] * 3
    assert all(e.status == 200 for e in r.endpoints)
    # The credentials reached the proxy, and nowhere else.
    expected = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    assert p.seen_auth == [expected] * 3
    no_secret(repr(r), r.detail, caplog.text)


@pytest.mark.asyncio
async def test_exit_without_ip_is_never_drifted(proxies, urls):
    p = await proxies(source_ip="127.0.1.3")
    r = await probe(p.exit("e1"), urls, timeout=3)
    assert r.ok and r.observed_ip == "127.0.1.3" and not r.drifted and r.expected_ip is None


@pytest.mark.asyncio
async def test_drifted_exit_is_seen_and_recorded_as_an_event(proxies, urls):
    p = await proxies(source_ip="127.0.1.9")  # the token now lands on another address
    exit = p.exit("e1", ip="127.0.1.1")
    r = await probe(exit, urls, timeout=3)
    assert r.ok and r.observed_ip == "127.0.1.9" and r.expected_ip == "127.0.1.1" and r.drifted
    assert "drifted" in r.detail
    pool = Pool([exit, Exit("e2", "http://127.0.0.1:1")])
    seen = pool.events()[-1]["seq"] + 1 if pool.events() else 0
    assert pool.record_probe(exit.exit_id, r.ok, observed_ip=r.observed_ip) is True
    drift = [e for e in pool.events(since=seen) if e["kind"] == "exit_drifted"]
    assert len(drift) == 1 and drift[0]["exit_id"] == "e1"
    assert "127.0.1.9" in drift[0]["message"] and "127.0.1.1" in drift[0]["message"]


@pytest.mark.asyncio
async def test_wrong_credentials_are_a_proxy_error(proxies, urls, caplog):
    caplog.set_level(logging.DEBUG, logger="exitpool")
    p = await proxies()
    r = await probe(p.exit("e1", password="wrong-one"), urls, timeout=3)
    assert not r.ok and r.error == "proxy" and r.observed_ip is None and r.latency is None
    assert {(e.error, e.status) for e in r.endpoints} == {("proxy", 407)}
    no_secret(repr(r), r.detail, caplog.text)
    assert "wrong-one" not in repr(r) + caplog.text


@pytest.mark.asyncio
async def test_no_credentials_at_all_is_a_proxy_error(proxies, urls):
    p = await proxies()
    r = await probe(p.exit("e1", user=None), urls, timeout=3)
    assert r.error == "proxy" and p.seen_auth == [None] * 3


@pytest.mark.asyncio
async def test_https_endpoint_credentials_go_on_the_connect(proxies, control):
    p = await proxies()
    port = urlsplit(control).port
    https = [f"https://127.0.0.1:{port}/ip"]
    r = await probe(p.exit("e1", password="wrong-one"), https, timeout=3)
    assert r.error == "proxy" and r.endpoints[0].status == 407
    r = await probe(p.exit("e1"), https, timeout=3)  # authenticated; this proxy refuses tunnels
    assert r.error == "proxy" and r.endpoints[0].status == 403
    expected = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    assert p.seen_auth[-1] == expected
    no_secret(repr(r), *(e.detail for e in r.endpoints))


@pytest.mark.asyncio
async def test_dead_port_is_a_connect_error(urls):
    exit = Exit("e1", f"http://{USER}:s3cr3t@127.0.0.1:{dead_port()}", ip="127.0.1.1")
    t0 = time.monotonic()
    r = await probe(exit, urls, timeout=3)
    assert time.monotonic() - t0 < 2
    assert not r.ok and r.error == "connect" and not r.drifted
    assert all(e.error == "connect" and e.status is None for e in r.endpoints)
    no_secret(repr(r), r.detail, *(e.detail for e in r.endpoints))


@pytest.mark.asyncio
async def test_slow_proxy_is_a_timeout(proxies, urls):
    p = await proxies(delay=3.0)
    t0 = time.monotonic()
    r = await probe(p.exit("e1"), urls, timeout=0.3)
    elapsed = time.monotonic() - t0
    assert 0.25 < elapsed < 1.5
    assert not r.ok and r.error == "timeout"
    assert all(e.error == "timeout" and 0.25 < e.latency < 1.5 for e in r.endpoints)


@pytest.mark.asyncio
async def test_one_endpoint_of_three_down_is_still_ok(proxies, control):
    p = await proxies(source_ip="127.0.1.4")
    urls = [f"{control}/ip", f"http://127.0.0.1:{dead_port()}/ip", f"{control}/ip?b"]
    r = await probe(p.exit("e1", ip="127.0.1.4"), urls, timeout=3)
    assert r.ok and r.observed_ip == "127.0.1.4" and not r.drifted and r.answered == 2
    # Through a proxy, an endpoint that cannot be reached is the proxy's 502.
    assert [e.error for e in r.endpoints] == [None, "http_502", None]
    # Two of three down is below the quorum.
    r2 = await probe(p.exit("e1", ip="127.0.1.4"), urls[:2] + [f"{control}/down"], timeout=3)
    assert not r2.ok and r2.answered == 1 and r2.observed_ip == "127.0.1.4"
    assert r2.error in ("http_502", "http_503")


@pytest.mark.asyncio
async def test_http_status_and_bad_body_are_classified(proxies, control):
    p = await proxies()
    r = await probe(p.exit("e1"), [f"{control}/down", f"{control}/garbage", f"{control}/nope"], timeout=3, quorum=1)
    assert not r.ok
    assert [(e.error, e.status) for e in r.endpoints] == [("http_503", 503), ("bad_body", 200), ("http_404", 404)]
    # A quorum of one: any single answer is enough.
    r = await probe(p.exit("e1"), [f"{control}/down", f"{control}/ip"], timeout=3, quorum=1)
    assert r.ok and r.observed_ip == "127.0.1.1"


@pytest.mark.asyncio
async def test_bad_arguments_raise_and_socks_is_refused(urls):
    e = Exit("e1", "http://127.0.0.1:9")
    with pytest.raises(InvalidInput):
        await probe(e, [], timeout=1)
    with pytest.raises(InvalidInput):
        await probe(e, urls, quorum=4)
    with pytest.raises(InvalidInput):
        await probe(e, urls, timeout=0)
    socks = Exit("s1", f"socks5://{USER}:s3cr3t@127.0.0.1:1080")
    with pytest.raises(InvalidInput) as err:
        await probe(socks, urls)
    no_secret(str(err.value))


def test_import_without_aiohttp_names_the_extra(monkeypatch):
    import exitpool.probe as original

    monkeypatch.setitem(sys.modules, "aiohttp", None)
    monkeypatch.delitem(sys.modules, "exitpool.probe")
    try:
        with pytest.raises(ImportError, match=r"pip install 'exitpool\[aiohttp\]'"):
            importlib.import_module("exitpool.probe")
    finally:
        sys.modules["exitpool.probe"] = original


# --- ProbeLoop -----------------------------------------------------------------------------------


def _fail_tunnel(pool, exit_id, n=5):
    for i in range(n * 20):
        if n == 0:
            return
        lease = pool.acquire(f"k{i}")
        if lease.exit_id == exit_id:
            pool.release(lease, error="connect")
            n -= 1
        else:
            pool.release(lease, status=200)
    raise AssertionError("never leased the exit to fail")


async def _quarantined_pool(proxies, *, dead=False):
    """Three exits; e1 quarantined by five connection errors and its backoff over."""
    ps = [await proxies(source_ip=f"127.0.1.{i + 1}") for i in range(3)]
    exits = [p.exit(f"e{i}", ip=f"127.0.1.{i + 1}") for i, p in enumerate(ps)]
    if dead:
        exits[1] = Exit("e1", f"http://{USER}:x@127.0.0.1:{dead_port()}", ip="127.0.1.2")
    clock = ManualClock()
    pool = Pool(exits, clock=clock, health={"recover_successes": 2})
    _fail_tunnel(pool, "e1")
    assert pool.state("e1") == "quarantined"
    assert [e.exit_id for e in pool.probe_due(1e6)] == []  # backoff not over yet
    clock.advance(40)  # the first backoff is 30 s +- 20 %
    return pool, clock


@pytest.mark.asyncio
async def test_quarantined_exit_comes_back_through_probes(proxies, urls):
    pool, clock = await _quarantined_pool(proxies)
    loop = ProbeLoop(pool, urls, idle=1e6, timeout=3, stagger=0.05, seed=1)
    r1 = await loop.run_once()
    assert [r.exit_id for r in r1.results] == ["e1"] and r1.results[0].ok and r1.recorded == 1
    assert not r1.suspect and not loop.suspect and r1.controls == ()
    assert pool.state("e1") == "probing"
    r2 = await loop.run_once()
    assert [r.exit_id for r in r2.results] == ["e1"] and r2.recorded == 1
    assert pool.state("e1") == "healthy"
    assert (await loop.run_once()).results == ()  # nothing due any more
    assert loop.rounds == 3


@pytest.mark.asyncio
async def test_idle_healthy_exits_are_probed_and_staggered(proxies, urls):
    ps = [await proxies(source_ip=f"127.0.1.{i + 1}") for i in range(4)]
    pool = Pool([p.exit(f"e{i}", ip=f"127.0.1.{i + 1}") for i, p in enumerate(ps)])
    loop = ProbeLoop(pool, urls, idle=0, timeout=3, stagger=0.3, concurrency=2, seed=7)
    t0 = time.monotonic()
    rnd = await loop.run_once()
    assert time.monotonic() - t0 < 2
    assert sorted(r.exit_id for r in rnd.results) == ["e0", "e1", "e2", "e3"]
    assert all(r.ok and not r.drifted for r in rnd.results) and rnd.recorded == 4
    assert [p.requests for p in ps] == [3] * 4
    assert all(pool.state(f"e{i}") == "healthy" for i in range(4))
    assert rnd.drifted == ()


@pytest.mark.asyncio
async def test_loop_reports_a_drifted_exit(proxies, urls):
    ps = [await proxies(source_ip=f"127.0.1.{i + 1}") for i in range(3)]
    exits = [p.exit(f"e{i}", ip=f"127.0.1.{i + 1}") for i, p in enumerate(ps)]
    exits[2] = ps[2].exit("e2", ip="127.0.1.200")  # its token now lands on 127.0.1.3
    pool = Pool(exits)
    rnd = await ProbeLoop(pool, urls, idle=0, timeout=3, stagger=0).run_once()
    assert rnd.drifted == ("e2",) and rnd.recorded == 3
    assert [r.drifted for r in rnd.results] == [False, False, True]
    drift = [e for e in pool.events() if e["kind"] == "exit_drifted"]
    assert [e["exit_id"] for e in drift] == ["e2"]


@pytest.mark.asyncio
async def test_failed_return_is_recorded_when_healthy_controls_answer(proxies, urls):
    pool, _ = await _quarantined_pool(proxies, dead=True)
    loop = ProbeLoop(pool, urls, idle=1e6, timeout=2, stagger=0, seed=3)
    rnd = await loop.run_once()
    assert [r.error for r in rnd.results] == ["connect"]
    assert len(rnd.controls) == 2 and all(c.ok for c in rnd.controls)
    assert not rnd.suspect and rnd.recorded == 3
    assert pool.state("e1") == "quarantined"  # the failed return sends it back
    assert any(e["kind"] == "probe_failed" and e["exit_id"] == "e1" for e in pool.events())


@pytest.mark.asyncio
async def test_dead_exit_is_probed_and_revived(proxies, urls):
    ps = [await proxies(source_ip=f"127.0.1.{i + 1}") for i in range(3)]
    clock = ManualClock()
    pool = Pool([p.exit(f"e{i}", ip=f"127.0.1.{i + 1}") for i, p in enumerate(ps)], clock=clock, health={"dead_after": 1})
    _fail_tunnel(pool, "e1")
    clock.advance(40)
    ps[1].broken = True
    loop = ProbeLoop(pool, urls, idle=1e6, timeout=2, stagger=0)
    rnd = await loop.run_once()
    assert [(r.exit_id, r.error) for r in rnd.results] == [("e1", "http_502")]
    assert pool.state("e1") == "dead"
    ps[1].broken = False
    rnd = await loop.run_once()
    assert [(r.exit_id, r.ok) for r in rnd.results] == [("e1", True)]
    assert pool.state("e1") == "healthy"


@pytest.mark.asyncio
async def test_every_exit_failing_every_endpoint_records_nothing(proxies, caplog):
    caplog.set_level(logging.WARNING, logger="exitpool")
    ps = [await proxies(source_ip=f"127.0.1.{i + 1}") for i in range(3)]
    pool = Pool([p.exit(f"e{i}", ip=f"127.0.1.{i + 1}") for i, p in enumerate(ps)])
    before = (pool.events(), [pool.state(f"e{i}") for i in range(3)])
    down = [f"http://127.0.0.1:{dead_port()}/ip" for _ in range(3)]  # the control endpoints are gone
    loop = ProbeLoop(pool, down, idle=0, timeout=2, stagger=0, seed=5)
    for _ in range(6):  # more than enough failures to quarantine anyone, were they recorded
        rnd = await loop.run_once()
        assert rnd.suspect and rnd.recorded == 0 and len(rnd.results) == 3
    assert loop.suspect and loop.suspect_rounds == 6
    assert (pool.events(), [pool.state(f"e{i}") for i in range(3)]) == before
    assert "suspect" in caplog.text and caplog.records[-1].levelno == logging.WARNING
    assert caplog.records[-1].name == "exitpool"
    no_secret(caplog.text)


@pytest.mark.asyncio
async def test_loop_runs_rounds_and_stops_cleanly(proxies, urls):
    p = await proxies(source_ip="127.0.1.5")
    pool = Pool([p.exit("e0", ip="127.0.1.5")])
    async with ProbeLoop(pool, urls, interval=(0.01, 0.03), idle=0, timeout=2, stagger=0) as loop:
        assert loop.running
        for _ in range(200):
            if loop.rounds >= 3:
                break
            await asyncio.sleep(0.01)
        assert loop.rounds >= 3 and not loop.suspect
    assert not loop.running and loop._task is None
    await loop.stop()  # idempotent
    rounds = loop.rounds
    await asyncio.sleep(0.05)
    assert loop.rounds == rounds  # nothing runs after stop


@pytest.mark.asyncio
async def test_stop_cancels_a_round_in_flight(proxies, urls):
    p = await proxies(delay=3.0)
    pool = Pool([p.exit("e0")])
    loop = ProbeLoop(pool, urls, interval=(0.01, 0.02), idle=0, timeout=5, stagger=0)
    loop.start()
    loop.start()  # a no-op while running
    for _ in range(100):
        if p.requests:
            break
        await asyncio.sleep(0.01)
    t0 = time.monotonic()
    await loop.stop()
    assert time.monotonic() - t0 < 0.5 and not loop.running and loop.rounds == 0
    assert pool.events() == []


def test_loop_arguments_are_checked():
    pool = Pool([Exit("e0", "http://127.0.0.1:9")])
    for kw in (
        {"interval": (5, 1)},
        {"interval": -1},
        {"concurrency": 0},
        {"timeout": 0},
        {"idle": float("nan")},
        {"quorum": 2},
        {"controls": -1},
    ):
        with pytest.raises(InvalidInput):
            ProbeLoop(pool, ["http://127.0.0.1:1/ip"], **kw)
    assert ProbeLoop(pool, "http://127.0.0.1:1/ip").stagger == 3.0
