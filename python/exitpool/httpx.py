"""httpx through leased exits: one connection pool per exit, reused by every lease of that exit.

Usage::

    from exitpool.httpx import Clients, report
    with Clients(timeout=20) as clients:
        with pool.lease("account-3f9", site="shop.example") as lease:
            r = clients.client(lease).get("https://shop.example/cart")
            report(lease, r)

An httpx transport holds the connection pool, so building one per request (``httpx.get(url,
proxy=lease.proxy)``) pays a TCP and TLS handshake through the proxy every time, and a client per
lease that is never closed leaks its sockets. :class:`Clients` (and :class:`AsyncClients`) keep
one transport, and one client on it, per exit for as long as the cache lives, and close them all
with it. When an exit's proxy URL changes (rotated credentials), the transport it replaces is
closed as soon as no request is using it, so rotation does not pile up open connections.

Every transport is built with the exit's proxy (httpx's ``Proxy``: the credentials travel in
``Proxy-Authorization``, to the proxy only) and every client with ``trust_env=False``, so
``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY`` and ``NO_PROXY`` never route a request elsewhere.

``socks5://`` and ``socks5h://`` exits go through httpx's own SOCKS support, which needs socksio
(``pip install 'exitpool[httpx-socks]'``); httpx hands host names to the exit for both schemes.
Exits are told apart by their id, so two exits on one gateway host:port with other credentials
never share a pool; ``fresh=True`` gives every lease connections of its own, for gateways that
rotate per connection.
"""

from __future__ import annotations

import asyncio
import http.cookiejar
import logging
import re
import threading
import weakref
from typing import Any, AsyncIterator, Awaitable, Callable, Dict, Iterator, List, Optional, Set, Tuple, Union

import httpx

from exitpool._clients import _exit_of, _require_socks, _retry_after_kwargs
from exitpool._core import Exit, Lease

__all__ = ["AsyncClients", "Clients", "report"]

# Options of httpx.Client that would let a request leave by another way than the exit.
_FORBIDDEN = ("proxy", "proxies", "mounts", "transport", "app", "trust_env")
# Options that belong to the transport: a client given a transport ignores them.
_TRANSPORT_OPTIONS = ("verify", "cert", "http1", "http2", "limits", "retries", "local_address", "socket_options")


# httpcore logs a SOCKS handshake's arguments at DEBUG, ``auth=(b'user', b'password')`` last.
_SOCKS_AUTH = re.compile(r"auth=\(.*", re.DOTALL)


class _MaskSocksAuth(logging.Filter):
    """Masks the SOCKS credentials in httpcore's handshake log lines: a proxy password must not
    reach a log, whoever writes it."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "auth=" in message:
            record.msg, record.args = _SOCKS_AUTH.sub("auth=[secure]", message), None
        return True


def _mask_httpcore_socks_log() -> None:
    logger = logging.getLogger("httpcore.socks")
    if not any(isinstance(f, _MaskSocksAuth) for f in logger.filters):
        logger.addFilter(_MaskSocksAuth())


_mask_httpcore_socks_log()


def _split(options: Dict[str, Any], owner: str) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    bad = sorted(k for k in options if k in _FORBIDDEN)
    if bad:
        raise TypeError(
            f"{owner}: {', '.join(bad)} cannot be set: every request leaves by its lease's exit "
            "(use transport() to build your own client on an exit's transport)"
        )
    transport = {k: v for k, v in options.items() if k in _TRANSPORT_OPTIONS}
    client = {k: v for k, v in options.items() if k not in _TRANSPORT_OPTIONS}
    if "cookies" not in client:
        # One client serves every account leased on its exit: a shared cookie jar would carry
        # one account's cookies into another's requests, and link them at the site.
        client["cookies"] = http.cookiejar.CookieJar(policy=http.cookiejar.DefaultCookiePolicy(allowed_domains=[]))
    client["trust_env"] = False
    return transport, client


class _Counted(httpx.SyncByteStream):
    """A response body that tells its transport when it is closed (read or not)."""

    def __init__(self, stream: httpx.SyncByteStream, done: Callable[[], None]) -> None:
        self._stream = stream
        self._done: Optional[Callable[[], None]] = done

    def __iter__(self) -> Iterator[bytes]:
        yield from self._stream

    def close(self) -> None:
        done, self._done = self._done, None
        try:
            self._stream.close()
        finally:
            if done is not None:
                done()


class _AsyncCounted(httpx.AsyncByteStream):
    """The async twin of :class:`_Counted`."""

    def __init__(self, stream: httpx.AsyncByteStream, done: Callable[[], Awaitable[None]]) -> None:
        self._stream = stream
        self._done: Optional[Callable[[], Awaitable[None]]] = done

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._stream:
            yield chunk

    async def aclose(self) -> None:
        done, self._done = self._done, None
        try:
            await self._stream.aclose()
        finally:
            if done is not None:
                await done()


class _SharedBase:
    """What both transports share: the count of requests in flight (from the request until its
    response is closed) and retirement. A retired transport (its exit's proxy URL changed) closes
    its connection pool whenever it has nothing in flight, and tells the cache once, so the
    cache forgets it. A client still held after that keeps working: a request opens a fresh
    connection, which is closed again once the response is."""

    def __init__(self, inner: Any, exit: Exit, forget: Callable[[Any], None]) -> None:
        self._inner = inner
        self._label = f"exit={exit.exit_id!r} via {exit.masked_proxy}"
        self._forget: Optional[Callable[[Any], None]] = forget
        self._lock = threading.Lock()
        self._inflight = 0
        self._retired = False

    def _start(self) -> None:
        with self._lock:
            self._inflight += 1

    def _idle_after(self, finished: bool) -> bool:
        """Count a finished request (if ``finished``); True when a retired pool is now idle.
        The caller closes it right away: with nothing in flight, no request holds one of its
        connections, and a request starting meanwhile gets a new one."""
        with self._lock:
            if finished:
                self._inflight -= 1
            return self._retired and self._inflight == 0

    def _closed_idle(self) -> None:
        forget, self._forget = self._forget, None
        if forget is not None:
            forget(self)


class _Shared(_SharedBase, httpx.BaseTransport):
    """An exit's transport as clients see it: closing a client leaves the cache's pool open."""

    def __repr__(self) -> str:
        return f"<exitpool.httpx transport {self._label}>"

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self._start()
        try:
            response = self._inner.handle_request(request)
        except BaseException:
            self._done()
            raise
        response.stream = _Counted(response.stream, self._done)  # type: ignore[arg-type]
        return response

    def _done(self, finished: bool = True) -> None:
        with self._lock:
            if finished:
                self._inflight -= 1
            idle = self._retired and self._inflight == 0
            if idle:
                # Under the lock: no request can start on the pool while it closes.
                self._inner.close()
        if idle:
            self._closed_idle()

    def _retire(self) -> None:
        with self._lock:
            self._retired = True
        self._done(finished=False)

    def close(self) -> None:
        pass


class _AsyncShared(_SharedBase, httpx.AsyncBaseTransport):
    """The async twin of :class:`_Shared`."""

    def __repr__(self) -> str:
        return f"<exitpool.httpx async transport {self._label}>"

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self._start()
        try:
            response = await self._inner.handle_async_request(request)
        except BaseException:
            await self._done()
            raise
        response.stream = _AsyncCounted(response.stream, self._done)  # type: ignore[arg-type]
        return response

    async def _done(self, finished: bool = True) -> None:
        if self._idle_after(finished):
            # aclose() takes the pool's connections before its first await, so a request
            # started after this point gets a new connection, never a closing one.
            await self._inner.aclose()
            self._closed_idle()

    def _retire(self) -> None:
        with self._lock:
            self._retired = True
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            # Outside an event loop: closed when its last response is, or with the cache.
            return
        task = loop.create_task(self._done(finished=False))
        _PENDING.add(task)
        task.add_done_callback(_PENDING.discard)

    async def aclose(self) -> None:
        pass


# Closing tasks of retired async transports, kept referenced until they finish.
_PENDING: Set[asyncio.Task[None]] = set()


class _Entry:
    __slots__ = ("proxy", "inner", "shared", "client", "lease")

    def __init__(self, proxy: str, inner: Any, shared: Any, lease: Any = None) -> None:
        self.proxy = proxy  # compared, never shown
        self.inner = inner
        self.shared = shared
        self.client: Any = None
        # With fresh=True: the lease the entry's connections are for (held, so that its id
        # stays its own while the entry lives).
        self.lease = lease


class _Cache:
    _async = False

    def __init__(self, *, fresh: bool = False, **options: Any) -> None:
        name = type(self).__name__
        self._transport_options, self._client_options = _split(dict(options), name)
        self._fresh = bool(fresh)
        # Keyed by exit id; with fresh=True, by (exit id, id(lease)).
        self._entries: Dict[Any, _Entry] = {}
        # Entries replaced by new credentials whose pool may still be busy: each leaves this
        # list once its pool has closed (when its last response was closed).
        self._retired: List[_Entry] = []
        # Their clients, closed with the cache if anyone still holds one.
        self._retired_clients: weakref.WeakSet[Any] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._closed = False

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<exitpool.httpx.{type(self).__name__} {len(self._entries)} exit(s) {state}>"

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def closed(self) -> bool:
        return self._closed

    def _forget(self, shared: Any) -> None:
        with self._lock:
            self._retired = [e for e in self._retired if e.shared is not shared]

    def _retire_locked(self, entry: _Entry) -> None:
        """Move an entry to the retired ones (the caller holds the lock, then calls
        ``entry.shared._retire()`` outside it). Its pool may still be busy in another thread
        or task: it closes as soon as nothing is in flight on it."""
        self._retired.append(entry)
        if entry.client is not None:
            self._retired_clients.add(entry.client)

    def _ended_locked(self) -> List[_Entry]:
        """With fresh=True: the entries whose lease has ended, taken out of the cache."""
        ended = [k for k, e in self._entries.items() if not e.lease.active]
        out = [self._entries.pop(k) for k in ended]
        for e in out:
            self._retire_locked(e)
        return out

    def _entry(self, lease: Union[Lease, Exit]) -> _Entry:
        exit = _exit_of(lease)
        _require_socks(exit, "httpx", "socksio", "socksio", "httpx-socks")
        if self._fresh and not isinstance(lease, Lease):
            raise TypeError(f"{type(self).__name__}(fresh=True) gives each lease connections of its own: pass the Lease, not an Exit")
        old: List[_Entry] = []
        key: Any = (exit.exit_id, id(lease)) if self._fresh else exit.exit_id
        try:
            with self._lock:
                if self._closed:
                    raise RuntimeError(f"this {type(self).__name__} is closed")
                if self._fresh:
                    old = self._ended_locked()
                entry = self._entries.get(key)
                if entry is not None and entry.proxy == exit.proxy:
                    return entry
                if entry is not None:
                    # Same exit id, new credentials: a fresh pool, so no connection
                    # authenticated with the old ones is reused.
                    old.append(entry)
                    self._retire_locked(entry)
                entry = self._new_entry(exit, lease if self._fresh else None)
                self._entries[key] = entry
        finally:
            for e in old:
                e.shared._retire()  # outside the cache's lock: closing calls back _forget
        return entry

    def _new_entry(self, exit: Exit, lease: Any) -> _Entry:
        proxy = httpx.Proxy(exit.proxy)
        if self._async:
            inner: Any = httpx.AsyncHTTPTransport(proxy=proxy, **self._transport_options)
            shared: Any = _AsyncShared(inner, exit, self._forget)
        else:
            inner = httpx.HTTPTransport(proxy=proxy, **self._transport_options)
            shared = _Shared(inner, exit, self._forget)
        return _Entry(exit.proxy, inner, shared, lease)

    def _client(self, lease: Union[Lease, Exit], cls: Any) -> Any:
        entry = self._entry(lease)
        with self._lock:
            if entry.client is None:
                entry.client = cls(transport=entry.shared, **self._client_options)
            return entry.client

    def _take_all(self) -> List[Tuple[Any, Any]]:
        """(client or None, pool) pairs to close, once: every current and retired one."""
        with self._lock:
            self._closed = True
            entries = list(self._entries.values()) + self._retired
            stale = [c for c in self._retired_clients if all(c is not e.client for e in entries)]
            self._entries = {}
            self._retired = []
            self._retired_clients = weakref.WeakSet()
        return [(e.client, e.inner) for e in entries] + [(c, None) for c in stale]


class Clients(_Cache):
    """One ``httpx.Client`` per exit, created on first use and reused by every lease of that
    exit; closing the cache (``with Clients() as clients:`` or :meth:`close`) closes them all.

    ``options`` are ``httpx.Client``'s (``timeout``, ``headers``, ``follow_redirects``,
    ``event_hooks``, ``base_url``, ...) and its transport's (``verify``, ``cert``, ``http1``,
    ``http2``, ``limits``, ``retries``, ``local_address``, ``socket_options``: passed to each
    exit's ``httpx.HTTPTransport``). ``proxy``, ``proxies``, ``mounts``, ``transport``, ``app``
    and ``trust_env`` raise ``TypeError``: the exit is the only way out.

    The per-exit client keeps no cookies unless given ``cookies=`` (it is shared by every
    account leased on that exit). For a client of your own per account, with its cookies, build
    ``httpx.Client(transport=clients.transport(lease))``: it shares the exit's connection pool,
    and closing it leaves the pool to the cache. Thread-safe.

    ``fresh=True``: each lease (pass the :class:`exitpool.Lease`) gets a client and connection
    pool of its own instead of its exit's shared one, so its first request opens a new tunnel
    (a gateway that rotates per connection gives it a new address, held for the lease). Pools
    of ended leases are closed at the next :meth:`client` call or with the cache.

    A ``socks5`` / ``socks5h`` exit needs socksio: without it :meth:`client` raises
    ``ImportError`` naming the extra to install (``exitpool[httpx-socks]``).
    """

    _async = False

    def client(self, lease: Union[Lease, Exit]) -> httpx.Client:
        """The client of the lease's exit (a :class:`exitpool.Lease` or an :class:`exitpool.Exit`).
        An exit whose proxy URL changed (new credentials) gets a new client; the old one's
        connections are closed as soon as none of its responses is open (a streamed response
        counts until it is closed), and the cache then forgets it."""
        return self._client(lease, httpx.Client)

    def transport(self, lease: Union[Lease, Exit]) -> httpx.BaseTransport:
        """The exit's transport, for ``httpx.Client(transport=...)``; the cache closes it."""
        return self._entry(lease).shared

    def close(self) -> None:
        """Close every client and connection pool; using the cache afterwards raises."""
        errors: List[BaseException] = []
        for client, inner in self._take_all():
            for close in (client.close if client is not None else None, inner.close if inner is not None else None):
                if close is None:
                    continue
                try:
                    close()
                except Exception as e:  # close the others anyway
                    errors.append(e)
        if errors:
            raise errors[0]

    def __enter__(self) -> Clients:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class AsyncClients(_Cache):
    """The async twin of :class:`Clients`: one ``httpx.AsyncClient`` per exit;
    ``async with AsyncClients() as clients:`` or ``await clients.aclose()``. Same options."""

    _async = True

    def client(self, lease: Union[Lease, Exit]) -> httpx.AsyncClient:
        """The async client of the lease's exit."""
        return self._client(lease, httpx.AsyncClient)

    def transport(self, lease: Union[Lease, Exit]) -> httpx.AsyncBaseTransport:
        """The exit's async transport, for ``httpx.AsyncClient(transport=...)``."""
        return self._entry(lease).shared

    async def aclose(self) -> None:
        """Close every client and connection pool; using the cache afterwards raises."""
        errors: List[BaseException] = []
        for client, inner in self._take_all():
            for close in (client.aclose if client is not None else None, inner.aclose if inner is not None else None):
                if close is None:
                    continue
                try:
                    await close()
                except Exception as e:  # close the others anyway
                    errors.append(e)
        if errors:
            raise errors[0]

    async def __aenter__(self) -> AsyncClients:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()


def report(
    lease: Lease,
    outcome: Union[httpx.Response, BaseException],
    *,
    captcha: Union[bool, Callable[[httpx.Response], bool]] = False,
) -> None:
    """Record a request's outcome on the lease: a response's status, its latency
    (``r.elapsed``, once the response is read or closed) and, on a 429 or 503, its
    ``Retry-After``; or an exception caught inside the block. ``captcha`` is a flag or a
    function of the response. An exception that leaves the lease block needs no call."""
    if isinstance(outcome, BaseException):
        lease.report(error=outcome)
        return
    is_captcha = bool(captcha(outcome)) if callable(captcha) else bool(captcha)
    kwargs: Dict[str, Any] = {"status": outcome.status_code, "captcha": is_captcha}
    try:
        kwargs["latency"] = max(0.0, outcome.elapsed.total_seconds())
    except (AttributeError, RuntimeError):  # a streamed response not read yet
        pass
    kwargs.update(_retry_after_kwargs(outcome.status_code, outcome.headers))
    lease.report(**kwargs)
