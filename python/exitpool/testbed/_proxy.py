"""The testbed's HTTP forward proxy (:class:`Proxy`): Basic proxy auth, absolute-form
forwarding and ``CONNECT`` tunnels, leaving from its own loopback source address, with
controls to kill, slow, make flaky or drift it.

Its own module because it is the one hand-written HTTP/1.1 speaker of the testbed: the head
parsing, body framing and bounds here concern it alone.
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import math
import random
import secrets
import socket
import threading
from typing import Any, Dict, Iterable, List, Optional, Sequence, Set, Tuple
from urllib.parse import urlsplit

from .._core import Exit
from ._server import _check_loopback, _Server

# Bounds. Every loop below is bounded by one of these or by a timeout.
_HEAD_LIMIT = 64 * 1024  # request or response head
_BODY_LIMIT = 16 * 1024 * 1024  # request or response body
_MAX_REQUESTS_PER_CONNECTION = 10_000
_MAX_HEADERS = 200
_MAX_CHUNKS = 100_000
_PIPE_CHUNK = 64 * 1024

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


class _Reject(Exception):
    def __init__(self, status: int, reason: str, message: str, extra: Sequence[Tuple[str, str]] = ()) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message
        self.extra = tuple(extra)


def _proxy_auth_required(message: str = "proxy credentials missing or wrong") -> _Reject:
    return _Reject(407, "Proxy Authentication Required", message, [("Proxy-Authenticate", 'Basic realm="exitpool-testbed"')])


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
        raise _Reject(502, "Bad Gateway", f"exitpool testbed proxies reach 127.x addresses only, not {host!r}") from None
    return host, port or default_port


class Proxy(_Server):
    """An HTTP forward proxy leaving from its own loopback source address.

    ``url`` is ``http://user:password@127.0.0.1:port``; ``exit()`` gives the matching
    :class:`exitpool.Exit`. Controls, callable from any thread: :meth:`kill`, :meth:`revive`,
    :meth:`slow`, :meth:`flaky`, :meth:`drift`; :meth:`add_user` adds credentials that leave
    from another address. Counters: ``connections``, ``requests``
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
        # Credentials added with add_user: user -> (password, source address).
        self._users: Dict[str, Tuple[str, str]] = {}
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
        return f"<{type(self).__name__} {self.name} 127.0.0.1:{self.port} via {self.source_ip} {state}>"

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

    def add_user(self, user: str, *, source_ip: str, password: Optional[str] = None, exit_id: Optional[str] = None) -> Exit:
        """More credentials on this same port, leaving from ``source_ip``: the exit they make
        (``exit_id`` default ``{name}-{user}``). Two exits on one host:port that differ only in
        credentials, as a gateway's accounts are, for tests of connection reuse."""
        if ":" in user or user == self.user:
            raise ValueError(f"add_user({user!r}): a new user name without ':'")
        password = password if password is not None else secrets.token_hex(8)
        self._users[user] = (password, _check_loopback(source_ip, "source_ip"))
        return Exit(exit_id or f"{self.name}-{user}", self._user_url(user, password), ip=source_ip)

    def _user_url(self, user: str, password: str) -> str:
        return f"http://{user}:{password}@{self.host}:{self.port}"

    def _basic_source(self, authorization: str) -> Optional[str]:
        """The source address of a ``Basic`` Proxy-Authorization's credentials, or None."""
        scheme, _, value = authorization.strip().partition(" ")
        if scheme.lower() != "basic":
            return None
        try:
            user, sep, password = base64.b64decode(value.strip(), validate=True).decode("utf-8").partition(":")
        except (ValueError, UnicodeDecodeError):
            return None
        return self._source_for(user, password) if sep else None

    def _source_for(self, user: str, password: str) -> Optional[str]:
        """The source address these credentials leave from, or None when they are wrong."""
        if user == self.user:
            return self.source_ip if hmac.compare_digest(password.encode(), self.password.encode()) else None
        known = self._users.get(user)
        if known is None or not hmac.compare_digest(password.encode(), known[0].encode()):
            return None
        return known[1]

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
            source_ip = self._admit(_header(headers, "Proxy-Authorization") or "")
            if method.upper() == "CONNECT":
                await self._tunnel(reader, writer, target, source_ip)
                return False
            if not target.lower().startswith("http://"):
                raise _Reject(400, "Bad Request", "forward proxy: need an absolute http:// URL or CONNECT")
            return await self._forward(reader, writer, method, target, version, headers, source_ip)
        except _Reject as r:
            await self._refuse(writer, r.status, r.reason, r.message, r.extra)
            return False

    def _admit(self, authorization: str) -> str:
        """Checks a request's ``Proxy-Authorization`` and returns the source address it leaves
        from; raises :class:`_Reject` (407) for wrong credentials. The one place a proxy decides
        who may pass and from where: the provider gateway overrides it."""
        if hmac.compare_digest(authorization.strip().encode(), self._expected_auth.encode()):
            return self.source_ip
        source_ip = self._basic_source(authorization) if self._users else None
        if source_ip is None:
            self.auth_failures += 1
            raise _proxy_auth_required()
        return source_ip

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

    async def _open_upstream(self, host: str, port: int, source_ip: str) -> Tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(host, port, local_addr=(source_ip, 0), limit=_HEAD_LIMIT),
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

    async def _tunnel(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, target: str, source_ip: str) -> None:
        host, _, port_s = target.rpartition(":")
        try:
            port = int(port_s)
        except ValueError:
            raise _Reject(400, "Bad Request", f"CONNECT needs host:port, got {target[:80]!r}") from None
        host, port = _destination(host.strip("[]"), port, 443)
        up_reader, up_writer = await self._open_upstream(host, port, source_ip)
        self.requests += 1
        self.tunnels += 1
        try:
            if self._delay:
                await asyncio.sleep(self._delay)
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await asyncio.wait_for(writer.drain(), self.timeout)
            await self._splice(reader, writer, up_reader, up_writer)
        finally:
            self._writers.discard(up_writer)
            up_writer.close()

    async def _splice(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        up_reader: asyncio.StreamReader,
        up_writer: asyncio.StreamWriter,
    ) -> None:
        """Pass bytes both ways until one side ends, for at most ``tunnel_ttl`` (the HTTP
        ``CONNECT`` tunnel and the SOCKS one alike)."""
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
        source_ip: str,
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

        up_reader, up_writer = await self._open_upstream(host, port, source_ip)
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
