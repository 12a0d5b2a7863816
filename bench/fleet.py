"""Fleet mode: lease pairs per second through a Redis store, against redis-benchmark.

Starts its own redis-server on a free loopback port, measures `redis-benchmark -c 1` (one
client, one request in flight: the round-trip floor) in the same run, then lease pairs
(acquire + release) per second in one process and in four. A release is not sent on its own:
it rides with the next take, inside the same script run, so a pair waits on the network once
and can approach redis-benchmark's single-client rate; the target is 40% of that rate per
process. Run with a release build (`make bench`).

    python bench/fleet.py [--seconds 2] [--rounds 5]

The machine is shared and its speed drifts within seconds, so each of --rounds rounds measures
the baseline and then the one-process runs right after it; the figure against the target is
the median over the rounds of each run's rate over its own round's baseline. Four-process
figures are one run, averaged over the processes. With two CPUs or more, the server runs on
one and every client (redis-benchmark's and ours) on another.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import time

WORKER = r"""
import sys, time, exitpool
url, seconds, keyed = sys.argv[1], float(sys.argv[2]), sys.argv[3] == "1"
exits = [exitpool.Exit(f"e{i}", f"http://u:pw@127.0.0.1:{9000 + i}") for i in range(20)]
pool = exitpool.Pool(exits, store=url, namespace="bench", max_leases=1000)
for i in range(200):  # warm the connection and the script cache
    with pool.lease(f"acct-{i % 100}" if keyed else None):
        pass
n, start = 0, time.perf_counter()
deadline = start + seconds
while n < 10_000_000:
    for i in range(100):
        with pool.lease(f"acct-{i}" if keyed else None):
            pass
    n += 100
    if time.perf_counter() >= deadline:
        break
print(n / (time.perf_counter() - start), pool.snapshot()["store"]["online"])
"""


# Two CPUs or more: the server on the first, every client (redis-benchmark and the workers
# alike) on the second, so that no run's figure depends on where the scheduler put whom.
PINNED = hasattr(os, "sched_setaffinity") and len(os.sched_getaffinity(0)) >= 2
SERVER_CPU, CLIENT_CPU = sorted(os.sched_getaffinity(0))[:2] if PINNED else (None, None)


def pin(cpu):
    """A preexec_fn that runs the child on one CPU (nothing without two)."""
    return (lambda: os.sched_setaffinity(0, {cpu})) if PINNED else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def redis_benchmark(port: int, tests: str) -> dict:
    out = subprocess.run(
        ["redis-benchmark", "-p", str(port), "-c", "1", "-n", "30000", "-t", tests, "--csv"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        preexec_fn=pin(CLIENT_CPU),
    ).stdout
    rates = {}
    for line in out.splitlines()[1:]:
        cells = [c.strip('"') for c in line.split('","')]
        rates[cells[0]] = float(cells[1])
    return rates


def server_time(port: int) -> dict:
    """Microseconds the server spent per call, by command: where a round trip's time goes."""
    out = subprocess.run(["redis-cli", "-p", str(port), "INFO", "commandstats"], capture_output=True, text=True, timeout=30).stdout
    stats = {}
    for m in re.finditer(r"cmdstat_(\w+):calls=(\d+),usec=\d+,usec_per_call=([\d.]+)", out):
        if m.group(1) in ("get", "evalsha", "eval", "ping"):
            stats[m.group(1)] = float(m.group(3))
    return stats


def leases(url: str, seconds: float, procs: int, keyed: bool) -> list:
    ps = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, url, str(seconds), "1" if keyed else "0"],
            stdout=subprocess.PIPE,
            text=True,
            preexec_fn=pin(CLIENT_CPU),
        )
        for _ in range(procs)
    ]
    rates = []
    for p in ps:
        out, _ = p.communicate(timeout=seconds + 120)
        rate, online = out.split()
        assert online == "True", "the store went offline during the benchmark"
        rates.append(float(rate))
    return rates


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--rounds", type=int, default=5, help="alternating rounds of baseline and one-process runs")
    args = ap.parse_args()
    port = free_port()
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        preexec_fn=pin(SERVER_CPU),
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert time.monotonic() < deadline
                time.sleep(0.02)
        url = f"redis://127.0.0.1:{port}/0"
        # The machine is shared and its speed drifts within seconds: each round measures the
        # baseline and then the one-process runs right after it, and the figure reported is the
        # median over the rounds of each run's rate against its own round's baseline.
        base: list = []
        rounds: dict = {"keyless, 1 process": [], "keyed, 1 process": []}
        for _ in range(args.rounds):
            get = redis_benchmark(port, "get")["GET"]
            base.append(get)
            for keyed in (False, True):
                rounds[f"{'keyed' if keyed else 'keyless'}, 1 process"].append((leases(url, args.seconds, 1, keyed)[0], get))
        four = {}
        for keyed in (False, True):
            rates = leases(url, args.seconds, 4, keyed)
            four[f"{'keyed' if keyed else 'keyless'}, 4 processes"] = sum(rates) / len(rates)
        floor = statistics.median(base)
        where = f"server on CPU {SERVER_CPU}, clients on CPU {CLIENT_CPU}" if PINNED else "not pinned (one CPU)"
        print(
            f"redis-benchmark -c 1 GET, {args.rounds} rounds: median {floor:,.0f}/s, range {min(base):,.0f} to {max(base):,.0f}/s ({where})"
        )
        print(f"one round trip: {1e6 / floor:.0f} us at the median\n")
        print(f"{'lease pairs':<24}{'per process':>13}{'vs GET, median':>16}{'range of rounds':>18}{'us per pair':>13}")
        results: dict = {}
        ratios: dict = {}
        for name, runs in rounds.items():
            rs = [rate / get for rate, get in runs]
            results[name] = statistics.median(rate for rate, _ in runs)
            ratios[name] = statistics.median(rs)
            print(
                f"{name:<24}{results[name]:>13,.0f}{ratios[name]:>15.1%}{f'{min(rs):.0%} to {max(rs):.0%}':>18}{1e6 / results[name]:>13.0f}"
            )
        for name, per in four.items():
            results[name] = per
            print(f"{name:<24}{per:>13,.0f}{per / floor:>15.1%}{'(one run)':>18}{1e6 / per:>13.0f}")
        stats = server_time(port)
        print("\nserver time per call (INFO commandstats, whole run; evalsha is mostly a take with")
        print("the previous release riding along):", ", ".join(f"{k} {v:.1f} us" for k, v in stats.items()))
        worst = min(ratios.values())
        print(
            f"target: per process at least 40% of redis-benchmark's single-client rate: "
            f"{'PASS' if worst >= 0.40 else 'MISS'} ({worst:.1%} at worst)"
        )
        print(json.dumps({"redis_get_rate": floor, "pairs_per_second": results, "vs_get": ratios, "server_us_per_call": stats}))
    finally:
        server.kill()
        server.wait(5)


if __name__ == "__main__":
    main()
