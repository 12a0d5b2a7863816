#!/usr/bin/env python3
"""Benchmark: resident memory per exit, per live session and per warm-up pairing, and what a
flood of one-off keys keeps under the default bounds.

Run from the repository root after a release build (``maturin develop --release``):

    python bench/memory.py                 # 100,000 exits; 900,000 one-off keys
    python bench/memory.py --keys 100000   # a shorter flood

Each figure is a difference of the process's resident memory (``/proc/self/statm``, Linux) over
many entries, so Rust's allocations count (tracemalloc does not see them):

1. per exit: building a pool of N exits of capacity 1 at the default replicas, over N;
2. per session: leasing K one-off keys once each (warm-up off, ``max_sessions=None``), over K;
3. per pairing: the same with ``warmup=True`` and ``max_pairings=None``, less the sessions';
4. the flood again with the default bounds (1,000,000 each) and with ``max_sessions=10_000``,
   ``max_pairings=10_000``: what is left alive.

Each figure is measured in a fresh interpreter (memory an earlier measurement freed would be
reused and hide the growth). The tables grow by doubling, so a figure per entry depends on how
full the last doubling left them: 900,000 keys nearly fill a table of 2^20 slots (the lowest
figure); just past 917,504 it would be about twice as high. The clock is a ManualClock advanced
1 ms a lease, so nothing expires and warm-up never refuses a one-off key (its first lease goes
at once). Every loop is bounded; the script exits 0.
"""

from __future__ import annotations

import argparse
import gc
import os
import subprocess
import sys
import time

try:
    from exitpool import Exit, ManualClock, Pool
except ImportError:  # pragma: no cover
    sys.exit("exitpool is not importable: run `maturin develop --release` first")


def resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def exits(n: int) -> list:
    return [Exit(f"exit-{i:06d}", f"http://gw.example:{8000 + i % 1000}") for i in range(n)]


def flood(keys: int, **options) -> tuple:
    """(bytes per key, sessions left, events by kind) for `keys` one-off keys on a 100-exit pool."""
    clock = ManualClock(1000.0)
    pool = Pool(exits(100), clock=clock, **options)
    names = [f"one-off-{i:07d}" for i in range(keys)]  # made before measuring
    gc.collect()
    before = resident_bytes()
    for key in names:
        clock.advance(0.001)
        with pool.lease(key):
            pass
    grown = resident_bytes() - before
    kinds: dict = {}
    for e in pool.events():
        kinds[e["kind"]] = kinds.get(e["kind"], 0) + 1
    return grown / keys, pool.snapshot()["sessions"], kinds


def measure(what: str, n: int) -> str:
    """One figure, in this process (a fresh one: see `main`)."""
    if what == "exits":
        listed = exits(n)
        gc.collect()
        before = resident_bytes()
        started = time.perf_counter()
        pool = Pool(listed, clock=ManualClock(0.0))
        built = time.perf_counter() - started
        grown = resident_bytes() - before
        return f"pool of {len(pool):,} exits: built in {built:.2f} s, {grown / n:,.0f} B resident per exit"
    options = {
        "sessions": {"max_sessions": None, "max_pairings": None},
        "pairings": {"warmup": True, "max_sessions": None, "max_pairings": None},
        "default": {"warmup": True},
        "bounded": {"warmup": True, "max_sessions": 10_000, "max_pairings": 10_000},
    }[what]
    per_key, left, kinds = flood(n, **options)
    evicted = {k: v for k, v in kinds.items() if k.endswith("_evicted")}
    shown = ", ".join(f"{k}={v}" for k, v in options.items())
    return f"{n:,} one-off keys, {shown}: {per_key:,.0f} B a key, {left:,} sessions left, eviction events {evicted}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--exits", type=int, default=100_000)
    ap.add_argument("--keys", type=int, default=900_000)
    ap.add_argument("--measure", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        print(measure(args.measure, args.exits if args.measure == "exits" else args.keys), flush=True)
        return 0
    for what in ("exits", "sessions", "pairings", "default", "bounded"):
        subprocess.run(
            [sys.executable, __file__, "--measure", what, "--exits", str(args.exits), "--keys", str(args.keys)], check=False, timeout=600
        )
    print("a pairing costs the difference between the warmup=True line and the sessions line")
    return 0


if __name__ == "__main__":
    sys.exit(main())
