"""The terminal renderer (``rich``, the ``report`` extra): figures, exits by state, the
heatmap and the verdict, cut to the console's width.

Its own module because it alone needs rich, imported when it renders, so that the HTML page
works without it.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional

from ._format import _STATE_COLOURS, _age, _cell_mark, _hex, _ink, _int, _pct, _rgb, _secs
from ._layout import _Layout
from ._schema import _STATE_RANK, _num
from ._verdict import Verdict

#: Exits shown in the terminal before the rest are left to the HTML page.
TERMINAL_EXITS = 40


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
    from rich.console import Console
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
    table = Table(
        title="exits by state, worst first",
        title_justify="left",
        title_style="bold",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        padding=(0, 1),
        pad_edge=False,
    )
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

    _pacing_table(con, snapshot, Table, Text, box)

    # The verdict, last, where the eye lands.
    v = lay.verdict
    con.print()
    style = "green" if v.ok else "red"
    con.print(
        Panel(_verdict_text(v, Text), title="[bold]verdict: bad exit or bad site?[/]", title_align="left", border_style=style, expand=False)
    )


#: Paced pairs the terminal shows, the slowest learned rates (relative to their ceiling) first.
TERMINAL_PACED = 12


def _pacing_table(con: Any, snapshot: Mapping[str, Any], Table: Any, Text: Any, box: Any) -> None:
    """The paced (exit, site) pairs that learned a rate below their site's, slowest first."""
    pairs = [p for p in snapshot.get("pacing") or [] if isinstance(p, dict)]
    if not pairs:
        return
    cut = sorted((p for p in pairs if _pace_ratio(p) < 1.0), key=_pace_ratio)
    con.print()
    if not cut:
        con.print(Text(f"pacing: {len(pairs)} paced exit x site pairs, all at their configured rate", style="dim"))
        return
    table = Table(title=f"pacing: {len(cut)} of {len(pairs)} paced pairs slowed by 429s", title_justify="left", box=box.SIMPLE_HEAD)
    for name in ("exit", "site", "learned", "configured", "budget now", "next in"):
        table.add_column(name)
    for p in cut[:TERMINAL_PACED]:
        table.add_row(
            str(p.get("exit_id")),
            str(p.get("site")),
            f"{_num(p.get('rate')) or 0.0:.3g}/s",
            str(p.get("configured")),
            str(_int(p.get("tokens"))),
            _secs(p.get("next_free")),
        )
    con.print(table)


def _pace_ratio(p: Mapping[str, Any]) -> float:
    """The learned rate as a share of the configured one (1.0 when either is missing)."""
    rate, ceiling = _num(p.get("rate")), _num(p.get("ceiling"))
    return rate / ceiling if rate is not None and ceiling else 1.0


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
