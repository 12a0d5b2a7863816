"""What both renderers show, in the order they show it: the exits worst first, the sites
with incidents and bad sites first, the pool's figures in words.

Its own module because it joins the verdict and the formatting, which neither may depend on
the other way round, and both renderers read it.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Tuple

from ._format import _int, _pct, _secs
from ._schema import _STATE_RANK, STATES, _num, check
from ._verdict import FAIL_BELOW, _Grid, verdict


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
            return (
                _STATE_RANK.get(e.get("state", ""), len(STATES)),
                e["exit_id"] not in bad_e,
                2.0 if rate is None else rate,
                e["exit_id"],
            )

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
            (
                "sessions",
                f"{_int(p.get('sessions', self.snap.get('sessions')))} sessions · "
                f"{_int(p.get('live_leases', self.snap.get('live_leases')))} live leases",
            ),
        ]

    def states(self) -> List[Tuple[str, int]]:
        st = self.pool.get("states") or {}
        return [(s, _int(st.get(s))) for s in STATES]

    def incident_line(self) -> str:
        inc = sorted(self.incidents)
        if not inc:
            return "no open site incident"
        return f"{len(inc)} open site incident{'s' if len(inc) > 1 else ''}: {', '.join(inc)}"
