"""Fleet mode on a highly available Redis: a Sentinel-managed primary and a Redis Cluster.

Every test starts real servers on loopback from Debian's redis-server (tests/redis_server.py):
a primary, its replica and three Sentinels; or three cluster primaries and a replica of the one
holding the namespace's slot. Workers are real processes (this file run as a script), each
taking a fixed number of leases while the test fails the primary over under them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest

import exitpool
from exitpool import Exit, Pool
from redis_server import Cluster, SentinelSet, wait_for
from test_fleet import max_overlap

WORKERS = 4
LEASES = 2_000
MAX_LEASES = 2
DATA_PW = "data-Secret-9f"
SENTINEL_PW = "sentinel-Secret-7c"


def exits(n: int = 3, reverse: bool = False) -> list:
    xs = [Exit(f"e{i}", f"http://user:pw@127.0.0.1:{9100 + i}", ip=f"127.0.1.{i + 1}") for i in range(n)]
    return list(reversed(xs)) if reverse else xs


def start_workers(url: str, ns: str) -> list:
    return [
        subprocess.Popen(
            [sys.executable, __file__, url, ns, str(i)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(WORKERS)
    ]


def wait_ready(procs: list) -> None:
    for p in procs:
        assert json.loads(p.stdout.readline())["ready"]


def results(procs: list) -> list:
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=60)
        assert p.returncode == 0, stderr
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    return out


def check_fleet(url: str, ns: str, reports: list) -> None:
    """Every worker took its leases, the fleet never held more than the ceiling on an exit, and
    every lease came back to the store that is primary now: none was lost in the failover."""
    assert [r["leases"] for r in reports] == [LEASES] * WORKERS, [r["leases"] for r in reports]
    # No worker fell back on its own state (which holds each ceiling per process only).
    for r in reports:
        assert r["fell_back"] == [], r["fell_back"]
    spans = [s for r in reports for s in r["spans"]]
    peak = max_overlap(spans)
    assert max(peak.values()) <= MAX_LEASES, peak
    # The ceiling was reached: the run could have shown a breach.
    assert max(peak.values()) == MAX_LEASES, peak
    fleet = Pool(exits(), store=url, namespace=ns).snapshot()["store"]["exits"]
    assert sum(e["active"] for e in fleet.values()) == 0, fleet
    assert sum(e["outcomes"]["success"] for e in fleet.values()) == WORKERS * LEASES, fleet


def no_slot_held(pool) -> None:
    """The fleet holds no lease of this pool's. Its last release may still be on its way (the
    store's sender thread sends it within milliseconds, on a connection of its own, so a
    snapshot taken at once can overtake it): waited for, bounded."""
    wait_for("the last release to reach the store", lambda: sum(e["active"] for e in pool.snapshot()["store"]["exits"].values()) == 0, 5)


# --- Sentinel ---------------------------------------------------------------------------------


@pytest.fixture
def sentinels(tmp_path):
    s = SentinelSet(tmp_path, password=DATA_PW, sentinel_password=SENTINEL_PW).start()
    yield s
    s.stop()


def test_a_sentinel_failover_during_leasing_loses_and_doubles_nothing(sentinels):
    before = sentinels.primary_port()
    procs = start_workers(sentinels.url, "sf")
    wait_ready(procs)
    time.sleep(0.5)
    assert sentinels.sentinel_cli(sentinels.sentinel_ports[0], "SENTINEL", "FAILOVER", SentinelSet.MASTER).strip() == "OK"
    reports = results(procs)
    after = sentinels.primary_port()
    assert after != before and after == sentinels.replica.port
    # The failover happened while the workers leased: some take met it and waited it out.
    assert any(r["slowest"] > 0.2 for r in reports), [r["slowest"] for r in reports]
    check_fleet(sentinels.url, "sf", reports)


def test_the_primary_killed_under_sentinel_is_replaced(sentinels):
    pool = Pool(exits(), store=sentinels.url, namespace="sk", max_leases=1)
    kinds = []
    pool.on_event(lambda e: kinds.append((e["kind"], e["message"])))
    for _ in range(20):
        with pool.lease():
            pass
    sentinels.primary.stop()
    # Sentinel needs down-after-milliseconds (1 s) and a vote; the store waits for it.
    wait_for("the Sentinels to promote the replica", lambda: sentinels.primary_port() == sentinels.replica.port, seconds=45)
    for _ in range(20):
        with pool.lease(timeout=10):
            pass
    assert pool.snapshot()["store"]["online"] is True, kinds
    no_slot_held(pool)


def test_sentinel_and_data_passwords_stay_secret(sentinels, caplog):
    pool = Pool(exits(), store=sentinels.url, namespace="pw")
    with pool.lease():
        pass
    seen = [repr(pool), str(pool.snapshot()), pool.snapshot()["store"]["url"]]
    assert SENTINEL_PW not in str(seen) and DATA_PW not in str(seen)
    assert pool.snapshot()["store"]["url"].startswith("redis+sentinel://:[secure]@127.0.0.1:")
    # A wrong data password, and a wrong Sentinel password: refused, naming neither.
    for bad in (sentinels.url.replace(DATA_PW, "wrong-data-pw"), sentinels.url.replace(SENTINEL_PW, "wrong-sentinel-pw")):
        with pytest.raises(exitpool.InvalidInput) as info:
            Pool(exits(), store=bad, namespace="pw")
        assert "refused" in str(info.value)
        for secret in (SENTINEL_PW, DATA_PW, "wrong-data-pw", "wrong-sentinel-pw"):
            assert secret not in str(info.value)
    # The Sentinels gone: the pool serves from its own state and says why, naming no secret.
    events = []
    pool.on_event(lambda e: events.append(e))
    for s in sentinels.sentinels:
        s.kill()
        s.wait(5)
    sentinels.primary.stop()
    with pool.lease(timeout=15):
        pass
    down = [e for e in events if e["kind"] == "store_unavailable"]
    assert down and pool.snapshot()["store"]["online"] is False
    # Waited out once: past the one-second pause, the next lease does not wait for a failover
    # again (8 s) while the store stays away.
    time.sleep(1.1)
    t0 = time.monotonic()
    with pool.lease(timeout=15):
        pass
    assert time.monotonic() - t0 < 4
    text = str(events) + str(pool.snapshot()) + caplog.text
    assert SENTINEL_PW not in text and DATA_PW not in text


@pytest.mark.parametrize(
    "url, why",
    [
        ("redis+sentinel://127.0.0.1:1", "name the master"),
        ("redis+sentinel://127.0.0.1:1/m/x", "not a number"),
        ("redis+sentinel://:s3cret-pw@127.0.0.1:1/m?db=2", "unknown parameter"),
        ("redis+sentinel://127.0.0.1:notaport/m", "no valid port"),
        ("redis+cluster://:s3cret-pw@127.0.0.1:1/0", "takes no parameters"),
    ],
)
def test_bad_ha_urls_are_refused_by_name(url, why):
    with pytest.raises(exitpool.InvalidInput, match=why) as info:
        Pool(exits(), store=url, namespace="bad")
    assert "s3cret-pw" not in str(info.value)


# --- Cluster ----------------------------------------------------------------------------------


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path, key="exitpool:{cf}:", password=DATA_PW).start()
    yield c
    c.stop()


def test_a_cluster_failover_during_leasing_loses_and_doubles_nothing(cluster):
    procs = start_workers(cluster.url, "cf")
    wait_ready(procs)
    time.sleep(0.5)
    assert cluster.replica.cli("CLUSTER", "FAILOVER").strip() == "OK"
    reports = results(procs)
    # The replica holds the namespace's slot now: the workers followed it (MOVED).
    wait_for("the replica to be primary", lambda: "role:master" in cluster.replica.cli("INFO", "replication"))
    check_fleet(cluster.url, "cf", reports)
    # Every key of the namespace is on that one node, in one slot.
    keys = cluster.replica.cli("KEYS", "exitpool:{cf}:*").split()
    assert keys and len({cluster.replica.cli("CLUSTER", "KEYSLOT", k).strip() for k in keys}) == 1
    shown = Pool(exits(), store=cluster.url, namespace="cf").snapshot()["store"]["url"]
    assert DATA_PW not in shown and shown.startswith("redis+cluster://:[secure]@")


def test_a_cluster_follows_its_slot_to_another_primary(cluster):
    # Resharding: the namespace's slot moves to another primary while a pool leases. Its keys
    # move in one MIGRATE (the documented way); meanwhile the store is sent on (ASK), and
    # once the slot is the other node's, redirected for good (MOVED).
    pool = Pool(exits(), store=cluster.url, namespace="cf", max_leases=1)
    kinds = []
    pool.on_event(lambda e: kinds.append(e["kind"]))

    def lease_10():
        for _ in range(10):
            with pool.lease():
                pass

    lease_10()
    slot = cluster.nodes[0].cli("CLUSTER", "KEYSLOT", "exitpool:{cf}:").strip()
    target = next(n for n in cluster.nodes[:3] if n is not cluster.owner)
    target_id = target.cli("CLUSTER", "MYID").strip()
    source_id = cluster.owner.cli("CLUSTER", "MYID").strip()
    assert target.cli("CLUSTER", "SETSLOT", slot, "IMPORTING", source_id).strip() == "OK"
    assert cluster.owner.cli("CLUSTER", "SETSLOT", slot, "MIGRATING", target_id).strip() == "OK"
    # While the slot is half moved, a script meeting a key that is not there yet stops; the
    # store tries again until the keys have moved, then is sent on to them (ASK).
    during = threading.Thread(target=lease_10)
    during.start()
    time.sleep(0.3)
    keys = cluster.owner.cli("CLUSTER", "GETKEYSINSLOT", slot, "1000").split()
    assert "exitpool:{cf}:" in keys
    auth = ["AUTH2", "default", DATA_PW]
    assert "OK" in cluster.owner.cli("MIGRATE", "127.0.0.1", str(target.port), "", "0", "5000", *auth, "KEYS", *keys)
    during.join(30)
    assert not during.is_alive()
    lease_10()  # ASK: the keys are on the importing node
    for n in cluster.nodes[:3]:
        assert n.cli("CLUSTER", "SETSLOT", slot, "NODE", target_id).strip() == "OK"
    lease_10()  # MOVED
    assert "store_unavailable" not in kinds
    assert cluster.owner.cli("CLUSTER", "COUNTKEYSINSLOT", slot).strip() == "0"
    no_slot_held(pool)
    fleet = pool.snapshot()["store"]["exits"]
    assert sum(e["leases"] for e in fleet.values()) == 40


# --- the worker -------------------------------------------------------------------------------


def worker(url: str, ns: str, index: int) -> dict:
    """Takes LEASES leases (bounded in tries and time), recording when each was surely held."""
    pool = Pool(exits(reverse=index % 2 == 1), store=url, namespace=ns, max_leases=MAX_LEASES, lease_ttl=30)
    fell_back = []
    pool.on_event(lambda e: fell_back.append(e["message"]) if e["kind"] == "store_unavailable" else None)
    spans, slowest, tries = [], 0.0, 0
    deadline = time.monotonic() + 50
    while len(spans) < LEASES and tries < 10 * LEASES and time.monotonic() < deadline:
        tries += 1
        t0 = time.monotonic()
        try:
            with pool.lease(timeout=10) as lease:
                start = time.monotonic()
                slowest = max(slowest, start - t0)
                time.sleep(0.001)
                spans.append((lease.exit_id, start, time.monotonic()))
        except exitpool.NoExitAvailable:
            continue
        if len(spans) == 1:
            print(json.dumps({"ready": True}), flush=True)
    del pool
    return {"leases": len(spans), "spans": spans, "slowest": slowest, "fell_back": fell_back}


if __name__ == "__main__":
    print(json.dumps(worker(sys.argv[1], sys.argv[2], int(sys.argv[3]))), flush=True)
