"""A rotating-proxy gateway on loopback for tests/test_scrapy.py: one host:port, many exits
told apart by user name alone (``http://sess-a:pw@gw:port``, ``http://sess-b:pw@gw:port``), as
commercial gateways name sticky sessions. Each user is relayed through its own testbed proxy,
so the site sees that proxy's source address: a request that leaves with another user's
credentials shows up at the wrong address.

Plain ``http://`` forwarding only (the testbed's site speaks HTTP), one request per
connection: every request is authenticated on its own and answered with ``Connection: close``.
"""

from __future__ import annotations

import asyncio
import base64
import collections
from typing import Dict, Optional, Tuple

_HOP = {"proxy-authorization", "proxy-connection", "connection", "keep-alive"}


class Gateway:
    def __init__(self, users: Dict[str, Tuple[str, object]]) -> None:
        """``users``: user name -> (password, testbed Proxy to leave through)."""
        self._routes = {
            "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode(): (user, proxy) for user, (password, proxy) in users.items()
        }
        self.requests: collections.Counter = collections.Counter()  # per user
        self.auth_failures = 0
        self.port: Optional[int] = None
        self._server: Optional[asyncio.AbstractServer] = None

    async def start(self) -> Gateway:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            first, *lines = head.decode("latin-1").split("\r\n")
            headers = [(k.strip(), v.strip()) for k, _, v in (line.partition(":") for line in lines if line)]
            auth = next((v for k, v in headers if k.lower() == "proxy-authorization"), "")
            route = self._routes.get(auth)
            if route is None:
                self.auth_failures += 1
                writer.write(
                    b"HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic\r\n"
                    b"Content-Length: 0\r\nConnection: close\r\n\r\n"
                )
                await writer.drain()
                return
            user, proxy = route
            self.requests[user] += 1
            length = next((int(v) for k, v in headers if k.lower() == "content-length"), 0)
            body = await reader.readexactly(length) if length else b""
            kept = [(k, v) for k, v in headers if k.lower() not in _HOP]
            kept += [("Proxy-Authorization", proxy.auth_header), ("Connection", "close")]
            out = first + "\r\n" + "".join(f"{k}: {v}\r\n" for k, v in kept) + "\r\n"
            up_reader, up_writer = await asyncio.open_connection(proxy.host, proxy.port)
            try:
                up_writer.write(out.encode("latin-1") + body)
                await up_writer.drain()
                answer = await asyncio.wait_for(up_reader.read(), 30)
            finally:
                up_writer.close()
            writer.write(answer)
            await writer.drain()
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError, ValueError):
            pass
        finally:
            writer.close()
