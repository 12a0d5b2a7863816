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
from typing import Optional, Tuple

# Socket names unique within the test run, so a server never takes another's socket for its own.
_serial = itertools.count()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """A redis-server of the test's own, on loopback, without persistence."""

    def __init__(self, tmp: Path, port: int = 0, password: str = "", tls: Optional[Tuple[Path, Path]] = None) -> None:
        self._chose_port = not port
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
            args += ["--requirepass", self.password]
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
