"""Type stubs and documentation for exitpool's native core."""

# ruff: noqa: F405 (the shape's names come from the star import of _shapes below)

import os
from typing import Any, Callable, Dict, FrozenSet, Iterable, List, Literal, Mapping, Optional, Tuple, TypedDict, Union, final

# The shape of snapshots, events and recalibrations (Snapshot, Event, Recalibration, the
# TypedDicts and Literal aliases they are made of): one definition, in exitpool/_shapes.py,
# re-exported here whole (its __all__).
from ._shapes import *  # noqa: F403

__all__ = [
    "__version__",
    "DEFAULT_REPLICAS",
    "MAX_REPLICAS",
    "MAX_RING_POINTS",
    "BLOCK_STATUSES",
    "_MASK",
    "_STATES",
    "_EJECTED",
    "_IN_SERVICE",
    "_OUTCOMES",
    "Exit",
    "Gateway",
    "Ring",
    "Pool",
    "Lease",
    "ManualClock",
    "_parse_exits",
    "_scrub",
    "_mask_raw",
    "_ConfigFile",
    "_position",
    "_check_ring_size",
    "_flush_stores",
    "_before_fork",
    "_after_fork",
]

__version__: str
DEFAULT_REPLICAS: int
#: The statuses reported as blocks (403, 407, 451, and 999, a large social site's refusal): the
#: core's one list, which integrations classify with. How a status is recorded:
#:
#: ==================================  ================
#: status                              outcome
#: ==================================  ================
#: 403, 407, 451, 999                  ``block``
#: 429                                 ``rate_limited``
#: 500-599                             ``target_error``
#: 100-499 otherwise                   ``success``
#: 0-99, 600-998, 1000-65535           ``other`` (no evidence about the exit or the site)
#: negative, above 65535, not an int   :class:`InvalidInput`
#: ==================================  ================
BLOCK_STATUSES: FrozenSet[int]
#: ``replicas`` is in ``1..=MAX_REPLICAS`` (100,000).
MAX_REPLICAS: int
#: The most points one ring holds: 2**24 (16,777,216), about 320 MiB (16 bytes a point, 4 more
#: for the lookup table). 100,000 exits of capacity 1 at the default 160 replicas fit; a Ring or
#: Pool (or an ``add``, ``set_capacity``, ``unbench``, subset or recalibration) that would need
#: more raises :class:`InvalidInput` naming exits, capacity total, replicas and this limit, and
#: changes nothing.
MAX_RING_POINTS: int

#: What a masked password reads as (httpx's ``[secure]``): the core's one spelling.
_MASK: str
#: The health states, best first.
_STATES: Tuple[HealthState, HealthState, HealthState, HealthState, HealthState]
#: The states in which health has taken an exit out of service.
_EJECTED: FrozenSet[HealthState]
#: The states of an exit in full service (neither out nor back only on trial).
_IN_SERVICE: FrozenSet[HealthState]
#: The outcome classes, in the order the core reports them.
_OUTCOMES: Tuple[OutcomeName, ...]

Strategy = Literal["round_robin", "weighted", "least_conn", "lru", "p2c"]

@final
class Exit:
    """One way out to the internet.

    ``exit_id`` is the stable identity the ring hashes (a sticky-session token or a static IP,
    never a volatile label). ``proxy`` is the URL to connect through (``http``, ``https``,
    ``socks5``, ``socks5h``); credentials may hold ``@ / : #`` raw or percent-encoded. ``ip`` is
    the public address the exit is believed to present; ``capacity`` is how many identities it
    is safe for, and its weight on the ring: 1 to 10000 (0 is refused; take an exit out with
    :meth:`Pool.bench`). ``repr`` and ``str`` mask the password as httpx
    does (``http://user:[secure]@host:port``).
    """

    def __new__(
        cls,
        exit_id: str,
        proxy: str,
        *,
        ip: Optional[str] = None,
        capacity: Optional[int] = None,
        tags: Optional[Mapping[str, str]] = None,
    ) -> Exit:
        """``capacity=None`` means 1."""
    def __getnewargs_ex__(self) -> Tuple[Tuple[str, str], Dict[str, Any]]:
        """Pickling (multiprocessing workers) rebuilds through the validating constructor."""
    @property
    def exit_id(self) -> str: ...
    @property
    def proxy(self) -> str:
        """The URL with credentials, for aiohttp's and httpx's ``proxy=``. Never log it."""
    @property
    def proxies(self) -> Dict[str, str]:
        """``{"http": proxy, "https": proxy}`` for requests."""
    @property
    def masked_proxy(self) -> str:
        """The URL with the password replaced by ``[secure]``."""
    @property
    def _proxy_without_credentials(self) -> str:
        """The URL with no credentials, for clients that send them in a header instead."""
    @property
    def ip(self) -> Optional[str]: ...
    @property
    def capacity(self) -> int: ...
    @property
    def tags(self) -> Dict[str, str]: ...
    @property
    def scheme(self) -> str: ...
    @property
    def host(self) -> str: ...
    @property
    def port(self) -> int: ...
    @property
    def username(self) -> Optional[str]: ...
    @property
    def password(self) -> Optional[str]: ...
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class Ring:
    """The consistent-hash ring: ``assign(key)`` gives the exit that owns ``key``.

    Exit ``e`` owns the positions of ``"{salt}:{exit_id}:{v}"`` for
    ``v in range(max(1, capacity) * replicas)``; a position is the first 8 bytes of the
    string's sha256, big-endian; a key goes to the first position strictly after its own,
    wrapping. ``replicas=1`` is bit for bit the reference ring of the article this design
    comes from. Adding or removing an exit moves only the keys of its own arcs. A ring holds at
    most :data:`MAX_RING_POINTS` points (2**24, about 320 MiB).
    """

    def __new__(cls, exits: Optional[Iterable[Exit]] = None, *, replicas: Optional[int] = None, salt: str = "vnode") -> Ring:
        """``replicas=None`` means :data:`DEFAULT_REPLICAS` (160)."""
    def assign(self, key: str, /) -> Exit:
        """The exit that owns ``key``; raises :class:`NoExitAvailable` on an empty ring.
        (Positional only: it is a ``METH_O`` method, called without an argument tuple.)"""
    def assign_many(self, keys: Iterable[str]) -> List[Exit]:
        """The owners of many keys in one call, in order."""
    def add(self, exit: Exit) -> None: ...
    def remove(self, exit_id: str) -> Exit: ...
    def moved(self, other: Ring, keys: Iterable[str]) -> List[str]:
        """The keys, of those given, whose exit differs between this ring and ``other``."""
    @property
    def exits(self) -> List[Exit]: ...
    @property
    def replicas(self) -> int: ...
    @property
    def salt(self) -> str: ...
    @property
    def points(self) -> int: ...
    def __len__(self) -> int: ...
    def __contains__(self, item: Union[str, Exit], /) -> bool: ...

@final
class ManualClock:
    """A clock that moves only when advanced: give it to ``Pool(clock=...)`` to test TTLs,
    cooldowns and warm-up without sleeping."""

    def __new__(cls, start: float = 0.0) -> ManualClock: ...
    def advance(self, seconds: float) -> float:
        """Move time forward; returns the new time. Negative or non-finite steps raise."""
    def now(self) -> float: ...

class GatewayPreset(TypedDict):
    """One provider format :meth:`Gateway.presets` knows."""

    name: str
    username: str
    password: str
    session_alphabet: str
    session_length: Tuple[int, int]
    default_session_length: int
    lifetime: Optional[Tuple[float, float]]
    default_lifetime: Optional[float]
    source: str

@final
class Gateway:
    """One provider endpoint that mints sticky sessions: ``slots`` exits ``"{gateway_id}-{n}"``
    (n from 0) whose credentials carry each slot's current token.

    ``username`` / ``password`` are templates over ``{user}`` and ``{password}`` (the proxy
    URL's own), ``{session}`` (the slot's token), ``{lifetime}`` (in the preset's unit, else
    whole seconds) and ``{tag}`` for any tag. ``lifetime`` is seconds (``None``: the preset's
    default, or tokens that never expire); a slot moves to its next token ``margin`` seconds
    before its lifetime ends (default ``min(60, lifetime / 10)``). ``rebind=True`` moves a
    key's session to the new token silently instead of raising ``SessionExitLost``.
    ``repr`` masks the password and shows no template.
    """

    def __new__(
        cls,
        gateway_id: str,
        proxy: str,
        *,
        slots: int,
        username: Optional[str] = None,
        password: Optional[str] = None,
        lifetime: Optional[float] = None,
        capacity: int = 1,
        tags: Optional[Mapping[str, str]] = None,
        preset: Optional[str] = None,
        margin: Optional[float] = None,
        rebind: bool = False,
        session_alphabet: Optional[Literal["digits", "lower", "alnum", "word"]] = None,
        session_length: Optional[int] = None,
    ) -> Gateway: ...
    def __getnewargs_ex__(self) -> Tuple[Tuple[str, str], Dict[str, Any]]: ...
    @property
    def gateway_id(self) -> str: ...
    @property
    def masked_proxy(self) -> str: ...
    @property
    def slots(self) -> int: ...
    @property
    def lifetime(self) -> Optional[float]: ...
    @property
    def margin(self) -> float: ...
    @property
    def capacity(self) -> int: ...
    @property
    def tags(self) -> Dict[str, str]: ...
    @property
    def preset(self) -> Optional[str]: ...
    @property
    def rebind(self) -> bool: ...
    @property
    def session_alphabet(self) -> str: ...
    @property
    def session_length(self) -> int: ...
    def slot_id(self, slot: int) -> str: ...
    def token(self, slot: int, at: Optional[float] = None) -> str:
        """Slot ``slot``'s token at Unix time ``at`` (default: now), as every worker has it."""
    def generation(self, slot: int, at: Optional[float] = None) -> int: ...
    def rotates_at(self, slot: int, at: Optional[float] = None) -> float:
        """The Unix time the slot next moves to a new token (``inf`` if tokens never expire)."""
    def exits(self, at: Optional[float] = None) -> List[Exit]:
        """The slots as exits at Unix time ``at`` (default: now); on their own they never rotate."""
    @staticmethod
    def presets() -> List[GatewayPreset]: ...

@final
class Lease:
    """One lease of one exit, from ``pool.lease(...)`` (a sync and async context manager,
    acquired on entering the block) or ``pool.acquire(...)``."""

    @property
    def exit_id(self) -> str: ...
    @property
    def exit(self) -> Exit: ...
    @property
    def proxy(self) -> str:
        """The proxy URL, credentials included, for aiohttp and httpx."""
    @property
    def proxies(self) -> Dict[str, str]:
        """``{"http": url, "https": url}`` for requests."""
    @property
    def key(self) -> Optional[str]: ...
    @property
    def site(self) -> Optional[str]: ...
    @property
    def strategy(self) -> Optional[str]:
        """How the exit was chosen: ``"session"``, ``"ring"``, ``"ring_bounded"`` or the
        keyless strategy's name."""
    @property
    def exit_state(self) -> Optional[HealthState]:
        """The exit's health for this lease's site when it was chosen."""
    @property
    def active(self) -> bool:
        """True from the grant until the release, or until ``lease_ttl`` has passed on the
        pool's clock (an expired lease's slot may be someone else's)."""
    def report(
        self,
        *,
        status: Optional[int] = None,
        latency: Optional[float] = None,
        captcha: Optional[bool] = None,
        error: Union[None, str, BaseException] = None,
        retry_after: Optional[float] = None,
    ) -> None:
        """Record the request's outcome; applied when the lease ends, winning over any
        exception. ``status`` is any status a client gives, 0 to 65535 (see
        :data:`BLOCK_STATUSES` for the table). ``error`` is an exception or ``"timeout"``,
        ``"connect"``, ``"proxy"``, ``"other"``. A ``retry_after`` (a 429's) cools the exit for
        the site for at most the health setting ``max_ejection``. Invalid values raise
        :class:`InvalidInput` naming the value and record nothing."""
    def __enter__(self) -> Lease: ...
    def __exit__(self, exc_type: Any = None, exc: Any = None, tb: Any = None) -> bool: ...
    async def __aenter__(self) -> Lease: ...
    async def __aexit__(self, exc_type: Any = None, exc: Any = None, tb: Any = None) -> bool: ...

@final
class Pool:
    """A thread-safe pool of exits: ``with pool.lease("account-3f9") as exit:``.

    Keyed leases stick to one exit per key for ``session_ttl`` seconds (extended by every
    lease); keyless ones are spread by ``strategy``. ``max_leases`` caps concurrent leases per
    exit; a lease not released within ``lease_ttl`` expires. ``balance_factor`` (e.g. 1.25)
    turns on bounded loads for new sessions; ``warmup`` (True, a ramp in seconds, or a dict
    of ``ramp``, ``initial_interval``, ``horizon``) spaces out a new key/exit pairing's first
    leases. ``max_sessions`` and ``max_pairings`` bound what one-off keys keep alive: over
    either, the least recently used go first (never a session holding a lease), with a
    ``sessions_evicted`` / ``pairings_evicted`` event; ``None`` lifts the bound. ``clock``
    replaces time for tests; ``seed`` makes ``p2c`` reproducible; ``cooldown`` is the ``lru``
    per-site cooldown. ``store`` (``"memory://NAME"``,
    ``"redis://host:6379/0"``, ``"redis+sentinel://h1:26379,h2:26379/MASTER"``,
    ``"redis+cluster://h1:7000,h2:7001"``; docs/fleet.md) shares the pool's state with every pool on that store and
    ``namespace``. With Redis, a lease pair costs one round trip: a release is sent with the
    next command, or by the pool's own thread (``exitpool-store``) within 2 ms, and a session
    leased in a loop is renewed fleet-wide once per 1/64 of ``session_ttl``. ``state`` (a
    path; in-process pools only) resumes health, cooldowns, pacing budgets, warm-up pairings and sessions from
    that file and saves them there every ``state_interval`` seconds and on ``close()``.
    ``pacing`` (``{"shop.example": "6/s", "*": "2/s"}``, or ``"4/s burst 6"`` for a bucket deeper than
    its rate) gives each (exit, site) pair a request budget:
    a lease goes to an exit with budget for its site or waits for one (within ``timeout``;
    else :class:`Cooling` with ``retry_after``), and a 429 halves the pair's learned rate
    (docs/pacing.md).
    """

    def __new__(
        cls,
        exits: Iterable[Union[Exit, Gateway]],
        *,
        strategy: Strategy = "weighted",
        replicas: Optional[int] = None,
        session_ttl: float = 900.0,
        lease_ttl: float = 120.0,
        max_leases: Optional[int] = None,
        balance_factor: Optional[float] = None,
        warmup: Union[None, bool, float, Mapping[str, float]] = None,
        max_sessions: Optional[int] = 1000000,
        max_pairings: Optional[int] = 1000000,
        clock: Optional[ManualClock] = None,
        seed: Optional[int] = None,
        cooldown: float = 8.0,
        health: Optional[Mapping[str, float]] = None,
        calibrate: bool = False,
        store: Optional[str] = None,
        namespace: str = "exitpool",
        state: Union[None, str, os.PathLike[str]] = None,
        state_interval: float = 30.0,
        pacing: Optional[Mapping[str, str]] = None,
    ) -> Pool: ...
    @classmethod
    def from_config(cls, path: Union[str, os.PathLike[str]], **overrides: Any) -> Pool:
        """A pool from a TOML file: ``Pool(...)``'s keywords at the top level, exits from
        ``exits_file`` (relative to the file) and ``[[exit]]`` tables. Mistakes raise
        :class:`InvalidInput` naming the key and its line. ``overrides`` (keywords of
        ``Pool(...)`` given in code, such as ``clock``) win over the file. ``watch=True``
        (with ``watch_interval=`` seconds, default 2) applies a changed file's exits with
        ``update``."""
    def update(self, exits: Iterable[Union[Exit, Gateway]]) -> UpdateSummary:
        """Applies a new list as a difference: unchanged exits keep every state, changed ones
        (same id) keep theirs and lease with the new URL, new ones join, missing ones drain.
        Bad input changes nothing. On the whole pool only (subsets follow)."""
    def save_state(self) -> None:
        """Saves the state now (``state=``); nothing to do without it."""
    def close(self) -> None:
        """Stops watching files and saving at an interval, and saves the state once more. The
        pool still serves; a second call does nothing."""
    def _on_close(self, callback: Callable[[], Any]) -> None: ...
    def _reload_failed(self, source: str, why: str) -> None: ...
    @property
    def store(self) -> Optional[str]:
        """The shared store's URL (credentials masked), or None for a pool of its own."""
    def lease(
        self,
        key: Optional[str] = None,
        *,
        site: Optional[str] = None,
        timeout: Optional[float] = None,
        avoid: Optional[Iterable[str]] = None,
    ) -> Lease:
        """A context manager (``with`` or ``async with``) leasing an exit for ``key``.

        Waits up to ``timeout`` seconds (``None``: as long as it takes) while every exit that
        could serve is at ``max_leases``, then raises :class:`NoExitAvailable`. Sync leases
        raise :class:`WarmingUp` and :class:`Cooling` at once; async leases wait them out when
        the wait fits the timeout. A session whose exit is gone raises :class:`SessionExitLost`.

        ``avoid`` (keyless leases only) names exits the pick must pass over, say the ones a
        page was just banned from; ids no longer in the pool are ignored. When only avoided
        exits could serve, the lease is refused as if they were busy or out of service.
        """
    def acquire(
        self,
        key: Optional[str] = None,
        *,
        site: Optional[str] = None,
        timeout: Optional[float] = None,
        avoid: Optional[Iterable[str]] = None,
    ) -> Lease:
        """Lease now, without ``with``; end it with :meth:`release`."""
    def release(
        self,
        lease: Lease,
        *,
        status: Optional[int] = None,
        latency: Optional[float] = None,
        captcha: Optional[bool] = None,
        error: Union[None, str, BaseException] = None,
        retry_after: Optional[float] = None,
    ) -> bool:
        """End a lease; False if it had already ended (expired or released twice). The slot is
        always freed: report arguments that are bad input end the lease without health
        evidence, then raise :class:`InvalidInput`."""
    def assign(self, key: str) -> Exit:
        """Where ``key`` lives now: its live session's exit, else its ring exit."""
    def bench(self, exit_id: str) -> List[str]:
        """Stop new sessions on an exit; returns the keys of live sessions, which move when
        they end."""
    def unbench(self, exit_id: str) -> None: ...
    def end_session(self, key: str) -> bool: ...
    def set_capacity(self, exit_id: str, capacity: int) -> None: ...
    def add(self, exit: Union[Exit, Gateway]) -> None:
        """Adds an exit, or a gateway's slots (all or none)."""
    def remove(self, exit_id: str) -> Exit: ...
    def subset(self, **tags: str) -> Pool:
        """A view over the exits whose tags match, sharing all state with this pool."""
    def exit(self, exit_id: str) -> Exit: ...
    @property
    def exits(self) -> List[Exit]: ...
    def now(self) -> float:
        """Seconds on the pool's clock: a ``ManualClock``'s time, else the seconds since the pool
        was made, in the kernel's coarse ticks on Linux (1 to 4 ms)."""
    def snapshot(
        self,
        exits: bool = True,
        *,
        state: Optional[Union[HealthState, Iterable[HealthState]]] = None,
        tags: Optional[Dict[str, str]] = None,
        exit_ids: Optional[Iterable[str]] = None,
        limit: Optional[int] = None,
        by_tag: Optional[str] = None,
        slots: bool = True,
    ) -> Snapshot:
        """Everything the pool knows, as plain data. The arguments choose the exits listed
        (their records, matrix rows and fleet figures); ``pool``, ``counts``, ``sites``,
        ``groups`` and ``gateways`` always cover every exit. ``slots=False``: no gateway slot
        is listed (its gateway's entry in ``gateways`` sums them). ``exits=False``: none (the summary). ``state``:
        only exits in that state (or those states). ``tags``: only exits carrying every one.
        ``exit_ids``: only those (an id the pool does not hold matches nothing). ``limit``: at
        most that many, the worst states first, ties in pool order. ``by_tag``: fill
        ``groups`` with every exit's figures summed by that tag's value."""
    def state(self, exit_id: str, site: Optional[str] = None) -> SiteState:
        """The exit's health; with a site, the worse of its tunnel's and its state there.
        ``"cooling"`` while a 429 rests the exit for that site (without a site: for leases
        without one), unless it is quarantined or dead."""
    def revive(self, exit_id: str) -> None:
        """Back in service (healthy) everywhere, whatever its state."""
    def events(self, since: Optional[int] = None) -> List[Event]:
        """The buffered events (the last 1,000) with ``seq >= since``, oldest first."""
    def on_event(self, callback: Callable[[Dict[str, Any]], Any]) -> Callable[[Dict[str, Any]], Any]:
        """Call ``callback(event)`` for every event from now on; returns it (a decorator)."""
    def probe_due(self, idle: float = 30.0) -> List[Exit]:
        """Exits a probe loop should check now: quarantined ones whose backoff is over, dead
        ones, and exits in service idle for ``idle`` seconds."""
    def record_probe(
        self, exit_id: str, ok: bool, *, observed_ip: Optional[str] = None, detail: str = "", status: Optional[int] = None
    ) -> bool:
        """Feed a probe's verdict into health (probes decide who comes back); returns whether
        the observed IP differs from the exit's ``ip`` (drift: an event and a failure). A
        gateway slot learns its IP per token: a new IP after a rotation is expected, a new one
        within the same token is ``sticky_broken`` (an event and a failure; returns True).
        ``status=407`` says the proxy refused the credentials (a gateway slot's gateway goes
        out as a whole; no slot's breaker counts it)."""
    def recalibrate(self) -> List[Recalibration]:
        """Set capacities from 24 h of measurement (needs ``calibrate=True``)."""
    def __len__(self) -> int: ...
    def __contains__(self, item: Union[str, Exit], /) -> bool: ...

def _parse_exits(lines: List[str]) -> List[Exit]: ...
def _mask_raw(raw: str) -> str: ...
def _scrub(text: str, secrets: List[str]) -> str:
    """``text`` with every secret in it replaced by ``_MASK``, the longest first."""

@final
class _ConfigFile:
    """Pool.from_config's file, parsed by the core; errors are InvalidInput with .loc, .file, .line."""

    def __new__(cls, name: str, raw: bytes) -> _ConfigFile: ...
    @property
    def exits_file(self) -> Optional[str]: ...
    def exits(self, listed: List[Exit]) -> List[Union[Exit, Gateway]]: ...
    def options(self) -> Dict[str, Any]: ...
    def error(self, loc: List[str], problem: str) -> BaseException: ...
    def blame(self, e: BaseException, overrides: List[str]) -> BaseException: ...

def _position(s: str) -> int: ...
def _flush_stores() -> None: ...
def _before_fork() -> None: ...
def _after_fork() -> None: ...
def _check_ring_size(exits: Iterable[Exit], replicas: Optional[int]) -> None: ...
