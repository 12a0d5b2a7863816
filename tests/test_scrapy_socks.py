"""exitpool.scrapy with SOCKS5 exits and exits that share a host:port: real Scrapy crawls (one
subprocess each, through tests/test_scrapy.py's ``crawl``) of the loopback testbed. Scrapy has
no SOCKS support (scrapy#747): the middleware reaches socks5 and socks5h exits through a
loopback relay per exit. What a spider relies on: each account's requests leave from its
exit's address, 50 of them in a row; two exits on one host:port with different credentials are
two addresses and never share a connection; no credential shows in the crawl's output."""

from __future__ import annotations

import asyncio
import collections
import sys
from pathlib import Path

import pytest

pytest.importorskip("scrapy")

sys.path.insert(0, str(Path(__file__).parent))
from exitpool import Pool  # noqa: E402
from exitpool.scrapy import ExitPoolMiddleware  # noqa: E402
from exitpool.testbed import Proxy, Testbed  # noqa: E402
from test_clients import Echo  # noqa: E402  (an https target on loopback)
from test_scrapy import crawl, get  # noqa: E402  (the crawl helper of the Scrapy tests)

N = 50  # requests per account
N_TLS = 10  # of those, https pages (a CONNECT tunnel through the exit, or through its relay)


def key_for(pool, exit_id):
    """An account key whose ring exit is ``exit_id`` (the crawl builds the same ring)."""
    return next(f"acct-{i}" for i in range(10_000) if pool.assign(f"acct-{i}").exit_id == exit_id)


@pytest.fixture
def connections(monkeypatch):
    """Which source addresses each HTTP proxy connection was admitted for (one set per
    connection; the connection is the proxy's task serving it, kept alive so ids stay unique)."""
    seen = collections.defaultdict(set)
    tasks = []
    admit = Proxy._admit

    def recording(self, authorization):
        source_ip = admit(self, authorization)
        task = asyncio.current_task()
        tasks.append(task)
        seen[(self.name, id(task))].add(source_ip)
        return source_ip

    monkeypatch.setattr(Proxy, "_admit", recording)
    return seen


def test_accounts_on_http_and_socks5_exits_keep_their_ip_and_twins_never_share(tmp_path, connections):
    with Testbed(n_exits=3, scheme=["http", "socks5", "socks5h"], rate=10_000.0, burst=10_000) as tb:
        # Per scheme a twin: another user on the same host:port, leaving from its own address.
        twins = [p.add_user(f"twin{i}", source_ip=f"127.0.6.{i + 1}") for i, p in enumerate(tb.proxies)]
        exits = [*tb.exits, *twins]
        pool = Pool(exits)
        keys = {e.exit_id: key_for(pool, e.exit_id) for e in exits}
        echo = tb.run(Echo().start())
        # Every account's requests in one step, interleaved: the twins' requests are in flight
        # together, so a shared connection would show. The first N_TLS of each are https.
        url = [f"{echo.https_url}/headers?n={n}" if n < N_TLS else f"{tb.site_url}/ip?n={n}" for n in range(N)]
        plan = [[get(url[n], exit_id, key=keys[exit_id]) for n in range(N) for exit_id in keys]]
        lines = [f"{e.exit_id} {e.proxy} ip={e.ip}" for e in exits]
        records, summary, log = crawl(tmp_path, tb, plan, settings={"EXITPOOL_PROXY_LIST": lines, "CONCURRENT_REQUESTS": 32})
        for e in exits:
            assert e.password not in log
        by_exit = collections.defaultdict(list)
        for r in records:
            assert r["kind"] == "response" and r["status"] == 200, r
            by_exit[r["tag"]].append(r)
        ip_of = {e.exit_id: e.ip for e in exits}
        for exit_id, rs in by_exit.items():
            assert len(rs) == N and sum(r["url"].startswith("https://") for r in rs) == N_TLS
            assert {r["exit"] for r in rs} == {exit_id}
            assert {r["ip"] for r in rs} == {ip_of[exit_id]}  # the site saw the exit's address, every time
        assert sorted(by_exit) == sorted(ip_of)
        assert len(set(ip_of.values())) == len(ip_of)  # twins on one host:port: two addresses
        # SOCKS5 exits went through a relay of their own (a loopback port, not the exit's).
        socks_ports = {e.exit_id: e.port for e in exits if e.scheme.startswith("socks")}
        for exit_id, port in socks_ports.items():
            proxies = {r["proxy"] for r in by_exit[exit_id]}
            assert len(proxies) == 1 and not proxies.pop().endswith(f":{port}")
        relay_of = {e: by_exit[e][0]["proxy"] for e in socks_ports}
        assert len(set(relay_of.values())) == len(relay_of)  # one relay per exit
        # No HTTP proxy connection carried two exits' requests (Scrapy pools plain-http proxy
        # connections by the proxy's host:port alone).
        assert connections
        assert all(len(ips) == 1 for ips in connections.values()), [v for v in connections.values() if len(v) > 1][:3]
        assert summary["active_leases"] == 0
        assert sum(p.tunnels for p in tb.proxies) >= N_TLS * len(tb.proxies)  # https went through tunnels
        tb.run(echo.stop())


def test_socks_exits_are_accepted_and_relays_closed_with_the_spider():
    with Testbed(n_exits=2, scheme=["socks5", "socks5h"]) as tb:
        mw = ExitPoolMiddleware(Pool(tb.exits))
        seen = []
        for e in tb.exits:
            proxy, auth = mw._route(e)
            assert proxy.startswith("http://127.0.0.1:") and not proxy.endswith(f":{e.port}")
            assert e.password.encode() not in auth
            seen.append(mw._relays[e.exit_id])
        assert mw._route(tb.exits[0])[0] == seen[0].server  # kept per exit
        mw._spider_closed(None)
        assert all(r.closed for r in seen) and not mw._relays


@pytest.mark.parametrize("fresh", [False, True])
def test_fresh_gives_every_request_a_connection_and_tunnel_of_its_own(tmp_path, connections, fresh):
    # A gateway that rotates per connection: with EXITPOOL_FRESH each request, http or https,
    # opens its own connection to the exit (an https page its own CONNECT tunnel); without it,
    # Scrapy reuses them.
    n = 8
    with Testbed(n_exits=1, rate=10_000.0, burst=10_000) as tb:
        echo = tb.run(Echo().start())
        exit_id = tb.exits[0].exit_id
        urls = [f"{echo.https_url}/headers?n={i}" for i in range(n)] + [f"{tb.site_url}/ip?n={i}" for i in range(n)]
        plan = [[get(u, exit_id)] for u in urls]  # one step per request: one at a time
        lines = [f"{e.exit_id} {e.proxy} ip={e.ip}" for e in tb.exits]
        settings = {"EXITPOOL_PROXY_LIST": lines, "CONCURRENT_REQUESTS": 1, "EXITPOOL_FRESH": fresh}
        records, summary, _ = crawl(tmp_path, tb, plan, settings=settings)
        assert [r["status"] for r in records] == [200] * (2 * n)
        if fresh:
            assert len(connections) == 2 * n
            assert tb.proxies[0].tunnels == n
        else:
            assert len(connections) < 2 * n
        tb.run(echo.stop())
