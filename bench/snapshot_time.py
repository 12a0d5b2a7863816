"""Times `pool.snapshot()` for 1,000 exits x 10 sites (every cell filled).

Usage: python bench/snapshot_time.py [ROUNDS]
"""

from __future__ import annotations

import sys
import time

from exitpool import Exit, ManualClock, Pool


def filled_pool(exits: int = 1000, sites: int = 10) -> Pool:
    pool = Pool(
        [Exit(f"e{i}", f"http://user:pw@10.0.{i // 250}.{i % 250}:8080", tags={"n": str(i % 7)}) for i in range(exits)],
        strategy="round_robin",
        clock=ManualClock(),
    )
    for s in range(sites):
        for i in range(exits):
            lease = pool.acquire(site=f"site{s}.example")
            pool.release(lease, status=200 if i % 5 else 403, latency=0.05 + (i % 13) / 100)
    return pool


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    pool = filled_pool()
    snap = pool.snapshot()
    filled = sum(c is not None for row in snap["matrix"]["cells"] for c in row)
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        pool.snapshot()
        times.append(time.perf_counter() - t)
    times.sort()
    print(
        f"snapshot of {len(snap['exits'])} exits x {len(snap['sites'])} sites ({filled} cells): "
        f"median {times[len(times) // 2] * 1000:.1f} ms, min {times[0] * 1000:.1f} ms over {rounds} rounds"
    )


if __name__ == "__main__":
    main()
