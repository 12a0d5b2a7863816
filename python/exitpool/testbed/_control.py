"""The control endpoints (:class:`Control`): ``GET /ip`` answers the client IP, unguarded, on
servers of their own, so a site incident says nothing about them and one of them can be taken
down alone (quorum tests).

Its own module because it is a concept of its own: what a probe talks to, not what a scraper
scrapes.
"""

from __future__ import annotations

import collections
from typing import Optional

from aiohttp import web

from ._app import _AppServer, _client_ip


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
