"""Fleet mode when the store misbehaves, against a real redis-server: a stall (CLIENT PAUSE),
children that end with os._exit (multiprocessing), and a store that refuses the client.

Each test starts its own server on a free loopback port (tests/redis_server.py).
"""

from __future__ import annotations

import multiprocessing
import time

import pytest

import exitpool
import fleet_child
from exitpool import Exit, Pool
from redis_server import RedisServer


@pytest.fixture
def redis(tmp_path):
    server = RedisServer(tmp_path).start()
    yield server
    server.stop()


def one_exit() -> list:
    return [Exit("e0", "http://127.0.0.1:9100")]


def fleet_pool(url: str, namespace: str) -> Pool:
    """A pool whose only slot, once held, stays held for a minute unless handed back."""
    return Pool(one_exit(), store=url, namespace=namespace, max_leases=1, lease_ttl=60)


# --- a stalled store --------------------------------------------------------------------------


def test_a_release_during_a_redis_pause_frees_its_slot_when_the_pause_ends(redis):
    a, b = fleet_pool(redis.url, "pause"), fleet_pool(redis.url, "pause")
    events = []
    a.on_event(lambda e: events.append((e["kind"], e["message"])))
    held = a.acquire()
    assert redis.cli("CLIENT", "PAUSE", "1500", "ALL").strip() == "OK"
    resumes = time.monotonic() + 1.5
    assert a.release(held) is True
    # While the release cannot be sent, the pool does not claim the store is fine.
    online = True
    while online and time.monotonic() < resumes:
        time.sleep(0.05)
        online = a.snapshot()["store"]["online"]
    assert online is False
    time.sleep(max(0.0, resumes - time.monotonic()))
    # Sent once the store answers: the slot is free long before lease_ttl (60 s).
    b.release(b.acquire(timeout=10))
    assert a.snapshot()["store"]["online"] is True
    kinds = [k for k, _ in events]
    assert "store_unavailable" in kinds and "store_rejoined" in kinds
    assert kinds.index("store_unavailable") < kinds.index("store_rejoined")
    # Each release counted once (b's snapshot sends b's own release first).
    fleet = b.snapshot()["store"]["exits"]["e0"]
    assert (fleet["active"], fleet["leases"], fleet["outcomes"]["success"]) == (0, 2, 2)


# --- children that end with os._exit ----------------------------------------------------------


@pytest.mark.parametrize("method", ["fork", "forkserver", "spawn"])
def test_a_child_that_builds_a_pool_hands_back_its_last_release(redis, method):
    ctx = multiprocessing.get_context(method)
    child = ctx.Process(target=fleet_child.lease_once, args=(redis.url, method))
    child.start()
    child.join(60)
    assert child.exitcode == 0
    # The child's slot is free now, not when its lease expires in a minute.
    fleet_pool(redis.url, method).acquire(timeout=2.0)


def test_a_forked_child_using_its_parents_pool_hands_back_its_last_release(redis):
    pool = fleet_pool(redis.url, "inherited")
    pool.release(pool.acquire())  # connected before the fork
    other = fleet_pool(redis.url, "inherited")
    ctx = multiprocessing.get_context("fork")
    for _ in range(3):
        child = ctx.Process(target=fleet_child.lease_on, args=(pool,))
        child.start()
        child.join(60)
        assert child.exitcode == 0
        other.release(other.acquire(timeout=2.0))
    fleet = other.snapshot()["store"]["exits"]["e0"]
    assert (fleet["active"], fleet["leases"]) == (0, 7)


# --- a store that refuses the client ----------------------------------------------------------


def test_a_store_that_refuses_the_client_is_refused_when_the_pool_is_built(tmp_path):
    server = RedisServer(tmp_path, password="s3cr3t-Pa55").start()
    try:
        base = f"127.0.0.1:{server.port}"
        refused = {
            "wrong password": f"redis://:wrong-Pa55@{base}/0",
            "no password": f"redis://{base}/0",
            "unknown user": f"redis://nobody:s3cr3t-Pa55@{base}/0",
            "no such database": f"redis://:s3cr3t-Pa55@{base}/99",
        }
        for case, url in refused.items():
            with pytest.raises(exitpool.InvalidInput, match="refused") as bad:
                Pool(one_exit(), store=url, namespace="pw")
            message = str(bad.value)
            assert "s3cr3t-Pa55" not in message and "wrong-Pa55" not in message, (case, message)
            assert str(server.port) in message, (case, message)
        # The right URL is accepted, database 15 of 16 included.
        for db in (0, 15):
            pool = Pool(one_exit(), store=f"redis://:s3cr3t-Pa55@{base}/{db}", namespace="pw")
            pool.release(pool.acquire())
            assert pool.snapshot()["store"]["online"] is True
    finally:
        server.stop()


def test_an_unreachable_store_still_falls_back_to_local_state(tmp_path):
    server = RedisServer(tmp_path).start()
    url = server.url
    server.stop()
    pool = Pool(one_exit(), store=url, namespace="down")
    pool.release(pool.acquire(timeout=0))
    assert pool.snapshot()["store"]["online"] is False


def test_a_password_changed_at_run_time_makes_the_pool_serve_locally_and_say_why(redis):
    pool = Pool(one_exit(), store=redis.url, namespace="rt")
    pool.release(pool.acquire())
    assert redis.cli("CONFIG", "SET", "requirepass", "n3w-Pa55").strip() == "OK"
    # Connections made before the change stay authenticated; drop them.
    redis.cli("-a", "n3w-Pa55", "--no-auth-warning", "CLIENT", "KILL", "TYPE", "normal")
    pool.release(pool.acquire(timeout=0))
    assert pool.snapshot()["store"]["online"] is False
    (message,) = [e["message"] for e in pool.events() if e["kind"] == "store_unavailable"]
    assert "n3w-Pa55" not in message


def test_forks_while_the_sender_thread_works_leave_no_child_stuck(redis):
    # A fork copies only the forking thread: a store lock held at that moment by the store's
    # sender thread (or by a thread waiting on Redis) would stay held forever in the child.
    # exitpool holds every store lock across a fork, so each child can lease at once.
    import os
    import signal
    import threading

    pool = Pool([Exit(f"e{i}", f"http://127.0.0.1:{9100 + i}") for i in range(4)], store=redis.url, namespace="forks", lease_ttl=60)
    stop = threading.Event()

    def release_in_a_loop() -> None:
        # Each release waits a moment for a command to ride with, so the sender thread sends.
        for _ in range(100_000):
            if stop.is_set():
                return
            with pool.lease():
                pass
            time.sleep(0.0005)

    worker = threading.Thread(target=release_in_a_loop)
    worker.start()
    stuck = []
    try:
        for _ in range(40):
            pid = os.fork()
            if pid == 0:  # the child: one lease, then out, whatever happens
                code = 1
                try:
                    with pool.lease(timeout=5):
                        code = 0
                finally:
                    os._exit(code)
            deadline = time.monotonic() + 20
            while True:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    assert os.waitstatus_to_exitcode(status) == 0
                    break
                if time.monotonic() > deadline:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                    stuck.append(pid)
                    break
                time.sleep(0.005)
    finally:
        stop.set()
        worker.join(timeout=30)
    assert stuck == []


# --- one worker cut off -----------------------------------------------------------------------


class _Link:
    """A loopback TCP link to Redis that a test can cut (every connection dropped, new ones
    refused at once) and heal: one worker's network partition, the server and the other
    workers untouched."""

    def __init__(self, port: int) -> None:
        import socket
        import threading

        self._target = ("127.0.0.1", port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)
        self.port = self._listener.getsockname()[1]
        self._open: list = []
        self._cut = False
        self._stop = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        import socket
        import threading

        while not self._stop:
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            if self._cut:
                client.close()
                continue
            upstream = socket.create_connection(self._target, timeout=2)
            with self._lock:
                self._open += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src, dst) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.close()
            except OSError:
                pass

    def cut(self) -> None:
        import socket

        self._cut = True
        with self._lock:
            for s in self._open:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            self._open.clear()

    def heal(self) -> None:
        self._cut = False

    def close(self) -> None:
        self.cut()
        self._stop = True
        self._thread.join(timeout=2)
        self._listener.close()


def test_a_worker_cut_off_from_redis_serves_locally_and_rejoins_while_the_others_keep_sharing(redis):
    link = _Link(redis.port)
    try:
        cut_off = Pool(one_exit(), store=f"redis://127.0.0.1:{link.port}/0", namespace="part", max_leases=1, lease_ttl=60)
        other = fleet_pool(redis.url, "part")
        kinds: list = []
        cut_off.on_event(lambda e: kinds.append(e["kind"]))
        # Shared while the link is up: a lease one holds is the other's too.
        held = cut_off.acquire()
        with pytest.raises(exitpool.NoExitAvailable):
            other.acquire(timeout=0)
        cut_off.release(held)
        # The release reaches the server with the pool's next command or within milliseconds.
        other.release(other.acquire(timeout=5))

        link.cut()
        # The cut-off worker serves from its own state and says so; the other one carries on
        # sharing with the server, untouched.
        for _ in range(5):
            cut_off.release(cut_off.acquire(timeout=0))
        assert cut_off.snapshot()["store"]["online"] is False
        assert "store_unavailable" in kinds
        mine = other.acquire(timeout=5)
        assert other.snapshot()["store"]["online"] is True
        other.release(mine)

        link.heal()
        time.sleep(1.1)  # past the one-second pause before the store is tried again
        back = cut_off.acquire(timeout=0)
        assert cut_off.snapshot()["store"]["online"] is True
        assert kinds.index("store_unavailable") < kinds.index("store_rejoined")
        # Rejoined: its lease is the fleet's again.
        with pytest.raises(exitpool.NoExitAvailable):
            other.acquire(timeout=0)
        cut_off.release(back)
    finally:
        link.close()
