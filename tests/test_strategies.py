"""Keyless selection: what each `strategy=` does with tasks that have no account to stick to."""

from __future__ import annotations

import collections
import itertools

import pytest

from exitpool import Cooling, Exit, ManualClock, NoExitAvailable, Pool


def ex(exit_id, capacity=1, port=8000):
    return Exit(exit_id, f"http://user:pw@gw.example:{port}", capacity=capacity)


def abc(*capacities):
    return [ex(name, c, 8000 + i) for i, (name, c) in enumerate(zip("abcdefgh", capacities))]


def picks(pool, n, **kw):
    """Exit ids of n keyless leases, each released before the next."""
    out = []
    for _ in range(n):
        with pool.lease(**kw) as lease:
            out.append(lease.exit_id)
    return out


def active(pool):
    return {e["exit_id"]: e["active_leases"] for e in pool.snapshot()["exits"]}


def pin(pool, exit_id, n):
    """n live keyed leases on one exit (keys found through pool.assign)."""
    held = []
    i = 0
    while len(held) < n:
        key = f"pin-{exit_id}-{i}"
        i += 1
        if pool.assign(key).exit_id == exit_id:
            held.append(pool.acquire(key))
    return held


# --- round_robin --------------------------------------------------------------------------------


def test_round_robin_goes_in_order():
    pool = Pool(abc(1, 1, 1), strategy="round_robin", clock=ManualClock())
    assert picks(pool, 7) == list("abcabca")
    with pool.lease() as lease:
        assert lease.strategy == "round_robin"


def test_round_robin_ignores_capacity_and_skips_full_exits():
    pool = Pool(abc(5, 1, 1), strategy="round_robin", max_leases=1, clock=ManualClock())
    assert picks(pool, 6) == list("abcabc")
    held = pool.acquire()  # takes the next in turn: a
    assert held.exit_id == "a"
    assert picks(pool, 4) == list("bcbc")
    pool.release(held)


def test_round_robin_skips_benched_exits():
    pool = Pool(abc(1, 1, 1), strategy="round_robin", clock=ManualClock())
    pool.bench("b")
    assert picks(pool, 4) == list("acac")
    pool.unbench("b")
    assert sorted(picks(pool, 3)) == list("abc")


# --- weighted -------------------------------------------------------------------------------------


def test_weighted_is_smooth_earliest_deadline_first_for_5_1_1():
    pool = Pool(abc(5, 1, 1), clock=ManualClock())  # weighted is the default
    # Each exit is due every 1/weight of virtual time, starting half a period in: b and c
    # come inside the first round, and every round of seven repeats it.
    assert picks(pool, 7) == list("aabcaaa")
    assert picks(pool, 14) == list("aabcaaa") * 2
    with pool.lease() as lease:
        assert lease.strategy == "weighted"


def test_weighted_follows_capacity_ratios_without_bursts():
    pool = Pool(abc(3, 2, 1), strategy="weighted", clock=ManualClock())
    seq = picks(pool, 600)
    assert collections.Counter(seq) == {"a": 300, "b": 200, "c": 100}
    # Smooth: a never runs more than twice in a row, b and c never twice.
    runs = [(k, len(list(g))) for k, g in itertools.groupby(seq)]
    assert max(n for k, n in runs if k == "a") <= 2
    assert max(n for k, n in runs if k != "a") == 1


def test_weighted_follows_a_capacity_change():
    pool = Pool(abc(1, 1), strategy="weighted", clock=ManualClock())
    assert collections.Counter(picks(pool, 10)) == {"a": 5, "b": 5}
    pool.set_capacity("a", 3)
    assert collections.Counter(picks(pool, 40)) == {"a": 30, "b": 10}


def test_weighted_skips_full_exits():
    pool = Pool(abc(5, 1, 1), max_leases=1, clock=ManualClock())
    held = pin(pool, "a", 1)
    seq = picks(pool, 10, timeout=0)
    assert "a" not in seq
    assert collections.Counter(seq) == {"b": 5, "c": 5}
    pool.release(held[0])


# --- least_conn -----------------------------------------------------------------------------------


def test_least_conn_picks_the_exit_with_fewest_active_leases():
    pool = Pool(abc(1, 1, 1, 1), strategy="least_conn", clock=ManualClock())
    pin(pool, "a", 3)
    pin(pool, "b", 1)
    pin(pool, "d", 2)
    held = []
    for _ in range(10):
        before = active(pool)
        lease = pool.acquire()
        assert lease.strategy == "least_conn"
        assert before[lease.exit_id] == min(before.values()), (before, lease.exit_id)
        held.append(lease)
    assert active(pool) == {"a": 4, "b": 4, "c": 4, "d": 4}


def test_least_conn_shares_ties_in_turn():
    pool = Pool(abc(1, 1, 1), strategy="least_conn", clock=ManualClock())
    assert picks(pool, 6) == list("abcabc")


# --- p2c ------------------------------------------------------------------------------------------


def test_p2c_with_a_seed_is_reproducible():
    def run(seed):
        pool = Pool(abc(1, 1, 1, 1, 1), strategy="p2c", seed=seed, clock=ManualClock())
        out = []
        held = []
        for i in range(60):
            lease = pool.acquire()
            out.append(lease.exit_id)
            held.append(lease)
            if i % 3 == 2:  # let some go, so loads differ and ties differ
                pool.release(held.pop(0))
        return out

    assert run(7) == run(7)
    assert run(12345) == run(12345)
    assert run(7) != run(8)
    assert len(set(run(7))) == 5


def test_p2c_prefers_idle_exits():
    pool = Pool(abc(1, 1, 1), strategy="p2c", seed=1, clock=ManualClock())
    pin(pool, "a", 5)
    seq = picks(pool, 200)
    # Every pair of two distinct exits holds an idle one, which wins over a.
    assert "a" not in seq
    assert set(seq) == {"b", "c"}
    with pool.lease() as lease:
        assert lease.strategy == "p2c"


def test_p2c_never_picks_the_busier_of_two():
    pool = Pool(abc(1, 1), strategy="p2c", seed=3, clock=ManualClock())
    held = []
    for _ in range(40):
        before = active(pool)
        lease = pool.acquire()
        assert before[lease.exit_id] == min(before.values())
        held.append(lease)
    assert active(pool) == {"a": 20, "b": 20}


def test_p2c_weighs_load_by_capacity():
    pool = Pool(abc(4, 1), strategy="p2c", seed=5, clock=ManualClock())
    held = [pool.acquire() for _ in range(50)]
    assert active(pool) == {"a": 40, "b": 10}
    for lease in held:
        pool.release(lease)


# --- lru ------------------------------------------------------------------------------------------


def test_lru_picks_the_exit_idle_longest_for_the_site():
    clock = ManualClock()
    pool = Pool(abc(1, 1, 1), strategy="lru", clock=clock)
    site = "shop.example"
    seq = []
    for _ in range(3):
        seq += picks(pool, 1, site=site)
        clock.advance(1)
    assert seq == list("abc")  # used at t=0, 1, 2
    clock.advance(10)  # t=13: a idle 13 s, b 12 s, c 11 s
    assert picks(pool, 1, site=site) == ["a"]
    assert picks(pool, 1, site=site) == ["b"]
    clock.advance(20)
    assert picks(pool, 1, site=site) == ["c"]  # idle since t=2
    with pool.lease(site=site) as lease:
        assert lease.strategy == "lru"


def test_lru_raises_cooling_when_every_exit_is_inside_the_cooldown():
    clock = ManualClock()
    pool = Pool(abc(1, 1, 1), strategy="lru", clock=clock)  # cooldown 8 s by default
    site = "shop.example"
    assert picks(pool, 1, site=site) == ["a"]
    clock.advance(2)
    assert picks(pool, 1, site=site) == ["b"]
    clock.advance(2)
    assert picks(pool, 1, site=site) == ["c"]
    clock.advance(1)  # t=5: a was used 5 s ago
    before = pool.snapshot()["counts"]
    with pytest.raises(Cooling) as e:
        with pool.lease(site=site):
            pytest.fail("the block must not run")
    assert e.value.retry_after == pytest.approx(3.0)
    assert str(e.value) == "the pool: every exit used this site within the lru cooldown; retry after 3.000 s"
    # A timeout does not change that: a sync lease raises at once.
    with pytest.raises(Cooling):
        pool.acquire(site=site, timeout=5)
    assert pool.snapshot()["counts"] == before
    clock.advance(e.value.retry_after)
    assert picks(pool, 1, site=site) == ["a"]
    with pytest.raises(Cooling) as e:
        pool.acquire(site=site)
    assert e.value.retry_after == pytest.approx(2.0)  # b, used at t=2, is free at t=10


def test_lru_sites_cool_independently():
    clock = ManualClock()
    pool = Pool(abc(1, 1), strategy="lru", clock=clock)
    assert picks(pool, 2, site="shop.example") == ["a", "b"]
    with pytest.raises(Cooling):
        pool.acquire(site="shop.example")
    # The other site has not used either exit yet.
    assert sorted(picks(pool, 2, site="other.example")) == ["a", "b"]
    with pytest.raises(Cooling):
        pool.acquire(site="other.example")
    # Unscoped leases are a site of their own.
    assert sorted(picks(pool, 2)) == ["a", "b"]
    clock.advance(8)
    assert sorted(picks(pool, 2, site="shop.example")) == ["a", "b"]


def test_lru_cooldown_is_configurable():
    clock = ManualClock()
    pool = Pool(abc(1, 1), strategy="lru", cooldown=30.0, clock=clock)
    picks(pool, 2, site="s")
    clock.advance(10)
    with pytest.raises(Cooling) as e:
        pool.acquire(site="s")
    assert e.value.retry_after == pytest.approx(20.0)
    pool = Pool(abc(1, 1), strategy="lru", cooldown=0.0, clock=clock)
    assert picks(pool, 4, site="s") == list("abab")


def test_lru_skips_full_exits_and_reports_full_not_cooling():
    clock = ManualClock()
    pool = Pool(abc(1, 1), strategy="lru", max_leases=1, clock=clock)
    a = pool.acquire(site="s")
    b = pool.acquire(site="s")
    assert (a.exit_id, b.exit_id) == ("a", "b")
    with pytest.raises(NoExitAvailable):
        pool.acquire(site="s", timeout=0)
    clock.advance(100)
    pool.release(a)
    assert picks(pool, 1, site="s") == ["a"]


# --- every strategy -------------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["round_robin", "weighted", "least_conn", "lru", "p2c"])
def test_every_strategy_uses_every_exit_and_respects_max_leases(strategy):
    clock = ManualClock()
    pool = Pool(abc(1, 2, 1), strategy=strategy, max_leases=2, cooldown=0.0, seed=9, clock=clock)
    held = [pool.acquire(timeout=0) for _ in range(6)]
    assert active(pool) == {"a": 2, "b": 2, "c": 2}
    with pytest.raises(NoExitAvailable):
        pool.acquire(timeout=0)
    for lease in held:
        assert pool.release(lease) is True
    seen = collections.Counter(picks(pool, 300))
    assert set(seen) == {"a", "b", "c"}
    # Keys ignore the strategy: they follow the ring.
    for i in range(20):
        with pool.lease(f"acct-{i}") as lease:
            assert lease.strategy == "ring"
            assert lease.exit_id == pool.assign(f"acct-{i}").exit_id
