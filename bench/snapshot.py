"""What `pool.snapshot()` costs on a large pool: 1,000 exits x 100 sites, every pair with data.

    python bench/snapshot.py            # 1,000 x 100
    python bench/snapshot.py --quick    # 200 x 20

Prints the time of one snapshot (best of several) and of serialising it to JSON, as a share
of one second: the budget of a dashboard that polls every second.
"""

from __future__ import annotations

import argparse
import json
import time

from exitpool import Exit, ManualClock, Pool


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    n_exits, n_sites = (200, 20) if args.quick else (1000, 100)
    clock = ManualClock()
    pool = Pool(
        [Exit(f"exit-{i:04d}", f"http://user:pw@10.{i // 250}.{i % 250}.1:8000") for i in range(n_exits)],
        strategy="round_robin",
        clock=clock,
        seed=1,
    )
    sites = [f"site-{j:03d}.example" for j in range(n_sites)]
    t = time.perf_counter()
    # Round-robin over the exits while the site turns more slowly, so every pair gets reports.
    rounds = 3
    for r in range(rounds):
        for j, site in enumerate(sites):
            for _ in range(n_exits):
                lease = pool.acquire(site=site)
                pool.release(lease, status=200 if (j + r) % 7 else 503, latency=0.05 + (j % 10) * 0.02)
        clock.advance(1.0)
    fill = time.perf_counter() - t
    reports = rounds * n_sites * n_exits
    print(f"{n_exits} exits x {n_sites} sites, {reports:,} reports to fill ({fill / reports * 1e9:,.0f} ns per acquire+release)")
    best_snap = best_json = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        snap = pool.snapshot()
        best_snap = min(best_snap, time.perf_counter() - t)
        t = time.perf_counter()
        text = json.dumps(snap)
        best_json = min(best_json, time.perf_counter() - t)
    filled = sum(cell is not None for row in snap["matrix"]["cells"] for cell in row)
    print(f"matrix cells with data: {filled:,} of {n_exits * n_sites:,}; JSON size {len(text) / 1e6:.1f} MB")
    print(f"snapshot():   {best_snap * 1e3:8.1f} ms  ({best_snap:.1%} of a 1 s polling budget)")
    print(f"json.dumps(): {best_json * 1e3:8.1f} ms  ({best_json:.1%})")


if __name__ == "__main__":
    main()
