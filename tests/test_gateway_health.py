"""A gateway's own failures take all its slots out at once and one success brings them back,
through the public API: a 407 (its credentials), tunnel failures from several slots at once,
a probe or `revive`; a slot failing alone stays that slot's, and plain exits beside it are
untouched."""

from __future__ import annotations

import pytest

from exitpool import Exit, Gateway, ManualClock, NoExitAvailable, Pool

T0 = 1_700_000_000.0


def fleet(slots=6):
    clock = ManualClock(T0)
    gw = Gateway(
        "resi", "http://customer-c1:s3cret@gw.provider.example:7777", slots=slots, username="{user}-session-{session}", lifetime=3600
    )
    pool = Pool([gw, Exit("dc-1", "http://10.0.0.7:3128")], clock=clock, seed=1)
    return pool, clock


def slot_states(pool):
    return {e.exit_id: pool.state(e.exit_id) for e in pool.exits if e.exit_id.startswith("resi-")}


def kinds(pool):
    return [e["kind"] for e in pool.events()]


def lease_on(pool, exit_id):
    """A keyless lease of `exit_id`: the others are avoided."""
    others = [e.exit_id for e in pool.exits if e.exit_id != exit_id]
    return pool.acquire(avoid=others, timeout=0)


def test_a_407_takes_every_slot_out_at_once_and_says_it_is_configuration():
    pool, clock = fleet()
    pool.release(lease_on(pool, "resi-2"), status=407)
    assert set(slot_states(pool).values()) == {"quarantined"}
    assert pool.state("dc-1") == "healthy"
    events = [e for e in pool.events() if e["kind"] == "gateway_credentials_rejected"]
    assert len(events) == 1 and "resi" in events[0]["message"]
    assert "s3cret" not in str(pool.events())
    # Keyless leases now go only to the plain exit; none of the gateway's slots serves.
    for _ in range(5):
        lease = pool.acquire(timeout=0)
        assert lease.exit_id == "dc-1"
        pool.release(lease)
    # The snapshot says what pool.state says: every slot is out while its gateway is.
    snap = pool.snapshot()
    rows = {e["exit_id"]: e["state"] for e in snap["exits"]}
    assert {rows[f"resi-{n}"] for n in range(6)} == {"quarantined"} and rows["dc-1"] == "healthy"
    assert sorted(e["exit_id"] for e in pool.snapshot(state="quarantined")["exits"]) == [f"resi-{n}" for n in range(6)]
    # Reviving one slot says the gateway works: every slot is back.
    pool.revive("resi-4")
    assert set(slot_states(pool).values()) == {"healthy"}


def test_tunnel_failures_from_several_slots_are_the_gateways_and_one_probe_brings_all_back():
    pool, clock = fleet()
    for slot in ("resi-0", "resi-1", "resi-3"):
        pool.release(lease_on(pool, slot), error="connect")
    assert set(slot_states(pool).values()) == {"quarantined"}
    assert "gateway_down" in kinds(pool)
    with pytest.raises(NoExitAvailable):
        lease_on(pool, "resi-5")
    pool.record_probe("resi-5", True)
    assert set(slot_states(pool).values()) == {"healthy"}
    assert "gateway_up" in kinds(pool)


def test_a_slot_failing_alone_is_that_slots_own():
    pool, clock = fleet()
    for _ in range(8):
        if pool.state("resi-1") == "quarantined":
            break
        pool.release(lease_on(pool, "resi-1"), error="connect")
        clock.advance(30.0)  # far apart: no two failures share the gateway's window
    states = slot_states(pool)
    assert states["resi-1"] == "quarantined"
    assert all(s == "healthy" for e, s in states.items() if e != "resi-1")
    assert "gateway_down" not in kinds(pool)


def test_a_gateway_that_is_out_is_probed_through_one_slot_once_its_backoff_is_over():
    pool, clock = fleet()
    pool.release(lease_on(pool, "resi-2"), status=407)
    # Waiting out its backoff: none of its slots is due, however idle; the plain exit is.
    assert [e.exit_id for e in pool.probe_due(idle=0.0)] == ["dc-1"]
    clock.advance(3600.0)
    due = [e.exit_id for e in pool.probe_due(idle=0.0)]
    slots = [e for e in due if e.startswith("resi-")]
    assert len(slots) == 1 and "dc-1" in due, due
    pool.record_probe(slots[0], True)
    assert set(slot_states(pool).values()) == {"healthy"}
    assert len([e for e in pool.probe_due(idle=0.0) if e.exit_id.startswith("resi-")]) == 6
