#!/usr/bin/env python3
"""Benchmark: a pool of one gateway's slots against a pool of as many plain exits.

Run from the repository root after a *release* build (a debug build makes the numbers
meaningless):

    maturin develop --release
    python bench/gateway.py              # about ten seconds
    python bench/gateway.py --slots 5000

What is measured: one ``Gateway`` of N slots (user-name tokens, a 10-minute lifetime) and N
plain exits, each in its own pool (weighted, no max_leases), timed alternately round by round so
that a slow spell of a shared machine falls on both alike:

1. ``pool.release(pool.acquire())`` (keyless) and ``pool.release(pool.acquire(key))`` (keyed:
   1,000 account keys cycling, every one with a live session), the median ns per pair over the
   rounds, and the ratio gateway / plain (issue 16: "at the cost of a pool of N exits").
2. Across a run of leases spanning two token lifetimes on a ManualClock: every slot's token is
   distinct from every other slot's at each moment, and each rotation gives the slot a new one.

One run, medians, ``time.perf_counter``, garbage collector off while timing. The script always
exits 0: it is a report, not a test.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

try:
    from exitpool import Exit, Gateway, ManualClock, Pool
except ImportError:  # pragma: no cover - a message is more useful than a traceback here
    sys.exit("exitpool is not importable: run `maturin develop --release` first")
from timing import cpu_sample, gc_off, keyed_pairs, keyless_pairs, noise_note, run_report

N_KEYS = 1_000
PAIRS = 2_000  # pairs per timed run
T0 = 1_700_000_000.0


def gateway(slots: int) -> Gateway:
    return Gateway(
        "resi",
        "http://customer-acme:pw@gw.provider.example:7777",
        slots=slots,
        username="{user}-session-{session}",
        lifetime=600,
    )


def plain(n: int) -> list:
    return [Exit(f"e{i}", f"http://customer-acme:pw@10.{i // 62500}.{i // 250 % 250}.{i % 250}:8080") for i in range(n)]


def pools(slots: int) -> dict:
    # A ManualClock at a Unix time: the gateway's slots rotate on it, and it stays still while
    # timing, so neither pool spends the run on rotations the other does not have.
    return {
        "gateway": Pool([gateway(slots)], clock=ManualClock(T0), seed=1),
        "plain": Pool(plain(slots), clock=ManualClock(T0), seed=1),
    }


def timed(runs: dict, rounds: int) -> dict:
    """Median ns per pair of each run, the runs alternating round by round."""
    per_pair: dict = {name: [] for name in runs}
    with gc_off():
        for _ in range(rounds):
            for name, run in runs.items():
                t0 = time.perf_counter()
                run()
                per_pair[name].append((time.perf_counter() - t0) * 1e9 / PAIRS)
    return {name: statistics.median(v) for name, v in per_pair.items()}


def distinct_tokens(slots: int) -> str:
    """Leases over two token lifetimes: each moment's tokens are all distinct, and every slot
    presents a new one after its rotation."""
    clock = ManualClock(T0)
    pool = Pool([gateway(slots)], clock=clock, seed=1)
    seen: dict = {}
    for _ in range(8):
        now_users = [e.username for e in pool.exits]
        assert len(set(now_users)) == slots, "two slots share a token"
        for e in pool.exits:
            seen.setdefault(e.exit_id, set()).add(e.username)
        for _ in range(slots):
            pool.release(pool.acquire())
        clock.advance(150.0)
    per_slot = min(len(v) for v in seen.values())
    return f"{slots:,} slots: distinct tokens at every one of 8 moments over 1,200 s; every slot had at least {per_slot} tokens"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--slots", type=int, default=1_000)
    ap.add_argument("--rounds", type=int, default=31)
    args = ap.parse_args()
    before = cpu_sample()
    built = pools(args.slots)
    keys = [f"acct-{i}" for i in range(N_KEYS)]
    seq = [keys[i % N_KEYS] for i in range(PAIRS)]
    for pool in built.values():
        keyed_pairs(pool, keys)()  # every key with a live session
    runs = {}
    for name, pool in built.items():
        runs[f"{name} keyless"] = keyless_pairs(pool, PAIRS)
        runs[f"{name} keyed"] = keyed_pairs(pool, seq)
    medians = timed(runs, args.rounds)
    print(f"exitpool gateway benchmark: one gateway of {args.slots:,} slots against {args.slots:,} plain exits")
    print(f"ns per acquire+release pair (median of {args.rounds} runs of {PAIRS:,} pairs, the pools alternating):\n")
    print(f"{'lease':<10}{'gateway':>12}{'plain':>12}{'gateway / plain':>18}")
    for lease in ("keyless", "keyed"):
        g, p = medians[f"gateway {lease}"], medians[f"plain {lease}"]
        print(f"{lease:<10}{g:>9,.0f} ns{p:>9,.0f} ns{g / p:>17.2f}x")
    print()
    print(distinct_tokens(args.slots))
    print(f"\n(one run{noise_note(before)})")


if __name__ == "__main__":
    run_report(main)
