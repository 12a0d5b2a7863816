"""The health safeguards as a Python user sees them (issue 17): dead is not an outlier (hard
evidence ejects past `max_ejected`, soft evidence is capped), the panic threshold, what a dead
exit costs a keyed session, and a site incident's ramp back to full traffic.

Everything runs on a ManualClock with synthetic reports; nothing sleeps. Every exit's proxy
carries the password "s3cret-pw", and every event a test reads is checked for it."""

from __future__ import annotations

import asyncio
import math

import pytest

from exitpool import Cooling, Exit, InvalidInput, ManualClock, NoExitAvailable, Pool, SessionExitLost

PW = "s3cret-pw"
SHOP = "shop.example"
OUT = ("quarantined", "dead")


def make_pool(n, *, clock, **kw):
    """`n` exits e0..e(n-1), each presenting 203.0.113.i and tagged with its own id."""
    exits = [Exit(f"e{i}", f"http://user:{PW}@gw.example:{8000 + i}", ip=f"203.0.113.{i + 1}", tags={"id": f"e{i}"}) for i in range(n)]
    kw.setdefault("strategy", "round_robin")
    kw.setdefault("seed", 7)
    return Pool(exits, clock=clock, **kw)


def hit(pool, exit_id, n=1, site=SHOP, **report):
    """`n` leases through `exit_id`, each released with `report` (success if empty)."""
    view = pool.subset(id=exit_id)
    for _ in range(n):
        lease = view.acquire(site=site, timeout=0)
        assert lease.exit_id == exit_id
        pool.release(lease, **report)


def events(pool, kind):
    out = pool.events()
    assert PW not in str(out)
    return [e for e in out if e["kind"] == kind]


@pytest.fixture
def clock():
    return ManualClock()


# --- the setting ------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [-0.1, 1.5, math.nan, math.inf])
def test_panic_threshold_outside_zero_to_one_is_refused_by_name(bad):
    with pytest.raises(InvalidInput, match=r"panic_threshold"):
        make_pool(3, clock=ManualClock(), health={"panic_threshold": bad})


@pytest.mark.parametrize("ok", [0, 0.5, 1])
def test_panic_threshold_takes_zero_to_one(ok):
    pool = make_pool(3, clock=ManualClock(), health={"panic_threshold": ok})
    assert pool.snapshot()["pool"]["panic"] is False


# --- hard evidence is not capped; soft evidence is -------------------------------------------


def test_refused_connections_take_out_every_dead_exit_past_the_cap(clock):
    pool = make_pool(12, clock=clock)  # max_ejected 10% of 12: one exit for soft evidence
    for dead in ("e1", "e5", "e9"):
        hit(pool, dead, n=5, error="connect")
    assert [pool.state(i) for i in ("e1", "e5", "e9")] == ["quarantined"] * 3
    assert not events(pool, "ejection_refused")
    # Soft evidence is still capped: two exits blocked by the site, one goes out.
    hit(pool, "e2", n=2, status=403)
    hit(pool, "e3", n=2, status=403)
    assert [pool.state("e2", SHOP), pool.state("e3", SHOP)] == ["quarantined", "degraded"]
    assert [e["exit_id"] for e in events(pool, "ejection_refused")] == ["e3"]
    # Nothing is served by the dead ones.
    for _ in range(24):
        lease = pool.acquire(site="news.example", timeout=0)
        assert lease.exit_id not in ("e1", "e5", "e9")
        pool.release(lease)


def test_a_drift_takes_the_exit_out_past_the_cap(clock):
    pool = make_pool(10, clock=clock)
    hit(pool, "e0", n=5, error="connect")
    assert pool.state("e0") == "quarantined"
    assert pool.record_probe("e4", True, observed_ip="198.51.100.77") is True
    assert pool.state("e4") == "quarantined"
    assert not events(pool, "ejection_refused")


# --- what a dead exit costs a keyed session ---------------------------------------------------


def test_a_session_on_a_dead_exit_sends_its_threshold_and_then_is_lost(clock):
    pool = make_pool(10, clock=clock)
    hit(pool, "e0", n=5, error="connect")  # one exit out already: the soft cap is spent
    lease = pool.acquire(key="acct", site=SHOP, timeout=0)
    home = lease.exit_id
    pool.release(lease, error="connect")
    sent = 1
    with pytest.raises(SessionExitLost) as lost:
        for _ in range(20):
            lease = pool.acquire(key="acct", site=SHOP, timeout=0)
            assert lease.exit_id == home
            sent += 1
            pool.release(lease, error="connect")
    assert sent == 5, f"{sent} requests went into the dead exit before the session was told"
    assert lost.value.exit_id == home
    assert pool.state(home) in OUT


# --- panic ------------------------------------------------------------------------------------


def test_panic_is_said_once_each_way_shown_in_the_snapshot_and_serves_from_all(clock):
    pool = make_pool(4, clock=clock)
    hit(pool, "e0", n=5, error="connect")
    hit(pool, "e1", n=5, error="connect")
    # Two of four out: half still in service, not fewer.
    assert not events(pool, "panic")
    assert pool.snapshot()["pool"]["panic"] is False
    leases = [pool.acquire(site=SHOP, timeout=0) for _ in range(4)]
    assert {lease.exit_id for lease in leases} == {"e2", "e3"}
    for lease in leases:
        pool.release(lease)
    hit(pool, "e2", n=5, error="connect")
    (entered,) = events(pool, "panic")
    assert (entered["from"], entered["to"], entered["exit_id"]) == ("normal", "panic", None)
    assert "1 of 4 exits in service" in entered["message"]
    assert pool.snapshot()["pool"]["panic"] is True
    served = set()
    for _ in range(8):
        lease = pool.acquire(site=SHOP, timeout=0)
        served.add(lease.exit_id)
        pool.release(lease)
    assert served == {"e0", "e1", "e2", "e3"}
    pool.revive("e0")
    assert [(e["from"], e["to"]) for e in events(pool, "panic")] == [("normal", "panic"), ("panic", "normal")]
    assert pool.snapshot()["pool"]["panic"] is False


def test_panic_threshold_zero_never_panics(clock):
    pool = make_pool(2, clock=clock, health={"panic_threshold": 0})
    hit(pool, "e0", n=5, error="connect")
    hit(pool, "e1", n=5, error="connect")
    assert not events(pool, "panic")
    with pytest.raises(NoExitAvailable):
        pool.acquire(site=SHOP, timeout=0)


# --- recovery from a site incident ------------------------------------------------------------


def lease_when_allowed(pool, clock):
    """A lease for the site as soon as the incident's spacing lets one go (bounded)."""
    for _ in range(10):
        try:
            return pool.acquire(site=SHOP, timeout=0)
        except Cooling as slowed:
            clock.advance(slowed.retry_after)
    raise AssertionError("the site stayed shut")


def spacing(pool):
    """How long the next lease for the site must wait now (0: none)."""
    try:
        lease = pool.acquire(site=SHOP, timeout=0)
    except Cooling as slowed:
        return round(slowed.retry_after, 9)
    pool.release(lease)
    return 0.0


def next_two_waits(pool):
    """The wait for the next lease for the site now and, that lease taken (then handed back
    with no verdict, status 0), for the one after it; None when the first must wait."""
    try:
        first = pool.acquire(site=SHOP, timeout=0)
    except Cooling as slowed:
        return (round(slowed.retry_after, 9), None)
    after = spacing(pool)
    pool.release(first, status=0)
    return (0.0, after)


def test_a_site_incident_ramps_back_to_full_traffic_on_successes(clock):
    pool = make_pool(12, clock=clock)
    # The site fails through every exit: an incident, not twelve bad exits.
    while not events(pool, "site_incident_opened"):
        pool.release(lease_when_allowed(pool, clock), status=503)
    assert not any(pool.state(f"e{i}", SHOP) in OUT for i in range(12))
    # While it fails: one lease a second.
    for _ in range(3):
        pool.release(lease_when_allowed(pool, clock), status=503)
        assert spacing(pool) == 1.0
    # The site is back: each success doubles the leases per second and lets the next one go at
    # once (then the halved spacing holds); a failure drops back to one a second.
    seen = []
    for status in (200, 200, 503, 200, 200, 200, 200):
        pool.release(lease_when_allowed(pool, clock), status=status)
        seen.append(next_two_waits(pool))
    assert seen == [(0.0, 0.5), (0.0, 0.25), (1.0, None), (0.0, 0.5), (0.0, 0.25), (0.0, 0.125), (0.0, 0.0)]
    # Full traffic: 16 leases a second is more than 12 exits, so nothing is spaced.
    leases = [pool.acquire(site=SHOP, timeout=0) for _ in range(24)]
    for lease in leases:
        pool.release(lease)


def test_an_async_lease_waiting_out_the_spacing_goes_when_a_trial_succeeds(clock):
    """`async with` told to retry after the incident's interval does not sleep all of it: the
    trial lease's success lets the next lease go at once, and the waiting one takes it."""
    pool = make_pool(12, clock=clock, health={"incident_interval": 600.0})
    while not events(pool, "site_incident_opened"):
        pool.release(lease_when_allowed(pool, clock), status=503)
    trial = lease_when_allowed(pool, clock)  # the clock stands still from here

    async def waiter():
        async with pool.lease(site=SHOP) as lease:
            return lease.exit_id

    async def main():
        task = asyncio.ensure_future(waiter())
        await asyncio.sleep(0.2)
        assert not task.done(), "the next lease is 600 s away until the trial succeeds"
        pool.release(trial, status=200)
        # Without looking again, the waiter would sleep the whole 600 s of its retry_after.
        return await asyncio.wait_for(task, 10.0)

    assert asyncio.run(main()) in {f"e{i}" for i in range(12)}
