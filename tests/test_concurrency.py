"""One pool, everything at once: 32 threads, 200 asyncio tasks on one loop in a thread and 50
tasks on each of two more loops in two more threads lease, report and release (with ``with``,
``async with`` and ``acquire``/``release``, through the pool and its subsets), take snapshots,
page through events, bench and unbench, add and remove exits (among them exits that carry live
sessions), change capacities, revive, feed probe verdicts, recalibrate, register event
callbacks and end sessions, while pairs of threads release one shared lease at the same moment,
an event callback calls back into the pool, and the same threads hammer two shared ``Ring``
objects (assign, assign_many, add, remove, moved between them) and read ``Exit`` objects.
It runs with the pool's own state, a ``memory://`` store and a real redis-server (fewer
iterations there: every decision is a round trip).

Every loop is bounded. A thread still alive after the join timeout is a deadlock, and so that a
thread hung in Rust while holding the GIL (which no ``join(timeout)`` can report) cannot hang CI
silently, faulthandler dumps every thread's stack and ends the process if the run overstays.

Afterwards, and in snapshots along the way: no exit ever held more than ``max_leases`` (counted
inside the workers), no live session moved (an exit removed under one says so with
``SessionExitLost``), every shared lease was released exactly once, the pool's counts balance
with the workers' own, the exits out of service (quarantined, dead or probing) never exceed the
ejection cap, every event was delivered to each callback at most once, the rings only ever
answered what their possible memberships allow, and nothing raised but the documented
refusals (in particular no borrow error from the ``frozen`` classes' interior locks).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import faulthandler
import itertools
import math
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
    Ring,
    SessionExitLost,
    UnknownExit,
)
from redis_server import RedisServer

PW = "s3cret-pw"
MAX_LEASES = 2
THREADS = 32  # even: they work in pairs that share leases
JOIN_TIMEOUT = 60.0
# faulthandler's deadline: past the join timeout, so a hang that lets joins time out is
# reported by the test with names; one that does not is reported by faulthandler with stacks.
DUMP_AFTER = JOIN_TIMEOUT + 30.0
CORE = [f"e{i}" for i in range(6)]
SPARE = [f"x{i}" for i in range(3)]
STABLE = [f"stable-{i}" for i in range(48)]  # never ended: their sessions must never move
CHURN = [f"churn-{i}" for i in range(12)]  # ended now and then: they may move
SITES = [None, "shop.example", "news.example"]
REFUSALS = (NoExitAvailable, SessionExitLost, Cooling)
# Most requests succeed; the rest exercise every health path (blocks, 429s with and without
# Retry-After, 5xx, timeouts, tunnel failures).
OUTCOMES = [{"status": 200}] * 30 + [
    {"status": 403},
    {"status": 429, "retry_after": 0.5},
    {"status": 429},
    {"status": 503},
    {"error": "timeout"},
    {"error": "connect"},
    {"status": 200, "captcha": True},
]

# The ejection safeguards under test (src/health/board.rs): an exit may go out for a site on the
# site's own verdict (soft evidence: quarantined, dead, or probing, which holds its slot) only if,
# with it, at most max(1, floor(MAX_EJECTED * n)) of the n exits in service are out for that site
# on its own verdict, and at least MIN_IN_SERVICE of them still serve it. An exit's tunnel going
# out (hard evidence: refused connections, a drift) is not capped. Exits benched or removed
# later keep or free their slots without a new judgement, so a snapshot can only be held to the
# cap of the largest in-service count the run allows: every exit there is, 9, so 2 out.
# The health settings below (3 weighted failures trip, quarantines of 10 to 40 clock seconds)
# put this workload against that cap.
MAX_EJECTED = 0.25
MIN_IN_SERVICE = 1
HOLDS_A_CAP_SLOT = ("probing", "quarantined", "dead")
EJECTION_LIMIT = max(min(max(1, math.floor(MAX_EJECTED * n)), n - MIN_IN_SERVICE) for n in range(1, len(CORE) + len(SPARE) + 1))
MAX_EXTRA_LISTENERS = 8


class Scale:
    """How much work one run does: the pool's own state and a memory store take the full
    load; Redis, where every lease is a round trip, a smaller one."""

    def __init__(self, iterations, loop_tasks, task_iterations):
        self.iterations = iterations
        self.loop_tasks = loop_tasks  # asyncio tasks on each of three loops, each loop in its own thread
        self.task_iterations = task_iterations


FULL = Scale(80, (200, 50, 50), 12)
SMALL = Scale(30, (60, 20, 20), 6)


def make_exit(exit_id, capacity=1):
    n = (CORE + SPARE).index(exit_id)
    region = "eu" if int(exit_id[1:]) % 2 else "us"
    return Exit(exit_id, f"http://user:{PW}@gw.example:{n + 9000}", ip=f"198.51.100.{n + 1}", capacity=capacity, tags={"region": region})


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
        self.max_out = 0  # the most exits out of service in one scope of one snapshot
        self.done = collections.Counter()  # admin calls made, by kind
        self.extra = []  # the seqs each extra on_event callback received

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

    def home_of(self, key):
        with self.lock:
            homes = self.homes.get(key)
            return next(iter(homes)) if homes else None


def check_snapshot(pool, ledger):
    """A snapshot is taken under the pool's lock, so it must be consistent in itself, and the
    ejection cap holds in it for every site's own verdicts (the tunnel's are not capped)."""
    snap = pool.snapshot()
    assert PW not in str(snap)
    c = snap["counts"]
    assert c["acquired"] == c["released"] + c["expired"] + snap["live_leases"], c
    assert sum(e["active_leases"] for e in snap["exits"]) <= snap["live_leases"]
    over = {e["exit_id"]: e["active_leases"] for e in snap["exits"] if e["active_leases"] > MAX_LEASES}
    assert not over, over

    tunnel = {e["exit_id"]: e["state"] for e in snap["exits"]}
    scopes = {"tunnel": tunnel}
    # A site's cell is the worse of the exit's site and tunnel states; an exit that never
    # served the site is out for it exactly when its tunnel is.
    m = snap["matrix"]
    assert m["exits"] == [e["exit_id"] for e in snap["exits"]]
    for j, site in enumerate(m["sites"]):
        scopes[site] = {exit_id: tunnel[exit_id] if row[j] is None else row[j][0] for exit_id, row in zip(m["exits"], m["cells"])}
    figures = snap["pool"]
    for scope, states in scopes.items():
        out = sorted(i for i, s in states.items() if s in HOLDS_A_CAP_SLOT)
        with ledger.lock:
            ledger.max_out = max(ledger.max_out, len(out))
        if scope == "tunnel":
            continue
        # Out for the site while its tunnel is not: out on the site's own verdict.
        soft = [i for i in out if tunnel[i] not in HOLDS_A_CAP_SLOT]
        assert len(soft) <= EJECTION_LIMIT, (
            f"{scope}: {soft} out of service at once on the site's verdict; with max_ejected {MAX_EJECTED} and "
            f"min_in_service {MIN_IN_SERVICE} no more than {EJECTION_LIMIT} of {len(CORE) + len(SPARE)} may be "
            f"(now {figures['in_service']} in service, {figures['benched']} benched)"
        )
    # The published figures say the same: the count per state, and the ejected fraction (exits
    # out for their tunnel, benched ones included, over the exits in service).
    out = sum(s in HOLDS_A_CAP_SLOT for s in tunnel.values())
    assert sum(figures["states"][s] for s in HOLDS_A_CAP_SLOT) == out, (figures["states"], tunnel)
    if figures["in_service"]:
        assert math.isclose(figures["ejected_fraction"] * figures["in_service"], out, abs_tol=1e-9), (figures, tunnel)


def check_events(pool, since):
    events = pool.events(since=since)
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(set(seqs)) and all(s >= since for s in seqs), seqs[:20]
    assert all(PW not in e["message"] for e in events)
    return seqs[-1] + 1 if seqs else since


def check_exit(exit):
    """An Exit read from any thread: every property, never a credential outside ``proxy``,
    ``proxies`` and ``password``."""
    for shown in (repr(exit), str(exit), exit.masked_proxy):
        assert PW not in shown, shown
    assert exit.proxy == f"http://user:{PW}@gw.example:{exit.port}"
    assert exit.proxies == {"http": exit.proxy, "https": exit.proxy}
    assert (exit.scheme, exit.host, exit.username, exit.password) == ("http", "gw.example", "user", PW)
    assert exit.exit_id in CORE + SPARE and exit.capacity >= 0
    assert exit.ip == f"198.51.100.{(CORE + SPARE).index(exit.exit_id) + 1}"
    assert exit.tags["region"] in ("eu", "us")
    assert exit == exit and hash(exit) == hash(exit)


class Rings:
    """Two rings every thread changes and reads. The core exits stay in both; spares come and
    go. So a key's owner is, in any membership, either its owner on the core-only ring or a
    spare, and a key whose owner is a core exit even with every spare in never moves."""

    REPLICAS = 16
    KEYS = [f"ring-key-{i}" for i in range(300)]

    def __init__(self):
        core = [make_exit(i, 1 + n % 3) for n, i in enumerate(CORE)]
        self.spares = [make_exit(i, 1 + n % 2) for n, i in enumerate(SPARE)]
        self.a = Ring(core, replicas=self.REPLICAS)
        self.b = Ring(core, replicas=self.REPLICAS)
        only_core = Ring(core, replicas=self.REPLICAS).assign_many(self.KEYS)
        self.home = {k: e.exit_id for k, e in zip(self.KEYS, only_core)}
        every = Ring(core + self.spares, replicas=self.REPLICAS).assign_many(self.KEYS)
        self.may_move = {k for k, e in zip(self.KEYS, every) if e.exit_id in SPARE}
        assert 0 < len(self.may_move) < len(self.KEYS) // 2

    def check_owner(self, key, exit):
        if key in self.may_move:
            assert exit.exit_id in SPARE or exit.exit_id == self.home[key], (key, exit.exit_id)
        else:
            assert exit.exit_id == self.home[key], (key, exit.exit_id, self.home[key])

    def once(self, rng):
        ring, other = rng.sample([self.a, self.b], 2)
        what = rng.randrange(6)
        try:
            if what == 0:
                key = rng.choice(self.KEYS)
                self.check_owner(key, ring.assign(key))
            elif what == 1:
                keys = rng.sample(self.KEYS, rng.randint(1, 120))
                for key, exit in zip(keys, ring.assign_many(keys)):
                    self.check_owner(key, exit)
            elif what == 2:
                if rng.random() < 0.5:
                    ring.add(rng.choice(self.spares))
                else:
                    assert ring.remove(rng.choice(SPARE)).exit_id in SPARE
            elif what == 3:
                keys = rng.sample(self.KEYS, rng.randint(1, 150))
                moved = ring.moved(other, keys)
                assert set(moved) <= set(keys) & self.may_move, sorted(set(moved) - self.may_move)[:5]
                assert ring.moved(ring, keys) == []
            elif what == 4:
                assert len(CORE) <= len(ring) <= len(CORE) + len(SPARE)
                assert all(i in ring for i in CORE) and ring.points >= len(CORE) * self.REPLICAS
                assert PW not in repr(ring)
                for exit in ring.exits:
                    check_exit(exit)
            else:
                # Rings built while others change: from the pool's exits as they are.
                exits = [e for e in ring.exits]
                fresh = Ring(exits, replicas=4)
                key = rng.choice(self.KEYS)
                assert fresh.assign(key).exit_id in {e.exit_id for e in exits}
        except (InvalidInput, UnknownExit) as e:  # a race with another thread's add or remove
            assert what == 2 and PW not in str(e), e


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
                if rng.random() < 0.1:
                    check_exit(lease.exit)
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


class Admin:
    """The pool's other calls, shared by every worker."""

    KINDS = 13

    def __init__(self, pool, ledger, rings):
        self.pool = pool
        self.ledger = ledger
        self.rings = rings

    def once(self, rng, since):
        """One call; refusals that a race makes legal are fine."""
        pool, ledger = self.pool, self.ledger
        what = rng.randrange(self.KINDS)
        with ledger.lock:
            ledger.done[what] += 1
        try:
            if what == 0:
                check_snapshot(pool, ledger)
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
            elif what == 6:
                region = rng.choice(["eu", "us"])
                assert all(e.tags["region"] == region for e in pool.subset(region=region).exits)
                pool.state(rng.choice(CORE), rng.choice(SITES))
                for exit in pool.exits:
                    check_exit(exit)
            elif what == 7:
                pool.revive(rng.choice(CORE + SPARE))
            elif what == 8:
                exit_id = rng.choice(CORE + SPARE)
                ip = f"198.51.100.{(CORE + SPARE).index(exit_id) + 1}"
                drifted = rng.random() < 0.2
                ok = rng.random() < 0.7
                assert pool.record_probe(exit_id, ok, observed_ip="203.0.113.9" if drifted else ip, detail="probe") is drifted
            elif what == 9:
                for change in pool.recalibrate():
                    assert change["exit_id"] in CORE + SPARE and 0 <= change["new"] <= 6, change
            elif what == 10:
                self.listen()
            elif what == 11:
                self.remove_a_home(rng)
            else:
                self.rings.once(rng)
        except (UnknownExit, InvalidInput) as e:  # a race with another thread's add or remove
            assert PW not in str(e), e
        return since

    def listen(self):
        """Another on_event callback, registered while events flow (a few, so that delivery
        stays cheap). A callback's exceptions are logged, never raised, so it only records."""
        with self.ledger.lock:
            if len(self.ledger.extra) >= MAX_EXTRA_LISTENERS:
                return
            seqs = []
            self.ledger.extra.append(seqs)
        self.pool.on_event(lambda event: seqs.append(event["seq"]))

    def remove_a_home(self, rng):
        """Removes an exit that carries a live session and puts it back: meanwhile the
        session's key must be told its exit is lost, never moved elsewhere; live leases on it
        may still be released (the workers' counts check that)."""
        key = rng.choice(STABLE)
        home = self.ledger.home_of(key)
        if home not in CORE:  # spares come and go by other calls: only this one takes a core exit out
            return
        removed = self.pool.remove(home)  # UnknownExit: another thread has it out right now
        try:
            assert removed.exit_id == home and PW not in repr(removed)
            try:
                lease = self.pool.acquire(key, timeout=0)
            except SessionExitLost as e:
                assert (e.key, e.exit_id) == (key, home), (e.key, e.exit_id, key, home)
                self.ledger.refusal(e)
            else:  # recorded, so that the check of homes reports the move
                self.ledger.entered(lease, key)
                self.ledger.leaving(lease)
                self.pool.release(lease)
                self.ledger.count(released=1)
                raise AssertionError(f"{key} leased {lease.exit_id} while its exit {home} was removed")
        finally:
            self.pool.add(make_exit(home, removed.capacity))


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


def thread_worker(pool, views, ledger, admin, pair, first, i, scale):
    rng = random.Random(i)
    since = 0
    try:
        for j in range(scale.iterations):
            if j % 8 == 7:
                share_once(pool, ledger, pair, first, rng)
            elif rng.random() < 0.75:
                lease_once(pool, views, ledger, rng)
            else:
                since = admin.once(rng, since)
    except BaseException as e:  # noqa: BLE001 - reported by the test
        pair.barrier.abort()  # do not leave the partner waiting
        ledger.failed(f"thread {i}", e)


def loop_worker(views, ledger, admin, n_tasks, seed, scale):
    async def task(t):
        rng = random.Random(seed * 10_000 + t)
        since = 0
        for j in range(scale.task_iterations):
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
                since = admin.once(rng, since)

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


def stack_dump_file(config):
    """Where faulthandler writes: pytest's own duplicate of the real stderr (output captured by
    pytest would be lost when faulthandler ends the process), else stderr."""
    try:
        from _pytest.faulthandler import fault_handler_stderr_fd_key

        return config.stash[fault_handler_stderr_fd_key]
    except (ImportError, KeyError):
        return sys.__stderr__


@contextlib.contextmanager
def stacks_dumped_if_hung(config, seconds):
    """Past ``seconds``, dump every thread's stack and end the process: the one way to learn
    where a thread hangs when it hangs holding the GIL. (This takes over pytest's own
    faulthandler_timeout for the test, with a shorter deadline.)"""
    out = stack_dump_file(config)
    faulthandler.dump_traceback_later(seconds, exit=True, file=out)
    try:
        yield out
    finally:
        faulthandler.cancel_dump_traceback_later()


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    server = RedisServer(tmp_path_factory.mktemp("redis-concurrency")).start()
    yield server.url
    server.stop()


_namespaces = itertools.count()


@pytest.mark.parametrize(
    ("store", "strategy"),
    [(None, "weighted"), (None, "p2c"), ("memory", "weighted"), ("redis", "p2c")],
    ids=["own-weighted", "own-p2c", "memory-weighted", "redis-p2c"],
)
def test_threads_and_event_loops_on_one_pool(store, strategy, switch_often, request):
    if store is None:
        options, scale = {}, FULL
    elif store == "memory":
        options, scale = {"store": f"memory://concurrency-{next(_namespaces)}"}, FULL
    else:
        options, scale = {"store": request.getfixturevalue("redis_url")}, SMALL
    if store is not None:
        options["namespace"] = f"concurrency-{next(_namespaces)}"

    # Redis holds shared quarantine verdicts on its own clock, which runs 10 times slower than
    # the ticking manual clock: there, the same quarantines in real time.
    slow = 10.0 if store == "redis" else 1.0
    clock = ManualClock()
    pool = Pool(
        [make_exit(i, 1 + n % 3) for n, i in enumerate(CORE)],
        strategy=strategy,
        max_leases=MAX_LEASES,
        clock=clock,
        seed=11,
        calibrate=True,
        # Nothing expires on its own, so that the ceilings counted in the workers are exact;
        # sessions end only by end_session.
        lease_ttl=1e6,
        session_ttl=2e6,
        # Quarantines, 429 cooldowns and incidents come and go within the run, as the clock
        # ticks 10 ms for every real millisecond. 3 weighted failures trip, and quarantines last
        # 10 to 40 clock seconds, so that this workload pushes against the ejection cap.
        health={
            "consecutive": 3.0,
            "base_ejection": 10.0 / slow,
            "max_ejection": 40.0 / slow,
            "max_ejected": MAX_EJECTED,
            "min_in_service": MIN_IN_SERVICE,
            "min_hold": 0.5,
            "rate_limit_cooldown": 1.0,
            "incident_interval": 0.05,
        },
        **options,
    )
    views = [pool, pool, pool.subset(region="eu"), pool.subset(region="us")]
    ledger = Ledger()
    admin = Admin(pool, ledger, Rings())

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
        threading.Thread(
            target=thread_worker, args=(pool, views, ledger, admin, pairs[i // 2], i % 2 == 0, i, scale), name=f"worker-{i}", daemon=True
        )
        for i in range(THREADS)
    ] + [
        threading.Thread(target=loop_worker, args=(views, ledger, admin, n, seed, scale), name=f"loop-{seed}", daemon=True)
        for seed, n in enumerate(scale.loop_tasks)
    ]
    tick = threading.Thread(target=ticker, name="ticker", daemon=True)
    with stacks_dumped_if_hung(request.config, DUMP_AFTER) as out:
        tick.start()
        for t in threads:
            t.start()
        deadline = time.monotonic() + JOIN_TIMEOUT
        for t in threads:
            t.join(timeout=max(0.0, deadline - time.monotonic()))
        stop.set()
        tick.join(timeout=5)
        hung = [t.name for t in threads + [tick] if t.is_alive()]
        if hung:
            faulthandler.dump_traceback(file=out, all_threads=True)
        assert not hung, f"deadlock: {hung} still running after {JOIN_TIMEOUT} s (stacks on stderr)"

    borrow = [e for e in ledger.errors if "BORROW" in e]
    assert not borrow, borrow[:5]
    assert not ledger.errors, ledger.errors[:5]
    # Every kind of admin call ran, many times over.
    assert sorted(ledger.done) == list(range(Admin.KINDS)), ledger.done
    assert min(ledger.done.values()) >= 10, ledger.done

    # Never more than max_leases on one exit at once, and the limit was reached.
    assert max(ledger.peak.values()) == MAX_LEASES, ledger.peak
    # No live session moved: every stable key saw one exit, and still lives there.
    assert ledger.homes, "no stable key ever got a lease"
    moved = {k: v for k, v in ledger.homes.items() if len(v) != 1}
    assert not moved, moved
    for key, (exit_id,) in ledger.homes.items():
        assert pool.assign(key).exit_id == exit_id
    # Every exit removed with live sessions was put back.
    assert set(CORE) <= {e["exit_id"] for e in pool.snapshot()["exits"]}
    # Every shared lease went back exactly once.
    assert set(ledger.shared) == {(False, True)}, ledger.shared
    assert sum(ledger.shared.values()) >= THREADS // 2, (ledger.shared, ledger.refused)

    # The pool's counts are the workers' counts.
    seen = pool.events()
    snap = pool.snapshot()
    c = snap["counts"]
    assert (c["acquired"], c["released"], c["expired"], snap["live_leases"]) == (ledger.acquired, ledger.released, 0, 0)
    assert c["ignored_releases"] == ledger.ignored  # the losing half of each shared release
    assert sum(c["outcomes"].values()) == c["released"]
    assert all(e["active_leases"] == 0 for e in snap["exits"])
    assert c["acquired"] > THREADS * scale.iterations // 4, (c, ledger.refused)

    # The cap was checked on real ejections, not on a pool that never ejected anything.
    check_snapshot(pool, ledger)
    assert ledger.max_out >= 1, "no exit was ever out of service: the ejection cap went untested"

    # Every event reached the callback once (the buffer keeps the last 1,000), and each
    # callback registered on the way at most once.
    assert len(delivered) == len(set(delivered)), "an event was delivered twice"
    assert {e["seq"] for e in seen} <= set(delivered)
    assert ledger.extra, "no callback was registered during the run"
    for seqs in ledger.extra:
        assert len(seqs) == len(set(seqs)), "an event was delivered twice to a late callback"
        assert set(seqs) <= set(delivered)
