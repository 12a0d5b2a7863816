"""`exitpool demo`: the same fleet workload run three times on the loopback testbed: picking
exits the naive way (a random proxy from the list for every request), with exitpool, and with
an oracle told the world's truth (the upper bound), then one table side by side.

The scenario (``exitpool.testbed.Scenario.demo()``), identical for every run: 10 exits, of
which two die early, one is burned (banned by the site: 403) and one has a poor reputation
(captchas); a site-wide incident (503 on every IP) for a stretch in the middle; and one exit
removed near the end (a pool resize). 24 accounts with sticky sessions and 4 keyless workers
make requests through aiohttp for the whole run. Everything runs on 127.x addresses and stops
by itself.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from .testbed._scenario import Naive, Oracle, Outcome, PoolPolicy, Scenario

SCENARIO = Scenario.demo()
EXITS = SCENARIO.exits
KINDS = ("naive", "exitpool", "oracle")


def _position(s: str) -> int:
    return int.from_bytes(hashlib.sha256(s.encode()).digest()[:8], "big")


def keys_moved(kind: str, scenario: Scenario = SCENARIO, n: int = 10_000) -> float:
    """The share of accounts that move when ``scenario.removed`` leaves: ``hash % n`` over the
    list (naive), the ring (exitpool), only the removed exit's own accounts (oracle)."""
    ids = scenario.exit_ids
    if scenario.removed is None:
        return 0.0
    if kind == "oracle":
        return 1 / len(ids)
    keys = [f"acct-{i}" for i in range(n)]
    if kind == "naive":
        after = [e for e in ids if e != scenario.removed]
        return sum(1 for k in keys if ids[_position(k) % len(ids)] != after[_position(k) % len(after)]) / n
    from . import Exit, Pool

    pool = Pool([Exit(e, "http://127.0.0.1:9") for e in ids])
    before = {k: pool.assign(k).exit_id for k in keys}
    pool.remove(scenario.removed)
    return sum(1 for k in keys if pool.assign(k).exit_id != before[k]) / n


def _seconds(s: Optional[float], left: float) -> str:
    return f"{s:.1f}s" if s is not None else f">{left:.1f}s"


def row(o: Outcome) -> Dict[str, str]:
    sent = max(1, o.sent)
    left = o.duration * (1 - o.scenario.incident[1])
    return {
        "requests sent": f"{o.sent:,}",
        "successes": f"{o.ok:,}",
        "success rate": f"{o.ok / sent:.1%}",
        "captcha rate": f"{o.verdicts['captcha'] / sent:.1%}",
        "account IP changes mid-session": f"{o.teleports:,}",
        "requests into dead exits": f"{o.into_dead:,}",
        "exits falsely quarantined in the incident": f"{o.extra.get('false quarantines', 0)}",
        "keys moved when one exit is removed": f"{o.extra.get('keys moved', 0.0):.0%}",
        "time to full traffic after the incident": _seconds(o.time_to_full_traffic(), left),
    }


# Rows and whether more is better (the others: less is better).
ROWS = (
    ("successes", True),
    ("success rate", True),
    ("captcha rate", False),
    ("account IP changes mid-session", False),
    ("requests into dead exits", False),
    ("exits falsely quarantined in the incident", False),
    ("keys moved when one exit is removed", False),
    ("time to full traffic after the incident", False),
)


def table(outcomes: Dict[str, Outcome]) -> List[Tuple[str, ...]]:
    rows = {k: row(outcomes[k]) for k in KINDS}
    return [(name, *(rows[k][name] for k in KINDS)) for name in ["requests sent", *(r for r, _ in ROWS)]]


def headline(outcomes: Dict[str, Outcome]) -> str:
    return f"exitpool reached {outcomes['exitpool'].share_of(outcomes['oracle']):.0%} of the oracle's successes"


def _policy(kind: str, snapshot_path: Optional[str]) -> Any:
    if kind == "naive":
        return Naive()
    if kind == "oracle":
        return Oracle()
    return PoolPolicy(snapshot_path=snapshot_path)


def _one(kind: str, duration: float, progress: Callable[[Outcome], None], snapshot_path: Optional[str]) -> Tuple[Outcome, Any]:
    policy = _policy(kind, snapshot_path)
    outcome = asyncio.run(SCENARIO.arun(policy, duration, progress=progress))
    outcome.extra["keys moved"] = keys_moved(kind)
    return outcome, policy.pool.snapshot() if kind == "exitpool" else None


def run(duration: float, *, plain: bool, out: Any, snapshot_path: Optional[str] = None) -> Tuple[Dict[str, Outcome], Any]:
    """The three runs, one after the other, with a live display unless `plain`; returns the
    outcomes by kind and exitpool's final snapshot."""
    results: Dict[str, Outcome] = {}
    snapshot = None
    if plain:
        last = [0.0]

        def progress(o: Outcome) -> None:
            now = time.monotonic()
            if now - last[0] >= 5.0:
                last[0] = now
                print(f"  {o.name}: {o.sent:,} requests, {o.ok:,} ok, {o.into_dead:,} into dead exits", file=out, flush=True)

        for kind in KINDS:
            print(f"running {kind} for {duration:.0f} s ...", file=out, flush=True)
            results[kind], snap = _one(kind, duration, progress, snapshot_path)
            snapshot = snap or snapshot
        return results, snapshot

    from rich.console import Console
    from rich.live import Live
    from rich.table import Table

    console = Console(file=out)
    current: Dict[str, Outcome] = {}

    def render() -> Table:
        t = Table(title=f"exitpool demo: the same fleet three times, {duration:.0f} s each", expand=False)
        t.add_column("")
        for kind in KINDS:
            t.add_column(kind, justify="right")
        rows = {k: row(current[k]) for k in current}
        for name in ["requests sent", *(r for r, _ in ROWS[:5])]:
            t.add_row(name, *(rows.get(k, {}).get(name, "…") for k in KINDS))
        return t

    with Live(render(), console=console, refresh_per_second=4) as live:
        shown = [0.0]

        def progress(o: Outcome) -> None:
            # Four renders a second at most: a row reads the whole request log.
            current[o.name] = o
            now = time.monotonic()
            if now - shown[0] >= 0.25:
                shown[0] = now
                live.update(render())

        for kind in KINDS:
            results[kind], snap = _one(kind, duration, progress, snapshot_path)
            snapshot = snap or snapshot
            current[kind] = results[kind]
            live.update(render())  # the run's last figures, whatever the throttle skipped
    return results, snapshot
