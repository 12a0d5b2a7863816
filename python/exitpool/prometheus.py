"""Prometheus metrics for an exitpool :class:`~exitpool.Pool`.

>>> from prometheus_client import REGISTRY, start_http_server      # doctest: +SKIP
>>> from exitpool.prometheus import PoolCollector                  # doctest: +SKIP
>>> REGISTRY.register(PoolCollector(pool))                         # doctest: +SKIP
>>> start_http_server(9108, addr="127.0.0.1")                      # doctest: +SKIP

This module needs ``prometheus_client`` (``pip install exitpool[prometheus]``); ``import
exitpool`` does not, so only the applications that export metrics pay for it.

The collector is a *custom collector*: it keeps no metric objects of its own and updates
nothing on the lease path. Each scrape takes one ``pool.snapshot()`` (which the core builds
from figures it already keeps on every release) and turns it into metric families, so the
numbers in one scrape are mutually consistent and a pool that nobody scrapes pays nothing.

Names follow the Prometheus conventions: everything starts with the namespace (``exitpool``),
counters end in ``_total``, durations are in seconds and say so (``_seconds``), fractions in
0..1 end in ``_ratio``. Pool-wide figures and per-exit figures have different names
(``exitpool_outcomes_total`` and ``exitpool_exit_outcomes_total``), so that ``sum()`` over a
metric never counts a request twice.

Label cardinality is bounded, as exporters of high-cardinality labels do it: the ``exit``
label (the exit id) is on for at most ``max_exits`` exits (1,000 by default), the worst states
first, so that "which exit is bad?" still has its answer in a pool of 100,000; beyond that the
pool-wide counts per state and, with ``by_tag="country"``, the figures per value of one tag
carry the rest. The ``site`` label is only there with ``per_site=True``, since sites are
whatever the scraper visits and may number in the thousands, and the exit x site cells are
bounded again by ``max_cells``. A gateway's slots are its own series
(``exitpool_gateway_*{gateway}``: its breaker, its slots per state, outages, 407s, rotations)
and, while ``max_exits`` bounds the per-exit series, are counted there and not as an ``exit``
each: a gateway of 5,000 slots is a dozen series, not 5,000 exits' worth. Account keys, which are
unbounded and personal, are never a label. The proxy URL is never exported, masked or not:
the exit id names the exit, and a URL carries a user name and a gateway address an
exposition endpoint has no business publishing.
"""

from __future__ import annotations

import re
from typing import Any, Dict, Iterator, List, Literal, Optional, Tuple, Union

try:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
    from prometheus_client.metrics_core import Metric
except ImportError as e:  # pragma: no cover - exercised in a subprocess by the tests
    raise ImportError("exitpool.prometheus needs prometheus_client: pip install 'exitpool[prometheus]'") from e

from ._core import _OUTCOMES, Pool, __version__
from ._errors import InvalidInput
from ._shapes import ExitSnapshot, Snapshot
from ._states import STATES

__all__ = ["PoolCollector"]

# The outcome classes, in the order the core reports them: the core's own tuple, typed (in the
# stub) as Literals so that mypy checks them against the snapshot's TypedDicts.
OUTCOMES = _OUTCOMES
# Per-exit latency quantiles: the snapshot key and the `quantile` label value.
LATENCY_QUANTILES: Tuple[Tuple[Literal["p50", "p95", "p99"], str], ...] = (("p50", "0.5"), ("p95", "0.95"), ("p99", "0.99"))
WAIT_QUANTILES: Tuple[Tuple[Literal["p50", "p99"], str], ...] = (("p50", "0.5"), ("p99", "0.99"))

_NAMESPACE = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
# Labels the per-tag families already carry: a tag by one of these names cannot be a label.
_TAKEN_LABELS = ("state", "outcome", "exit", "site", "quantile", "version")

#: Exits with per-exit series by default: a scrape of 1,000 exits is about 25,000 series,
#: as much as one target usually should expose.
MAX_EXITS = 1000
#: Exit x site cells with series by default (``per_site=True``), four series each.
MAX_CELLS = 10000

# The families this collector makes: both take samples with add_metric(labels, value), which
# the base Metric does not have.
_Family = Union[GaugeMetricFamily, CounterMetricFamily]


class PoolCollector:
    """A ``prometheus_client`` collector exposing one pool: register it once, e.g.
    ``REGISTRY.register(PoolCollector(pool))``.

    ``per_site=True`` adds the ``site`` label: outcomes and the open incident flag per site,
    and the exit x site matrix cells (reports, success and captcha ratios, quarantines) for the
    pairs that have served at least one report. Leave it off when the scraper visits an
    unbounded set of sites; the pool-wide count of open incidents is there either way.

    ``namespace`` replaces the ``exitpool`` prefix, for a process that exports two pools (two
    collectors with one namespace would register the same names, which the registry refuses).

    ``max_exits`` bounds the per-exit series (``exitpool_exit_*``): at most that many exits
    have them, the worst states first (quarantined and dead before degraded before healthy,
    ties in pool order, so the set changes only when states do); ``0`` exports none, ``None``
    every exit. ``exitpool_exits_exported`` says how many did. Each scrape asks the pool for
    those exits alone (``pool.snapshot(limit=max_exits)``), so a scrape of a 100,000-exit pool
    does not build a record per exit. ``by_tag="country"`` adds the figures summed per value
    of that tag (``exitpool_tag_exits{country,state}``, ``exitpool_tag_outcomes_total``, ...),
    over every exit whatever ``max_exits`` is; exits without the tag count under ``""``.
    ``max_cells`` bounds the exit x site cells of ``per_site=True`` the same way (the worst
    exits' cells first).

    Every gateway has its series under the ``gateway`` label (``exitpool_gateway_state``,
    ``exitpool_gateway_slots{state}``, ``exitpool_gateway_outages_total``,
    ``exitpool_gateway_credential_rejections_total``, ``exitpool_gateway_token_rotations_total``,
    ...). While ``max_exits`` is a number, a gateway's slots get no ``exit_*`` series of their
    own (the scrape asks for ``pool.snapshot(slots=False)``): ``max_exits`` is then spent on the
    plain exits and the gateway's series carry its slots. ``max_exits=None`` exports every
    exit, slots included.

    A figure that does not exist yet (a success ratio before the exit's first report, a
    latency quantile before its first timed report, the half-open success ratio before the
    first trial) is left out of the scrape rather than exported as 0, which would read as
    "everything fails" or "instant".
    """

    def __init__(
        self,
        pool: Pool,
        *,
        per_site: bool = False,
        namespace: str = "exitpool",
        max_exits: Optional[int] = MAX_EXITS,
        by_tag: Optional[str] = None,
        max_cells: int = MAX_CELLS,
    ) -> None:
        if not callable(getattr(pool, "snapshot", None)):
            raise TypeError(f"PoolCollector needs an exitpool.Pool, got {type(pool).__name__}")
        if not isinstance(namespace, str) or not _NAMESPACE.match(namespace):
            raise ValueError(f"namespace {namespace!r} is not a valid Prometheus metric name prefix")
        if max_exits is not None:
            _count("max_exits", max_exits)
        _count("max_cells", max_cells)
        if by_tag is not None and (
            not isinstance(by_tag, str) or not _LABEL.match(by_tag) or by_tag.startswith("__") or by_tag in _TAKEN_LABELS
        ):
            raise InvalidInput(
                f"by_tag {by_tag!r} cannot be a Prometheus label name (letters, digits and _, not {', '.join(_TAKEN_LABELS)})"
            )
        self._pool = pool
        self._per_site = bool(per_site)
        self._ns = namespace
        self._max_exits = max_exits
        self._by_tag = by_tag
        self._max_cells = max_cells

    def __repr__(self) -> str:
        return (
            f"PoolCollector({self._pool!r}, per_site={self._per_site}, namespace={self._ns!r}, "
            f"max_exits={self._max_exits!r}, by_tag={self._by_tag!r}, max_cells={self._max_cells!r})"
        )

    def describe(self) -> List[Metric]:
        """The metric families without samples.

        A registry with ``auto_describe`` (the default ``REGISTRY``) would otherwise call
        :meth:`collect` on registration, taking a snapshot just to learn the names.
        """
        return list(self._families().values())

    def collect(self) -> Iterator[Metric]:
        """One snapshot, turned into metric families: called by the registry on every scrape."""
        if self._max_exits == 0:
            snap = self._pool.snapshot(False, by_tag=self._by_tag)
        elif self._max_exits is None:
            snap = self._pool.snapshot(by_tag=self._by_tag)
        else:
            snap = self._pool.snapshot(limit=self._max_exits, by_tag=self._by_tag, slots=False)
        f = self._families()
        self._pool_figures(f, snap)
        self._exit_figures(f, snap)
        self._gateway_figures(f, snap)
        if self._by_tag is not None:
            self._tag_figures(f, snap, self._by_tag)
        if self._per_site:
            self._site_figures(f, snap, self._max_cells)
        self._pace_figures(f, snap, self._max_cells)
        return iter(f.values())

    # -- the families ------------------------------------------------------------------------

    def _families(self) -> Dict[str, _Family]:
        ns = self._ns
        f: Dict[str, _Family] = {}

        def gauge(key: str, doc: str, labels: Optional[List[str]] = None) -> None:
            f[key] = GaugeMetricFamily(f"{ns}_{key}", doc, labels=labels or [])

        def counter(key: str, doc: str, labels: Optional[List[str]] = None) -> None:
            # CounterMetricFamily takes the name without `_total` and exposes `<name>_total`.
            f[key] = CounterMetricFamily(f"{ns}_{key}", doc, labels=labels or [])

        gauge("build_info", "The exitpool version, as a label; the value is always 1.", ["version"])
        # Pool-wide.
        gauge("exits", "Exits in the pool per health state (benched exits counted too).", ["state"])
        gauge("exits_in_service", "Exits that take new sessions (listed and not benched).")
        gauge("exits_benched", "Exits benched by the operator: no new sessions, live ones drain.")
        gauge("live_leases", "Leases held now.")
        gauge("sessions", "Live sticky sessions (account key -> exit bindings).")
        counter("leases_acquired", "Leases granted.")
        counter("leases_released", "Leases ended by release.")
        counter("leases_expired", "Leases that outlived lease_ttl without a release.")
        counter("releases_ignored", "Releases of leases that had already ended.")
        counter("sessions_evicted", "Idle sessions ended early to keep max_sessions.")
        counter("pairings_evicted", "Warm-up pairings forgotten early to keep max_pairings.")
        counter("lease_waits", "Leases that had to wait for a free exit.")
        counter("outcomes", "Reported request outcomes over the whole pool, by class.", ["outcome"])
        gauge(
            "leases_per_second",
            "Leases granted per second over the pool's last one to two minutes "
            "(rate(exitpool_leases_acquired_total[...]) is the same figure over a window you choose).",
        )
        gauge("lease_gini_ratio", "Gini coefficient of leases over the exits in service: 0 even, towards 1 concentrated.")
        gauge("ejected_ratio", "Fraction of the exits in service that health has ejected (quarantined or dead).")
        counter("half_open_trials", "Half-open trial leases sent to quarantined exits.")
        counter("half_open_succeeded", "Half-open trial leases that came back a success.")
        gauge("half_open_success_ratio", "Successful half-open trials over all trials (absent before the first).")
        gauge("wait_seconds", "Quantiles of the wait for an exit, leases that went at once counting as 0.", ["quantile"])
        gauge("site_incidents_open", "Sites with an open incident (the site, not the exits, is failing).")
        gauge(
            "global_incident",
            "1 while a pool-wide incident is open (many tunnels failing at once: the fault is likely ours, so no exit is judged), else 0.",
        )
        gauge("exits_exported", "Exits with per-exit series in this scrape (at most max_exits, the worst states first).")
        # Per exit.
        gauge("exit_state", "1 for the exit's current health state, 0 for the others.", ["exit", "state"])
        gauge("exit_time_in_state_seconds", "Seconds since the exit entered its current health state.", ["exit"])
        counter("exit_quarantines", "Times the exit was quarantined.", ["exit"])
        counter("exit_quarantined_seconds", "Total seconds the exit has spent quarantined.", ["exit"])
        gauge("exit_benched", "1 if the exit is benched, else 0.", ["exit"])
        gauge("exit_capacity", "Identities the exit is safe for (its weight on the ring).", ["exit"])
        gauge("exit_weight", "The exit's current selection weight after health adjustments.", ["exit"])
        gauge("exit_active_leases", "Leases the exit holds now.", ["exit"])
        gauge("exit_sessions", "Live sticky sessions bound to the exit.", ["exit"])
        counter("exit_leases", "Leases granted on the exit.", ["exit"])
        counter("exit_outcomes", "Reported request outcomes on the exit, by class.", ["exit", "outcome"])
        gauge("exit_success_ratio", "Success ratio over the exit's last 64 reports (absent before the first).", ["exit"])
        gauge("exit_captcha_ratio", "Captcha ratio over the exit's last 64 reports (absent before the first).", ["exit"])
        gauge(
            "exit_latency_seconds",
            "Request latency quantiles on the exit over its recent requests, from a streaming "
            "histogram within 9.051% of the true value (absent before the first timed report).",
            ["exit", "quantile"],
        )
        gauge("exit_latency_samples", "Timed reports the latency quantiles are drawn from (decays, not a counter).", ["exit"])
        # Per gateway: its breaker (one for all its slots) and its slots summed.
        gauge(
            "gateway_state", "1 for the gateway's breaker state (healthy, probing or quarantined), 0 for the others.", ["gateway", "state"]
        )
        gauge(
            "gateway_out_cause",
            "1 for why the gateway is out (connect: it fails for several slots at once; credentials: it answered 407), "
            "absent while it is healthy.",
            ["gateway", "cause"],
        )
        gauge(
            "gateway_slots",
            "The gateway's slots by their own breakers' state (while the gateway is out, none serves).",
            ["gateway", "state"],
        )
        counter("gateway_outages", "Times the gateway's breaker took all its slots out.", ["gateway"])
        counter("gateway_credential_rejections", "Answers 407 (wrong credentials) from the gateway.", ["gateway"])
        counter("gateway_failures_absorbed", "Slot failures charged to the gateway instead of the slot.", ["gateway"])
        counter("gateway_out_seconds", "Seconds the gateway has been out of service.", ["gateway"])
        counter("gateway_token_rotations", "Slots moved to their next session token.", ["gateway"])
        gauge(
            "gateway_next_rotation_seconds", "Seconds until the gateway's next token rotation (absent if tokens never expire).", ["gateway"]
        )
        gauge("gateway_active_leases", "Leases held now on the gateway's slots.", ["gateway"])
        gauge("gateway_sessions", "Live sticky sessions on the gateway's slots.", ["gateway"])
        counter("gateway_leases", "Leases granted on the gateway's slots.", ["gateway"])
        if self._by_tag is not None:
            tag = self._by_tag
            gauge("tag_exits", f"Exits per value of the {tag} tag and health state (benched exits counted too).", [tag, "state"])
            gauge("tag_exits_benched", f"Benched exits per value of the {tag} tag.", [tag])
            gauge("tag_active_leases", f"Leases held now on the exits with each value of the {tag} tag.", [tag])
            gauge("tag_sessions", f"Live sticky sessions on the exits with each value of the {tag} tag.", [tag])
            counter("tag_leases", f"Leases granted on the exits with each value of the {tag} tag.", [tag])
            counter("tag_outcomes", f"Reported request outcomes on the exits with each value of the {tag} tag, by class.", [tag, "outcome"])
        if self._per_site:
            gauge("site_incident", "1 while the site has an open incident, else 0.", ["site"])
            counter("site_outcomes", "Reported request outcomes on the site, by class.", ["site", "outcome"])
            counter("exit_site_reports", "Reports of the exit on the site (matrix cell).", ["exit", "site"])
            gauge("exit_site_success_ratio", "Success ratio of the exit on the site over its last 64 reports.", ["exit", "site"])
            gauge("exit_site_captcha_ratio", "Captcha ratio of the exit on the site over its last 64 reports.", ["exit", "site"])
            counter("exit_site_quarantines", "Times the exit was quarantined for the site alone.", ["exit", "site"])
        # Pacing (``Pool(pacing=...)``): only the sites it names have series, so they are there
        # whatever ``per_site`` says; pairs are bounded by ``max_exits`` and ``max_cells``.
        gauge("exit_site_pace_rate", "Learned request rate of the exit on a paced site, requests per second.", ["exit", "site"])
        gauge(
            "exit_site_pace_ceiling", "Configured request rate of a paced site (the learned rate's ceiling), per second.", ["exit", "site"]
        )
        gauge("exit_site_pace_tokens", "Requests the exit may send to the paced site now, at once.", ["exit", "site"])
        return f

    # -- filling them ------------------------------------------------------------------------

    @staticmethod
    def _pool_figures(f: Dict[str, _Family], snap: Snapshot) -> None:
        p, counts = snap["pool"], snap["counts"]
        f["build_info"].add_metric([__version__], 1)
        states = p["states"]
        for state in STATES:
            f["exits"].add_metric([state], states.get(state, 0))
        f["exits_in_service"].add_metric([], p["in_service"])
        f["exits_benched"].add_metric([], p["benched"])
        f["live_leases"].add_metric([], p["live_leases"])
        f["sessions"].add_metric([], p["sessions"])
        f["leases_acquired"].add_metric([], counts["acquired"])
        f["leases_released"].add_metric([], counts["released"])
        f["leases_expired"].add_metric([], counts["expired"])
        f["releases_ignored"].add_metric([], counts["ignored_releases"])
        f["sessions_evicted"].add_metric([], counts["evicted_sessions"])
        f["pairings_evicted"].add_metric([], counts["evicted_pairings"])
        f["lease_waits"].add_metric([], counts["waits"])
        for outcome in OUTCOMES:
            f["outcomes"].add_metric([outcome], counts["outcomes"].get(outcome, 0))
        f["leases_per_second"].add_metric([], p["throughput"])
        f["lease_gini_ratio"].add_metric([], p["gini"])
        f["ejected_ratio"].add_metric([], p["ejected_fraction"])
        half_open = p["half_open"]
        f["half_open_trials"].add_metric([], half_open["trials"])
        f["half_open_succeeded"].add_metric([], half_open["succeeded"])
        if half_open["success_rate"] is not None:
            f["half_open_success_ratio"].add_metric([], half_open["success_rate"])
        for key, q in WAIT_QUANTILES:
            f["wait_seconds"].add_metric([q], p["wait"][key])
        f["site_incidents_open"].add_metric([], len(p["incidents"]))
        f["global_incident"].add_metric([], 1 if p["global_incident"] else 0)
        f["exits_exported"].add_metric([], len(snap["exits"]))

    @staticmethod
    def _exit_figures(f: Dict[str, _Family], snap: Snapshot) -> None:
        for e in snap["exits"]:
            x = e["exit_id"]
            for state in STATES:
                f["exit_state"].add_metric([x, state], 1 if e["state"] == state else 0)
            f["exit_time_in_state_seconds"].add_metric([x], e["time_in_state"])
            f["exit_quarantines"].add_metric([x], e["quarantines"])
            f["exit_quarantined_seconds"].add_metric([x], e["quarantined_seconds"])
            f["exit_benched"].add_metric([x], 1 if e["benched"] else 0)
            f["exit_capacity"].add_metric([x], e["capacity"])
            f["exit_weight"].add_metric([x], e["weight"])
            f["exit_active_leases"].add_metric([x], e["active_leases"])
            f["exit_sessions"].add_metric([x], e["sessions"])
            f["exit_leases"].add_metric([x], e["leases"])
            for outcome in OUTCOMES:
                f["exit_outcomes"].add_metric([x, outcome], e["outcomes"].get(outcome, 0))
            if e["success_rate"] is not None:
                f["exit_success_ratio"].add_metric([x], e["success_rate"])
            if e["captcha_rate"] is not None:
                f["exit_captcha_ratio"].add_metric([x], e["captcha_rate"])
            latency = e["latency"]
            for key, q in LATENCY_QUANTILES:
                seconds = latency[key]
                if seconds is not None:
                    f["exit_latency_seconds"].add_metric([x, q], seconds)
            f["exit_latency_samples"].add_metric([x], latency["count"])

    @staticmethod
    def _gateway_figures(f: Dict[str, _Family], snap: Snapshot) -> None:
        for g in snap["gateways"]:
            x = g["gateway_id"]
            for state in STATES:
                f["gateway_state"].add_metric([x, state], 1 if g["state"] == state else 0)
                f["gateway_slots"].add_metric([x, state], g["slot_states"].get(state, 0))
            if g["cause"] is not None:
                f["gateway_out_cause"].add_metric([x, g["cause"]], 1)
            f["gateway_outages"].add_metric([x], g["outages"])
            f["gateway_credential_rejections"].add_metric([x], g["credential_rejections"])
            f["gateway_failures_absorbed"].add_metric([x], g["absorbed"])
            f["gateway_out_seconds"].add_metric([x], g["out_seconds"])
            f["gateway_token_rotations"].add_metric([x], g["rotations"])
            if g["next_rotation"] is not None:
                f["gateway_next_rotation_seconds"].add_metric([x], max(0.0, g["next_rotation"] - snap["time"]))
            f["gateway_active_leases"].add_metric([x], g["active_leases"])
            f["gateway_sessions"].add_metric([x], g["sessions"])
            f["gateway_leases"].add_metric([x], g["leases"])

    @staticmethod
    def _tag_figures(f: Dict[str, _Family], snap: Snapshot, tag: str) -> None:
        for value, g in (snap["groups"] or {}).items():
            for state in STATES:
                f["tag_exits"].add_metric([value, state], g["states"].get(state, 0))
            f["tag_exits_benched"].add_metric([value], g["benched"])
            f["tag_active_leases"].add_metric([value], g["active_leases"])
            f["tag_sessions"].add_metric([value], g["sessions"])
            f["tag_leases"].add_metric([value], g["leases"])
            for outcome in OUTCOMES:
                f["tag_outcomes"].add_metric([value, outcome], g["outcomes"].get(outcome, 0))

    @staticmethod
    def _pace_figures(f: Dict[str, _Family], snap: Snapshot, max_cells: int) -> None:
        for pair in snap["pacing"][:max_cells]:
            labels = [pair["exit_id"], pair["site"]]
            f["exit_site_pace_rate"].add_metric(labels, pair["rate"])
            f["exit_site_pace_ceiling"].add_metric(labels, pair["ceiling"])
            f["exit_site_pace_tokens"].add_metric(labels, pair["tokens"])

    @staticmethod
    def _site_figures(f: Dict[str, _Family], snap: Snapshot, max_cells: int) -> None:
        for s in snap["sites"]:
            site = s["site"]
            f["site_incident"].add_metric([site], 1 if s["incident"] else 0)
            for outcome in OUTCOMES:
                f["site_outcomes"].add_metric([site, outcome], s["outcomes"].get(outcome, 0))
        matrix = snap["matrix"]
        col = {name: i for i, name in enumerate(matrix["columns"])}
        left = max_cells
        for x, row in _worst_first(snap["exits"], matrix["exits"], matrix["cells"]):
            for site, cell in zip(matrix["sites"], row):
                if cell is None:  # the exit has not served this site: no series at all
                    continue
                if left == 0:
                    return
                left -= 1
                f["exit_site_reports"].add_metric([x, site], cell[col["reports"]])
                if cell[col["success_rate"]] is not None:
                    f["exit_site_success_ratio"].add_metric([x, site], cell[col["success_rate"]])
                if cell[col["captcha_rate"]] is not None:
                    f["exit_site_captcha_ratio"].add_metric([x, site], cell[col["captcha_rate"]])
                f["exit_site_quarantines"].add_metric([x, site], cell[col["quarantines"]])


def _worst_first(
    exits: List[ExitSnapshot], ids: List[str], rows: List[List[Optional[List[Any]]]]
) -> List[Tuple[str, List[Optional[List[Any]]]]]:
    """The matrix's rows, the exits in the worst states first (ties in pool order)."""
    rank = {e["exit_id"]: STATES.index(e["state"]) for e in exits}
    return sorted(zip(ids, rows), key=lambda r: -rank.get(r[0], 0))


def _count(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInput(f"{name} must be a whole number of at least 0, got {value!r}")
