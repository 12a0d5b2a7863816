"""Timing helpers the pool benchmarks share (`bench/pool.py`, `bench/scale.py`).

Imported by the scripts as a sibling module: a script run as ``python bench/x.py`` has
``bench/`` first on ``sys.path``.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import os
import sys
import time
import traceback


@contextlib.contextmanager
def gc_off():
    """The garbage collector off (after a collection) while timing: a pass of it is not the code's cost."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def best_of(fn, repeat: int) -> float:
    """Best wall time of `repeat` runs of fn(), in seconds, with the GC off while timing.

    Runs are short (about a millisecond for exitpool) and many, so that on a shared machine
    the best of them is a run that no other process interrupted."""
    best = float("inf")
    with gc_off():
        for _ in range(repeat):
            t0 = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - t0)
    return best


def keyed_pairs(pool, seq):
    def run():
        acquire, release = pool.acquire, pool.release
        for k in seq:
            release(acquire(k))

    return run


def keyless_pairs(pool, n):
    def run():
        acquire, release = pool.acquire, pool.release
        for _ in itertools.repeat(None, n):
            release(acquire())

    return run


def floor_parts(pool, seq, clock, repeat: int) -> dict:
    """ns per iteration of the loops the interpreter's floor is derived from, each over `seq`
    (keys) and the best of `repeat` runs: an empty loop, a no-op Rust method with 0 and with 1
    argument (`clock.now()`, `clock.advance(0.0)` on a ManualClock) and `pool.lease(key)`
    (making and freeing a Lease, nothing acquired)."""

    def loop_only():
        for _k in seq:
            pass

    def noop0():
        f = clock.now
        for _k in seq:
            f()

    def noop1():
        f = clock.advance
        for _k in seq:
            f(0.0)

    def lease():
        f = pool.lease
        for k in seq:
            f(k)

    loops = {"loop": loop_only, "noop0": noop0, "noop1": noop1, "lease": lease}
    return {name: ns_per(best_of(fn, repeat), len(seq)) for name, fn in loops.items()}


def floor_ns(parts: dict) -> float:
    """The least a pair can cost from Python: two calls into the extension (a no-op call less
    the loop) plus making and freeing a Lease (`pool.lease(key)` less a 1-argument no-op call)."""
    return 2 * (parts["noop0"] - parts["loop"]) + parts["lease"] - parts["noop1"]


def ns_per(seconds: float, n: int) -> float:
    return seconds * 1e9 / n


def fmt_ns(v):
    if v is None:
        return "-"
    if v >= 1e6:
        return f"{v / 1e6:,.2f} ms"
    if v >= 10_000:
        return f"{v / 1e3:,.1f} us"
    return f"{v:,.0f} ns"


def cpu_sample():
    """(machine busy seconds, machine total seconds, this process's CPU seconds), or None off Linux."""
    try:
        with open("/proc/stat") as f:
            ticks = [int(x) for x in f.readline().split()[1:9]]
        hz = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, AttributeError):
        return None
    t = os.times()
    return (sum(ticks) - ticks[3] - ticks[4]) / hz, sum(ticks) / hz, t.user + t.system


def others_share(before, after):
    """Share of the machine's CPU time that other processes used between two samples."""
    if before is None or after is None or after[1] <= before[1]:
        return None
    busy, total, own = (a - b for a, b in zip(after, before))
    return max(0.0, busy - own) / total


def noise_note(cpu_before) -> str:
    """How much CPU other processes took since `cpu_before` (a `cpu_sample()`), for the last line."""
    share = others_share(cpu_before, cpu_sample())
    if share is None:
        return ""
    busy = " (a busy machine: expect noisy figures, rerun when it is quiet)" if share > 0.15 else ""
    return f"; other processes used {share:.0%} of the machine's CPU time meanwhile{busy}"


def run_report(main) -> None:
    """Runs a benchmark's main and exits 0 whatever happens: a benchmark is a report, not a test."""
    try:
        main()
    except Exception as exc:
        traceback.print_exc()
        print(f"benchmark failed: {exc!r}")
    sys.exit(0)
