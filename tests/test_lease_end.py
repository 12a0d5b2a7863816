"""How a lease ends, whatever happens around it (issue 13): a cancelled async acquire, any
status a client can hand over, bad report arguments, an expired lease, async waits, a 429 that
asks for a millennium, and capacity 0.

Fleet cases run against a real redis-server (tests/redis_server.py)."""

from __future__ import annotations

import asyncio
import http.server
import math
import threading
import time

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exitpool import Cooling, Exit, InvalidInput, ManualClock, Pool, load_exits
from exitpool._core import BLOCK_STATUSES
from redis_server import RedisServer


def make_exits(n, **kw):
    return [Exit(f"e{i}", f"http://user:pw@gw.example:{8000 + i}", **kw) for i in range(n)]


def outcomes(pool):
    return {k: v for k, v in pool.snapshot()["counts"]["outcomes"].items() if v}


@pytest.fixture
def redis(tmp_path):
    server = RedisServer(tmp_path).start()
    yield server
    server.stop()


def fleet_pool(redis, **kw):
    return Pool(make_exits(1), store=redis.url, namespace="lease-end", max_leases=1, **kw)


def wait_until(check, what, limit=5.0):
    """Polls `check` (bounded): for effects a worker thread finishes after the caller returned."""
    deadline = time.monotonic() + limit
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


# --- point 3: a cancelled async acquire holds no slot ------------------------------------------


async def cancel_waiter(pool, after):
    """Starts a task waiting in `async with pool.lease(timeout=...)` and cancels it `after`
    seconds later; returns whether its block ran (it then left through __aexit__)."""
    ran = []

    async def waiter():
        async with pool.lease(timeout=5):
            ran.append(True)
            await asyncio.sleep(0)

    task = asyncio.create_task(waiter())
    await asyncio.sleep(after)
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    return bool(ran)


async def next_lease_gets_the_slot(pool):
    # An attempt of the cancelled task may still be running on a worker thread: the new
    # lease waits for it (up to its timeout) and must then get the only slot.
    async with pool.lease(timeout=3) as lease:
        assert lease.exit_id == "e0"


@pytest.mark.asyncio
async def test_a_fleet_acquire_cancelled_while_its_attempt_is_on_a_thread_hands_the_slot_back(redis):
    pool = fleet_pool(redis)
    other = fleet_pool(redis)  # another worker of the fleet: it sees the store's count
    ran = 0
    for after in (0.0, 0.001, 0.01, 0.03, 0.06):
        # Writes stall on the server (well within the store's 500 ms I/O timeout): the
        # waiter's take (a script) is in flight on its worker thread when the task is
        # cancelled, and succeeds after the cancel.
        redis.cli("CLIENT", "PAUSE", "300", "WRITE")
        ran += await cancel_waiter(pool, after)  # a very slow machine may let the block run
        await next_lease_gets_the_slot(pool)
        await next_lease_gets_the_slot(other)
    assert ran < 5, "no cancel landed while an attempt was in flight"
    wait_until(lambda: pool.snapshot()["store"]["exits"]["e0"]["active"] == 0, "the fleet's slot stayed held")
    assert pool.snapshot()["live_leases"] == 0
    # A slot handed back unused is no evidence: no outcome was counted for it.
    assert sum(outcomes(pool).values()) == 5 + ran


@pytest.mark.asyncio
@pytest.mark.parametrize("where", ["local", "fleet"])
async def test_a_cancelled_wait_at_any_point_never_leaves_a_slot_held(where, request):
    pool = fleet_pool(request.getfixturevalue("redis")) if where == "fleet" else Pool(make_exits(1), max_leases=1)
    ran = 0
    for i in range(12):
        held = pool.acquire(timeout=3)
        task_started = asyncio.create_task(cancel_waiter(pool, after=0.002 * i + 0.03))
        # Free the slot at varying points around the cancel: before, while and after the
        # waiter's attempts.
        await asyncio.sleep(0.002 * (i % 4) + 0.025)
        pool.release(held)
        ran += await task_started
        await next_lease_gets_the_slot(pool)
        wait_until(lambda: pool.snapshot()["live_leases"] == 0, f"round {i}: a slot stayed held")
    counts = pool.snapshot()["counts"]
    assert counts["acquired"] == counts["released"]


@pytest.mark.asyncio
async def test_a_task_cancelled_during_its_async_exit_still_releases(redis):
    pool = fleet_pool(redis)

    async def body():
        async with pool.lease(timeout=3):
            # Cancelled once __aexit__ awaits its worker thread.
            asyncio.get_running_loop().call_soon(task.cancel)

    task = asyncio.create_task(body())
    with pytest.raises(asyncio.CancelledError):
        await task
    wait_until(lambda: pool.snapshot()["live_leases"] == 0, "the lease was not released")
    assert outcomes(pool) == {"success": 1}
    await next_lease_gets_the_slot(pool)


# --- point 4: any status a client gives is an outcome; release always frees the slot ------------

STATUS_TABLE = [
    (200, "success"),
    (404, "success"),
    (100, "success"),
    (403, "block"),
    (407, "block"),
    (451, "block"),
    (999, "block"),
    (429, "rate_limited"),
    (503, "target_error"),
    (599, "target_error"),
    (0, "other"),
    (99, "other"),
    (600, "other"),
    (998, "other"),
    (1000, "other"),
    (65535, "other"),
]


@pytest.mark.parametrize(("status", "expected"), STATUS_TABLE)
def test_any_status_a_client_gives_is_recorded_as_its_class(status, expected):
    clock = ManualClock()
    pool = Pool(make_exits(1), max_leases=1, clock=clock)
    assert pool.release(pool.acquire(), status=status) is True
    clock.advance(600.0)  # past a 429's cooling
    with pool.lease() as lease:
        lease.report(status=status)
    assert outcomes(pool) == {expected: 2}
    assert pool.snapshot()["live_leases"] == 0


def test_block_statuses_are_the_cores_one_list():
    from exitpool.scrapy import BanPolicy

    assert BLOCK_STATUSES == frozenset({403, 407, 451, 999})
    assert BanPolicy.ban_statuses == BLOCK_STATUSES | {429}


# Bad input: each must free the slot, record nothing, and raise InvalidInput naming the value.
BAD_ARGUMENTS = [
    ({"status": -1}, "status -1 "),
    ({"status": 65536}, "status 65536 "),
    ({"status": 2**70}, f"status {2**70} "),
    ({"status": -(2**70)}, f"status {-(2**70)} "),
    ({"status": 200.0}, "status must be a whole number, got 200.0"),
    ({"status": "200"}, "status must be a whole number, got '200'"),
    ({"status": True}, "status must be a whole number, got True"),
    ({"latency": math.nan}, "latency NaN "),
    ({"latency": math.inf}, "latency inf "),
    ({"latency": -0.5}, "latency -0.5 "),
    ({"latency": 10**400}, "latency must be a number of seconds"),
    ({"latency": "fast"}, "latency must be a number of seconds, got 'fast'"),
    ({"retry_after": -math.inf}, "retry_after -inf "),
    ({"retry_after": math.nan}, "retry_after NaN "),
    ({"retry_after": 10**400}, "retry_after must be a number of seconds"),
    ({"retry_after": [1]}, "retry_after must be a number of seconds, got [1]"),
    ({"captcha": "yes"}, "captcha must be True or False, got 'yes'"),
    ({"captcha": 1}, "captcha must be True or False, got 1"),
    ({"error": "boom"}, 'error "boom" is not one of'),
    ({"error": 42}, "error must be an exception or"),
    ({"latency": "http://u:hunter2@gw:1"}, "latency must be a number of seconds"),
]


@pytest.mark.parametrize(("kwargs", "message"), BAD_ARGUMENTS)
def test_a_release_with_bad_arguments_frees_the_slot_then_raises(kwargs, message):
    pool = Pool(make_exits(1), max_leases=1)
    lease = pool.acquire()
    lease.report(status=200)  # an earlier good report is not applied either: nothing is known
    with pytest.raises(InvalidInput) as e:
        pool.release(lease, **{"status": 503, **kwargs})
    assert message in str(e.value)
    assert "hunter2" not in str(e.value)
    assert lease.active is False
    snap = pool.snapshot()
    assert snap["live_leases"] == 0 and snap["counts"]["released"] == 1
    assert outcomes(pool) == {}
    assert pool.acquire(timeout=0).exit_id == "e0"  # the slot is free


@pytest.mark.parametrize(("kwargs", "message"), BAD_ARGUMENTS)
def test_a_bad_report_raises_invalid_input_and_records_nothing(kwargs, message):
    pool = Pool(make_exits(1))
    with pool.lease() as lease:
        lease.report(status=403)
        with pytest.raises(InvalidInput) as e:
            lease.report(**kwargs)
        assert message in str(e.value)
    assert outcomes(pool) == {"block": 1}


def test_a_lease_of_another_pool_is_freed_then_refused():
    a, b = Pool(make_exits(1), max_leases=1), Pool(make_exits(1), max_leases=1)
    lease = a.acquire()
    with pytest.raises(InvalidInput, match="another pool"):
        b.release(lease, status=200)
    assert a.acquire(timeout=0).exit_id == "e0"
    assert outcomes(a) == {}


class StatusServer:
    """A loopback origin that answers every GET with one status (999: a social site's refusal)."""

    def __init__(self, status):
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(outer.status, "Request denied")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"no")

            def log_message(self, *args):
                pass

        self.status = status
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/page"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.exitpool_testbed(n_exits=1)
def test_requests_and_httpx_record_a_999_as_a_block(exitpool_testbed):
    from exitpool import httpx as ep_httpx
    from exitpool import requests as ep_requests

    pool = Pool(exitpool_testbed.exits, max_leases=1)
    with StatusServer(999) as origin:
        with pool.lease(site="social.example") as lease, ep_requests.session_for(lease) as s:
            r = s.get(origin.url, timeout=10)
            assert r.status_code == 999
            ep_requests.report(lease, r)
        with pool.lease(site="social.example") as lease, httpx.Client(proxy=lease.proxy, trust_env=False) as c:
            r = c.get(origin.url, timeout=10)
            assert r.status_code == 999
            ep_httpx.report(lease, r)
    assert outcomes(pool) == {"block": 2}
    assert pool.snapshot()["live_leases"] == 0


@pytest.mark.asyncio
@pytest.mark.exitpool_testbed(n_exits=1)
async def test_aiohttp_exit_session_records_a_999_as_a_block(exitpool_testbed_async):
    from exitpool import aiohttp as ep_aiohttp

    pool = Pool(exitpool_testbed_async.exits, max_leases=1)
    with StatusServer(999) as origin:
        async with ep_aiohttp.ExitSession(pool) as http:
            r = await http.get(origin.url, site="social.example")
            assert r.status == 999
    assert outcomes(pool) == {"block": 1}
    assert pool.snapshot()["live_leases"] == 0


# The class of defects: any status, any float for latency and retry_after, any captcha and
# error value. A release never leaves the slot held and never raises anything but InvalidInput.
anything = st.one_of(
    st.none(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.text(max_size=8),
    st.sampled_from(["timeout", "connect", "proxy", "other", TimeoutError("t"), ValueError("v")]),
)
report_args = st.fixed_dictionaries(
    {},
    optional={
        "status": st.one_of(st.integers(), st.integers(-10, 70000), anything),
        "latency": st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(), anything),
        "retry_after": st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(), anything),
        "captcha": anything,
        "error": anything,
    },
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kwargs=report_args, via_report=st.booleans())
def test_any_release_frees_the_slot_and_raises_only_invalid_input(kwargs, via_report):
    clock = ManualClock()
    pool = Pool(make_exits(1), max_leases=1, clock=clock)
    lease = pool.acquire(site="s")
    try:
        if via_report:
            lease.report(**kwargs)
            pool.release(lease)
        else:
            pool.release(lease, **kwargs)
    except InvalidInput:
        pass
    finally:
        if via_report:
            pool.release(lease)  # a bad report raised before the release: end it now
    assert lease.active is False
    assert pool.snapshot()["live_leases"] == 0
    # Whatever retry_after said, the exit serves the site again within the backoff ceiling.
    clock.advance(600.0)
    pool.release(pool.acquire(site="s", timeout=0))


# --- point 6: retry_after is capped at max_ejection and cooling shows --------------------------


@pytest.mark.parametrize("retry_after", [1e12, 99999999.0, 601.0])
def test_a_huge_retry_after_cools_for_the_backoff_ceiling_and_shows_as_cooling(retry_after):
    clock = ManualClock()
    pool = Pool(make_exits(1), clock=clock)
    pool.release(pool.acquire(site="s"), status=429, retry_after=retry_after)
    assert pool.state("e0", "s") == "cooling"
    assert pool.state("e0", "other.example") == "healthy"
    assert pool.state("e0") == "healthy"
    with pytest.raises(Cooling) as e:
        pool.acquire(site="s")
    assert e.value.retry_after == pytest.approx(600.0)  # the health default max_ejection
    snap = pool.snapshot()
    cols = snap["matrix"]["columns"]
    assert snap["matrix"]["cells"][0][0][cols.index("state")] == "cooling"
    assert snap["exits"][0]["state"] == "healthy"  # the tunnel: every site but this one
    clock.advance(599.0)
    assert pool.state("e0", "s") == "cooling"
    clock.advance(1.0)
    assert pool.state("e0", "s") == "healthy"
    pool.release(pool.acquire(site="s"))


def test_the_cooling_cap_follows_max_ejection_and_rate_limit_cooldown():
    clock = ManualClock()
    pool = Pool(make_exits(1), clock=clock, health={"base_ejection": 5.0, "max_ejection": 20.0})
    pool.release(pool.acquire(site="s"), status=429)  # rate_limit_cooldown 30 s, capped at 20
    with pytest.raises(Cooling) as e:
        pool.acquire(site="s")
    assert e.value.retry_after == pytest.approx(20.0)
    pool.release(pool.acquire(site="t"), status=429, retry_after=3.0)  # below the cap: as asked
    with pytest.raises(Cooling) as e:
        pool.acquire(site="t")
    assert e.value.retry_after == pytest.approx(3.0)


def test_a_cooling_cell_passes_through_the_report_and_the_collector():
    from prometheus_client.core import CollectorRegistry

    from exitpool._report import check, render_html, summary
    from exitpool.prometheus import PoolCollector

    clock = ManualClock()
    pool = Pool(make_exits(2), clock=clock)
    pool.release(pool.acquire(site="s"), status=429, retry_after=1e12)
    registry = CollectorRegistry()
    registry.register(PoolCollector(pool))
    assert registry.get_sample_value("exitpool_exit_state", {"exit": "e0", "state": "healthy"}) == 1
    snap = pool.snapshot()
    check(snap)  # the report's schema check takes the new state name
    assert "cooling" in render_html(snap) and "e0" in summary(snap)


@pytest.mark.asyncio
async def test_an_async_lease_without_timeout_waits_at_most_the_cap():
    clock = ManualClock()
    pool = Pool(make_exits(1), clock=clock, health={"base_ejection": 0.05, "max_ejection": 0.1})
    pool.release(pool.acquire(site="s"), status=429, retry_after=1e12)
    with pytest.raises(Cooling) as e:
        pool.acquire(site="s")
    assert e.value.retry_after == pytest.approx(0.1)
    clock.advance(0.1)  # the async path waits out Cooling's retry_after, then tries again
    async with pool.lease(site="s") as lease:
        assert lease.exit_id == "e0"


# --- point 8: async waits are counted as sync waits are ---------------------------------------


@pytest.mark.asyncio
@pytest.mark.parametrize("where", ["local", "fleet"])
async def test_an_async_wait_is_counted_like_a_sync_wait(where, request):
    pool = fleet_pool(request.getfixturevalue("redis")) if where == "fleet" else Pool(make_exits(1), max_leases=1)
    for enter in ("sync", "async"):
        held = pool.acquire()
        asyncio.get_running_loop().call_later(0.2, pool.release, held)
        if enter == "sync":
            lease = await asyncio.to_thread(pool.acquire, timeout=5)
            pool.release(lease)
        else:
            async with pool.lease(timeout=5):
                pass
        snap = pool.snapshot()
        assert snap["counts"]["waits"] == (1 if enter == "sync" else 2), enter
        assert snap["pool"]["wait"]["p99"] >= 0.1, enter
    async with pool.lease(timeout=5):  # no wait: not counted
        pass
    assert pool.snapshot()["counts"]["waits"] == 2


# --- point 9: Lease.active follows expiry -------------------------------------------------------


@pytest.mark.parametrize("where", ["local", "fleet"])
def test_a_lease_past_its_ttl_is_no_longer_active(where, request):
    clock = ManualClock()
    if where == "fleet":
        pool = fleet_pool(request.getfixturevalue("redis"), clock=clock, lease_ttl=10)
    else:
        pool = Pool(make_exits(1), max_leases=1, clock=clock, lease_ttl=10)
    lease = pool.acquire()
    assert lease.active is True
    clock.advance(9.9)
    assert lease.active is True
    clock.advance(0.2)
    assert lease.active is False
    assert "(expired)" in repr(lease)
    if where == "local":  # the slot is someone else's now (the fleet's is freed by the server's TTL)
        other = pool.acquire(timeout=0)
        assert other.active is True and lease.active is False
        pool.release(other)
    assert pool.release(lease) is False
    assert lease.active is False


def test_a_released_lease_is_not_active():
    pool = Pool(make_exits(1))
    lease = pool.acquire()
    pool.release(lease)
    assert lease.active is False
    with pool.lease() as lease:
        assert lease.active is True
    assert lease.active is False


# --- point 10: capacity 0 is refused everywhere it enters --------------------------------------


def test_capacity_zero_is_refused_with_the_way_to_take_an_exit_out(tmp_path):
    with pytest.raises(InvalidInput, match=r"capacity 0 is outside 1\.\.=10000.*pool\.bench\(exit_id\)"):
        Exit("e0", "http://h:1", capacity=0)
    pool = Pool(make_exits(2))
    with pytest.raises(InvalidInput, match="pool.bench"):
        pool.set_capacity("e0", 0)
    assert pool.exit("e0").capacity == 1
    with pytest.raises(InvalidInput, match="line 1: capacity 0 is outside 1..=10000"):
        load_exits(["gw.example:8000 capacity=0"])
    config = tmp_path / "exitpool.toml"
    config.write_text('[[exit]]\nid = "a"\nproxy = "http://gw.example:8000"\ncapacity = 0\n')
    with pytest.raises(InvalidInput, match=r"capacity: 0 is outside 1\.\.=10000.*pool\.bench"):
        Pool.from_config(config)
    assert Exit("e0", "http://h:1", capacity=1).capacity == 1
