"""Pacing per (exit, site): ``Pool(pacing={"site": "6/s"})`` gives each pair a request budget, a
lease goes where there is budget or waits for it, and a 429 halves the pair's learned rate.
Core time comes from a ManualClock; the waits that must really pass are a few at 20/s."""

from __future__ import annotations

import asyncio
import time

import pytest

import exitpool
import test_fleet
from exitpool import Cooling, Exit, InvalidInput, ManualClock, Pool

SITE = "shop.example"

#: The fleet tests' store fixture: the in-process store, then a real redis-server of the test's own.
store = test_fleet.store


def exits(n: int) -> list:
    return [Exit(f"e{i}", f"http://user:pw@127.0.0.1:{9200 + i}") for i in range(n)]


def paced_pool(n: int = 1, pacing=None, **kw) -> tuple:
    clock = ManualClock()
    return Pool(exits(n), clock=clock, pacing=pacing or {SITE: "6/s"}, **kw), clock


def pair(pool: Pool, exit_id: str, site: str = SITE) -> dict:
    return next(p for p in pool.snapshot()["pacing"] if p["exit_id"] == exit_id and p["site"] == site)


def test_six_per_second_grants_a_burst_of_six_then_waits_or_raises():
    pool, clock = paced_pool()
    held = [pool.acquire(site=SITE, timeout=0) for _ in range(6)]
    with pytest.raises(Cooling) as e:
        pool.acquire(site=SITE, timeout=0)
    assert e.value.retry_after == pytest.approx(1 / 6)
    assert "no request budget left for this site (pacing)" in str(e.value)
    # A timeout shorter than the wait is answered at once (the manual clock never moves).
    started = time.monotonic()
    with pytest.raises(Cooling):
        with pool.lease(site=SITE, timeout=0.05):
            pass
    assert time.monotonic() - started < 30, "answered, not waited to the end of time"
    # Another site, and a lease without one, are not paced.
    for _ in range(20):
        pool.release(pool.acquire(site="other.example", timeout=0))
        pool.release(pool.acquire(timeout=0))
    clock.advance(1 / 6)
    held.append(pool.acquire(site=SITE, timeout=0))
    with pytest.raises(Cooling):
        pool.acquire(site=SITE, timeout=0)
    assert pair(pool, "e0")["tokens"] == 0


def test_a_burst_deeper_than_the_rate_goes_at_once_then_the_rate_holds():
    pool, clock = paced_pool(pacing={SITE: "4/s burst 6"})
    held = [pool.acquire(site=SITE, timeout=0) for _ in range(6)]
    with pytest.raises(Cooling) as e:
        pool.acquire(site=SITE, timeout=0)
    assert e.value.retry_after == pytest.approx(0.25)
    assert pair(pool, "e0")["configured"] == "4/s burst 6"
    for _ in range(8):  # then four a second, as the site's bucket refills
        clock.advance(0.25)
        held.append(pool.acquire(site=SITE, timeout=0))
        with pytest.raises(Cooling):
            pool.acquire(site=SITE, timeout=0)
    assert len(held) == 14


def test_a_fractional_burst_is_a_jitter_allowance_spent_within_one_interval():
    """ "4/s burst 5.8" for a site six deep at 4/s: five at once after a rest, the sixth 50 ms
    later, then four a second, every request 50 ms behind the site's own refill. No budget
    is lost: over a second of sending, as many go as at "4/s burst 6"."""
    pool, clock = paced_pool(pacing={SITE: "4/s burst 5.8"})
    for _ in range(5):
        pool.release(pool.acquire(site=SITE, timeout=0))
    with pytest.raises(Cooling) as e:
        pool.acquire(site=SITE, timeout=0)
    assert e.value.retry_after == pytest.approx(0.05)
    assert pair(pool, "e0")["configured"] == "4/s burst 5.8"
    clock.advance(0.05)
    pool.release(pool.acquire(site=SITE, timeout=0))
    sent = 6
    for _ in range(4):
        with pytest.raises(Cooling) as e:
            pool.acquire(site=SITE, timeout=0)
        assert e.value.retry_after == pytest.approx(0.25)
        clock.advance(0.25)
        pool.release(pool.acquire(site=SITE, timeout=0))
        sent += 1
    # 1.05 s after the rest: 6 + 4, as "4/s burst 6" sends by 1.0 s.
    assert sent == 10


def test_a_sync_lease_waits_for_budget_within_its_timeout():
    pool = Pool(exits(1), pacing={"*": "20/s"})
    for _ in range(20):
        pool.release(pool.acquire(site=SITE, timeout=0))
    with pool.lease(site=SITE, timeout=10) as lease:
        assert lease.exit_id == "e0"
    pool.release(pool.acquire(site=SITE))  # timeout=None: as long as it takes
    assert pool.snapshot()["counts"]["waits"] >= 1


def test_an_async_lease_waits_for_budget_without_blocking_the_loop():
    pool = Pool(exits(1), pacing={"*": "20/s"})

    async def run() -> int:
        ticks = 0
        done = asyncio.Event()

        async def ticker() -> None:
            nonlocal ticks
            while not done.is_set():
                ticks += 1
                await asyncio.sleep(0.001)

        t = asyncio.create_task(ticker())
        for _ in range(25):
            async with pool.lease(site=SITE, timeout=10):
                pass
        done.set()
        await t
        return ticks

    assert asyncio.run(run()) > 5, "the loop ran while leases waited for budget"


def test_a_429_halves_the_learned_rate_and_says_so():
    pool, clock = paced_pool(2)
    seen = []
    pool.on_event(seen.append)
    with pool.lease(site=SITE) as lease:
        hit = lease.exit_id
        lease.report(status=429, retry_after=5)
    assert pair(pool, hit)["rate"] == 3.0
    assert pair(pool, hit)["next_free"] == pytest.approx(5.0)
    (ev,) = [e for e in seen if e["kind"] == "pace_decreased"]
    assert (ev["exit_id"], ev["site"]) == (hit, SITE)
    assert "3.000/s" in ev["message"] and "pw" not in ev["message"]
    # Another 429 from the same burst does not cut again; one a window later does.
    with pool.lease(site=SITE) as lease:
        other = lease.exit_id
    assert other != hit
    clock.advance(60)  # past the Retry-After, the health board's cooling and the window
    lease = pool.acquire(site=SITE, avoid=[other])
    assert lease.exit_id == hit
    lease.report(status=429)
    pool.release(lease)
    assert pair(pool, hit)["rate"] == 1.5
    # Successes climb back to the configured rate, never above it.
    clock.advance(60)
    for _ in range(300):
        clock.advance(0.5)
        with pool.lease(site=SITE, avoid=[other]) as lease:
            pass
    assert pair(pool, hit)["rate"] == 6.0


def test_keyed_sessions_wait_for_their_exit_and_never_move():
    pool, clock = paced_pool(4, {"*": "2/s"})
    with pool.lease("acct", site=SITE) as lease:
        home = lease.exit_id
    with pool.lease("acct", site=SITE):
        pass
    with pytest.raises(Cooling) as e:
        pool.acquire("acct", site=SITE, timeout=0)
    assert e.value.retry_after == pytest.approx(0.5)
    assert "session's exit" in str(e.value)
    # Keyless leases go to the exits that have budget.
    with pool.lease(site=SITE) as lease:
        assert lease.exit_id != home
    clock.advance(0.5)
    with pool.lease("acct", site=SITE, timeout=0) as lease:
        assert lease.exit_id == home


@pytest.mark.parametrize(
    "pacing, words",
    [
        ({SITE: "6/d"}, ['"6/d"', "no unit"]),
        ({SITE: "six/s"}, ['"six/s"', "number of requests"]),
        ({SITE: "0/s"}, ['"0/s"', "0.001 to 1e9"]),
        ({SITE: "4/s burst 0"}, ['"4/s burst 0"', "no burst of 1 to 1e9"]),
        ({SITE: "4/s burst"}, ['"4/s burst"', "no burst"]),
        ({SITE: 6}, ["rate strings", "6"]),
        ({"": "6/s"}, ["empty site name"]),
        ("6/s", ["must be a dict", "'6/s'"]),
    ],
)
def test_bad_pacing_is_refused_naming_the_value(pacing, words):
    with pytest.raises(InvalidInput) as e:
        Pool(exits(1), pacing=pacing)
    for w in words:
        assert w in str(e.value)


def test_a_config_files_pacing_table(tmp_path):
    path = tmp_path / "pool.toml"
    path.write_text('[pacing]\n"shop.example" = "2/s"\n\n[[exit]]\nproxy = "http://127.0.0.1:9300"\n')
    clock = ManualClock()
    pool = Pool.from_config(path, clock=clock)
    pool.acquire(site=SITE, timeout=0)
    pool.acquire(site=SITE, timeout=0)
    with pytest.raises(Cooling):
        pool.acquire(site=SITE, timeout=0)
    path.write_text('[pacing]\n"shop.example" = "2/s burst 3"\n\n[[exit]]\nproxy = "http://127.0.0.1:9300"\n')
    pool = Pool.from_config(path, clock=ManualClock())
    for _ in range(3):
        pool.acquire(site=SITE, timeout=0)
    with pytest.raises(Cooling):
        pool.acquire(site=SITE, timeout=0)
    path.write_text('[pacing]\n"shop.example" = "2/fortnight"\n\n[[exit]]\nproxy = "http://127.0.0.1:9300"\n')
    with pytest.raises(InvalidInput) as e:
        Pool.from_config(path)
    assert "2/fortnight" in str(e.value) and "pool.toml" in str(e.value)


def test_prometheus_exports_the_learned_rate():
    prometheus_client = pytest.importorskip("prometheus_client")
    from exitpool.prometheus import PoolCollector

    pool, _ = paced_pool(1)
    with pool.lease(site=SITE) as lease:
        lease.report(status=429)
    registry = prometheus_client.CollectorRegistry()
    registry.register(PoolCollector(pool))
    text = prometheus_client.generate_latest(registry).decode()
    assert 'exitpool_exit_site_pace_rate{exit="e0",site="shop.example"} 3.0' in text
    assert 'exitpool_exit_site_pace_ceiling{exit="e0",site="shop.example"} 6.0' in text


def test_without_pacing_the_snapshot_lists_none():
    pool = Pool(exits(1))
    with pool.lease(site=SITE) as lease:
        lease.report(status=429)
    assert pool.snapshot()["pacing"] == []
    assert not [e for e in pool.events() if e["kind"] == "pace_decreased"]


def test_pools_sharing_a_namespace_share_the_budget(store):
    # Four a minute: the budget cannot refill while the test runs, however slow the machine.
    a = Pool(exits(2), store=store, namespace="pace", pacing={SITE: "4/m"})
    b = Pool(exits(2), store=store, namespace="pace", pacing={SITE: "4/m"})
    for i in range(8):
        (a if i % 2 else b).release((a if i % 2 else b).acquire(site=SITE, timeout=0))
    # Each pool took four itself, within its own budget, but the fleet has spent both exits'.
    for pool in (a, b):
        with pytest.raises(Cooling) as e:
            pool.acquire(site=SITE, timeout=0)
        assert 0 < e.value.retry_after <= 15.0
    # A burst of its own is the fleet's too: six at once per exit, however the pools share them.
    d = Pool(exits(2), store=store, namespace="deep", pacing={SITE: "4/m burst 6"})
    e = Pool(exits(2), store=store, namespace="deep", pacing={SITE: "4/m burst 6"})
    for i in range(12):
        (d if i % 2 else e).release((d if i % 2 else e).acquire(site=SITE, timeout=0))
    with pytest.raises(Cooling):
        d.acquire(site=SITE, timeout=0)
    # Another namespace is another fleet, with budgets of its own.
    c = Pool(exits(2), store=store, namespace="other", pacing={SITE: "4/m"})
    c.release(c.acquire(site=SITE, timeout=0))
    assert isinstance(exitpool.Cooling("x", 1.0), exitpool.Error)


def test_a_429_one_worker_meets_cuts_the_pace_of_every_worker(store):
    """The site limits the IP, whichever worker sends through it: a cut (and its Retry-After)
    reaches the fleet's other workers with the health verdicts, within a second."""
    ca, cb = ManualClock(), ManualClock()
    a = Pool(exits(1), store=store, namespace="cut", pacing={SITE: "6/s"}, clock=ca)
    b = Pool(exits(1), store=store, namespace="cut", pacing={SITE: "6/s"}, clock=cb)
    b.release(b.acquire(site=SITE, timeout=0))
    assert pair(b, "e0")["rate"] == 6.0
    with a.lease(site=SITE, timeout=0) as lease:
        lease.report(status=429, retry_after=30.0)
    assert pair(a, "e0")["rate"] == 3.0
    cb.advance(2.0)  # b's next look at the fleet's verdicts
    with pytest.raises(Cooling) as e:
        b.acquire(site=SITE, timeout=0)
    assert 20.0 < e.value.retry_after <= 30.0 + 1e-6
    assert pair(b, "e0")["rate"] == 3.0
    cuts = [ev for ev in b.events() if ev["kind"] == "pace_decreased"]
    assert len(cuts) == 1 and "another worker of the fleet" in cuts[0]["message"], cuts
    # The publisher does not apply its own cut a second time.
    ca.advance(2.0)
    a.snapshot()
    assert pair(a, "e0")["rate"] == 3.0
    assert len([ev for ev in a.events() if ev["kind"] == "pace_decreased"]) == 1
