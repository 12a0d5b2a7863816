"""What `pool.snapshot()` costs on a large pool, and what it costs the threads leasing meanwhile.

    python bench/snapshot.py                  # 10,000 exits x 5 sites, every cell filled
    python bench/snapshot.py --quick          # 1,000 exits x 5 sites
    python bench/snapshot.py --exits 1000 --sites 100
    python bench/snapshot.py --gateway --exits 5000   # a 5,000-slot gateway against 5,000 exits

Prints, all measured in this one run:

- one `acquire` + `release` pair (round robin, no site), the unit the stalls are compared to;
- `snapshot()` (best and median of several), the summary form `snapshot(exits=False)`, a
  filtered one (one tag value) and one Prometheus scrape (`PoolCollector.collect()` at its
  defaults), each also as a share of a 5 s polling interval;
- the worst and the 99.9th percentile gap between two lease pairs of a thread leasing in a loop,
  first with nothing else running (the baseline: the interpreter's own switches and the
  machine's noise) and then while the main thread takes snapshots (whole, summary) or scrapes
  back to back; the ratio of the worst gaps says how much each stalls a leasing thread. What
  remains with whole snapshots is mostly the interpreter's: freeing the previous snapshot's
  million objects and the garbage collector's passes over them, both with the GIL held.

With ``--gateway``: instead, `snapshot()` and `snapshot(exits=False)` of a pool whose exits
are the slots of one gateway against a pool of as many plain exits, filled alike, alternating
in one run; the ratio says what a slot costs a snapshot beyond a plain exit.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import threading
import time
from typing import Callable, List, Tuple

from exitpool import Exit, Gateway, ManualClock, Pool

COUNTRIES = ("us", "de", "fr", "gb", "nl", "jp", "br", "in", "ca", "au")


def filled_pool(n_exits: int, n_sites: int, gateway: bool = False) -> Tuple[Pool, ManualClock]:
    """A pool of `n_exits` exits tagged by country, every (exit, site) cell with reports; with
    `gateway`, the exits are the slots of one gateway (10-minute tokens) instead."""
    clock = ManualClock(1_700_000_000.0)
    members: List[object] = [
        Exit(f"exit-{i:06d}", f"http://user:pw@10.{i // 62500}.{i // 250 % 250}.{i % 250}:8000", tags={"country": COUNTRIES[i % 10]})
        for i in range(0 if gateway else n_exits)
    ]
    if gateway:
        members.append(
            Gateway(
                "gw",
                "http://user:pw@gw.example:7777",
                slots=n_exits,
                username="{user}-session-{session}",
                lifetime=600,
                tags={"country": "de"},
            )
        )
    pool = Pool(members, strategy="round_robin", clock=clock, seed=1)
    for j in range(n_sites):
        site = f"site-{j:03d}.example"
        for i in range(n_exits):
            lease = pool.acquire(site=site)
            pool.release(lease, status=503 if (i + j) % 11 == 0 else 200, latency=0.05 + (i % 10) * 0.02)
        clock.advance(1.0)
    return pool, clock


def timed(fn: Callable[[], object], rounds: int) -> Tuple[float, float]:
    """Best and median seconds of `rounds` calls."""
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times), statistics.median(times)


def pair_ns(pool: Pool, n: int = 20000) -> float:
    t = time.perf_counter()
    for _ in range(n):
        pool.release(pool.acquire())
    return (time.perf_counter() - t) / n * 1e9


def gaps_while(pool: Pool, busy: Callable[[], object], seconds: float) -> Tuple[float, float, int, int]:
    """A thread leases in a loop for `seconds` while the main thread calls `busy` back to back
    (or sleeps, for `busy=None`): the worst and the 99.9th percentile gap between two of its
    pairs, its number of pairs, and the number of `busy` calls."""
    stop = threading.Event()
    gaps: List[float] = []

    def lease_loop() -> None:
        last = time.perf_counter()
        while not stop.is_set():
            pool.release(pool.acquire())
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    t = threading.Thread(target=lease_loop)
    t.start()
    calls = 0
    deadline = time.perf_counter() + seconds
    try:
        while time.perf_counter() < deadline:
            if busy is None:
                time.sleep(0.05)
            else:
                busy()
                calls += 1
    finally:
        stop.set()
        t.join()
    gaps.sort()
    return gaps[-1], gaps[int(len(gaps) * 0.999)], len(gaps), calls


def gateway_ratio(n_exits: int, n_sites: int, rounds: int) -> None:
    """`snapshot()` per exit of a pool of one `n_exits`-slot gateway against one of `n_exits`
    plain exits, measured alternately in this one run."""
    plain, _ = filled_pool(n_exits, n_sites)
    slots, _ = filled_pool(n_exits, n_sites, gateway=True)
    assert len(slots.snapshot(exits=False)["gateways"]) == 1
    for name, call in (("snapshot()", lambda p: p.snapshot()), ("snapshot(exits=False)", lambda p: p.snapshot(exits=False))):
        best = {"plain": float("inf"), "gateway": float("inf")}
        for _ in range(rounds):
            for label, pool in (("plain", plain), ("gateway", slots)):
                # The collector's passes over the previous snapshot's objects are noise here.
                gc.collect()
                gc.disable()
                t = time.perf_counter()
                call(pool)
                best[label] = min(best[label], time.perf_counter() - t)
                gc.enable()
        per = {k: v / n_exits * 1e6 for k, v in best.items()}
        print(
            f"{name:24} {n_exits:,} plain exits best {best['plain'] * 1e3:7.1f} ms ({per['plain']:.2f} us/exit), "
            f"{n_exits:,}-slot gateway {best['gateway'] * 1e3:7.1f} ms ({per['gateway']:.2f} us/exit): "
            f"ratio {best['gateway'] / best['plain']:.2f}"
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="1,000 exits and shorter runs")
    ap.add_argument("--exits", type=int, default=None)
    ap.add_argument("--sites", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=None, help="length of each stall run")
    ap.add_argument("--gateway", action="store_true", help="a gateway's slots against as many plain exits")
    args = ap.parse_args()
    n_exits = args.exits or (1000 if args.quick else 10000)
    seconds = args.seconds or (1.0 if args.quick else 3.0)
    rounds = 5 if args.quick else 9
    if args.gateway:
        gateway_ratio(n_exits, args.sites, rounds)
        return

    t = time.perf_counter()
    pool, _ = filled_pool(n_exits, args.sites)
    print(f"{n_exits:,} exits x {args.sites} sites, every cell filled (built and filled in {time.perf_counter() - t:.1f} s)")
    pair = pair_ns(pool)
    print(f"lease pair (acquire + release): {pair:,.0f} ns")

    snap = pool.snapshot()
    print(f"snapshot JSON: {len(json.dumps(snap)) / 1e6:.1f} MB, {len(snap['exits']):,} exits")
    # Not kept alive: the garbage collector's full passes would walk its million objects
    # during every measurement below (a stall of the benchmark's making, not the pool's).
    del snap
    budget = 5.0
    forms: List[Tuple[str, Callable[[], object]]] = [
        ("snapshot()", pool.snapshot),
        ("snapshot(exits=False)", lambda: pool.snapshot(exits=False)),
        ("snapshot(tags={'country': 'de'})", lambda: pool.snapshot(tags={"country": "de"})),
    ]
    collector = None
    try:
        from exitpool.prometheus import PoolCollector

        collector = PoolCollector(pool)
        forms.append(("PoolCollector.collect()", lambda: list(collector.collect())))
    except ImportError:
        pass
    for name, fn in forms:
        try:
            best, median = timed(fn, rounds)
        except TypeError as e:  # an older build without the summary form
            print(f"{name:36} n/a ({e})")
            continue
        print(f"{name:36} best {best * 1e3:8.1f} ms, median {median * 1e3:8.1f} ms ({median / budget:.1%} of a {budget:.0f} s poll)")

    base_worst, base_p999, base_n, _ = gaps_while(pool, None, seconds)
    print(f"{'leasing thread alone:':41} worst gap {base_worst * 1e3:7.2f} ms, p99.9 {base_p999 * 1e6:8.1f} us ({base_n:,} pairs)")
    stalls: List[Tuple[str, Callable[[], object]]] = [
        ("snapshot()", pool.snapshot),
        ("snapshot(exits=False)", lambda: pool.snapshot(exits=False)),
    ]
    if collector is not None:
        stalls.append(("PoolCollector.collect()", lambda: list(collector.collect())))
    for name, fn in stalls:
        try:
            worst, p999, n, calls = gaps_while(pool, fn, seconds)
        except TypeError as e:  # an older build without the summary form
            print(f"while {name}: n/a ({e})")
            continue
        print(
            f"while {name + ' runs:':36} worst gap {worst * 1e3:7.2f} ms, p99.9 {p999 * 1e6:8.1f} us ({n:,} pairs, {calls} calls); "
            f"worst {worst / base_worst:.1f}x the baseline's"
        )


if __name__ == "__main__":
    main()
