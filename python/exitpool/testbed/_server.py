"""The base of every testbed server: a TCP server on a fixed loopback port that can be killed
and revived on the same port, with controls callable from the loop's thread or any other.

Its own module because the proxy (plain asyncio streams) and the aiohttp servers (site,
control endpoints) both build on it, and the loopback checks here guard every address the
testbed binds or reaches.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import ipaddress
import socket
from typing import Callable, List, Optional, Tuple, TypeVar

T = TypeVar("T")

_CONTROL_TIMEOUT = 10.0  # waiting for the loop thread to run a control


def _check_loopback(ip: str, what: str) -> str:
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        raise ValueError(f"{what} {ip!r} is not an IP address") from None
    if addr.version != 4 or not addr.is_loopback:
        raise ValueError(f"{what} {ip!r} is not a 127.x address: the testbed stays on loopback")
    return str(addr)


def _socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to (host, port), not listening yet.

    SO_REUSEPORT lets a killed server keep its port with a bound but non-listening socket (so
    connections are refused and nobody else takes the port) and lets the revived server bind
    it again while that placeholder still holds it."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if hasattr(socket, "SO_REUSEPORT"):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def _in_loop(loop: Optional[asyncio.AbstractEventLoop]) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


class _Server:
    """A TCP server on a fixed loopback port that can be killed (refusing connections, closing
    the open ones) and revived on the same port. Subclasses give ``_serve`` and ``_drop``."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = _check_loopback(host, "host")
        self.port = 0
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._server: Optional[asyncio.AbstractServer] = None
        self._placeholder: Optional[socket.socket] = None
        self._pending: Optional[asyncio.Task] = None
        self._killed = False
        self._closed = False
        # While blackholed: client sockets that fill the placeholder's accept queue, so that
        # the kernel drops every later SYN (connection attempts time out, nothing refuses).
        self._fillers: List[socket.socket] = []

    # -- to override
    async def _serve(self, sock: socket.socket) -> asyncio.AbstractServer:
        raise NotImplementedError

    def _drop(self) -> None:
        """Abort every open connection."""
        raise NotImplementedError

    # -- plumbing
    def _call(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on this server's loop: at once from the loop's own thread, else by
        posting it there and waiting (a testbed running on a background thread)."""
        loop = self._loop
        if loop is None or loop.is_closed() or not loop.is_running() or _in_loop(loop):
            return fn()
        fut: concurrent.futures.Future = concurrent.futures.Future()

        def run() -> None:
            try:
                fut.set_result(fn())
            except BaseException as e:  # handed back to the calling thread
                fut.set_exception(e)

        loop.call_soon_threadsafe(run)
        return fut.result(timeout=_CONTROL_TIMEOUT)

    def _listen(self) -> socket.socket:
        sock = _socket(self.host, self.port)
        try:
            sock.listen(128)
        except BaseException:
            sock.close()
            raise
        self.port = sock.getsockname()[1]
        return sock

    async def _start(self) -> None:
        if self._closed:
            raise RuntimeError("closed: a testbed server cannot start again")
        if self._server is not None or self._loop is not None:
            raise RuntimeError("already started")
        self._loop = asyncio.get_running_loop()
        sock = self._listen()
        try:
            self._server = await self._serve(sock)
        except BaseException:
            sock.close()
            raise

    async def _adopt(self, sock: socket.socket) -> None:
        try:
            server = await self._serve(sock)
        except BaseException:
            sock.close()
            raise
        if self._closed or self._killed:  # closed or killed again while starting
            server.close()
        else:
            self._server = server

    def _kill_now(self) -> None:
        if self._killed or self._closed or self._loop is None:
            return
        self._killed = True
        try:
            self._placeholder = _socket(self.host, self.port)
        except OSError:  # no SO_REUSEPORT here: hold the port once the listener is gone
            self._placeholder = None
        if self._pending is not None:
            self._pending.cancel()
            self._pending = None
        if self._server is not None:
            self._server.close()
            self._server = None
        if self._placeholder is None:
            try:
                self._placeholder = _socket(self.host, self.port)
            except OSError:
                pass
        self._drop()

    def _blackhole_now(self) -> None:
        self._kill_now()
        placeholder = self._placeholder
        if placeholder is None or self._fillers:
            return
        # The listener is closed: a placeholder listening with no room in its accept queue,
        # filled and never accepted from, makes the kernel drop every later SYN (Linux, and
        # the BSDs), as a firewall that drops packets does.
        placeholder.listen(0)
        for _ in range(2):
            c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            c.setblocking(False)
            try:
                c.connect((self.host, self.port))
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                c.close()
                continue
            self._fillers.append(c)

    def _close_fillers(self) -> None:
        for c in self._fillers:
            c.close()
        self._fillers.clear()

    def _revive_now(self) -> Optional[socket.socket]:
        if not self._killed or self._closed:
            return None
        sock = self._listen()  # listening from here on: connections wait in the backlog
        if self._placeholder is not None:
            self._placeholder.close()
            self._placeholder = None
        self._close_fillers()
        self._killed = False
        return sock

    @property
    def killed(self) -> bool:
        return self._killed

    @property
    def address(self) -> Tuple[str, int]:
        return (self.host, self.port)

    def kill(self) -> None:
        """Refuse new connections (the port stays reserved, connecting to it is refused) and
        abort the open ones."""
        self._call(self._kill_now)

    def blackhole(self) -> None:
        """Drop connection attempts without an answer, as a firewall dropping packets does:
        a client's connect times out (its connect timeout bounds it), nothing is refused. Open
        connections are aborted, as by :meth:`kill`; :meth:`revive` undoes it."""
        self._call(self._blackhole_now)

    def revive(self) -> None:
        """Listen again on the same port (after :meth:`kill` or :meth:`blackhole`)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        if _in_loop(loop) or not loop.is_running():
            sock = self._revive_now()
            if sock is not None:
                self._pending = loop.create_task(self._adopt(sock))
            return

        async def revive_and_serve() -> None:
            sock = self._revive_now()
            if sock is not None:
                await self._adopt(sock)

        asyncio.run_coroutine_threadsafe(revive_and_serve(), loop).result(timeout=_CONTROL_TIMEOUT)

    async def _close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._pending is not None:
            self._pending.cancel()
            try:
                await self._pending
            except BaseException:
                pass
            self._pending = None
        if self._server is not None:
            self._server.close()
            self._server = None
        if self._placeholder is not None:
            self._placeholder.close()
            self._placeholder = None
        self._close_fillers()
        self._drop()
