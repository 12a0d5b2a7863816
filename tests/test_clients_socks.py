"""SOCKS5 / SOCKS5h exits and connection reuse in the aiohttp, httpx and requests integrations,
on the testbed: several accounts through HTTP and SOCKS5 exits, each seen from its own exit's
address, the same across 50 requests; two exits on one gateway host:port with other credentials
seen as two addresses; a fresh tunnel per lease on request; no credential in any output."""

from __future__ import annotations

import logging
import sys
from collections import defaultdict

import aiohttp
import httpx
import pytest
import requests

from exitpool import Exit, InvalidInput, Pool
from exitpool import aiohttp as ep_aiohttp
from exitpool import httpx as ep_httpx
from exitpool import requests as ep_requests
from exitpool.testbed import Testbed

T = 5.0  # every client call is bounded
ROUNDS = 50
WRONG = "wrong-S3CRET-pw"


def world() -> Testbed:
    """Two HTTP and two SOCKS5 exits (one socks5, one socks5h); the proxy-side name
    ``shop.test`` only the SOCKS proxies resolve."""
    return Testbed(n_exits=4, scheme=["http", "http", "socks5", "socks5h"], hosts={"shop.test": "127.0.0.1"})


def with_twins(tb: Testbed) -> list:
    """The world's exits plus a twin of the first HTTP and of the first SOCKS exit: same
    host:port, other credentials, leaving from another address."""
    twins = [
        tb.proxies[0].add_user("twin", source_ip="127.0.6.1"),
        tb.proxies[2].add_user("twin", source_ip="127.0.6.2"),
    ]
    return tb.exits + twins


def accounts_for(pool: Pool, exits: list) -> dict:
    """One account key bound to each exit: {exit_id: key} (keys are tried in order until every
    exit holds one; the pool decides where a key binds)."""
    found: dict = {}
    for i in range(500):
        if len(found) == len(exits):
            break
        with pool.lease(f"account-{i}") as lease:
            found.setdefault(lease.exit_id, f"account-{i}")
    assert len(found) == len(exits)
    return found


def passwords(exits) -> list:
    return [e.password for e in exits if e.password] + [WRONG]


def check_accounts(tb: Testbed, exits: list, accounts: dict, seen: dict) -> None:
    """Each account saw only its exit's address, ROUNDS times; twins were seen as two
    addresses; every proxy opened one connection per exit it serves (reuse, never crossing)."""
    by_id = {e.exit_id: e for e in exits}
    for exit_id, key in accounts.items():
        assert seen[key] == [by_id[exit_id].ip] * ROUNDS, key
    http_twins = {seen[accounts["exit-0"]][0], seen[accounts["exit-0-twin"]][0]}
    socks_twins = {seen[accounts["exit-2"]][0], seen[accounts["exit-2-twin"]][0]}
    assert (by_id["exit-0"].host, by_id["exit-0"].port) == (by_id["exit-0-twin"].host, by_id["exit-0-twin"].port)
    assert (by_id["exit-2"].host, by_id["exit-2"].port) == (by_id["exit-2-twin"].host, by_id["exit-2-twin"].port)
    assert len(http_twins) == 2 and len(socks_twins) == 2
    assert [p.connections for p in tb.proxies] == [2, 1, 2, 1]
    assert [p.auth_failures for p in tb.proxies] == [0, 0, 0, 0]


def assert_no_credentials(texts, exits) -> None:
    blob = "\n".join(texts)
    for pw in passwords(exits):
        assert pw not in blob


def error_texts(e: BaseException) -> list:
    out = []
    for _ in range(10):  # the chain of causes, bounded
        if e is None:
            break
        out += [str(e), repr(e), repr(e.args)]
        e = e.__cause__ or e.__context__
    return out


def wrong_password_exit(exit: Exit) -> Exit:
    return Exit("wrong", f"{exit.scheme}://{exit.username}:{WRONG}@{exit.host}:{exit.port}")


# -- done when: several accounts, HTTP and SOCKS5 exits, 50 requests each ----------------------


def test_requests_accounts_keep_their_exits_ip_over_http_and_socks(caplog, capsys):
    caplog.set_level(logging.DEBUG)
    with world() as tb:
        exits = with_twins(tb)
        pool = Pool(exits)
        accounts = accounts_for(pool, exits)
        sessions: dict = {}
        seen: dict = defaultdict(list)
        texts: list = []
        for _ in range(ROUNDS):
            for key in accounts.values():
                with pool.lease(key) as lease:
                    s = sessions[key] = ep_requests.session_for(lease, sessions.get(key))
                    r = s.get(tb.control_url, timeout=T)
                    ep_requests.report(lease, r)
                    seen[key].append(r.json()["ip"])
                    texts += [repr(lease), repr(s.get_adapter(tb.control_url))]
        check_accounts(tb, exits, accounts, seen)
        for s in sessions.values():
            s.close()
        for exit in (exits[0], exits[2], exits[3]):
            with ep_requests.session_for(wrong_password_exit(exit)) as s:
                with pytest.raises(requests.RequestException) as e:
                    s.get(tb.control_url, timeout=T).raise_for_status()  # an HTTP proxy answers 407
                texts += error_texts(e.value)
    out = capsys.readouterr()
    assert_no_credentials([*texts, caplog.text, out.out, out.err], exits)


def test_httpx_accounts_keep_their_exits_ip_over_http_and_socks(caplog, capsys):
    caplog.set_level(logging.DEBUG)
    with world() as tb:
        exits = with_twins(tb)
        pool = Pool(exits)
        accounts = accounts_for(pool, exits)
        seen: dict = defaultdict(list)
        texts: list = []
        with ep_httpx.Clients(timeout=T) as clients:
            for _ in range(ROUNDS):
                for key in accounts.values():
                    with pool.lease(key) as lease:
                        client = clients.client(lease)
                        r = client.get(tb.control_url)
                        ep_httpx.report(lease, r)
                        seen[key].append(r.json()["ip"])
                        texts += [repr(lease), repr(clients), repr(clients.transport(lease))]
            check_accounts(tb, exits, accounts, seen)
            for exit in (exits[0], exits[2], exits[3]):
                with pytest.raises(httpx.HTTPError) as e:
                    r = clients.client(wrong_password_exit(exit)).get(tb.control_url)
                    r.raise_for_status()  # an HTTP proxy answers 407
                texts += error_texts(e.value)
    out = capsys.readouterr()
    assert_no_credentials([*texts, caplog.text, out.out, out.err], exits)


@pytest.mark.asyncio
async def test_aiohttp_accounts_keep_their_exits_ip_over_http_and_socks(caplog, capsys):
    caplog.set_level(logging.DEBUG)
    async with world() as tb:
        exits = with_twins(tb)
        pool = Pool(exits)
        accounts = accounts_for(pool, exits)
        seen: dict = defaultdict(list)
        texts: list = []
        async with ep_aiohttp.ExitSession(pool, timeout=aiohttp.ClientTimeout(total=T)) as http:
            for _ in range(ROUNDS):
                for key in accounts.values():
                    req = http.get(tb.control_url, key=key)
                    async with req as r:
                        seen[key].append((await r.json())["ip"])
                        texts += [repr(req), repr(r.request_info)]
            check_accounts(tb, exits, accounts, seen)
        for exit in (exits[0], exits[2], exits[3]):
            wrong = Pool([wrong_password_exit(exit)])
            async with ep_aiohttp.ExitSession(wrong, timeout=aiohttp.ClientTimeout(total=T), raise_for_status=True) as http:
                with pytest.raises(Exception) as e:  # noqa: B017 - aiohttp's for http, aiohttp-socks' for socks
                    async with http.get(tb.control_url):
                        pass
                texts += error_texts(e.value)
    out = capsys.readouterr()
    assert_no_credentials([*texts, caplog.text, out.out, out.err], exits)


# -- socks5h resolves names at the exit; socks5 with and without a password ---------------------


def shop_url(tb: Testbed) -> str:
    """The control endpoint under a name only the SOCKS proxies resolve (``hosts=``)."""
    return f"http://shop.test:{tb.controls[0].port}/ip"


def test_socks5h_names_are_resolved_at_the_exit_in_requests_and_httpx():
    with world() as tb:
        socks5h, exit = tb.proxies[3], tb.exits[3]
        assert exit.scheme == "socks5h"
        with ep_requests.session_for(exit) as s:
            assert s.get(shop_url(tb), timeout=T).json() == {"ip": exit.ip}
        assert socks5h.domain_requests == {"shop.test": 1}
        with ep_httpx.Clients(timeout=T) as clients:
            assert clients.client(exit).get(shop_url(tb)).json() == {"ip": exit.ip}
        assert socks5h.domain_requests == {"shop.test": 2} and socks5h.ipv4_requests == 0
        # socks5 with requests: the client resolves, the exit is handed an address
        socks5 = tb.proxies[2]
        with ep_requests.session_for(tb.exits[2]) as s:
            assert s.get(tb.control_url, timeout=T).json() == {"ip": tb.exits[2].ip}
        assert socks5.ipv4_requests == 1 and not socks5.domain_requests


@pytest.mark.asyncio
async def test_socks5h_names_are_resolved_at_the_exit_in_aiohttp():
    async with world() as tb:
        socks5h, exit = tb.proxies[3], tb.exits[3]
        pool = Pool([exit])
        async with ep_aiohttp.ExitSession(pool, timeout=aiohttp.ClientTimeout(total=T)) as http:
            async with http.get(shop_url(tb)) as r:
                assert await r.json() == {"ip": exit.ip}
        async with aiohttp.ClientSession(connector=ep_aiohttp.connector(exit), timeout=aiohttp.ClientTimeout(total=T)) as own:
            async with own.get(shop_url(tb)) as r:
                assert await r.json() == {"ip": exit.ip}
        assert socks5h.domain_requests == {"shop.test": 2} and socks5h.ipv4_requests == 0
        socks5 = tb.proxies[2]
        async with aiohttp.ClientSession(connector=ep_aiohttp.connector(tb.exits[2]), timeout=aiohttp.ClientTimeout(total=T)) as own:
            async with own.get(tb.control_url) as r:
                assert await r.json() == {"ip": tb.exits[2].ip}
        assert socks5.ipv4_requests == 1 and not socks5.domain_requests


def test_socks_exits_without_a_password_in_requests_and_httpx():
    with Testbed(n_exits=2, scheme=["socks5", "socks5h"], socks_auth=False) as tb:
        for exit in tb.exits:
            assert exit.username is None
            with ep_requests.session_for(exit) as s:
                assert s.get(tb.control_url, timeout=T).json() == {"ip": exit.ip}
            with ep_httpx.Clients(timeout=T) as clients:
                assert clients.client(exit).get(tb.control_url).json() == {"ip": exit.ip}
        assert [p.auth_failures for p in tb.proxies] == [0, 0]


@pytest.mark.asyncio
async def test_socks_exits_without_a_password_in_aiohttp():
    async with Testbed(n_exits=2, scheme=["socks5", "socks5h"], socks_auth=False) as tb:
        pool = Pool(tb.exits, strategy="round_robin")
        async with ep_aiohttp.ExitSession(pool, timeout=aiohttp.ClientTimeout(total=T)) as http:
            for _ in range(2):
                req = http.get(tb.control_url)
                async with req as r:
                    assert await r.json() == {"ip": req.lease.exit.ip}
        assert [p.tunnels for p in tb.proxies] == [1, 1]


# -- a missing SOCKS package names the extra to install -----------------------------------------


SOCKS_EXIT = Exit("s1", "socks5://u:pw-S3CRET@127.0.0.1:1080")
HTTP_EXIT = Exit("h1", "http://u:pw-S3CRET@127.0.0.1:8080")


def test_requests_without_pysocks_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "socks", None)  # import socks now fails
    with pytest.raises(ImportError, match=r"exit 's1' is a socks5 proxy.*PySocks: pip install 'exitpool\[requests-socks\]'") as e:
        ep_requests.session_for(SOCKS_EXIT)
    assert "pw-S3CRET" not in str(e.value)
    ep_requests.session_for(HTTP_EXIT).close()  # http exits need nothing more


def test_httpx_without_socksio_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "socksio", None)
    with ep_httpx.Clients() as clients:
        with pytest.raises(ImportError, match=r"exit 's1' is a socks5 proxy.*socksio: pip install 'exitpool\[httpx-socks\]'") as e:
            clients.client(SOCKS_EXIT)
        assert "pw-S3CRET" not in str(e.value)
        clients.client(HTTP_EXIT)


@pytest.mark.asyncio
async def test_aiohttp_without_aiohttp_socks_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "aiohttp_socks", None)
    message = r"exit 's1' is a socks5 proxy.*aiohttp-socks: pip install 'exitpool\[aiohttp-socks\]'"
    with pytest.raises(ImportError, match=message):
        ep_aiohttp.connector(SOCKS_EXIT)
    pool = Pool([SOCKS_EXIT])
    async with ep_aiohttp.ExitSession(pool) as http:
        with pytest.raises(ImportError, match=message):
            await http.get("http://127.0.0.1:9/")
    assert pool.snapshot()["exits"][0]["active_leases"] == 0  # the lease was given back


def test_aiohttp_request_kwargs_point_a_socks_exit_to_the_connector():
    with pytest.raises(InvalidInput, match=r"exit 's1' is a socks5 proxy.*connector") as e:
        ep_aiohttp.request_kwargs(SOCKS_EXIT, "http://127.0.0.1/")
    assert "pw-S3CRET" not in str(e.value)
    with pytest.raises(InvalidInput, match="use request_kwargs"):
        ep_aiohttp.connector(HTTP_EXIT)


# -- connection reuse: per exit identity, or fresh per lease ------------------------------------

LEASES = 10


@pytest.mark.parametrize("fresh", [False, True])
def test_requests_reuses_an_exits_connection_unless_fresh(fresh):
    with Testbed(n_exits=2, scheme=["http", "socks5"]) as tb:
        pool = Pool(tb.exits)
        keys = accounts_for(pool, tb.exits).values()
        sessions: dict = {}
        for _ in range(LEASES):
            for key in keys:
                with pool.lease(key) as lease:
                    s = sessions[key] = ep_requests.session_for(lease, sessions.get(key), fresh=fresh)
                    assert s.get(tb.control_url, timeout=T).json() == {"ip": lease.exit.ip}
        for s in sessions.values():
            s.close()
        expected = LEASES * len(tb.exits) if fresh else len(tb.exits)
        assert sum(p.connections for p in tb.proxies) == expected


@pytest.mark.parametrize("fresh", [False, True])
def test_httpx_reuses_an_exits_connection_unless_fresh(fresh):
    with Testbed(n_exits=2, scheme=["http", "socks5"]) as tb:
        pool = Pool(tb.exits)
        keys = accounts_for(pool, tb.exits).values()
        with ep_httpx.Clients(timeout=T, fresh=fresh) as clients:
            for _ in range(LEASES):
                for key in keys:
                    with pool.lease(key) as lease:
                        for _ in range(2):  # within a lease, its connection is reused
                            assert clients.client(lease).get(tb.control_url).json() == {"ip": lease.exit.ip}
            # fresh: the pools of ended leases were closed at the next call, only the last
            # lease's remains; else one per exit
            assert len(clients) == (1 if fresh else len(tb.exits))
        expected = LEASES * len(tb.exits) if fresh else len(tb.exits)
        assert sum(p.connections for p in tb.proxies) == expected
        with ep_httpx.Clients(fresh=True) as clients:
            with pytest.raises(TypeError, match="pass the Lease"):
                clients.client(tb.exits[0])


@pytest.mark.asyncio
@pytest.mark.parametrize("fresh", [False, True])
async def test_aiohttp_reuses_an_exits_connection_unless_fresh(fresh):
    async with Testbed(n_exits=2, scheme=["http", "socks5"]) as tb:
        pool = Pool(tb.exits)
        keys = accounts_for(pool, tb.exits).values()
        async with ep_aiohttp.ExitSession(pool, timeout=aiohttp.ClientTimeout(total=T), fresh=fresh) as http:
            for _ in range(LEASES):
                for key in keys:
                    req = http.get(tb.control_url, key=key)
                    async with req as r:
                        assert await r.json() == {"ip": req.lease.exit.ip}
        expected = LEASES * len(tb.exits) if fresh else len(tb.exits)
        assert sum(p.connections for p in tb.proxies) == expected
    with pytest.raises(TypeError, match="fresh=True"):
        ep_aiohttp.ExitSession(pool, fresh=True, connector=None)


@pytest.mark.asyncio
async def test_aiohttp_a_socks_refusal_counts_against_the_exit():
    async with Testbed(n_exits=1, scheme="socks5") as tb:
        pool = Pool([wrong_password_exit(tb.exits[0])])
        async with ep_aiohttp.ExitSession(pool, timeout=aiohttp.ClientTimeout(total=T)) as http:
            with pytest.raises(Exception, match="authentication failure"):  # noqa: B017 - aiohttp-socks' ProxyError
                await http.get(tb.control_url)
        outcomes = {k: v for k, v in pool.snapshot()["exits"][0]["outcomes"].items() if v}
        assert outcomes == {"connect": 1}
        assert tb.proxies[0].auth_failures == 1


@pytest.mark.asyncio
async def test_aiohttp_new_credentials_on_a_socks_exit_get_a_new_session():
    async with Testbed(n_exits=1, scheme="socks5") as tb:
        proxy = tb.proxies[0]
        twin = proxy.add_user("twin", source_ip="127.0.6.3", exit_id="exit-0")  # same id, new credentials
        pool = Pool([tb.exits[0]])
        async with ep_aiohttp.ExitSession(pool, timeout=aiohttp.ClientTimeout(total=T)) as http:
            async with http.get(tb.control_url) as r:
                assert await r.json() == {"ip": proxy.source_ip}
            first = http._socks["exit-0"].session
            pool.remove("exit-0")
            pool.add(twin)
            async with http.get(tb.control_url) as r:
                assert await r.json() == {"ip": "127.0.6.3"}
            assert first.closed and http._socks["exit-0"].session is not first
