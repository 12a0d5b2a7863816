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
   rest on a handful of pairs (the output says how many). A strategy's pools of every size
   are alive together and their runs interleave, round by round, so that a slow spell of a
   shared machine falls on every size alike rather than skewing the growth ratios; each timed
   run follows 20 ms of the same cell's pairs, untimed, so that it finds the pool as warm as
   its own traffic keeps it, not as the larger pools' runs in between left the caches.
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
from timing import cpu_sample, floor_ns, floor_parts, fmt_ns, gc_off, keyed_pairs, keyless_pairs, noise_note, run_report

SIZES = (100, 1_000, 10_000, 100_000)
STRATEGIES = ("round_robin", "weighted", "least_conn", "lru", "p2c")
N_KEYS = 1_000
RUN_SECONDS = 0.005  # the aim for one timed run of a cell
MAX_PAIRS = 2_000  # pairs per timed run, at most
WARM_SECONDS = 0.02  # the cell's own untimed pairs before each timed run
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


def sized_run(make_run):
    """(run, pairs): `make_run(n)` returns a function doing n pairs; untimed runs of 1, 2, 4, ...
    pairs (until one takes a fifth of RUN_SECONDS, or MAX_PAIRS) size the timed run so that a
    slow cell stays short."""
    n = 1
    while True:
        t0 = time.perf_counter()
        make_run(n)()
        took = time.perf_counter() - t0
        if took >= RUN_SECONDS / 5 or n >= MAX_PAIRS:
            break
        n *= 2
    pairs = max(1, min(MAX_PAIRS, int(RUN_SECONDS * n / max(took, 1e-9))))
    return make_run(pairs), pairs


def interleaved_medians(cells: dict, rounds: int) -> dict:
    """Median ns per pair of each cell ({name: (run, pairs)}): each round times one run of every
    cell in turn, so that a slow spell of a shared machine falls on every pool size alike.

    Each timed run follows WARM_SECONDS of the same cell's pairs, untimed: a pool in use keeps
    warm what its own traffic touches, but here the larger pools' runs in between evict it (a
    100,000-exit pool's records are larger than the L3 cache), which a random pick (`p2c`)
    pays for at every pair: measured without it, p2c keyless at 10,000 exits was 2.4x the
    100-exit pair, and 1.4x in a process holding only the 10,000-exit pool."""
    per_pair: dict = {name: [] for name in cells}
    with gc_off():
        for _ in range(rounds):
            for name, (run, pairs) in cells.items():
                warm_until = time.perf_counter() + WARM_SECONDS
                while time.perf_counter() < warm_until:
                    run()
                t0 = time.perf_counter()
                run()
                per_pair[name].append((time.perf_counter() - t0) * 1e9 / pairs)
    return {name: statistics.median(v) for name, v in per_pair.items()}


def measure_strategy(strategy: str, exit_lists: dict, runs: int, keys: list, clock, out: dict) -> None:
    """One strategy's cells at every size, its pools alive together so that their runs interleave;
    adds to `out` its cells, floors and build times, and the memory per exit of the first pools."""
    pools = {}
    for n, exits in exit_lists.items():
        gc.collect()
        before = resident_bytes()
        t0 = time.perf_counter()
        pools[n] = pool = Pool(exits, strategy=strategy, cooldown=0.0)
        out["build"].setdefault(n, []).append(time.perf_counter() - t0)
        out["rss_per_exit"].setdefault(n, (resident_bytes() - before) / n)
        for k in keys:  # every key gets its live session
            pool.release(pool.acquire(k))
        # The first keyless pick builds the strategy's tree (O(n), once): not a pair's cost,
        # and it would make the sizing below take this pool for a slow one.
        pool.release(pool.acquire())
    cells = {}
    for n, pool in pools.items():
        cells[(n, strategy, "keyless")] = sized_run(lambda m, pool=pool: keyless_pairs(pool, m))
        cells[(n, strategy, "keyed")] = sized_run(lambda m, pool=pool: keyed_pairs(pool, cycled(keys, m)))
    for name, median in interleaved_medians(cells, runs).items():
        out["cells"][name] = (median, cells[name][1])
    for n, pool in pools.items():
        out["floor"].setdefault(n, []).append(floor_ns(floor_parts(pool, keys[:FLOOR_LOOP], clock, max(3, runs))))


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
    exit_lists = {n: [Exit(f"exit-{i:06d}", f"http://gw.example:{8000 + i % 1000}") for i in range(n)] for n in sizes}
    out: dict = {"cells": {}, "floor": {}, "build": {}, "rss_per_exit": {}}
    for strategy in STRATEGIES:
        measure_strategy(strategy, exit_lists, runs, keys, clock, out)
    floor = {n: statistics.median(v) for n, v in out["floor"].items()}

    head = f"{'strategy':<13}{'lease':<9}" + "".join(f"{f'{n:,} exits':>18}" for n in sizes)
    head += f"{'10k/100':>10}{'100k/100':>10}{'100/floor':>11}"
    print("ns per acquire+release pair (median; pairs per timed run in brackets):")
    print(head)
    print("-" * len(head))
    for strategy in STRATEGIES:
        for lease in ("keyless", "keyed"):
            row = {n: out["cells"][(n, strategy, lease)][0] for n in sizes}
            pairs = {n: out["cells"][(n, strategy, lease)][1] for n in sizes}
            cells = "".join(f"{f'{fmt_ns(row[n])} [{pairs[n]:,}]':>18}" for n in sizes)
            at_floor = row[100] / floor[100] if 100 in row else None
            floor_ratio = "-" if at_floor is None else f"{at_floor:,.1f}x"
            print(f"{strategy:<13}{lease:<9}{cells}{growth(row, 10_000):>10}{growth(row, 100_000):>10}{floor_ratio:>11}")
    print("-" * len(head))
    print(f"{'floor':<22}" + "".join(f"{fmt_ns(floor[n]):>18}" for n in sizes) + "   (2 calls into the extension + a Lease)")
    builds = "".join(f"{fmt_seconds(statistics.median(out['build'][n])):>18}" for n in sizes)
    print(f"{'build':<22}{builds}   (median of the 5 builds)")
    rss = "".join(f"{out['rss_per_exit'][n]:>16,.0f} B" for n in sizes)
    print(f"{'RSS per exit':<22}{rss}   (resident memory added by a build)")
    print("\nCells of a few pairs (a linear pick at a large pool) are medians of a few runs: noisier than the others.")

    if 100 in sizes and out["cells"][(100, "weighted", "keyed")][0] > DEBUG_SUSPECT_NS:
        print("\nWARNING: a keyed pair at 100 exits takes over 5 us: a debug build? Rebuild with `maturin develop --release`.")
    noise = noise_note(cpu_before)
    print(f"\n(total run time {time.perf_counter() - started:.0f} s{noise})")
    return 0


if __name__ == "__main__":
    run_report(main)
