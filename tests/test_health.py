"""Health as a Python user sees it (issue 4): outcome classes, scoped breakers, the lifecycle at
its boundaries, the config, the safeguards (ejection cap, minimum in service, site and global
incidents), the three scenarios of the issue, adaptive weights, recalibration and events.

Everything runs on a ManualClock with synthetic reports; nothing sleeps. Every exit's proxy
carries the password "s3cret-pw", and every event any test reads is checked for it."""

from __future__ import annotations

import collections
import re

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
SHOP = "shop.example"
NEWS = "news.example"
EVENT_KEYS = {"seq", "time", "kind", "exit_id", "site", "from", "to", "message"}
OUT = ("quarantined", "dead")
# The keys of health=, in the order the core's HealthConfig declares them (its unknown-key
# refusal lists them).
HEALTH_SETTINGS = (
    "consecutive degrade_at block_weight connect_weight window min_calls failure_rate captcha_rate captcha_consecutive"
    " recover_successes half_open_trials base_ejection max_ejection jitter min_hold forgive_after dead_after max_ejected"
    " min_in_service panic_threshold incident_fraction incident_min_exits incident_interval rate_limit_cooldown"
).split()


# --- helpers ----------------------------------------------------------------------------------


def make_pool(n=10, *, clock, capacities=None, **kw):
    """`n` exits e0..e(n-1), each tagged with its own id so `only(pool, id)` can aim at it."""
    exits = [
        Exit(f"e{i}", f"http://user:{PW}@gw.example:{8000 + i}", tags={"id": f"e{i}"}, capacity=(capacities or {}).get(f"e{i}", 1))
        for i in range(n)
    ]
    kw.setdefault("strategy", "round_robin")
    kw.setdefault("seed", 7)
    return Pool(exits, clock=clock, **kw)


def ids(pool):
    return [row["exit_id"] for row in pool.snapshot()["exits"]]


def only(pool, exit_id):
    """A view holding one exit: its leases always go through that exit (health is shared)."""
    return pool.subset(id=exit_id)


def hit(pool, exit_id, site, n=1, **report):
    """`n` leases through `exit_id` for `site`, each released with `report` (success if empty)."""
    view = only(pool, exit_id)
    for _ in range(n):
        lease = view.acquire(site=site, timeout=0)
        assert lease.exit_id == exit_id
        pool.release(lease, **report)


def events(pool, since=None, **match):
    """The pool's events (checked for the password and the documented keys), filtered."""
    out = pool.events() if since is None else pool.events(since=since)
    for e in out:
        assert PW not in str(e), e
        assert set(e) == EVENT_KEYS, e
    return [e for e in out if all(e[k] == v for k, v in match.items())]


def changes(pool, exit_id, site="any"):
    """(time, from, to, message) of every state change of one exit (for one site, or any)."""
    return [
        (e["time"], e["from"], e["to"], e["message"])
        for e in events(pool, exit_id=exit_id)
        if e["to"] is not None and (site == "any" or e["site"] == site)
    ]


def ejected(pool, site):
    return sum(pool.state(i, site) in OUT for i in ids(pool))


def served(pool, site, n, **report):
    """`n` keyless leases for `site`, released at once; which exits served them."""
    got = collections.Counter()
    for _ in range(n):
        lease = pool.acquire(site=site, timeout=0)
        got[lease.exit_id] += 1
        pool.release(lease, **report)
    return got


@pytest.fixture
def clock():
    return ManualClock()


# --- outcome classes --------------------------------------------------------------------------


@pytest.mark.parametrize("status", [403, 407, 451])
def test_two_blocks_quarantine_an_exit_for_that_site(clock, status):
    pool = make_pool(clock=clock)
    hit(pool, "e0", SHOP, status=status)
    assert pool.state("e0", SHOP) == "healthy"  # one block never trips
    hit(pool, "e0", SHOP, status=status)
    assert pool.state("e0", SHOP) == "quarantined"
    assert pool.state("e0") == "healthy"  # the tunnel is fine
    assert pool.state("e0", NEWS) == "healthy"
    (e,) = events(pool, kind="state_changed")
    assert (e["exit_id"], e["site"], e["from"], e["to"]) == ("e0", SHOP, "healthy", "quarantined")
    assert e["message"] == "healthy -> quarantined: 6 weighted consecutive failures (threshold 5)"
    assert e["time"] == 0.0
    assert pool.snapshot()["counts"]["outcomes"]["block"] == 2


def test_a_404_is_not_a_block(clock):
    pool = make_pool(clock=clock)
    for _ in range(30):
        clock.advance(1.0)
        hit(pool, "e0", SHOP, status=404)
    assert pool.state("e0", SHOP) == "healthy"
    assert changes(pool, "e0") == []


def test_a_429_cools_only_that_exit_for_that_site_and_honours_retry_after(clock):
    pool = make_pool(2, clock=clock)
    clock.advance(100.0)
    hit(pool, "e0", SHOP, status=429, retry_after=12.0)
    # A 429 is no verdict on the exit: no breaker moves, but the state shows the rest.
    assert pool.state("e0", SHOP) == "cooling"
    assert pool.state("e0", NEWS) == pool.state("e0") == "healthy"
    assert changes(pool, "e0") == []
    # The other exit takes the site; the cooled exit still serves every other site.
    assert served(pool, SHOP, 6) == {"e1": 6}
    assert served(pool, NEWS, 6) == {"e0": 3, "e1": 3}
    # Aimed at the cooled exit alone: Cooling, with the site's retry_after.
    view = only(pool, "e0")
    with pytest.raises(Cooling) as info:
        view.acquire(site=SHOP, timeout=0)
    assert info.value.retry_after == 12.0
    assert str(info.value) == ('subset(id="e0"): every exit that could serve was rate-limited by this site (429); retry after 12.000 s')
    clock.advance(11.5)
    with pytest.raises(Cooling) as info:
        view.acquire(site=SHOP, timeout=0)
    assert info.value.retry_after == 0.5
    clock.advance(0.5)
    assert pool.state("e0", SHOP) == "healthy"
    lease = view.acquire(site=SHOP, timeout=0)
    assert lease.exit_id == "e0"
    pool.release(lease)


def test_a_429_on_a_sessions_exit_asks_the_session_to_wait_not_to_move(clock):
    pool = make_pool(3, clock=clock)
    key = next(k for k in (f"acct-{i}" for i in range(1000)) if pool.assign(k).exit_id == "e1")
    with pool.lease(key, site=SHOP) as lease:
        assert lease.exit_id == "e1"
        lease.report(status=429)  # no Retry-After: the default cooldown, 30 s
    with pytest.raises(Cooling) as info:
        pool.acquire(key, site=SHOP, timeout=0)
    assert info.value.retry_after == 30.0
    assert str(info.value) == "the pool: the session's exit was rate-limited by this site (429); retry after 30.000 s"
    with pool.lease(key, site=NEWS) as lease:  # the same session, another site: served at once
        assert lease.exit_id == "e1"
    clock.advance(30.0)
    with pool.lease(key, site=SHOP) as lease:
        assert (lease.exit_id, lease.strategy) == ("e1", "session")


@pytest.mark.parametrize("status", [500, 502, 503])
def test_5xx_never_quarantines_an_exit(clock, status):
    pool = make_pool(clock=clock)
    for _ in range(60):
        clock.advance(1.0)  # past every hold time, so even a degrade could happen
        hit(pool, "e0", SHOP, status=status)
    assert pool.state("e0", SHOP) == "healthy"
    assert pool.state("e0") == "healthy"
    assert changes(pool, "e0") == []
    assert events(pool, kind="site_incident_opened") == []  # one exit failing is no incident
    assert pool.snapshot()["counts"]["outcomes"]["target_error"] == 60


def test_timeouts_count_one_each(clock):
    pool = make_pool(clock=clock)
    hit(pool, "e0", SHOP, n=3, error="timeout")
    with pytest.raises(TimeoutError):
        with only(pool, "e0").lease(site=SHOP):
            raise TimeoutError("read timed out")
    assert pool.state("e0", SHOP) == "healthy"  # 4 < 5
    hit(pool, "e0", SHOP, error="timeout")
    assert pool.state("e0", SHOP) == "quarantined"
    assert pool.state("e0") == "healthy"  # a timeout is an answer from the far side of the tunnel
    assert pool.state("e0", NEWS) == "healthy"
    assert changes(pool, "e0") == [(0.0, "healthy", "quarantined", "healthy -> quarantined: 5 weighted consecutive failures (threshold 5)")]


def test_connection_errors_take_the_exit_out_for_every_site(clock):
    pool = make_pool(clock=clock)
    hit(pool, "e0", SHOP, n=2, error="connect")
    hit(pool, "e0", NEWS, error="proxy")
    with pytest.raises(ConnectionError):
        with only(pool, "e0").lease(site="third.example"):
            raise ConnectionRefusedError("tunnel refused")
    assert pool.state("e0") == "healthy"  # 4 < 5
    with pytest.raises(ConnectionError):
        with only(pool, "e0").lease(site=SHOP):
            raise ConnectionError("proxy closed the connection")
    for site in (None, SHOP, NEWS, "never-leased.example"):
        assert pool.state("e0", site) == "quarantined", site
    assert changes(pool, "e0") == [(0.0, "healthy", "quarantined", "healthy -> quarantined: 5 weighted consecutive failures (threshold 5)")]
    (e,) = events(pool, exit_id="e0")
    assert e["site"] is None  # the tunnel, not a site
    (row,) = [r for r in pool.snapshot()["exits"] if r["exit_id"] == "e0"]
    assert (row["state"], row["quarantines"], row["outcomes"]["connect"]) == ("quarantined", 1, 5)
    for site in (SHOP, "elsewhere.example", None):
        assert "e0" not in served(pool, site, 18)


def test_captchas_trip_on_three_in_a_row(clock):
    pool = make_pool(clock=clock)
    for _ in range(2):
        hit(pool, "e0", SHOP, n=2, status=200, captcha=True)
        hit(pool, "e0", SHOP, status=200)  # a success breaks the run
    assert pool.state("e0", SHOP) == "healthy"
    # Three timeouts in a row are not enough; three captchas are.
    hit(pool, "e1", SHOP, n=3, error="timeout")
    assert pool.state("e1", SHOP) == "healthy"
    hit(pool, "e0", SHOP, n=3, captcha=True)
    assert pool.state("e0", SHOP) == "quarantined"
    assert changes(pool, "e0") == [(0.0, "healthy", "quarantined", "healthy -> quarantined: 3 consecutive captchas")]


def test_failure_rate_message_counts_the_calls_it_judged(clock):
    # Never two failures in a row, so only the rate can trip: 3 failures in the first 10 calls.
    pool = make_pool(clock=clock)
    for report in ["ok", "ok", "t", "ok", "ok", "t", "ok", "ok", "t"]:
        hit(pool, "e0", SHOP, **({"error": "timeout"} if report == "t" else {}))
    assert pool.state("e0", SHOP) == "healthy"
    hit(pool, "e0", SHOP)  # the 10th call: 3 of 10 failed, 30%
    assert pool.state("e0", SHOP) == "quarantined"
    # Only 10 calls were ever made: the figures must say so.
    assert changes(pool, "e0")[0][3] == "healthy -> quarantined: failure rate 30% over the last 10 calls (threshold 30%)"


# --- scoped breakers --------------------------------------------------------------------------


def test_an_exit_blocked_by_one_site_keeps_serving_the_others(clock):
    pool = make_pool(clock=clock)
    hit(pool, "e0", SHOP, n=2, status=403)
    assert pool.state("e0", SHOP) == "quarantined"
    assert pool.state("e0", NEWS) == "healthy"
    assert pool.state("e0") == "healthy"
    assert pool.state("e0", "never-leased.example") == "healthy"
    news = served(pool, NEWS, 30)
    assert news == {f"e{i}": 3 for i in range(10)}
    shop = served(pool, SHOP, 27)
    assert "e0" not in shop and sum(shop.values()) == 27
    assert [r["state"] for r in pool.snapshot()["exits"]] == ["healthy"] * 10  # snapshot: the tunnel
    with pytest.raises(UnknownExit) as info:
        pool.state("e99", SHOP)
    assert str(info.value) == 'no exit with id "e99"'


# --- lifecycle at its boundaries ----------------------------------------------------------------


def test_quarantine_ends_exactly_at_its_backoff(clock):
    pool = make_pool(clock=clock, health={"jitter": 0})
    clock.advance(1000.0)
    hit(pool, "e0", SHOP, n=2, status=403)
    clock.advance(29.5)
    assert pool.state("e0", SHOP) == "quarantined"
    with pytest.raises(NoExitAvailable):
        only(pool, "e0").acquire(site=SHOP, timeout=0)
    clock.advance(0.5)  # 1030.0: the backoff is over
    assert pool.state("e0", SHOP) == "probing"
    assert changes(pool, "e0")[-1] == (1030.0, "quarantined", "probing", "quarantined -> probing: quarantine of 30.0 s is over")


def test_quarantine_is_base_ejection_times_a_jitter_in_80_to_120_percent(clock):
    lengths = []
    for seed in range(16):
        c = ManualClock()
        pool = make_pool(clock=c, seed=seed)
        hit(pool, "e0", SHOP, n=2, status=403)
        c.advance(23.95)
        assert pool.state("e0", SHOP) == "quarantined", seed
        steps = 0
        while pool.state("e0", SHOP) == "quarantined":
            c.advance(0.01)
            steps += 1
            assert steps < 1300, f"seed {seed}: still quarantined at {c.now()}"
        lengths.append(c.now())
        # Just before the end it was out, just after it is half-open.
        assert pool.state("e0", SHOP) == "probing"
        told = float(re.fullmatch(r"quarantined -> probing: quarantine of ([\d.]+) s is over", changes(pool, "e0")[-1][3])[1])
        assert c.now() - 0.01 - 0.05 <= told <= c.now() + 0.05, (seed, told, c.now())
    assert all(24.0 - 0.01 <= t <= 36.0 + 0.01 for t in lengths), lengths
    assert max(lengths) - min(lengths) > 4.0, lengths  # the jitter really varies


def test_half_open_admits_exactly_its_trial_leases_then_recovers(clock):
    pool = make_pool(clock=clock, health={"jitter": 0})
    view = only(pool, "e0")
    hit(pool, "e0", SHOP, n=2, status=403)
    clock.advance(30.0)
    assert pool.state("e0", SHOP) == "probing"
    trials = [view.acquire(site=SHOP, timeout=0) for _ in range(3)]
    assert [t.exit_id for t in trials] == ["e0"] * 3
    with pytest.raises(NoExitAvailable):
        view.acquire(site=SHOP, timeout=0)
    # While its trials are out, the pool does not send it more for the site; other sites, yes.
    held = [pool.acquire(site=SHOP, timeout=0) for _ in range(18)]
    assert "e0" not in {h.exit_id for h in held}
    for h in held:
        pool.release(h)
    assert served(pool, NEWS, 10)["e0"] == 1
    # A trial back frees a slot for exactly one more.
    pool.release(trials.pop(0))
    trials.append(view.acquire(site=SHOP, timeout=0))
    with pytest.raises(NoExitAvailable):
        view.acquire(site=SHOP, timeout=0)
    for t in trials:
        pool.release(t)  # 4 successes
    hit(pool, "e0", SHOP, n=3)  # 7 successes
    assert pool.state("e0", SHOP) == "probing"
    hit(pool, "e0", SHOP)  # the 8th: recover_successes
    assert pool.state("e0", SHOP) == "healthy"
    assert [c[1:3] for c in changes(pool, "e0")] == [("healthy", "quarantined"), ("quarantined", "probing"), ("probing", "healthy")]
    assert changes(pool, "e0")[-1][3] == "probing -> healthy: 8 consecutive successes"
    assert served(pool, SHOP, 10)["e0"] == 1  # back at full share


def test_a_view_of_quarantined_exits_says_why_it_cannot_lease(clock):
    pool = make_pool(clock=clock)
    hit(pool, "e0", SHOP, n=2, status=403)
    with pytest.raises(NoExitAvailable) as info:
        only(pool, "e0").acquire(site=SHOP, timeout=0)
    # The pool has no max_leases: the exit is out for its health, and the message must not
    # send the user looking for a lease limit.
    assert "max_leases" not in str(info.value), str(info.value)


def test_failed_trials_double_the_backoff_and_five_failed_returns_mean_dead(clock):
    pool = make_pool(clock=clock, health={"jitter": 0}, session_ttl=1e7)
    key = next(k for k in (f"acct-{i}" for i in range(1000)) if pool.assign(k).exit_id == "e0")
    with pool.lease(key, site=NEWS):
        pass  # the key's session lives on e0
    hit(pool, "e0", SHOP, n=2, status=403)
    backoff = 30.0
    for failed in range(1, 6):
        clock.advance(backoff - 0.5)
        assert pool.state("e0", SHOP) == "quarantined", failed
        clock.advance(0.5)
        assert pool.state("e0", SHOP) == "probing", failed
        assert changes(pool, "e0")[-1][3] == f"quarantined -> probing: quarantine of {backoff:.1f} s is over"
        hit(pool, "e0", SHOP, error="timeout")  # the trial fails
        if failed < 5:
            assert pool.state("e0", SHOP) == "quarantined", failed
            assert changes(pool, "e0")[-1][1:] == ("probing", "quarantined", "probing -> quarantined: a trial lease failed")
            backoff *= 2
    assert backoff == 480.0
    assert changes(pool, "e0")[-1][1:] == ("probing", "dead", "probing -> dead: 5 failed returns in a row")
    clock.advance(1e6)
    assert pool.state("e0", SHOP) == "dead"
    assert pool.state("e0", NEWS) == "healthy"  # dead for the shop only
    with pytest.raises(NoExitAvailable):
        only(pool, "e0").acquire(site=SHOP, timeout=0)
    with pytest.raises(SessionExitLost) as info:
        pool.acquire(key, site=SHOP, timeout=0)
    assert str(info.value) == (f'session of key "{key}" is bound to exit "e0", but its exit is dead; end it with end_session(key)')
    pool.revive("e0")
    assert pool.state("e0", SHOP) == "healthy"
    assert changes(pool, "e0")[-1] == (clock.now(), "dead", "healthy", "dead -> healthy: revived")
    with pool.lease(key, site=SHOP) as lease:
        assert (lease.exit_id, lease.strategy) == ("e0", "session")
    with pytest.raises(UnknownExit):
        pool.revive("e99")


def test_an_exit_blocked_on_every_return_goes_dead_and_is_no_site_incident(clock):
    # Only e0 is ever blocked by the shop; nine exits never touch it. One exit is no incident.
    pool = make_pool(clock=clock)
    hit(pool, "e0", SHOP, n=2, status=403)
    spaced = []
    for _ in range(5):
        while pool.state("e0", SHOP) == "quarantined":
            clock.advance(10.0)
        try:
            hit(pool, "e0", SHOP, status=403)  # blocked again on its return
        except Cooling as c:
            spaced.append(str(c))
    incidents = [(e["time"], e["message"]) for e in events(pool, kind="site_incident_opened")]
    assert incidents == [] and spaced == [], (incidents, spaced)
    assert pool.state("e0", SHOP) == "dead"


def test_the_backoff_stops_at_max_ejection(clock):
    pool = make_pool(clock=clock, health={"jitter": 0, "max_ejection": 100, "dead_after": 10})
    hit(pool, "e0", SHOP, n=2, status=403)
    lengths = []
    for _ in range(5):
        start = clock.now()
        while pool.state("e0", SHOP) == "quarantined":
            clock.advance(10.0)
        lengths.append(clock.now() - start)
        hit(pool, "e0", SHOP, error="timeout")
    assert lengths == [30.0, 60.0, 100.0, 100.0, 100.0]


def test_a_session_on_a_quarantined_exit_is_lost_loudly_never_moved(clock):
    pool = make_pool(5, clock=clock)
    with pool.lease("acct-7", site=SHOP) as lease:
        home = lease.exit_id
        lease.report(status=403)
    with pool.lease("acct-7", site=SHOP) as lease:
        assert lease.exit_id == home
        lease.report(status=403)
    assert pool.state(home, SHOP) == "quarantined"
    message = f'session of key "acct-7" is bound to exit "{home}", but its exit is quarantined; end it with end_session(key)'
    for _ in range(3):  # asked again and again: never silently moved
        with pytest.raises(SessionExitLost) as info:
            pool.acquire("acct-7", site=SHOP, timeout=0)
        assert str(info.value) == message
        assert (info.value.key, info.value.exit_id) == ("acct-7", home)
    lost = events(pool, kind="session_lost")
    assert len(lost) == 3
    assert (lost[0]["exit_id"], lost[0]["site"]) == (home, SHOP)
    assert lost[0]["message"] == 'session of key "acct-7": its exit is quarantined; not moved'
    # The same session, for a site where its exit is fine, is still served there.
    with pool.lease("acct-7", site=NEWS) as lease:
        assert (lease.exit_id, lease.strategy) == (home, "session")
    assert pool.end_session("acct-7")
    with pool.lease("acct-7", site=SHOP) as lease:
        assert lease.exit_id != home
        assert lease.strategy == "ring_next"
    with pool.lease("acct-7", site=SHOP) as lease:
        assert lease.strategy == "session" and lease.exit_id != home


# --- config -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "health, message",
    [
        ({"max_ejection": 10}, "health max_ejection 10 is below base_ejection 30"),
        ({"base_ejection": 700}, "health max_ejection 600 is below base_ejection 700"),
        ({"bogus": 1}, 'health has no setting "bogus" (' + ", ".join(HEALTH_SETTINGS) + ")"),
        ({"consecutive": "5"}, "health consecutive must be a number, got '5'"),
        ({"consecutive": True}, "health consecutive must be a number, got True"),
        ({"half_open_trials": 2.5}, "health half_open_trials must be a whole number, got 2.5"),
        ({"half_open_trials": 0}, "health half_open_trials must be at least 1"),
        ({"window": -1}, "health window -1 is outside 0..=4294967295"),
        ({"jitter": 1.0}, "health jitter 1 must be in [0, 1)"),
        ({"max_ejected": 0}, "health max_ejected 0 must be in (0, 1]"),
        ({"base_ejection": float("nan")}, "health base_ejection NaN must be a finite number > 0"),
        ({"degrade_at": 6}, "health degrade_at 6 is above consecutive 5"),
    ],
)
def test_a_bad_health_config_is_refused_with_its_reason(clock, health, message):
    with pytest.raises(InvalidInput) as info:
        make_pool(clock=clock, health=health)
    assert str(info.value) == message


def test_health_must_be_a_dict(clock):
    with pytest.raises(TypeError):
        make_pool(clock=clock, health=[("consecutive", 5)])


def test_health_overrides_take_effect(clock):
    pool = make_pool(clock=clock, health={"block_weight": 1, "captcha_consecutive": 5})
    hit(pool, "e0", SHOP, n=4, status=403)
    hit(pool, "e1", SHOP, n=4, captcha=True)
    assert (pool.state("e0", SHOP), pool.state("e1", SHOP)) == ("healthy", "healthy")
    hit(pool, "e0", SHOP, status=403)
    assert pool.state("e0", SHOP) == "quarantined"


# --- safeguards ---------------------------------------------------------------------------------


def test_at_most_one_of_ten_exits_is_ejected_for_a_site(clock):
    pool = make_pool(clock=clock)
    bad = {"e0", "e1", "e2"}
    worst = 0
    for _ in range(90):  # 22.5 s: shorter than any first quarantine (24 s at least)
        clock.advance(0.25)
        lease = pool.acquire(site=SHOP, timeout=0)
        pool.release(lease, status=403 if lease.exit_id in bad else 200)
        worst = max(worst, ejected(pool, SHOP))
    assert worst == 1
    assert [pool.state(i, SHOP) for i in ("e0", "e1", "e2")] == ["quarantined", "degraded", "degraded"]
    refused = events(pool, kind="ejection_refused")
    assert [(e["exit_id"], e["site"], e["from"], e["to"]) for e in refused] == [
        ("e1", SHOP, "healthy", "degraded"),
        ("e2", SHOP, "healthy", "degraded"),
    ]
    assert refused[0]["message"] == ("healthy -> degraded: ejection refused (cap, minimum in service or incident): reduced weight instead")
    assert all(pool.state(f"e{i}", SHOP) == "healthy" for i in range(3, 10))


def test_the_cap_holds_when_a_failed_trial_goes_back_to_quarantine(clock):
    pool = make_pool(clock=clock, health={"jitter": 0})
    hit(pool, "e0", SHOP, n=2, status=403)
    clock.advance(30.0)
    assert pool.state("e0", SHOP) == "probing"
    trial = only(pool, "e0").acquire(site=SHOP, timeout=0)
    hit(pool, "e1", SHOP, n=2, status=403)  # another bad exit, while e0's trial is out
    pool.release(trial, status=403)  # and e0's trial fails
    states = {i: pool.state(i, SHOP) for i in ids(pool)}
    out = sorted(i for i, s in states.items() if s in OUT)
    assert len(out) <= 1, f"max_ejected 10% of 10 exits is 1, but {out} are out at once: {states}"


def test_min_in_service_keeps_the_last_exit_serving(clock):
    # Soft evidence (blocks) never takes the last exit out...
    pool = make_pool(1, clock=clock)
    for _ in range(30):
        clock.advance(1.0)
        hit(pool, "e0", SHOP, status=403)
    assert pool.state("e0", SHOP) == "degraded"
    assert served(pool, SHOP, 3) == {"e0": 3}
    # ...hard evidence (refused connections) does, whatever the minimum: then none is left in
    # service, so the pool panics and serves from it all the same.
    for _ in range(30):
        clock.advance(1.0)
        hit(pool, "e0", NEWS, error="connect")
    assert pool.state("e0") in OUT
    assert pool.snapshot()["pool"]["panic"] is True
    assert served(pool, SHOP, 3) == {"e0": 3}
    pool = make_pool(2, clock=clock, health={"max_ejected": 1.0})
    hit(pool, "e0", SHOP, n=2, status=403)
    hit(pool, "e1", SHOP, n=2, status=403)
    assert [pool.state("e0", SHOP), pool.state("e1", SHOP)] == ["quarantined", "degraded"]
    assert served(pool, SHOP, 3) == {"e1": 3}


def test_a_few_bad_exits_never_make_a_site_incident(clock):
    # Three of ten exits are blocked by the shop for five minutes; seven answer 200 every time.
    # Three is below the incident threshold (half of ten), however long it lasts.
    pool = make_pool(clock=clock)
    bad = {"e0", "e1", "e2"}
    spaced = 0
    for _ in range(1200):
        clock.advance(0.25)
        try:
            lease = pool.acquire(site=SHOP, timeout=0)
        except Cooling:
            spaced += 1
            continue
        pool.release(lease, status=403 if lease.exit_id in bad else 200)
    assert events(pool, kind="site_incident_opened") == [], "the 7 good exits never failed the site"
    assert spaced == 0


def test_everything_failing_on_one_site_is_an_incident_not_an_avalanche(clock):
    pool = make_pool(clock=clock)
    worst = 0
    granted = refused = 0
    waits = []
    for step in range(1000):  # 150 s of 403s on every exit, then 100 s of recovery
        clock.advance(0.25)
        failing = step < 600
        try:
            lease = pool.acquire(site=SHOP, timeout=0)
        except Cooling as c:
            refused += 1
            waits.append(c.retry_after)
            if len(waits) == 1:
                assert (
                    str(c) == f"the pool: this site has an open incident, so its leases are spaced out; retry after {c.retry_after:.3f} s"
                )
            continue
        granted += failing
        pool.release(lease, status=403 if failing else 200)
        worst = max(worst, ejected(pool, SHOP))
    (opened,) = events(pool, kind="site_incident_opened")
    assert (opened["site"], opened["exit_id"], opened["from"], opened["to"]) == (SHOP, None, None, None)
    assert opened["message"] == (
        "5 exits are failing this site at once (threshold 5): the site is at fault; no exit is judged "
        "for it and its leases are spaced 1 s apart"
    )
    # Slowed, not stopped: about one lease a second while it lasted.
    assert refused > 0 and 0 < max(waits) <= 1.0
    assert 140 <= granted <= 160, granted
    (closed,) = events(pool, kind="site_incident_closed")
    assert closed["site"] == SHOP and closed["time"] > 150.0
    assert closed["message"] == f"2 exits still failing this site; incident over after {closed['time'] - opened['time']:.1f} s"
    # Nobody was punished for the site's fault: not during it, not when it ended.
    punished = [(e["time"], e["exit_id"], e["message"]) for e in events(pool, site=SHOP) if e["to"] is not None]
    assert worst == 0 and punished == [], punished
    assert served(pool, SHOP, 10) == {f"e{i}": 1 for i in range(10)}
    assert all(pool.state(i, SHOP) == "healthy" for i in ids(pool))


def test_everything_failing_everywhere_ejects_nothing(clock):
    pool = make_pool(clock=clock)
    for step in range(300):
        clock.advance(0.1)
        lease = pool.acquire(site=("a.example", "b.example")[step % 2], timeout=0)
        pool.release(lease, error="connect")
        assert not any(pool.state(i) in OUT for i in ids(pool)), step
    (opened,) = events(pool, kind="global_incident_opened")
    assert (opened["exit_id"], opened["site"]) == (None, None)
    assert opened["message"] == "5 tunnels are failing at once (threshold 5): the fault is ours (network, probes); no tunnel is judged"
    for _ in range(20):
        clock.advance(0.1)
        pool.release(pool.acquire(site="a.example", timeout=0), status=200)
    (closed,) = events(pool, kind="global_incident_closed")
    assert re.fullmatch(r"\d+ tunnels still failing; over after [\d.]+ s", closed["message"]), closed
    # Nobody is punished for our own fault, not even when it ends.
    punished = [(e["time"], e["exit_id"], e["message"]) for e in events(pool) if e["to"] is not None]
    assert punished == [], punished
    assert all(pool.state(i) == "healthy" for i in ids(pool))


# --- the three scenarios of the issue ------------------------------------------------------------


def test_scenario_bad_exit_vs_bad_site(clock):
    """One exit's tunnel fails everywhere; one site blocks every exit. Measured: which (exit,
    site) pairs ever went out, the worst count out at once per site, and the incident."""
    pool = make_pool(clock=clock)
    sites = ["a.example", "b.example", "bad.example"]
    worst = dict.fromkeys(sites, 0)
    spaced = 0
    for step in range(900):
        clock.advance(0.2)
        site = sites[step % 3]
        try:
            lease = pool.acquire(site=site, timeout=0)
        except Cooling:
            assert site == "bad.example"
            spaced += 1
            continue
        if lease.exit_id == "e3":
            pool.release(lease, error="connect")
        else:
            pool.release(lease, status=403 if site == "bad.example" else 200)
        for s in sites:
            worst[s] = max(worst[s], sum(pool.state(i, s) in OUT and i != "e3" for i in ids(pool)))
    went_out = {(e["exit_id"], e["site"]) for e in events(pool) if e["to"] in OUT}
    assert went_out == {("e3", None)}, went_out
    assert pool.state("e3") in OUT
    assert worst == {"a.example": 0, "b.example": 0, "bad.example": 0}
    opened = events(pool, kind="site_incident_opened")
    assert [e["site"] for e in opened] == ["bad.example"]
    assert spaced > 0
    # The good sites keep all nine good exits.
    assert set(served(pool, "a.example", 18)) == {f"e{i}" for i in range(10)} - {"e3"}


def test_scenario_incident_without_avalanche(clock):
    """Every exit starts failing one site for two minutes, then the site recovers. Measured:
    the most exits out at once (cap: 1 of 10), and how soon every exit serves it again."""
    pool = make_pool(clock=clock)
    worst = 0
    recovered_at = None
    seen_after = set()
    for _step in range(2400):
        clock.advance(0.25)
        failing = clock.now() <= 120.0
        try:
            lease = pool.acquire(site=SHOP, timeout=0)
        except Cooling as c:
            assert c.retry_after <= 1.0
            continue
        pool.release(lease, status=403 if failing else 200)
        worst = max(worst, ejected(pool, SHOP))
        if not failing:
            seen_after.add(lease.exit_id)
            if recovered_at is None and len(seen_after) == 10 and ejected(pool, SHOP) == 0:
                recovered_at = clock.now()
    assert worst <= 1, worst
    kinds = [e["kind"] for e in events(pool) if e["kind"].startswith("site_incident")]
    assert kinds == ["site_incident_opened", "site_incident_closed"]
    assert recovered_at is not None, "service never resumed on every exit"
    assert recovered_at - 120.0 <= 300.0, recovered_at
    assert all(pool.state(i, SHOP) == "healthy" for i in ids(pool))


def test_scenario_flapping_exit_does_not_bounce_faster_than_hold_times(clock):
    """e0 alternates success and timeout for 25 minutes; the rest always succeed. Measured: how
    often e0 entered quarantine, how long each lasted, and the shortest gap between two returns."""
    pool = make_pool(4, clock=clock)
    flip = False
    for _ in range(3000):
        clock.advance(0.5)
        try:
            lease = pool.acquire(site=SHOP, timeout=0)
        except (Cooling, NoExitAvailable):
            continue
        if lease.exit_id == "e0":
            flip = not flip
            pool.release(lease, **({"status": 200} if flip else {"error": "timeout"}))
        else:
            pool.release(lease, status=200)
    moves = changes(pool, "e0", SHOP)
    entries = [t for t, _, to, _ in moves if to == "quarantined"]
    stays = [b[0] - a[0] for a, b in zip(moves, moves[1:]) if a[2] == "quarantined"]
    returns = [t for t, _, to, _ in moves if to in ("probing", "healthy")]
    gaps = [b - a for a, b in zip(returns, returns[1:])]
    # It never serves well for long: five quarantines, each return failed, then dead_after (5).
    assert len(entries) == 5, moves
    assert pool.state("e0", SHOP) == "dead"
    # Each quarantine lasts at least 80% of base x 2^(n-1): the backoff grows.
    assert all(stay >= 0.8 * 30.0 * 2**n - 1e-9 for n, stay in enumerate(stays)), stays
    assert min(gaps) >= 24.0, gaps
    # A serving stretch that ends other than by a trip lasts at least min_hold.
    for a, b in zip(moves, moves[1:]):
        if a[2] in ("healthy", "degraded") and b[2] != "quarantined":
            assert b[0] - a[0] >= 10.0, (a, b)
    for other in ("e1", "e2", "e3"):
        assert changes(pool, other) == []


# --- adaptive weights ---------------------------------------------------------------------------


def test_adaptive_weight_is_neutral_until_20_reports_then_follows_success_squared(clock):
    pool = make_pool(4, clock=clock, strategy="weighted")
    # error="other" says nothing about the exit: measuring does not feed the weights.
    assert served(pool, SHOP, 400, error="other") == {f"e{i}": 100 for i in range(4)}
    # e0 fails half its requests, spread over many sites (so no breaker has enough to judge).
    for n in range(19):
        hit(pool, "e0", f"site{n}.example", **({"error": "timeout"} if n % 2 else {"status": 200}))
    assert served(pool, SHOP, 400, error="other") == {f"e{i}": 100 for i in range(4)}
    hit(pool, "e0", "site19.example", error="timeout")  # the 20th report: 10 of 20 failed
    after = served(pool, SHOP, 400, error="other")
    assert pool.state("e0") == "healthy" and changes(pool, "e0") == []  # the weight alone moved
    healthy = [after[f"e{i}"] for i in (1, 2, 3)]
    assert after["e0"] * 3 < min(healthy), after  # success 50% -> weight 25%
    assert 20 <= after["e0"] <= 40, after


def test_adaptive_weight_slows_a_slow_exit(clock):
    pool = make_pool(3, clock=clock, strategy="weighted")
    for _n in range(20):
        hit(pool, "e0", SHOP, status=200, latency=3.0)  # twice the 1.5 s par: half weight
        hit(pool, "e1", SHOP, status=200, latency=0.2)
    got = served(pool, SHOP, 500, error="other")
    assert got["e0"] * 1.5 < got["e1"], got
    assert abs(got["e1"] - got["e2"]) <= 2, got


# --- recalibrate --------------------------------------------------------------------------------


def serve_keys(pool, exit_id, keys, **report):
    view = only(pool, exit_id)
    for n, key in enumerate(keys):
        lease = view.acquire(key, site=f"site{n}.example", timeout=0)
        assert lease.exit_id == exit_id
        pool.release(lease, **report)


def test_recalibrate_sets_capacity_from_identities_served_and_benches_burned_exits(clock):
    pool = make_pool(5, clock=clock, calibrate=True, capacities={"e3": 3})
    keys = [f"k{i}" for i in range(600)]
    before = {k: pool.assign(k).exit_id for k in keys}
    serve_keys(pool, "e0", ["a", "a", "b", "a"])  # two distinct identities
    serve_keys(pool, "e1", [f"acct-{i}" for i in range(9)])  # nine: clamped to 6
    serve_keys(pool, "e2", ["x", "y", "z"], status=403)  # every identity burned
    serve_keys(pool, "e3", ["p"])
    serve_keys(pool, "e3", ["q"], captcha=True)
    serve_keys(pool, "e3", ["r"], status=451)  # 1 safe of 3: down to 1
    for key in ["a", "b", "x", "y", "z", "p", "q", "r"] + [f"acct-{i}" for i in range(9)]:
        pool.end_session(key)
    changed = pool.recalibrate()
    assert changed == [
        {"exit_id": "e0", "old": 1, "new": 2, "served": 2, "safe": 2},
        {"exit_id": "e1", "old": 1, "new": 6, "served": 9, "safe": 9},
        {"exit_id": "e2", "old": 1, "new": 0, "served": 3, "safe": 0},
        {"exit_id": "e3", "old": 3, "new": 1, "served": 3, "safe": 1},
    ]
    assert [pool.exit(i).capacity for i in ("e0", "e1", "e3", "e4")] == [2, 6, 1, 1]
    assert [e.exit_id for e in pool.exits] == ["e0", "e1", "e3", "e4"]
    assert "e2" not in pool
    (row,) = [r for r in pool.snapshot()["exits"] if r["exit_id"] == "e2"]
    assert row["benched"] is True
    assert [(e["kind"], e["exit_id"], e["message"]) for e in events(pool) if e["kind"] in ("recalibrated", "benched")] == [
        ("recalibrated", "e0", "capacity 1 -> 2: 2 of 2 identities served in 24 h without a block or captcha"),
        ("recalibrated", "e1", "capacity 1 -> 6: 9 of 9 identities served in 24 h without a block or captcha"),
        ("benched", "e2", "measured capacity 0: all 3 identities served in 24 h were burned"),
        ("recalibrated", "e3", "capacity 3 -> 1: 1 of 3 identities served in 24 h without a block or captcha"),
    ]
    # Only changed exits' arcs moved: a key that moved left or joined a changed exit.
    after = {k: pool.assign(k).exit_id for k in keys}
    moved = [k for k in keys if before[k] != after[k]]
    assert moved and all({before[k], after[k]} & {"e0", "e1", "e2", "e3"} for k in moved)
    assert all(after[k] != "e2" for k in keys)
    # Nothing new measured: nothing changes. A day later the identities have aged out.
    assert pool.recalibrate() == []
    clock.advance(86_400.5)
    assert pool.recalibrate() == []
    assert [pool.exit(i).capacity for i in ("e0", "e1", "e3")] == [2, 6, 1]


def test_recalibrate_needs_calibrate_true(clock):
    pool = make_pool(2, clock=clock)
    with pytest.raises(InvalidInput) as info:
        pool.recalibrate()
    assert str(info.value) == "recalibrate needs a pool made with calibrate=True"


# --- events -------------------------------------------------------------------------------------


def test_every_state_change_is_an_event_and_since_pages(clock):
    pool = make_pool(clock=clock, health={"jitter": 0})
    hit(pool, "e0", SHOP, n=2, status=403)
    clock.advance(30.0)
    pool.state("e0", SHOP)
    hit(pool, "e0", SHOP, n=8)
    hit(pool, "e5", NEWS, n=5, error="connect")
    pool.revive("e5")
    every = events(pool)
    assert [e["seq"] for e in every] == list(range(len(every)))
    assert [(e["kind"], e["exit_id"], e["site"], e["from"], e["to"], e["time"], e["message"]) for e in every] == [
        (
            "state_changed",
            "e0",
            SHOP,
            "healthy",
            "quarantined",
            0.0,
            "healthy -> quarantined: 6 weighted consecutive failures (threshold 5)",
        ),
        ("state_changed", "e0", SHOP, "quarantined", "probing", 30.0, "quarantined -> probing: quarantine of 30.0 s is over"),
        ("state_changed", "e0", SHOP, "probing", "healthy", 30.0, "probing -> healthy: 8 consecutive successes"),
        ("state_changed", "e5", None, "healthy", "degraded", 30.0, "healthy -> degraded: 2 weighted consecutive failures (threshold 5)"),
        (
            "state_changed",
            "e5",
            None,
            "degraded",
            "quarantined",
            30.0,
            "degraded -> quarantined: 5 weighted consecutive failures (threshold 5)",
        ),
        ("state_changed", "e5", None, "quarantined", "healthy", 30.0, "quarantined -> healthy: revived"),
    ]
    assert events(pool, since=3) == every[3:]
    assert events(pool, since=len(every)) == []
    assert events(pool, since=10**9) == []
    newer = pool.events(since=every[-1]["seq"] + 1)
    hit(pool, "e1", SHOP, n=2, status=403)
    # Its site breaker is as old as the pool, so no hold time: a 403 degrades, a second quarantines.
    assert newer == [] and [(e["exit_id"], e["to"]) for e in events(pool, since=len(every))] == [
        ("e1", "degraded"),
        ("e1", "quarantined"),
    ]


def test_no_proxy_password_in_any_event_or_message(clock):
    pool = make_pool(clock=clock, calibrate=True, lease_ttl=5.0)
    texts = []
    # state changes, refusals, a session lost, an expired lease, incidents, recalibration.
    with pool.lease("acct", site=SHOP) as lease:
        home = lease.exit_id
        lease.report(status=403)
    hit(pool, home, SHOP, status=403)
    hit(pool, "e1" if home != "e1" else "e2", SHOP, n=2, status=403)
    with pytest.raises(SessionExitLost) as info:
        pool.acquire("acct", site=SHOP, timeout=0)
    texts.append(str(info.value))
    pool.acquire(site=NEWS, timeout=0)  # never released: it expires
    clock.advance(6.0)
    for step in range(200):
        clock.advance(0.25)
        try:
            lease = pool.acquire(site="down.example", timeout=0)
        except Cooling as c:
            texts.append(str(c))
            continue
        pool.release(lease, status=403 if step < 120 else 200)
    for _step in range(60):
        clock.advance(0.1)
        pool.release(pool.acquire(site="net.example", timeout=0), error="connect")
    pool.recalibrate()
    kinds = {e["kind"] for e in events(pool)}  # events() checks every one for the password
    assert {
        "state_changed",
        "ejection_refused",
        "session_lost",
        "lease_expired",
        "site_incident_opened",
        "site_incident_closed",
        "global_incident_opened",
        "benched",
    } <= kinds, kinds
    texts += [repr(pool.snapshot()), repr(pool), *(repr(e) for e in events(pool))]
    assert not [t for t in texts if PW in t]
