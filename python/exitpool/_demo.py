"""`exitpool demo`: the same fleet workload run twice on the loopback testbed, once picking
exits the naive way (a random proxy from the list for every request) and once with exitpool,
then one table side by side.

The scenario, identical for both runs: 10 exits, of which two die early, one is burned
(banned by the site: 403) and one has a poor reputation (captchas); a site-wide incident
(503 on every IP) for a stretch in the middle; and one exit removed near the end (a pool
resize). 24 accounts with sticky sessions and 4 keyless workers make requests through
aiohttp for the whole run. Everything runs on 127.x addresses and stops by itself.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

from ._states import QUARANTINED

ACCOUNTS = 24
KEYLESS_WORKERS = 4
EXITS = 10
DEAD = ("exit-3", "exit-4")
BURNED = "exit-7"
FLAGGED = "exit-8"
REMOVED = "exit-9"
# When things happen, as shares of the run.
DIE_AT, INCIDENT_FROM, INCIDENT_TO, RESIZE_AT = 0.10, 0.40, 0.55, 0.75
THINK = (0.15, 0.35)  # seconds between one worker's requests


@dataclass
class Tally:
    sent: int = 0
    ok: int = 0
    captcha: int = 0
    challenged: int = 0
    dead: int = 0
    teleports: int = 0
    relogins: int = 0
    waits: int = 0
    false_quarantines: int = 0
    keys_moved: float = 0.0
    last_exit: Dict[str, str] = field(default_factory=dict)

    def row(self) -> Dict[str, str]:
        sent = max(1, self.sent)
        return {
            "requests sent": f"{self.sent:,}",
            "success rate": f"{self.ok / sent:.1%}",
            "captcha rate": f"{self.captcha / sent:.1%}",
            "account IP changes mid-session": f"{self.teleports:,}",
            "requests through dead exits": f"{self.dead:,}",
            "exits falsely quarantined in the incident": f"{self.false_quarantines}",
            "keys moved when one exit is removed": f"{self.keys_moved:.0%}",
        }


def _position(s: str) -> int:
    return int.from_bytes(hashlib.sha256(s.encode()).digest()[:8], "big")


class _World:
    """The testbed plus the scenario's clock: which exits are dead, is the incident on."""

    def __init__(self, tb: Any, duration: float) -> None:
        self.tb = tb
        self.duration = duration
        self.start = time.monotonic()
        self.incident = False
        self.dead: set = set()

    def elapsed(self) -> float:
        return (time.monotonic() - self.start) / self.duration

    async def script(self, on_resize: Callable[[], None]) -> None:
        """Kills, bans, the incident and the resize, at their moments; returns at the end."""
        tb = self.tb
        tb.site.ban(tb.proxy(BURNED).source_ip)
        tb.site.flag(tb.proxy(FLAGGED).source_ip)
        steps = [
            (DIE_AT, self._kill),
            (INCIDENT_FROM, lambda: self._incident(True)),
            (INCIDENT_TO, lambda: self._incident(False)),
            (RESIZE_AT, on_resize),
        ]
        for at, action in steps:
            await asyncio.sleep(max(0.0, at * self.duration - (time.monotonic() - self.start)))
            action()
        await asyncio.sleep(max(0.0, self.duration - (time.monotonic() - self.start)))

    def _kill(self) -> None:
        for name in DEAD:
            self.tb.proxy(name).kill()
            self.dead.add(name)

    def _incident(self, on: bool) -> None:
        self.incident = on
        self.tb.site.incident(on)


def _classify(status: int, body: str, headers: Any) -> str:
    if headers.get("X-Captcha") or "captcha" in body:
        return "captcha"
    if headers.get("X-Challenge"):
        return "challenge"
    return "ok" if status == 200 else "fail"


async def _naive(tb: Any, duration: float, progress: Callable[[str, Tally], None]) -> Tally:
    import aiohttp

    tally = Tally()
    world = _World(tb, duration)
    exits = {e.exit_id: e for e in tb.exits}
    live: List[str] = list(exits)
    url = tb.site_url + "/page"

    def resize() -> None:
        # hash % n over the list, the usual way to pin accounts without a ring.
        before = {f"acct-{i}": live[_position(f"acct-{i}") % len(live)] for i in range(10_000)}
        live.remove(REMOVED)
        moved = sum(1 for k, e in before.items() if live[_position(k) % len(live)] != e)
        tally.keys_moved = moved / len(before)

    # A 3-strikes check on the naive run's own traffic, the usual homegrown health check:
    # how many exits would it have quarantined during the incident?
    streak: Dict[str, int] = {}
    struck: set = set()

    async def worker(session: Any, account: Optional[str], seed: int) -> None:
        rnd = random.Random(seed)
        while world.elapsed() < 1.0:
            exit_id = rnd.choice(live)
            exit = exits[exit_id]
            headers = {"X-Account": account} if account else {}
            tally.sent += 1
            if exit_id in world.dead:
                tally.dead += 1
            try:
                async with session.get(url, proxy=exit.proxy, headers=headers, timeout=aiohttp.ClientTimeout(total=3)) as r:
                    verdict = _classify(r.status, await r.text(), r.headers)
            except (aiohttp.ClientError, asyncio.TimeoutError):
                verdict = "fail"
            if account:
                if tally.last_exit.get(account, exit_id) != exit_id:
                    tally.teleports += 1
                tally.last_exit[account] = exit_id
            tally.ok += verdict == "ok"
            tally.captcha += verdict == "captcha"
            tally.challenged += verdict == "challenge"
            streak[exit_id] = streak.get(exit_id, 0) + 1 if verdict == "fail" else 0
            if world.incident and streak[exit_id] >= 3 and exit_id not in world.dead and exit_id != BURNED:
                struck.add(exit_id)
            progress("naive", tally)
            await asyncio.sleep(rnd.uniform(*THINK))

    async with aiohttp.ClientSession() as session:
        workers = [worker(session, f"acct-{i}", i) for i in range(ACCOUNTS)]
        workers += [worker(session, None, 1000 + i) for i in range(KEYLESS_WORKERS)]
        await asyncio.gather(world.script(resize), *workers)
    tally.false_quarantines = len(struck)
    return tally


async def _write_snapshots(pool: Any, path: str, stop: asyncio.Event) -> None:
    """Every second, the pool's snapshot to `path`, replaced whole so a reader never sees half."""
    import json
    import os

    while not stop.is_set():
        tmp = f"{path}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(pool.snapshot(), f)
        os.replace(tmp, path)
        try:
            await asyncio.wait_for(stop.wait(), 1.0)
        except asyncio.TimeoutError:
            pass


async def _exitpool(
    tb: Any, duration: float, progress: Callable[[str, Tally], None], snapshot_path: Optional[str] = None
) -> Tuple[Tally, Any]:
    import aiohttp

    from . import Cooling, NoExitAvailable, Pool, SessionExitLost, WarmingUp
    from .probe import ProbeLoop

    tally = Tally()
    world = _World(tb, duration)
    site = tb.site.host_port
    # Four exits in ten go bad for this site (two die, one is banned, one draws captchas), and
    # the cap counts every exit out of service for the site, dead ones included: 40% lets all
    # four out (Envoy's 10% suits large pools, where one in ten is many exits).
    pool = Pool(tb.exits, strategy="weighted", seed=7, health={"max_ejected": 0.4})
    url = tb.site_url + "/page"
    session_exit: Dict[str, str] = {}

    def resize() -> None:
        keys = [f"acct-{i}" for i in range(10_000)]
        before = {k: pool.assign(k).exit_id for k in keys}
        pool.remove(REMOVED)
        tally.keys_moved = sum(1 for k in keys if pool.assign(k).exit_id != before[k]) / len(keys)

    incident_quarantines: set = set()

    @pool.on_event
    def watch(event: Dict[str, Any]) -> None:
        if world.incident and event["to"] == QUARANTINED and event["exit_id"] not in DEAD and event["exit_id"] != BURNED:
            incident_quarantines.add(event["exit_id"])

    async def worker(session: Any, account: Optional[str], seed: int) -> None:
        rnd = random.Random(seed)
        while world.elapsed() < 1.0:
            headers = {"X-Account": account} if account else {}
            try:
                async with pool.lease(account, site=site, timeout=1.0) as lease:
                    exit_id = lease.exit_id
                    if account:
                        if session_exit.get(account, exit_id) != exit_id:
                            tally.teleports += 1  # never: sessions only end between requests
                        session_exit[account] = exit_id
                    tally.sent += 1
                    if exit_id in world.dead:
                        tally.dead += 1
                    started = time.monotonic()
                    async with session.get(url, proxy=lease.proxy, headers=headers, timeout=aiohttp.ClientTimeout(total=3)) as r:
                        body = await r.text()
                        verdict = _classify(r.status, body, r.headers)
                        retry_after = r.headers.get("Retry-After")
                        lease.report(
                            status=r.status,
                            latency=time.monotonic() - started,
                            captcha=verdict == "captcha",
                            retry_after=float(retry_after) if retry_after and retry_after.isdigit() else None,
                        )
                tally.ok += verdict == "ok"
                tally.captcha += verdict == "captcha"
                tally.challenged += verdict == "challenge"
            except SessionExitLost as e:
                # The account's exit is gone: end the session (log in again) and rebind. Only a
                # keyed lease has a session to lose, and the pool names the key it was for.
                assert e.key is not None
                pool.end_session(e.key)
                session_exit.pop(e.key, None)
                tally.relogins += 1
            except (Cooling, WarmingUp, NoExitAvailable):
                tally.waits += 1
                await asyncio.sleep(0.2)
            except (aiohttp.ClientError, asyncio.TimeoutError):
                pass  # recorded as a failure by the lease
            progress("exitpool", tally)
            await asyncio.sleep(rnd.uniform(*THINK))

    stop = asyncio.Event()
    writer = asyncio.ensure_future(_write_snapshots(pool, snapshot_path, stop)) if snapshot_path else None
    async with aiohttp.ClientSession() as session:
        async with ProbeLoop(pool, tb.control_urls, interval=(1.0, 2.0), idle=5.0, timeout=2.0, seed=7):
            workers = [worker(session, f"acct-{i}", i) for i in range(ACCOUNTS)]
            workers += [worker(session, None, 1000 + i) for i in range(KEYLESS_WORKERS)]
            await asyncio.gather(world.script(resize), *workers)
    stop.set()
    if writer is not None:
        await writer
    tally.false_quarantines = len(incident_quarantines)
    return tally, pool.snapshot()


async def _one(
    kind: str, duration: float, progress: Callable[[str, Tally], None], snapshot_path: Optional[str] = None
) -> Tuple[Tally, Any]:
    from .testbed import Testbed

    # The site allows each IP 4 requests a second: spreading load matters.
    async with Testbed(n_exits=EXITS, rate=4.0, burst=6.0, ban_after=1000, seed=3) as tb:
        if kind == "naive":
            return await _naive(tb, duration, progress), None
        return await _exitpool(tb, duration, progress, snapshot_path)


ROWS = (
    ("success rate", True),
    ("captcha rate", False),
    ("account IP changes mid-session", False),
    ("requests through dead exits", False),
    ("exits falsely quarantined in the incident", False),
    ("keys moved when one exit is removed", False),
)


def table(naive: Tally, pool: Tally) -> List[Tuple[str, str, str]]:
    a, b = naive.row(), pool.row()
    return [(name, a[name], b[name]) for name in ["requests sent", *(r for r, _ in ROWS)]]


def run(duration: float, *, plain: bool, out: Any, snapshot_path: Optional[str] = None) -> Tuple[Tally, Tally, Any]:
    """Both runs, one after the other, with a live display unless `plain`."""
    results: Dict[str, Tally] = {}
    snapshot = None
    if plain:
        last = [0.0]

        def progress(kind: str, t: Tally) -> None:
            now = time.monotonic()
            if now - last[0] >= 5.0:
                last[0] = now
                print(f"  {kind}: {t.sent:,} requests, {t.ok:,} ok, {t.dead:,} through dead exits", file=out, flush=True)

        for kind in ("naive", "exitpool"):
            print(f"running {kind} for {duration:.0f} s ...", file=out, flush=True)
            results[kind], snap = asyncio.run(_one(kind, duration, progress, snapshot_path))
            snapshot = snap or snapshot
        return results["naive"], results["exitpool"], snapshot

    from rich.console import Console
    from rich.live import Live
    from rich.table import Table

    console = Console(file=out)
    current: Dict[str, Tally] = {}

    def render() -> Table:
        t = Table(title=f"exitpool demo: the same fleet twice, {duration:.0f} s each", expand=False)
        t.add_column("")
        for kind in ("naive", "exitpool"):
            t.add_column(kind, justify="right")
        rows = {k: current[k].row() for k in current}
        for name in ["requests sent", *(r for r, _ in ROWS[:4])]:
            t.add_row(name, *(rows.get(k, {}).get(name, "…") for k in ("naive", "exitpool")))
        return t

    with Live(render(), console=console, refresh_per_second=4) as live:

        def progress(kind: str, t: Tally) -> None:
            current[kind] = t
            live.update(render())

        for kind in ("naive", "exitpool"):
            results[kind], snap = asyncio.run(_one(kind, duration, progress, snapshot_path))
            snapshot = snap or snapshot
    return results["naive"], results["exitpool"], snapshot
