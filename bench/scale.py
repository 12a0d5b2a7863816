#!/usr/bin/env python3
"""Benchmark: how a lease pair's cost grows with the pool, for every strategy, keyless and keyed.

Run from the repository root after a *release* build (a debug build makes the numbers
meaningless; the script warns when it looks like one):

    maturin develop --release
    python bench/scale.py                      # about a minute; up to 100,000 exits
    python bench/scale.py --quick              # fewer runs per cell
    python bench/scale.py --max-exits 10000    # leave out the larger pools

What is measured, at 100, 1,000, 10,000 and 100,000 exits (capacity 1 each, so that 100,000
exits fit the ring at the default 160 points per unit; no max_leases; cooldown 0, so that
``lru`` never refuses for its cooldown while a loop leases as fast as it can):

1. For each strategy (round_robin, weighted, least_conn, lru, p2c), one pool built with it:
   ``pool.release(pool.acquire())`` (keyless: the strategy picks) and
   ``pool.release(pool.acquire(key))`` (keyed: 1,000 account keys cycling, every one with a live
   session, so each pair is a session hit; the strategy plays no part there), in ns per pair.
   A cell is the median of several timed runs of a few pairs each. The pairs per run are set
   from untimed runs of 1, 2, 4, ... pairs so that a run takes about 5 ms (at most 2,000
   pairs, at least 1): a linear-time pick at 100,000 exits costs milliseconds, so such cells
   rest on a handful of pairs (the output says how many).
2. The interpreter's floor beside them, measured on each pool the way ``bench/pool.py`` does it
   (``timing.floor_ns``): two calls into the extension plus making and freeing a ``Lease``.
3. Per row, the growth 10,000/100 and 100,000/100 exits (the issue's targets: at most 2x and
   3x), and the pair at 100 exits as a multiple of the floor.
4. Per size, building the pool (the median of the five builds) and the process's resident
   memory it adds per exit (``/proc/self/statm`` before and after the first build).

One run, medians, ``time.perf_counter``, garbage collector off while timing. Every loop is
bounded. The script always exits 0: it is a report, not a test.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import os
import platform
import statistics
import sys
import time

try:
    import exitpool
    from exitpool import Exit, ManualClock, Pool
except ImportError:  # pragma: no cover - a message is more useful than a traceback here
    sys.exit("exitpool is not importable: run `maturin develop --release` first")
from timing import cpu_sample, floor_ns, floor_parts, fmt_ns, keyed_pairs, keyless_pairs, others_share

SIZES = (100, 1_000, 10_000, 100_000)
STRATEGIES = ("round_robin", "weighted", "least_conn", "lru", "p2c")
N_KEYS = 1_000
RUN_SECONDS = 0.005  # the aim for one timed run of a cell
MAX_PAIRS = 2_000  # pairs per timed run, at most
FLOOR_LOOP = 2_000  # iterations of each floor loop
DEBUG_SUSPECT_NS = 5_000  # a keyed pair at 100 exits slower than this: a debug build


def resident_bytes() -> int:
    """The process's resident memory (Linux; 0 elsewhere): Rust's allocations included, which
    tracemalloc does not see."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return 0


def timed_cell(make_run, runs: int):
    """(median ns per pair, pairs per run): `make_run(n)` returns a function doing n pairs.

    Untimed runs of 1, 2, 4, ... pairs (until one takes a fifth of RUN_SECONDS, or MAX_PAIRS)
    size the timed runs first, so that a slow cell stays short."""
    n = 1
    while True:
        t0 = time.perf_counter()
        make_run(n)()
        took = time.perf_counter() - t0
        if took >= RUN_SECONDS / 5 or n >= MAX_PAIRS:
            break
        n *= 2
    pairs = max(1, min(MAX_PAIRS, int(RUN_SECONDS * n / max(took, 1e-9))))
    run = make_run(pairs)
    per_pair = []
    gc.collect()
    gc.disable()
    try:
        for _ in range(runs):
            t0 = time.perf_counter()
            run()
            per_pair.append((time.perf_counter() - t0) * 1e9 / pairs)
    finally:
        gc.enable()
    return statistics.median(per_pair), pairs


def measure_size(n: int, runs: int, keys: list, clock) -> dict:
    """Every strategy's cells at one pool size, the floor, the build times and memory."""
    exits = [Exit(f"exit-{i:06d}", f"http://gw.example:{8000 + i % 1000}") for i in range(n)]
    builds, cells, floors, rss_per_exit = [], {}, [], None
    for strategy in STRATEGIES:
        gc.collect()
        before = resident_bytes()
        t0 = time.perf_counter()
        pool = Pool(exits, strategy=strategy, cooldown=0.0)
        builds.append(time.perf_counter() - t0)
        if rss_per_exit is None:
            rss_per_exit = (resident_bytes() - before) / n
        for k in keys:  # every key gets its live session
            pool.release(pool.acquire(k))
        cells[(strategy, "keyless")] = timed_cell(lambda m, pool=pool: keyless_pairs(pool, m), runs)
        cells[(strategy, "keyed")] = timed_cell(lambda m, pool=pool: keyed_pairs(pool, cycled(keys, m)), runs)
        floors.append(floor_ns(floor_parts(pool, keys[:FLOOR_LOOP], clock, max(3, runs))))
        del pool
    return {"cells": cells, "floor": statistics.median(floors), "build": statistics.median(builds), "rss_per_exit": rss_per_exit}


def cycled(keys: list, n: int) -> list:
    """n keys cycling through `keys`."""
    return list(itertools.islice(itertools.cycle(keys), n))


def fmt_seconds(s: float) -> str:
    return f"{s:,.2f} s" if s >= 1 else f"{s * 1e3:,.1f} ms"


def growth(row: dict, big: int, small: int = 100) -> str:
    if big not in row or small not in row:
        return "-"
    return f"{row[big] / row[small]:,.1f}x"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer timed runs per cell")
    ap.add_argument("--max-exits", type=int, default=SIZES[-1], help="leave out pools larger than this (default: %(default)s)")
    args = ap.parse_args()
    sizes = [n for n in SIZES if n <= args.max_exits]
    if not sizes:
        sys.exit(f"--max-exits {args.max_exits}: the smallest pool measured has {SIZES[0]} exits")
    runs = 5 if args.quick else 15

    started = time.perf_counter()
    cpu_before = cpu_sample()
    print(
        f"exitpool {exitpool.__version__} scale benchmark - Python {platform.python_version()} "
        f"({platform.machine()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f})"
    )
    print(
        f"pools of {', '.join(f'{n:,}' for n in sizes)} exits of capacity 1, {exitpool.DEFAULT_REPLICAS} ring points each, "
        f"cooldown 0; keyed: {N_KEYS:,} keys cycling, all with live sessions"
    )
    print(f"each cell: the median of {runs} timed runs{' [--quick]' if args.quick else ''}, a run sized to ~5 ms (1 to 2,000 pairs)\n")

    keys = [f"account-{i:05d}" for i in range(N_KEYS)]
    clock = ManualClock()
    by_size = {}
    for n in sizes:
        by_size[n] = measure_size(n, runs, keys, clock)

    head = f"{'strategy':<13}{'lease':<9}" + "".join(f"{f'{n:,} exits':>18}" for n in sizes)
    head += f"{'10k/100':>10}{'100k/100':>10}{'100/floor':>11}"
    print("ns per acquire+release pair (median; pairs per timed run in brackets):")
    print(head)
    print("-" * len(head))
    for strategy in STRATEGIES:
        for lease in ("keyless", "keyed"):
            row = {n: by_size[n]["cells"][(strategy, lease)][0] for n in sizes}
            pairs = {n: by_size[n]["cells"][(strategy, lease)][1] for n in sizes}
            cells = "".join(f"{f'{fmt_ns(row[n])} [{pairs[n]:,}]':>18}" for n in sizes)
            at_floor = row[sizes[0]] / by_size[sizes[0]]["floor"] if sizes[0] == 100 else None
            floor_ratio = "-" if at_floor is None else f"{at_floor:,.1f}x"
            print(f"{strategy:<13}{lease:<9}{cells}{growth(row, 10_000):>10}{growth(row, 100_000):>10}{floor_ratio:>11}")
    print("-" * len(head))
    print(f"{'floor':<22}" + "".join(f"{fmt_ns(by_size[n]['floor']):>18}" for n in sizes) + "   (2 calls into the extension + a Lease)")
    print(f"{'build':<22}" + "".join(f"{fmt_seconds(by_size[n]['build']):>18}" for n in sizes) + "   (median of the 5 builds)")
    rss = "".join(f"{by_size[n]['rss_per_exit']:>16,.0f} B" for n in sizes)
    print(f"{'RSS per exit':<22}{rss}   (resident memory added by a build)")
    print("\nCells of a few pairs (a linear pick at a large pool) are medians of a few runs: noisier than the others.")

    if 100 in by_size and by_size[100]["cells"][("weighted", "keyed")][0] > DEBUG_SUSPECT_NS:
        print("\nWARNING: a keyed pair at 100 exits takes over 5 us: a debug build? Rebuild with `maturin develop --release`.")
    share = others_share(cpu_before, cpu_sample())
    noise = "" if share is None else f"; other processes used {share:.0%} of the machine's CPU time meanwhile"
    print(f"\n(total run time {time.perf_counter() - started:.0f} s{noise})")
    return 0


if __name__ == "__main__":
    try:
        main()
    except Exception as exc:  # always exit 0: this is a report, not a test
        import traceback

        traceback.print_exc()
        print(f"benchmark failed: {exc!r}")
    sys.exit(0)
