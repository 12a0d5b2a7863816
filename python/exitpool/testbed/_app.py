"""The base of the testbed's aiohttp servers (the site and the control endpoints): an
aiohttp application served on a killable :class:`_Server` socket.

Its own module because :class:`~exitpool.testbed.Site` and :class:`~exitpool.testbed.Control`
share it, and it is where the testbed meets aiohttp's runner.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from typing import Optional

from aiohttp import web

from ._server import _Server


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
