"""How evenly the ring spreads keys for each `replicas` value: the measurement behind
exitpool's default. 100 exits of equal capacity, 100,000 keys; prints max/mean and min/mean.

    python bench/replicas.py
"""

from __future__ import annotations

import time
from collections import Counter

from exitpool import DEFAULT_REPLICAS, Exit, Ring

N_EXITS, N_KEYS = 100, 100_000


def main() -> None:
    keys = [f"account-{i}" for i in range(N_KEYS)]
    exits = [Exit(f"exit-{i:03d}", f"http://10.0.{i // 250}.{i % 250}:8000") for i in range(N_EXITS)]
    mean = N_KEYS / N_EXITS
    print(f"{N_EXITS} equal exits, {N_KEYS:,} keys (sampling noise alone is about +/-{3 / mean**0.5:.0%} at 3 sigma)")
    print(f"{'replicas':>9} {'points':>8} {'max/mean':>9} {'min/mean':>9} {'build ms':>9}")
    for r in (1, 10, 40, 100, 160, 320, 640):
        t = time.perf_counter()
        ring = Ring(exits, replicas=r)
        build = (time.perf_counter() - t) * 1e3
        load = Counter(e.exit_id for e in ring.assign_many(keys))
        loads = [load.get(e.exit_id, 0) for e in exits]
        mark = "  <- default" if r == DEFAULT_REPLICAS else ""
        print(f"{r:>9} {ring.points:>8} {max(loads) / mean:>9.3f} {min(loads) / mean:>9.3f} {build:>9.1f}{mark}")


if __name__ == "__main__":
    main()
