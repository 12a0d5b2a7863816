"""What an operator reads: snapshot figures, the exit x site matrix, events in the logger and
callbacks, and what each lease says about how it was chosen."""

from __future__ import annotations

import json
import logging
import math
import threading

import pytest

from exitpool import Exit, ManualClock, Pool, SessionExitLost

PASSWORD = "s3cret-pw"


def exits(n=10):
    return [Exit(f"e{i}", f"http://user:{PASSWORD}@gw{i}.example:8000") for i in range(n)]


@pytest.fixture
def clock():
    return ManualClock()


def drive(pool, clock, steps, site_of, report_of):
    for step in range(steps):
        clock.advance(0.25)
        site = site_of(step)
        try:
            lease = pool.acquire(site=site, timeout=0)
        except Exception:  # Cooling during an incident
            continue
        pool.release(lease, **report_of(lease.exit_id, site))


def test_snapshot_is_json_and_answers_bad_exit_or_bad_site(clock):
    pool = Pool(exits(), strategy="round_robin", clock=clock, seed=1)
    sites = ["a.example", "b.example", "bad.example"]

    def report(exit_id, site):
        if exit_id == "e3":
            return {"error": "connect"}
        if site == "bad.example":
            return {"status": 403, "latency": 0.4}
        return {"status": 200, "latency": 0.1}

    drive(pool, clock, 600, lambda s: sites[s % 3], report)
    snap = json.loads(json.dumps(pool.snapshot()))
    figures = snap["pool"]
    assert figures["states"]["quarantined"] + figures["states"]["probing"] + figures["states"]["dead"] == 1
    assert figures["incidents"] == ["bad.example"]
    assert figures["in_service"] == 10
    assert 0 < figures["ejected_fraction"] <= 0.1
    matrix = snap["matrix"]
    assert matrix["columns"][:3] == ["state", "reports", "success_rate"]
    col = matrix["sites"].index("bad.example")
    rate = matrix["columns"].index("success_rate")
    # The bad site is a red column: nobody succeeds there.
    for row in matrix["cells"]:
        assert row[col] is None or row[col][rate] == 0.0
    # The bad exit is a red row: it never succeeds anywhere.
    e3 = matrix["exits"].index("e3")
    assert all(cell is None or cell[rate] == 0.0 for cell in matrix["cells"][e3])
    good = matrix["exits"].index("e0")
    assert matrix["cells"][good][matrix["sites"].index("a.example")][rate] == 1.0
    by_id = {e["exit_id"]: e for e in snap["exits"]}
    # Latency quantiles of the good exit are the reported 0.1 s and 0.4 s, within 9.051%.
    lat = by_id["e0"]["latency"]
    assert abs(lat["p50"] / 0.1 - 1) <= 0.0906
    assert abs(lat["p99"] / 0.4 - 1) <= 0.0906
    assert PASSWORD not in json.dumps(snap)


def test_gini_and_throughput(clock):
    pool = Pool(exits(4), strategy="round_robin", clock=clock)
    for _ in range(400):
        pool.release(pool.acquire())
    assert pool.snapshot()["pool"]["gini"] == 0.0
    clock.advance(60)
    pool.snapshot()  # a throughput mark
    for _ in range(300):
        pool.release(pool.acquire())
    clock.advance(30)
    figures = pool.snapshot()["pool"]
    # Measured from the older of two marks a minute apart: 700 leases in 90 s.
    assert figures["throughput"] == pytest.approx(700 / 90)
    skewed = Pool(exits(4), strategy="round_robin", clock=clock)
    skewed.bench("e1")
    skewed.bench("e2")
    skewed.bench("e3")
    for _ in range(100):
        skewed.release(skewed.acquire())
    skewed.unbench("e1")
    skewed.unbench("e2")
    skewed.unbench("e3")
    assert skewed.snapshot()["pool"]["gini"] == pytest.approx(0.75)


def test_p99_wait_for_an_exit(clock):
    pool = Pool(exits(1), max_leases=1, clock=clock)
    for _ in range(94):
        pool.release(pool.acquire())
    for _ in range(3):
        held = pool.acquire()
        waiter = threading.Thread(target=lambda: pool.release(pool.acquire(timeout=5)))
        waiter.start()
        threading.Event().wait(0.2)
        pool.release(held)
        waiter.join()
    wait = pool.snapshot()["pool"]["wait"]
    assert wait["p50"] == 0.0
    assert 0.1 < wait["p99"] < 1.0


def test_events_reach_the_logger_and_callbacks_and_a_raising_callback_breaks_nothing(clock, caplog):
    pool = Pool(exits(5), strategy="round_robin", clock=clock)
    seen = []
    pool.on_event(seen.append)

    @pool.on_event
    def broken(event):
        raise RuntimeError("callback bug")

    caplog.set_level(logging.INFO, logger="exitpool")
    with pytest.raises(SessionExitLost):
        for _ in range(10):
            with pool.lease("acct", site="s.example") as lease:
                lease.report(error="connect")
    # The leases went on; the exit was quarantined; both listeners and the logger heard of it.
    quarantined = [e for e in seen if e["to"] == "quarantined"]
    assert quarantined and quarantined[0]["exit_id"] is not None
    assert "5 weighted consecutive failures" in quarantined[0]["message"]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "quarantined" in r.getMessage()]
    assert warnings
    assert any("callback" in r.getMessage() and r.exc_info for r in caplog.records)
    # Every event delivered once, in order.
    seqs = [e["seq"] for e in seen]
    assert seqs == sorted(set(seqs))
    assert seqs == [e["seq"] for e in pool.events()][: len(seqs)]
    for record in caplog.records:
        assert PASSWORD not in record.getMessage()


def test_logging_is_silent_by_default_and_lazy(clock):
    assert any(isinstance(h, logging.NullHandler) for h in logging.getLogger("exitpool").handlers)


def test_a_lease_says_how_its_exit_was_chosen_and_in_what_state(clock):
    pool = Pool(exits(3), strategy="least_conn", clock=clock)
    with pool.lease("acct") as first:
        assert (first.strategy, first.exit_state) == ("ring", "healthy")
    with pool.lease("acct") as again:
        assert again.strategy == "session"
    with pool.lease() as keyless:
        assert keyless.strategy == "least_conn"
    # Two timeouts degrade (after the hold time): the next lease on it says so.
    clock.advance(20)
    for _ in range(2):
        with pool.lease("acct", site="s.example") as lease:
            lease.report(error="timeout")
    with pool.lease("acct", site="s.example") as lease:
        assert lease.exit_state == "degraded"
    assert math.isfinite(pool.snapshot()["exits"][0]["time_in_state"])
