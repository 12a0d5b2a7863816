"""The testbed's SOCKS5 proxy (:class:`Socks5Proxy`): RFC 1928 ``CONNECT`` with RFC 1929
username/password authentication (or none), leaving from its own loopback source address like
the HTTP :class:`~exitpool.testbed.Proxy`.

Its own module because it is the one SOCKS speaker of the testbed: the handshake, the reply
codes and the proxy-side name table here concern it alone. Everything else (controls, counters,
extra users, upstream connections and tunnels' pipes) is the HTTP proxy's, inherited.
"""

from __future__ import annotations

import asyncio
import collections
import ipaddress
import socket
import struct
from typing import Dict, Mapping, Optional, Tuple

from ._proxy import Proxy, _Reject
from ._server import _check_loopback

_VERSION = 5
_AUTH_VERSION = 1  # RFC 1929 sub-negotiation
_NO_AUTH = 0x00
_USER_PASSWORD = 0x02
_NO_ACCEPTABLE = 0xFF
_CMD_CONNECT = 0x01
_ATYP_IPV4 = 0x01
_ATYP_DOMAIN = 0x03
_ATYP_IPV6 = 0x04

# RFC 1928 section 6 reply codes.
_SUCCEEDED = 0x00
_GENERAL_FAILURE = 0x01
_NOT_ALLOWED = 0x02
_HOST_UNREACHABLE = 0x04
_CONNECTION_REFUSED = 0x05
_TTL_EXPIRED = 0x06
_COMMAND_NOT_SUPPORTED = 0x07
_ATYP_NOT_SUPPORTED = 0x08

_SCHEMES = ("socks5", "socks5h")


class _SocksError(Exception):
    """A request refused with a SOCKS reply code (the connection closes after the reply)."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def _reply(code: int, bind: Tuple[str, int] = ("0.0.0.0", 0)) -> bytes:
    host, port = bind
    try:
        addr = socket.inet_aton(host)
    except OSError:
        addr = b"\0\0\0\0"
    return bytes([_VERSION, code, 0, _ATYP_IPV4]) + addr + struct.pack("!H", port)


class Socks5Proxy(Proxy):
    """A SOCKS5 proxy leaving from its own loopback source address.

    ``url`` is ``socks5://user:password@127.0.0.1:port`` (``scheme="socks5h"`` gives the same
    server under the scheme that makes clients send host names, resolved here); with
    ``auth=False`` the proxy offers "no authentication" only and ``url`` holds no credentials.
    Wrong credentials are refused (RFC 1929 status 1, then the connection closes), as the HTTP
    proxy answers 407; they count in ``auth_failures``. ``add_user`` adds more credentials to
    the same port, each leaving from its own address.

    Only ``CONNECT`` is served, to 127.x destinations: an IPv4 address, or a name (ATYP
    DOMAINNAME) resolved at the proxy through ``hosts`` (name -> 127.x address, e.g.
    ``{"shop.test": "127.0.0.1"}``, names a client cannot resolve itself) and ``localhost``.
    Any other name is "host unreachable" (the testbed never asks a DNS server); IPv6 is "address
    type not supported". ``domain_requests`` counts the names asked for, ``ipv4_requests`` the
    requests by address, so a test can tell socks5h from socks5. Controls and the other
    counters are the HTTP proxy's (kill, revive, slow, flaky, drift).
    """

    def __init__(
        self,
        name: str,
        *,
        source_ip: str,
        user: Optional[str] = None,
        password: Optional[str] = None,
        auth: bool = True,
        scheme: str = "socks5",
        hosts: Optional[Mapping[str, str]] = None,
        host: str = "127.0.0.1",
        timeout: float = 30.0,
        idle_timeout: float = 30.0,
        tunnel_ttl: float = 300.0,
    ) -> None:
        super().__init__(
            name,
            source_ip=source_ip,
            user=user,
            password=password,
            host=host,
            timeout=timeout,
            idle_timeout=idle_timeout,
            tunnel_ttl=tunnel_ttl,
        )
        if scheme not in _SCHEMES:
            raise ValueError(f"scheme {scheme!r}: a SOCKS proxy is socks5 or socks5h")
        if len(self.user.encode()) > 255 or len(self.password.encode()) > 255:
            raise ValueError("a SOCKS5 user name or password holds at most 255 bytes (RFC 1929)")
        self.scheme = scheme
        self.auth = bool(auth)
        self.hosts: Dict[str, str] = {k.lower(): _check_loopback(v, f"hosts[{k!r}]") for k, v in (hosts or {}).items()}
        self.domain_requests: collections.Counter = collections.Counter()
        self.ipv4_requests = 0

    @property
    def url(self) -> str:
        """``socks5://user:password@host:port`` (no credentials with ``auth=False``). Holds the
        password: do not log it."""
        if not self.auth:
            return f"{self.scheme}://{self.host}:{self.port}"
        return f"{self.scheme}://{self.user}:{self.password}@{self.host}:{self.port}"

    def _user_url(self, user: str, password: str) -> str:
        return f"{self.scheme}://{user}:{password}@{self.host}:{self.port}"

    def stats(self) -> Dict[str, object]:
        out = dict(super().stats())
        out["domain_requests"] = sum(self.domain_requests.values())
        out["ipv4_requests"] = self.ipv4_requests
        return out

    # -- one connection: greeting, authentication, request, then a tunnel
    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        try:
            source_ip = await asyncio.wait_for(self._negotiate(reader, writer), self.idle_timeout)
            if source_ip is None:
                return False
            if self._drop_now():
                self.dropped += 1
                writer.transport.abort()
                return False
            host, port = await asyncio.wait_for(self._request(reader), self.idle_timeout)
            await self._connect(reader, writer, host, port, source_ip)
        except _SocksError as e:
            writer.write(_reply(e.code))
            try:
                await asyncio.wait_for(writer.drain(), self.timeout)
            except (ConnectionError, OSError, asyncio.TimeoutError):
                pass
        return False

    async def _negotiate(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> Optional[str]:
        """The method selection and, with ``auth``, the RFC 1929 exchange: the source address
        the client's requests leave from, or None when it was refused (reply sent)."""
        ver, n = await reader.readexactly(2)
        if ver != _VERSION:
            return None  # not SOCKS5: close without an answer
        methods = await reader.readexactly(n)
        wanted = _USER_PASSWORD if self.auth else _NO_AUTH
        if wanted not in methods:
            if self.auth:
                self.auth_failures += 1
            writer.write(bytes([_VERSION, _NO_ACCEPTABLE]))
            await writer.drain()
            return None
        writer.write(bytes([_VERSION, wanted]))
        await writer.drain()
        if not self.auth:
            return self.source_ip
        ver, ulen = await reader.readexactly(2)
        user = await reader.readexactly(ulen)
        (plen,) = await reader.readexactly(1)
        password = await reader.readexactly(plen)
        source_ip = self._source_for(user.decode("utf-8", "replace"), password.decode("utf-8", "replace"))
        if ver != _AUTH_VERSION or source_ip is None:
            self.auth_failures += 1
            writer.write(bytes([_AUTH_VERSION, 0x01]))
            await writer.drain()
            return None
        writer.write(bytes([_AUTH_VERSION, 0x00]))
        await writer.drain()
        return source_ip

    async def _request(self, reader: asyncio.StreamReader) -> Tuple[str, int]:
        """The CONNECT request's destination, resolved here (names through ``hosts``)."""
        ver, cmd, _rsv, atyp = await reader.readexactly(4)
        if ver != _VERSION:
            raise _SocksError(_GENERAL_FAILURE)
        if atyp == _ATYP_IPV4:
            host = socket.inet_ntoa(await reader.readexactly(4))
            name = None
        elif atyp == _ATYP_DOMAIN:
            (length,) = await reader.readexactly(1)
            name = (await reader.readexactly(length)).decode("ascii", "replace").lower()
            host = ""
        elif atyp == _ATYP_IPV6:
            await reader.readexactly(16 + 2)
            raise _SocksError(_ATYP_NOT_SUPPORTED)
        else:
            raise _SocksError(_ATYP_NOT_SUPPORTED)
        (port,) = struct.unpack("!H", await reader.readexactly(2))
        if cmd != _CMD_CONNECT:
            raise _SocksError(_COMMAND_NOT_SUPPORTED)
        if name is not None:
            self.domain_requests[name] += 1
            host = self._resolve(name)
        else:
            self.ipv4_requests += 1
        try:
            _check_loopback(host, "destination")
        except ValueError:
            raise _SocksError(_NOT_ALLOWED) from None
        return host, port

    def _resolve(self, name: str) -> str:
        if name in self.hosts:
            return self.hosts[name]
        if name == "localhost":
            return "127.0.0.1"
        try:
            return str(ipaddress.IPv4Address(name))  # a client may send an address as a name
        except ValueError:
            raise _SocksError(_HOST_UNREACHABLE) from None

    async def _connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str, port: int, source_ip: str) -> None:
        try:
            up_reader, up_writer = await self._open_upstream(host, port, source_ip)
        except _Reject as r:
            code = _TTL_EXPIRED if r.status == 504 else _CONNECTION_REFUSED
            raise _SocksError(code) from None
        self.requests += 1
        self.tunnels += 1
        try:
            if self._delay:
                await asyncio.sleep(self._delay)
            if self._killed:
                writer.transport.abort()
                return
            bind = up_writer.get_extra_info("sockname") or ("0.0.0.0", 0)
            writer.write(_reply(_SUCCEEDED, (bind[0], bind[1])))
            await asyncio.wait_for(writer.drain(), self.timeout)
            await self._splice(reader, writer, up_reader, up_writer)
        finally:
            self._writers.discard(up_writer)
            up_writer.close()


__all__ = ["Socks5Proxy"]
