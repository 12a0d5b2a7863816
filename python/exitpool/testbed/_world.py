"""The world (:class:`Testbed`): proxies, sites and control endpoints started and closed
together, on the caller's event loop or on a background thread with a loop of its own.

Its own module because it is the only part that knows all the others: the servers do not
know about each other.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Awaitable, List, Mapping, Optional, Sequence, TypeVar, Union

from .._core import Exit
from ._control import Control
from ._gateway import ProviderGateway
from ._proxy import Proxy
from ._server import _check_loopback, _Server
from ._site import Site
from ._socks import Socks5Proxy

T = TypeVar("T")


def _default_source_ip(i: int) -> str:
    return f"127.0.{1 + i // 250}.{1 + i % 250}"


_PROXY_SCHEMES = ("http", "socks5", "socks5h")


def _schemes(scheme: Union[str, Sequence[str]], n_exits: int) -> List[str]:
    """One proxy scheme per exit: ``scheme`` for all, or one each."""
    schemes = [scheme] * n_exits if isinstance(scheme, str) else list(scheme)
    if len(schemes) != n_exits:
        raise ValueError(f"{len(schemes)} schemes for {n_exits} exits")
    for s in schemes:
        if s not in _PROXY_SCHEMES:
            raise ValueError(f"scheme {s!r}: the testbed's proxies are http, socks5 or socks5h")
    return schemes


def _make_proxy(name: str, scheme: str, *, socks_auth: bool, hosts: Optional[Mapping[str, str]], **options: Any) -> Proxy:
    if scheme == "http":
        return Proxy(name, **options)
    return Socks5Proxy(name, scheme=scheme, auth=socks_auth, hosts=hosts, **options)


class Testbed:
    """Proxies, a guarded site and control endpoints on loopback.

    ``async with Testbed() as tb:`` runs them on the current event loop; ``with Testbed() as
    tb:`` on a background thread with its own loop (for requests and httpx). Attributes once
    started: ``proxies`` (list of :class:`Proxy`), ``exits`` (their :class:`exitpool.Exit`,
    taken at start), ``site`` / ``sites`` (:class:`Site`), ``site_url``, ``controls``
    (:class:`Control`), ``control_url`` / ``control_urls`` (each ending in ``/ip``).

    ``source_ips`` (default ``127.0.1.1``, ``127.0.1.2``, ...) are the addresses the proxies
    leave from; ``scheme`` (``"http"``, ``"socks5"`` or ``"socks5h"``, or a list of them, one per
    exit) picks HTTP proxies (:class:`Proxy`) or SOCKS5 ones (:class:`Socks5Proxy`, with a user
    name and password unless ``socks_auth=False``; ``hosts`` maps names only they resolve to
    127.x addresses, for socks5h); ``gateways`` are provider gateways (:class:`ProviderGateway`) started and
    closed with the rest (``gateway`` / ``gateways``); ``site_options`` (``rate``, ``burst``, ``ban_after``, ``ban_window``,
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
        gateways: Sequence[ProviderGateway] = (),
        scheme: Union[str, Sequence[str]] = "http",
        socks_auth: bool = True,
        hosts: Optional[Mapping[str, str]] = None,
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
            _make_proxy(f"exit-{i}", s, source_ip=ip, user=f"user{i}", timeout=timeout, socks_auth=socks_auth, hosts=hosts)
            for i, (ip, s) in enumerate(zip(source_ips, _schemes(scheme, n_exits)))
        ]
        seed = site_options.pop("seed", None)
        self.sites: List[Site] = [Site(f"site-{i}", seed=None if seed is None else seed + i, **site_options) for i in range(n_sites)]
        self.controls: List[Control] = [Control(f"control-{i}") for i in range(n_controls)]
        self.gateways: List[ProviderGateway] = list(gateways)
        if not all(isinstance(g, ProviderGateway) for g in self.gateways):
            raise TypeError("gateways must be exitpool.testbed.ProviderGateway instances")
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
    def gateway(self) -> ProviderGateway:
        """The first provider gateway (``gateways=`` at construction)."""
        if not self.gateways:
            raise LookupError("this testbed has no provider gateway: Testbed(gateways=[ProviderGateway()])")
        return self.gateways[0]

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
        return [*self.controls, *self.sites, *self.proxies, *self.gateways]

    # -- async life
    async def start(self) -> Testbed:
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

    async def __aenter__(self) -> Testbed:
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    # -- sync life: a background thread with its own loop
    def start_thread(self, timeout: float = 10.0) -> Testbed:
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

    def __enter__(self) -> Testbed:
        return self.start_thread()

    def __exit__(self, *exc: Any) -> None:
        self.close()
