"""One pool, many threads: the invariants a fleet of worker threads relies on."""

from __future__ import annotations

import _thread
import collections
import threading
import time

import pytest

from exitpool import Exit, ManualClock, NoExitAvailable, Pool

THREADS = 16
MAX_LEASES = 2


def make_exits(n):
    return [Exit(f"e{i}", f"http://user:pw@gw.example:{8000 + i}", capacity=1 + i % 2) for i in range(n)]


def run_threads(n, target):
    errors = []
    barrier = threading.Barrier(n)

    def wrapped(i):
        try:
            barrier.wait()
            target(i)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=wrapped, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    assert not errors, errors[:3]


@pytest.mark.parametrize("strategy", ["weighted", "round_robin", "least_conn", "p2c", "lru"])
def test_sixteen_threads_hammering_keyed_and_keyless_leases(strategy):
    pool = Pool(
        make_exits(5),
        strategy=strategy,
        max_leases=MAX_LEASES,
        session_ttl=1e6,
        lease_ttl=1e6,
        seed=1,
        cooldown=0.0,
        clock=ManualClock(),
        # The stopped clock would make an incident's spacing last forever; incidents are
        # tested in test_health.py.
        health={"incident_interval": 0.0},
    )
    lock = threading.Lock()
    inside = collections.Counter()
    peak = collections.Counter()
    homes = collections.defaultdict(set)
    exit_ids = {e.exit_id for e in pool.exits}
    iterations = 150

    def worker(i):
        for j in range(iterations):
            key = f"account-{(i * 7 + j) % 40}" if j % 3 else None
            with pool.lease(key, site=f"site-{j % 3}", timeout=30) as lease:
                exit_id = lease.exit_id
                with lock:
                    inside[exit_id] += 1
                    peak[exit_id] = max(peak[exit_id], inside[exit_id])
                    if key is not None:
                        homes[key].add(exit_id)
                if j % 5 == 0:
                    time.sleep(0)  # let other threads in while holding the lease
                with lock:
                    inside[exit_id] -= 1
                if j % 7 == 0:
                    lease.report(status=503)

    run_threads(THREADS, worker)

    # Never more than max_leases on one exit at once, and the limit was actually reached.
    assert set(peak) <= exit_ids
    assert max(peak.values()) <= MAX_LEASES, peak
    assert max(peak.values()) == MAX_LEASES  # the limit was actually reached...
    # No session moved while alive: every key saw exactly one exit.
    assert len(homes) == 40
    moved = {k: v for k, v in homes.items() if len(v) != 1}
    assert not moved
    for key, (exit_id,) in homes.items():
        assert pool.assign(key).exit_id == exit_id

    snap = pool.snapshot()
    c = snap["counts"]
    total = THREADS * iterations
    assert c["acquired"] == total
    assert c["waits"] > 0  # ...and leases waited for it
    assert c["acquired"] == c["released"] + c["expired"] + snap["live_leases"]
    assert (c["released"], c["expired"], snap["live_leases"]) == (total, 0, 0)
    assert sum(c["outcomes"].values()) == c["released"]
    assert c["outcomes"]["target_error"] == THREADS * len(range(0, iterations, 7))
    assert all(e["active_leases"] == 0 for e in snap["exits"])
    assert sum(e["leases"] for e in snap["exits"]) == total
    assert snap["sessions"] == 40


def test_sessions_never_move_while_the_ring_churns_under_threads():
    """Workers lease while another thread adds, benches, unbenches and re-weights exits."""
    pool = Pool(make_exits(6), max_leases=3, session_ttl=1e6, lease_ttl=1e6, clock=ManualClock())
    lock = threading.Lock()
    homes = collections.defaultdict(set)
    stop = threading.Event()
    churned = []

    def churn():
        try:
            deadline = time.monotonic() + 10
            while pool.snapshot()["sessions"] < 32 and time.monotonic() < deadline:
                time.sleep(0.001)  # start once the workers hold sessions
            for n in range(24):
                victim = f"e{n % 6}"
                churned.append((victim, pool.bench(victim)))
                pool.set_capacity(f"e{(n + 1) % 6}", 1 + n % 4)
                if n % 5 == 0:
                    pool.add(Exit(f"x{n}", f"http://gw.example:{9000 + n}"))
                time.sleep(0.001)
                pool.unbench(victim)
        finally:
            stop.set()

    done = collections.Counter()

    def worker(i):
        j = 0
        # At least 120 leases each, and keep going until the churn is over.
        while j < 120 or not stop.is_set():
            key = f"account-{(i * 13 + j) % 64}" if j % 4 else None
            with pool.lease(key, timeout=30) as lease:
                if key is not None:
                    with lock:
                        homes[key].add(lease.exit_id)
            j += 1
        with lock:
            done[i] = j

    t = threading.Thread(target=churn)
    t.start()
    try:
        run_threads(THREADS, worker)
    finally:
        t.join()
    assert len(churned) == 24
    assert len(homes) == 64
    assert {k: v for k, v in homes.items() if len(v) != 1} == {}
    snap = pool.snapshot()
    c = snap["counts"]
    assert c["acquired"] == c["released"] + c["expired"] + snap["live_leases"] == sum(done.values())
    assert snap["live_leases"] == 0
    # bench() only ever named keys that were really bound to the benched exit.
    named = 0
    for victim, keys in churned:
        for k in keys:
            assert homes[k] == {victim}
            named += 1
    assert named > 0


def test_threads_with_crashed_workers_and_expiry():
    """Some workers never release; the clock passes lease_ttl; their late releases are ignored."""
    clock = ManualClock()
    pool = Pool(make_exits(4), max_leases=MAX_LEASES, lease_ttl=60.0, clock=clock)
    lock = threading.Lock()
    abandoned = []

    def worker(i):
        for j in range(60):
            lease = pool.acquire(f"acct-{i}" if i % 2 else None, timeout=30)
            if i < 4 and j == 0:
                with lock:
                    abandoned.append(lease)  # a crashed worker: never released in time
                continue
            assert pool.release(lease) is True

    # The crashed workers' slots are held until the clock passes lease_ttl: advance it while
    # the others wait.
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            time.sleep(0.01)
            clock.advance(1.0)

    t = threading.Thread(target=ticker)
    t.start()
    try:
        run_threads(THREADS, worker)
    finally:
        stop.set()
        t.join()

    clock.advance(61)
    snap = pool.snapshot()
    c = snap["counts"]
    assert c["acquired"] == THREADS * 60
    assert c["expired"] == len(abandoned) == 4
    assert c["acquired"] == c["released"] + c["expired"] + snap["live_leases"]
    assert snap["live_leases"] == 0
    # The late releases change nothing.
    for lease in abandoned:
        assert pool.release(lease) is False
    after = pool.snapshot()["counts"]
    assert (after["released"], after["expired"], after["ignored_releases"]) == (c["released"], 4, 4)
    assert all(e["active_leases"] == 0 for e in pool.snapshot()["exits"])


def test_a_waiting_sync_lease_gets_the_slot_when_another_thread_releases():
    pool = Pool(make_exits(1), max_leases=1)
    held = pool.acquire("holder")
    got = {}

    def waiter():
        started = time.monotonic()
        with pool.lease("waiter", timeout=5) as lease:
            got["exit"] = lease.exit_id
            got["waited"] = time.monotonic() - started

    t = threading.Thread(target=waiter)
    t.start()
    time.sleep(0.15)
    assert "exit" not in got  # still waiting
    assert pool.release(held) is True
    t.join(timeout=5)
    assert got["exit"] == "e0"
    assert 0.13 <= got["waited"] < 1.0
    c = pool.snapshot()["counts"]
    assert (c["acquired"], c["released"]) == (2, 2)


def test_a_waiting_sync_lease_releases_the_gil():
    pool = Pool(make_exits(1), max_leases=1)
    held = pool.acquire()
    result = {}

    def waiter():
        try:
            pool.acquire(timeout=0.4)
        except NoExitAvailable as e:
            result["error"] = str(e)

    t = threading.Thread(target=waiter)
    t.start()
    # Pure Python work on this thread while the other waits: it must never stall for long.
    gaps = []
    last = time.perf_counter()
    end = last + 0.3
    while last < end:
        now = time.perf_counter()
        gaps.append(now - last)
        last = now
    t.join(timeout=5)
    assert result["error"] == "every exit of the pool that could serve this lease stayed at max_leases for 0.4 s"
    # Holding the GIL while waiting would stall this loop for most of the 0.3 s; allow for
    # the odd scheduling hiccup of a busy machine.
    stalled = sum(g for g in gaps if g > 0.02)
    assert stalled < 0.12, (stalled, max(gaps))
    pool.release(held)


def test_ctrl_c_ends_a_waiting_sync_lease():
    pool = Pool(make_exits(1), max_leases=1)
    held = pool.acquire()
    # Ctrl-C as Python sees it: the main thread's next signal check raises KeyboardInterrupt.
    interrupter = threading.Timer(0.2, _thread.interrupt_main)
    interrupter.start()
    started = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            pool.acquire(timeout=30)
    finally:
        interrupter.cancel()
    assert time.monotonic() - started < 20, "the wait ran to its timeout instead of seeing Ctrl-C"
    snap = pool.snapshot()
    assert (snap["live_leases"], snap["counts"]["acquired"], snap["counts"]["waits"]) == (1, 1, 0)
    pool.release(held)


def test_a_slot_freed_by_expiry_reaches_a_waiting_thread():
    clock = ManualClock()
    pool = Pool(make_exits(1), max_leases=1, lease_ttl=30.0, clock=clock)
    pool.acquire("crashed")
    got = {}

    def waiter():
        with pool.lease("next", timeout=5) as lease:
            got["exit"] = lease.exit_id

    t = threading.Thread(target=waiter)
    t.start()
    time.sleep(0.05)
    assert "exit" not in got
    clock.advance(30)  # nobody releases: expiry alone frees the slot
    t.join(timeout=5)
    assert got["exit"] == "e0"
    assert pool.snapshot()["counts"]["expired"] == 1
