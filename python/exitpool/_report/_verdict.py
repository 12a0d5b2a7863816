"""The verdict: which exits and which sites of a snapshot are bad, worst first, and why.

How the verdict reads the exit x site matrix: a cell *fails* when its recent success rate is
below one half. A failing cell is explained by its row (a bad exit) or by its column (a bad
site). An exit is bad when it fails on at least half of the sites it served, bad sites
aside; a site is bad when at least two exits, and at least half of those that served it, fail
there, bad exits aside. The two judgements are iterated to a fixed point from both ends (sites
first, exits first) and the reading that explains the matrix with fewer mismatches wins. The
pool's own judgements are taken as given: a dead or quarantined exit is bad, a site with an
open incident is bad. An exit with no per-site data is judged on its overall success rate
against the other exits'.

Its own module because it is the one mechanism of the report; the renderers only show it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Mapping, Optional, Sequence, Tuple

from .._states import HEALTHY, QUARANTINED, _ejected
from ._format import _pct
from ._schema import _STATE_RANK, STATES, _is_num, _num, check

#: A matrix cell fails when its recent success rate is below this.
FAIL_BELOW = 0.5

# The outcome classes that are failures, with their words, most telling first.
_FAILURES = (
    ("connect", "connect error", "connect errors"),
    ("timeout", "timeout", "timeouts"),
    ("block", "block", "blocks"),
    ("captcha", "captcha", "captchas"),
    ("rate_limited", "rate limit", "rate limits"),
    ("target_error", "target error", "target errors"),
    ("other", "other error", "other errors"),
)


@dataclass(frozen=True)
class Finding:
    """One bad exit or bad site: where it fails, of where it was tried, and why in words."""

    name: str
    failed: int
    tried: int
    reason: str

    def __str__(self) -> str:
        return f"{self.name} ({self.reason})" if self.reason else self.name


@dataclass(frozen=True)
class Verdict:
    """The bad exits and bad sites of a snapshot, worst first, plus pool-wide notes."""

    bad_exits: Tuple[Finding, ...]
    bad_sites: Tuple[Finding, ...]
    notes: Tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.bad_exits and not self.bad_sites and not self.notes

    def line(self, limit: Optional[int] = 5) -> str:
        """The verdict in one line, naming at most ``limit`` exits and sites each."""
        if self.ok:
            return "no bad exit, no bad site"

        def names(items: Sequence[Finding]) -> str:
            if not items:
                return "none"
            shown = items if limit is None else items[:limit]
            text = ", ".join(str(f) for f in shown)
            if len(items) > len(shown):
                text += f", and {len(items) - len(shown)} more"
            return text

        parts = [f"bad exits: {names(self.bad_exits)}", f"bad sites: {names(self.bad_sites)}"]
        return " · ".join(parts + list(self.notes))

    def __str__(self) -> str:
        return self.line()


class _Grid:
    """The matrix, read by column name, with one success rate per judged cell."""

    def __init__(self, snapshot: Mapping[str, Any]) -> None:
        m = snapshot["matrix"]
        self.exits: List[str] = list(m["exits"])
        self.sites: List[str] = list(m["sites"])
        self.col = {name: i for i, name in enumerate(m["columns"])}
        self.cells: List[List[Optional[list]]] = m["cells"]

    def get(self, i: int, j: int, column: str) -> Any:
        cell = self.cells[i][j]
        k = self.col.get(column)
        if cell is None or k is None:
            return None
        return cell[k]

    def rate(self, i: int, j: int) -> Optional[float]:
        """The cell's success rate if it has reports to judge by, else None."""
        reports = self.get(i, j, "reports")
        if reports is not None and (not _is_num(reports) or reports <= 0):
            return None
        return _num(self.get(i, j, "success_rate"))


def _failing_words(outcomes: Any) -> str:
    """The most frequent failing outcome class, as "35 blocks"."""
    if not isinstance(outcomes, dict):
        return ""
    best = max(_FAILURES, key=lambda f: outcomes.get(f[0], 0) if _is_num(outcomes.get(f[0], 0)) else 0)
    n = outcomes.get(best[0], 0)
    if not _is_num(n) or n <= 0:
        return ""
    return f"{int(n)} {best[1] if n == 1 else best[2]}"


def _judge(fails: List[List[Optional[bool]]], forced_rows: set, forced_cols: set, rows_first: bool) -> Tuple[frozenset, frozenset]:
    ne = len(fails)
    ns = len(fails[0]) if fails else 0

    def rows_given(cols: frozenset) -> frozenset:
        out = set(forced_rows)
        for i in range(ne):
            seen = [f for j, f in enumerate(fails[i]) if j not in cols and f is not None]
            bad = sum(seen)
            if bad >= 1 and 2 * bad >= len(seen):
                out.add(i)
        return frozenset(out)

    def cols_given(rows: frozenset) -> frozenset:
        out = set(forced_cols)
        for j in range(ns):
            seen = [f for i, f in enumerate(row[j] for row in fails) if i not in rows and f is not None]
            bad = sum(seen)
            if bad >= 2 and 2 * bad >= len(seen):
                out.add(j)
        return frozenset(out)

    rows: frozenset = frozenset(forced_rows)
    cols: frozenset = frozenset(forced_cols)
    for _ in range(2 * (ne + ns) + 2):
        if rows_first:
            new_rows = rows_given(cols)
            new_cols = cols_given(new_rows)
        else:
            new_cols = cols_given(rows)
            new_rows = rows_given(new_cols)
        if (new_rows, new_cols) == (rows, cols):
            break
        rows, cols = new_rows, new_cols
    return rows, cols


def _mismatches(fails: List[List[Optional[bool]]], rows: frozenset, cols: frozenset) -> int:
    n = 0
    for i, row in enumerate(fails):
        for j, f in enumerate(row):
            if f is not None and f != (i in rows or j in cols):
                n += 1
    return n


def verdict(snapshot: Mapping[str, Any]) -> Verdict:
    """Which exits and which sites are bad, worst first, with the reason for each in words.

    >>> v = verdict(pool.snapshot())            # doctest: +SKIP
    >>> [f.name for f in v.bad_exits], [f.name for f in v.bad_sites]   # doctest: +SKIP
    (['e3'], ['shop.example'])
    """
    snap = check(snapshot)
    g = _Grid(snap)
    ne, ns = len(g.exits), len(g.sites)
    rates = [[g.rate(i, j) for j in range(ns)] for i in range(ne)]
    fails: List[List[Optional[bool]]] = [[None if r is None else r < FAIL_BELOW for r in row] for row in rates]

    by_id = {e["exit_id"]: e for e in snap["exits"]}
    site_info = {s.get("site"): s for s in snap.get("sites", []) if isinstance(s, dict)}
    pool = snap["pool"]
    incidents = set(x for x in pool.get("incidents") or [] if isinstance(x, str))
    # A site object without a string name names no site (as for the pool's list above).
    incidents |= {name for name, s in site_info.items() if isinstance(name, str) and s.get("incident") is True}

    forced_rows = {i for i, x in enumerate(g.exits) if _ejected(by_id.get(x, {}).get("state"))}
    forced_cols = {j for j, s in enumerate(g.sites) if s in incidents}
    readings = []
    for rows_first in (False, True):
        rows, cols = _judge(fails, forced_rows, forced_cols, rows_first)
        readings.append((_mismatches(fails, rows, cols), len(rows) + len(cols), rows, cols))
    _, _, bad_rows, bad_cols = min(readings, key=lambda r: (r[0], r[1]))

    # Exits the matrix says nothing about: their overall success rate against the others'.
    judged_overall = set()
    overall = sorted(r for r in (_num(e.get("success_rate")) for e in snap["exits"]) if r is not None)
    typical = overall[len(overall) // 2] if overall else None
    row_of = {x: i for i, x in enumerate(g.exits)}
    for e in snap["exits"]:
        i = row_of.get(e["exit_id"])
        if i is not None and any(f is not None for f in fails[i]):
            continue
        rate = _num(e.get("success_rate"))
        if rate is not None and rate < FAIL_BELOW and typical is not None and typical >= FAIL_BELOW:
            judged_overall.add(e["exit_id"])

    bad_exits: List[Tuple[tuple, Finding]] = []
    bad_exit_ids = {g.exits[i] for i in bad_rows} | judged_overall
    bad_exit_ids |= {e["exit_id"] for e in snap["exits"] if _ejected(e.get("state"))}
    for exit_id in bad_exit_ids:
        e = by_id.get(exit_id, {})
        i = row_of.get(exit_id)
        seen = [f for f in (fails[i] if i is not None else []) if f is not None]
        failed, tried = sum(seen), len(seen)
        words = []
        if tried == 0:
            rate = _num(e.get("success_rate"))
            words.append(f"{_pct(rate)} success overall" if rate is not None else "no site data")
        elif failed == tried:
            words.append("fails on every site" if tried > 1 else "fails on its only site")
        else:
            words.append(f"fails on {failed}/{tried} sites")
        detail = [w for w in (_failing_words(e.get("outcomes")),) if w]
        state = e.get("state")
        if state in STATES and state != HEALTHY:
            q = e.get("quarantines")
            detail.append(f"{state} ({int(q)}x)" if state == QUARANTINED and _is_num(q) and q > 1 else str(state))
        reason = words[0] + (": " + ", ".join(detail) if detail else "")
        rank = (_STATE_RANK.get(state, len(STATES)), -(failed / tried if tried else 1.0), exit_id)
        bad_exits.append((rank, Finding(exit_id, failed, tried, reason)))

    bad_sites: List[Tuple[tuple, Finding]] = []
    for j in bad_cols:
        site = g.sites[j]
        seen = [fails[i][j] for i in range(ne) if fails[i][j] is not None]
        failed, tried = sum(seen), len(seen)
        detail = []
        if site in incidents:
            detail.append("open site incident")
        w = _failing_words(site_info.get(site, {}).get("outcomes"))
        if w:
            detail.append(w)
        reason = f"fails on {failed}/{tried} exits" if tried else "no exit data"
        reason += ": " + ", ".join(detail) if detail else ""
        rank = (site not in incidents, -(failed / tried if tried else 1.0), site)
        bad_sites.append((rank, Finding(site, failed, tried, reason)))
    # Incidents on sites the matrix does not list (e.g. a site with no cell yet).
    for site in sorted(incidents - set(g.sites)):
        bad_sites.append(((False, -1.0, site), Finding(site, 0, 0, "open site incident")))

    notes = []
    if pool.get("global_incident") is True:
        notes.append("global incident open: tunnels fail everywhere, the fault is on our side (network, probes), no exit is judged")
    judged = [f for row in fails for f in row if f is not None]
    if ne >= 2 and ns >= 2 and judged and all(judged) and len(judged) >= 4:
        notes.append("every exit fails on every site: look at our side first (network, credentials, client)")

    return Verdict(
        tuple(f for _, f in sorted(bad_exits, key=lambda x: x[0])),
        tuple(f for _, f in sorted(bad_sites, key=lambda x: x[0])),
        tuple(notes),
    )


def summary(snapshot: Mapping[str, Any]) -> str:
    """The verdict in one line (what ``exitpool report --html`` prints)."""
    return verdict(snapshot).line()
