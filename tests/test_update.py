"""pool.update: a new list applied as a difference; watched list and config files; the Scrapy
middleware's list reloaded on change."""

from __future__ import annotations

import os
import threading
import time

import pytest
from scrapy.utils.test import get_crawler

from exitpool import Exit, Gateway, InvalidInput, ManualClock, Pool, Ring, SessionExitLost, load_exits
from exitpool.scrapy import ExitPoolMiddleware


def ex(i, password="pw", **kw):
    return Exit(f"e{i}", f"http://user:{password}@127.0.0.1:{9000 + i}", **kw)


def burn(pool, key):
    """Connection failures on key's exit until it is quarantined; its id."""
    exit_id = pool.assign(key).exit_id
    for _ in range(20):
        if pool.state(exit_id) == "quarantined":
            return exit_id
        lease = pool.acquire(key)
        pool.release(lease, error="connect")
    raise AssertionError(f"{exit_id} was not quarantined")


def key_on(pool, exit_id, prefix="k"):
    return next(k for k in (f"{prefix}{i}" for i in range(100_000)) if pool.assign(k).exit_id == exit_id)


def wait_until(cond, what, timeout=15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_reload_of_1000_exits_moves_only_the_removed_exits_keys():
    old = [ex(i) for i in range(1000)]
    pool = Pool(old, clock=ManualClock())
    keys = [f"account-{i}" for i in range(20_000)]
    before = {k: pool.assign(k).exit_id for k in keys}
    removed = {f"e{i}" for i in range(0, 1000, 37)}
    new = [e for e in old if e.exit_id not in removed]
    done = pool.update(new)
    assert sorted(done["removed"]) == sorted(removed)
    assert (done["added"], done["changed"], done["unchanged"]) == ([], [], len(new))
    moved = {k for k in keys if pool.assign(k).exit_id != before[k]}
    # Exactly the keys that lived on a removed exit, which is what the Ring helper says too.
    assert moved == {k for k in keys if before[k] in removed}
    assert moved == set(Ring(old).moved(Ring(new), keys))


def test_update_keeps_every_state_of_unchanged_and_changed_exits_and_drains_removed_ones():
    clock = ManualClock()
    pool = Pool([ex(i) for i in range(10)], clock=clock, seed=1)
    burned = burn(pool, "burner")
    stay_key = next(k for k in (f"s{i}" for i in range(1000)) if pool.assign(k).exit_id != burned)
    with pool.lease(stay_key) as stay:
        pass
    gone = next(f"e{i}" for i in range(10) if f"e{i}" not in (burned, stay.exit_id))
    gone_key = key_on(pool, gone, "g")
    live = pool.acquire(gone_key)
    released = pool.snapshot()["counts"]["released"]
    new = [ex(i, "rotated" if f"e{i}" == burned else "pw") for i in range(10) if f"e{i}" != gone] + [ex(10)]
    events = []
    pool.on_event(events.append)

    done = pool.update(new)

    assert done == {"added": ["e10"], "removed": [gone], "changed": [burned], "unchanged": 8}
    assert [e["kind"] for e in events] == ["exits_updated"]
    # The changed exit: same id, state kept (still out), the new URL from its next lease on.
    assert pool.state(burned) == "quarantined"
    assert ":rotated@" in pool.exit(burned).proxy
    # The unchanged exit's session holds.
    with pool.lease(stay_key) as again:
        assert again.exit_id == stay.exit_id
    # The removed exit drains: its live lease finishes and counts, its session ends visibly,
    # and it takes no new lease.
    pool.release(live)
    assert pool.snapshot()["counts"]["released"] == released + 2
    with pytest.raises(SessionExitLost):
        pool.acquire(gone_key)
    assert gone not in pool and "e10" in pool
    assert all(pool.acquire().exit_id != gone for _ in range(50))


def test_update_takes_gateways_and_their_credentials_change_in_place():
    gw = Gateway("gw", "http://user:old@127.0.0.1:7000", slots=3, username="user-session-{session}")
    pool = Pool([ex(0), gw], clock=ManualClock(1_000_000.0))
    assert pool.update([ex(0), gw]) == {"added": [], "removed": [], "changed": [], "unchanged": 4}
    rotated = Gateway("gw", "http://user:new@127.0.0.1:7000", slots=2, username="user-session-{session}")
    done = pool.update([ex(0), rotated])
    assert (done["changed"], done["removed"]) == (["gw-0", "gw-1"], ["gw-2"])
    assert ":new@" in pool.exit("gw-0").proxy
    assert pool.update([ex(0)])["removed"] == ["gw-0", "gw-1"]


@pytest.mark.parametrize(
    "bad",
    [
        [ex(0), ex(1), ex(0)],  # an id twice
        [ex(0), "http://user:pw@127.0.0.1:9"],  # not an Exit
        [],  # nothing at all
    ],
)
def test_bad_input_changes_nothing(bad):
    pool = Pool([ex(0), ex(1), ex(2)], clock=ManualClock())
    with pytest.raises(InvalidInput) as info:
        pool.update(bad)
    assert "pw" not in str(info.value)
    assert [e.exit_id for e in pool.exits] == ["e0", "e1", "e2"]
    assert not [e for e in pool.events() if e["kind"] == "exits_updated"]


def test_subsets_follow_an_update_and_refuse_one_of_their_own():
    pool = Pool([ex(0, tags={"cc": "de"}), ex(1, tags={"cc": "us"})], clock=ManualClock())
    de = pool.subset(cc="de")
    pool.update([ex(1, tags={"cc": "us"}), ex(2, tags={"cc": "de"})])
    assert [e.exit_id for e in de.exits] == ["e2"]
    # A tag change moves an exit between subsets and keeps its state.
    pool.update([ex(1, tags={"cc": "de"}), ex(2, tags={"cc": "de"})])
    assert [e.exit_id for e in de.exits] == ["e1", "e2"]
    with pytest.raises(InvalidInput, match="whole pool"):
        de.update([ex(1)])


def write(path, lines):
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, path)


def test_a_watched_list_applies_a_change_keeps_the_old_list_on_a_bad_one_and_stops_on_close(tmp_path):
    path = tmp_path / "proxies.txt"
    write(path, [f"e{i} http://user:pw@127.0.0.1:{9000 + i}" for i in range(3)])
    pool = Pool(load_exits(path, watch=True, watch_interval=0.05), clock=ManualClock())
    events = []
    pool.on_event(events.append)
    write(path, [f"e{i} http://user:pw@127.0.0.1:{9000 + i}" for i in range(1, 5)])
    wait_until(lambda: sorted(e.exit_id for e in pool.exits) == ["e1", "e2", "e3", "e4"], "the new list")
    # A list that does not parse: the old list stays, and an event names the error, masked.
    write(path, ["e9 http://user:secret-pw@127.0.0.1:notaport"])
    wait_until(lambda: any(e["kind"] == "exits_reload_failed" for e in pool.events()), "the failure event")
    failed = next(e for e in pool.events() if e["kind"] == "exits_reload_failed")
    assert "secret-pw" not in failed["message"] and "proxies.txt" in failed["message"]
    assert sorted(e.exit_id for e in pool.exits) == ["e1", "e2", "e3", "e4"]
    watchers = [t for t in threading.enumerate() if t.name.startswith("exitpool-watch")]
    assert watchers
    pool.close()
    assert not any(t.is_alive() for t in watchers)
    write(path, ["e7 http://user:pw@127.0.0.1:9007"])
    time.sleep(0.3)
    assert "e7" not in pool


def test_a_watched_config_applies_its_exits_file_and_its_own_tables(tmp_path):
    (tmp_path / "proxies.txt").write_text("a http://user:pw@127.0.0.1:9001\n")
    cfg = tmp_path / "exitpool.toml"
    cfg.write_text('strategy = "round_robin"\nexits_file = "proxies.txt"\n')
    pool = Pool.from_config(cfg, watch=True, watch_interval=0.05, clock=ManualClock())
    try:
        write(tmp_path / "proxies.txt", ["a http://user:pw@127.0.0.1:9001", "b http://user:pw@127.0.0.1:9002"])
        wait_until(lambda: "b" in pool, "the list file's change")
        write(cfg, ['strategy = "round_robin"', 'exits_file = "proxies.txt"', "[[exit]]", 'id = "c"', 'proxy = "http://127.0.0.1:9003"'])
        wait_until(lambda: "c" in pool, "the config file's change")
        write(cfg, ["strategy = ", "[[exit"])
        wait_until(lambda: any(e["kind"] == "exits_reload_failed" for e in pool.events()), "the failure event")
        assert sorted(e.exit_id for e in pool.exits) == ["a", "b", "c"]
    finally:
        pool.close()


def test_watch_arguments_are_checked():
    with pytest.raises(InvalidInput, match="path"):
        load_exits(["a 127.0.0.1:1"], watch=True)
    with pytest.raises(InvalidInput, match="watch_interval"):
        load_exits("x.txt", watch=True, watch_interval=0)
    with pytest.raises(InvalidInput, match="watch=True"):
        load_exits(["a 127.0.0.1:1"], watch_interval=1.0)


def test_the_scrapy_middleware_reloads_its_list_file_when_it_changes(tmp_path):
    path = tmp_path / "proxies.txt"
    write(path, ["exit-a http://alice:pw-a@127.0.0.1:9001"])
    crawler = get_crawler(None, {"EXITPOOL_PROXY_LIST_PATH": str(path)})
    mw = ExitPoolMiddleware.from_crawler(crawler)
    # The middleware's own watch, sped up for the test: the file is looked at again.
    watcher = next(t for t in threading.enumerate() if t.name == f"exitpool-watch {path}")
    write(path, ["exit-a http://alice:pw-a@127.0.0.1:9001", "exit-b http://bob:pw-b@127.0.0.1:9002"])
    wait_until(lambda: "exit-b" in mw.pool, "the middleware's pool to take the new list", timeout=30.0)
    mw._spider_closed(None)
    assert not watcher.is_alive()


def test_a_plain_exit_that_becomes_a_gateway_slot_keeps_its_place_and_joins_the_gateway():
    pool = Pool([Exit("gw-0", "http://u:p@127.0.0.1:9001"), ex(1)], clock=ManualClock(1_000_000.0))
    gw = Gateway("gw", "http://user:pw@127.0.0.1:7000", slots=2, username="user-session-{session}")
    assert pool.update([ex(1), gw]) == {"added": ["gw-1"], "removed": [], "changed": ["gw-0"], "unchanged": 1}
    assert pool.snapshot()["gateways"][0]["slot_states"]["healthy"] == 2
    assert "session-" in pool.exit("gw-0").proxy
