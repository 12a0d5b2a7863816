"""Shared formatting: figures in words (percent, seconds, ages) and success rates in colour
(the heatmap's scale, the state colours), for both renderers.

Its own module because the terminal and the HTML page must print the same figure the same
way, and the verdict words its reasons with the same percentages.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

from .._states import DEAD, DEGRADED, HEALTHY, PROBING, QUARANTINED
from ._schema import _num


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
    DEAD: "#3d3d3d",
    QUARANTINED: "#b23c17",
    PROBING: "#3465a4",
    DEGRADED: "#b8860b",
    HEALTHY: "#2e7d32",
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
    return "#{:02x}{:02x}{:02x}".format(*c)


def _ink(c: Tuple[int, int, int]) -> str:
    """Black or white text, whichever reads on this background."""
    lum = 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2]
    return "#000000" if lum > 150 else "#ffffff"


def _cell_mark(state: Any) -> str:
    return {QUARANTINED: "Q", DEAD: "D"}.get(state, "")
