"""Gateways through the public API: slots as exits, tokens every worker agrees on, rotation on
the pool's clock, sessions that end with their token, probes per token, validation, masking.

Time comes from a ManualClock, whose readings gateways take as Unix time."""

from __future__ import annotations

import pickle

import pytest

from exitpool import Exit, Gateway, InvalidInput, ManualClock, Pool, SessionExitLost

T0 = 1_700_000_000.0
URL = "http://customer-c1:s3cret@gw.provider.example:7777"


def resi(slots=4, **kw):
    kw.setdefault("username", "{user}-cc-{country}-session-{session}")
    kw.setdefault("lifetime", 600)
    kw.setdefault("tags", {"country": "de"})
    return Gateway("resi", URL, slots=slots, **kw)


def slot_of(exit_id: str) -> int:
    return int(exit_id.rsplit("-", 1)[1])


def test_a_gateway_expands_into_slots_with_stable_ids_beside_plain_exits():
    dc = Exit("dc-1", "http://10.0.0.7:3128", ip="203.0.113.7")
    pool = Pool([resi(3), dc], clock=ManualClock(T0))
    assert [e.exit_id for e in pool.exits] == ["resi-0", "resi-1", "resi-2", "dc-1"]
    slot = pool.exit("resi-1")
    g = resi(3)
    assert slot.username == f"customer-c1-cc-de-session-{g.token(1, at=T0)}"
    assert slot.password == "s3cret" and slot.tags == {"country": "de"}
    assert len({e.proxy for e in pool.exits}) == 4
    # An id given twice, across exits and slots alike, is refused.
    with pytest.raises(InvalidInput, match='duplicate exit id "resi-2"'):
        Pool([resi(3), Exit("resi-2", "http://10.0.0.8:3128")], clock=ManualClock(T0))


def test_two_workers_with_the_same_gateway_agree_on_every_token():
    clocks = [ManualClock(T0), ManualClock(T0)]
    pools = [Pool([resi(100)], clock=c) for c in clocks]
    for _ in range(4):
        a, b = ([e.proxy for e in p.exits] for p in pools)
        assert a == b
        # ...and with what Gateway.token says for that time.
        now = clocks[0].now()
        assert a[7].split(":")[1].endswith(resi(100).token(7, at=now))
        for c in clocks:
            c.advance(311.0)


def test_rotation_changes_the_lease_proxy_and_ends_the_session_visibly():
    g = resi(4)
    clock = ManualClock(T0)
    pool = Pool([g], clock=clock)
    with pool.lease("acct-1") as lease:
        exit_id, before = lease.exit_id, lease.proxy
    slot = slot_of(exit_id)
    clock.advance(g.rotates_at(slot, at=T0) - T0 - 0.5)
    with pool.lease("acct-1") as lease:
        assert (lease.exit_id, lease.proxy) == (exit_id, before)
    clock.advance(0.5)
    with pytest.raises(SessionExitLost, match=r"token rotated") as lost:
        with pool.lease("acct-1"):
            pass
    assert (lost.value.key, lost.value.exit_id) == ("acct-1", exit_id)
    assert "s3cret" not in str(lost.value)
    # The session ended with its token: the next lease binds afresh, same slot, new token.
    with pool.lease("acct-1") as lease:
        assert lease.exit_id == exit_id
        assert lease.proxy != before
        assert g.token(slot, at=clock.now()) in lease.proxy
    kinds = [e["kind"] for e in pool.events()]
    assert "token_rotated" in kinds and "session_lost" in kinds


def test_keyless_leases_get_the_current_token_too():
    g = resi(1)
    clock = ManualClock(T0)
    pool = Pool([g], clock=clock)
    with pool.lease() as lease:
        first = lease.proxy
    clock.advance(g.rotates_at(0, at=T0) - T0)
    with pool.lease() as lease:
        assert lease.proxy != first and g.token(0, at=clock.now()) in lease.proxy


def test_quiet_rebind_moves_the_session_to_the_new_token():
    g = resi(3, rebind=True)
    clock = ManualClock(T0)
    pool = Pool([g], clock=clock)
    with pool.lease("acct") as lease:
        exit_id, before = lease.exit_id, lease.proxy
    clock.advance(600)
    with pool.lease("acct") as lease:
        assert lease.exit_id == exit_id and lease.proxy != before
    assert not any(e["kind"] == "session_lost" for e in pool.events())


def test_tokens_that_never_expire_never_rotate():
    g = Gateway("isp", "http://acct:s3cret@isp.provider.example:8000", slots=2, preset="massive_isp")
    clock = ManualClock(T0)
    pool = Pool([g], clock=clock)
    with pool.lease("acct") as lease:
        before = lease.proxy
    assert g.rotates_at(0) == float("inf")
    clock.advance(30 * 86_400)
    with pool.lease("acct") as lease:
        assert lease.proxy == before


def test_probes_learn_the_ip_per_token_and_report_broken_stickiness():
    g = resi(1)
    clock = ManualClock(T0)
    pool = Pool([g], clock=clock)
    assert pool.record_probe("resi-0", True, observed_ip="198.51.100.1") is False
    assert pool.record_probe("resi-0", True, observed_ip="198.51.100.1") is False
    clock.advance(g.rotates_at(0, at=T0) - T0)
    # A new IP after a rotation is expected: learned, not drift.
    assert pool.record_probe("resi-0", True, observed_ip="198.51.100.2") is False
    assert not any(e["kind"] in ("exit_drifted", "sticky_broken") for e in pool.events())
    # Within one token, a new IP is the provider breaking stickiness.
    assert pool.record_probe("resi-0", True, observed_ip="198.51.100.3") is True
    broken = [e for e in pool.events() if e["kind"] == "sticky_broken"]
    assert len(broken) == 1 and broken[0]["exit_id"] == "resi-0"
    assert "198.51.100.2" in broken[0]["message"] and "s3cret" not in broken[0]["message"]


def test_a_gateway_can_be_added_to_a_pool_all_or_nothing():
    clock = ManualClock(T0)
    pool = Pool([Exit("resi-2", "http://10.0.0.8:3128")], clock=clock)
    with pytest.raises(InvalidInput, match='duplicate exit id "resi-2"'):
        pool.add(resi(3))
    assert [e.exit_id for e in pool.exits] == ["resi-2"]
    pool.add(Gateway("mob", URL, slots=2, username="{user}-{session}", lifetime=300))
    assert [e.exit_id for e in pool.exits] == ["resi-2", "mob-0", "mob-1"]
    with pytest.raises(InvalidInput, match="takes an Exit or a Gateway"):
        pool.add("mob")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("preset", "kw", "username", "password"),
    [
        ("oxylabs", {}, "customer-c1-sessid-{t}-sesstime-10", "s3cret"),
        ("thordata", {"lifetime": 1800}, "customer-c1-sessid-{t}-sesstime-30", "s3cret"),
        ("geonode", {}, "customer-c1-session-{t}-lifetime-10", "s3cret"),
        ("pingnetwork", {}, "customer-c1-session-{t}-lifetime-40", "s3cret"),
        ("iproyal", {"lifetime": 90}, "customer-c1", "s3cret_session-{t}_lifetime-90s"),
        ("massive", {}, "customer-c1-session-{t}-sessionttl-15", "s3cret"),
        ("massive_isp", {}, "customer-c1-session-{t}", "s3cret"),
    ],
)
def test_presets_fill_the_providers_documented_format(preset, kw, username, password):
    g = Gateway("p", URL, slots=2, preset=preset, **kw)
    token = g.token(1, at=T0)
    (e,) = [x for x in g.exits(at=T0) if x.exit_id == "p-1"]
    assert (e.username, e.password) == (username.format(t=token), password.format(t=token))
    (info,) = [p for p in Gateway.presets() if p["name"] == preset]
    lo, hi = info["session_length"]
    assert lo <= len(token) <= hi and info["source"].startswith("https://")


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"slots": 0}, "slots 0 is outside 1..=100000"),
        ({"username": "{user}-x"}, r"neither the username nor the password template has \{session\}"),
        ({"username": "{user}-{city}-{session}"}, r'names the tag \{city\}, but tags has no "city"'),
        ({"username": "{user}-{ses-sion}"}, r"unknown placeholder \{ses-sion\}"),
        ({"lifetime": 0.5}, "lifetime 0.5 must be"),
        ({"lifetime": float("nan")}, "lifetime nan must be|lifetime NaN must be"),
        ({"margin": 600}, "margin 600 must be"),
        ({"capacity": 0}, "capacity 0 is outside"),
        ({"preset": "nope", "username": None}, 'preset "nope" is not one of oxylabs'),
        ({"preset": "thordata", "username": None, "lifetime": 6000}, "lifetime 6000 s is outside thordata's documented range"),
        ({"preset": "oxylabs", "username": None, "lifetime": 90}, "not a whole number of minutes"),
        ({"preset": "pingnetwork", "username": None, "session_length": 5}, "session_length 5 is outside 6..=15"),
        ({"preset": "oxylabs", "username": None, "session_alphabet": "alnum"}, "wider than oxylabs's session ids allow"),
        ({"session_alphabet": "hex"}, 'session_alphabet "hex" is not one of'),
        ({"preset": "massive_isp", "username": None}, "massive_isp's sessions never expire"),
        ({"password": "s3cret_{bad name}"}, "password template: unknown placeholder at character"),
    ],
)
def test_bad_input_is_named_with_the_password_masked(kw, message):
    with pytest.raises(InvalidInput, match=message) as e:
        resi(**kw)
    assert "s3cret" not in str(e.value)


def test_bad_arguments_of_the_methods_are_named():
    g = resi(3)
    with pytest.raises(InvalidInput, match=r"slot 3 is outside 0..=2"):
        g.token(3)
    with pytest.raises(InvalidInput, match="at -1"):
        g.token(0, at=-1)
    with pytest.raises(InvalidInput, match="must be a whole number"):
        resi(slots=2.5)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="a Pool holds Exit and Gateway objects"):
        Pool(["resi"])  # type: ignore[list-item]


def test_no_credential_in_any_repr_event_or_error():
    # The token on the password side (as IPRoyal has it): then no repr shows it either. A
    # user-name token is shown where the user name is (masked URLs keep the user, as httpx's).
    g = resi(2, username="{user}", password="{password}-{session}")
    assert repr(g) == (
        "Gateway('resi', 'http://customer-c1:[secure]@gw.provider.example:7777', slots=2, "
        "lifetime=600.0, margin=60.0, tags={'country': 'de'})"
    )
    clock = ManualClock(T0)
    pool = Pool([g], clock=clock)
    with pool.lease("a") as lease:
        pass
    clock.advance(600)
    with pytest.raises(SessionExitLost) as lost:
        with pool.lease("a"):
            pass
    tokens = {g.token(s, at=t) for s in range(2) for t in (T0, clock.now())}
    shown = [repr(g), str(lost.value), repr(lease.exit), *(e["message"] for e in pool.events())]
    for text in shown:
        assert "s3cret" not in text
        assert not any(t in text for t in tokens), text


def test_a_gateway_pickles_through_its_constructor():
    g = resi(3, preset=None, rebind=True, margin=30)
    h = pickle.loads(pickle.dumps(g))
    assert repr(h) == repr(g) and h.token(2, at=T0) == g.token(2, at=T0)
    assert (h.rebind, h.margin, h.session_length, h.session_alphabet) == (True, 30.0, 12, "alnum")


def test_a_subset_by_tag_takes_a_gateways_slots_by_their_gateways_tags():
    de = resi(3)  # tags={"country": "de"}
    us = Gateway("us", URL, slots=2, username="{user}-cc-us-session-{session}", lifetime=600, tags={"country": "us"})
    dc = Exit("dc-1", "http://10.0.0.7:3128", tags={"country": "de"})
    pool = Pool([de, us, dc], clock=ManualClock(T0))
    german = pool.subset(country="de")
    assert sorted(e.exit_id for e in german.exits) == ["dc-1", "resi-0", "resi-1", "resi-2"]
    for n in range(12):
        with german.lease() as lease:
            assert lease.exit_id != "us-0" and lease.exit_id != "us-1"
        with german.lease(f"acct-{n}") as lease:
            assert lease.exit.tags == {"country": "de"}
    assert sorted(e.exit_id for e in pool.subset(country="us").exits) == ["us-0", "us-1"]
