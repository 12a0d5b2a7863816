"""Pool(state=...): the in-process state survives a restart, with real processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from exitpool import Exit, InvalidInput, ManualClock, Pool

# One worker process: builds its pool from argv, does what it is told, prints one JSON line.
WORKER = r"""
import json, sys, time
from exitpool import Exit, NoExitAvailable, Pool

path, action, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
exits = [Exit(f"e{i}", f"http://user:hunter2-{i}@127.0.0.1:{9000 + i}") for i in range(n)]
state = None if action == "fresh" else path
pool = Pool(exits, state=state, state_interval=0.2, health={"base_ejection": 3.0, "jitter": 0.0}, max_leases=1)
out = {"events": [e["kind"] for e in pool.events()]}
if action in ("burn", "burn-and-hang"):
    exit_id = pool.assign("burner").exit_id
    while pool.state(exit_id) != "quarantined":
        pool.release(pool.acquire("burner"), error="connect")
    out.update(burned=exit_id, ends=time.time() + 3.0)
    with pool.lease("acct") as lease:
        out["acct"] = lease.exit_id
    if action == "burn-and-hang":
        # Leases held, the state saved at its interval: then the process is killed.
        out["held"] = [pool.acquire().exit_id for _ in range(3)]
        print(json.dumps(out), flush=True)
        time.sleep(60)
    pool.close()
else:
    out["states"] = {f"e{i}": pool.state(f"e{i}") for i in range(n)}
    out["acct"] = pool.assign("acct").exit_id
    free = 0
    try:
        for _ in range(n):
            pool.acquire(timeout=0)
            free += 1
    except NoExitAvailable:
        pass
    out["free"] = free
    pool.close()
print(json.dumps(out), flush=True)
"""


def run(path, action, n=10):
    done = subprocess.run([sys.executable, "-c", WORKER, str(path), action, str(n)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_restart_mid_backoff_keeps_a_burned_exit_out_until_its_backoff_ends(tmp_path):
    path = tmp_path / "state.json"
    first = run(path, "burn")
    burned = first["burned"]
    assert "state_new" in first["events"]
    # The file names exits by id only: no proxy URL, no password.
    text = path.read_text()
    assert "hunter2" not in text and "127.0.0.1" not in text
    assert json.loads(text)["version"] == 1

    second = run(path, "resume")
    assert "state_resumed" in second["events"]
    assert second["states"][burned] == "quarantined"
    assert second["acct"] == first["acct"]  # the session came back too
    # A pool without state= forgets: the burned exit would be back in rotation at once.
    assert run(path, "fresh")["states"][burned] == "healthy"

    # The backoff runs on across processes: out until it ends, then on trial.
    while time.time() < first["ends"] - 0.5:
        if time.time() < first["ends"] - 1.0:
            assert run(path, "resume")["states"][burned] == "quarantined"
        time.sleep(0.1)
    deadline = time.time() + 30
    while run(path, "resume")["states"][burned] == "quarantined":
        assert time.time() < deadline, "the backoff never ended"
        time.sleep(0.2)
    assert time.time() >= first["ends"] - 0.5


def test_a_worker_killed_holding_leases_resumes_from_its_last_save_with_no_slot_held(tmp_path):
    path = tmp_path / "state.json"
    proc = subprocess.Popen([sys.executable, "-c", WORKER, str(path), "burn-and-hang", "10"], stdout=subprocess.PIPE, text=True)
    try:
        first = json.loads(proc.stdout.readline())
        deadline = time.time() + 30
        # Killed once a save after the burn is on disk (the interval is 0.2 s).
        while not (path.exists() and first["burned"] in path.read_text()):
            assert time.time() < deadline, "no save within 30 s"
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    second = run(path, "resume")
    assert second["states"][first["burned"]] == "quarantined"
    # The dead worker's leases are not in the file: every exit in service has its slot free.
    assert second["free"] == 9


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        (None, "state_new"),
        ('{"format": "exitpool-state", "version": 1, "exits": [', "state_discarded"),
        ('{"format": "exitpool-state", "version": 7}', "state_discarded"),
        ('{"format": "exitpool-state", "version": 1, "saved_at": 0, "exits": ["other"]}', "state_discarded"),
        ('{"hello": "world"}', "state_discarded"),
    ],
)
def test_a_missing_corrupt_or_foreign_file_is_an_event_and_a_clean_start(tmp_path, body, kind):
    path = tmp_path / "state.json"
    if body is not None:
        path.write_text(body)
    pool = Pool([Exit("a", "http://user:pw@127.0.0.1:9001")], state=path, clock=ManualClock())
    events = pool.events()
    assert [e["kind"] for e in events] == [kind]
    assert str(path) in events[0]["message"]
    assert pool.state("a") == "healthy"
    pool.close()
    pool.close()  # a second close does nothing
    assert json.loads(path.read_text())["exits"] == ["a"]


def test_times_are_translated_to_the_new_clock(tmp_path):
    # A manual clock's readings are Unix time: 40 s pass between the save and the resume.
    path = tmp_path / "state.json"
    health = {"base_ejection": 100.0, "jitter": 0.0}
    clock = ManualClock(1000.0)
    pool = Pool([Exit(f"e{i}", f"http://u:p@127.0.0.1:{9000 + i}") for i in range(5)], state=path, clock=clock, health=health)
    burned = pool.assign("k").exit_id
    while pool.state(burned) != "quarantined":
        pool.release(pool.acquire("k"), error="connect")
    pool.close()
    later = ManualClock(1040.0)
    again = Pool([Exit(f"e{i}", f"http://u:p@127.0.0.1:{9000 + i}") for i in range(5)], state=path, clock=later, health=health)
    later.advance(59.0)
    assert again.state(burned) == "quarantined"
    later.advance(1.5)
    assert again.state(burned) == "probing"


def test_state_arguments_are_checked(tmp_path):
    exits = [Exit("a", "http://user:pw@127.0.0.1:9001")]
    with pytest.raises(InvalidInput, match="state must be a path"):
        Pool(exits, state=42)
    with pytest.raises(InvalidInput, match="state_interval"):
        Pool(exits, state=tmp_path / "s.json", state_interval=0)
    with pytest.raises(InvalidInput, match="store"):
        Pool(exits, state=tmp_path / "s.json", store="memory://persist-test")
    assert not os.path.exists(tmp_path / "s.json")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX only")
def test_a_forked_childs_copy_of_the_pool_never_saves_over_the_parents_file(tmp_path):
    path = tmp_path / "state.json"
    exits = [Exit(f"e{i}", f"http://u:p@127.0.0.1:{9000 + i}") for i in range(5)]
    pool = Pool(exits, state=path, state_interval=3600, clock=ManualClock())
    pool.save_state()
    before = path.read_text()
    pid = os.fork()
    if pid == 0:  # the child burns an exit in its copy and closes it
        code = 1
        try:
            burned = pool.assign("k").exit_id
            while pool.state(burned) != "quarantined":
                pool.release(pool.acquire("k"), error="connect")
            pool.close()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    assert path.read_text() == before
    pool.close()


def test_a_config_files_state_is_relative_to_the_file(tmp_path, monkeypatch):
    (tmp_path / "exitpool.toml").write_text(
        'state = "pool-state.json"\nstate_interval = 5\n[[exit]]\nproxy = "http://u:pw@127.0.0.1:9001"\n'
    )
    monkeypatch.chdir(tmp_path.parent)
    pool = Pool.from_config(tmp_path / "exitpool.toml", clock=ManualClock())
    pool.close()
    assert json.loads((tmp_path / "pool-state.json").read_text())["exits"] == ["u@127.0.0.1:9001"]
