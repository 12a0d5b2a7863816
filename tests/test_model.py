"""Model-based tests: a hypothesis state machine drives one pool through leases, releases with
every outcome class, late and double releases, benches, adds, removes, capacity changes, ended
sessions and clock advances, and checks it against a small Python model of the documented rules
after every step:

- the model knows every lease (live until released or until ``lease_ttl`` has passed), every
  session (its exit and when it ends), every 429 cooling and the ring of every view, and asks
  the pool only for what it does not model, each exit's health (``pool.state``); from that it
  computes every answer a lease may legally get, and the pool's answer must be one of them;
- never more than ``max_leases`` live leases on an exit;
- a keyed lease while its session lives gets the session's exit or ``SessionExitLost`` naming
  it (never another exit), and ``pool.assign(key)`` is the session's exit;
- counts balance: acquired = released + expired + live, and a late or double release changes
  nothing but the count of ignored releases;
- an ejection for a site (soft evidence) never takes the exits out for that site alone past
  ``max_ejected`` of those in service (one always may go), nor leaves fewer than
  ``min_in_service`` serving it counting those out for their tunnel too; an ejection for the
  tunnel (hard evidence) is not capped. Checked after every step and, inside the ``streak`` and
  ``sweep`` rules (up to 6 leases each), after every release, so an exit that goes out and
  comes back within one step is judged too;
- in panic (too few exits in service, pool-wide or for a site) an exit out of service may serve
  again: the model then allows it either way.

The regression tests at the end are the smallest cases the machine found.
"""

from __future__ import annotations

import bisect
import collections
import functools
import itertools
import math

import pytest
from hypothesis import HealthCheck, Phase, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

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
from exitpool._core import _position


def make_pool(exits, **options):
    """The one place the machine builds its pool: the seam where a shared store plugs in
    (``store="redis://..."``), so that every invariant below runs against each store."""
    return Pool(exits, **options)


PW = "s3cret-pw"
# Few points per exit: the model rebuilds the rings, and the rules do not depend on balance.
REPLICAS = 16
# e* start in the pool, x* can be added; each carries a region tag for the subset views.
IDS = ("e0", "e1", "e2", "e3", "e4", "x0", "x1")
REGION = {"e0": "a", "e1": "b", "e2": "a", "e3": "b", "e4": "a", "x0": "b", "x1": "a"}
KEYS = tuple(f"acct-{i}" for i in range(6))
SITES = (None, "shop.example", "news.example")
# The whole pool and the region subsets. (The streak and sweep rules also lease through
# one-exit subsets, ("id", exit_id), to aim at an exit.)
VIEWS = (None, ("region", "a"), ("region", "b"))
HOLDS_A_CAP_SLOT = ("probing", "quarantined", "dead")
OUT = ("quarantined", "dead")
PANIC_THRESHOLD = 0.5  # the health default
RATE_LIMIT_COOLDOWN = 30.0  # the health default when a 429 has no Retry-After

# (release keyword arguments, the outcome class the health table of docs/health.md gives them).
# Exceptions are named by class and made fresh for each release.
OUTCOMES = (
    ({}, "success"),
    ({"status": 200, "latency": 0.2}, "success"),
    ({"status": 404}, "success"),
    ({"status": 403}, "block"),
    ({"status": 407}, "block"),
    ({"status": 451}, "block"),
    ({"status": 429}, "rate_limited"),
    ({"status": 429, "retry_after": 4.0}, "rate_limited"),
    ({"status": 429, "retry_after": 1e12}, "rate_limited"),  # cools for max_ejection at most
    ({"status": 500}, "target_error"),
    ({"status": 503, "latency": 1.0}, "target_error"),
    ({"status": 200, "captcha": True}, "captcha"),
    ({"status": 999}, "block"),  # a social site's refusal
    ({"status": 0}, "other"),  # statuses HTTP does not define say nothing about the exit
    ({"status": 600}, "other"),
    ({"status": 65535}, "other"),
    ({"error": "timeout"}, "timeout"),
    ({"error": TimeoutError}, "timeout"),
    ({"error": "connect"}, "connect"),
    ({"error": "proxy"}, "connect"),
    ({"error": ConnectionRefusedError}, "connect"),
    ({"error": "other"}, "other"),
)
# What moves an exit through its lifecycle: failures of each kind, site errors, and successes.
HARSH = tuple(o for o in OUTCOMES if o[1] in ("block", "captcha", "timeout", "connect", "target_error")) + OUTCOMES[:2]
CLASSES = ("success", "captcha", "block", "rate_limited", "target_error", "timeout", "connect", "other")

# A twitchy, a fast and a default lifecycle: low thresholds, short backoffs and short holds
# reach every state (probing, failed returns, dead) within a few steps.
HEALTH = (
    {
        "consecutive": 2.0,
        "degrade_at": 1.0,
        "captcha_consecutive": 2,
        "recover_successes": 2,
        "half_open_trials": 1,
        "window": 8,
        "min_calls": 4,
        "base_ejection": 5.0,
        "max_ejection": 20.0,
        "min_hold": 1.0,
        "forgive_after": 30.0,
        "dead_after": 2,
    },
    {"base_ejection": 5.0, "max_ejection": 20.0, "min_hold": 2.0, "forgive_after": 30.0, "dead_after": 2},
    {},
)


def make_exit(exit_id, capacity):
    return Exit(
        exit_id,
        f"http://user:{PW}@gw.example:{8000 + IDS.index(exit_id)}",
        capacity=capacity,
        tags={"region": REGION[exit_id], "id": exit_id},
    )


def in_view(exit_id, view):
    return view is None or (REGION[exit_id] if view[0] == "region" else exit_id) == view[1]


@functools.lru_cache(maxsize=512)
def ring_points(members):
    """The ring of ``members`` ((exit_id, capacity), ...) as the design defines it: sorted
    positions and their owners."""
    points = sorted(
        (_position(f"vnode:{exit_id}:{v}"), exit_id) for exit_id, capacity in members for v in range(max(1, capacity) * REPLICAS)
    )
    # The model's ring must be the pool's: every walk starts at exitpool.Ring's owner.
    ring = Ring([make_exit(e, c) for e, c in members], replicas=REPLICAS) if members else None
    return [p for p, _ in points], [o for _, o in points], ring


def ring_walk(members, key):
    """Each distinct exit once, clockwise from the first point strictly after the key's."""
    positions, owners, ring = ring_points(members)
    if not positions:
        return []
    start = bisect.bisect_right(positions, _position(key))
    order = []
    for k in range(len(owners)):
        owner = owners[(start + k) % len(owners)]
        if owner not in order:
            order.append(owner)
            if len(order) == len(members):
                break
    assert order[0] == ring.assign(key).exit_id, (members, key)
    return order


class LeaseRec:
    def __init__(self, lease, exit_id, site, expires):
        self.lease = lease
        self.exit_id = exit_id
        self.site = site
        self.expires = expires
        self.state = "live"  # live, released, expired
        self.handed_back = False  # pool.release was called on it


class PoolModel(RuleBasedStateMachine):
    """The pool against the model of the manual's rules."""

    # The pool's state: its own (None), or a shared store (a URL) that it then decides through.
    store: str | None = None
    # Whether the clock may move. A Redis store keeps the server's time, which a manual clock
    # cannot move, so on Redis the machine runs without TTLs passing.
    advances = True
    _namespaces = itertools.count()

    def store_options(self):
        if self.store is None:
            return {}
        return {"store": self.store, "namespace": f"model-{next(self._namespaces)}"}

    @initialize(
        n=st.integers(2, 5),
        capacities=st.lists(st.integers(1, 3), min_size=len(IDS), max_size=len(IDS)),
        max_leases=st.integers(1, 3),
        strategy=st.sampled_from(["weighted", "round_robin", "least_conn", "p2c"]),
        seed=st.integers(0, 2**32 - 1),
        lease_ttl=st.sampled_from([4.0, 20.0]),
        session_ttl=st.sampled_from([10.0, 60.0]),
        max_ejected=st.sampled_from([0.1, 0.34, 0.5, 1.0]),
        min_in_service=st.sampled_from([1, 2]),
        health=st.sampled_from(HEALTH),
    )
    def build(self, n, capacities, max_leases, strategy, seed, lease_ttl, session_ttl, max_ejected, min_in_service, health):
        self.clock = ManualClock()
        self.capacity = dict(zip(IDS, capacities))
        self.max_leases = max_leases
        self.max_ejection = health.get("max_ejection", 600.0)
        self.strategy = strategy
        self.lease_ttl = lease_ttl
        self.session_ttl = session_ttl
        self.max_ejected = max_ejected
        self.min_in_service = min_in_service
        self.pool = make_pool(
            [make_exit(i, self.capacity[i]) for i in IDS[:n]],
            clock=self.clock,
            seed=seed,
            strategy=strategy,
            replicas=REPLICAS,
            max_leases=max_leases,
            lease_ttl=lease_ttl,
            session_ttl=session_ttl,
            health=dict(health, max_ejected=max_ejected, min_in_service=min_in_service),
            **self.store_options(),
        )
        self.views = {None: self.pool}
        self.present = {i: False for i in IDS[:n]}  # exit id -> benched
        self.leases = []
        self.sessions = {}  # key -> (exit id, expires)
        self.cool = {}  # (exit id, site) -> until
        self.counts = collections.Counter()
        self.outcomes = collections.Counter()
        self.held = {}  # "tunnel" or a site -> exits holding a cap slot at the last check

    # --- the model ------------------------------------------------------------------------

    def tick(self):
        """Now; leases whose lease_ttl has passed have expired."""
        now = self.clock.now()
        for rec in self.leases:
            if rec.state == "live" and rec.expires <= now:
                rec.state = "expired"
                self.counts["expired"] += 1
        return now

    def live_on(self, exit_id):
        return sum(rec.state == "live" and rec.exit_id == exit_id for rec in self.leases)

    def session(self, key, now):
        s = self.sessions.get(key)
        return s if s is not None and s[1] > now else None

    def members(self, view):
        """The exits in service in a view, with their capacities (the view's ring)."""
        return tuple((i, self.capacity[i]) for i in IDS if i in self.present and not self.present[i] and in_view(i, view))

    def panics(self, site):
        """Whether the pool may be in panic for ``site`` (its exits out for their tunnel or for
        the site serve again): the pool's panic or the site's, as the snapshot says; for unscoped
        leases, whose panic no snapshot shows, whenever the core's count may reach it (each exit
        out for its tunnel, plus each out for unscoped leases, possibly the same)."""
        snap = self.pool.snapshot()
        if snap["pool"]["panic"]:
            return True
        if site is not None:
            return any(s["site"] == site and s["panic"] for s in snap["sites"])
        members = sum(not benched for benched in self.present.values())
        tunnel_out = sum(r["state"] in OUT for r in snap["exits"])
        unscoped_out = sum(self.pool.state(r["exit_id"]) in HOLDS_A_CAP_SLOT for r in snap["exits"])
        return members > 0 and members - (tunnel_out + unscoped_out) < PANIC_THRESHOLD * members

    def admits(self, exit_id, site, now, panic=False):
        """What the exit's health and 429 cooling may answer a lease for ``site``: "yes",
        "cooling", "lost" (quarantined or dead) or "no" (probing with every trial out). A
        probing exit may answer either, depending on its trials, which the model leaves open;
        so may an exit out of service in ``panic``."""
        state = self.pool.state(exit_id, site)
        served = "cooling" if self.cool.get((exit_id, site), -math.inf) > now else "yes"
        if state in OUT:
            return ("lost", "no", served) if panic else ("lost",)
        # The state shows the cooling the model expects, and hides which breaker state is under it.
        assert (state == "cooling") == (served == "cooling"), (exit_id, site, state, served)
        if state in ("healthy", "degraded"):
            return (served,)
        if state == "cooling":
            return ("no", served)
        assert state == "probing", state
        return ("no", served)

    def decide(self, key, view, members, a, now, leasing):
        """The answers the rules give a lease when each exit answers as in ``a``. ``assign``
        (``leasing=False``) leases nothing, so a full exit does not stop it."""
        full = lambda e: leasing and self.live_on(e) >= self.max_leases  # noqa: E731
        cooling_or_none = {("Cooling",)} if any(a[e] == "cooling" for e, _ in members) else {("NoExitAvailable",)}
        session = self.session(key, now) if key is not None else None
        if session is not None:
            home = session[0]
            if home not in self.present or not in_view(home, view) or a[home] == "lost":
                return {("SessionExitLost", home)}
            # Health first (probing with its trials out, or cooling after a 429), then the ceiling.
            if a[home] == "no":
                return {("NoExitAvailable",)}
            if a[home] == "cooling":
                return {("Cooling",)}
            return {("NoExitAvailable",)} if full(home) else {("ok", home, "session")}
        if not members:
            return {("NoExitAvailable",)}
        if key is not None:
            walk = ring_walk(members, key)
            home = next((e for e in walk if a[e] == "yes"), None)
            if home is None:
                return cooling_or_none
            if full(home):
                return {("NoExitAvailable",)}
            return {("ok", home, "ring" if home == walk[0] else "ring_next")}
        eligible = {("ok", e, self.strategy) for e, _ in members if a[e] == "yes" and not full(e)}
        return eligible or cooling_or_none

    def predict(self, key, view, site, now, leasing=True):
        members = self.members(view)
        asked = {e for e, _ in members}
        session = self.session(key, now) if key is not None else None
        if session is not None and session[0] in self.present:
            asked.add(session[0])
        asked = sorted(asked)
        panic = self.panics(site)
        answers = [self.admits(e, site, now, panic) for e in asked]
        legal = set()
        # During a site incident the site's leases are spaced out: any of them may be told to cool.
        if site is not None and site in {s["site"] for s in self.pool.snapshot()["sites"] if s["incident"]}:
            legal.add(("Cooling",))
        for combo in itertools.product(*answers):
            legal |= self.decide(key, view, members, dict(zip(asked, combo)), now, leasing)
        return legal

    # --- rules ----------------------------------------------------------------------------

    def view_pool(self, view):
        if view not in self.views:
            self.views[view] = self.pool.subset(**{view[0]: view[1]})
        return self.views[view]

    def lease(self, key, site, view):
        """One ``acquire(timeout=0)``, checked against every answer the rules allow."""
        now = self.tick()
        legal = self.predict(key, view, site, now)
        try:
            lease = self.view_pool(view).acquire(key, site=site, timeout=0)
        except SessionExitLost as e:
            assert PW not in str(e)
            assert e.key == key
            got = ("SessionExitLost", e.exit_id)
        except (NoExitAvailable, Cooling) as e:
            assert PW not in str(e)
            got = (type(e).__name__,)
        else:
            got = ("ok", lease.exit_id, lease.strategy)
            assert (lease.key, lease.site, lease.active) == (key, site, True)
        event(f"acquire -> {got[0]}{'/' + got[2] if got[0] == 'ok' else ''}")
        assert got in legal, f"{key=} {site=} {view=}: the pool answered {got}, the rules allow {sorted(legal)}"
        if got[0] != "ok":
            return None
        rec = LeaseRec(lease, lease.exit_id, site, now + self.lease_ttl)
        self.leases.append(rec)
        self.counts["acquired"] += 1
        if key is not None:
            bound = self.sessions.get(key)
            # With a store, a session is renewed only once 1/64 of its TTL has passed since
            # the last renewal (exitpool's RENEW_SLACK): between renewals it keeps its expiry.
            fresh = bound is not None and bound[1] > now and bound[1] - now > self.session_ttl * (1 - 1 / 64)
            if not (self.store is not None and fresh):
                self.sessions[key] = (lease.exit_id, now + self.session_ttl)
        return rec

    def hand_back(self, rec, outcome, via_report):
        """``pool.release`` (after ``lease.report`` when ``via_report``): True exactly for a
        live lease released for the first time."""
        now = self.tick()
        # Live until released or past lease_ttl by the pool's clock (its slot may be reused).
        assert rec.lease.active is (rec.state == "live"), (rec.state, rec.lease)
        kwargs, outcome_class = outcome
        kwargs = {k: v() if isinstance(v, type) else v for k, v in kwargs.items()}
        if via_report:
            rec.lease.report(**kwargs)
            released = self.pool.release(rec.lease)
        else:
            released = self.pool.release(rec.lease, **kwargs)
        assert rec.lease.active is False
        if rec.state == "live" and not rec.handed_back:
            assert released is True
            rec.state = "released"
            self.counts["released"] += 1
            self.outcomes[outcome_class] += 1
            if outcome_class == "rate_limited":
                self.cool[(rec.exit_id, rec.site)] = now + min(kwargs.get("retry_after", RATE_LIMIT_COOLDOWN), self.max_ejection)
        else:
            assert released is False, f"a {'double' if rec.handed_back else 'late'} release was accepted"
            self.counts["ignored"] += 1
        rec.handed_back = True

    @rule(key=st.sampled_from((None,) + KEYS), site=st.sampled_from(SITES), view=st.sampled_from(VIEWS))
    def acquire(self, key, site, view):
        self.lease(key, site, view)

    @precondition(lambda self: self.leases)
    @rule(pick=st.integers(0, 10**6), outcome=st.sampled_from(OUTCOMES), via_report=st.booleans())
    def release(self, pick, outcome, via_report):
        """Releases any lease ever taken: live, already released (double) or expired (late)."""
        # Recent leases are likelier to be live: pick mostly among the last few.
        recent = self.leases[-min(len(self.leases), 8) :]
        rec = recent[pick % len(recent)] if pick % 4 else self.leases[pick % len(self.leases)]
        self.hand_back(rec, outcome, via_report)

    @rule(
        exit_id=st.sampled_from(IDS),
        key=st.sampled_from((None,) + KEYS),
        site=st.sampled_from(SITES),
        outcome=st.sampled_from(HARSH),
        n=st.integers(1, 6),
        step=st.sampled_from([0.0, 0.5, 3.0]),
    )
    def streak(self, exit_id, key, site, outcome, n, step):
        """``n`` leases through one exit (its one-exit subset), each released with the same
        outcome: what moves an exit through its lifecycle."""
        for _ in range(n):
            rec = self.lease(key, site, ("id", exit_id))
            if rec is not None:
                self.hand_back(rec, outcome, via_report=False)
            self.check_caps("streak")
            if self.advances:
                self.clock.advance(step)

    @rule(site=st.sampled_from(SITES), outcome=st.sampled_from(HARSH))
    def sweep(self, site, outcome):
        """One lease through every exit in service for one site, all with the same outcome: a
        bad site (or a bad network), which incidents and the ejection cap are about."""
        for exit_id, _ in self.members(None):
            rec = self.lease(None, site, ("id", exit_id))
            if rec is not None:
                self.hand_back(rec, outcome, via_report=False)
            self.check_caps("sweep")

    @precondition(lambda self: self.advances)
    @rule(dt=st.sampled_from([0.5, 1.0, 2.5, 4.0, 10.0, 30.0, 75.0]))
    def advance(self, dt):
        self.clock.advance(dt)
        self.tick()

    @rule(exit_id=st.sampled_from(IDS))
    def bench(self, exit_id):
        now = self.tick()
        if exit_id not in self.present:
            self.expect_unknown(self.pool.bench, exit_id)
            return
        keys = self.pool.bench(exit_id)
        assert keys == sorted(k for k, s in self.sessions.items() if s[0] == exit_id and s[1] > now)
        self.present[exit_id] = True

    @rule(exit_id=st.sampled_from(IDS))
    def unbench(self, exit_id):
        if exit_id not in self.present:
            self.expect_unknown(self.pool.unbench, exit_id)
            return
        self.pool.unbench(exit_id)
        self.present[exit_id] = False

    @rule(exit_id=st.sampled_from(IDS), capacity=st.integers(1, 3))
    def add(self, exit_id, capacity):
        exit = make_exit(exit_id, capacity)
        if exit_id in self.present:
            try:
                self.pool.add(exit)
            except InvalidInput as e:
                assert PW not in str(e)
            else:
                raise AssertionError(f"a second {exit_id} was added")
            return
        self.pool.add(exit)
        self.present[exit_id] = False
        self.capacity[exit_id] = capacity

    @rule(exit_id=st.sampled_from(IDS))
    def remove(self, exit_id):
        if exit_id not in self.present:
            self.expect_unknown(self.pool.remove, exit_id)
            return
        assert self.pool.remove(exit_id).exit_id == exit_id
        del self.present[exit_id]

    @rule(exit_id=st.sampled_from(IDS), capacity=st.integers(1, 3))
    def set_capacity(self, exit_id, capacity):
        if exit_id not in self.present:
            self.expect_unknown(self.pool.set_capacity, exit_id, capacity)
            return
        self.pool.set_capacity(exit_id, capacity)
        self.capacity[exit_id] = capacity

    @rule(key=st.sampled_from(KEYS))
    def end_session(self, key):
        now = self.tick()
        had = self.session(key, now) is not None
        assert self.pool.end_session(key) is had, f"end_session({key!r}) with {'a' if had else 'no'} live session"
        self.sessions.pop(key, None)

    @rule(key=st.sampled_from(KEYS))
    def assign(self, key):
        """Where a key lives: its live session's exit, else the ring's pick for unscoped leases
        (which leases nothing, so a full exit does not stop it)."""
        now = self.tick()
        session = self.session(key, now)
        if session is not None:
            legal = {("ok", session[0])}  # even if that exit can no longer serve it
        else:
            legal = {answer[:2] for answer in self.predict(key, None, None, now, leasing=False)}
        try:
            got = ("ok", self.pool.assign(key).exit_id)
        except (NoExitAvailable, Cooling) as e:
            assert PW not in str(e)
            got = (type(e).__name__,)
        assert got in legal, f"assign({key!r}) answered {got}, the rules allow {sorted(legal)}"

    @rule(exit_id=st.sampled_from(IDS))
    def revive(self, exit_id):
        if exit_id not in self.present:
            self.expect_unknown(self.pool.revive, exit_id)
            return
        self.pool.revive(exit_id)
        now = self.clock.now()
        # Healthy everywhere; a 429's rest is no breaker state, and revive leaves it to run out.
        expected = ["cooling" if self.cool.get((exit_id, site), -math.inf) > now else "healthy" for site in SITES]
        assert [self.pool.state(exit_id, site) for site in SITES] == expected

    def expect_unknown(self, method, *args):
        try:
            method(*args)
        except UnknownExit as e:
            assert PW not in str(e)
        else:
            raise AssertionError(f"{method.__name__}{args} on an exit the pool does not hold")

    # --- invariants -----------------------------------------------------------------------

    @invariant()
    def agrees_with_the_model(self):
        now = self.tick()
        snap = self.pool.snapshot()
        assert snap["time"] == now
        rows = {r["exit_id"]: r for r in snap["exits"]}
        assert set(rows) == set(self.present)
        live_sessions = {k: s for k, s in self.sessions.items() if s[1] > now}
        for exit_id, row in rows.items():
            assert row["active_leases"] == self.live_on(exit_id) <= self.max_leases, (exit_id, row["active_leases"])
            assert row["sessions"] == sum(s[0] == exit_id for s in live_sessions.values()), exit_id
            assert (row["benched"], row["capacity"]) == (self.present[exit_id], self.capacity[exit_id])
        in_service = [i for i, benched in self.present.items() if not benched]
        assert snap["pool"]["in_service"] == len(in_service)
        assert sorted(e.exit_id for e in self.pool.exits) == sorted(in_service)

        c = snap["counts"]
        live = sum(rec.state == "live" for rec in self.leases)
        assert snap["live_leases"] == live
        assert c["acquired"] == c["released"] + c["expired"] + live
        assert (c["acquired"], c["released"], c["expired"], c["ignored_releases"]) == (
            self.counts["acquired"],
            self.counts["released"],
            self.counts["expired"],
            self.counts["ignored"],
        )
        assert c["outcomes"] == {k: self.outcomes[k] for k in CLASSES}
        assert snap["sessions"] == len(live_sessions)

        # While a session lives, the key lives on its exit. (Only live sessions are asked:
        # asking about an expired one would let the pool drop it, which a rule may look at.)
        for key, (exit_id, _) in live_sessions.items():
            assert self.pool.assign(key).exit_id == exit_id, key

        # Health, for the ejection cap and for the statistics (--hypothesis-show-statistics).
        for scope, states in self.check_caps("the step", rows).items():
            for state in set(states.values()):
                event(f"{scope}: an exit {state}")
        if any(s["incident"] for s in snap["sites"]):
            event("a site incident")
        if snap["pool"]["global_incident"]:
            event("a global incident")

    def check_caps(self, where, rows=None):
        """Checks the ejection cap of every site (soft evidence: the tunnel's ejections are
        hard evidence, not capped); returns each scope's states (the tunnel's, and each site's
        as ``pool.state`` gives them, the worse of the tunnel's and the site's own)."""
        if rows is None:
            rows = {r["exit_id"]: r for r in self.pool.snapshot()["exits"]}
        in_service = sum(not benched for benched in self.present.values())
        tunnel = {i: r["state"] for i, r in rows.items()}
        scopes = {"tunnel": tunnel}
        scopes.update({site: {i: self.pool.state(i, site) for i in rows} for site in SITES})
        for scope, states in scopes.items():
            if scope == "tunnel":
                continue
            held = {i for i, s in states.items() if s in HOLDS_A_CAP_SLOT}
            # Out for the site and not for the tunnel: out on the site's own (soft) verdict.
            soft = {i for i in held if tunnel[i] not in HOLDS_A_CAP_SLOT}
            self.check_ejection_cap(scope, soft, held, in_service, where)
        return scopes

    def check_ejection_cap(self, scope, soft, held, in_service, where):
        """An exit newly out on the site's own verdict (``soft``) was allowed out: within
        max_ejected of the exits in service (one always may go) and leaving min_in_service
        serving the site, counting every exit out for it (``held``). Exits coming back, benched
        or removed change nothing here."""
        # Newly out: out now on the site's verdict and not out at all before. An exit that was
        # already out (its tunnel too) and stays out holds the cap slot it had: its site breaker
        # may have been out all along behind its tunnel's state (`pool.state` shows the worse of
        # the two), and a failed trial sends a half-open breaker back without a new ejection.
        before = self.held.get(scope, set())
        self.held[scope] = held
        if soft - before:
            if where != "the step":
                event(f"an ejection checked within {where}")
            cap = max(1, math.floor(self.max_ejected * in_service))
            assert len(soft) <= cap, f"after {where}, {scope}: {sorted(soft)} out at once; the cap is {cap} of {in_service} in service"
            assert in_service - len(held) >= self.min_in_service, (
                f"after {where}, {scope}: {sorted(held)} out leaves fewer than {self.min_in_service} of {in_service} serving"
            )


PoolModel.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    # Explaining a failure replays it hundreds of times; the shrunk steps say enough.
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
)
TestPoolModel = PoolModel.TestCase


class MemoryStoreModel(PoolModel):
    """The same rules through the store seam: a memory store on the pool's manual clock."""

    store = "memory://model"


class RedisStoreModel(PoolModel):
    """The same rules through a real redis-server (started once for this module)."""

    advances = False

    @property
    def store(self):
        return _redis_url()


@functools.cache
def _redis_url() -> str:
    import atexit
    import tempfile
    from pathlib import Path

    from redis_server import RedisServer

    server = RedisServer(Path(tempfile.mkdtemp(prefix="exitpool-model-"))).start()
    atexit.register(server.stop)
    return server.url


MemoryStoreModel.TestCase.settings = PoolModel.TestCase.settings
RedisStoreModel.TestCase.settings = settings(PoolModel.TestCase.settings, max_examples=60)
TestMemoryStoreModel = MemoryStoreModel.TestCase
TestRedisStoreModel = RedisStoreModel.TestCase


# --- the smallest cases the machine found ---------------------------------------------------


def two_exits(clock, **options):
    return make_pool([make_exit("e0", 1), make_exit("e1", 1)], clock=clock, seed=1, **options)


def test_a_double_release_is_counted_as_ignored():
    pool = two_exits(ManualClock())
    lease = pool.acquire("k", timeout=0)
    assert pool.release(lease) is True
    assert pool.release(lease, status=403) is False
    c = pool.snapshot()["counts"]
    assert (c["acquired"], c["released"], c["ignored_releases"]) == (1, 1, 1)
    assert c["outcomes"]["block"] == 0


def test_end_session_says_there_was_no_session_once_it_expired():
    clock = ManualClock()
    pool = two_exits(clock, session_ttl=10.0)
    pool.release(pool.acquire("k", timeout=0))
    clock.advance(10.0)
    assert pool.snapshot()["sessions"] == 0
    assert pool.end_session("k") is False


def test_an_exit_out_for_its_tunnel_leaves_a_site_its_exits_out_for_it():
    """Two exits: e1 goes out for the shop (one may, and e0 serves it), then e0's tunnel fails
    (hard evidence: out whatever the cap and the minimum say). The shop then has none of its
    exits serving: it panics, and e1, out only for the shop, serves it again."""
    pool = two_exits(ManualClock())
    for exit_id, n, report in (("e1", 2, {"status": 403}), ("e0", 5, {"error": "connect"})):
        only = pool.subset(id=exit_id)
        for _ in range(n):
            pool.release(only.acquire(site="shop.example" if exit_id == "e1" else "news.example", timeout=0), **report)
    states = {i: pool.state(i, "shop.example") for i in ("e0", "e1")}
    assert states == {"e0": "quarantined", "e1": "quarantined"}
    snap = pool.snapshot()
    assert not snap["pool"]["panic"]  # one of two exits out for its tunnel: half still in service
    assert [s["panic"] for s in snap["sites"] if s["site"] == "shop.example"] == [True]
    assert pool.acquire(site="shop.example", timeout=0).exit_id == "e1"


def test_an_exit_out_for_unscoped_leases_says_so():
    """Two 403s on unscoped leases take the exit out for them: then pool.state(exit_id) (the
    state for site=None) must not call it healthy, and no event names a site nobody used."""
    pool = two_exits(ManualClock())
    home = pool.acquire("k", timeout=0)
    pool.release(home, status=403)
    pool.release(pool.acquire("k", timeout=0), status=403)
    try:
        lease = pool.acquire("k", timeout=0)
    except SessionExitLost as e:
        assert pool.state(home.exit_id) in OUT, f"{e} while pool.state says {pool.state(home.exit_id)!r}"
    else:
        assert lease.exit_id == home.exit_id
    assert [e for e in pool.events() if e["site"] == ""] == []


def test_a_late_trial_of_an_earlier_half_open_period_frees_no_trial_slot():
    """half_open_trials=2: a trial lease out when its half-open period ended (here by the other
    trial failing) that comes back during the next period must not let a third trial out."""
    clock = ManualClock()
    pool = make_pool([make_exit(i, 1) for i in IDS[:4]], clock=clock, seed=1, health={"jitter": 0.0, "half_open_trials": 2})
    only = pool.subset(id="e0")
    for _ in range(2):
        pool.release(only.acquire(site="shop.example", timeout=0), status=403)
    clock.advance(30.0)
    assert pool.state("e0", "shop.example") == "probing"
    first, late = (only.acquire(site="shop.example", timeout=0) for _ in range(2))
    pool.release(first, status=403)  # a failed trial: quarantined again, for 60 s
    clock.advance(60.0)
    assert pool.state("e0", "shop.example") == "probing"
    trials = [only.acquire(site="shop.example", timeout=0) for _ in range(2)]
    assert pool.release(late) is True  # the earlier period's trial, back late
    with pytest.raises(NoExitAvailable):
        trials.append(only.acquire(site="shop.example", timeout=0))
