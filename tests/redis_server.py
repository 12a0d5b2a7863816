"""A redis-server of a test's own: loopback, a free port, no persistence, killed at the end.

Shared by the fleet tests (tests/test_fleet.py) and the model-based tests (tests/test_model.py);
Debian's redis-server comes from scripts/test-deps.sh.
"""

from __future__ import annotations

import itertools
import socket
import subprocess
import time
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

# Socket names unique within the test run, so a server never takes another's socket for its own.
_serial = itertools.count()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """A redis-server of the test's own, on loopback, without persistence."""

    def __init__(
        self, tmp: Path, port: int = 0, password: str = "", tls: Optional[Tuple[Path, Path]] = None, extra: Sequence[str] = ()
    ) -> None:
        self._chose_port = not port
        self.tmp = tmp
        # More redis-server arguments (replication, cluster mode).
        self.extra = list(extra)
        self.port = port or _free_port()
        self.sock = tmp / f"redis-{next(_serial)}.sock"
        self.password = password
        # (certificate, key): the server speaks only TLS, on `port`.
        self.tls = tls
        self.proc: Optional[subprocess.Popen] = None

    def start(self) -> RedisServer:
        """Starts the server and waits until it accepts connections.

        Readiness is judged on the Unix socket only this server creates: a TCP connect alone
        could reach another process that took the port first, while ours exits on its failed
        bind. A server that exits that way is retried on another port, if the port was ours to
        choose.
        """
        for _ in range(5):
            if self._launch():
                return self
            if not self._chose_port:
                break
            self.port = _free_port()
        raise AssertionError(f"redis-server did not start on port {self.port}")

    def _launch(self) -> bool:
        port = ["--port", "0", "--tls-port", str(self.port)] if self.tls else ["--port", str(self.port)]
        args = ["redis-server", *port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--unixsocket", str(self.sock)]
        if self.tls:
            cert, key = self.tls
            args += ["--tls-cert-file", str(cert), "--tls-key-file", str(key), "--tls-ca-cert-file", str(cert), "--tls-auth-clients", "no"]
        if self.password:
            args += ["--requirepass", self.password, "--masterauth", self.password]
        args += ["--dir", str(self.tmp), *[a.replace("{port}", str(self.port)) for a in self.extra]]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while self.proc.poll() is None:
            try:
                with socket.socket(socket.AF_UNIX) as s:
                    s.settimeout(0.2)
                    s.connect(str(self.sock))
                return True
            except OSError:
                assert time.monotonic() < deadline, "redis-server did not start"
                time.sleep(0.02)
        return False

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        if self.tls:
            # A self-signed test server: verification off (#insecure), the channel still encrypted.
            return f"rediss://{auth}127.0.0.1:{self.port}/0#insecure"
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def cli(self, *args: str) -> str:
        auth = ["-a", self.password, "--no-auth-warning"] if self.password else []
        return subprocess.run(["redis-cli", "-p", str(self.port), *auth, *args], capture_output=True, text=True, timeout=10).stdout


def wait_for(what: str, check, seconds: float = 20) -> None:
    """Polls `check` (bounded) until it is true."""
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


class SentinelSet:
    """A primary, its replica(s) and three Sentinels watching them, on loopback."""

    MASTER = "fleet"

    def __init__(self, tmp: Path, password: str = "", sentinel_password: str = "", replicas: int = 1) -> None:
        self.tmp = tmp
        self.password = password
        self.sentinel_password = sentinel_password
        self.n_replicas = replicas
        self.primary = RedisServer(tmp, password=password)
        self.replica: Optional[RedisServer] = None
        self.replicas: List[RedisServer] = []
        self.sentinels: List[subprocess.Popen] = []
        self.sentinel_ports: List[int] = []

    def start(self) -> SentinelSet:
        self.primary.start()
        for priority in ("10", "20", "30")[: self.n_replicas]:
            # The first replica is the one a failover promotes (the lower priority).
            extra = ["--replicaof", "127.0.0.1", str(self.primary.port), "--replica-priority", priority]
            self.replicas.append(RedisServer(self.tmp, password=self.password, extra=extra).start())
        for r in self.replicas:
            wait_for("the replicas to sync", lambda r=r: "master_link_status:up" in r.cli("INFO", "replication"))
        self.replica = self.replicas[0]
        for _ in range(3):
            port = _free_port()
            conf = self.tmp / f"sentinel-{next(_serial)}.conf"
            lines = [
                f"port {port}",
                "bind 127.0.0.1",
                f"dir {self.tmp}",
                f"sentinel monitor {self.MASTER} 127.0.0.1 {self.primary.port} 2",
                f"sentinel down-after-milliseconds {self.MASTER} 1000",
                f"sentinel failover-timeout {self.MASTER} 5000",
            ]
            if self.password:
                lines.append(f"sentinel auth-pass {self.MASTER} {self.password}")
            if self.sentinel_password:
                lines += [f"requirepass {self.sentinel_password}", f"sentinel sentinel-pass {self.sentinel_password}"]
            conf.write_text("\n".join(lines) + "\n")
            self.sentinels.append(
                subprocess.Popen(["redis-server", str(conf), "--sentinel"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            )
            self.sentinel_ports.append(port)
        for port in self.sentinel_ports:
            # Each Sentinel sees the replica and the two others (hello messages, every 2 s).
            wait_for(
                "the Sentinels to meet",
                lambda port=port: (
                    "num-other-sentinels\n2" in self.sentinel_cli(port, "SENTINEL", "master", self.MASTER)
                    and f"num-slaves\n{self.n_replicas}" in self.sentinel_cli(port, "SENTINEL", "master", self.MASTER)
                ),
            )
        return self

    def sentinel_cli(self, port: int, *args: str) -> str:
        auth = ["-a", self.sentinel_password, "--no-auth-warning"] if self.sentinel_password else []
        return subprocess.run(["redis-cli", "-p", str(port), *auth, *args], capture_output=True, text=True, timeout=10).stdout

    def primary_port(self) -> int:
        """The primary's port as the first Sentinel names it."""
        return int(self.sentinel_cli(self.sentinel_ports[0], "SENTINEL", "get-master-addr-by-name", self.MASTER).split()[1])

    @property
    def url(self) -> str:
        auth = f":{self.sentinel_password}@" if self.sentinel_password else ""
        hosts = ",".join(f"127.0.0.1:{p}" for p in self.sentinel_ports)
        query = f"?password={self.password}" if self.password else ""
        return f"redis+sentinel://{auth}{hosts}/{self.MASTER}/0{query}"

    def stop(self) -> None:
        for s in self.sentinels:
            if s.poll() is None:
                s.kill()
                s.wait(5)
        for server in (*self.replicas, self.primary):
            server.stop()


class Cluster:
    """A Redis Cluster on loopback: three primaries holding every slot, and one replica of the
    primary that holds `slot_of` (a namespace's one slot), so that it can fail over."""

    def __init__(self, tmp: Path, key: str, password: str = "") -> None:
        self.tmp = tmp
        self.password = password
        self.key = key
        self.nodes: List[RedisServer] = []

    def _node(self) -> RedisServer:
        """A cluster node; it also listens on its port + 10000 (the cluster bus), so both must
        be free: a node that could not bind them exits and is tried again elsewhere."""
        for _ in range(10):
            port = _free_port()
            if port > 55000:
                continue
            try:
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
            n = next(_serial)
            extra = ["--cluster-enabled", "yes", "--cluster-config-file", f"nodes-{n}.conf", "--cluster-node-timeout", "2000"]
            node = RedisServer(self.tmp, port=port, password=self.password, extra=extra)
            try:
                node.start()
            except AssertionError:
                continue
            # Ready only once it answers on its TCP port too (the bus is bound before it).
            time.sleep(0.05)
            if node.proc.poll() is None and "PONG" in node.cli("PING"):
                return node
            node.stop()
        raise AssertionError("no cluster node could start")

    def start(self) -> Cluster:
        self.nodes = [self._node() for _ in range(4)]
        primaries = self.nodes[:3]
        for i, node in enumerate(primaries):
            lo, hi = i * 16384 // 3, (i + 1) * 16384 // 3 - 1
            answer = node.cli("CLUSTER", "ADDSLOTSRANGE", str(lo), str(hi))
            assert answer.strip() == "OK", answer
        for node in self.nodes[1:]:
            assert node.cli("CLUSTER", "MEET", "127.0.0.1", str(self.nodes[0].port)).strip() == "OK"
        for node in self.nodes:
            wait_for(
                "the cluster to agree",
                lambda node=node: (
                    "cluster_state:ok" in node.cli("CLUSTER", "INFO") and node.cli("CLUSTER", "NODES").count("connected") == 4
                ),
            )
        slot = int(self.nodes[0].cli("CLUSTER", "KEYSLOT", self.key))
        owner = next(n for i, n in enumerate(primaries) if i * 16384 // 3 <= slot <= (i + 1) * 16384 // 3 - 1)
        owner_id = owner.cli("CLUSTER", "MYID").strip()
        replica = self.nodes[3]
        wait_for("the replica to be attached", lambda: replica.cli("CLUSTER", "REPLICATE", owner_id).strip() == "OK")
        wait_for("the replica to sync", lambda: "master_link_status:up" in replica.cli("INFO", "replication"))
        for node in self.nodes:
            wait_for("every node to see the replica", lambda node=node: node.cli("CLUSTER", "NODES").count("slave") == 1)
        self.owner, self.replica = owner, replica
        return self

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return "redis+cluster://" + auth + ",".join(f"127.0.0.1:{n.port}" for n in self.nodes[:3])

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
