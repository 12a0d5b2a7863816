"""One worker of a test fleet, run as its own process by tests/test_fleet.py.

    python worker.py JOB STORE_URL NAMESPACE ORDER ARGS_JSON

ORDER is "forward" or "backward": the workers of a fleet are given their exits in different
orders, as real workers reading their lists from different sources would be. The worker prints
one JSON line with its results and exits; every loop is bounded.
"""

import json
import sys
import time

import exitpool


def exits(n, order):
    xs = [exitpool.Exit(f"e{i}", f"http://user:pw@127.0.0.1:{9100 + i}", ip=f"127.0.1.{i + 1}") for i in range(n)]
    return xs if order == "forward" else list(reversed(xs))


def main():
    job, url, ns, order, args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], json.loads(sys.argv[5])
    opts = args.get("pool", {})
    pool = exitpool.Pool(exits(args.get("exits", 4), order), store=url, namespace=ns, **opts)
    out = {}
    if job == "hold":
        # Lease for a while, recording when each lease was surely held (inside the block).
        spans = []
        deadline = time.monotonic() + args["seconds"]
        n = 0
        while time.monotonic() < deadline and n < 100_000:
            n += 1
            key = f"acct-{n % args['keys']}" if args.get("keys") else None
            try:
                with pool.lease(key, timeout=2.0) as lease:
                    start = time.monotonic()
                    time.sleep(args["hold"])
                    spans.append((lease.exit_id, start, time.monotonic()))
            except exitpool.NoExitAvailable:
                pass
        out["spans"] = spans
    elif job == "assign":
        out["assigned"] = {}
        for k in args["keys"]:
            with pool.lease(k) as lease:
                out["assigned"][k] = lease.exit_id
    elif job == "grab":
        # Take every slot and hold it until killed.
        held = [pool.acquire(timeout=1.0) for _ in range(args["count"])]
        print(json.dumps({"held": [h.exit_id for h in held]}), flush=True)
        time.sleep(60)
        return
    elif job == "watch":
        # Wait (bounded) until the exit is seen out of service; report when.
        print(json.dumps({"ready": True}), flush=True)
        deadline = time.monotonic() + args["seconds"]
        seen = None
        while time.monotonic() < deadline:
            if pool.state(args["exit"]) in ("quarantined", "dead"):
                seen = time.monotonic()
                break
            time.sleep(0.02)
        out["seen"] = seen
        out["events"] = [e["message"] for e in pool.events()]
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
