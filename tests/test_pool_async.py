"""`async with pool.lease(...)`: the same lease, waiting without blocking the event loop, and
waiting out warm-up and cooldown when the wait fits in the timeout."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest

from exitpool import Cooling, Exit, Lease, ManualClock, NoExitAvailable, Pool, SessionExitLost, WarmingUp


def make_exits(n, **kw):
    return [Exit(f"e{i}", f"http://user:pw@gw.example:{8000 + i}", **kw) for i in range(n)]


def outcomes(pool):
    return {k: v for k, v in pool.snapshot()["counts"]["outcomes"].items() if v}


class Ticker:
    """A task that counts event-loop turns while it runs."""

    def __init__(self):
        self.ticks = 0
        self.task = None

    async def _run(self):
        while True:
            self.ticks += 1
            await asyncio.sleep(0.001)

    def __enter__(self):
        self.task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *exc):
        self.task.cancel()


@pytest.mark.asyncio
async def test_async_with_yields_a_lease():
    pool = Pool(make_exits(2), clock=ManualClock())
    async with pool.lease("account-3f9", site="shop.example") as lease:
        assert isinstance(lease, Lease)
        assert lease.exit_id == pool.assign("account-3f9").exit_id
        assert lease.proxy == lease.exit.proxy
        assert lease.proxies == {"http": lease.proxy, "https": lease.proxy}
        assert lease.strategy == "ring"
        assert lease.active
    assert not lease.active
    async with pool.lease("account-3f9") as again:
        assert again.exit_id == lease.exit_id and again.strategy == "session"
    async with pool.lease() as keyless:
        assert keyless.strategy == "weighted"
    assert outcomes(pool) == {"success": 3}
    assert pool.snapshot()["live_leases"] == 0


@pytest.mark.asyncio
async def test_async_outcomes_reports_and_exceptions():
    pool = Pool(make_exits(1), clock=ManualClock())
    # A 429 cools the exit for its site only; the leases below are for no site.
    async with pool.lease("k", site="a.example") as lease:
        lease.report(status=429)
    exc = asyncio.TimeoutError()
    with pytest.raises(asyncio.TimeoutError) as caught:
        async with pool.lease("k"):
            raise exc
    assert caught.value is exc
    exc = aiohttp.ClientConnectionError("proxy refused")
    with pytest.raises(aiohttp.ClientConnectionError) as caught:
        async with pool.lease("k"):
            raise exc
    assert caught.value is exc
    with pytest.raises(KeyError):
        async with pool.lease("k") as lease:
            lease.report(status=200)
            raise KeyError("parse")
    assert outcomes(pool) == {"rate_limited": 1, "timeout": 1, "connect": 1, "success": 1}


@pytest.mark.asyncio
async def test_async_refusals_that_waiting_cannot_fix_raise():
    pool = Pool(make_exits(2), clock=ManualClock())
    async with pool.lease("k") as lease:
        home = lease.exit_id
    pool.remove(home)
    with pytest.raises(SessionExitLost) as e:
        async with pool.lease("k", timeout=1):
            pytest.fail("the block must not run")
    assert (e.value.key, e.value.exit_id) == ("k", home)
    nowhere = pool.subset(country="FR")
    with pytest.raises(NoExitAvailable) as e:
        async with nowhere.lease():
            pass
    assert str(e.value) == 'subset(country="FR") has no exit in service'


@pytest.mark.asyncio
async def test_waiting_for_a_slot_does_not_block_the_event_loop():
    pool = Pool(make_exits(1), max_leases=1)
    held = pool.acquire("holder")

    async def release_later():
        await asyncio.sleep(0.1)
        assert pool.release(held) is True

    with Ticker() as ticker:
        releaser = asyncio.create_task(release_later())
        started = time.monotonic()
        async with pool.lease("waiter", timeout=5) as lease:
            waited = time.monotonic() - started
            assert lease.exit_id == "e0"
        await releaser
    assert 0.08 <= waited < 2.0
    # The loop kept turning while the lease waited (a blocked loop would tick about once).
    assert ticker.ticks >= 20
    assert pool.snapshot()["counts"]["acquired"] == 2


@pytest.mark.asyncio
async def test_an_async_wait_that_runs_out_raises_no_exit_available():
    pool = Pool(make_exits(1), max_leases=1)
    held = pool.acquire()
    with Ticker() as ticker:
        started = time.monotonic()
        with pytest.raises(NoExitAvailable) as e:
            async with pool.lease(timeout=0.1):
                pytest.fail("the block must not run")
        elapsed = time.monotonic() - started
    assert str(e.value) == "every exit of the pool that could serve this lease stayed at max_leases for 0.1 s"
    assert 0.09 <= elapsed < 1.0
    assert ticker.ticks >= 20
    with pytest.raises(NoExitAvailable) as e:
        async with pool.lease(timeout=0):
            pass
    assert str(e.value) == "every exit of the pool that could serve this lease is at max_leases"
    assert pool.snapshot()["counts"]["acquired"] == 1
    pool.release(held)


@pytest.mark.asyncio
async def test_many_tasks_share_the_slots_and_never_exceed_max_leases():
    pool = Pool(make_exits(3), max_leases=2)
    inside = {"e0": 0, "e1": 0, "e2": 0}
    peak = dict(inside)

    async def worker(i):
        for j in range(10):
            key = f"acct-{i % 8}" if j % 2 else None
            async with pool.lease(key, timeout=10) as lease:
                inside[lease.exit_id] += 1
                peak[lease.exit_id] = max(peak[lease.exit_id], inside[lease.exit_id])
                await asyncio.sleep(0.001)
                inside[lease.exit_id] -= 1

    await asyncio.gather(*(worker(i) for i in range(24)))
    assert max(peak.values()) <= 2
    assert max(peak.values()) == 2  # the slots really were contended
    c = pool.snapshot()["counts"]
    assert c["acquired"] == c["released"] == 240
    assert pool.snapshot()["live_leases"] == 0


@pytest.mark.asyncio
async def test_a_cancelled_wait_leases_nothing():
    pool = Pool(make_exits(1), max_leases=1)
    held = pool.acquire()

    async def wait():
        async with pool.lease():
            pytest.fail("the block must not run")

    task = asyncio.create_task(wait())
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert pool.snapshot()["live_leases"] == 1
    pool.release(held)
    async with pool.lease(timeout=0) as lease:
        assert lease.exit_id == "e0"
    c = pool.snapshot()["counts"]
    assert (c["acquired"], c["released"]) == (2, 2)


WARMUP = {"ramp": 5.0, "initial_interval": 0.2, "horizon": 60.0}


@pytest.mark.asyncio
async def test_async_waits_out_warming_up_when_it_fits_the_timeout():
    pool = Pool(make_exits(1), warmup=WARMUP)  # the real clock
    async with pool.lease("k"):
        pass
    # Sync: refused at once.
    with pytest.raises(WarmingUp) as e:
        pool.acquire("k", timeout=5)
    assert 0.1 < e.value.retry_after <= 0.2
    # Async: waits it out.
    with Ticker() as ticker:
        started = time.monotonic()
        async with pool.lease("k", timeout=2) as lease:
            waited = time.monotonic() - started
            assert lease.exit_id == "e0"
    assert 0.1 <= waited < 1.0
    assert ticker.ticks >= 10
    # Without a timeout, it waits as long as the ramp asks.
    started = time.monotonic()
    async with pool.lease("k"):
        assert time.monotonic() - started >= 0.1


@pytest.mark.asyncio
async def test_async_raises_warming_up_when_the_wait_does_not_fit():
    # A gap of 2 s against a timeout of 1 s: waiting out the timeout would take a second,
    # twice what the test allows for an answer that takes milliseconds.
    pool = Pool(make_exits(1), warmup={"ramp": 50.0, "initial_interval": 2.0, "horizon": 60.0})
    async with pool.lease("k"):
        pass
    started = time.monotonic()
    with pytest.raises(WarmingUp) as e:
        async with pool.lease("k", timeout=1.0):
            pytest.fail("the block must not run")
    assert time.monotonic() - started < 0.5  # no point waiting for what cannot fit
    assert 1.0 < e.value.retry_after <= 2.0
    assert pool.snapshot()["counts"]["acquired"] == 1


@pytest.mark.asyncio
async def test_async_waits_out_cooling_when_it_fits_the_timeout():
    pool = Pool(make_exits(1), strategy="lru", cooldown=0.15)
    async with pool.lease(site="s"):
        pass
    with pytest.raises(Cooling):
        pool.acquire(site="s")
    with pytest.raises(Cooling) as e:
        async with pool.lease(site="s", timeout=0.01):
            pass
    assert 0.01 < e.value.retry_after <= 0.15
    started = time.monotonic()
    async with pool.lease(site="s", timeout=2) as lease:
        assert lease.exit_id == "e0"
    assert 0.05 <= time.monotonic() - started < 1.0
