#!/usr/bin/env python3
"""Benchmark: live-session load per exit, with and without bounded loads (``balance_factor``).

Run from the repository root (any build works; this measures placement, not speed):

    python bench/balance.py            # a few seconds
    python bench/balance.py --quick    # fewer keys

For each pool shape, 20,000 account keys (``account-00000`` ...) are each leased once
(``acquire`` then ``release``), in order, with a ``session_ttl`` so large that every session
stays live: at the end each exit carries the sessions that were bound to it, read from
``pool.snapshot()["exits"][i]["sessions"]``.

Load is measured against each exit's capacity-weighted share: ``expected_i = total *
capacity_i / sum(capacities)`` and ``load_i = sessions_i / expected_i``. With equal capacities
that is just sessions / mean. The table shows max and min of ``load_i`` (max/mean and min/mean),
their spread (stdev of ``load_i``), and how many sessions were placed past their ring exit by
the bounded-loads walk (``lease.strategy == "ring_bounded"``), in all and after the first
1,000 keys (early walks come from the bound's rounding while few sessions are live): those
keys live elsewhere than the ring says, which is the price of the bound (a worker without the
shared live state would compute another exit for them).

Shapes: 100 exits of capacity 1, and 100 exits of mixed capacity (1, 1, 2, 3, 6 repeated:
total weight 260). Both use the pool's default 160 ring points per unit of capacity. Every
shape runs without ``balance_factor`` (the default) and with 1.25 and 2.0 (HAProxy's suggested
range). The script always exits 0.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time

try:
    import exitpool
    from exitpool import Exit, Pool
except ImportError:  # pragma: no cover
    sys.exit("exitpool is not importable: run `maturin develop --release` first")
from timing import run_report

FACTORS = [None, 1.25, 2.0]
MIXED = [1, 1, 2, 3, 6]
EARLY = 1_000  # walks among the first keys come from rounding while few sessions are live


def shapes():
    yield "100 x capacity 1", [1] * 100
    yield "100 mixed (1,1,2,3,6)", [MIXED[i % len(MIXED)] for i in range(100)]


def measure(capacities, n_keys, factor):
    exits = [Exit(f"sess-{i:04d}", f"http://gw.example:{8000 + i}", capacity=c) for i, c in enumerate(capacities)]
    pool = Pool(exits, session_ttl=1e7, lease_ttl=1e7, balance_factor=factor)
    walked = walked_late = 0
    for i in range(n_keys):
        lease = pool.acquire(f"account-{i:05d}")
        if lease.strategy == "ring_bounded":
            walked += 1
            walked_late += i >= EARLY
        pool.release(lease)
    snap = pool.snapshot()
    sessions = [e["sessions"] for e in snap["exits"]]
    caps = [e["capacity"] for e in snap["exits"]]
    assert sum(sessions) == n_keys == snap["sessions"], "every key should hold a live session"
    weight = sum(max(1, c) for c in caps)
    load = [s / (n_keys * max(1, c) / weight) for s, c in zip(sessions, caps)]
    busiest = max(range(len(load)), key=load.__getitem__)
    return {
        "max": max(load),
        "min": min(load),
        "stdev": statistics.pstdev(load),
        "walked": walked,
        "walked_late": walked_late,
        "busiest": f"{sessions[busiest]} on cap {caps[busiest]}",
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="5,000 keys instead of 20,000")
    ap.add_argument("--keys", type=int, default=None, help="number of account keys")
    args = ap.parse_args()
    n_keys = args.keys or (5_000 if args.quick else 20_000)
    started = time.perf_counter()

    print(f"exitpool {exitpool.__version__} session balance - Python {platform.python_version()}")
    print(
        f"{n_keys:,} keys, each leased once, all sessions live; {exitpool.DEFAULT_REPLICAS} ring points "
        "per unit of capacity; load = sessions / capacity-weighted share\n"
    )
    head = (
        f"{'pool':<24}{'balance_factor':>15}{'max/mean':>10}{'min/mean':>10}{'stdev':>8}"
        f"{'walked past ring':>18}{f'after {EARLY:,}':>12}{'busiest exit':>18}"
    )
    print(head)
    print("-" * len(head))
    for name, caps in shapes():
        for factor in FACTORS:
            r = measure(caps, n_keys, factor)
            walked = f"{r['walked']:,} ({r['walked'] / n_keys:.1%})"
            print(
                f"{name:<24}{'off' if factor is None else format(factor, 'g'):>15}{r['max']:>10.3f}"
                f"{r['min']:>10.3f}{r['stdev']:>8.3f}{walked:>18}{r['walked_late']:>12,}{r['busiest']:>18}"
            )
        print("-" * len(head))
    print("With a factor c, no exit takes a new session once it holds ceil(c x its share of the live")
    print("sessions, counting the new one); max/mean stays at or under c (up to that rounding).")
    print(f"'after {EARLY:,}': walks among keys after the first {EARLY:,}. While few sessions are live the")
    print("rounded bound is 1 or 2 sessions, so early keys walk even with c = 2; later, c = 2 never binds.")
    print(f"\n(total run time {time.perf_counter() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    run_report(main)
