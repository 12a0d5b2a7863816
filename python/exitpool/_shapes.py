"""The shape of what ``Pool.snapshot()``, ``Pool.events()`` and ``Pool.recalibrate()`` return:
the one Python definition of it.

The stub (``_core.pyi``) re-exports these for type checkers; the report's ``check()`` reads
them at run time; ``tests/test_shapes.py`` checks them key for key against what the core
really returns, so neither side can gain or lose a key unnoticed. Plain typing, no import of
the native module.
"""

from __future__ import annotations

from typing import Any, Dict, List, Literal, Optional, TypedDict

__all__ = [
    "Counts",
    "Event",
    "ExitSnapshot",
    "FleetExit",
    "GatewaySnapshot",
    "HalfOpen",
    "HealthState",
    "Latency",
    "Matrix",
    "OutcomeCounts",
    "OutcomeName",
    "PoolFigures",
    "Recalibration",
    "SiteSnapshot",
    "SiteState",
    "Snapshot",
    "StoreSnapshot",
    "TagGroup",
    "UpdateSummary",
    "Waits",
]

#: The outcome classes (the core's ``OUTCOMES``; ``_core._OUTCOMES`` at run time).
OutcomeName = Literal["success", "captcha", "block", "rate_limited", "target_error", "timeout", "connect", "other"]


class OutcomeCounts(TypedDict):
    success: int
    captcha: int
    block: int
    rate_limited: int
    target_error: int
    timeout: int
    connect: int
    other: int


class Latency(TypedDict):
    """Quantiles in seconds from a log-linear histogram: within 9.051% of the true value
    between 1 ms and 64 s; ``None`` before the first reported latency."""

    p50: Optional[float]
    p95: Optional[float]
    p99: Optional[float]
    count: int


#: The health states, best first (the core's ``State::ALL``; ``_core._STATES`` at run time).
HealthState = Literal["healthy", "degraded", "probing", "quarantined", "dead"]
#: A state for one site: a health state, or ``"cooling"`` while a 429 rests the exit there.
SiteState = Literal["healthy", "degraded", "probing", "quarantined", "dead", "cooling"]


class ExitSnapshot(TypedDict):
    exit_id: str
    proxy: str
    """Masked: the password is ``[secure]``."""
    ip: Optional[str]
    capacity: int
    tags: Dict[str, str]
    state: HealthState
    """The tunnel's state, which holds for every site."""
    state_since: float
    time_in_state: float
    quarantines: int
    quarantined_seconds: float
    benched: bool
    active_leases: int
    sessions: int
    leases: int
    outcomes: OutcomeCounts
    success_rate: Optional[float]
    """Over the last 64 reports; a 5xx or 429 is not a success."""
    captcha_rate: Optional[float]
    latency: Latency
    weight: float
    """The share of its capacity the exit gets now (health x adaptive weight)."""
    gateway: Optional[str]
    """The gateway a slot belongs to; ``None`` for a plain exit (and so the next three)."""
    generation: Optional[int]
    """A slot's token generation (its ``proxy`` carries that token, password masked)."""
    rotates_at: Optional[float]
    """When the slot moves to its next token (pool clock, as ``time``); ``None`` if never."""
    learned_ip: Optional[str]
    """The IP a probe saw through the slot's current token, if one has."""


class SiteSnapshot(TypedDict):
    site: str
    incident: bool
    panic: bool
    """Too few exits serve this site (those out for it included): its exits out for it serve
    it again (see docs/health.md)."""
    outcomes: OutcomeCounts


class Matrix(TypedDict):
    """The exit x site matrix: ``cells[i][j]`` is exit ``exits[i]`` on site ``sites[j]``, a list
    in ``columns`` order (state, reports, success_rate, captcha_rate, p50, p95, p99,
    quarantines) or ``None`` where the exit has not served the site. A cell's state is a
    :data:`SiteState`: ``"cooling"`` while a 429 rests the exit for that site."""

    exits: List[str]
    sites: List[str]
    columns: List[str]
    cells: List[List[Optional[List[Any]]]]


class HalfOpen(TypedDict):
    trials: int
    """Trial leases handed to half-open (probing) exits."""
    succeeded: int
    """Trial leases that came back a success."""
    success_rate: Optional[float]


class Waits(TypedDict):
    p50: float
    p99: float


class PoolFigures(TypedDict):
    exits: int
    """Every exit in the pool, however few the snapshot lists."""
    in_service: int
    benched: int
    states: Dict[str, int]
    throughput: float
    """Leases per second over the last one to two minutes."""
    gini: float
    """Of leases over the exits in service: 0 is perfectly even."""
    ejected_fraction: float
    half_open: HalfOpen
    wait: Waits
    """Seconds waited for an exit, leases that went at once counting as 0."""
    incidents: List[str]
    global_incident: bool
    panic: bool
    """Fewer than ``panic_threshold`` of the exits are in service: every exit serves (see
    docs/health.md)."""
    sessions: int
    live_leases: int


class Counts(TypedDict):
    acquired: int
    released: int
    expired: int
    ignored_releases: int
    waits: int
    evicted_sessions: int
    """Idle sessions ended early to keep ``max_sessions``."""
    evicted_pairings: int
    """Warm-up pairings forgotten early to keep ``max_pairings``."""
    outcomes: OutcomeCounts


class FleetExit(TypedDict):
    active: int
    """Leases live now in every process."""
    leases: int
    outcomes: OutcomeCounts


class StoreSnapshot(TypedDict):
    url: str
    """Credentials shown as ``[secure]``."""
    online: bool
    """False while the store does not answer (the pool serves from its own state)."""
    exits: Dict[str, FleetExit]
    """Fleet-wide figures by exit id (empty while the store does not answer)."""


class TagGroup(TypedDict):
    """The figures of every exit with one value of the ``by_tag`` tag."""

    exits: int
    states: Dict[str, int]
    benched: int
    active_leases: int
    sessions: int
    leases: int
    outcomes: OutcomeCounts


class GatewaySnapshot(TypedDict):
    """One gateway: what it is (never its templates, which may hold the password), its own
    breaker (one for all its slots), and its slots summed."""

    gateway_id: str
    proxy: str
    """Masked: the password is ``[secure]``."""
    preset: Optional[str]
    slots: int
    """Its slots in the pool (one removed is not counted)."""
    lifetime: Optional[float]
    """Seconds the provider holds a token's IP; ``None`` for tokens that never expire."""
    margin: float
    capacity: int
    tags: Dict[str, str]
    state: HealthState
    """The gateway's breaker: ``healthy``, ``quarantined`` (every slot out) or ``probing``."""
    cause: Optional[str]
    """Why it is out: ``"connect"`` or ``"credentials"`` (a 407); ``None`` while healthy."""
    state_since: float
    until: Optional[float]
    """While quarantined: when a trial lease may go."""
    trial_out: bool
    """While probing: its one trial lease is out (the other slots wait for its verdict)."""
    outages: int
    credential_rejections: int
    """Answers 407 from the gateway (wrong credentials: configuration, not a bad slot)."""
    absorbed: int
    """Slot failures charged to the gateway instead of the slot."""
    out_seconds: float
    """Seconds out of service so far, an outage still running included."""
    failing: int
    """Distinct slots failing to connect now, with no success since."""
    rotations: int
    """Token rotations of its slots so far."""
    next_rotation: Optional[float]
    """The soonest rotation of any slot (pool clock); ``None`` if tokens never expire."""
    slot_states: Dict[str, int]
    """Its slots by their own breakers' state (while the gateway is out, none serves)."""
    benched: int
    active_leases: int
    sessions: int
    leases: int


class Snapshot(TypedDict):
    """What ``Pool.snapshot()`` returns. Its arguments choose which exits ``exits``, the
    matrix's rows and ``store["exits"]`` list; ``pool``, ``counts``, ``sites``, ``groups`` and
    ``gateways`` always cover every exit."""

    version: int
    time: float
    pool: PoolFigures
    counts: Counts
    exits: List[ExitSnapshot]
    """The listed exits, in pool order (all of them by default)."""
    sites: List[SiteSnapshot]
    matrix: Matrix
    sessions: int
    live_leases: int
    store: Optional[StoreSnapshot]
    """None for a pool of its own."""
    groups: Optional[Dict[str, TagGroup]]
    """With ``by_tag=``: every exit's figures summed by its value of that tag (``""`` for
    exits without it); else None."""
    gateways: List[GatewaySnapshot]
    """Every gateway, in the order given to the pool, whichever exits are listed."""
    pacing: List[PacedPair]
    """The listed exits' paced (exit, site) pairs, by site then exit; empty without ``pacing=``."""


class PacedPair(TypedDict):
    """One paced (exit, site) pair that has been leased or has learned something (see
    docs/pacing.md)."""

    exit_id: str
    site: str
    configured: str
    """The site's configured rate as written, e.g. ``"6/s"``: the ceiling learning climbs to."""
    ceiling: float
    """The configured rate in requests per second."""
    rate: float
    """The learned rate in requests per second: halved by a 429, raised by successes."""
    floor: float
    """The lowest rate learning goes to (the ceiling / 32)."""
    tokens: int
    """Requests that fit now, at once."""
    next_free: float
    """Seconds until the next request fits (0: now)."""


#: One item of ``Pool.events()`` (and of what ``Pool.on_event`` callbacks get). Written the
#: functional way because one of its keys, ``from``, is a Python keyword.
Event = TypedDict(
    "Event",
    {
        "seq": int,
        "time": float,
        # state_changed, ejection_refused, site_incident_opened, site_incident_closed,
        # global_incident_opened, global_incident_closed, session_lost, lease_expired,
        # warming_up, benched, unbenched, recalibrated, exit_drifted, probe_failed,
        # store_unavailable, store_rejoined, sessions_evicted, pairings_evicted, gateway_down,
        # gateway_up, gateway_credentials_rejected, token_rotated, sticky_broken, panic, exits_updated,
        # exits_reload_failed, state_resumed, state_new, state_discarded, state_save_failed,
        # pace_decreased
        "kind": str,
        "exit_id": Optional[str],
        "site": Optional[str],
        "from": Optional[str],
        "to": Optional[str],
        "message": str,
    },
)


class Recalibration(TypedDict):
    exit_id: str
    old: int
    new: int
    served: int
    safe: int


class UpdateSummary(TypedDict):
    """What ``Pool.update`` did: exit ids added, removed (draining) and changed, each sorted,
    and how many exits stayed as they were."""

    added: List[str]
    removed: List[str]
    changed: List[str]
    unchanged: int
