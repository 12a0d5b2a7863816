"""Real HTTP through real proxies to a real site, all on loopback: what a fleet relies on."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from exitpool import Cooling, NoExitAvailable, Pool, SessionExitLost
from exitpool.probe import ProbeLoop
from exitpool.testbed import Testbed

pytestmark = pytest.mark.asyncio


async def fetch(session, pool, key, site, url, headers=None):
    """One request through a lease; returns (exit_id, status) or None when refused."""
    try:
        async with pool.lease(key, site=site, timeout=0) as lease:
            async with session.get(url, proxy=lease.proxy, headers=headers or {}, timeout=aiohttp.ClientTimeout(total=3)) as r:
                body = await r.text()
                lease.report(status=r.status, captcha="captcha" in body)
                return lease.exit_id, r.status
    except (Cooling, NoExitAvailable):
        return None
    except aiohttp.ClientError:
        return "error", None


async def test_each_account_reaches_the_site_from_its_exits_ip_only():
    async with Testbed(n_exits=5, rate=1000.0) as tb, aiohttp.ClientSession() as s:
        pool = Pool(tb.exits)
        site = tb.site.host_port
        homes = {}
        for _round in range(6):
            for i in range(12):
                key = f"acct-{i}"
                exit_id, status = await fetch(s, pool, key, site, tb.site_url + "/page", {"X-Account": key})
                assert status == 200
                homes.setdefault(key, exit_id)
                assert exit_id == homes[key]
        ip_of = {e.exit_id: e.ip for e in tb.exits}
        for key, exit_id in homes.items():
            assert tb.site.account_ips(key) == [ip_of[exit_id]]
            assert tb.site.teleports(key) == 0
        assert len(set(homes.values())) > 1


async def test_a_killed_exit_leaves_rotation_and_comes_back_through_probes():
    async with Testbed(n_exits=4, rate=1000.0) as tb, aiohttp.ClientSession() as s:
        pool = Pool(tb.exits, strategy="round_robin", health={"base_ejection": 1.0, "recover_successes": 2, "jitter": 0.0})
        site, url = tb.site.host_port, tb.site_url + "/page"
        tb.proxy("exit-2").kill()
        errors = 0
        for _ in range(40):
            got = await fetch(s, pool, None, site, url)
            errors += got == ("error", None)
        # Five refused tunnels take it out; the other 35+ requests go elsewhere.
        assert errors == 5
        assert pool.state("exit-2") == "quarantined"
        tb.proxy("exit-2").revive()
        await asyncio.sleep(1.1)  # its 1 s backoff ends: probes decide the return
        probes = ProbeLoop(pool, tb.control_urls, idle=3600.0, timeout=2.0, seed=1)
        for _ in range(3):
            await probes.run_once()
        assert pool.state("exit-2") == "healthy"
        seen = {(await fetch(s, pool, None, site, url))[0] for _ in range(8)}
        assert "exit-2" in seen


async def test_a_burned_exit_stays_usable_for_another_site():
    async with Testbed(n_exits=3, n_sites=2, rate=1000.0) as tb, aiohttp.ClientSession() as s:
        pool = Pool(tb.exits, strategy="round_robin")
        shop, news = tb.sites
        shop.ban(tb.proxy("exit-1").source_ip)
        for _ in range(12):
            await fetch(s, pool, None, shop.host_port, shop.url + "/page")
        assert pool.state("exit-1", shop.host_port) == "quarantined"
        assert pool.state("exit-1", news.host_port) == "healthy"
        seen = [(await fetch(s, pool, None, news.host_port, news.url + "/page")) for _ in range(6)]
        assert ("exit-1", 200) in seen
        # And the shop no longer gets it.
        shop_seen = {(await fetch(s, pool, None, shop.host_port, shop.url + "/page"))[0] for _ in range(6)}
        assert "exit-1" not in shop_seen


async def test_a_site_incident_quarantines_nobody():
    async with Testbed(n_exits=6, rate=1000.0) as tb, aiohttp.ClientSession() as s:
        pool = Pool(tb.exits, strategy="round_robin")
        site, url = tb.site.host_port, tb.site_url + "/page"
        tb.site.incident(True)
        for _ in range(40):
            await fetch(s, pool, None, site, url)
        assert all(pool.state(e.exit_id, site) not in ("quarantined", "dead") for e in tb.exits)
        assert pool.snapshot()["pool"]["incidents"] == [site]
        tb.site.incident(False)


async def test_probes_find_a_drifted_exit():
    async with Testbed(n_exits=3) as tb:
        pool = Pool(tb.exits)
        tb.proxy("exit-1").drift("127.0.2.77")
        probes = ProbeLoop(pool, tb.control_urls, idle=0.0, timeout=2.0, seed=1)
        await probes.run_once()
        drifted = [e for e in pool.events() if e["kind"] == "exit_drifted"]
        assert [e["exit_id"] for e in drifted] == ["exit-1"]
        assert "127.0.2.77" in drifted[0]["message"]
        assert pool.state("exit-1") == "quarantined"


async def test_a_session_whose_exit_dies_is_told_not_moved():
    async with Testbed(n_exits=4, rate=1000.0) as tb, aiohttp.ClientSession() as s:
        pool = Pool(tb.exits)
        site, url = tb.site.host_port, tb.site_url + "/page"
        home, _ = await fetch(s, pool, "acct", site, url, {"X-Account": "acct"})
        tb.proxy(home).kill()
        with pytest.raises(SessionExitLost):
            for _ in range(10):
                await fetch(s, pool, "acct", site, url, {"X-Account": "acct"})
        assert tb.site.account_ips("acct") == [pool.exit(home).ip]
