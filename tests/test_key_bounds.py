"""Bounds on what one-off keys keep alive (`max_sessions=`, `max_pairings=`), and a pool of
20,000 exits changed one exit at a time. All on a ManualClock; no timing asserts."""

from __future__ import annotations

import pytest

from exitpool import Exit, InvalidInput, ManualClock, Pool, WarmingUp


def make_exits(n, **tags):
    return [Exit(f"e{i}", f"http://user:pw@gw.example:{8000 + i % 1000}", **tags) for i in range(n)]


def lease_once(pool, key):
    with pool.lease(key) as lease:
        return lease.exit_id


def kinds(pool):
    return [e["kind"] for e in pool.events()]


def test_a_flood_of_one_off_keys_keeps_at_most_max_sessions():
    clock = ManualClock(1000.0)
    pool = Pool(make_exits(20), clock=clock, max_sessions=1000)
    for i in range(100_000):
        lease_once(pool, f"one-off-{i}")
        if i % 10_000 == 0:
            assert pool.snapshot()["sessions"] <= 1000
    snap = pool.snapshot()
    assert snap["sessions"] <= 1000
    assert "sessions_evicted" in kinds(pool)
    # Every one-off key past the bound was evicted, and the snapshot counts them.
    assert snap["counts"]["evicted_sessions"] >= 100_000 - 1000
    assert snap["counts"]["evicted_pairings"] == 0
    # The newest keys keep their sessions: this one is still bound where it leased.
    assert lease_once(pool, "one-off-99999") == pool.assign("one-off-99999").exit_id


def test_a_session_holding_a_lease_is_not_evicted():
    clock = ManualClock(1000.0)
    pool = Pool(make_exits(5), clock=clock, max_sessions=10)
    with pool.lease("held") as held:
        for i in range(1000):
            clock.advance(0.001)
            lease_once(pool, f"one-off-{i}")
        assert pool.snapshot()["sessions"] <= 10
        # Benching its exit lists it: the session is alive while its lease is out.
        assert "held" in pool.bench(held.exit_id)
        pool.unbench(held.exit_id)
        assert lease_once(pool, "held") == held.exit_id
    # Given back, it is idle like any other, and goes when it is the least recently leased.
    for i in range(100):
        clock.advance(0.001)
        lease_once(pool, f"later-{i}")
    assert "held" not in pool.bench(held.exit_id)


def test_a_flood_of_one_off_keys_keeps_at_most_max_pairings():
    clock = ManualClock(1000.0)
    pool = Pool(make_exits(20), clock=clock, warmup=True, max_pairings=1000)
    lease_once(pool, "first")
    with pytest.raises(WarmingUp):
        lease_once(pool, "first")  # remembered: its gap has not passed
    for i in range(100_000):
        clock.advance(0.0001)  # 10 s in all: "first" would still be within its 60 s gap
        lease_once(pool, f"one-off-{i}")
    assert "pairings_evicted" in kinds(pool)
    message = next(e["message"] for e in pool.events() if e["kind"] == "pairings_evicted")
    assert "max_pairings 1000" in message
    assert pool.snapshot()["counts"]["evicted_pairings"] >= 100_000 - 1000
    # Forgotten as the least recently used: a new pairing again, whose first lease goes at once.
    pool.end_session("first")
    lease_once(pool, "first")


def test_none_lifts_the_bounds():
    clock = ManualClock(1000.0)
    pool = Pool(make_exits(3), clock=clock, max_sessions=None, max_pairings=None)
    for i in range(3000):
        lease_once(pool, f"k{i}")
    assert pool.snapshot()["sessions"] == 3000
    assert "sessions_evicted" not in kinds(pool)


@pytest.mark.parametrize("name", ["max_sessions", "max_pairings"])
@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (0, "0 is outside 1..=4294967295"),
        (-1, "-1 is outside"),
        (2**70, "1180591620717411303424 is outside"),
        (2.5, "2.5"),
        ("10", "got a str"),
    ],
)
def test_a_bad_bound_raises_invalid_input_naming_it(name, value, shown):
    with pytest.raises(InvalidInput) as e:
        Pool(make_exits(1), **{name: value})
    assert name in str(e.value) and shown in str(e.value)


def test_the_bounds_from_a_config_file(tmp_path):
    path = tmp_path / "pool.toml"
    path.write_text('max_sessions = 50\nmax_pairings = 50\nwarmup = true\n[[exit]]\nid = "a"\nproxy = "http://gw.example:8000"\n')
    pool = Pool.from_config(path, clock=ManualClock(1000.0))
    for i in range(500):
        lease_once(pool, f"k{i}")
    assert pool.snapshot()["sessions"] <= 50
    assert {"sessions_evicted", "pairings_evicted"} <= set(kinds(pool))


def test_add_remove_bench_and_subset_on_a_pool_of_twenty_thousand_exits():
    exits = [Exit(f"e{i}", f"http://gw.example:{8000 + i % 1000}", tags={"kind": "dc" if i % 2 else "isp"}) for i in range(20_000)]
    pool = Pool(exits, clock=ManualClock(1000.0))
    home = lease_once(pool, "acct")
    assert pool.bench(home) == ["acct"]
    pool.unbench(home)
    pool.add(Exit("extra", "http://gw.example:9000", tags={"kind": "dc"}, capacity=2))
    pool.remove("e7")
    dc = pool.subset(kind="dc")
    with dc.lease("acct-dc") as lease:
        assert lease.exit.tags["kind"] == "dc"
    assert len(pool.snapshot()["exits"]) == 20_000
    # The session outlives the changes: "acct" still leases its exit.
    assert lease_once(pool, "acct") == home


def test_the_collector_counts_evictions():
    from prometheus_client import CollectorRegistry

    from exitpool.prometheus import PoolCollector

    pool = Pool(make_exits(3), clock=ManualClock(1000.0), max_sessions=10)
    for i in range(50):
        lease_once(pool, f"k{i}")
    registry = CollectorRegistry()
    registry.register(PoolCollector(pool))
    evicted = registry.get_sample_value("exitpool_sessions_evicted_total")
    assert evicted == pool.snapshot()["counts"]["evicted_sessions"] >= 40
    assert registry.get_sample_value("exitpool_pairings_evicted_total") == 0
