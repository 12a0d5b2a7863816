"""A loopback world for tests, the demo and your own pytest suites.

``Testbed`` starts, on this machine only:

- ``n_exits`` HTTP forward proxies (:class:`Proxy`). Each listens on ``127.0.0.1:<free port>``,
  requires Basic ``Proxy-Authorization`` (its own user and password; 407 otherwise), forwards
  absolute-form ``http://`` requests and ``CONNECT`` tunnels, and opens its upstream connections
  from its own source address (``127.0.1.N`` by default), so the target sees one client IP per
  exit. At run time a proxy can be killed (connections refused, open ones closed), revived,
  slowed, made flaky, or made to drift (leave from another address).
- A target site (:class:`Site`, aiohttp.web) that behaves like a guarded platform: per-IP rate
  limits (429 + ``Retry-After``), persistent bans (403) for IPs that keep hammering after 429s,
  captcha pages, verification challenges for an account seen from a new IP, and site-wide
  incidents (503 on every IP). It counts everything it sees, for assertions.
- Control endpoints (:class:`Control`): ``GET /ip`` answers ``{"ip": "<client ip>"}``. They
  are separate servers from the site, so a site incident says nothing about them and one of
  them can be taken down on its own (quorum tests). The site answers ``/ip`` too, unguarded.

Everything binds to 127.x addresses (on Linux every 127.0.0.0/8 address is this machine; other
systems need the source aliases configured). Proxies refuse any destination that is not a
127.x address or ``localhost``, so no request ever leaves the machine. Every loop is bounded
(sizes, counts and timeouts) and closing the testbed closes every socket it opened.

Use it from async code::

    async with Testbed(n_exits=3) as tb:
        pool = Pool(tb.exits)
        async with aiohttp.ClientSession() as s:
            async with s.get(tb.control_url, proxy=tb.exits[0].proxy) as r:
                assert (await r.json())["ip"] == tb.exits[0].ip

or from sync code (requests, httpx): ``with Testbed() as tb:`` runs the world on a background
thread with its own event loop. Every control method (``proxy.kill()``, ``site.ban(ip)``, ...)
may be called from either side.

Site behaviour, in the order a guarded request meets it (any path except ``/ip``):

1. incident on (``site.incident(True)``): 503 with ``Retry-After``, for every IP.
2. banned IP: 403, until ``site.unban(ip)`` (or ``ban_ttl`` seconds, if set).
3. rate limit: a token bucket per client IP (``rate`` per second, ``burst`` deep); over it, 429
   with ``Retry-After`` (whole seconds, at least 1). An IP that collects ``ban_after`` 429s
   within ``ban_window`` seconds is banned.
4. account (header ``X-Account``): the first IP an account is seen from is its home; a request
   from an IP the account has never used gets a verification challenge, chosen to look like a
   real one: **status 200**, header ``X-Challenge: verify``, and a body containing
   ``"verify your identity"``. The IP is then recorded in the account's history
   (``site.account_ips(account)``), and ``site.teleports(account)`` counts how often
   consecutive requests of the account came from different IPs.
5. captcha: a flagged IP (poor reputation, ``site.flag(ip)``) always, any other IP with
   probability ``captcha_rate``: **status 200**, header ``X-Captcha: 1``, a body containing
   ``"captcha"``.
6. otherwise 200 with a small HTML page.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import concurrent.futures
import hmac
import ipaddress
import math
import random
import secrets
import socket
import threading
import time
from typing import Any, Awaitable, Callable, Deque, Dict, Iterable, List, Optional, Sequence, Set, Tuple, TypeVar
from urllib.parse import urlsplit

try:
    from aiohttp import web
except ImportError as _e:  # pragma: no cover - exercised only without the extra
    raise ImportError("exitpool.testbed needs aiohttp: pip install 'exitpool[aiohttp]'") from _e

from ._core import Exit

__all__ = ["Control", "Proxy", "Site", "Testbed"]

T = TypeVar("T")

# Bounds. Every loop below is bounded by one of these or by a timeout.
_HEAD_LIMIT = 64 * 1024  # request or response head
_BODY_LIMIT = 16 * 1024 * 1024  # request or response body
_MAX_REQUESTS_PER_CONNECTION = 10_000
_MAX_HEADERS = 200
_MAX_CHUNKS = 100_000
_PIPE_CHUNK = 64 * 1024
_CONTROL_TIMEOUT = 10.0  # waiting for the loop thread to run a control

_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authorization",
    "proxy-authenticate",
    "proxy-connection",
    "te",
    "upgrade",
    "expect",
}


def _check_loopback(ip: str, what: str) -> str:
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        raise ValueError(f"{what} {ip!r} is not an IP address") from None
    if addr.version != 4 or not addr.is_loopback:
        raise ValueError(f"{what} {ip!r} is not a 127.x address: the testbed stays on loopback")
    return str(addr)


def _default_source_ip(i: int) -> str:
    return f"127.0.{1 + i // 250}.{1 + i % 250}"


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

    def _revive_now(self) -> Optional[socket.socket]:
        if not self._killed or self._closed:
            return None
        sock = self._listen()  # listening from here on: connections wait in the backlog
        if self._placeholder is not None:
            self._placeholder.close()
            self._placeholder = None
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

    def revive(self) -> None:
        """Listen again on the same port."""
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
        self._drop()


# ---------------------------------------------------------------------------------------------
# The proxy


class _Reject(Exception):
    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message


def _parse_head(data: bytes) -> Tuple[str, List[Tuple[str, str]]]:
    text = data.decode("latin-1").lstrip("\r\n")
    lines = text.split("\r\n")
    first = lines[0]
    headers: List[Tuple[str, str]] = []
    for line in lines[1 : _MAX_HEADERS + 2]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name.strip():
            raise _Reject(400, "Bad Request", f"malformed header line {line[:60]!r}")
        headers.append((name.strip(), value.strip()))
    if len(lines) > _MAX_HEADERS + 2:
        raise _Reject(431, "Request Header Fields Too Large", "too many headers")
    return first, headers


def _header(headers: Sequence[Tuple[str, str]], name: str) -> Optional[str]:
    name = name.lower()
    for k, v in headers:
        if k.lower() == name:
            return v
    return None


def _tokens(value: Optional[str]) -> Set[str]:
    return {t.strip().lower() for t in (value or "").split(",") if t.strip()}


async def _read_head(reader: asyncio.StreamReader) -> Optional[bytes]:
    """One message head, or None on a clean end of stream."""
    try:
        return await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as e:
        if not e.partial.strip():
            return None
        raise _Reject(400, "Bad Request", "truncated head") from None
    except asyncio.LimitOverrunError:
        raise _Reject(431, "Request Header Fields Too Large", "head too large") from None


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    """A chunked body, raw (framing included), for passing on as it is."""
    out = bytearray()
    for _ in range(_MAX_CHUNKS):
        line = await reader.readuntil(b"\r\n")
        out += line
        try:
            size = int(line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise _Reject(400, "Bad Request", "bad chunk size") from None
        if size == 0:
            for _ in range(_MAX_HEADERS):
                trailer = await reader.readuntil(b"\r\n")
                out += trailer
                if trailer == b"\r\n":
                    return bytes(out)
            raise _Reject(400, "Bad Request", "too many trailers")
        if len(out) + size > _BODY_LIMIT:
            raise _Reject(413, "Payload Too Large", "body too large")
        out += await reader.readexactly(size + 2)
    raise _Reject(400, "Bad Request", "too many chunks")


async def _read_to_eof(reader: asyncio.StreamReader) -> bytes:
    buf = bytearray()
    for _ in range(_BODY_LIMIT + _HEAD_LIMIT + 2):  # each read returns at least one byte
        chunk = await reader.read(_PIPE_CHUNK)
        if not chunk:
            return bytes(buf)
        buf += chunk
        if len(buf) > _BODY_LIMIT + _HEAD_LIMIT:
            raise _Reject(502, "Bad Gateway", "upstream response too large")
    raise _Reject(502, "Bad Gateway", "upstream response too large")


def _destination(host: Optional[str], port: Optional[int], default_port: int) -> Tuple[str, int]:
    if not host:
        raise _Reject(400, "Bad Request", "no destination host")
    if host.lower() == "localhost":
        host = "127.0.0.1"
    try:
        _check_loopback(host, "destination")
    except ValueError:
        raise _Reject(
            502, "Bad Gateway", f"exitpool testbed proxies reach 127.x addresses only, not {host!r}"
        ) from None
    return host, port or default_port


class Proxy(_Server):
    """An HTTP forward proxy leaving from its own loopback source address.

    ``url`` is ``http://user:password@127.0.0.1:port``; ``exit()`` gives the matching
    :class:`exitpool.Exit`. Controls, callable from any thread: :meth:`kill`, :meth:`revive`,
    :meth:`slow`, :meth:`flaky`, :meth:`drift`. Counters: ``connections``, ``requests``
    (forwarded requests and tunnels), ``tunnels``, ``auth_failures``, ``dropped``,
    ``upstream_errors``.

    Client connections are kept alive; each forwarded request opens a fresh upstream connection
    (so a drift applies at once) and its response is buffered whole (at most 16 MiB) before it
    is passed on. ``timeout`` bounds every upstream step, ``idle_timeout`` an idle client
    connection or tunnel, ``tunnel_ttl`` a tunnel's whole life. Destinations other than 127.x
    addresses and ``localhost`` are refused with 502 before any connection is attempted.
    """

    def __init__(
        self,
        name: str,
        *,
        source_ip: str,
        user: Optional[str] = None,
        password: Optional[str] = None,
        host: str = "127.0.0.1",
        timeout: float = 30.0,
        idle_timeout: float = 30.0,
        tunnel_ttl: float = 300.0,
    ) -> None:
        super().__init__(host)
        self.name = name
        self.tunnel_ttl = float(tunnel_ttl)
        self.source_ip = _check_loopback(source_ip, "source_ip")
        self.user = user if user is not None else f"user-{name}"
        self.password = password if password is not None else secrets.token_hex(8)
        if ":" in self.user:
            raise ValueError("a proxy user name cannot hold ':'")
        self.timeout = float(timeout)
        self.idle_timeout = float(idle_timeout)
        token = base64.b64encode(f"{self.user}:{self.password}".encode()).decode("ascii")
        self._expected_auth = f"Basic {token}"
        self._delay = 0.0
        self._flaky_rate = 0.0
        self._rng = random.Random()
        self._rng_lock = threading.Lock()
        self._writers: Set[asyncio.StreamWriter] = set()
        self._tasks: Set[asyncio.Task] = set()
        self.connections = 0
        self.requests = 0
        self.tunnels = 0
        self.auth_failures = 0
        self.dropped = 0
        self.upstream_errors = 0

    def __repr__(self) -> str:
        state = "killed" if self._killed else "up"
        return f"<Proxy {self.name} 127.0.0.1:{self.port} via {self.source_ip} {state}>"

    # -- identity
    @property
    def url(self) -> str:
        """``http://user:password@host:port``. Holds the password: do not log it."""
        return f"http://{self.user}:{self.password}@{self.host}:{self.port}"

    @property
    def auth_header(self) -> str:
        """The ``Proxy-Authorization`` value this proxy expects."""
        return self._expected_auth

    def exit(self, exit_id: Optional[str] = None, *, capacity: int = 1, tags: Optional[Dict[str, str]] = None) -> Exit:
        """``Exit(exit_id or name, url, ip=source_ip)``: the exit as a pool sees it now."""
        return Exit(exit_id or self.name, self.url, ip=self.source_ip, capacity=capacity, tags=tags)

    # -- controls
    def slow(self, seconds: Optional[float]) -> None:
        """Delay every response (and every tunnel's opening) by ``seconds``; 0 or None ends it."""
        seconds = float(seconds or 0.0)
        if not math.isfinite(seconds) or seconds < 0:
            raise ValueError(f"slow({seconds!r}): need a finite number of seconds >= 0")
        self._delay = seconds

    def flaky(self, rate: Optional[float], seed: Optional[int] = None) -> None:
        """Drop that share of requests and tunnels: the connection is reset without an answer.
        Draws come from ``random.Random(seed)``; 0 or None ends it."""
        rate = float(rate or 0.0)
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"flaky({rate!r}): the rate is a share in [0, 1]")
        with self._rng_lock:
            self._rng = random.Random(seed)
            self._flaky_rate = rate

    def drift(self, new_source_ip: str) -> None:
        """Leave from another loopback address from the next upstream connection on."""
        self.source_ip = _check_loopback(new_source_ip, "source_ip")

    def stats(self) -> Dict[str, Any]:
        return {
            "name": self.name,
            "port": self.port,
            "source_ip": self.source_ip,
            "killed": self._killed,
            "slow": self._delay,
            "flaky": self._flaky_rate,
            "connections": self.connections,
            "requests": self.requests,
            "tunnels": self.tunnels,
            "auth_failures": self.auth_failures,
            "dropped": self.dropped,
            "upstream_errors": self.upstream_errors,
        }

    # -- server
    async def _serve(self, sock: socket.socket) -> asyncio.AbstractServer:
        return await asyncio.start_server(self._handle, sock=sock, limit=_HEAD_LIMIT)

    def _drop(self) -> None:
        for w in list(self._writers):
            try:
                w.transport.abort()
            except Exception:
                pass
        self._writers.clear()

    async def _close(self) -> None:
        await super()._close()
        tasks = [t for t in self._tasks if not t.done()]
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=2.0)

    def _drop_now(self) -> bool:
        if self._flaky_rate <= 0.0:
            return False
        with self._rng_lock:
            return self._rng.random() < self._flaky_rate

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        self._writers.add(writer)
        self.connections += 1
        try:
            if self._killed:
                writer.transport.abort()
                return
            for _ in range(_MAX_REQUESTS_PER_CONNECTION):
                if not await self._one(reader, writer):
                    break
        except (ConnectionError, OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError):
            pass
        except asyncio.CancelledError:
            pass
        finally:
            self._writers.discard(writer)
            try:
                writer.close()
            except Exception:
                pass
            if task is not None:
                self._tasks.discard(task)

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Serve one request; False when the connection is over."""
        try:
            head = await asyncio.wait_for(_read_head(reader), self.idle_timeout)
        except _Reject as r:
            await self._refuse(writer, r.status, r.reason, r.message)
            return False
        if head is None:
            return False
        try:
            first, headers = _parse_head(head)
            parts = first.split(" ")
            if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
                raise _Reject(400, "Bad Request", f"bad request line {first[:80]!r}")
            method, target, version = parts
            if self._drop_now():
                self.dropped += 1
                writer.transport.abort()
                return False
            got = _header(headers, "Proxy-Authorization") or ""
            if not hmac.compare_digest(got.strip().encode(), self._expected_auth.encode()):
                self.auth_failures += 1
                await self._refuse(
                    writer,
                    407,
                    "Proxy Authentication Required",
                    "proxy credentials missing or wrong",
                    extra=[("Proxy-Authenticate", 'Basic realm="exitpool-testbed"')],
                )
                return False
            if method.upper() == "CONNECT":
                await self._tunnel(reader, writer, target)
                return False
            if not target.lower().startswith("http://"):
                raise _Reject(400, "Bad Request", "forward proxy: need an absolute http:// URL or CONNECT")
            return await self._forward(reader, writer, method, target, version, headers)
        except _Reject as r:
            await self._refuse(writer, r.status, r.reason, r.message)
            return False

    async def _refuse(
        self,
        writer: asyncio.StreamWriter,
        status: int,
        reason: str,
        message: str,
        extra: Iterable[Tuple[str, str]] = (),
    ) -> None:
        body = (message + "\n").encode()
        lines = [
            f"HTTP/1.1 {status} {reason}",
            "Content-Type: text/plain",
            f"Content-Length: {len(body)}",
            "Connection: close",
        ]
        lines += [f"{k}: {v}" for k, v in extra]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
        try:
            await asyncio.wait_for(writer.drain(), self.timeout)
        except (ConnectionError, OSError, asyncio.TimeoutError):
            pass

    async def _open_upstream(self, host: str, port: int) -> Tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(host, port, local_addr=(self.source_ip, 0), limit=_HEAD_LIMIT),
                self.timeout,
            )
        except asyncio.TimeoutError:
            self.upstream_errors += 1
            raise _Reject(504, "Gateway Timeout", f"upstream {host}:{port} did not answer") from None
        except OSError as e:
            self.upstream_errors += 1
            raise _Reject(502, "Bad Gateway", f"upstream {host}:{port}: {e.strerror or e}") from None
        self._writers.add(writer)
        return reader, writer

    async def _tunnel(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, target: str) -> None:
        host, _, port_s = target.rpartition(":")
        try:
            port = int(port_s)
        except ValueError:
            raise _Reject(400, "Bad Request", f"CONNECT needs host:port, got {target[:80]!r}") from None
        host, port = _destination(host.strip("[]"), port, 443)
        up_reader, up_writer = await self._open_upstream(host, port)
        self.requests += 1
        self.tunnels += 1
        try:
            if self._delay:
                await asyncio.sleep(self._delay)
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await asyncio.wait_for(writer.drain(), self.timeout)
            pipes = [
                asyncio.ensure_future(self._pipe(reader, up_writer)),
                asyncio.ensure_future(self._pipe(up_reader, writer)),
            ]
            try:
                await asyncio.wait(pipes, timeout=self.tunnel_ttl, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for p in pipes:
                    p.cancel()
                await asyncio.wait(pipes, timeout=1.0)
        finally:
            self._writers.discard(up_writer)
            up_writer.close()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # Bounded by the idle timeout between chunks and the tunnel's lifetime (tunnel_ttl).
        for _ in range(1 << 40):
            data = await asyncio.wait_for(reader.read(_PIPE_CHUNK), self.idle_timeout)
            if not data:
                return
            writer.write(data)
            await asyncio.wait_for(writer.drain(), self.timeout)

    async def _forward(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        method: str,
        target: str,
        version: str,
        headers: List[Tuple[str, str]],
    ) -> bool:
        url = urlsplit(target)
        try:
            url_port = url.port
        except ValueError:
            raise _Reject(400, "Bad Request", "bad port") from None
        host, port = _destination(url.hostname, url_port, 80)
        path = url.path or "/"
        if url.query:
            path += "?" + url.query

        conn_tokens = _tokens(_header(headers, "Connection")) | _tokens(_header(headers, "Proxy-Connection"))
        if version == "HTTP/1.0":
            keep_alive = "keep-alive" in conn_tokens
        else:
            keep_alive = "close" not in conn_tokens

        # The request body, read whole (bounded), so that it can go on as it came.
        body = b""
        te = _tokens(_header(headers, "Transfer-Encoding"))
        if "100-continue" in _tokens(_header(headers, "Expect")):
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        if "chunked" in te:
            body = await asyncio.wait_for(_read_chunked(reader), self.timeout)
        else:
            length = _header(headers, "Content-Length")
            if length is not None:
                try:
                    n = int(length)
                except ValueError:
                    raise _Reject(400, "Bad Request", "bad Content-Length") from None
                if n < 0 or n > _BODY_LIMIT:
                    raise _Reject(413, "Payload Too Large", "body too large")
                body = await asyncio.wait_for(reader.readexactly(n), self.timeout)

        drop = _HOP_BY_HOP | conn_tokens
        out = [(k, v) for k, v in headers if k.lower() not in drop]
        if _header(out, "Host") is None:
            out.insert(0, ("Host", url.netloc.rpartition("@")[2]))
        out.append(("Connection", "close"))
        upstream_head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in out) + "\r\n"

        up_reader, up_writer = await self._open_upstream(host, port)
        self.requests += 1
        try:
            up_writer.write(upstream_head.encode("latin-1") + body)
            await asyncio.wait_for(up_writer.drain(), self.timeout)
            raw = await asyncio.wait_for(_read_to_eof(up_reader), self.timeout)
        except (ConnectionError, OSError, asyncio.TimeoutError) as e:
            self.upstream_errors += 1
            raise _Reject(502, "Bad Gateway", f"upstream {host}:{port} failed: {type(e).__name__}") from None
        finally:
            self._writers.discard(up_writer)
            up_writer.close()

        head_end = raw.find(b"\r\n\r\n")
        if head_end < 0:
            self.upstream_errors += 1
            raise _Reject(502, "Bad Gateway", "upstream sent no complete response")
        status_line, resp_headers = _parse_head(raw[: head_end + 4])
        resp_body = raw[head_end + 4 :]
        resp_conn = _tokens(_header(resp_headers, "Connection"))
        kept = [(k, v) for k, v in resp_headers if k.lower() not in (_HOP_BY_HOP | resp_conn)]
        chunked = "chunked" in _tokens(_header(resp_headers, "Transfer-Encoding"))
        if not chunked and _header(resp_headers, "Content-Length") is None:
            kept.append(("Content-Length", str(len(resp_body))))
        kept.append(("Connection", "keep-alive" if keep_alive else "close"))
        response = status_line + "\r\n" + "".join(f"{k}: {v}\r\n" for k, v in kept) + "\r\n"

        if self._delay:
            await asyncio.sleep(self._delay)
        if self._killed:  # killed while this request was in flight
            writer.transport.abort()
            return False
        writer.write(response.encode("latin-1") + resp_body)
        await asyncio.wait_for(writer.drain(), self.timeout)
        return keep_alive


# ---------------------------------------------------------------------------------------------
# aiohttp servers: the site and the control endpoints


class _AppServer(_Server):
    def __init__(self, host: str = "127.0.0.1") -> None:
        super().__init__(host)
        self._runner: Optional[web.AppRunner] = None
        self._lock = threading.Lock()

    def _app(self) -> web.Application:
        raise NotImplementedError

    async def _start(self) -> None:
        self._runner = web.AppRunner(self._app(), access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        try:
            await super()._start()
        except BaseException:
            await self._runner.cleanup()
            raise

    async def _serve(self, sock: socket.socket) -> asyncio.AbstractServer:
        assert self._runner is not None and self._runner.server is not None
        return await asyncio.get_running_loop().create_server(self._runner.server, sock=sock)

    def _drop(self) -> None:
        if self._runner is None or self._runner.server is None:
            return
        for handler in self._runner.server.connections:
            transport = handler.transport
            if transport is not None:
                transport.abort()

    async def _close(self) -> None:
        await super()._close()
        if self._runner is not None:
            runner, self._runner = self._runner, None
            try:
                await asyncio.wait_for(runner.cleanup(), 5.0)
            except asyncio.TimeoutError:  # pragma: no cover - cleanup is bounded anyway
                pass

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


def _client_ip(request: web.BaseRequest) -> str:
    return request.remote or "?"


class Control(_AppServer):
    """A control endpoint: ``GET /ip`` answers ``{"ip": "<client ip>"}`` (``url`` ends in
    ``/ip``); ``GET /headers`` also echoes the request headers the target received (to check
    that no proxy credential reaches it). ``fail(status)`` makes ``/ip`` answer that status,
    ``garble(True)`` a body that is not the JSON expected, ``kill()`` refuse connections;
    ``heal()`` undoes fail and garble."""

    def __init__(self, name: str = "control", *, host: str = "127.0.0.1") -> None:
        super().__init__(host)
        self.name = name
        self._fail: Optional[int] = None
        self._garble = False
        self._seen: collections.Counter = collections.Counter()

    def __repr__(self) -> str:
        return f"<Control {self.name} {self.url}>"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/ip"

    def fail(self, status: Optional[int] = 500) -> None:
        self._fail = status

    def garble(self, on: bool = True) -> None:
        self._garble = bool(on)

    def heal(self) -> None:
        self._fail = None
        self._garble = False

    def requests(self, ip: Optional[str] = None) -> int:
        """How many ``/ip`` requests it answered (from ``ip``)."""
        with self._lock:
            return self._seen[ip] if ip is not None else sum(self._seen.values())

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/ip", self._ip)
        app.router.add_route("*", "/headers", self._headers)
        return app

    async def _headers(self, request: web.Request) -> web.StreamResponse:
        return web.json_response({"ip": _client_ip(request), "headers": dict(request.headers)})

    async def _ip(self, request: web.Request) -> web.StreamResponse:
        ip = _client_ip(request)
        with self._lock:
            self._seen[ip] += 1
        if self._fail is not None:
            return web.Response(status=self._fail, text="control endpoint failing\n")
        if self._garble:
            return web.Response(text="<html>not what you expected</html>", content_type="text/html")
        return web.json_response({"ip": ip})


_CAPTCHA_PAGE = """<!doctype html>
<html><head><title>Are you a robot?</title></head>
<body><div id="captcha" class="g-recaptcha">Please solve this captcha to continue.</div></body></html>
"""

_CHALLENGE_PAGE = """<!doctype html>
<html><head><title>Security check</title></head>
<body><h1>Please verify your identity</h1>
<p>We noticed a sign-in to {account} from a new location ({ip}).</p></body></html>
"""

_PAGE = """<!doctype html>
<html><head><title>{path}</title></head>
<body><h1>{path}</h1><p>{greeting}</p><ul>{items}</ul></body></html>
"""


class Site(_AppServer):
    """A target that guards itself like a real platform; see the module docstring for the
    rules. Every control and counter is safe to call from any thread.

    ``rate``: requests per second per client IP (token bucket, ``burst`` deep, default
    ``max(1, rate)``); ``ban_after`` 429s within ``ban_window`` seconds ban the IP (``ban_ttl`` None:
    for good); ``captcha_rate``: the share of requests from unflagged IPs that get a captcha
    (``seed`` makes the draws reproducible).
    """

    def __init__(
        self,
        name: str = "site",
        *,
        host: str = "127.0.0.1",
        rate: float = 10.0,
        burst: Optional[float] = None,
        ban_after: int = 10,
        ban_window: float = 10.0,
        ban_ttl: Optional[float] = None,
        captcha_rate: float = 0.0,
        seed: Optional[int] = None,
    ) -> None:
        super().__init__(host)
        self.name = name
        self._rng = random.Random(seed)
        self._incident: Optional[int] = None
        self._banned: Dict[str, Optional[float]] = {}  # ip -> until (None: for good)
        self._flagged: Set[str] = set()
        self._buckets: Dict[str, Tuple[float, float]] = {}  # ip -> (tokens, at)
        self._strikes: Dict[str, Deque[float]] = {}
        self._accounts: Dict[str, List[str]] = {}  # account -> distinct IPs, first seen first
        self._last_ip: Dict[str, str] = {}
        self._teleports: collections.Counter = collections.Counter()
        self._challenges: collections.Counter = collections.Counter()
        self._by_ip: Dict[str, collections.Counter] = {}
        self._statuses_by_ip: Dict[str, collections.Counter] = {}
        self.rate = self.burst = 0.0
        self.ban_after = 0
        self.ban_window = 0.0
        self.ban_ttl: Optional[float] = None
        self.captcha_rate = 0.0
        self.configure(
            rate=rate,
            burst=burst,
            ban_after=ban_after,
            ban_window=ban_window,
            ban_ttl=ban_ttl,
            captcha_rate=captcha_rate,
        )

    def __repr__(self) -> str:
        return f"<Site {self.name} {self.url}>"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def host_port(self) -> str:
        """``127.0.0.1:port``, a natural ``site=`` for a pool."""
        return f"{self.host}:{self.port}"

    # -- configuration and controls
    _UNSET: Any = object()

    def configure(
        self,
        *,
        rate: Any = _UNSET,
        burst: Any = _UNSET,
        ban_after: Any = _UNSET,
        ban_window: Any = _UNSET,
        ban_ttl: Any = _UNSET,
        captcha_rate: Any = _UNSET,
    ) -> None:
        """Change the rules at run time (only the arguments given)."""
        u = Site._UNSET
        with self._lock:
            if rate is not u:
                if not (isinstance(rate, (int, float)) and math.isfinite(rate) and rate > 0):
                    raise ValueError(f"rate {rate!r}: need requests per second > 0")
                self.rate = float(rate)
                if burst is u and self.burst < 1:
                    burst = None
            if burst is not u:
                b = max(1.0, self.rate) if burst is None else burst
                if not (isinstance(b, (int, float)) and math.isfinite(b) and b >= 1):
                    raise ValueError(f"burst {burst!r}: need at least 1")
                self.burst = float(b)
            if ban_after is not u:
                if not (isinstance(ban_after, int) and ban_after >= 1):
                    raise ValueError(f"ban_after {ban_after!r}: need an int >= 1")
                self.ban_after = ban_after
            if ban_window is not u:
                if not (isinstance(ban_window, (int, float)) and math.isfinite(ban_window) and ban_window > 0):
                    raise ValueError(f"ban_window {ban_window!r}: need seconds > 0")
                self.ban_window = float(ban_window)
            if ban_ttl is not u:
                if ban_ttl is not None and not (isinstance(ban_ttl, (int, float)) and ban_ttl > 0):
                    raise ValueError(f"ban_ttl {ban_ttl!r}: need seconds > 0 or None")
                self.ban_ttl = None if ban_ttl is None else float(ban_ttl)
            if captcha_rate is not u:
                if not (isinstance(captcha_rate, (int, float)) and 0.0 <= captcha_rate <= 1.0):
                    raise ValueError(f"captcha_rate {captcha_rate!r}: need a share in [0, 1]")
                self.captcha_rate = float(captcha_rate)

    def incident(self, on: bool = True, *, status: int = 503) -> None:
        """A site-wide incident: every guarded request gets ``status`` (503), whatever its IP."""
        with self._lock:
            self._incident = status if on else None

    @property
    def in_incident(self) -> bool:
        return self._incident is not None

    def ban(self, ip: str, seconds: Optional[float] = None) -> None:
        """Ban ``ip`` (403) for ``seconds`` or for good."""
        with self._lock:
            self._banned[ip] = None if seconds is None else time.monotonic() + seconds

    def unban(self, ip: str) -> None:
        with self._lock:
            self._banned.pop(ip, None)
            self._strikes.pop(ip, None)

    def is_banned(self, ip: str) -> bool:
        with self._lock:
            return self._is_banned(ip, time.monotonic())

    def flag(self, ip: str) -> None:
        """Give ``ip`` a poor reputation: every guarded request from it gets a captcha."""
        with self._lock:
            self._flagged.add(ip)

    def unflag(self, ip: str) -> None:
        with self._lock:
            self._flagged.discard(ip)

    # -- what it saw
    def account_ips(self, account: str) -> List[str]:
        """The distinct IPs ``account`` was seen from, in order of first appearance."""
        with self._lock:
            return list(self._accounts.get(account, ()))

    def teleports(self, account: Optional[str] = None) -> int:
        """How often consecutive requests of ``account`` (of all accounts) changed IP."""
        with self._lock:
            return self._teleports[account] if account is not None else sum(self._teleports.values())

    def challenges(self, account: Optional[str] = None) -> int:
        with self._lock:
            return self._challenges[account] if account is not None else sum(self._challenges.values())

    def accounts(self) -> Dict[str, List[str]]:
        with self._lock:
            return {a: list(ips) for a, ips in self._accounts.items()}

    def requests(self, ip: Optional[str] = None) -> int:
        """Guarded requests seen (from ``ip``); ``/ip`` is not counted."""
        with self._lock:
            if ip is not None:
                return sum(self._by_ip.get(ip, {}).values())
            return sum(sum(c.values()) for c in self._by_ip.values())

    def outcomes(self, ip: Optional[str] = None) -> Dict[str, int]:
        """Counts by verdict: ``ok``, ``captcha``, ``challenge``, ``rate_limited``,
        ``banned``, ``incident``."""
        with self._lock:
            return dict(self._sum(self._by_ip, ip))

    def statuses(self, ip: Optional[str] = None) -> Dict[int, int]:
        with self._lock:
            return dict(self._sum(self._statuses_by_ip, ip))

    def ips(self) -> List[str]:
        """Every client IP it has seen a guarded request from."""
        with self._lock:
            return sorted(self._by_ip)

    def stats(self) -> Dict[str, Any]:
        """Everything above as plain data."""
        with self._lock:
            now = time.monotonic()
            return {
                "requests": sum(sum(c.values()) for c in self._by_ip.values()),
                "outcomes": dict(self._sum(self._by_ip, None)),
                "statuses": dict(self._sum(self._statuses_by_ip, None)),
                "by_ip": {
                    ip: {"outcomes": dict(c), "statuses": dict(self._statuses_by_ip.get(ip, {}))}
                    for ip, c in self._by_ip.items()
                },
                "banned": sorted(ip for ip in self._banned if self._is_banned(ip, now)),
                "flagged": sorted(self._flagged),
                "incident": self._incident is not None,
                "accounts": {a: list(ips) for a, ips in self._accounts.items()},
                "teleports": dict(self._teleports),
                "challenges": dict(self._challenges),
            }

    def reset_counters(self) -> None:
        """Forget the counters (not bans, flags or account histories)."""
        with self._lock:
            self._by_ip.clear()
            self._statuses_by_ip.clear()

    @staticmethod
    def _sum(table: Dict[str, collections.Counter], ip: Optional[str]) -> collections.Counter:
        if ip is not None:
            return collections.Counter(table.get(ip, {}))
        total: collections.Counter = collections.Counter()
        for c in table.values():
            total.update(c)
        return total

    # -- the rules
    def _is_banned(self, ip: str, now: float) -> bool:
        if ip not in self._banned:
            return False
        until = self._banned[ip]
        if until is not None and now >= until:
            del self._banned[ip]
            return False
        return True

    def _take_token(self, ip: str, now: float) -> Optional[float]:
        """None if the request fits the rate, else the seconds until it would."""
        tokens, at = self._buckets.get(ip, (self.burst, now))
        tokens = min(self.burst, tokens + (now - at) * self.rate)
        if tokens >= 1.0:
            self._buckets[ip] = (tokens - 1.0, now)
            return None
        self._buckets[ip] = (tokens, now)
        return (1.0 - tokens) / self.rate

    def _strike(self, ip: str, now: float) -> None:
        strikes = self._strikes.setdefault(ip, collections.deque(maxlen=max(1, self.ban_after)))
        strikes.append(now)
        while strikes and now - strikes[0] > self.ban_window:
            strikes.popleft()
        if len(strikes) >= self.ban_after:
            self._banned[ip] = None if self.ban_ttl is None else now + self.ban_ttl
            strikes.clear()

    def _decide(self, ip: str, account: Optional[str]) -> Tuple[str, int, Dict[str, str]]:
        now = time.monotonic()
        with self._lock:
            if self._incident is not None:
                return "incident", self._incident, {"Retry-After": "5"}
            if self._is_banned(ip, now):
                return "banned", 403, {}
            wait = self._take_token(ip, now)
            if wait is not None:
                self._strike(ip, now)
                return "rate_limited", 429, {"Retry-After": str(max(1, math.ceil(wait)))}
            if account:
                ips = self._accounts.setdefault(account, [])
                last = self._last_ip.get(account)
                self._last_ip[account] = ip
                if last is not None and last != ip:
                    self._teleports[account] += 1
                if ip not in ips:
                    ips.append(ip)
                    if last is not None:
                        self._challenges[account] += 1
                        return "challenge", 200, {"X-Challenge": "verify"}
            if ip in self._flagged or (self.captcha_rate > 0 and self._rng.random() < self.captcha_rate):
                return "captcha", 200, {"X-Captcha": "1"}
            return "ok", 200, {}

    def _count(self, ip: str, verdict: str, status: int) -> None:
        with self._lock:
            self._by_ip.setdefault(ip, collections.Counter())[verdict] += 1
            self._statuses_by_ip.setdefault(ip, collections.Counter())[status] += 1

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/ip", self._ip)
        app.router.add_route("*", "/{tail:.*}", self._page)
        return app

    async def _ip(self, request: web.Request) -> web.StreamResponse:
        return web.json_response({"ip": _client_ip(request)})

    async def _page(self, request: web.Request) -> web.StreamResponse:
        ip = _client_ip(request)
        account = request.headers.get("X-Account")
        verdict, status, headers = self._decide(ip, account)
        self._count(ip, verdict, status)
        if verdict == "incident":
            text, ctype = "Service temporarily unavailable\n", "text/plain"
        elif verdict == "banned":
            text, ctype = "Forbidden: your address has been blocked\n", "text/plain"
        elif verdict == "rate_limited":
            text, ctype = "Too many requests, slow down\n", "text/plain"
        elif verdict == "challenge":
            text, ctype = _CHALLENGE_PAGE.format(account=account, ip=ip), "text/html"
        elif verdict == "captcha":
            text, ctype = _CAPTCHA_PAGE, "text/html"
        else:
            greeting = f"Welcome back, {account}." if account else "Hello, visitor."
            items = "".join(f"<li>item {i}</li>" for i in range(5))
            text, ctype = _PAGE.format(path=request.path, greeting=greeting, items=items), "text/html"
        return web.Response(status=status, text=text, content_type=ctype, headers=headers)


# ---------------------------------------------------------------------------------------------
# The world


class Testbed:
    """Proxies, a guarded site and control endpoints on loopback.

    ``async with Testbed() as tb:`` runs them on the current event loop; ``with Testbed() as
    tb:`` on a background thread with its own loop (for requests and httpx). Attributes once
    started: ``proxies`` (list of :class:`Proxy`), ``exits`` (their :class:`exitpool.Exit`,
    taken at start), ``site`` / ``sites`` (:class:`Site`), ``site_url``, ``controls``
    (:class:`Control`), ``control_url`` / ``control_urls`` (each ending in ``/ip``).

    ``source_ips`` (default ``127.0.1.1``, ``127.0.1.2``, ...) are the addresses the proxies
    leave from; ``site_options`` (``rate``, ``burst``, ``ban_after``, ``ban_window``,
    ``ban_ttl``, ``captcha_rate``, ``seed``) configure every site.
    """

    __test__ = False  # not a test class, whatever pytest thinks of the name

    def __init__(
        self,
        n_exits: int = 5,
        *,
        n_sites: int = 1,
        n_controls: int = 2,
        source_ips: Optional[Sequence[str]] = None,
        timeout: float = 30.0,
        **site_options: Any,
    ) -> None:
        if not isinstance(n_exits, int) or n_exits < 1:
            raise ValueError(f"n_exits {n_exits!r}: need at least one exit")
        if not isinstance(n_sites, int) or n_sites < 1:
            raise ValueError(f"n_sites {n_sites!r}: need at least one site")
        if not isinstance(n_controls, int) or n_controls < 1:
            raise ValueError(f"n_controls {n_controls!r}: need at least one control endpoint")
        if source_ips is None:
            source_ips = [_default_source_ip(i) for i in range(n_exits)]
        source_ips = [_check_loopback(ip, "source_ip") for ip in source_ips]
        if len(source_ips) != n_exits:
            raise ValueError(f"{len(source_ips)} source_ips for {n_exits} exits")
        if len(set(source_ips)) != n_exits:
            raise ValueError("source_ips must be distinct")
        unknown = set(site_options) - {"rate", "burst", "ban_after", "ban_window", "ban_ttl", "captcha_rate", "seed"}
        if unknown:
            raise TypeError(f"unknown Testbed options: {sorted(unknown)}")
        self.proxies: List[Proxy] = [
            Proxy(f"exit-{i}", source_ip=ip, user=f"user{i}", timeout=timeout) for i, ip in enumerate(source_ips)
        ]
        seed = site_options.pop("seed", None)
        self.sites: List[Site] = [
            Site(f"site-{i}", seed=None if seed is None else seed + i, **site_options) for i in range(n_sites)
        ]
        self.controls: List[Control] = [Control(f"control-{i}") for i in range(n_controls)]
        self.exits: List[Exit] = []
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._thread: Optional[threading.Thread] = None
        self._state = "new"

    def __repr__(self) -> str:
        return f"<Testbed {len(self.proxies)} exits, {len(self.sites)} site(s), {self._state}>"

    # -- views
    @property
    def site(self) -> Site:
        return self.sites[0]

    @property
    def site_url(self) -> str:
        return self.sites[0].url

    @property
    def control_url(self) -> str:
        return self.controls[0].url

    @property
    def control_urls(self) -> List[str]:
        return [c.url for c in self.controls]

    @property
    def loop(self) -> Optional[asyncio.AbstractEventLoop]:
        """The event loop the world runs on."""
        return self._loop

    def proxy(self, exit_id: str) -> Proxy:
        """The proxy behind an exit of ``exits``."""
        for p in self.proxies:
            if p.name == exit_id:
                return p
        raise KeyError(exit_id)

    def _servers(self) -> List[_Server]:
        return [*self.controls, *self.sites, *self.proxies]

    # -- async life
    async def start(self) -> "Testbed":
        if self._state != "new":
            raise RuntimeError(f"a testbed starts once (this one is {self._state})")
        self._state = "starting"
        self._loop = asyncio.get_running_loop()
        try:
            for s in self._servers():
                await s._start()
        except BaseException:
            await self.aclose()
            raise
        self.exits = [p.exit() for p in self.proxies]
        self._state = "running"
        return self

    async def aclose(self) -> None:
        """Close every server and connection; the ports are free when it returns."""
        if self._state == "closed":
            return
        self._state = "closed"
        for s in reversed(self._servers()):
            try:
                await s._close()
            except Exception:  # pragma: no cover - close the others anyway
                pass

    async def __aenter__(self) -> "Testbed":
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    # -- sync life: a background thread with its own loop
    def start_thread(self, timeout: float = 10.0) -> "Testbed":
        """Start the world on a background thread with its own event loop."""
        if self._state != "new":
            raise RuntimeError(f"a testbed starts once (this one is {self._state})")
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=self._run_loop, args=(loop,), name="exitpool-testbed", daemon=True)
        thread.start()
        self._thread = thread
        try:
            asyncio.run_coroutine_threadsafe(self.start(), loop).result(timeout)
        except BaseException:
            self._stop_thread(loop, timeout)
            raise
        return self

    @staticmethod
    def _run_loop(loop: asyncio.AbstractEventLoop) -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
        finally:
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                loop.close()

    def _stop_thread(self, loop: asyncio.AbstractEventLoop, timeout: float) -> None:
        if not loop.is_closed():
            loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def run(self, coro: Awaitable[T], timeout: Optional[float] = 30.0) -> T:
        """Run a coroutine on the world's loop from another thread and return its result
        (for sync tests that want an async client, e.g. ``exitpool.probe``)."""
        loop = self._loop
        if loop is None or self._thread is None:
            raise RuntimeError("run() is for a testbed started with start_thread() / with")
        return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout)  # type: ignore[arg-type]

    def close(self, timeout: float = 10.0) -> None:
        """Stop a world started with :meth:`start_thread`; the ports are free when it returns."""
        loop = self._loop
        if self._thread is None or loop is None:
            if self._state in ("new", "closed"):
                self._state = "closed"
                return
            raise RuntimeError("this testbed runs on your event loop: use `await tb.aclose()`")
        try:
            if not loop.is_closed() and self._state != "closed":
                asyncio.run_coroutine_threadsafe(self.aclose(), loop).result(timeout)
        finally:
            self._stop_thread(loop, timeout)

    def __enter__(self) -> "Testbed":
        return self.start_thread()

    def __exit__(self, *exc: Any) -> None:
        self.close()
