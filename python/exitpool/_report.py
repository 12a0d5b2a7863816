"""The pool report: "bad exit or bad site?" answered from one ``pool.snapshot()``.

One mechanism, :func:`verdict`, decides which exits and which sites are bad; two renderers
show it beside the figures it came from: :func:`render_terminal` (``rich``, the ``report``
extra) and :func:`render_html` (a self-contained page: inline CSS, no script, no external
asset). ``exitpool report SNAPSHOT.json`` is the command line for both.

How the verdict reads the exit x site matrix: a cell *fails* when its recent success rate is
below one half. A failing cell is explained by its row (a bad exit) or by its column (a bad
site). An exit is bad when it fails on at least half of the sites it served, bad sites
aside; a site is bad when at least two exits, and at least half of those that served it, fail
there, bad exits aside. The two judgements are iterated to a fixed point from both ends (sites
first, exits first) and the reading that explains the matrix with fewer mismatches wins. The
pool's own judgements are taken as given: a dead or quarantined exit is bad, a site with an
open incident is bad. An exit with no per-site data is judged on its overall success rate
against the other exits'.

Nothing here reads a credential: the snapshot carries proxies masked by the core already, and
the renderers show exit ids and masked proxies only.
"""

from __future__ import annotations

import html
import json
import math
import sys
from dataclasses import dataclass
from typing import IO, Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

__all__ = ["Finding", "SnapshotError", "Verdict", "load", "render_html", "render_terminal", "verdict"]

#: Health states, worst first: the order of the exits table.
STATES = ("dead", "quarantined", "probing", "degraded", "healthy")
_STATE_RANK = {s: i for i, s in enumerate(STATES)}
#: A matrix cell fails when its recent success rate is below this.
FAIL_BELOW = 0.5
#: Exits shown in the terminal before the rest are left to the HTML page.
TERMINAL_EXITS = 40

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


class SnapshotError(ValueError):
    """The input is not a pool snapshot (``pool.snapshot()`` written as JSON)."""


# --------------------------------------------------------------------------------------------
# Reading and checking a snapshot


def load(source: Union[str, IO[str]]) -> Dict[str, Any]:
    """Read a snapshot from a path, ``"-"`` (standard input) or an open text file, and check
    it. Raises :class:`SnapshotError` (not JSON, not a snapshot) or :class:`OSError`."""
    if hasattr(source, "read"):
        name, text = getattr(source, "name", "<input>"), source.read()  # type: ignore[union-attr]
    elif source == "-":
        name, text = "<stdin>", sys.stdin.read()
    else:
        name = str(source)
        try:
            with open(name, encoding="utf-8") as f:
                text = f.read()
        except FileNotFoundError:
            raise SnapshotError(f"{name}: no such file") from None
        except IsADirectoryError:
            raise SnapshotError(f"{name}: is a directory, not a snapshot file") from None
        except UnicodeDecodeError:
            raise SnapshotError(f"{name}: not JSON (not UTF-8 text)") from None
    if not text.strip():
        raise SnapshotError(f"{name}: empty, expected a JSON pool snapshot")
    try:
        data = json.loads(text)
    except ValueError as e:
        raise SnapshotError(f"{name}: not JSON ({e})") from None
    try:
        return check(data)
    except SnapshotError as e:
        raise SnapshotError(f"{name}: {e}") from None


def _is_num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _num(x: Any) -> Optional[float]:
    """A finite number, or None for anything else (None, NaN, a string)."""
    if _is_num(x) and math.isfinite(x):
        return float(x)
    return None


def check(snapshot: Any) -> Dict[str, Any]:
    """Return ``snapshot`` if it has the shape the report reads, else raise
    :class:`SnapshotError` saying what is wrong."""

    def need(cond: bool, what: str) -> None:
        if not cond:
            raise SnapshotError(f"not a pool snapshot ({what})")

    need(isinstance(snapshot, dict), f"a JSON {type(snapshot).__name__}, expected an object")
    for key in ("pool", "exits", "matrix"):
        need(key in snapshot, f"no {key!r}")
    pool, exits, m = snapshot["pool"], snapshot["exits"], snapshot["matrix"]
    need(isinstance(pool, dict), "'pool' is not an object")
    need(isinstance(exits, list), "'exits' is not a list")
    for i, e in enumerate(exits):
        need(isinstance(e, dict) and isinstance(e.get("exit_id"), str), f"exits[{i}] has no exit_id")
    need(isinstance(m, dict), "'matrix' is not an object")
    for key in ("exits", "sites", "columns", "cells"):
        need(isinstance(m.get(key), list), f"matrix has no {key!r} list")
    need(all(isinstance(x, str) for x in m["exits"]), "matrix exits are not strings")
    need(all(isinstance(x, str) for x in m["sites"]), "matrix sites are not strings")
    need("success_rate" in m["columns"], "matrix columns have no 'success_rate'")
    need(len(m["cells"]) == len(m["exits"]), "matrix has not one row of cells per exit")
    width = len(m["columns"])
    for i, row in enumerate(m["cells"]):
        need(isinstance(row, list) and len(row) == len(m["sites"]), f"matrix row {i} has not one cell per site")
        for cell in row:
            need(cell is None or (isinstance(cell, list) and len(cell) == width), f"a cell of matrix row {i} is malformed")
    sites = snapshot.get("sites", [])
    need(isinstance(sites, list) and all(isinstance(s, dict) for s in sites), "'sites' is not a list of objects")
    return snapshot


# --------------------------------------------------------------------------------------------
# The verdict


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

    forced_rows = {i for i, x in enumerate(g.exits) if by_id.get(x, {}).get("state") in ("dead", "quarantined")}
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
    bad_exit_ids |= {e["exit_id"] for e in snap["exits"] if e.get("state") in ("dead", "quarantined")}
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
        if state in ("dead", "quarantined", "probing", "degraded"):
            q = e.get("quarantines")
            detail.append(f"{state} ({int(q)}x)" if state == "quarantined" and _is_num(q) and q > 1 else str(state))
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


# --------------------------------------------------------------------------------------------
# Shared formatting


def _pct(x: Any) -> str:
    v = _num(x)
    if v is None:
        return "–"
    p = round(v * 100)
    if p == 100 and v < 1:
        p = 99
    if p == 0 and v > 0:
        return "<1%"
    return f"{p}%"


def _secs(x: Any) -> str:
    """A latency or a wait: "136 ms", "1.24 s", "12.3 s"."""
    v = _num(x)
    if v is None:
        return "–"
    if v < 1:
        return f"{v * 1000:.0f} ms"
    if v < 10:
        return f"{v:.2f} s"
    return f"{v:.1f} s"


def _age(x: Any) -> str:
    """A duration in state: "30s", "5m", "2h05m", "3d04h"."""
    v = _num(x)
    if v is None or v < 0:
        return "–"
    v = int(v)
    if v < 60:
        return f"{v}s"
    if v < 3600:
        return f"{v // 60}m{v % 60:02d}s" if v < 600 else f"{v // 60}m"
    if v < 86400:
        return f"{v // 3600}h{v % 3600 // 60:02d}m"
    return f"{v // 86400}d{v % 86400 // 3600:02d}h"


def _int(x: Any) -> int:
    v = _num(x)
    return int(v) if v is not None else 0


# Success rate to colour: red (0) through amber (0.5) to green (1).
_STOPS = ((0.0, (198, 40, 40)), (0.5, (245, 166, 35)), (1.0, (46, 139, 60)))
_NO_DATA = (204, 204, 204)
_STATE_COLOURS = {
    "dead": "#3d3d3d",
    "quarantined": "#b23c17",
    "probing": "#3465a4",
    "degraded": "#b8860b",
    "healthy": "#2e7d32",
}


def _rgb(rate: Optional[float]) -> Tuple[int, int, int]:
    """The heatmap colour of a success rate (None: no data, grey)."""
    if rate is None:
        return _NO_DATA
    r = min(1.0, max(0.0, rate))
    for (a, ca), (b, cb) in zip(_STOPS, _STOPS[1:]):
        if r <= b:
            t = (r - a) / (b - a)
            return tuple(round(x + (y - x) * t) for x, y in zip(ca, cb))  # type: ignore[return-value]
    return _STOPS[-1][1]


def _bucket(rate: float) -> int:
    """The whole percent a heatmap cell is coloured by (what _pct prints, 0..100)."""
    p = round(min(1.0, max(0.0, rate)) * 100)
    return 99 if p == 100 and rate < 1 else p


def _heat_css() -> str:
    rules = []
    for p in range(101):
        c = _rgb(p / 100)
        rules.append(f".p{p}{{background:{_hex(c)};color:{_ink(c)}}}")
    return "\n".join(rules) + "\n"


def _hex(c: Tuple[int, int, int]) -> str:
    return "#%02x%02x%02x" % c


def _ink(c: Tuple[int, int, int]) -> str:
    """Black or white text, whichever reads on this background."""
    lum = 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2]
    return "#000000" if lum > 150 else "#ffffff"


def _cell_mark(state: Any) -> str:
    return {"quarantined": "Q", "dead": "D"}.get(state, "")


class _Layout:
    """What both renderers show, in the order they show it."""

    def __init__(self, snapshot: Mapping[str, Any]) -> None:
        self.snap = check(snapshot)
        self.verdict = verdict(self.snap)
        self.grid = _Grid(self.snap)
        self.pool: Dict[str, Any] = self.snap["pool"]
        bad_e = {f.name for f in self.verdict.bad_exits}
        bad_s = {f.name for f in self.verdict.bad_sites}
        self.bad_exits, self.bad_sites = bad_e, bad_s

        def exit_key(e: Mapping[str, Any]) -> tuple:
            rate = _num(e.get("success_rate"))
            # No state ranks like an unknown one: after every known state.
            return (_STATE_RANK.get(e.get("state", ""), len(STATES)), e["exit_id"] not in bad_e, 2.0 if rate is None else rate, e["exit_id"])

        self.exits: List[Dict[str, Any]] = sorted(self.snap["exits"], key=exit_key)
        g = self.grid
        self.rates: List[List[Optional[float]]] = [[g.rate(i, j) for j in range(len(g.sites))] for i in range(len(g.exits))]
        self.row_of = {x: i for i, x in enumerate(g.exits)}
        incidents = set(self.pool.get("incidents") or [])
        incidents |= {s.get("site") for s in self.snap.get("sites", []) if s.get("incident") is True}
        self.incidents = {x for x in incidents if isinstance(x, str)}

        def site_key(j: int) -> tuple:
            seen = [r for r in (row[j] for row in self.rates) if r is not None]
            mean = sum(seen) / len(seen) if seen else 2.0
            s = g.sites[j]
            return (s not in self.incidents, s not in bad_s, mean, s)

        self.site_cols: List[int] = sorted(range(len(g.sites)), key=site_key)

    def row(self, exit_id: str) -> Optional[int]:
        return self.row_of.get(exit_id)

    def row_fails(self, i: Optional[int]) -> Tuple[int, int]:
        if i is None:
            return 0, 0
        seen = [r < FAIL_BELOW for r in self.rates[i] if r is not None]
        return sum(seen), len(seen)

    def col_fails(self, j: int) -> Tuple[int, int]:
        seen = [r < FAIL_BELOW for r in (row[j] for row in self.rates) if r is not None]
        return sum(seen), len(seen)

    def figures(self) -> List[Tuple[str, str]]:
        """(label, value) pairs of the pool figures, in words."""
        p = self.pool
        ho = p.get("half_open") or {}
        wait = p.get("wait") or {}
        trials = _int(ho.get("trials"))
        succeeded = _int(ho.get("succeeded", ho.get("recovered")))  # "recovered" in early snapshots
        half_open = f"{succeeded}/{trials} trials succeeded ({_pct(ho.get('success_rate'))})" if trials else "no trial yet"
        return [
            ("in service", f"{_int(p.get('in_service'))} of {_int(p.get('exits', len(self.exits)))} exits"),
            ("benched", str(_int(p.get("benched")))),
            ("throughput", f"{_num(p.get('throughput')) or 0:.2f} leases/s"),
            ("Gini", f"{_num(p.get('gini')) or 0:.2f}"),
            ("ejected", _pct(p.get("ejected_fraction"))),
            ("half-open", half_open),
            ("wait p99", f"{_secs(wait.get('p99'))} (p50 {_secs(wait.get('p50'))})"),
            ("sessions", f"{_int(p.get('sessions', self.snap.get('sessions')))} sessions · {_int(p.get('live_leases', self.snap.get('live_leases')))} live leases"),
        ]

    def states(self) -> List[Tuple[str, int]]:
        st = self.pool.get("states") or {}
        return [(s, _int(st.get(s))) for s in STATES]

    def incident_line(self) -> str:
        inc = sorted(self.incidents)
        if not inc:
            return "no open site incident"
        return f"{len(inc)} open site incident{'s' if len(inc) > 1 else ''}: {', '.join(inc)}"


# --------------------------------------------------------------------------------------------
# Terminal


def _require_rich() -> None:
    try:
        import rich  # noqa: F401
    except ImportError:
        raise ImportError("the terminal report needs rich: pip install 'exitpool[report]'") from None


def render_terminal(
    snapshot: Mapping[str, Any],
    console: Any = None,
    *,
    max_exits: int = TERMINAL_EXITS,
    max_sites: Optional[int] = None,
) -> None:
    """Print the report with ``rich``: figures, exits by state, the heatmap, the verdict.

    At most ``max_exits`` exits (worst first) and as many sites as fit the console's width
    (or ``max_sites``) are shown, with a note saying what was left out."""
    _require_rich()
    from rich import box
    from rich.console import Console, Group
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    lay = _Layout(snapshot)
    con = console if console is not None else Console(highlight=False)
    g = lay.grid
    n_exits, n_sites = len(lay.exits), len(g.sites)

    # Header: figures and, loudest, the incidents.
    head = Table.grid(padding=(0, 2))
    head.add_column(style="dim", no_wrap=True)
    head.add_column()
    states = Text()
    for k, (s, n) in enumerate(lay.states()):
        if k:
            states.append(" · ", style="dim")
        states.append(f"{n} {s}", style=f"bold {_STATE_COLOURS[s]}" if n else "dim")
    figs = dict(lay.figures())
    in_service = f"{_int(lay.pool.get('in_service'))} in service of {_int(lay.pool.get('exits', n_exits))}"
    head.add_row("exits", f"{in_service} · {figs['benched']} benched · {figs['sessions']}")
    head.add_row("states", states)
    head.add_row("traffic", f"{figs['throughput']} · Gini {figs['Gini']} · wait p99 {figs['wait p99']}")
    head.add_row("health", f"ejected {figs['ejected']} · half-open {figs['half-open']}")
    if lay.incidents:
        head.add_row(Text("incidents", style="bold red"), Text(f" ⚠ {lay.incident_line()} ", style="bold white on red"))
    else:
        head.add_row("incidents", Text(lay.incident_line(), style="green"))
    if lay.pool.get("global_incident") is True:
        head.add_row(Text("global", style="bold red"), Text(" ⚠ global incident: tunnels failing everywhere ", style="bold white on red"))
    t = _num(lay.snap.get("time"))
    subtitle = f"{n_exits} exits · {n_sites} sites" + (f" · at t={t:.0f} s" if t is not None else "")
    con.print(Panel(head, title="[bold]exitpool report[/]", subtitle=subtitle, box=box.ROUNDED, expand=False))

    shown = lay.exits[: max(1, max_exits)]
    # Exits by state, worst first.
    table = Table(title="exits by state, worst first", title_justify="left", title_style="bold", box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 1), pad_edge=False)
    table.add_column("exit", no_wrap=True, max_width=24, overflow="ellipsis")
    table.add_column("state", no_wrap=True)
    table.add_column("for", justify="right", no_wrap=True)
    table.add_column("success", justify="right")
    table.add_column("captcha", justify="right")
    table.add_column("p50", justify="right", no_wrap=True)
    table.add_column("p99", justify="right", no_wrap=True)
    table.add_column("active", justify="right")
    table.add_column("quar.", justify="right")
    for e in shown:
        state = str(e.get("state"))
        rate = _num(e.get("success_rate"))
        lat = e.get("latency") or {}
        bad = e["exit_id"] in lay.bad_exits
        table.add_row(
            Text(e["exit_id"] + (" ✗" if bad else ""), style="bold red" if bad else ""),
            Text(state + (" (benched)" if e.get("benched") is True else ""), style=_STATE_COLOURS.get(state, "")),
            _age(e.get("time_in_state")),
            Text(_pct(rate), style=_hex(_rgb(rate)) if rate is not None else "dim"),
            _pct(e.get("captcha_rate")),
            _secs(lat.get("p50")),
            _secs(lat.get("p99")),
            str(_int(e.get("active_leases"))),
            str(_int(e.get("quarantines"))) if _int(e.get("quarantines")) else Text("0", style="dim"),
        )
    con.print(table)
    if len(shown) < n_exits:
        rest = lay.exits[len(shown) :]
        by_state: Dict[str, int] = {}
        for e in rest:
            by_state[str(e.get("state"))] = by_state.get(str(e.get("state")), 0) + 1
        left = ", ".join(f"{n} {s}" for s, n in sorted(by_state.items(), key=lambda x: _STATE_RANK.get(x[0], 9)))
        con.print(Text(f"showing the worst {len(shown)} of {n_exits} exits; not shown: {left} (--html FILE shows all)", style="italic dim"))

    # The heatmap.
    con.print()
    con.print(Text("success rate, exit x site: a red row is a bad exit, a red column a bad site", style="bold"))
    if not n_sites:
        con.print(Text("no per-site data yet: lease with site=... to fill the matrix", style="dim"))
    else:
        id_w = min(24, max([8] + [len(e["exit_id"]) for e in shown]))
        room = con.width - id_w - 12  # the exit column, the row sums
        col_w = min(14, max([5] + [len(_short(s)) + (1 if s in lay.incidents else 0) for s in g.sites]))
        if n_sites * (col_w + 1) > room:  # narrower columns before fewer of them
            col_w = max(min(col_w, 8), room // n_sites - 1)
        fits = max(1, room // (col_w + 1))
        n_cols = min(n_sites, fits if max_sites is None else max(1, max_sites))
        cols = lay.site_cols[:n_cols]
        heat = Table(box=None, padding=(0, 1, 0, 0), pad_edge=False, show_edge=False, collapse_padding=True)
        heat.add_column("", no_wrap=True, max_width=id_w, overflow="ellipsis")
        for j in cols:
            s = g.sites[j]
            label = ("!" if s in lay.incidents else "") + _short(s)
            style = "bold red" if s in lay.incidents or s in lay.bad_sites else ""
            heat.add_column(Text(label, style=style), justify="center", no_wrap=True, width=col_w, overflow="ellipsis")
        heat.add_column(Text("fails on", style="dim"), justify="right", no_wrap=True)
        for e in shown:
            i = lay.row(e["exit_id"])
            bad = e["exit_id"] in lay.bad_exits
            cells: List[Any] = [Text(e["exit_id"], style="bold red" if bad else "")]
            for j in cols:
                rate = lay.rates[i][j] if i is not None else None
                if i is None or rate is None:  # an exit missing from the matrix has no cells
                    cells.append(Text("·", style="#8a8a8a on #3a3a3a", justify="center"))
                    continue
                c = _rgb(rate)
                text = _pct(rate).rstrip("%") + _cell_mark(g.get(i, j, "state"))
                cells.append(Text(text, style=f"bold {_ink(c)} on {_hex(c)}", justify="center"))
            f, n = lay.row_fails(i)
            cells.append(Text(f"{f}/{n} sites" if n else "–", style="bold red" if bad else "dim"))
            heat.add_row(*cells)
        foot: List[Any] = [Text("fails on", style="dim")]
        for j in cols:
            f, n = lay.col_fails(j)
            foot.append(Text(f"{f}/{n}", style="bold red" if g.sites[j] in lay.bad_sites else "dim", justify="center"))
        foot.append(Text("exits", style="dim"))
        heat.add_row(*foot)
        con.print(heat)
        legend = Text("  ")
        for level in (0.0, 0.25, 0.5, 0.75, 1.0):
            c = _rgb(level)
            legend.append(f"{_pct(level):>5}", style=f"{_ink(c)} on {_hex(c)}")
        legend.append("  ")
        legend.append(" · ", style="#8a8a8a on #3a3a3a")
        legend.append(" no data  Q quarantined  D dead  ! open incident", style="dim")
        con.print(legend)
        notes = []
        if len(shown) < n_exits:
            notes.append(f"the worst {len(shown)} of {n_exits} exits")
        if n_cols < n_sites:
            notes.append(f"the worst {n_cols} of {n_sites} sites (widen the terminal or use --width)")
        if notes:
            con.print(Text("showing " + " and ".join(notes) + "; --html FILE shows all", style="italic dim"))

    # The verdict, last, where the eye lands.
    v = lay.verdict
    con.print()
    style = "green" if v.ok else "red"
    con.print(Panel(_verdict_text(v, Text), title="[bold]verdict: bad exit or bad site?[/]", title_align="left", border_style=style, expand=False))


def _short(site: str) -> str:
    return site[4:] if site.startswith("www.") else site


def _verdict_text(v: Verdict, Text: Any) -> Any:
    t = Text()
    if v.ok:
        t.append("no bad exit, no bad site", style="bold green")
        return t
    for label, items in (("bad exits", v.bad_exits), ("bad sites", v.bad_sites)):
        t.append(f"{label}: ", style="bold")
        if not items:
            t.append("none", style="green")
        for k, f in enumerate(items[:10]):
            if k:
                t.append(", ")
            t.append(f.name, style="bold red")
            t.append(f" ({f.reason})")
        if len(items) > 10:
            t.append(f", and {len(items) - 10} more")
        t.append("\n")
    for note in v.notes:
        t.append("⚠ " + note + "\n", style="bold red")
    t.rstrip()
    return t


# --------------------------------------------------------------------------------------------
# HTML

_CSS = """
*{box-sizing:border-box}
body{margin:0;padding:18px 24px;font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;color:#1d1d1f;background:#f6f7f9}
h1{font-size:20px;margin:0 8px 0 0;display:inline-block}
h2{font-size:15px;margin:18px 0 6px}
.meta{color:#666;display:inline-block}
.incident{margin:10px 0;padding:8px 12px;border-radius:6px;background:#7a1010;color:#fff;font-weight:700;font-size:15px}
.incident.none{background:#e3f1e5;color:#1b5e20;font-weight:600}
.verdict{margin:10px 0;padding:10px 14px;border-radius:6px;border-left:6px solid #7a1010;background:#fff}
.verdict.ok{border-left-color:#1b5e20}
.verdict h2{margin:0 0 4px}
.verdict ul{margin:2px 0;padding-left:20px}
.verdict .name{font-weight:700;color:#7a1010}
.verdict .note{color:#7a1010;font-weight:600}
.figs{display:flex;flex-wrap:wrap;gap:8px;margin:10px 0}
.fig{background:#fff;border:1px solid #dde1e6;border-radius:6px;padding:6px 10px;min-width:110px}
.fig .k{font-size:11px;color:#666;text-transform:uppercase;letter-spacing:.03em}
.fig .v{font-size:16px;font-weight:600}
.states{display:flex;gap:10px;flex-wrap:wrap}
.st{font-weight:600}
.st.zero{color:#999;font-weight:400}
.scroll{overflow:auto;max-width:100%}
table{border-collapse:collapse}
table.heat td.c{width:46px;min-width:46px;height:24px;text-align:center;font-size:12px;font-weight:600;border:1px solid #f6f7f9}
table.heat td.c.nd{color:#888}
table.heat th.site{vertical-align:bottom;font-weight:600;font-size:12px;padding:0 0 4px}
table.heat th.site div{writing-mode:vertical-rl;transform:rotate(180deg);white-space:nowrap;margin:0 auto;max-height:160px;overflow:hidden;text-overflow:ellipsis}
table.heat th.site.inc div,table.heat th.site.bad div{color:#7a1010}
table.heat th.site .mark{display:block;color:#7a1010;font-size:14px;line-height:16px}
table.heat th.exit{text-align:right;padding:0 8px 0 0;font-weight:600;font-size:12px;white-space:nowrap}
table.heat th.exit.bad{color:#7a1010}
table.heat .sum{font-size:12px;color:#666;padding:0 6px;white-space:nowrap}
table.heat .sum.bad{color:#7a1010;font-weight:700}
.legend{display:flex;gap:4px;align-items:center;margin:6px 0;font-size:12px;color:#444;flex-wrap:wrap}
.legend span.sw{display:inline-block;width:40px;text-align:center;font-weight:600;padding:1px 0}
table.exits{background:#fff;border:1px solid #dde1e6;font-size:13px}
table.exits th{background:#eef0f3;text-align:left;padding:4px 8px;font-weight:600}
table.exits td{padding:3px 8px;border-top:1px solid #eef0f3;white-space:nowrap}
table.exits td.n{text-align:right;font-variant-numeric:tabular-nums}
table.exits tr.bad td.id{color:#7a1010;font-weight:700}
.proxy{color:#666;font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px}
.foot{color:#888;font-size:12px;margin-top:14px}
"""


def render_html(snapshot: Mapping[str, Any], *, title: str = "exitpool report") -> str:
    """The report as one self-contained HTML page: the figures, the verdict, the heatmap of
    every exit and every site, and the exits table. Inline CSS, no script, no external asset."""
    lay = _Layout(snapshot)
    g = lay.grid
    esc = html.escape
    out: List[str] = []
    w = out.append
    t = _num(lay.snap.get("time"))
    w("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">")
    w('<meta name="viewport" content="width=device-width, initial-scale=1">')
    w(f"<title>{esc(title)}</title><style>{_CSS}{_heat_css()}</style></head><body>\n")
    meta = f"{len(lay.exits)} exits · {len(g.sites)} sites" + (f" · snapshot at t={t:.0f} s" if t is not None else "")
    w(f'<header><h1>{esc(title)}</h1><span class="meta">{esc(meta)}</span></header>\n')

    # Incidents, loudest.
    if lay.incidents:
        w(f'<div class="incident">⚠ {esc(lay.incident_line())}</div>\n')
    else:
        w('<div class="incident none">no open site incident</div>\n')
    if lay.pool.get("global_incident") is True:
        w('<div class="incident">⚠ global incident: tunnels failing everywhere, the fault is on our side</div>\n')

    # The verdict.
    v = lay.verdict
    w(f'<section class="verdict{" ok" if v.ok else ""}"><h2>Verdict: bad exit or bad site?</h2>')
    if v.ok:
        w("<p>No bad exit, no bad site.</p>")
    else:
        for label, items in (("Bad exits", v.bad_exits), ("Bad sites", v.bad_sites)):
            if not items:
                w(f"<div>{label}: none</div>")
                continue
            w(f"<div>{label}:</div><ul>")
            for finding in items:
                w(f'<li><span class="name">{esc(finding.name)}</span> — {esc(finding.reason)}</li>')
            w("</ul>")
        for note in v.notes:
            w(f'<div class="note">⚠ {esc(note)}</div>')
    w("</section>\n")

    # The figures.
    w('<section class="figs">')
    w('<div class="fig"><div class="k">states</div><div class="v states">')
    for s, n in lay.states():
        colour = _STATE_COLOURS[s] if n else "#999"
        w(f'<span class="st{"" if n else " zero"}" style="color:{colour}">{n} {s}</span>')
    w("</div></div>")
    for k, val in lay.figures():
        w(f'<div class="fig"><div class="k">{esc(k)}</div><div class="v">{esc(val)}</div></div>')
    w("</section>\n")

    # The heatmap: every exit, every site.
    w("<h2>Success rate, exit × site — a red row is a bad exit, a red column a bad site</h2>")
    w('<div class="legend">')
    for x in (0.0, 0.25, 0.5, 0.75, 1.0):
        c = _rgb(x)
        w(f'<span class="sw" style="background:{_hex(c)};color:{_ink(c)}">{_pct(x)}</span>')
    w(f'<span class="sw" style="background:{_hex(_NO_DATA)};color:#888">·</span> no data · '
      "<b>Q</b> quarantined pair · <b>D</b> dead · ⚠ open site incident</div>")
    if not g.sites:
        w("<p>No per-site data yet: lease with <code>site=...</code> to fill the matrix.</p>")
    else:
        site_names = [esc(s) for s in g.sites]
        w('<div class="scroll"><table class="heat"><thead><tr><th></th>')
        for j in lay.site_cols:
            s = g.sites[j]
            cls = "site" + (" inc" if s in lay.incidents else "") + (" bad" if s in lay.bad_sites else "")
            mark = '<span class="mark">⚠</span>' if s in lay.incidents else ""
            w(f'<th class="{cls}" title="{esc(s)}"><div>{esc(s)}</div>{mark}</th>')
        w('<th class="sum">fails on</th></tr></thead><tbody>')
        for e in lay.exits:
            x = e["exit_id"]
            i = lay.row(x)
            bad = x in lay.bad_exits
            w(f'<tr><th class="exit{" bad" if bad else ""}">{esc(x)}</th>')
            ex = esc(x)
            for j in lay.site_cols:
                rate = lay.rates[i][j] if i is not None else None
                if i is None or rate is None:  # an exit missing from the matrix has no cells
                    w('<td class="c nd">·</td>')
                    continue
                state = g.get(i, j, "state")
                tip = f"{ex} × {site_names[j]}: {_pct(rate)} of {_int(g.get(i, j, 'reports'))}, {esc(str(state))}"
                w(f'<td class="c p{_bucket(rate)}" title="{tip}">{_pct(rate).rstrip("%")}{_cell_mark(state)}</td>')
            f, n = lay.row_fails(i)
            w(f'<td class="sum{" bad" if bad else ""}">{f"{f}/{n} sites" if n else "–"}</td></tr>')
        w('</tbody><tfoot><tr><th class="exit">fails on</th>')
        for j in lay.site_cols:
            f, n = lay.col_fails(j)
            w(f'<td class="sum{" bad" if g.sites[j] in lay.bad_sites else ""}" style="text-align:center">{f}/{n}</td>')
        w('<td class="sum">exits</td></tr></tfoot></table></div>\n')

    # The exits table, all of them.
    w("<h2>Exits by state, worst first</h2>")
    w('<div class="scroll"><table class="exits"><thead><tr>')
    for h in ("exit", "proxy", "state", "for", "success", "captcha", "p50", "p95", "p99", "active", "sessions", "leases", "quarantines", "quarantined", "weight", "capacity"):
        w(f"<th>{h}</th>")
    w("</tr></thead><tbody>")
    for e in lay.exits:
        state = str(e.get("state"))
        rate = _num(e.get("success_rate"))
        lat = e.get("latency") or {}
        bad = e["exit_id"] in lay.bad_exits
        c = _rgb(rate)
        weight = _num(e.get("weight"))
        w('<tr class="bad">' if bad else "<tr>")
        w(f'<td class="id">{esc(e["exit_id"])}</td><td class="proxy">{esc(str(e.get("proxy", "")))}</td>')
        w(f'<td style="color:{_STATE_COLOURS.get(state, "#000")};font-weight:600">{esc(state)}{" (benched)" if e.get("benched") is True else ""}</td>')
        w(f'<td class="n">{_age(e.get("time_in_state"))}</td>')
        if rate is None:
            w('<td class="n">–</td>')
        else:
            w(f'<td class="n" style="background:{_hex(c)};color:{_ink(c)};font-weight:600">{_pct(rate)}</td>')
        w(f'<td class="n">{_pct(e.get("captcha_rate"))}</td>')
        for q in ("p50", "p95", "p99"):
            w(f'<td class="n">{_secs(lat.get(q))}</td>')
        w(f'<td class="n">{_int(e.get("active_leases"))}</td><td class="n">{_int(e.get("sessions"))}</td>')
        w(f'<td class="n">{_int(e.get("leases"))}</td><td class="n">{_int(e.get("quarantines"))}</td>')
        w(f'<td class="n">{_age(e.get("quarantined_seconds"))}</td>')
        w(f'<td class="n">{"–" if weight is None else f"{weight:.2f}"}</td><td class="n">{_int(e.get("capacity"))}</td></tr>')
    w("</tbody></table></div>\n")
    w('<p class="foot">Written by <code>exitpool report</code> from one <code>pool.snapshot()</code>. '
      f"A cell fails below {_pct(FAIL_BELOW)} success; proxies are shown masked.</p>\n</body></html>\n")
    return "".join(out)


def summary(snapshot: Mapping[str, Any]) -> str:
    """The verdict in one line (what ``exitpool report --html`` prints)."""
    return verdict(snapshot).line()
