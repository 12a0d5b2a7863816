"""The warm-up governor (`warmup=`): a new (key, exit) pairing leases slowly at first.

Documented rule: a pairing's leases must be at least `initial_interval * (1 - age / ramp)` apart
(defaults 60 s and 1800 s), so the first goes at once and the gap shrinks to nothing over the
ramp; a pairing the key used within `horizon` (24 h) is not new. All on a ManualClock."""

from __future__ import annotations

import pytest

from exitpool import Exit, ManualClock, Pool, SessionExitLost, WarmingUp

RAMP, INTERVAL, HORIZON = 1800.0, 60.0, 86_400.0


def make_exits(n):
    return [Exit(f"e{i}", f"http://user:pw@gw.example:{8000 + i}") for i in range(n)]


def gap(age, ramp=RAMP, interval=INTERVAL):
    return max(0.0, interval * (1 - age / ramp))


def lease_once(pool, key, **kw):
    with pool.lease(key, **kw) as lease:
        return lease.exit_id


@pytest.fixture
def clock():
    return ManualClock(1000.0)


def test_off_by_default_back_to_back_leases_never_raise(clock):
    for warmup in ({}, {"warmup": None}, {"warmup": False}):
        pool = Pool(make_exits(3), clock=clock, **warmup)
        for i in range(20):
            for _ in range(10):
                lease_once(pool, f"account-{i}")
        assert pool.snapshot()["counts"]["acquired"] == 200


def test_first_lease_goes_the_next_raises_warming_up(clock):
    pool = Pool(make_exits(2), clock=clock, warmup=True)
    home = lease_once(pool, "account-3f9")
    before = pool.snapshot()
    with pytest.raises(WarmingUp) as e:
        with pool.lease("account-3f9"):
            pytest.fail("the block must not run")
    assert e.value.retry_after == pytest.approx(INTERVAL)
    assert str(e.value) == f'the pairing with exit "{home}" is warming up; retry after 60.000 s'
    assert isinstance(e.value.retry_after, float)
    # Refused: nothing leased, nothing counted.
    after = pool.snapshot()
    assert after["counts"] == before["counts"]
    assert after["live_leases"] == 0
    # A sync lease raises at once, whatever its timeout.
    with pytest.raises(WarmingUp):
        pool.acquire("account-3f9", timeout=120)


def test_retry_after_follows_the_documented_gap(clock):
    pool = Pool(make_exits(1), clock=clock, warmup=True)
    lease_once(pool, "k")  # born (and last used) at age 0
    clock.advance(10)
    with pytest.raises(WarmingUp) as e:
        lease_once(pool, "k")
    assert e.value.retry_after == pytest.approx(gap(10) - 10)  # 49.67 s
    clock.advance(e.value.retry_after)
    lease_once(pool, "k")  # goes once its time has come
    age = 10 + gap(10) - 10
    with pytest.raises(WarmingUp) as e:
        lease_once(pool, "k")
    assert e.value.retry_after == pytest.approx(gap(age))


def test_leasing_at_retry_after_walks_the_whole_ramp_then_no_spacing(clock):
    pool = Pool(make_exits(1), clock=clock, warmup=True)
    born = clock.now()
    lease_once(pool, "k")
    last = born
    granted = 1
    while clock.now() - born < RAMP:
        try:
            lease_once(pool, "k")
        except WarmingUp as e:
            age = clock.now() - born
            assert e.retry_after == pytest.approx(gap(age) - (clock.now() - last), abs=1e-6)
            assert 0 < e.retry_after <= INTERVAL
            clock.advance(e.retry_after)
            continue
        granted += 1
        last = clock.now()
        if clock.now() - born < RAMP:
            clock.advance(0.5)
    # The gaps shrink from 60 s, so well over 30 leases fit in the ramp, but far fewer than
    # without spacing.
    assert 40 < granted < 200, granted
    # After the ramp: no spacing at all.
    for _ in range(50):
        lease_once(pool, "k")


def test_a_key_returning_to_the_exit_it_knows_is_not_new(clock):
    pool = Pool(make_exits(3), clock=clock, warmup=True)
    home = lease_once(pool, "k")
    clock.advance(RAMP)  # ramp over; the session (900 s) ended meanwhile
    assert pool.snapshot()["sessions"] == 0
    for _ in range(5):
        assert lease_once(pool, "k") == home
    clock.advance(20 * 3600)  # 20 h later, within the 24 h horizon
    with pool.lease("k") as lease:
        assert (lease.exit_id, lease.strategy) == (home, "ring")  # a new session...
    for _ in range(5):
        assert lease_once(pool, "k") == home  # ...on a pairing that is not new


def test_a_pairing_unused_beyond_the_horizon_is_new_again(clock):
    pool = Pool(make_exits(2), clock=clock, warmup=True)
    lease_once(pool, "k")
    clock.advance(RAMP)
    lease_once(pool, "k")
    lease_once(pool, "k")
    clock.advance(HORIZON + 1)
    lease_once(pool, "k")
    with pytest.raises(WarmingUp) as e:
        lease_once(pool, "k")
    assert e.value.retry_after == pytest.approx(INTERVAL)


def test_a_pairing_still_in_its_ramp_stays_in_it_across_sessions(clock):
    pool = Pool(make_exits(1), clock=clock, warmup=True, session_ttl=30.0)
    lease_once(pool, "k")
    clock.advance(31)  # the session ended; the pairing is 31 s old
    assert pool.snapshot()["sessions"] == 0
    with pytest.raises(WarmingUp) as e:
        lease_once(pool, "k")
    assert e.value.retry_after == pytest.approx(gap(31) - 31)
    assert pool.snapshot()["sessions"] == 0  # a refused lease binds nothing


def test_another_exit_for_the_same_key_is_a_new_pairing(clock):
    pool = Pool(make_exits(3), clock=clock, warmup=True)
    home = lease_once(pool, "k")
    clock.advance(RAMP)
    lease_once(pool, "k")
    pool.remove(home)
    with pytest.raises(SessionExitLost):
        lease_once(pool, "k")
    pool.end_session("k")
    new_home = lease_once(pool, "k")
    assert new_home != home
    with pytest.raises(WarmingUp) as e:
        lease_once(pool, "k")
    assert str(e.value) == f'the pairing with exit "{new_home}" is warming up; retry after 60.000 s'


def test_each_key_has_its_own_pairing(clock):
    pool = Pool(make_exits(1), clock=clock, warmup=True)
    for i in range(10):
        assert lease_once(pool, f"account-{i}") == "e0"
    for i in range(10):
        with pytest.raises(WarmingUp):
            lease_once(pool, f"account-{i}")


def test_keyless_leases_are_not_governed(clock):
    pool = Pool(make_exits(2), clock=clock, warmup=True)
    for _ in range(20):
        with pool.lease(site="shop.example"):
            pass


def test_warmup_as_a_dict_or_a_ramp(clock):
    pool = Pool(make_exits(1), clock=clock, warmup={"ramp": 600, "initial_interval": 30})
    lease_once(pool, "k")
    clock.advance(300)  # half the ramp: the gap is half of 30 s
    lease_once(pool, "k")
    with pytest.raises(WarmingUp) as e:
        lease_once(pool, "k")
    assert e.value.retry_after == pytest.approx(15.0)
    clock.advance(300)
    for _ in range(5):
        lease_once(pool, "k")

    pool = Pool(make_exits(1), clock=clock, warmup=600)  # a ramp in seconds, default interval
    lease_once(pool, "k")
    with pytest.raises(WarmingUp) as e:
        lease_once(pool, "k")
    assert e.value.retry_after == pytest.approx(INTERVAL)
    clock.advance(600)
    lease_once(pool, "k")
    lease_once(pool, "k")


def test_a_short_horizon(clock):
    pool = Pool(make_exits(1), clock=clock, warmup={"ramp": 60, "initial_interval": 10, "horizon": 120})
    lease_once(pool, "k")
    clock.advance(60)
    lease_once(pool, "k")
    lease_once(pool, "k")
    clock.advance(121)
    lease_once(pool, "k")
    with pytest.raises(WarmingUp) as e:
        lease_once(pool, "k")
    assert e.value.retry_after == pytest.approx(10.0)
