"""Gateways in fleet mode: every worker uses the same token for a slot, and a session bound in
the shared store ends with its slot's token, once, whichever worker leases the key next.

The pools' time is a ManualClock (gateways read it as Unix time), on the in-process memory
store and on a real redis-server (tests/redis_server.py); two real processes show the tokens
agree without talking."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import test_fleet
from exitpool import Gateway, ManualClock, Pool, SessionExitLost
from redis_server import RedisServer

T0 = 1_700_000_000.0
URL = "http://customer-c1:s3cret@gw.provider.example:7777"


def resi(**kw):
    return Gateway("resi", URL, slots=20, username="{user}-session-{session}", lifetime=600, **kw)


#: The fleet tests' store fixture: the in-process store, then a real redis-server of the test's own.
store = test_fleet.store


def workers(store, clock, **kw):
    return [Pool([resi(**kw)], store=store, namespace="gw", clock=clock) for _ in range(2)]


@pytest.mark.parametrize("first", [0, 1], ids=["the-binder-sees-it", "another-worker-sees-it"])
def test_a_rotated_session_ends_once_for_the_fleet_whichever_worker_leases(store, first):
    clock = ManualClock(T0)
    pools = workers(store, clock)
    with pools[0].lease("acct-1") as lease:
        slot, token = lease.exit_id, lease.proxy
    with pools[1].lease("acct-1") as lease:
        assert (lease.exit_id, lease.strategy, lease.proxy) == (slot, "session", token)
    clock.advance(600.0)  # every slot's token has rotated
    with pytest.raises(SessionExitLost, match="gateway session expired") as e:
        pools[first].lease("acct-1").__enter__()
    assert e.value.exit_id == slot
    # Once: the next lease, on either worker, binds afresh on the slot's new token, and the
    # other worker then shares that new session.
    for p in (pools[1 - first], pools[first]):
        with p.lease("acct-1") as lease:
            assert lease.exit_id == slot and lease.proxy != token
    lost = [e for e in pools[first].events() if e["kind"] == "session_lost"]
    assert len(lost) == 1 and "gateway session expired" in lost[0]["message"], lost
    assert not any(e["kind"] == "session_lost" for e in pools[1 - first].events())


def test_a_rebinding_gateway_keeps_the_fleet_session_across_rotations(store):
    clock = ManualClock(T0)
    pools = workers(store, clock, rebind=True)
    with pools[0].lease("acct-1") as lease:
        slot = lease.exit_id
    for _ in range(3):
        clock.advance(600.0)
        for p in pools:
            with p.lease("acct-1") as lease:
                assert (lease.exit_id, lease.strategy) == (slot, "session")


WORKER = """
import json, sys
from exitpool import Gateway, ManualClock, Pool
url, at, order = sys.argv[1], float(sys.argv[2]), sys.argv[3]
g = Gateway("resi", "http://customer-c1:s3cret@gw.provider.example:7777", slots=50,
            username="{user}-session-{session}", lifetime=600)
pool = Pool([g], store=url, namespace="tokens", clock=ManualClock(at))
keys = [f"acct-{i}" for i in range(30)]
out = {}
for k in (keys if order == "forward" else keys[::-1]):
    with pool.lease(k) as lease:
        out[k] = [lease.exit_id, lease.exit.username]
print(json.dumps(out))
"""


def test_two_processes_on_one_redis_use_the_same_token_for_each_slot(tmp_path):
    server = RedisServer(tmp_path).start()
    try:
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", WORKER, server.url, str(T0 + 1234.5), order],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for order in ("forward", "backward")
        ]
        outs = []
        for p in procs:
            out, err = p.communicate(timeout=120)
            assert p.returncode == 0, err
            outs.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        server.stop()
    assert outs[0] == outs[1]
    g = Gateway("resi", URL, slots=50, username="{user}-session-{session}", lifetime=600)
    for exit_id, username in outs[0].values():
        slot = int(exit_id.rsplit("-", 1)[1])
        assert username == f"customer-c1-session-{g.token(slot, at=T0 + 1234.5)}"
    assert len({u for _, u in outs[0].values()}) == len({e for e, _ in outs[0].values()}) > 1
