"""What a user sees of a gateway in `pool.snapshot()`: one `gateways` entry per gateway (its
settings, its breaker, its slots summed, the soonest rotation), and on every slot exit its
gateway, token generation, next rotation and learned IP; never a password, nor a token that
sits in the password."""

from __future__ import annotations

from exitpool import Exit, Gateway, ManualClock, Pool

T0 = 1_700_000_000.0


def pool_of(slots=6):
    clock = ManualClock(T0)
    resi = Gateway(
        "resi",
        "http://customer-c1:s3cret@gw.provider.example:7777",
        slots=slots,
        username="{user}-session-{session}",
        lifetime=600,
        tags={"country": "de"},
    )
    # IPRoyal puts the token in the password: the token must not show either.
    ipr = Gateway("ipr", "http://acme:s3cret@geo.iproyal.com:12321", slots=3, preset="iproyal", lifetime=3600)
    pool = Pool([resi, ipr, Exit("dc-1", "http://u:s3cret@10.0.0.7:3128", ip="203.0.113.7")], clock=clock, seed=1)
    return pool, clock, resi, ipr


def lease_on(pool, exit_id):
    others = [e.exit_id for e in pool.exits if e.exit_id != exit_id]
    return pool.acquire(avoid=others, timeout=0)


def test_each_gateway_is_one_entry_with_its_settings_breaker_and_slots():
    pool, clock, resi, ipr = pool_of()
    pool.release(lease_on(pool, "resi-1"), status=200)
    held = lease_on(pool, "resi-2")
    snap = pool.snapshot()
    gws = {g["gateway_id"]: g for g in snap["gateways"]}
    assert list(gws) == ["resi", "ipr"]
    g = gws["resi"]
    assert (g["slots"], g["lifetime"], g["margin"], g["preset"], g["tags"]) == (6, 600.0, 60.0, None, {"country": "de"})
    assert (g["state"], g["cause"], g["until"], g["outages"], g["credential_rejections"]) == ("healthy", None, None, 0, 0)
    assert g["slot_states"]["healthy"] == 6 and g["active_leases"] == 1 and g["leases"] == 2
    assert g["proxy"] == "http://customer-c1:[secure]@gw.provider.example:7777"
    assert gws["ipr"]["preset"] == "iproyal"
    # The soonest rotation is the earliest of its slots', and still to come.
    now = clock.now()
    soonest = min(resi.rotates_at(n, at=now) for n in range(6))
    assert g["next_rotation"] == soonest > now
    pool.release(held)


def test_a_slot_exit_names_its_gateway_generation_rotation_and_learned_ip():
    pool, clock, resi, _ = pool_of()
    pool.record_probe("resi-3", True, observed_ip="198.51.100.3")
    exits = {e["exit_id"]: e for e in pool.snapshot()["exits"]}
    e = exits["resi-3"]
    now = clock.now()
    assert (e["gateway"], e["generation"], e["rotates_at"]) == ("resi", resi.generation(3, at=now), resi.rotates_at(3, at=now))
    assert e["learned_ip"] == "198.51.100.3"
    assert e["proxy"] == f"http://customer-c1-session-{resi.token(3, at=now)}:[secure]@gw.provider.example:7777"
    plain = exits["dc-1"]
    assert (plain["gateway"], plain["generation"], plain["rotates_at"], plain["learned_ip"]) == (None, None, None, None)


def test_a_rotation_shows_the_new_generation_and_is_counted():
    pool, clock, resi, _ = pool_of(slots=1)
    pool.record_probe("resi-0", True, observed_ip="198.51.100.3")
    first = pool.snapshot()
    slot = first["exits"][0]
    clock.advance(slot["rotates_at"] - clock.now())
    # No lease touched the slot: the snapshot itself shows the token the slot has now.
    snap = pool.snapshot()
    now_slot = snap["exits"][0]
    assert now_slot["generation"] == slot["generation"] + 1 == resi.generation(0, at=clock.now())
    assert now_slot["rotates_at"] > clock.now() and now_slot["learned_ip"] is None
    g = snap["gateways"][0]
    assert g["rotations"] == 1 and g["next_rotation"] == now_slot["rotates_at"]
    assert pool.events()[-1]["kind"] == "token_rotated"


def test_the_gateways_breaker_shows_its_state_cause_and_figures():
    pool, clock, _, _ = pool_of()
    pool.release(lease_on(pool, "resi-2"), status=407)
    g = pool.snapshot(exits=False)["gateways"][0]
    assert (g["state"], g["cause"], g["outages"], g["credential_rejections"]) == ("quarantined", "credentials", 1, 1)
    assert g["until"] is not None and g["until"] > clock.now() and g["absorbed"] == 1
    clock.advance(10.0)
    assert pool.snapshot(exits=False)["gateways"][0]["out_seconds"] == 10.0
    pool.revive("resi-4")
    g = pool.snapshot(exits=False)["gateways"][0]
    assert (g["state"], g["cause"], g["until"], g["out_seconds"]) == ("healthy", None, None, 10.0)


def test_connect_failures_of_several_slots_show_as_the_gateways_outage():
    pool, clock, _, _ = pool_of()
    for slot in ("resi-0", "resi-1", "resi-3"):
        pool.release(lease_on(pool, slot), error="connect")
    g = pool.snapshot(exits=False)["gateways"][0]
    assert (g["state"], g["cause"], g["outages"], g["absorbed"]) == ("quarantined", "connect", 1, 3)


def test_the_summary_and_every_filter_keep_the_gateways_section():
    pool, clock, _, _ = pool_of()
    full = pool.snapshot()["gateways"]
    assert [g["gateway_id"] for g in full] == ["resi", "ipr"]
    for snap in (
        pool.snapshot(exits=False),
        pool.snapshot(tags={"country": "de"}),
        pool.snapshot(exit_ids=["dc-1"]),
        pool.snapshot(state="quarantined"),
        pool.snapshot(limit=1),
        pool.snapshot(by_tag="country"),
    ):
        assert snap["gateways"] == full
    assert [e["exit_id"] for e in pool.snapshot(tags={"country": "de"})["exits"]] == [f"resi-{n}" for n in range(6)]


def test_no_password_and_no_token_in_a_password_appears():
    pool, clock, _, ipr = pool_of()
    pool.release(lease_on(pool, "ipr-1"), status=407)
    text = repr(pool.snapshot()) + repr(pool.snapshot(exits=False)) + repr(pool.events())
    assert "s3cret" not in text
    for n in range(3):
        assert ipr.token(n, at=clock.now()) not in text


def test_slots_false_lists_plain_exits_only_and_a_bad_value_is_refused():
    import pytest

    from exitpool import InvalidInput

    pool, clock, _, _ = pool_of()
    snap = pool.snapshot(slots=False)
    assert [e["exit_id"] for e in snap["exits"]] == ["dc-1"] and snap["matrix"]["exits"] == ["dc-1"]
    assert [g["slots"] for g in snap["gateways"]] == [6, 3], "the gateways still sum their slots"
    assert len(pool.snapshot(slots=True)["exits"]) == 10
    with pytest.raises(InvalidInput, match="snapshot slots must be True or False, got a str"):
        pool.snapshot(slots="no")
