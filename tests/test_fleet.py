"""Fleet mode: pools in several processes sharing one store, against a real redis-server.

Each test starts its own server on a free loopback port (scripts/test-deps.sh installs Debian's
redis-server). Workers are real processes (tests/fleet/worker.py) given their exits in different
orders. The same contract runs on the in-process memory store too.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import exitpool
from exitpool import Exit, Pool
from redis_server import RedisServer

WORKER = Path(__file__).parent / "fleet" / "worker.py"


@pytest.fixture
def redis(tmp_path):
    server = RedisServer(tmp_path).start()
    yield server
    server.stop()


def exits(n: int = 4, reverse: bool = False) -> list:
    xs = [Exit(f"e{i}", f"http://user:pw@127.0.0.1:{9100 + i}", ip=f"127.0.1.{i + 1}") for i in range(n)]
    return list(reversed(xs)) if reverse else xs


def worker(job: str, url: str, ns: str, order: str, **args) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(WORKER), job, url, ns, order, json.dumps(args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def result(p: subprocess.Popen, timeout: float = 60) -> dict:
    out, err = p.communicate(timeout=timeout)
    assert p.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


def max_overlap(spans: list) -> dict:
    """Per exit, the most leases held at one moment (spans are inside their leases)."""
    by_exit: dict = {}
    for exit_id, start, end in spans:
        by_exit.setdefault(exit_id, []).extend([(start, 1), (end, -1)])
    peak = {}
    for exit_id, marks in by_exit.items():
        marks.sort(key=lambda m: (m[0], m[1]))
        now = top = 0
        for _, d in marks:
            now += d
            top = max(top, now)
        peak[exit_id] = top
    return peak


# --- the contract, on both stores -------------------------------------------------------------


@pytest.fixture(params=["memory", "redis"])
def store(request, tmp_path):
    if request.param == "memory":
        yield f"memory://{tmp_path.name}"
        return
    server = RedisServer(tmp_path).start()
    yield server.url
    server.stop()


def test_two_pools_share_one_ceiling(store):
    a = Pool(exits(2), store=store, namespace="c", max_leases=1)
    b = Pool(exits(2, reverse=True), store=store, namespace="c", max_leases=1)
    la, lb = a.acquire(), b.acquire()
    assert {la.exit_id, lb.exit_id} == {"e0", "e1"}
    with pytest.raises(exitpool.NoExitAvailable):
        a.acquire(timeout=0.05)
    b.release(lb)
    assert a.acquire(timeout=1).exit_id == lb.exit_id


def test_sessions_agree_between_pools_and_end_for_all(store):
    a = Pool(exits(6), store=store, namespace="s")
    b = Pool(exits(6, reverse=True) + [Exit("extra", "http://user:pw@127.0.0.1:9199")], store=store, namespace="s")
    keys = [f"acct-{i}" for i in range(40)]
    first = {}
    for k in keys:
        with a.lease(k) as lease:
            first[k] = lease.exit_id
    for k in keys:
        # b's ring differs (another exit), yet every live session stays where it is.
        with b.lease(k) as lease:
            assert lease.exit_id == first[k]
            assert lease.strategy == "session"
        assert b.assign(k).exit_id == first[k]
    # Ending a session on one worker ends it for all: b's next lease binds from b's own ring.
    ring_b = exitpool.Ring(exits(6, reverse=True) + [Exit("extra", "http://user:pw@127.0.0.1:9199")], replicas=exitpool.DEFAULT_REPLICAS)
    moved = [k for k in keys if ring_b.assign(k).exit_id != first[k]]
    assert moved, "b's extra exit takes some keys from the ring"
    k = moved[0]
    assert a.end_session(k)
    assert b.assign(k).exit_id == ring_b.assign(k).exit_id
    with b.lease(k) as lease:
        assert lease.exit_id == ring_b.assign(k).exit_id


def test_a_late_release_is_ignored_by_the_fleet(store):
    a = Pool(exits(1), store=store, namespace="l", max_leases=1, lease_ttl=0.3)
    b = Pool(exits(1), store=store, namespace="l", max_leases=1, lease_ttl=0.3)
    lease = a.acquire()
    time.sleep(0.45)
    taken = b.acquire(timeout=1)  # the expired slot was reclaimed
    assert a.release(lease) is False
    with pytest.raises(exitpool.NoExitAvailable):
        a.acquire(timeout=0.05)
    b.release(taken)


def test_a_verdict_reaches_the_other_pool(store):
    a = Pool(exits(4), store=store, namespace="v")
    b = Pool(exits(4, reverse=True), store=store, namespace="v")
    # A probe sees e2 leave from another address: one verdict takes it out.
    assert a.record_probe("e2", True, observed_ip="10.9.9.9") is True
    assert a.state("e2") == "quarantined"
    deadline = time.monotonic() + 3
    while b.state("e2") != "quarantined":
        assert time.monotonic() < deadline, "the verdict did not arrive"
        time.sleep(0.05)
    assert any("another worker" in e["message"] for e in b.events())
    for _ in range(20):
        with b.lease() as lease:
            assert lease.exit_id != "e2"


def test_a_shared_session_is_renewed_at_most_once_per_slack(tmp_path):
    # With a store, leasing a key in a loop extends its session once per 1/64 of session_ttl
    # (10 s here), not on every lease: the session lapses at most that much early.
    clock = exitpool.ManualClock(0.0)
    pool = Pool(exits(2), store=f"memory://{tmp_path.name}", session_ttl=640.0, clock=clock)
    for advance, alive in ((5.0, False), (20.0, True)):
        with pool.lease("acct"):
            pass
        clock.advance(advance)
        with pool.lease("acct"):
            pass
        clock.advance(640.0 - advance + 1.0)
        # Bound at t, leased again at t + advance: within the slack the second lease did not
        # renew it (lapsed at t + 640); beyond it, it did (lives until t + advance + 640).
        assert pool.end_session("acct") is alive
        clock.advance(1000.0)


def test_snapshot_shows_the_fleet(store):
    a = Pool(exits(2), store=store, namespace="n")
    b = Pool(exits(2), store=store, namespace="n")
    for _ in range(3):
        with a.lease() as lease:
            pass
    with b.lease() as lease:
        lease.report(status=403)
    held = a.acquire()
    fleet = b.snapshot()["store"]
    assert fleet["online"] is True
    total = {k: sum(e[k] for e in fleet["exits"].values()) for k in ("leases", "active")}
    assert total == {"leases": 5, "active": 1}
    assert sum(e["outcomes"]["success"] for e in fleet["exits"].values()) == 3
    assert sum(e["outcomes"]["block"] for e in fleet["exits"].values()) == 1
    a.release(held)
    assert Pool(exits(1)).snapshot()["store"] is None


# --- processes --------------------------------------------------------------------------------


def test_processes_never_exceed_the_shared_ceiling(redis):
    procs = [
        worker("hold", redis.url, "ceil", order, seconds=3.0, hold=0.004, exits=3, pool={"max_leases": 2})
        for order in ("forward", "backward", "forward", "backward")
    ]
    spans = [s for p in procs for s in result(p)["spans"]]
    peak = max_overlap(spans)
    assert len(spans) > 200, "the workers leased too little to say anything"
    assert set(peak) == {"e0", "e1", "e2"}
    assert max(peak.values()) <= 2, peak
    # And the ceiling was actually reached: the test could have seen a breach.
    assert max(peak.values()) == 2


def _hold(pool, seconds):
    """Leases on a pool for a while: spans inside its leases, and whether the store stayed
    online without complaint."""
    unavailable = []
    pool.on_event(lambda e: unavailable.append(e["message"]) if e["kind"] == "store_unavailable" else None)
    spans, deadline, n = [], time.monotonic() + seconds, 0
    while time.monotonic() < deadline and n < 20_000:
        n += 1
        try:
            with pool.lease(timeout=2.0) as lease:
                start = time.monotonic()
                time.sleep(0.003)
                spans.append((lease.exit_id, start, time.monotonic()))
        except exitpool.NoExitAvailable:
            pass
    return {"spans": spans, "online": pool.snapshot()["store"]["online"], "unavailable": unavailable}


def test_forked_workers_use_connections_of_their_own(redis):
    # A pool made before fork (multiprocessing, preforking servers) is inherited with its
    # parent's sockets. Children that wrote on them would read each other's replies.
    import multiprocessing

    pool = Pool(exits(3), store=redis.url, namespace="fork", max_leases=2)
    for _ in range(20):
        with pool.lease():
            pass
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    # Fork runs the target in the child as it is: nothing is pickled.
    children = [ctx.Process(target=lambda: out.put(_hold(pool, 2.0))) for _ in range(3)]
    for c in children:
        c.start()
    mine = _hold(pool, 2.0)
    reports = [out.get(timeout=60) for _ in children] + [mine]
    for c in children:
        c.join(30)
        assert c.exitcode == 0
    for r in reports:
        assert r["online"] is True and r["unavailable"] == [], r["unavailable"]
    spans = [s for r in reports for s in r["spans"]]
    assert all(len(r["spans"]) > 20 for r in reports), [len(r["spans"]) for r in reports]
    peak = max_overlap(spans)
    assert max(peak.values()) == 2, peak
    # Every slot came back: no lease id of one process was taken for another's.
    with pool.lease():
        pass
    fleet = pool.snapshot()["store"]["exits"]
    assert sum(e["active"] for e in fleet.values()) == 0


def test_processes_agree_on_sessions(redis):
    keys = [f"acct-{i}" for i in range(60)]
    a = worker("assign", redis.url, "agree", "forward", keys=keys, exits=8)
    first = result(a)["assigned"]
    b = worker("assign", redis.url, "agree", "backward", keys=keys, exits=8)
    assert result(b)["assigned"] == first
    assert len(set(first.values())) > 3


def test_a_script_that_ends_right_after_its_release_leaves_no_slot_held(redis):
    # A release rides with the worker's next command, or goes out by itself within
    # milliseconds; a script that ends at once must still free its slot, not leave it to expire.
    script = (
        "import sys, exitpool\n"
        "pool = exitpool.Pool([exitpool.Exit('e0', 'http://127.0.0.1:9100')], store=sys.argv[1], namespace='bye', max_leases=1)\n"
        "with pool.lease('acct'):\n"
        "    pass\n"
    )
    for _ in range(3):
        subprocess.run([sys.executable, "-c", script, redis.url], check=True, timeout=60)
        fleet = Pool(exits(1), store=redis.url, namespace="bye").snapshot()["store"]["exits"]["e0"]
        assert (fleet["active"], fleet["outcomes"]["success"]) == (0, _ + 1)


def test_a_sigkilled_holder_frees_its_slots_after_lease_ttl(redis):
    p = worker("grab", redis.url, "kill", "forward", count=2, exits=2, pool={"max_leases": 1, "lease_ttl": 1.5})
    held = json.loads(p.stdout.readline())["held"]
    assert sorted(held) == ["e0", "e1"]
    killed = time.monotonic()
    p.send_signal(signal.SIGKILL)
    p.wait(5)
    pool = Pool(exits(2), store=redis.url, namespace="kill", max_leases=1, lease_ttl=1.5)
    with pytest.raises(exitpool.NoExitAvailable):
        pool.acquire(timeout=0.1)
    lease = pool.acquire(timeout=5)
    assert time.monotonic() - killed <= 1.5 + 1.0
    assert lease.exit_id in held


def test_a_quarantine_in_one_process_is_seen_by_another_within_a_second(redis):
    watcher = worker("watch", redis.url, "q", "backward", exit="e1", seconds=10)
    assert json.loads(watcher.stdout.readline())["ready"]
    pool = Pool(exits(4), store=redis.url, namespace="q")
    decided = time.monotonic()
    pool.record_probe("e1", True, observed_ip="10.1.1.1")
    out = result(watcher)
    assert out["seen"] is not None, out
    # CLOCK_MONOTONIC is one clock for every process of this machine.
    assert out["seen"] - decided <= 1.5
    assert any("another worker" in m for m in out["events"])


# --- faults -----------------------------------------------------------------------------------


def test_redis_killed_and_restarted_mid_run(tmp_path):
    server = RedisServer(tmp_path).start()
    pool = Pool(exits(3), store=server.url, namespace="f", max_leases=5)
    seen = []
    pool.on_event(lambda e: seen.append(e["kind"]))
    slowest = 0.0
    for phase in ("up", "down", "back"):
        if phase == "down":
            server.stop()
        if phase == "back":
            server.start()
            time.sleep(1.1)  # past the one-second pause before the store is tried again
        for i in range(50):
            t0 = time.monotonic()
            with pool.lease(f"acct-{i % 7}") as lease:
                assert lease.exit_id in ("e0", "e1", "e2")
            slowest = max(slowest, time.monotonic() - t0)
        if phase == "down":
            assert pool.snapshot()["store"]["online"] is False
    server.stop()
    assert "store_unavailable" in seen and "store_rejoined" in seen
    assert seen.index("store_unavailable") < seen.index("store_rejoined")
    assert pool.snapshot()["store"]["url"].endswith(f":{server.port}/0")
    # Nothing waited on the dead server beyond its short timeouts.
    assert slowest < 2.0


def test_script_cache_flushed_mid_run(redis):
    pool = Pool(exits(2), store=redis.url, namespace="flush", max_leases=1)
    kinds = []
    pool.on_event(lambda e: kinds.append(e["kind"]))
    for i in range(20):
        if i == 10:
            assert redis.cli("SCRIPT", "FLUSH").strip() == "OK"
        with pool.lease():
            pass
    assert "store_unavailable" not in kinds
    assert pool.snapshot()["store"]["online"] is True
    assert sum(e["leases"] for e in pool.snapshot()["store"]["exits"].values()) == 20


def test_async_leases_never_block_the_event_loop(redis):
    pool = Pool(exits(2), store=redis.url, namespace="a")

    async def run() -> float:
        gaps = []
        stop = asyncio.Event()

        async def ticker():
            last = time.monotonic()
            while not stop.is_set():
                await asyncio.sleep(0.01)
                gaps.append(time.monotonic() - last)
                last = time.monotonic()

        t = asyncio.create_task(ticker())
        await asyncio.sleep(0.05)
        # The server stalls for 0.4 s (CLIENT PAUSE; DEBUG SLEEP is refused by Redis 7's
        # defaults); a lease asked meanwhile must wait in a thread, not in the loop.
        assert redis.cli("CLIENT", "PAUSE", "400", "ALL").strip() == "OK"
        asked = time.monotonic()
        async with pool.lease("acct-1") as lease:
            assert lease.exit_id in ("e0", "e1")
        # The lease did wait for the server: the loop had something to keep ticking through.
        assert time.monotonic() - asked > 0.2
        stop.set()
        await t
        return max(gaps)

    assert asyncio.run(run()) < 0.2


def test_credentials_of_the_store_stay_secret(tmp_path):
    server = RedisServer(tmp_path, password="s3cr3t-Pa55").start()
    try:
        pool = Pool(exits(2), store=server.url, namespace="pw")
        with pool.lease():
            pass
        with pytest.raises(exitpool.InvalidInput) as wrong:  # refused, not served from local state
            Pool(exits(2), store=server.url.replace("s3cr3t-Pa55", "wrong-Pa55"), namespace="pw")
        text = " ".join([repr(pool), str(pool.snapshot()), str(pool.events()), str(wrong.value)])
        assert "s3cr3t-Pa55" not in text and "wrong-Pa55" not in text
        assert "[secure]" in repr(pool) and "[secure]" in str(wrong.value)
        with pytest.raises(exitpool.InvalidInput) as bad:
            Pool(exits(1), store="redsi://:s3cr3t-Pa55@host/0")
        assert "s3cr3t-Pa55" not in str(bad.value)
    finally:
        server.stop()


def test_unix_socket(redis):
    pool = Pool(exits(2), store=f"unix://{redis.sock}", namespace="u", max_leases=1)
    other = Pool(exits(2), store=redis.url, namespace="u", max_leases=1)
    a, b = pool.acquire(), other.acquire()
    assert {a.exit_id, b.exit_id} == {"e0", "e1"}
    assert pool.snapshot()["store"]["online"] is True


def test_bad_store_arguments_are_refused():
    with pytest.raises(exitpool.InvalidInput, match="namespace"):
        Pool(exits(1), store="memory://x", namespace="")
    with pytest.raises(exitpool.InvalidInput, match="store"):
        Pool(exits(1), store="ftp://host")


def test_rediss_over_tls(tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    server = RedisServer(tmp_path, tls=(cert, key)).start()
    port, url = server.port, server.url
    try:
        a = Pool(exits(1), store=url, namespace="tls", max_leases=1)
        b = Pool(exits(1), store=url, namespace="tls", max_leases=1)
        held = a.acquire()
        with pytest.raises(exitpool.NoExitAvailable):
            b.acquire(timeout=0.05)
        a.release(held)
        assert b.acquire(timeout=1).exit_id == "e0"
        assert b.snapshot()["store"]["online"] is True
        # Plain redis:// against the TLS port fails and the pool says so, serving locally.
        plain = Pool(exits(1), store=f"redis://127.0.0.1:{port}/0", namespace="tls")
        with plain.lease():
            pass
        assert plain.snapshot()["store"]["online"] is False
    finally:
        server.stop()


def test_a_memory_store_keeps_the_time_of_the_pool_that_made_it(tmp_path):
    clock = exitpool.ManualClock()
    a = Pool(exits(1), store=f"memory://{tmp_path.name}", namespace="t", max_leases=1, lease_ttl=10, clock=clock)
    b = Pool(exits(1), store=f"memory://{tmp_path.name}", namespace="t", max_leases=1, lease_ttl=10, clock=clock)
    held = a.acquire()
    with pytest.raises(exitpool.NoExitAvailable):
        b.acquire(timeout=0)
    clock.advance(10.5)  # no sleeping: the store's TTLs run on the manual clock
    assert b.acquire(timeout=0).exit_id == "e0"
    assert a.release(held) is False


def test_sync_leases_release_the_gil_while_redis_is_slow(redis):
    import threading

    pool = Pool(exits(2), store=redis.url, namespace="gil")
    pool.acquire()  # connected and warm
    done = threading.Event()
    ticks = []

    def lease_while_stalled():
        with pool.lease("acct-1"):
            pass
        done.set()

    # CLIENT PAUSE, not DEBUG SLEEP, which Redis 7's defaults refuse.
    assert redis.cli("CLIENT", "PAUSE", "400", "ALL").strip() == "OK"
    asked = time.monotonic()
    worker_thread = threading.Thread(target=lease_while_stalled)
    worker_thread.start()
    deadline = time.monotonic() + 5
    # Pure Python work on this thread: it runs only if the lease waits without the GIL.
    while not done.is_set() and time.monotonic() < deadline:
        ticks.append(time.monotonic())
        sum(range(1000))
    worker_thread.join(5)
    assert done.is_set()
    # The lease did wait for the server.
    assert ticks[-1] - asked > 0.2
    gaps = [b - a for a, b in zip(ticks, ticks[1:])]
    assert len(ticks) > 100 and max(gaps) < 0.2, (len(ticks), max(gaps, default=None))
