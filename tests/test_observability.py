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


# -- snapshots of large pools: the summary, the filters, the groups ---------------------------

COUNTRIES = ("us", "de", "fr")
# The pool-wide parts of a snapshot, which every form of it gives whole.
POOL_WIDE = ("version", "pool", "counts", "sites", "sessions", "live_leases", "store")


@pytest.fixture(scope="module")
def large():
    """3,000 exits tagged by country (one in ten untagged), two sites served, three exits
    quarantined (five connect errors each), two benched, a few live sessions and leases."""
    clock = ManualClock()
    exits = [
        Exit(
            f"x{i:04d}", f"http://user:{PASSWORD}@10.0.{i // 250}.{i % 250}:8000", tags={} if i % 10 == 9 else {"country": COUNTRIES[i % 3]}
        )
        for i in range(3000)
    ]
    pool = Pool(exits, strategy="round_robin", clock=clock, seed=1)
    for site in ("shop.example", "news.example"):
        for n in range(3000):
            pool.release(pool.acquire(site=site), status=200 if n % 7 else 503, latency=0.1)
    bad = ["x0100", "x1201", "x2502"]
    for x in bad:
        one = pool.subset(country=COUNTRIES[int(x[1:]) % 3])
        for _ in range(5):
            pool.release(one.acquire(site="shop.example", avoid=[e.exit_id for e in one.exits if e.exit_id != x]), error="connect")
        assert pool.state(x) == "quarantined"
    pool.bench("x0003")
    pool.bench("x0004")
    held = [pool.acquire(f"acct{k}") for k in range(4)]
    yield pool, bad
    for lease in held:
        pool.release(lease, status=200)


def test_the_summary_has_every_pool_wide_figure_and_no_exit(large):
    pool, _ = large
    full, summary = pool.snapshot(), pool.snapshot(exits=False)
    for key in POOL_WIDE:
        assert summary[key] == full[key], key
    assert summary["pool"]["exits"] == len(full["exits"]) == 3000
    assert sum(summary["pool"]["states"].values()) == 3000 and summary["pool"]["states"]["quarantined"] == 3
    assert summary["exits"] == [] and summary["matrix"]["exits"] == [] and summary["matrix"]["cells"] == []
    assert summary["matrix"]["sites"] == full["matrix"]["sites"] and summary["groups"] is None
    json.dumps(summary)


def test_filters_list_exactly_the_matching_exits_in_pool_order(large):
    pool, bad = large
    full = pool.snapshot()
    by_id = {e["exit_id"]: e for e in full["exits"]}
    row_of = dict(zip(full["matrix"]["exits"], full["matrix"]["cells"]))

    def listed(**kw):
        snap = pool.snapshot(**kw)
        for key in POOL_WIDE:
            assert snap[key] == full[key], (kw, key)
        ids = [e["exit_id"] for e in snap["exits"]]
        # Each listed exit's record and matrix row are the full snapshot's.
        assert snap["matrix"]["exits"] == ids
        assert [by_id[x] for x in ids] == snap["exits"]
        assert snap["matrix"]["cells"] == [row_of[x] for x in ids]
        return ids

    everyone = [e["exit_id"] for e in full["exits"]]
    assert listed(state="quarantined") == bad
    assert listed(state=["dead", "quarantined"]) == bad
    assert listed(state=("healthy",)) == [x for x in everyone if x not in bad]
    assert listed(tags={"country": "de"}) == [x for x in everyone if by_id[x]["tags"].get("country") == "de"]
    assert listed(tags={"country": "de", "other": "x"}) == []
    assert listed(exit_ids=["x2999", "x0007", "nope", "x0007"]) == ["x0007", "x2999"]
    assert listed(exit_ids=[]) == []
    assert listed(tags={"country": "de"}, state="quarantined") == ["x0100", "x1201"]
    assert listed(limit=0) == []
    assert listed(limit=3000) == everyone
    # A limit takes the worst states first, ties in pool order, and lists them in pool order.
    assert listed(limit=2) == ["x0100", "x1201"]
    assert listed(limit=5) == sorted(bad + ["x0000", "x0001"])
    assert listed(limit=5, tags={"country": "us"}) == ["x0000", "x0003", "x0006", "x0012", "x2502"]


def test_groups_by_tag_sum_to_the_pool(large):
    pool, bad = large
    snap = pool.snapshot(exits=False, by_tag="country")
    groups = snap["groups"]
    assert set(groups) == {"us", "de", "fr", ""}
    assert groups[""]["exits"] == 300
    full = pool.snapshot()
    for key in ("exits", "benched"):
        assert sum(g[key] for g in groups.values()) == snap["pool"][key]
    for state, n in snap["pool"]["states"].items():
        assert sum(g["states"][state] for g in groups.values()) == n
    assert sum(g["active_leases"] for g in groups.values()) == snap["pool"]["live_leases"] == 4
    assert sum(g["sessions"] for g in groups.values()) == snap["pool"]["sessions"]
    assert sum(g["leases"] for g in groups.values()) == snap["counts"]["acquired"]
    for outcome, n in snap["counts"]["outcomes"].items():
        assert sum(g["outcomes"][outcome] for g in groups.values()) == n
    # And each group is its exits' sum.
    de = [e for e in full["exits"] if e["tags"].get("country") == "de"]
    assert groups["de"]["exits"] == len(de) and groups["de"]["leases"] == sum(e["leases"] for e in de)
    assert groups["de"]["states"]["quarantined"] == sum(x in bad for x in (e["exit_id"] for e in de))


@pytest.mark.parametrize(
    "kwargs, named",
    [
        (dict(exits=1), "exits"),
        (dict(exits="no"), "exits"),
        (dict(state="sick"), "'sick'"),
        (dict(state=["healthy", "cooling"]), "'cooling'"),
        (dict(state=[3]), "state"),
        (dict(state=5), "state"),
        (dict(tags=["country"]), "tags"),
        (dict(tags={"country": 1}), "tags"),
        (dict(exit_ids="x0001"), "exit_ids"),
        (dict(exit_ids=[1]), "exit_ids"),
        (dict(exit_ids=5), "exit_ids"),
        (dict(limit=-1), "-1"),
        (dict(limit=1.5), "1.5"),
        (dict(limit=True), "True"),
        (dict(by_tag=""), "by_tag"),
        (dict(by_tag=3), "by_tag"),
        (dict(exits=False, limit=3), "limit"),
        (dict(exits=False, state="dead"), "state"),
    ],
)
def test_bad_snapshot_arguments_raise_invalid_input_naming_them(kwargs, named):
    from exitpool import InvalidInput

    pool = Pool(exits(3))
    with pytest.raises(InvalidInput, match=named.replace("(", r"\(")) as e:
        pool.snapshot(**kwargs)
    assert PASSWORD not in str(e.value)


def test_a_snapshot_taken_while_threads_lease_is_whole(large):
    # Records are copied in batches with the lock let go between them: what threads change
    # meanwhile must never tear the document (every exit once, matrix rows aligned).
    pool, _ = large
    stop = threading.Event()

    def lease_loop():
        n = 0
        while not stop.is_set() and n < 200_000:
            pool.release(pool.acquire(site="shop.example"), status=200)
            n += 1

    threads = [threading.Thread(target=lease_loop) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for _ in range(3):
            snap = pool.snapshot()
            ids = [e["exit_id"] for e in snap["exits"]]
            assert len(ids) == len(set(ids)) == 3000 and snap["matrix"]["exits"] == ids
            assert all(len(row) == len(snap["matrix"]["sites"]) for row in snap["matrix"]["cells"])
    finally:
        stop.set()
        for t in threads:
            t.join()
