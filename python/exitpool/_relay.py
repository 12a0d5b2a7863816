"""A loopback relay for clients that cannot speak SOCKS5 with a password (Scrapy, Chromium):
an HTTP proxy on ``127.0.0.1`` whose every connection leaves through one SOCKS5 exit.

Scrapy has no SOCKS support at all (scrapy#747) and Chromium speaks SOCKS5 only without a
password (playwright#10567). Both speak HTTP proxies well, so :class:`Relay` is an HTTP proxy
front (``CONNECT`` tunnels, and absolute-form ``http://`` requests, each on a connection of its
own) that opens each upstream connection with a SOCKS5 handshake to the exit, its user name and
password included. ``socks5h`` exits get the host name (resolved at the exit), ``socks5`` exits
an address resolved here, as the two schemes mean.

One relay serves one exit, so two exits never share a connection; each client connection to the
relay is one SOCKS connection to the exit, so the client's own pooling decides reuse. A relay
holds an asyncio loop on a thread of its own (it works the same under Twisted, asyncio or plain
threads) and is closed with its owner: ``with Relay(exit) as relay:`` or ``relay.close()``.

The relay asks its clients for a password of its own (random, made per relay): another local
user cannot borrow the exit through the loopback port. Neither that password nor the exit's
shows in a repr, a log line or an error answer.

The SOCKS5 client handshake (RFC 1928, with RFC 1929's user name and password) is written here
rather than taken from python-socks: it is some forty lines, and a relay then needs no extra
package for Scrapy or Playwright users.
"""

from __future__ import annotations

import asyncio
import base64
import ipaddress
import logging
import secrets
import socket
import struct
import threading
from typing import Any, List, Optional, Tuple, Union

from ._clients import _exit_of
from ._core import Exit, Lease
from ._errors import InvalidInput

__all__ = ["Relay", "SocksError"]

logger = logging.getLogger("exitpool.relay")

SOCKS_SCHEMES = ("socks5", "socks5h")
_HEAD_LIMIT = 64 * 1024
_PIPE_CHUNK = 64 * 1024
# RFC 1928's reply codes, for the relay's 502 answer and its log.
_SOCKS_REPLIES = {
    1: "general SOCKS server failure",
    2: "connection not allowed by ruleset",
    3: "network unreachable",
    4: "host unreachable",
    5: "connection refused",
    6: "TTL expired",
    7: "command not supported",
    8: "address type not supported",
}
# Hop-by-hop headers the relay drops from an absolute-form request before it goes upstream.
_HOP_HEADERS = {b"proxy-authorization", b"proxy-connection", b"connection", b"keep-alive"}


class SocksError(ConnectionError):
    """The SOCKS5 exit refused or broke the handshake (a ``ConnectionError``: the pool counts
    it as a connect failure). The message never holds a credential."""


async def socks5_connect(
    exit: Exit,
    host: str,
    port: int,
    timeout: float,
) -> Tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A stream to ``host:port`` through the SOCKS5 exit, the handshake done."""
    reader, writer = await asyncio.wait_for(asyncio.open_connection(exit.host, exit.port), timeout)
    try:
        await asyncio.wait_for(_handshake(reader, writer, exit, host, port), timeout)
    except BaseException:
        writer.close()
        raise
    return reader, writer


async def _handshake(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, exit: Exit, host: str, port: int) -> None:
    user, password = exit.username, exit.password
    with_auth = user is not None or password is not None
    writer.write(b"\x05\x01\x02" if with_auth else b"\x05\x01\x00")
    version, method = await reader.readexactly(2)
    if version != 5:
        raise SocksError(f"exit {exit.exit_id!r} does not answer as a SOCKS5 server")
    if method == 0x02 and with_auth:
        u, p = (user or "").encode(), (password or "").encode()
        if len(u) > 255 or len(p) > 255:
            raise SocksError(f"exit {exit.exit_id!r}: SOCKS5 user names and passwords are at most 255 bytes")
        writer.write(b"\x01" + bytes([len(u)]) + u + bytes([len(p)]) + p)
        _, status = await reader.readexactly(2)
        if status != 0:
            raise SocksError(f"exit {exit.exit_id!r} refused its SOCKS5 credentials")
    elif method != 0x00:
        raise SocksError(f"exit {exit.exit_id!r} accepts none of the offered SOCKS5 methods")
    writer.write(b"\x05\x01\x00" + await _address(exit, host) + struct.pack("!H", port))
    version, reply, _, atyp = await reader.readexactly(4)
    if version != 5 or reply != 0:
        raise SocksError(f"exit {exit.exit_id!r} could not connect to {host}:{port}: {_SOCKS_REPLIES.get(reply, f'reply {reply}')}")
    size = {1: 4, 4: 16}.get(atyp)
    if size is None:
        size = (await reader.readexactly(1))[0]
    await reader.readexactly(size + 2)  # the bound address and port: not needed


async def _address(exit: Exit, host: str) -> bytes:
    """The destination as the exit's scheme wants it: socks5h the name (resolved at the exit),
    socks5 an address resolved here."""
    try:
        ip = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        if exit.scheme == "socks5h":
            name = host.encode("idna")
            if len(name) > 255:
                raise SocksError(f"host name too long for SOCKS5: {host[:64]}...") from None
            return b"\x03" + bytes([len(name)]) + name
        infos = await asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM)
        ip = ipaddress.ip_address(infos[0][4][0])
    return (b"\x01" if ip.version == 4 else b"\x04") + ip.packed


def _split_target(target: str, default_port: int) -> Tuple[str, int]:
    """``host:port`` (``[v6]:port``) as host and port."""
    host, sep, port = target.rpartition(":")
    if not sep or "]" in port:
        host, port = target, str(default_port)
    if not port.isdigit() or not 0 < int(port) < 65536 or not host:
        raise ValueError(f"bad target {target[:200]!r}")
    return host.strip("[]"), int(port)


class Relay:
    """An HTTP proxy on ``127.0.0.1:<ephemeral port>`` that leaves through one SOCKS5 exit.

    ``proxy`` is its URL with its own credentials (``http://exitpool:<token>@127.0.0.1:port``),
    ``server`` the URL without them and ``username`` / ``password`` the credentials, for
    clients that take them apart (Playwright). ``connect_timeout`` bounds the SOCKS handshake,
    ``idle_timeout`` a silent tunnel, and ``max_connections`` the connections served at once
    (more are answered 503). Start on construction; close with :meth:`close` or ``with``.
    """

    def __init__(
        self,
        lease: Union[Lease, Exit],
        *,
        connect_timeout: float = 30.0,
        idle_timeout: float = 300.0,
        max_connections: int = 256,
    ) -> None:
        exit = _exit_of(lease)
        if exit.scheme not in SOCKS_SCHEMES:
            raise InvalidInput(f"a relay leaves through a socks5 or socks5h exit; exit {exit.exit_id!r} is {exit.scheme}")
        if not (isinstance(max_connections, int) and max_connections > 0):
            raise InvalidInput(f"max_connections {max_connections!r}: need an int > 0")
        self.exit = exit
        self.connect_timeout = float(connect_timeout)
        self.idle_timeout = float(idle_timeout)
        self.username = "exitpool"
        self.password = secrets.token_urlsafe(18)
        self._auth = b"Basic " + base64.b64encode(f"{self.username}:{self.password}".encode())
        self._loop = asyncio.new_event_loop()
        self._server: Optional[asyncio.AbstractServer] = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=f"exitpool-relay-{exit.exit_id}", daemon=True)
        self._started = threading.Event()
        self._error: Optional[BaseException] = None
        self._max = max_connections
        self.port = 0
        self._thread.start()
        self._started.wait()
        if self._error is not None:
            self._thread.join()
            raise self._error

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<exitpool Relay 127.0.0.1:{self.port} -> {self.exit.masked_proxy} {state}>"

    @property
    def server(self) -> str:
        """``http://127.0.0.1:port``: the relay without credentials."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def proxy(self) -> str:
        """The relay's URL with its credentials. Never log it."""
        return f"http://{self.username}:{self.password}@127.0.0.1:{self.port}"

    @property
    def auth_header(self) -> bytes:
        """The ``Proxy-Authorization`` value the relay asks for. Never log it."""
        return self._auth

    @property
    def closed(self) -> bool:
        return self._closed

    # -- life

    def _run(self) -> None:
        loop = self._loop
        asyncio.set_event_loop(loop)
        try:
            self._server = loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0, limit=_HEAD_LIMIT, backlog=self._max))
            self.port = self._server.sockets[0].getsockname()[1]
        except BaseException as e:  # pragma: no cover - binding loopback fails only on a broken host
            self._error = e
            self._started.set()
            loop.close()
            return
        self._started.set()
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(self._shutdown())
            loop.close()

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        for w in list(self._writers):
            w.close()
        tasks = [t for t in asyncio.all_tasks(self._loop) if t is not asyncio.current_task()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    def close(self) -> None:
        """Stop listening, close every connection and the thread; idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
        if threading.current_thread() is not self._thread:
            self._thread.join()

    def __enter__(self) -> Relay:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - a relay dropped without close()
        if not getattr(self, "_closed", True):
            try:
                self.close()
            except Exception:
                pass

    # -- serving

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream: Optional[asyncio.StreamWriter] = None
        if len(self._writers) >= self._max:
            await self._answer(writer, b"503 Service Unavailable", [], b"exitpool relay: too many connections")
            writer.close()
            return
        self._writers.add(writer)
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.idle_timeout)
            lines = head.split(b"\r\n")
            method, target, version = lines[0].split(b" ", 2)
            headers: List[Tuple[bytes, bytes]] = []
            for line in lines[1:]:
                if line:
                    name, _, value = line.partition(b":")
                    headers.append((name.strip(), value.strip()))
            given = [v for n, v in headers if n.lower() == b"proxy-authorization"]
            if not given or not secrets.compare_digest(given[0], self._auth):
                await self._answer(writer, b"407 Proxy Authentication Required", [b'Proxy-Authenticate: Basic realm="exitpool relay"'])
                return
            if method == b"CONNECT":
                host, port = _split_target(target.decode("latin-1"), 443)
                up_reader, upstream = await self._open(writer, host, port, answer=True)
                if upstream is None:
                    return
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                await writer.drain()
            else:
                host, port, path = _absolute(target.decode("latin-1"))
                up_reader, upstream = await self._open(writer, host, port, answer=False)
                if upstream is None:
                    return
                kept = [(n, v) for n, v in headers if n.lower() not in _HOP_HEADERS]
                out = [method + b" " + path.encode("latin-1") + b" " + version]
                out += [n + b": " + v for n, v in kept] + [b"Connection: close", b"", b""]
                # One request per connection: the upstream closes after its answer (Connection:
                # close), so a second request on this connection never reaches the wrong host.
                upstream.write(b"\r\n".join(out))
            await self._pipe_both(reader, writer, up_reader, upstream)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError, ConnectionError, OSError, ValueError):
            pass
        finally:
            self._writers.discard(writer)
            for w in (writer, upstream):
                if w is not None:
                    w.close()

    async def _open(
        self, writer: asyncio.StreamWriter, host: str, port: int, *, answer: bool
    ) -> Tuple[Any, Optional[asyncio.StreamWriter]]:
        """The SOCKS stream to ``host:port``, or (None, None) when the exit failed.

        A failed tunnel is answered 502 (clients report a failed CONNECT as the proxy's). A
        failed plain request is not answered at all, the connection just closes: a 502 page
        would pass for the site's own answer, where a connection closed unanswered is a
        connection failure to every client, as it is."""
        try:
            return await socks5_connect(self.exit, host, port, self.connect_timeout)
        except (SocksError, OSError, asyncio.TimeoutError, asyncio.IncompleteReadError) as e:
            reason = str(e) if isinstance(e, SocksError) else f"exit {self.exit.exit_id!r} unreachable ({type(e).__name__})"
            logger.info("exitpool relay: %s", reason)
            if answer:
                await self._answer(writer, b"502 Bad Gateway", [], reason.encode("utf-8", "replace"))
            return None, None

    async def _answer(self, writer: asyncio.StreamWriter, status: bytes, extra: List[bytes], body: bytes = b"") -> None:
        head = [b"HTTP/1.1 " + status, *extra, b"Content-Length: %d" % len(body), b"Connection: close", b"", b""]
        writer.write(b"\r\n".join(head) + body)
        await writer.drain()

    async def _pipe_both(
        self, r1: asyncio.StreamReader, w1: asyncio.StreamWriter, r2: asyncio.StreamReader, w2: asyncio.StreamWriter
    ) -> None:
        """Client (r1, w1) and upstream (r2, w2) joined. When the upstream ends, so does the
        client connection (nothing more can come); when the client half-closes first, the
        upstream's answer still flows back, each read bounded by the idle timeout."""
        up = asyncio.ensure_future(self._pipe(r1, w2))
        down = asyncio.ensure_future(self._pipe(r2, w1))
        try:
            await asyncio.wait([up, down], return_when=asyncio.FIRST_COMPLETED)
            if not down.done():
                await down
        finally:
            for t in (up, down):
                t.cancel()
            await asyncio.gather(up, down, return_exceptions=True)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                data = await asyncio.wait_for(reader.read(_PIPE_CHUNK), self.idle_timeout)
                if not data:
                    break
                writer.write(data)
                await writer.drain()
        except (asyncio.TimeoutError, ConnectionError, OSError):
            pass
        finally:
            if writer.can_write_eof():
                try:
                    writer.write_eof()
                except OSError:
                    pass


def _absolute(target: str) -> Tuple[str, int, str]:
    """An absolute-form ``http://host[:port]/path`` target as host, port and origin-form path."""
    if not target.lower().startswith("http://"):
        raise ValueError("the relay forwards http:// requests and CONNECT tunnels only")
    rest = target[len("http://") :]
    cut = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    authority, path = rest[:cut].rpartition("@")[2], rest[cut:]
    host, port = _split_target(authority, 80)
    return host, port, path if path.startswith("/") else "/" + path
