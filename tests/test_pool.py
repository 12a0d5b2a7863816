"""`Pool` as a user sees it: leases, outcomes, sticky sessions, leases' limits and TTLs,
subsets, bounded loads and bad input. Every time-dependent behaviour runs on a ManualClock."""

from __future__ import annotations

import asyncio
import inspect
import math
import socket

import aiohttp
import httpx
import pytest
import requests
import urllib3

import exitpool
from exitpool import (
    DEFAULT_REPLICAS,
    Exit,
    InvalidInput,
    Lease,
    ManualClock,
    NoExitAvailable,
    Pool,
    Ring,
    SessionExitLost,
    UnknownExit,
)

OUTCOME_NAMES = ("success", "captcha", "block", "rate_limited", "target_error", "timeout", "connect", "other")


def make_exits(n, prefix="e", **kw):
    return [Exit(f"{prefix}{i}", f"http://user:pw@gw.example:{8000 + i}", **kw) for i in range(n)]


def nonzero(outcomes):
    return {k: v for k, v in outcomes.items() if v}


def pool_outcomes(pool):
    return nonzero(pool.snapshot()["counts"]["outcomes"])


def exit_row(pool, exit_id):
    (row,) = [e for e in pool.snapshot()["exits"] if e["exit_id"] == exit_id]
    return row


def counts(pool):
    c = dict(pool.snapshot()["counts"])
    c["outcomes"] = nonzero(c["outcomes"])
    return c


@pytest.fixture
def clock():
    return ManualClock()


@pytest.fixture
def pool(clock):
    return Pool(
        [
            Exit("sess-a1b2", "http://user:pw@gw.example:8000", ip="93.184.10.7", capacity=3),
            Exit("sess-c3d4", "http://user:pw@gw.example:8001", ip="198.51.100.22", capacity=1),
        ],
        clock=clock,
    )


# --- the lease and what it yields -------------------------------------------------------------


def test_with_lease_yields_a_lease_with_the_exit(pool):
    with pool.lease("account-3f9", site="shop.example") as lease:
        assert isinstance(lease, Lease)
        home = pool.assign("account-3f9")
        assert lease.exit_id == home.exit_id
        assert lease.exit == home
        assert lease.exit == pool.exit(lease.exit_id)
        port = {"sess-a1b2": 8000, "sess-c3d4": 8001}[lease.exit_id]
        url = f"http://user:pw@gw.example:{port}"
        assert lease.proxy == url
        assert lease.proxies == {"http": url, "https": url}
        assert lease.strategy == "ring"
        assert lease.key == "account-3f9"
        assert lease.site == "shop.example"
        assert lease.active is True
        assert exit_row(pool, lease.exit_id)["active_leases"] == 1
    assert lease.active is False
    assert exit_row(pool, lease.exit_id)["active_leases"] == 0
    # The second lease of the same key is its live session.
    with pool.lease("account-3f9", site="shop.example") as again:
        assert again.exit_id == lease.exit_id
        assert again.strategy == "session"


def test_keyless_lease_reports_its_strategy(pool):
    with pool.lease() as lease:
        assert lease.key is None and lease.site is None
        assert lease.strategy == "weighted"
    assert pool.snapshot()["sessions"] == 0


def test_a_lease_is_not_usable_before_entering_nor_twice(pool):
    lease = pool.lease("k")
    assert lease.strategy is None and lease.active is False
    with pytest.raises(InvalidInput) as e:
        _ = lease.exit_id
    assert str(e.value) == "this lease has not been acquired yet: use it inside `with pool.lease(...)`"
    with lease:
        pass
    with pytest.raises(InvalidInput) as e:
        with lease:
            pass
    assert str(e.value) == "this lease was already entered; make a new one with pool.lease(...)"
    assert counts(pool)["acquired"] == 1


def test_repr_of_a_lease_masks_the_password(pool):
    with pool.lease("k") as lease:
        r = repr(lease)
        assert "pw" not in r
        assert r == f"<Lease key='k' exit='{lease.exit_id}' via http://user:[secure]@gw.example:{lease.exit.port} (active)>"
    assert repr(lease).endswith("(released)>")


def test_clean_exit_counts_as_success(pool):
    with pool.lease("k", site="shop.example") as lease:
        pass
    assert pool_outcomes(pool) == {"success": 1}
    assert nonzero(exit_row(pool, lease.exit_id)["outcomes"]) == {"success": 1}
    assert exit_row(pool, lease.exit_id)["leases"] == 1
    c = counts(pool)
    assert (c["acquired"], c["released"], c["expired"], c["ignored_releases"]) == (1, 1, 0, 0)
    assert pool.snapshot()["live_leases"] == 0


@pytest.mark.parametrize(
    ("report", "outcome"),
    [
        ({"status": 200}, "success"),
        ({"status": 404}, "success"),
        ({"status": 200, "latency": 0.25}, "success"),
        ({"status": 200, "captcha": True}, "captcha"),
        ({"status": 403}, "block"),
        ({"status": 407}, "block"),
        ({"status": 451}, "block"),
        ({"status": 429, "retry_after": 30.0}, "rate_limited"),
        ({"status": 503}, "target_error"),
        ({"error": "timeout"}, "timeout"),
        ({"error": "connect"}, "connect"),
        ({"error": "proxy"}, "connect"),
        ({"error": "other"}, "other"),
        ({"error": TimeoutError("read")}, "timeout"),
        ({"error": ConnectionResetError()}, "connect"),
        ({"status": 200, "error": "timeout"}, "timeout"),
    ],
)
def test_an_explicit_report_is_recorded(pool, report, outcome):
    with pool.lease("k") as lease:
        lease.report(**report)
    assert pool_outcomes(pool) == {outcome: 1}
    assert nonzero(exit_row(pool, lease.exit_id)["outcomes"]) == {outcome: 1}


def _aiohttp_connector_error(cls):
    key = aiohttp.client_reqrep.ConnectionKey("gw.example", 8000, False, True, None, None, None)
    return cls(key, OSError(111, "Connection refused"))


EXCEPTIONS = [
    # The standard library.
    (lambda: TimeoutError("timed out"), "timeout"),
    (lambda: TimeoutError("timed out"), "timeout"),
    (lambda: asyncio.TimeoutError(), "timeout"),
    (lambda: ConnectionError("boom"), "connect"),
    (lambda: ConnectionRefusedError(111, "refused"), "connect"),
    (lambda: ConnectionResetError(104, "reset"), "connect"),
    (lambda: socket.gaierror(-2, "Name or service not known"), "connect"),
    (lambda: ValueError("bad"), "other"),
    (lambda: KeyError("x"), "other"),
    (lambda: RuntimeError("x"), "other"),
    (lambda: OSError("disk"), "other"),
    # requests. A connect timeout is the proxy's (through a proxy the client connects to it
    # only): tunnel evidence, 'connect'. A read timeout may be the site's: 'timeout'.
    (lambda: requests.exceptions.Timeout(), "timeout"),
    (lambda: requests.exceptions.ConnectTimeout(), "connect"),
    (lambda: requests.exceptions.ReadTimeout(), "timeout"),
    (lambda: requests.exceptions.ConnectionError(), "connect"),
    (lambda: requests.exceptions.ProxyError(), "connect"),
    (lambda: requests.exceptions.SSLError(), "connect"),
    (lambda: requests.exceptions.HTTPError(), "other"),
    (lambda: requests.exceptions.JSONDecodeError("x", "y", 0), "other"),
    # urllib3
    (lambda: urllib3.exceptions.ConnectTimeoutError(), "connect"),
    (lambda: urllib3.exceptions.ReadTimeoutError(None, "/", "read timed out"), "timeout"),
    (lambda: urllib3.exceptions.ProxyError("proxy", OSError()), "connect"),
    (lambda: urllib3.exceptions.ProtocolError("aborted"), "connect"),
    # httpx
    (lambda: httpx.TimeoutException("t"), "timeout"),
    (lambda: httpx.ConnectTimeout("t"), "connect"),
    (lambda: httpx.ReadTimeout("t"), "timeout"),
    (lambda: httpx.PoolTimeout("t"), "timeout"),
    (lambda: httpx.ConnectError("c"), "connect"),
    (lambda: httpx.ReadError("c"), "connect"),
    (lambda: httpx.ProxyError("p"), "connect"),
    (lambda: httpx.RemoteProtocolError("p"), "connect"),
    (lambda: httpx.HTTPStatusError("s", request=httpx.Request("GET", "http://x"), response=httpx.Response(500)), "other"),
    (lambda: httpx.InvalidURL("u"), "other"),
    # aiohttp
    (lambda: aiohttp.ServerTimeoutError("t"), "timeout"),
    (lambda: aiohttp.SocketTimeoutError("t"), "timeout"),
    (lambda: aiohttp.ConnectionTimeoutError("t"), "connect"),
    (lambda: aiohttp.ClientConnectionError("c"), "connect"),
    (lambda: aiohttp.ServerDisconnectedError(), "connect"),
    (lambda: aiohttp.ClientOSError(104, "reset"), "connect"),
    (lambda: _aiohttp_connector_error(aiohttp.ClientConnectorError), "connect"),
    (lambda: _aiohttp_connector_error(aiohttp.ClientProxyConnectionError), "connect"),
    (lambda: aiohttp.ClientHttpProxyError(None, (), status=407), "connect"),
    (lambda: aiohttp.ClientPayloadError("p"), "other"),
    (lambda: aiohttp.InvalidURL("u"), "other"),
]


@pytest.mark.parametrize(("make", "outcome"), EXCEPTIONS, ids=lambda v: v if isinstance(v, str) else None)
def test_an_exception_is_classified_and_propagates_unchanged(pool, make, outcome):
    exc = make()
    with pytest.raises(type(exc)) as caught:
        with pool.lease("k", site="shop.example") as lease:
            raise exc
    assert caught.value is exc
    assert pool_outcomes(pool) == {outcome: 1}
    assert nonzero(exit_row(pool, lease.exit_id)["outcomes"]) == {outcome: 1}
    assert pool.snapshot()["live_leases"] == 0
    # The same exception handed to report(error=...) is classified the same way.
    with pool.lease("k") as lease:
        lease.report(error=exc)
    assert pool_outcomes(pool) == {outcome: 2}


def test_base_exceptions_release_the_lease_and_propagate(pool):
    with pytest.raises(KeyboardInterrupt):
        with pool.lease("k"):
            raise KeyboardInterrupt
    assert pool_outcomes(pool) == {"other": 1}
    assert pool.snapshot()["live_leases"] == 0


def test_an_explicit_report_wins_over_the_exception(pool):
    exc = TimeoutError("slow body")
    with pytest.raises(TimeoutError) as caught:
        with pool.lease("k") as lease:
            lease.report(status=200, latency=0.5)
            raise exc
    assert caught.value is exc
    assert pool_outcomes(pool) == {"success": 1}

    with pytest.raises(ValueError):
        with pool.lease("k") as lease:
            lease.report(status=403)
            raise ValueError("parse failed")
    assert pool_outcomes(pool) == {"success": 1, "block": 1}


def test_the_last_report_wins(pool):
    with pool.lease("k") as lease:
        lease.report(status=503)
        lease.report(status=200)
    assert pool_outcomes(pool) == {"success": 1}


@pytest.mark.parametrize(
    ("report", "message"),
    [
        ({"status": 65536}, "status 65536 is not a response status (a whole number 0..=65535)"),
        ({"status": 2**70}, f"status {2**70} is not a response status (a whole number 0..=65535)"),
        ({"status": -1}, "status -1 is not a response status (a whole number 0..=65535)"),
        ({"latency": -1.0}, "latency -1 must be a finite number of seconds >= 0"),
        ({"latency": float("nan")}, "latency NaN must be a finite number of seconds >= 0"),
        ({"latency": float("inf")}, "latency inf must be a finite number of seconds >= 0"),
        ({"retry_after": -5.0}, "retry_after -5 must be a finite number of seconds >= 0"),
        ({"status": True}, "status must be a whole number, got True"),
        ({"status": 200.0}, "status must be a whole number, got 200.0"),
        ({"error": "boom"}, "error \"boom\" is not one of 'timeout', 'connect', 'proxy', 'other'"),
        ({"error": 3}, "error must be an exception or 'timeout', 'connect', 'proxy', 'other', got 3"),
    ],
)
def test_an_invalid_report_raises_and_records_nothing(pool, report, message):
    # Caught inside the block: the lease ends as if the bad report had never been made.
    with pool.lease("k") as lease:
        with pytest.raises(InvalidInput) as e:
            lease.report(**report)
        assert str(e.value) == message
    assert pool_outcomes(pool) == {"success": 1}
    # It does not overwrite an earlier valid report either.
    with pool.lease("k") as lease:
        lease.report(status=429)
        with pytest.raises(InvalidInput):
            lease.report(**report)
    assert pool_outcomes(pool) == {"success": 1, "rate_limited": 1}


def test_invalid_input_is_a_value_error_and_an_exitpool_error():
    assert issubclass(InvalidInput, ValueError)
    assert issubclass(InvalidInput, exitpool.Error)
    for cls in (NoExitAvailable, SessionExitLost, exitpool.WarmingUp, exitpool.Cooling, UnknownExit):
        assert issubclass(cls, exitpool.Error)


# --- acquire / release ------------------------------------------------------------------------


def test_acquire_and_release_without_with(pool):
    lease = pool.acquire("k", site="shop.example")
    assert lease.active
    assert lease.exit_id == pool.assign("k").exit_id
    assert lease.strategy == "ring"
    assert pool.snapshot()["live_leases"] == 1
    assert pool.release(lease) is True
    assert not lease.active
    assert pool_outcomes(pool) == {"success": 1}


def test_every_form_of_acquire_and_release_behaves_alike(pool):
    """`acquire()`, `acquire(key)` and `release(lease)` take a shorter way into the extension
    than calls with keywords or arguments of other types; a user sees the same methods."""
    key_params = ["self", "key", "site", "timeout", "avoid"]
    assert list(inspect.signature(Pool.acquire).parameters) == key_params
    assert list(inspect.signature(pool.lease).parameters) == key_params[1:]
    release = inspect.signature(Pool.release).parameters
    assert list(release) == ["self", "lease", "status", "latency", "captcha", "error", "retry_after"]
    assert release["status"].kind is inspect.Parameter.KEYWORD_ONLY and release["status"].default is None
    assert Pool.acquire.__doc__.startswith("Leases at once") and Pool.release.__doc__.startswith("Ends a lease")

    class Key(str):
        pass

    # The same key as a str subclass, positional or by keyword: one session.
    first = pool.acquire(Key("k"))
    assert first.key == "k" and pool.release(first) is True
    second = pool.acquire(key="k")
    assert second.exit_id == first.exit_id and second.strategy == "session"
    assert Pool.release(pool, second) is True and Pool.release(pool, second) is False
    keyless = Pool.acquire(pool)
    assert keyless.key is None and pool.release(lease=keyless) is True

    with pytest.raises(TypeError, match="lease"):
        pool.release("not a lease")
    with pytest.raises(TypeError):
        pool.release()
    with pytest.raises(TypeError):
        pool.release(first, 200)
    with pytest.raises(TypeError, match="unexpected keyword"):
        pool.release(first, outcome=200)
    with pytest.raises(TypeError, match="key"):
        pool.acquire(7)
    with pytest.raises(TypeError):
        pool.acquire("a", "b")
    with pytest.raises(TypeError):
        Pool.release(object(), first)

    # A refusal raises through either way.
    for exit_id in ("sess-a1b2", "sess-c3d4"):
        pool.bench(exit_id)
    for call in (lambda: pool.acquire(), lambda: pool.acquire("new-key"), lambda: pool.acquire(site="s")):
        with pytest.raises(NoExitAvailable):
            call()


def test_release_with_an_outcome(pool):
    a = pool.acquire("k")
    assert pool.release(a, status=429, retry_after=12.0) is True
    # A 429 cools the session's exit for that site; the key waits instead of moving.
    with pytest.raises(exitpool.Cooling) as cooled:
        pool.acquire("k")
    assert cooled.value.retry_after == 12.0
    b = pool.acquire("k", site="other.example")
    b.report(status=200)
    assert pool.release(b) is True
    c = pool.acquire("k", site="other.example")
    c.report(status=200)
    assert pool.release(c, error=ConnectionRefusedError()) is True  # release's outcome wins
    d = pool.acquire()
    assert pool.release(d, status=200, captcha=True) is True
    assert pool_outcomes(pool) == {"rate_limited": 1, "success": 1, "connect": 1, "captcha": 1}


def test_a_second_release_returns_false_and_changes_nothing(pool):
    lease = pool.acquire("k")
    assert pool.release(lease, status=200) is True
    before = pool.snapshot()
    assert pool.release(lease) is False
    assert pool.release(lease, status=503) is False
    after = pool.snapshot()
    # Nothing changes but the count of ignored releases, which is what it counts.
    assert after["counts"] == {**before["counts"], "ignored_releases": before["counts"]["ignored_releases"] + 2}
    assert after["exits"] == before["exits"]
    assert after["live_leases"] == 0

    # A lease released by its `with` block cannot be released again either.
    with pool.lease("k") as lease:
        pass
    before = pool.snapshot()
    assert pool.release(lease) is False
    assert pool.snapshot()["counts"] == {**before["counts"], "ignored_releases": before["counts"]["ignored_releases"] + 1}


def test_release_with_an_invalid_outcome_frees_the_slot_then_raises(pool):
    lease = pool.acquire("k")
    with pytest.raises(InvalidInput) as e:
        pool.release(lease, status=-1)
    assert str(e.value) == "status -1 is not a response status (a whole number 0..=65535)"
    assert not lease.active
    assert pool.snapshot()["live_leases"] == 0
    assert counts(pool)["released"] == 1
    assert pool_outcomes(pool) == {}  # no health evidence from a report that was bad input
    assert pool.release(lease, status=200) is False


def test_assign_tells_where_a_key_lives_without_leasing(clock):
    exits = make_exits(6)
    pool = Pool(exits, clock=clock)
    ring = Ring(exits, replicas=DEFAULT_REPLICAS)
    keys = [f"account-{i}" for i in range(200)]
    for k in keys:
        assert pool.assign(k).exit_id == ring.assign(k).exit_id
    snap = pool.snapshot()
    assert snap["counts"]["acquired"] == 0 and snap["sessions"] == 0
    with pytest.raises(TypeError) as e:
        pool.assign(42)
    assert str(e.value) == "key must be a str, got int"


# --- sticky sessions --------------------------------------------------------------------------


def lease_all(pool, keys, **kw):
    seen = {}
    for k in keys:
        with pool.lease(k, **kw) as lease:
            seen[k] = (lease.exit_id, lease.strategy)
    return seen


def test_a_key_stays_on_its_exit_while_exits_are_added(clock):
    first = make_exits(4)
    pool = Pool(first, clock=clock)
    keys = [f"account-{i}" for i in range(300)]
    home = {k: e for k, (e, _) in lease_all(pool, keys).items()}

    more = make_exits(4, prefix="new")
    for e in more:
        pool.add(e)
    new_ring = Ring(first + more, replicas=DEFAULT_REPLICAS)
    moved = [k for k in keys if new_ring.assign(k).exit_id != home[k]]
    assert len(moved) > 50  # the ring did change for these keys

    clock.advance(600)  # within session_ttl (900 s)
    for k, (exit_id, strategy) in lease_all(pool, keys).items():
        assert (exit_id, strategy) == (home[k], "session")
        assert pool.assign(k).exit_id == home[k]

    # Each lease extended the session: 600 + 600 s after the first lease, still home.
    clock.advance(600)
    for k, (exit_id, _) in lease_all(pool, moved).items():
        assert exit_id == home[k]

    # Once the sessions end, keys bind afresh from the new ring.
    clock.advance(900)
    assert pool.snapshot()["sessions"] == 0
    for k, (exit_id, strategy) in lease_all(pool, keys).items():
        assert (exit_id, strategy) == (new_ring.assign(k).exit_id, "ring")


def test_a_session_ends_exactly_at_session_ttl(clock):
    exits = make_exits(2)
    pool = Pool(exits, clock=clock, session_ttl=60.0)
    with pool.lease("k"):
        pass
    assert pool.snapshot()["sessions"] == 1
    clock.advance(59.999)
    assert pool.snapshot()["sessions"] == 1
    with pool.lease("k") as lease:
        assert lease.strategy == "session"
    clock.advance(60.0)
    assert pool.snapshot()["sessions"] == 0
    with pool.lease("k") as lease:
        assert lease.strategy == "ring"


def test_a_key_stays_while_its_exit_is_benched_and_bench_returns_live_keys(clock):
    exits = make_exits(4)
    pool = Pool(exits, clock=clock)
    keys = [f"account-{i}" for i in range(100)]
    home = {k: e for k, (e, _) in lease_all(pool, keys).items()}
    on_e1 = sorted(k for k in keys if home[k] == "e1")
    assert on_e1

    assert pool.bench("e1") == on_e1
    assert pool.bench("e1") == on_e1  # benching again changes nothing
    assert exit_row(pool, "e1")["benched"] is True
    assert "e1" not in pool and len(pool) == 3
    assert [e.exit_id for e in pool.exits] == ["e0", "e2", "e3"]

    # Live sessions drain on the benched exit...
    for k in on_e1:
        with pool.lease(k) as lease:
            assert (lease.exit_id, lease.strategy) == ("e1", "session")
    # ...while new keys never land there.
    without = Ring([e for e in exits if e.exit_id != "e1"], replicas=DEFAULT_REPLICAS)
    fresh = [f"fresh-{i}" for i in range(200)]
    for k, (exit_id, _) in lease_all(pool, fresh).items():
        assert exit_id != "e1"
        assert exit_id == without.assign(k).exit_id
    # A keyless lease never goes to a benched exit.
    for _ in range(20):
        with pool.lease() as lease:
            assert lease.exit_id != "e1"

    # When the sessions end, those keys move; bench then reports none.
    clock.advance(900)
    assert pool.bench("e1") == []
    for k in on_e1:
        with pool.lease(k) as lease:
            assert lease.exit_id == without.assign(k).exit_id

    pool.unbench("e1")
    assert "e1" in pool and len(pool) == 4
    assert exit_row(pool, "e1")["benched"] is False
    clock.advance(900)
    for k in on_e1:
        assert pool.assign(k).exit_id == "e1"


def test_a_key_stays_while_capacities_change(clock):
    exits = make_exits(4)
    pool = Pool(exits, clock=clock)
    keys = [f"account-{i}" for i in range(300)]
    home = {k: e for k, (e, _) in lease_all(pool, keys).items()}
    pool.set_capacity("e0", 6)
    pool.set_capacity("e3", 2)
    assert pool.exit("e0").capacity == 6
    reweighted = [Exit(e.exit_id, e.proxy, capacity={"e0": 6, "e3": 2}.get(e.exit_id, 1)) for e in exits]
    new_ring = Ring(reweighted, replicas=DEFAULT_REPLICAS)
    moved = [k for k in keys if new_ring.assign(k).exit_id != home[k]]
    assert len(moved) > 50
    for k, (exit_id, strategy) in lease_all(pool, keys).items():
        assert (exit_id, strategy) == (home[k], "session")
    clock.advance(900)
    for k, (exit_id, _) in lease_all(pool, keys).items():
        assert exit_id == new_ring.assign(k).exit_id


def test_a_removed_exit_raises_session_exit_lost_until_the_session_ends(clock):
    exits = make_exits(3)
    pool = Pool(exits, clock=clock)
    key = next(f"account-{i}" for i in range(1000) if pool.assign(f"account-{i}").exit_id == "e1")
    held = pool.acquire(key)
    assert held.exit_id == "e1"
    removed = pool.remove("e1")
    assert removed.exit_id == "e1"
    assert "e1" not in pool
    before = counts(pool)

    for _ in range(2):  # it keeps raising: the key is never moved silently
        with pytest.raises(SessionExitLost) as e:
            with pool.lease(key):
                pytest.fail("the block must not run")
        assert e.value.key == key
        assert e.value.exit_id == "e1"
        assert str(e.value) == (
            f'session of key "{key}" is bound to exit "e1", but its exit was removed from the pool; end it with end_session(key)'
        )
    with pytest.raises(SessionExitLost):
        pool.acquire(key, timeout=0)
    assert counts(pool) == before

    # A lease on the removed exit can still be released.
    assert pool.release(held) is True

    assert pool.end_session(key) is True
    assert pool.end_session(key) is False
    with pool.lease(key) as lease:
        assert lease.strategy == "ring"
        assert lease.exit_id == Ring([exits[0], exits[2]], replicas=DEFAULT_REPLICAS).assign(key).exit_id
    with pytest.raises(UnknownExit) as e:
        pool.bench("e1")
    assert str(e.value) == 'no exit with id "e1"'


def test_end_session_lets_a_key_bind_afresh(clock):
    exits = make_exits(4)
    pool = Pool(exits, clock=clock)
    with pool.lease("k") as lease:
        home = lease.exit_id
    pool.bench(home)
    with pool.lease("k") as lease:
        assert lease.exit_id == home
    assert pool.end_session("k") is True
    with pool.lease("k") as lease:
        assert lease.exit_id != home
        assert lease.strategy == "ring"
    assert pool.end_session("never-seen") is False


def test_assign_follows_the_live_session_not_the_ring(clock):
    pool = Pool(make_exits(3), clock=clock)
    with pool.lease("k") as lease:
        home = lease.exit_id
    pool.bench(home)
    assert pool.assign("k").exit_id == home
    clock.advance(900)
    assert pool.assign("k").exit_id != home


# --- leases: max_leases and lease_ttl ---------------------------------------------------------


def test_max_leases_is_never_exceeded(clock):
    pool = Pool(make_exits(1), clock=clock, max_leases=2)
    a = pool.acquire("k1")
    b = pool.acquire()
    assert exit_row(pool, "e0")["active_leases"] == 2
    with pytest.raises(NoExitAvailable) as e:
        pool.acquire(timeout=0)
    assert str(e.value) == "every exit of the pool that could serve this lease is at max_leases"
    with pytest.raises(NoExitAvailable):
        with pool.lease("k1", timeout=0):
            pytest.fail("the block must not run")
    with pytest.raises(NoExitAvailable):
        pool.acquire("k2", timeout=0)
    assert exit_row(pool, "e0")["active_leases"] == 2
    assert counts(pool)["acquired"] == 2
    pool.release(a)
    with pool.lease("k2", timeout=0) as lease:
        assert lease.exit_id == "e0"
    pool.release(b)


def test_keyless_leases_skip_full_exits(clock):
    pool = Pool(make_exits(3), clock=clock, max_leases=1)
    held = [pool.acquire(timeout=0) for _ in range(3)]
    assert sorted(lease.exit_id for lease in held) == ["e0", "e1", "e2"]
    with pytest.raises(NoExitAvailable):
        pool.acquire(timeout=0)
    pool.release(held[1])
    again = pool.acquire(timeout=0)
    assert again.exit_id == held[1].exit_id


def test_a_timed_wait_raises_no_exit_available_naming_the_timeout(clock):
    pool = Pool(make_exits(1), clock=clock, max_leases=1)
    held = pool.acquire()
    with pytest.raises(NoExitAvailable) as e:
        pool.acquire(timeout=0.05)
    assert str(e.value) == "every exit of the pool that could serve this lease stayed at max_leases for 0.05 s"
    pool.release(held)


def test_an_unreleased_lease_expires_after_lease_ttl_and_frees_its_slot(clock):
    pool = Pool(make_exits(1), clock=clock, max_leases=1, lease_ttl=30.0)
    crashed = pool.acquire("worker-1")
    clock.advance(29.999)
    with pytest.raises(NoExitAvailable):
        pool.acquire(timeout=0)
    clock.advance(0.001)
    snap = pool.snapshot()
    assert snap["counts"]["expired"] == 1
    assert snap["live_leases"] == 0
    assert exit_row(pool, "e0")["active_leases"] == 0
    # The slot is free again.
    fresh = pool.acquire(timeout=0)
    assert fresh.exit_id == "e0"
    # The crashed worker's late release is ignored and frees nothing.
    assert pool.release(crashed) is False
    assert exit_row(pool, "e0")["active_leases"] == 1
    with pytest.raises(NoExitAvailable):
        pool.acquire(timeout=0)
    assert pool.release(fresh) is True
    c = counts(pool)
    assert (c["acquired"], c["released"], c["expired"], c["ignored_releases"]) == (2, 1, 1, 1)
    assert c["outcomes"] == {"success": 1}


def test_a_with_block_outliving_lease_ttl_does_not_free_a_slot_twice(clock):
    pool = Pool(make_exits(1), clock=clock, max_leases=1, lease_ttl=10.0)
    with pool.lease("slow") as lease:
        clock.advance(11)
        other = pool.acquire(timeout=0)  # the expired lease's slot went to another worker
    assert exit_row(pool, "e0")["active_leases"] == 1
    assert lease.active is False
    assert pool.release(other) is True
    c = counts(pool)
    assert (c["acquired"], c["released"], c["expired"]) == (2, 1, 1)


def test_a_release_after_lease_ttl_is_ignored_even_if_nothing_else_happened(clock):
    # The lease's TTL has run out; the pool has not been asked anything since. The release
    # still arrives after expiry and must be ignored, whatever else the pool did meanwhile.
    pool = Pool(make_exits(1), clock=clock, lease_ttl=120.0)
    lease = pool.acquire("k")
    clock.advance(121)
    assert pool.release(lease) is False
    c = counts(pool)
    assert (c["acquired"], c["released"], c["expired"]) == (1, 0, 1)
    assert c["outcomes"] == {}


def test_lease_ttl_counts_from_each_acquire(clock):
    pool = Pool(make_exits(2), clock=clock, lease_ttl=10.0)
    a = pool.acquire()
    clock.advance(6)
    b = pool.acquire()
    clock.advance(6)  # a is 12 s old, b 6 s
    snap = pool.snapshot()
    assert snap["counts"]["expired"] == 1 and snap["live_leases"] == 1
    assert pool.release(a) is False
    assert pool.release(b) is True


# --- subsets ----------------------------------------------------------------------------------


@pytest.fixture
def tagged():
    return [
        Exit("de1", "http://u:pw@de.example:8001", tags={"country": "DE", "kind": "mobile"}),
        Exit("de2", "http://u:pw@de.example:8002", tags={"country": "DE", "kind": "dc"}),
        Exit("de3", "http://u:pw@de.example:8003", capacity=2, tags={"country": "DE", "kind": "dc"}),
        Exit("us1", "http://u:pw@us.example:8001", tags={"country": "US", "kind": "mobile"}),
        Exit("us2", "http://u:pw@us.example:8002", tags={"country": "US", "kind": "dc"}),
    ]


def test_a_subset_only_leases_matching_exits(clock, tagged):
    pool = Pool(tagged, clock=clock)
    de = pool.subset(country="DE")
    assert len(de) == 3 and len(pool) == 5
    assert sorted(e.exit_id for e in de.exits) == ["de1", "de2", "de3"]
    assert "us1" not in de and "de1" in de
    assert repr(de) == 'Pool.subset(country="DE") (3 exits)'
    for i in range(100):
        with de.lease(f"account-{i}") as lease:
            assert lease.exit.tags["country"] == "DE"
        with de.lease() as lease:
            assert lease.exit_id.startswith("de")
    de_dc = pool.subset(country="DE", kind="dc")
    assert sorted(e.exit_id for e in de_dc.exits) == ["de2", "de3"]
    for _ in range(30):
        with de_dc.lease() as lease:
            assert lease.exit_id in ("de2", "de3")
    nowhere = pool.subset(country="FR")
    with pytest.raises(NoExitAvailable) as e:
        nowhere.acquire("k")
    assert str(e.value) == 'subset(country="FR") has no exit in service'


def test_a_subset_has_its_own_ring(clock, tagged):
    pool = Pool(tagged, clock=clock)
    de = pool.subset(country="DE")
    de_ring = Ring([e for e in tagged if e.tags["country"] == "DE"], replicas=DEFAULT_REPLICAS)
    whole = Ring(tagged, replicas=DEFAULT_REPLICAS)
    keys = [f"account-{i}" for i in range(300)]
    went_us = 0
    for k in keys:
        assert de.assign(k).exit_id == de_ring.assign(k).exit_id
        assert pool.assign(k).exit_id == whole.assign(k).exit_id
        if whole.assign(k).exit_id.startswith("us"):
            went_us += 1
        else:  # a key the whole ring sends to a DE exit stays there in the DE ring
            assert de.assign(k).exit_id == whole.assign(k).exit_id
    assert went_us > 0
    for k in keys[:50]:
        with de.lease(k) as lease:
            assert lease.exit_id == de_ring.assign(k).exit_id


def test_a_subset_shares_sessions_with_the_whole_pool(clock, tagged):
    pool = Pool(tagged, clock=clock)
    de = pool.subset(country="DE")
    keys = [f"account-{i}" for i in range(200)]
    via_subset = {k: e for k, (e, _) in lease_all(de, keys).items()}
    for k, (exit_id, strategy) in lease_all(pool, keys).items():
        assert (exit_id, strategy) == (via_subset[k], "session")
    assert pool.snapshot()["sessions"] == 200

    # A key whose session lives on a US exit is not silently given a second binding.
    us_key = next(f"u-{i}" for i in range(1000) if pool.assign(f"u-{i}").exit_id.startswith("us"))
    with pool.lease(us_key) as lease:
        us_exit = lease.exit_id
    with pytest.raises(SessionExitLost) as e:
        with de.lease(us_key):
            pytest.fail("the block must not run")
    assert (e.value.key, e.value.exit_id) == (us_key, us_exit)
    assert str(e.value) == (
        f'session of key "{us_key}" is bound to exit "{us_exit}", but its exit is outside this subset; end it with end_session(key)'
    )
    assert de.end_session(us_key) is True
    with de.lease(us_key) as lease:
        assert lease.exit_id.startswith("de")
    with pool.lease(us_key) as lease:
        assert lease.exit_id.startswith("de")


def test_a_subset_shares_max_leases_with_the_whole_pool(clock, tagged):
    pool = Pool(tagged, clock=clock, max_leases=1)
    de = pool.subset(country="DE")
    key = next(f"a-{i}" for i in range(1000) if pool.assign(f"a-{i}").exit_id == "de1")
    held = de.acquire(key)
    assert held.exit_id == "de1"
    assert exit_row(pool, "de1")["active_leases"] == 1
    with pytest.raises(NoExitAvailable) as e:
        pool.acquire(key, timeout=0)
    assert str(e.value) == "every exit of the pool that could serve this lease is at max_leases"
    # Another key on de1 through the whole pool is refused too.
    other = next(f"b-{i}" for i in range(1000) if pool.assign(f"b-{i}").exit_id == "de1")
    with pytest.raises(NoExitAvailable):
        pool.acquire(other, timeout=0)
    # Fill the other DE exits through the whole pool: the subset is then full.
    taken = []
    for exit_id in ("de2", "de3"):
        k = next(f"c-{i}" for i in range(1000) if pool.assign(f"c-{i}").exit_id == exit_id)
        taken.append(pool.acquire(k, timeout=0))
        assert taken[-1].exit_id == exit_id
    with pytest.raises(NoExitAvailable) as e:
        de.acquire(timeout=0)
    assert str(e.value) == 'every exit of subset(country="DE") that could serve this lease is at max_leases'
    # ...while the whole pool still has US exits.
    with pool.lease(timeout=0) as lease:
        assert lease.exit_id.startswith("us")
    assert de.release(held) is True
    with de.lease(timeout=0) as lease:
        assert lease.exit_id == "de1"
    for t in taken:
        pool.release(t)
    c = counts(pool)
    assert c["acquired"] == c["released"]


def test_a_subset_follows_exits_added_and_benched(clock, tagged):
    pool = Pool(tagged, clock=clock)
    de = pool.subset(country="DE")
    pool.add(Exit("de4", "http://u:pw@de.example:8004", tags={"country": "DE"}))
    pool.add(Exit("us3", "http://u:pw@us.example:8003", tags={"country": "US"}))
    assert sorted(e.exit_id for e in de.exits) == ["de1", "de2", "de3", "de4"]
    pool.bench("de2")
    assert sorted(e.exit_id for e in de.exits) == ["de1", "de3", "de4"]
    assert pool.subset(country="DE") is not de and len(pool.subset(country="DE")) == 3


# --- bounded loads ----------------------------------------------------------------------------


def loads(pool):
    return {e["exit_id"]: e["sessions"] for e in pool.snapshot()["exits"]}


def bounded_exits():
    return make_exits(6) + [Exit("big", "http://u:pw@gw.example:9000", capacity=3)]


def test_without_balance_factor_assignment_is_the_ring(clock):
    exits = bounded_exits()
    pool = Pool(exits, clock=clock, replicas=1)
    ring = Ring(exits, replicas=1)
    keys = [f"account-{i}" for i in range(900)]
    for k, (exit_id, strategy) in lease_all(pool, keys).items():
        assert (exit_id, strategy) == (ring.assign(k).exit_id, "ring")
    # With one point per unit of capacity the ring is lopsided: some exit is over 1.25x its share.
    total_weight = sum(max(1, e.capacity) for e in exits)
    over = [e for e in exits if loads(pool)[e.exit_id] > math.ceil(1.25 * 900 * max(1, e.capacity) / total_weight)]
    assert over


@pytest.mark.parametrize("factor", [1.25, 2.0])
def test_bounded_loads_cap_every_exit(clock, factor):
    exits = bounded_exits()
    pool = Pool(exits, clock=clock, replicas=1, balance_factor=factor)
    ring = Ring(exits, replicas=1)
    total_weight = sum(max(1, e.capacity) for e in exits)
    keys = [f"account-{i}" for i in range(900)]
    seen = {}
    for k in keys:
        told = pool.assign(k).exit_id  # where a new session would go, given the live load
        with pool.lease(k) as lease:
            assert lease.exit_id == told
            seen[k] = (lease.exit_id, lease.strategy)
    per_exit = loads(pool)
    assert sum(per_exit.values()) == 900
    for e in exits:
        bound = math.ceil(factor * 900 * max(1, e.capacity) / total_weight)
        assert per_exit[e.exit_id] <= bound, (e.exit_id, per_exit[e.exit_id], bound)
    walked = [k for k, (_, s) in seen.items() if s == "ring_bounded"]
    assert walked
    for k, (exit_id, strategy) in seen.items():
        if strategy == "ring":
            assert exit_id == ring.assign(k).exit_id
        else:
            assert strategy == "ring_bounded" and exit_id != ring.assign(k).exit_id
    # Bounded sessions are as sticky as any other.
    for k, (exit_id, strategy) in lease_all(pool, keys).items():
        assert (exit_id, strategy) == (seen[k][0], "session")


# --- bad input --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"strategy": "fastest"}, "strategy \"fastest\" is not one of 'round_robin', 'weighted', 'least_conn', 'lru', 'p2c'"),
        ({"session_ttl": -1.0}, "session_ttl -1 must be a finite number of seconds > 0"),
        ({"session_ttl": 0.0}, "session_ttl 0 must be a finite number of seconds > 0"),
        ({"session_ttl": float("nan")}, "session_ttl NaN must be a finite number of seconds > 0"),
        ({"session_ttl": float("inf")}, "session_ttl inf must be a finite number of seconds > 0"),
        ({"lease_ttl": -5.0}, "lease_ttl -5 must be a finite number of seconds > 0"),
        ({"lease_ttl": float("nan")}, "lease_ttl NaN must be a finite number of seconds > 0"),
        ({"max_leases": 0}, "max_leases 0 is outside 1..=4294967295 (leave it out for no limit)"),
        ({"max_leases": -3}, "max_leases -3 is outside 1..=4294967295 (leave it out for no limit)"),
        ({"max_leases": 2.5}, "max_leases must be a whole number, got 2.5"),
        ({"max_leases": True}, "max_leases must be a whole number, got True"),
        ({"balance_factor": 1.0}, "balance_factor 1 must be a finite number > 1 (HAProxy suggests 1.25 to 2)"),
        ({"balance_factor": 0.5}, "balance_factor 0.5 must be a finite number > 1 (HAProxy suggests 1.25 to 2)"),
        ({"balance_factor": float("nan")}, "balance_factor NaN must be a finite number > 1 (HAProxy suggests 1.25 to 2)"),
        ({"cooldown": -1.0}, "cooldown -1 must be a finite number of seconds >= 0"),
        ({"warmup": "yes"}, "warmup must be None, True, a ramp in seconds or a dict, got 'yes'"),
        ({"warmup": "http://u:pw@gw.example:1"}, "warmup must be None, True, a ramp in seconds or a dict, got 'http://u:[secure]"),
        ({"warmup": 10**400}, "warmup ramp must be a number, got 10000000000000000000... (401 digits)"),
        ({"health": {"consecutive": "http://u:pw@gw.example:1"}}, "health consecutive must be a number, got 'http://u:[secure]"),
        ({"warmup": {"ramp": -1}}, "warmup ramp -1 must be a finite number of seconds > 0"),
        ({"warmup": {"speed": 1}}, 'warmup has no setting "speed" (ramp, initial_interval, horizon)'),
        ({"warmup": {"initial_interval": float("nan")}}, "warmup initial_interval NaN must be a finite number of seconds > 0"),
        ({"warmup": {"ramp": 100, "horizon": 50}}, "warmup horizon 50 must be at least its ramp 100"),
        ({"replicas": 0}, "replicas 0 is outside 1..=100000"),
    ],
)
def test_bad_pool_settings_raise_invalid_input_naming_the_value(kwargs, message):
    with pytest.raises(InvalidInput) as e:
        Pool(make_exits(2), **kwargs)
    assert str(e.value) == message


def test_an_empty_pool_is_refused():
    with pytest.raises(InvalidInput) as e:
        Pool([])
    assert str(e.value) == "a pool needs at least one exit"


def test_duplicate_exit_ids_are_refused():
    with pytest.raises(InvalidInput) as e:
        Pool([Exit("sess-a1b2", "http://user:pw@gw.example:8000"), Exit("sess-a1b2", "http://user:pw@gw.example:8001")])
    assert str(e.value) == 'duplicate exit id "sess-a1b2"'
    assert "pw" not in str(e.value)


def test_a_pool_holds_only_exits_and_gateways():
    with pytest.raises(InvalidInput) as e:
        Pool(["http://user:pw@gw.example:8000"])
    assert str(e.value) == "a Pool holds Exit and Gateway objects, got str"


def test_bad_input_on_a_live_pool_changes_nothing(pool, clock):
    before = pool.snapshot()
    with pytest.raises(InvalidInput) as e:
        pool.add(Exit("sess-a1b2", "http://other:pw@gw.example:9999"))
    assert str(e.value) == 'duplicate exit id "sess-a1b2"'
    with pytest.raises(UnknownExit) as e:
        pool.bench("nope")
    assert str(e.value) == 'no exit with id "nope"'
    with pytest.raises(UnknownExit):
        pool.remove("nope")
    with pytest.raises(UnknownExit):
        pool.set_capacity("nope", 2)
    with pytest.raises(InvalidInput):
        pool.set_capacity("sess-a1b2", -1)
    with pytest.raises(InvalidInput) as e:
        pool.lease("k", timeout=-1)
    assert str(e.value) == "timeout -1 must be a finite number of seconds >= 0"
    assert e.value.loc == ("timeout",)
    with pytest.raises(InvalidInput) as e:
        pool.probe_due(idle=float("inf"))
    assert str(e.value) == "idle inf must be a finite number of seconds >= 0"
    assert e.value.loc == ("idle",)
    with pytest.raises(InvalidInput) as e:
        pool.acquire("k", timeout=float("nan"))
    assert str(e.value) == "timeout NaN must be a finite number of seconds >= 0"
    with pytest.raises(InvalidInput) as e:
        clock.advance(-1)
    assert str(e.value) == "advance takes a finite number of seconds >= 0, got -1"
    assert pool.snapshot() == before


def test_a_pool_with_no_exit_in_service_says_so_at_once(clock):
    pool = Pool(make_exits(2), clock=clock)
    pool.bench("e0")
    pool.bench("e1")
    for key in (None, "fresh-key"):
        with pytest.raises(NoExitAvailable) as e:
            pool.acquire(key, timeout=5)  # waiting cannot help: nothing is in service
        assert str(e.value) == "the pool has no exit in service"
    with pytest.raises(NoExitAvailable):
        pool.assign("fresh-key")
    pool.unbench("e1")
    with pool.lease("fresh-key", timeout=0) as lease:
        assert lease.exit_id == "e1"


def test_snapshot_is_plain_data(pool):
    import json

    with pool.lease("k", site="shop.example") as lease:
        lease.report(status=200, latency=0.1)
    held = pool.acquire()
    snap = json.loads(json.dumps(pool.snapshot()))
    assert snap["live_leases"] == 1 and snap["sessions"] == 1
    assert [e["exit_id"] for e in snap["exits"]] == ["sess-a1b2", "sess-c3d4"]
    assert set(snap["counts"]["outcomes"]) == set(OUTCOME_NAMES)
    assert all(e["proxy"] == f"http://user:[secure]@gw.example:{8000 + i}" for i, e in enumerate(snap["exits"]))
    assert "pw@" not in json.dumps(snap)
    pool.release(held)


def test_a_key_must_be_a_str(pool):
    with pytest.raises(TypeError):
        pool.lease(42)
    with pytest.raises(TypeError):
        pool.acquire(b"bytes-key")
    assert pool.snapshot()["counts"]["acquired"] == 0


def test_a_huge_but_finite_timeout_never_panics(pool):
    # The pool accepts any finite timeout >= 0; one beyond what a Duration holds must either
    # mean "wait as long as it takes" or be refused as bad input, never a Rust panic.
    try:
        with pool.lease("k", timeout=1e20) as lease:
            assert lease.exit_id
    except InvalidInput:
        pass


# --- avoid: a keyless retry elsewhere ---------------------------------------------------------


@pytest.mark.parametrize("store", [None, "memory://avoid-test"])
def test_a_keyless_lease_passes_over_the_avoided_exits(clock, store):
    pool = Pool(make_exits(4), clock=clock, store=store)
    first, second = set(), set()
    for _ in range(20):
        with pool.lease(site="shop.example", avoid=["e0", "e2", "no-such-exit"]) as lease:
            first.add(lease.exit_id)
        lease = pool.acquire(avoid=("e1",))
        second.add(lease.exit_id)
        pool.release(lease, status=200)
    assert first == {"e1", "e3"}
    assert "e1" not in second and second <= {"e0", "e2", "e3"}
    assert first | second == {"e0", "e1", "e2", "e3"}
    assert pool_outcomes(pool) == {"success": 40}  # no pick was taken and handed back


def test_avoid_refuses_when_only_avoided_exits_could_serve(pool):
    with pytest.raises(NoExitAvailable):
        pool.acquire(avoid=["sess-a1b2", "sess-c3d4"], timeout=0)
    assert pool.acquire(avoid=[]).exit_id in ("sess-a1b2", "sess-c3d4")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"key": "acct", "avoid": ["sess-a1b2"]}, "avoid is for keyless leases"),
        ({"avoid": "sess-a1b2"}, "not one string"),
        ({"avoid": [1]}, "avoid holds int"),
    ],
)
def test_bad_avoid_is_refused_and_leases_nothing(pool, kwargs, message):
    with pytest.raises(InvalidInput, match=message):
        pool.acquire(**kwargs)
    assert counts(pool)["acquired"] == 0


def test_a_keyed_lease_with_an_empty_avoid_goes_home(pool):
    home = pool.assign("acct").exit_id
    with pool.lease("acct", avoid=()) as lease:
        assert lease.exit_id == home
