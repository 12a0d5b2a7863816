"""One pool, everything at once: 32 threads, 200 asyncio tasks on one loop in a thread and 50
tasks on each of two more loops in two more threads lease, report and release (with ``with``,
``async with`` and ``acquire``/``release``, through the pool and its subsets), take snapshots,
page through events, bench and unbench, add and remove exits, change capacities and end
sessions, while pairs of threads release one shared lease at the same moment and an event
callback calls back into the pool. Every loop is bounded; a thread still alive after the global
join timeout is a deadlock.

Afterwards: no exit ever held more than ``max_leases`` (counted inside the workers), no live
session moved, every shared lease was released exactly once, the pool's counts balance with
the workers' own, every event was delivered to the callback once, and nothing raised but the
documented refusals (in particular no borrow error from the ``frozen`` classes' interior locks).
"""

from __future__ import annotations

import asyncio
import collections
import random
import sys
import threading
import time

import pytest

from exitpool import (
    Cooling,
    Exit,
    InvalidInput,
    ManualClock,
    NoExitAvailable,
    Pool,
    SessionExitLost,
    UnknownExit,
)

PW = "s3cret-pw"
MAX_LEASES = 2
THREADS = 32  # even: they work in pairs that share leases
ITERATIONS = 80
LOOP_TASKS = (200, 50, 50)  # asyncio tasks on each of three loops, each loop in its own thread
TASK_ITERATIONS = 12
JOIN_TIMEOUT = 60.0
CORE = [f"e{i}" for i in range(6)]
SPARE = [f"x{i}" for i in range(3)]
STABLE = [f"stable-{i}" for i in range(48)]  # never ended: their sessions must never move
CHURN = [f"churn-{i}" for i in range(12)]  # ended now and then: they may move
SITES = [None, "shop.example", "news.example"]
REFUSALS = (NoExitAvailable, SessionExitLost, Cooling)
# Most requests succeed; the rest exercise every health path (blocks, 429s with and without
# Retry-After, 5xx, timeouts, tunnel failures).
OUTCOMES = [{"status": 200}] * 30 + [
    {"status": 403}, {"status": 429, "retry_after": 0.5}, {"status": 429}, {"status": 503},
    {"error": "timeout"}, {"error": "connect"}, {"status": 200, "captcha": True},
]


def make_exit(exit_id, capacity=1):
    region = "eu" if int(exit_id[1:]) % 2 else "us"
    return Exit(exit_id, f"http://user:{PW}@gw.example:{(CORE + SPARE).index(exit_id) + 9000}",
                capacity=capacity, tags={"region": region})


class Ledger:
    """What the workers saw, behind one lock."""

    def __init__(self):
        self.lock = threading.Lock()
        self.inside = collections.Counter()
        self.peak = collections.Counter()
        self.homes = collections.defaultdict(set)
        self.acquired = 0
        self.released = 0
        self.ignored = 0
        self.refused = collections.Counter()
        self.shared = collections.Counter()  # results of the two-thread releases
        self.errors = []

    def entered(self, lease, key):
        exit_id = lease.exit_id
        with self.lock:
            self.acquired += 1
            self.inside[exit_id] += 1
            self.peak[exit_id] = max(self.peak[exit_id], self.inside[exit_id])
            if key in STABLE:
                self.homes[key].add(exit_id)

    def leaving(self, lease):
        with self.lock:
            self.inside[lease.exit_id] -= 1

    def count(self, released=0, ignored=0):
        with self.lock:
            self.released += released
            self.ignored += ignored

    def refusal(self, e):
        assert PW not in str(e), e
        with self.lock:
            self.refused[type(e).__name__] += 1

    def failed(self, where, e):
        if isinstance(e, RuntimeError) and "borrow" in str(e).lower():
            where = f"BORROW ERROR in {where}"
        with self.lock:
            self.errors.append(f"{where}: {type(e).__name__}: {e}")


def check_snapshot(pool):
    """A snapshot is taken under the pool's lock, so it must be consistent in itself."""
    snap = pool.snapshot()
    assert PW not in str(snap)
    c = snap["counts"]
    assert c["acquired"] == c["released"] + c["expired"] + snap["live_leases"], c
    assert sum(e["active_leases"] for e in snap["exits"]) <= snap["live_leases"]
    over = {e["exit_id"]: e["active_leases"] for e in snap["exits"] if e["active_leases"] > MAX_LEASES}
    assert not over, over


def check_events(pool, since):
    events = pool.events(since=since)
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(set(seqs)) and all(s >= since for s in seqs), seqs[:20]
    assert all(PW not in e["message"] for e in events)
    return seqs[-1] + 1 if seqs else since


def pick(rng):
    key = rng.choice([None, None, rng.choice(STABLE), rng.choice(STABLE), rng.choice(CHURN)])
    return key, rng.choice(SITES), rng.choice(OUTCOMES)


def lease_once(pool, views, ledger, rng):
    """One lease of a random kind, released with a random outcome."""
    key, site, outcome = pick(rng)
    view = rng.choice(views)
    try:
        if rng.random() < 0.5:
            with view.lease(key, site=site, timeout=0.5) as lease:
                ledger.entered(lease, key)
                if rng.random() < 0.3:
                    time.sleep(0)  # hold the slot while other threads run
                assert lease.active and PW not in repr(lease)
                ledger.leaving(lease)
                lease.report(**outcome)
            ledger.count(released=1)
        else:
            lease = view.acquire(key, site=site, timeout=0.5)
            ledger.entered(lease, key)
            ledger.leaving(lease)
            assert pool.release(lease, **outcome) is True
            ledger.count(released=1)
    except REFUSALS as e:
        ledger.refusal(e)


def admin_once(pool, ledger, rng, since):
    """One of the pool's other calls; refusals that a race makes legal are fine."""
    what = rng.randrange(7)
    try:
        if what == 0:
            check_snapshot(pool)
        elif what == 1:
            since = check_events(pool, since)
        elif what == 2:
            exit_id = rng.choice(CORE)
            drained = pool.bench(exit_id)
            assert set(drained) <= set(STABLE) | set(CHURN)
            time.sleep(0)
            pool.unbench(exit_id)
        elif what == 3:
            pool.set_capacity(rng.choice(CORE + SPARE), rng.randint(1, 3))
        elif what == 4:
            exit_id = rng.choice(SPARE)
            if rng.random() < 0.5:
                pool.add(make_exit(exit_id, rng.randint(1, 2)))
            else:
                assert pool.remove(exit_id).exit_id == exit_id
        elif what == 5:
            pool.end_session(rng.choice(CHURN))
        else:
            region = rng.choice(["eu", "us"])
            assert all(e.tags["region"] == region for e in pool.subset(region=region).exits)
            pool.state(rng.choice(CORE), rng.choice(SITES))
    except (UnknownExit, InvalidInput) as e:  # a race with another thread's add or remove
        assert PW not in str(e), e
    return since


class Pair:
    """Two threads that release one lease at the same moment."""

    def __init__(self):
        self.barrier = threading.Barrier(2, timeout=30)
        self.lease = None
        self.results = []
        self.lock = threading.Lock()


def share_once(pool, ledger, pair, first, rng):
    """The first thread of the pair leases; both read it and release it at once: exactly one
    release may succeed."""
    if first:
        pair.results = []
        try:
            pair.lease = pool.acquire(timeout=0.5)
            ledger.entered(pair.lease, None)
            ledger.leaving(pair.lease)
        except REFUSALS as e:
            ledger.refusal(e)
            pair.lease = None
    pair.barrier.wait()
    lease = pair.lease
    if lease is not None:
        assert PW not in repr(lease)
        lease.exit_id, lease.active  # noqa: B018 - read while the other thread releases
        released = pool.release(lease, **rng.choice(OUTCOMES))
        with pair.lock:
            pair.results.append(released)
        ledger.count(released=int(released), ignored=int(not released))
    pair.barrier.wait()
    if first and lease is not None:
        assert sorted(pair.results) == [False, True], pair.results
        with ledger.lock:
            ledger.shared[tuple(sorted(pair.results))] += 1


def thread_worker(pool, views, ledger, pair, first, i):
    rng = random.Random(i)
    since = 0
    try:
        for j in range(ITERATIONS):
            if j % 8 == 7:
                share_once(pool, ledger, pair, first, rng)
            elif rng.random() < 0.8:
                lease_once(pool, views, ledger, rng)
            else:
                since = admin_once(pool, ledger, rng, since)
    except BaseException as e:  # noqa: BLE001 - reported by the test
        pair.barrier.abort()  # do not leave the partner waiting
        ledger.failed(f"thread {i}", e)


def loop_worker(pool, views, ledger, n_tasks, seed):
    async def task(t):
        rng = random.Random(seed * 10_000 + t)
        since = 0
        for j in range(TASK_ITERATIONS):
            key, site, outcome = pick(rng)
            try:
                async with rng.choice(views).lease(key, site=site, timeout=1.0) as lease:
                    ledger.entered(lease, key)
                    await asyncio.sleep(0)  # hold the slot while other tasks run
                    ledger.leaving(lease)
                    lease.report(**outcome)
                ledger.count(released=1)
            except REFUSALS as e:
                ledger.refusal(e)
            if j % 4 == 3:
                since = admin_once(pool, ledger, rng, since)

    async def main():
        results = await asyncio.gather(*(task(t) for t in range(n_tasks)), return_exceptions=True)
        for t, r in enumerate(results):
            if isinstance(r, BaseException):
                ledger.failed(f"loop {seed} task {t}", r)

    try:
        asyncio.run(main())
    except BaseException as e:  # noqa: BLE001 - reported by the test
        ledger.failed(f"loop {seed}", e)


@pytest.fixture
def switch_often():
    """Switch threads far more often than the default 5 ms, for more interleavings."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-4)
    yield
    sys.setswitchinterval(before)


@pytest.mark.parametrize("strategy", ["weighted", "p2c"])
def test_threads_and_event_loops_on_one_pool(strategy, switch_often):
    clock = ManualClock()
    pool = Pool(
        [make_exit(i, 1 + n % 3) for n, i in enumerate(CORE)],
        strategy=strategy, max_leases=MAX_LEASES, clock=clock, seed=11,
        # Nothing expires on its own, so that the ceilings counted in the workers are exact;
        # sessions end only by end_session.
        lease_ttl=1e6, session_ttl=1e9,
        # Quarantines, 429 cooldowns and incidents come and go within the run, as the clock
        # ticks 10 ms for every real millisecond.
        health={"base_ejection": 2.0, "max_ejection": 8.0, "max_ejected": 0.5, "min_hold": 0.5,
                "rate_limit_cooldown": 1.0, "incident_interval": 0.05},
    )
    views = [pool, pool, pool.subset(region="eu"), pool.subset(region="us")]
    ledger = Ledger()

    delivered = []
    delivered_lock = threading.Lock()

    @pool.on_event
    def callback(event):
        with delivered_lock:
            delivered.append(event["seq"])
            again = len(delivered) % 50 == 0
        if again:
            pool.snapshot()  # a callback may call back into the pool

    stop = threading.Event()

    def ticker():
        for _ in range(100_000):  # bounded even if stop never comes
            if stop.wait(0.001):
                return
            clock.advance(0.01)

    pairs = [Pair() for _ in range(THREADS // 2)]
    threads = [
        threading.Thread(target=thread_worker, args=(pool, views, ledger, pairs[i // 2], i % 2 == 0, i),
                         name=f"worker-{i}", daemon=True)
        for i in range(THREADS)
    ] + [
        threading.Thread(target=loop_worker, args=(pool, views, ledger, n, seed), name=f"loop-{seed}", daemon=True)
        for seed, n in enumerate(LOOP_TASKS)
    ]
    tick = threading.Thread(target=ticker, name="ticker", daemon=True)
    tick.start()
    for t in threads:
        t.start()
    deadline = time.monotonic() + JOIN_TIMEOUT
    for t in threads:
        t.join(timeout=max(0.0, deadline - time.monotonic()))
    stop.set()
    tick.join(timeout=5)
    hung = [t.name for t in threads + [tick] if t.is_alive()]
    assert not hung, f"deadlock: {hung} still running after {JOIN_TIMEOUT} s"

    borrow = [e for e in ledger.errors if "BORROW" in e]
    assert not borrow, borrow[:5]
    assert not ledger.errors, ledger.errors[:5]

    # Never more than max_leases on one exit at once, and the limit was reached.
    assert max(ledger.peak.values()) == MAX_LEASES, ledger.peak
    # No live session moved: every stable key saw one exit, and still lives there.
    assert ledger.homes, "no stable key ever got a lease"
    moved = {k: v for k, v in ledger.homes.items() if len(v) != 1}
    assert not moved, moved
    for key, (exit_id,) in ledger.homes.items():
        assert pool.assign(key).exit_id == exit_id
    # Every shared lease went back exactly once.
    assert set(ledger.shared) == {(False, True)}, ledger.shared
    assert sum(ledger.shared.values()) >= THREADS // 2, (ledger.shared, ledger.refused)

    # The pool's counts are the workers' counts.
    seen = pool.events()
    snap = pool.snapshot()
    c = snap["counts"]
    assert (c["acquired"], c["released"], c["expired"], snap["live_leases"]) == (
        ledger.acquired, ledger.released, 0, 0)
    assert c["ignored_releases"] == ledger.ignored  # the losing half of each shared release
    assert sum(c["outcomes"].values()) == c["released"]
    assert all(e["active_leases"] == 0 for e in snap["exits"])
    assert c["acquired"] > THREADS * ITERATIONS // 4, (c, ledger.refused)

    # Every event reached the callback once (the buffer keeps the last 1,000).
    assert len(delivered) == len(set(delivered)), "an event was delivered twice"
    assert {e["seq"] for e in seen} <= set(delivered)
