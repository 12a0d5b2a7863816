"""The stub's TypedDicts (``exitpool._shapes``, re-exported by ``_core.pyi``) against what the core
really returns: ``pool.snapshot()``, ``pool.events()`` and ``pool.recalibrate()``, key for key at
every level, and the names the core hands Python (states, outcome classes) against the stub's
Literals. A key added to or removed from either side fails here.

The pools are made so that every part of the shape holds data: sites, an exit half-open (trial
leases), a lease that waited, a recalibration, and a fleet-mode pool on a real redis-server so
that ``store`` (and its per-exit figures) is there."""

from __future__ import annotations

import threading
from typing import Any, List, Literal, Set, Union, get_args, get_origin, get_type_hints, is_typeddict

import pytest

from exitpool import Exit, Gateway, ManualClock, Pool, _core, _shapes
from redis_server import RedisServer

SHOP, NEWS = "shop.example", "news.example"


def mismatches(value: Any, tp: Any, where: str, seen: Set[str]) -> List[str]:
    """Where ``value`` differs from the type ``tp``: TypedDicts key for key (a key missing, a key
    the type does not have), lists and dicts item by item, Optionals, Literals and scalars.
    ``seen`` collects the TypedDicts met with a value, to show the data covered them."""
    if tp is Any:
        return []
    origin, args = get_origin(tp), get_args(tp)
    if is_typeddict(tp):
        if not isinstance(value, dict):
            return [f"{where}: a {type(value).__name__}, expected a dict ({tp.__name__})"]
        seen.add(tp.__name__)
        hints = get_type_hints(tp)
        out = [f"{where}: the core has no {k!r}, the stub's {tp.__name__} has" for k in sorted(hints.keys() - value.keys())]
        out += [f"{where}: {k!r} is not in the stub's {tp.__name__}" for k in sorted(value.keys() - hints.keys())]
        for k in sorted(hints.keys() & value.keys()):
            out += mismatches(value[k], hints[k], f"{where}[{k!r}]", seen)
        return out
    if origin is Union:
        if value is None and type(None) in args:
            return []
        (inner,) = [a for a in args if a is not type(None)]
        return mismatches(value, inner, where, seen)
    if origin is Literal:
        return [] if value in args else [f"{where}: {value!r} is none of {args}"]
    if origin is list:
        if not isinstance(value, list):
            return [f"{where}: a {type(value).__name__}, expected a list"]
        return [m for i, v in enumerate(value) for m in mismatches(v, args[0], f"{where}[{i}]", seen)]
    if origin is dict:
        if not isinstance(value, dict):
            return [f"{where}: a {type(value).__name__}, expected a dict"]
        out = [f"{where}: key {k!r} is not a {args[0].__name__}" for k in value if not isinstance(k, args[0])]
        return out + [m for k, v in value.items() for m in mismatches(v, args[1], f"{where}[{k!r}]", seen)]
    if tp is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif tp is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, tp)
    return [] if ok else [f"{where}: {value!r} is not a {tp.__name__}"]


def typeddicts() -> Set[str]:
    return {name for name, obj in vars(_shapes).items() if is_typeddict(obj)}


def busy_pool() -> Pool:
    """A local pool with sites, an exit half-open after a quarantine, a lease that waited for
    an exit, and identities served for a recalibration."""
    clock = ManualClock(1000.0)
    exits = [Exit(f"e{i}", f"http://user:pw@gw.example:{8000 + i}", ip=f"10.0.0.{i + 1}", tags={"id": f"e{i}"}) for i in range(3)]
    pool = Pool(exits, clock=clock, strategy="round_robin", calibrate=True, max_leases=1, health={"jitter": 0}, pacing={NEWS: "100/s"})
    for n in range(6):
        lease = pool.acquire(f"k{n}", site=NEWS, timeout=0)
        pool.release(lease, status=200, latency=0.1)
    e0 = pool.subset(id="e0")
    for _ in range(2):
        pool.release(e0.acquire(site=SHOP, timeout=0), status=403)
    assert pool.state("e0", SHOP) == "quarantined"
    clock.advance(30.0)
    assert pool.state("e0", SHOP) == "probing"
    pool.release(e0.acquire(site=SHOP, timeout=0), status=200, latency=0.2)
    # A lease that waits: e1 is held (max_leases=1) until a timer hands it back. Should the
    # timer fire before the acquire waits, the next round gives it longer.
    e1 = pool.subset(id="e1")
    for attempt in range(1, 21):
        held = e1.acquire(site=NEWS, timeout=0)
        threading.Timer(0.05 * attempt, pool.release, (held,), {"status": 200}).start()
        pool.release(e1.acquire(site=NEWS, timeout=30), status=200)
        if pool.snapshot()["counts"]["waits"]:
            break
    for n in range(6):
        pool.end_session(f"k{n}")
    return pool


def test_every_typeddict_is_one_the_core_fills():
    # So that the checks below, which only reach what the data holds, reach every TypedDict.
    assert typeddicts() == {
        "OutcomeCounts",
        "Latency",
        "ExitSnapshot",
        "SiteSnapshot",
        "Matrix",
        "HalfOpen",
        "Waits",
        "PoolFigures",
        "Counts",
        "FleetExit",
        "GatewaySnapshot",
        "StoreSnapshot",
        "Snapshot",
        "TagGroup",
        "Event",
        "Recalibration",
        "PacedPair",
        "UpdateSummary",
    }


def test_a_local_pool_returns_what_the_stub_says():
    pool = busy_pool()
    snap = pool.snapshot(by_tag="id")
    # The scenario did what the checks need: sites, a trial lease, a wait, groups.
    assert snap["groups"]
    assert {s["site"] for s in snap["sites"]} == {SHOP, NEWS}
    assert snap["pool"]["half_open"]["trials"] >= 1 and snap["counts"]["waits"] >= 1
    assert snap["store"] is None
    seen: Set[str] = set()
    assert mismatches(snap, _shapes.Snapshot, "snapshot", seen) == []
    events = pool.events()
    assert {e["kind"] for e in events} >= {"state_changed"}
    assert [m for i, e in enumerate(events) for m in mismatches(e, _shapes.Event, f"events()[{i}]", seen)] == []
    changes = pool.recalibrate()
    assert changes, "the scenario served identities enough for a recalibration"
    assert [m for i, c in enumerate(changes) for m in mismatches(c, _shapes.Recalibration, f"recalibrate()[{i}]", seen)] == []
    assert mismatches(pool.update(pool.exits), _shapes.UpdateSummary, "update()", seen) == []
    assert seen == typeddicts() - {"StoreSnapshot", "FleetExit", "GatewaySnapshot"}


def test_a_pool_with_a_gateway_returns_what_the_stub_says():
    clock = ManualClock(1_700_000_000.0)
    gw = Gateway("resi", "http://user:pw@gw.example:7777", slots=3, username="{user}-session-{session}", lifetime=600)
    pool = Pool([gw, Exit("dc", "http://10.0.0.7:3128")], clock=clock)
    pool.record_probe("resi-1", True, observed_ip="198.51.100.1")
    for snap in (pool.snapshot(), pool.snapshot(exits=False)):
        seen: Set[str] = set()
        assert snap["gateways"]
        assert mismatches(snap, _shapes.Snapshot, "snapshot", seen) == []
        assert "GatewaySnapshot" in seen


@pytest.fixture
def redis(tmp_path):
    server = RedisServer(tmp_path).start()
    yield server
    server.stop()


def test_a_fleet_pool_returns_what_the_stub_says(redis):
    exits = [Exit(f"e{i}", f"http://user:pw@127.0.0.1:{9100 + i}") for i in range(2)]
    pool = Pool(exits, store=redis.url, namespace="shapes")
    for site in (SHOP, NEWS):
        with pool.lease(site=site):
            pass
    snap = pool.snapshot()
    assert snap["store"] is not None and snap["store"]["online"] and snap["store"]["exits"]
    seen: Set[str] = set()
    assert mismatches(snap, _shapes.Snapshot, "snapshot", seen) == []
    assert {"StoreSnapshot", "FleetExit"} <= seen


def test_the_names_python_reads_from_the_core_are_the_stubs_literals():
    assert _core._STATES == get_args(_shapes.HealthState)
    assert _core._OUTCOMES == get_args(_shapes.OutcomeName)
    assert set(_core._OUTCOMES) == set(get_type_hints(_shapes.OutcomeCounts))
    assert _core._EJECTED < set(_core._STATES)
    assert set(get_args(_shapes.SiteState)) == set(_core._STATES) | {"cooling"}


def test_the_checker_sees_a_key_added_or_removed():
    # The checker itself: it must catch a mismatch either way, at any depth.
    snap = busy_pool().snapshot()
    snap["exits"][0]["latency"]["p75"] = 0.1
    del snap["pool"]["half_open"]["succeeded"]
    found = mismatches(snap, _shapes.Snapshot, "snapshot", set())
    assert found == [
        "snapshot['exits'][0]['latency']: 'p75' is not in the stub's Latency",
        "snapshot['pool']['half_open']: the core has no 'succeeded', the stub's HalfOpen has",
    ]
