"""A redis-server of a test's own: loopback, a free port, no persistence, killed at the end.

Shared by the fleet tests (tests/test_fleet.py) and the model-based tests (tests/test_model.py);
Debian's redis-server comes from scripts/test-deps.sh.
"""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path
from typing import Optional, Tuple


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """A redis-server of the test's own, on loopback, without persistence."""

    def __init__(self, tmp: Path, port: int = 0, password: str = "", tls: Optional[Tuple[Path, Path]] = None) -> None:
        self.port = port or _free_port()
        self.sock = tmp / f"redis-{self.port}.sock"
        self.password = password
        # (certificate, key): the server speaks only TLS, on `port`.
        self.tls = tls
        self.proc: Optional[subprocess.Popen] = None

    def start(self) -> "RedisServer":
        port = ["--port", "0", "--tls-port", str(self.port)] if self.tls else ["--port", str(self.port)]
        args = ["redis-server", *port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--unixsocket", str(self.sock)]
        if self.tls:
            cert, key = self.tls
            args += ["--tls-cert-file", str(cert), "--tls-key-file", str(key), "--tls-ca-cert-file", str(cert), "--tls-auth-clients", "no"]
        if self.password:
            args += ["--requirepass", self.password]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return self
            except OSError:
                assert time.monotonic() < deadline, "redis-server did not start"
                time.sleep(0.02)

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
