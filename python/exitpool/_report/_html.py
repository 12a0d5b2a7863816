"""The HTML renderer: the report as one self-contained page (inline CSS, no script, no external
asset) showing every exit and every site.

Its own module because the page and its stylesheet are most of the report's lines and
change for reasons of their own.
"""

from __future__ import annotations

import html
from typing import Any, Callable, Dict, List, Mapping

from ._format import _NO_DATA, _STATE_COLOURS, _age, _bucket, _cell_mark, _heat_css, _hex, _ink, _int, _pct, _rgb, _secs
from ._layout import _Layout
from ._schema import STATES, _num
from ._verdict import FAIL_BELOW

_CSS = """
*{box-sizing:border-box}
body{margin:0;padding:18px 24px;font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;
  color:#1d1d1f;background:#f6f7f9}
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
table.heat th.site div{writing-mode:vertical-rl;transform:rotate(180deg);white-space:nowrap;
  margin:0 auto;max-height:160px;overflow:hidden;text-overflow:ellipsis}
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
details.gateway{background:#fff;border:1px solid #dde1e6;border-radius:6px;margin:6px 0;padding:4px 8px}
details.gateway summary{cursor:pointer;font-size:13px}
details.gateway summary .id{font-weight:700}
details.gateway summary .out{color:#7a1010;font-weight:700}
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
    w('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">')
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

    # A gateway's slots are folded under it, here and in the tables below.
    gateways = [g for g in lay.snap.get("gateways") or [] if isinstance(g, dict)]
    slots_of: Dict[str, List[Dict[str, Any]]] = {str(g.get("gateway_id")): [] for g in gateways}
    plain: List[Dict[str, Any]] = []
    for e in lay.exits:
        gw = e.get("gateway")
        (slots_of[gw] if isinstance(gw, str) and gw in slots_of else plain).append(e)

    # The heatmap: every exit, every site.
    w("<h2>Success rate, exit × site — a red row is a bad exit, a red column a bad site</h2>")
    w('<div class="legend">')
    for x in (0.0, 0.25, 0.5, 0.75, 1.0):
        c = _rgb(x)
        w(f'<span class="sw" style="background:{_hex(c)};color:{_ink(c)}">{_pct(x)}</span>')
    w(
        f'<span class="sw" style="background:{_hex(_NO_DATA)};color:#888">·</span> no data · '
        "<b>Q</b> quarantined pair · <b>D</b> dead · ⚠ open site incident</div>"
    )
    if not g.sites:
        w("<p>No per-site data yet: lease with <code>site=...</code> to fill the matrix.</p>")
    else:
        w('<div class="scroll"><table class="heat"><thead><tr><th></th>')
        for j in lay.site_cols:
            s = g.sites[j]
            cls = "site" + (" inc" if s in lay.incidents else "") + (" bad" if s in lay.bad_sites else "")
            mark = '<span class="mark">⚠</span>' if s in lay.incidents else ""
            w(f'<th class="{cls}" title="{esc(s)}"><div>{esc(s)}</div>{mark}</th>')
        w('<th class="sum">fails on</th></tr></thead><tbody>')
        _heat_rows(w, plain, lay)
        for gid, slots in slots_of.items():
            if slots:
                # A gateway's slots in a row of their own, folded (a table cannot fold rows).
                failing = sum(1 for e in slots if e["exit_id"] in lay.bad_exits)
                w(f'<tr><td colspan="{len(lay.site_cols) + 2}"><details class="gateway-heat"><summary>')
                w(f"gateway {esc(gid)}: {len(slots)} slots, {failing} bad</summary>")
                w('<table class="heat"><tbody>')
                _heat_rows(w, slots, lay)
                w("</tbody></table></details></td></tr>")
        w('</tbody><tfoot><tr><th class="exit">fails on</th>')
        for j in lay.site_cols:
            f, n = lay.col_fails(j)
            w(f'<td class="sum{" bad" if g.sites[j] in lay.bad_sites else ""}" style="text-align:center">{f}/{n}</td>')
        w('<td class="sum">exits</td></tr></tfoot></table></div>\n')

    # The exits table, all of them.
    # The gateways, one row each, their slots folded; the plain exits' table below.
    if gateways:
        w("<h2>Gateways: one row each, its slots folded</h2>")
        for gw in gateways:
            gid = str(gw.get("gateway_id"))
            _gateway_row(w, gw, slots_of[gid], lay)
    w("<h2>Exits by state, worst first</h2>")
    _exits_table(w, plain, lay)
    _pacing_table(w, snapshot)
    w(
        '<p class="foot">Written by <code>exitpool report</code> from one <code>pool.snapshot()</code>. '
        f"A cell fails below {_pct(FAIL_BELOW)} success; proxies are shown masked.</p>\n</body></html>\n"
    )
    return "".join(out)


_EXIT_COLUMNS = (
    "exit",
    "proxy",
    "state",
    "for",
    "success",
    "captcha",
    "p50",
    "p95",
    "p99",
    "active",
    "sessions",
    "leases",
    "quarantines",
    "quarantined",
    "weight",
    "capacity",
)


def _pacing_table(w: Callable[[str], Any], snapshot: Mapping[str, Any]) -> None:
    """Every paced (exit, site) pair: its learned rate against its site's, its budget now."""
    pairs = [p for p in snapshot.get("pacing") or [] if isinstance(p, dict)]
    if not pairs:
        return
    esc = html.escape
    w('<h2>Pacing: each exit\'s learned rate per paced site</h2><table class="exits"><thead><tr>')
    w("".join(f"<th>{c}</th>" for c in ("exit", "site", "learned", "configured", "budget now", "next in")))
    w("</tr></thead><tbody>")
    for p in pairs:
        rate, ceiling = _num(p.get("rate")), _num(p.get("ceiling"))
        slowed = ' class="bad"' if rate is not None and ceiling is not None and rate < ceiling else ""
        w(
            f'<tr{slowed}><td class="id">{esc(str(p.get("exit_id")))}</td><td>{esc(str(p.get("site")))}</td>'
            f"<td>{rate if rate is not None else 0:.3g}/s</td><td>{esc(str(p.get('configured')))}</td>"
            f"<td>{_int(p.get('tokens'))}</td><td>{_secs(p.get('next_free'))}</td></tr>"
        )
    w("</tbody></table>\n")


def _gateway_row(w: Callable[[str], Any], gw: Mapping[str, Any], slots: List[Dict[str, Any]], lay: _Layout) -> None:
    """One gateway: its breaker and figures on one line (a ``<details>`` summary), its slots'
    table folded under it, so that a gateway of 500 slots is one row until opened."""
    esc = html.escape
    state = str(gw.get("state"))
    cause = gw.get("cause")
    by_state = gw.get("slot_states") or {}
    counts = ", ".join(f"{_int(by_state.get(s))} {s}" for s in STATES if _int(by_state.get(s)))
    t = _num(lay.snap.get("time"))
    nxt = _num(gw.get("next_rotation"))
    rotation = "never" if nxt is None else (f"in {_age(nxt - t)}" if t is not None else "–")
    lifetime = _num(gw.get("lifetime"))
    out = state != "healthy"
    w(f'<details class="gateway" data-gateway="{esc(str(gw.get("gateway_id")))}"><summary>')
    w(f'<span class="id">{esc(str(gw.get("gateway_id")))}</span> <span class="proxy">{esc(str(gw.get("proxy", "")))}</span> · ')
    w(f'<span class="{"out" if out else ""}" style="color:{_STATE_COLOURS.get(state, "#000")};font-weight:600">{esc(state)}</span>')
    if out and cause:
        w(f' <span class="out">({esc("wrong credentials: 407" if cause == "credentials" else "cannot connect")})</span>')
    w(
        f" · {_int(gw.get('slots'))} slots ({esc(counts or 'none')})"
        f" · lifetime {'never expires' if lifetime is None else _age(lifetime)} · next rotation {esc(rotation)}"
        f" · {_int(gw.get('rotations'))} rotations · {_int(gw.get('outages'))} outages"
        f" · {_int(gw.get('credential_rejections'))} × 407 · {_int(gw.get('absorbed'))} failures absorbed"
        f" · out {_age(gw.get('out_seconds'))}"
    )
    w("</summary>")
    _exits_table(w, slots, lay)
    w("</details>\n")


def _exits_table(w: Callable[[str], Any], exits: List[Dict[str, Any]], lay: _Layout) -> None:
    """The exits' table, one row each, in the order given."""
    esc = html.escape
    w('<div class="scroll"><table class="exits"><thead><tr>')
    for h in _EXIT_COLUMNS:
        w(f"<th>{h}</th>")
    w("</tr></thead><tbody>")
    for e in exits:
        state = str(e.get("state"))
        rate = _num(e.get("success_rate"))
        lat = e.get("latency") or {}
        bad = e["exit_id"] in lay.bad_exits
        c = _rgb(rate)
        weight = _num(e.get("weight"))
        w('<tr class="bad">' if bad else "<tr>")
        w(f'<td class="id">{esc(e["exit_id"])}</td><td class="proxy">{esc(str(e.get("proxy", "")))}</td>')
        w(
            f'<td style="color:{_STATE_COLOURS.get(state, "#000")};font-weight:600">'
            f"{esc(state)}{' (benched)' if e.get('benched') is True else ''}</td>"
        )
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


def _heat_rows(w: Callable[[str], Any], exits: List[Dict[str, Any]], lay: _Layout) -> None:
    """The heatmap's rows of `exits`, one each, in the order given."""
    esc, g = html.escape, lay.grid
    site_names = [esc(s) for s in g.sites]
    for e in exits:
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
