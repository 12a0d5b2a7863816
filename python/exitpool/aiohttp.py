"""aiohttp through leased exits: request arguments for a lease, and a session that leases,
sends and reports by itself.

Usage::

    from exitpool.aiohttp import ExitSession
    async with ExitSession(pool, timeout=aiohttp.ClientTimeout(total=20)) as http:
        async with http.get("https://shop.example/cart", key="account-3f9") as r:
            html = await r.text()

Credentials go the way aiohttp no longer deprecates: ``proxy=`` a URL without them, and the
``Proxy-Authorization`` header in ``proxy_headers`` (``proxy_auth=`` warns since aiohttp 3.14, and
credentials inside the URL can end up in an ``InvalidURL`` message). aiohttp sends ``proxy_headers``
only on the ``CONNECT`` that opens a tunnel to an ``https://`` target; for a plain ``http://``
target the request itself goes to the proxy and aiohttp does not copy them onto it
(aio-libs/aiohttp#4422), so there the header rides on the request, which only the proxy reads.
It never rides on a request inside a tunnel, where the target would read it.

aiohttp keys its pooled connections by proxy URL and proxy headers, so through one session two
exits on one gateway host:port with other credentials never share a connection. ``socks5://`` and
``socks5h://`` exits go through aiohttp-socks (``pip install 'exitpool[aiohttp-socks]'``), whose
proxy is a connector: :class:`ExitSession` keeps a session of its own per SOCKS exit, and
:func:`connector` gives one for your own session. ``socks5h`` resolves names at the exit.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from typing import Any, Awaitable, Callable, Dict, Generator, List, Mapping, Optional, Union

try:
    import aiohttp
except ImportError as _e:  # pragma: no cover - exercised only without the extra
    raise ImportError("exitpool.aiohttp needs aiohttp: pip install 'exitpool[aiohttp]'") from _e
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from exitpool._clients import _SOCKS_SCHEMES, _exit_of, _proxy_parts, _require_socks, _retry_after_kwargs
from exitpool._clients import _site as _site_of
from exitpool._core import _MASK, Exit, Lease, Pool
from exitpool._errors import InvalidInput
from exitpool._outcome import _classify

__all__ = ["ExitSession", "connector", "report", "request_kwargs"]

_AUTH = "Proxy-Authorization"
_TUNNELLED = ("https", "wss")
_UNSET: Any = object()

CaptchaHook = Callable[[aiohttp.ClientResponse], Union[bool, Awaitable[bool]]]


# Why a SOCKS exit cannot go through request arguments, for `_proxy_parts`.
_REFUSAL = (
    "exitpool.aiohttp: exit {exit_id} is a {scheme} proxy, which aiohttp reaches through a connector, "
    "not through request arguments: use ExitSession, or ClientSession(connector=exitpool.aiohttp.connector(lease))"
)


def connector(lease: Union[Lease, Exit], **options: Any) -> Any:
    """An aiohttp-socks ``ProxyConnector`` through a ``socks5`` or ``socks5h`` exit, for a
    session of your own: ``aiohttp.ClientSession(connector=connector(lease))``. Every
    connection of that session goes through the exit (``socks5h``: names resolved there);
    ``options`` go to the connector (``limit``, ``ssl``, ``force_close``, ...). For an
    http(s) exit use :func:`request_kwargs`. Without aiohttp-socks this raises
    ``ImportError`` naming the extra to install (``exitpool[aiohttp-socks]``)."""
    exit = _exit_of(lease)
    if exit.scheme not in _SOCKS_SCHEMES:
        raise InvalidInput(f"exitpool.aiohttp.connector: exit {exit.exit_id!r} is an {exit.scheme} proxy: use request_kwargs(lease, url)")
    return _socks_connector(exit, options)


def _socks_connector(exit: Exit, options: Dict[str, Any]) -> Any:
    _require_socks(exit, "aiohttp", "aiohttp_socks", "aiohttp-socks", "aiohttp-socks")
    from aiohttp_socks import ProxyConnector, ProxyType

    return ProxyConnector(
        proxy_type=ProxyType.SOCKS5,
        host=exit.host,
        port=exit.port,
        username=exit.username,
        password=exit.password,
        rdns=exit.scheme == "socks5h",
        **options,
    )


class _SocksSession:
    """The session of one SOCKS exit inside an :class:`ExitSession`, with its requests in
    flight: once replaced (the exit's credentials changed) it closes when the last one ends."""

    __slots__ = ("proxy", "session", "inflight", "retired")

    def __init__(self, proxy: str, session: aiohttp.ClientSession) -> None:
        self.proxy = proxy  # compared, never shown
        self.session = session
        self.inflight = 0
        self.retired = False


def _tunnelled(url: Union[str, URL]) -> bool:
    u = URL(url) if not isinstance(url, URL) else url
    if not u.is_absolute() or not u.scheme:
        raise InvalidInput("exitpool.aiohttp: an absolute URL is needed to tell a tunnelled (https) request from a plain-http one")
    return u.scheme.lower() in _TUNNELLED


def request_kwargs(
    lease: Union[Lease, Exit],
    url: Union[str, URL],
    *,
    headers: Optional[Mapping[str, str]] = None,
) -> Dict[str, Any]:
    """Keyword arguments that send one aiohttp request through the lease's exit:
    ``session.get(url, **request_kwargs(lease, url, headers=my_headers))``.

    They hold ``proxy`` (no credentials), ``proxy_headers`` carrying ``Proxy-Authorization``,
    and ``headers`` (yours, plus ``Proxy-Authorization`` for a plain-http ``url``, which aiohttp
    sends to the proxy itself). aiohttp drops that header on a redirect to another host, so with
    plain-http targets that redirect across hosts, use :class:`ExitSession` (or
    ``allow_redirects=False``). An explicit ``proxy=`` also makes aiohttp ignore ``HTTP_PROXY``
    and ``NO_PROXY`` even with ``trust_env=True``.

    With a plain-http ``url``, aiohttp keeps the request's headers, ``Proxy-Authorization``
    included, in the response's ``request_info``: ``r.request_info.headers`` holds the proxy's
    base64 credentials, and so does the ``repr`` of a ``ClientResponseError`` from
    ``r.raise_for_status()``, ``raise_for_status=True`` or ``r.json()``. Your own session gives
    exitpool no place to mask them: do not log those, or use :class:`ExitSession`, which
    masks them (``https://`` targets are not affected: there the header goes on the
    ``CONNECT`` only)."""
    proxy, auth = _proxy_parts(_exit_of(lease), _REFUSAL)
    out: Dict[str, Any] = {"proxy": proxy}
    merged: Optional[CIMultiDict] = CIMultiDict(headers) if headers is not None else None
    if auth is not None:
        out["proxy_headers"] = {_AUTH: auth}
        if not _tunnelled(url):
            merged = merged if merged is not None else CIMultiDict()
            merged[_AUTH] = auth
    if merged is not None:
        out["headers"] = merged
    return out


def report(
    lease: Lease,
    response: aiohttp.ClientResponse,
    *,
    captcha: bool = False,
    latency: Optional[float] = None,
) -> None:
    """Record a response on the lease: its status, ``captcha``, ``latency`` (seconds, yours to
    measure: aiohttp's response has no elapsed time) and, on a 429 or 503, its
    ``Retry-After``."""
    kwargs: Dict[str, Any] = {"status": response.status, "captcha": bool(captcha)}
    if latency is not None:
        kwargs["latency"] = latency
    kwargs.update(_retry_after_kwargs(response.status, response.headers))
    lease.report(**kwargs)


def _masked_info(info: Any) -> Any:
    """``info`` (an ``aiohttp.RequestInfo``) with its ``Proxy-Authorization`` value masked, or
    ``info`` itself when it holds none."""
    headers = getattr(info, "headers", None)
    if headers is None or _AUTH not in headers:
        return info
    masked = CIMultiDict(headers)
    masked[_AUTH] = _MASK
    return aiohttp.RequestInfo(info.url, info.method, CIMultiDictProxy(masked), info.real_url)


def _mask_response(response: Any) -> None:
    """Mask the credentials in a response's ``request_info``, and in those of its redirect
    history. aiohttp keeps it in ``_request_info`` behind a cached property (``_cache``); both
    are replaced, so a later ``r.raise_for_status()`` (or ``r.json()``'s ``ContentTypeError``)
    builds its exception from the masked copy."""
    for r in (response, *getattr(response, "_history", ())):
        info = getattr(r, "_request_info", None)
        masked = _masked_info(info)
        if masked is info:
            continue
        r._request_info = masked
        cache = getattr(r, "_cache", None)
        if isinstance(cache, dict):
            cache.pop("request_info", None)


def _mask_error(exc: BaseException) -> None:
    """Mask the credentials in a ``ClientResponseError`` (its ``request_info``, its ``args``
    and its history's responses), in place: it is re-raised as it is, subclass and all."""
    if not isinstance(exc, aiohttp.ClientResponseError):
        return
    masked = _masked_info(exc.request_info)
    if masked is not exc.request_info:
        exc.request_info = masked
        exc.args = tuple(masked if isinstance(a, aiohttp.RequestInfo) else a for a in exc.args)
    for r in exc.history or ():
        _mask_response(r)


async def _plain_http_proxy_auth(req: Any, handler: Any) -> Any:
    # A client middleware runs for every hop, redirects included: it gives each plain-http hop
    # the Proxy-Authorization that aiohttp only puts on CONNECTs (aio-libs/aiohttp#4422). It is
    # the innermost middleware, so it also masks the header in what it hands back (the
    # response's request_info, or the error's, e.g. a ClientHttpProxyError carrying the
    # CONNECT's headers) before any other middleware sees it, and takes it off the request once
    # sent.
    added = False
    if req.proxy is not None and not req.is_ssl() and req.proxy_headers is not None:
        auth = req.proxy_headers.get(_AUTH)
        if auth is not None:
            req.headers[_AUTH] = auth
            added = True
    try:
        response = await handler(req)
        _mask_response(response)
    except aiohttp.ClientResponseError as e:
        _mask_error(e)
        raise
    finally:
        if added:
            req.headers.popall(_AUTH, None)
    return response


def _transport_failure(exc: BaseException) -> bool:
    """Failures the lease itself classifies (timeout, connection, proxy, broken body). An HTTP
    error status raised as ``ClientResponseError`` (``raise_for_status``) is not one: the exit
    delivered a response, whose status is what counts. A proxy's refusal of a tunnel
    (``ClientHttpProxyError``) is."""
    if isinstance(exc, aiohttp.ClientResponseError) and not isinstance(exc, aiohttp.ClientHttpProxyError):
        return False
    # aiohttp-socks raises its own errors, outside aiohttp's ClientError: the outcome table
    # knows them.
    return isinstance(exc, (aiohttp.ClientError, asyncio.TimeoutError)) or _classify(exc) != "other"


def _error_status(exc: aiohttp.ClientResponseError) -> Optional[int]:
    """The HTTP status a ``ClientResponseError`` stands for (``TooManyRedirects`` has none of
    its own: its last response's), or None."""
    status = exc.status
    if not status and exc.history:
        status = exc.history[-1].status
    # 0 is aiohttp's "no status"; any other is an outcome, 999 included (the core's table).
    return status if isinstance(status, int) and status > 0 else None


def _report_error(lease: Lease, exc: aiohttp.ClientResponseError, latency: float) -> None:
    """Record the status (and a 429's or 503's ``Retry-After``) of an HTTP error aiohttp raised
    itself (``raise_for_status=True``), as :func:`report` would for the response."""
    status = _error_status(exc)
    if status is None:
        return  # nothing to go on: the lease classifies the exception
    kwargs: Dict[str, Any] = {"status": status, "latency": latency}
    kwargs.update(_retry_after_kwargs(status, exc.headers))
    lease.report(**kwargs)


def _site(url: URL) -> str:
    return _site_of(url.host, url.port, url.is_default_port())


class _LeasedRequest:
    """One request of an :class:`ExitSession`: ``async with`` it for the response (the lease
    lives until the block ends), or ``await`` it for a response whose body is already read.
    ``lease`` is the lease once the request is under way."""

    def __init__(
        self,
        owner: ExitSession,
        method: str,
        url: URL,
        key: Optional[str],
        site: Optional[str],
        timeout: Optional[float],
        kwargs: Dict[str, Any],
    ) -> None:
        self._owner = owner
        self._method = method
        self._url = url
        self._key = key
        self._site = site
        self._timeout = timeout
        self._kwargs = kwargs
        self.lease: Optional[Lease] = None
        self._response: Optional[aiohttp.ClientResponse] = None
        self._latency = 0.0
        self._socks: Optional[_SocksSession] = None

    def __repr__(self) -> str:
        exit_id = self.lease.exit_id if self.lease is not None else None
        url = self._url.with_query(None)
        if url.is_absolute():
            url = url.with_user(None)
        return f"<exitpool.aiohttp request {self._method} {url} key={self._key!r} exit={exit_id!r}>"

    async def __aenter__(self) -> aiohttp.ClientResponse:
        if self.lease is not None or self._response is not None:
            raise RuntimeError("a request of an ExitSession is sent once")
        owner = self._owner
        session = owner._open()
        lease = owner._pool.lease(self._key, site=self._site, timeout=self._timeout)
        await lease.__aenter__()
        self.lease = lease
        try:
            exit = _exit_of(lease)
            if exit.scheme in _SOCKS_SCHEMES:
                self._socks = await owner._socks_session(exit)
                session = self._socks.session
            kwargs = owner._request_kwargs(lease, self._kwargs)
            started = time.perf_counter()
            try:
                response = await session.request(self._method, self._url, **kwargs)
            except aiohttp.ClientResponseError as e:
                # raise_for_status (the session's or the request's): the exit delivered a
                # response; its status, not the exception, is the outcome.
                _mask_error(e)
                if not _transport_failure(e):
                    _report_error(lease, e, time.perf_counter() - started)
                raise
            self._latency = time.perf_counter() - started
            _mask_response(response)
        except BaseException as e:
            try:
                await lease.__aexit__(type(e), e, e.__traceback__)
            finally:
                await self._done()
            raise
        self._response = response
        return response

    async def _done(self) -> None:
        socks, self._socks = self._socks, None
        if socks is not None:
            await self._owner._socks_done(socks)

    async def __aexit__(self, exc_type: Any, exc: Optional[BaseException], tb: Any) -> None:
        lease, response = self.lease, self._response
        assert lease is not None and response is not None
        hook_error: Optional[BaseException] = None
        if exc is not None:
            _mask_error(exc)
        try:
            if exc is None or not _transport_failure(exc):
                # The exit delivered a response; an error in the caller's own code is not its
                # fault, so the status is what counts.
                captcha = False
                hook = self._owner._captcha
                if hook is not None and exc is None:
                    try:
                        verdict = hook(response)
                        if inspect.isawaitable(verdict):
                            verdict = await verdict
                        captcha = bool(verdict)
                    except Exception as e:  # reported below, after the lease has ended
                        hook_error = e
                report(lease, response, captcha=captcha, latency=self._latency)
        finally:
            response.release()
            try:
                await lease.__aexit__(exc_type, exc, tb)
            finally:
                await self._done()
        if hook_error is not None:
            raise hook_error

    async def _fetch(self) -> aiohttp.ClientResponse:
        async with self as response:
            await response.read()
        return response

    def __await__(self) -> Generator[Any, None, aiohttp.ClientResponse]:
        return self._fetch().__await__()


class ExitSession:
    """A wrapper around an ``aiohttp.ClientSession`` (``http.session``) whose requests lease an
    exit from ``pool``, go through it and report their outcome: ``http.get(url,
    key="account-3f9")``.

    Each request takes ``key`` (the account; ``None`` for a keyless task), ``site`` (default: the
    URL's host, with its port when not the scheme's default; ``None``: unscoped) and ``lease_timeout`` (how long to
    wait for a free exit; default the session's), and otherwise aiohttp's own arguments
    (``headers``, ``params``, ``json``, ``timeout``, ...). The outcome reported is the status,
    the latency until the response headers, ``Retry-After`` on a 429 or 503, and, when a
    ``captcha`` hook is given (a function or coroutine function of the response, called when the
    block ends cleanly; the body can still be read), whether the page was a captcha. A
    connection, proxy or timeout error leaves the block as it is and is recorded by the lease as
    a failure of the exit; any other exception in your block still counts the response's status.
    An HTTP error raised as ``aiohttp.ClientResponseError`` (``r.raise_for_status()`` in the
    block, or ``raise_for_status=True`` for the session or the request, which raises from
    ``async with``/``await``) is recorded as its status, with a 429's or 503's ``Retry-After``,
    and propagates. The ``Proxy-Authorization`` a plain-http request carries is shown as
    ``[secure]`` in every ``request_info`` it hands out (the response's, its history's, and that
    of a ``ClientResponseError`` it raises). Lease refusals (``NoExitAvailable``,
    ``SessionExitLost``, ``Cooling``, ``WarmingUp``) propagate: a sticky account is never moved
    silently.

    ``session_options`` go to ``aiohttp.ClientSession`` (``timeout``, ``headers``,
    ``connector``, ``base_url``, ...). Unless you pass ``cookie_jar``, cookies are not kept: one
    session serves every account, and a shared jar would link them at the site. ``proxy`` and
    ``proxy_auth`` raise ``TypeError``.

    A ``socks5`` / ``socks5h`` exit gets a session of its own (same options, ``trust_env``
    off, an aiohttp-socks connector in place of ``connector``), closed with this one; without
    aiohttp-socks its requests raise ``ImportError`` naming the extra to install
    (``exitpool[aiohttp-socks]``). ``fresh=True`` closes every connection after its request
    (``force_close``), so each lease opens a new tunnel: for gateways that rotate per
    connection.
    """

    def __init__(
        self,
        pool: Pool,
        *,
        captcha: Optional[CaptchaHook] = None,
        lease_timeout: Optional[float] = None,
        fresh: bool = False,
        **session_options: Any,
    ) -> None:
        bad = sorted(k for k in ("proxy", "proxy_auth") if k in session_options)
        if bad:
            raise TypeError(f"ExitSession: {', '.join(bad)} cannot be set: each request leaves by its lease's exit")
        if fresh and "connector" in session_options:
            raise TypeError("ExitSession: fresh=True builds its own connectors (force_close): do not pass connector")
        if captcha is not None and not callable(captcha):
            raise TypeError("ExitSession: captcha must be a function of the response")
        self._pool = pool
        self._captcha = captcha
        self._lease_timeout = lease_timeout
        self._fresh = bool(fresh)
        self._options = dict(session_options)
        self._options.setdefault("cookie_jar", None)
        base_url = self._options.get("base_url")
        self._base_url = URL(base_url) if base_url is not None else None
        self._options["middlewares"] = tuple(self._options.get("middlewares") or ()) + (_plain_http_proxy_auth,)
        self._session: Optional[aiohttp.ClientSession] = None
        # One session per SOCKS exit (by exit id), and the replaced ones still in use.
        self._socks: Dict[str, _SocksSession] = {}
        self._socks_retired: List[_SocksSession] = []
        self._closed = False

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("open" if self._session is not None else "new")
        return f"<exitpool.aiohttp.ExitSession {state}>"

    @property
    def session(self) -> Optional[aiohttp.ClientSession]:
        """The underlying ``aiohttp.ClientSession`` (None until the first request or
        ``async with``)."""
        return self._session

    @property
    def closed(self) -> bool:
        return self._closed

    def _session_options(self) -> Dict[str, Any]:
        options = dict(self._options)
        if options.get("cookie_jar") is None:
            options["cookie_jar"] = aiohttp.DummyCookieJar()
        return options

    def _open(self) -> aiohttp.ClientSession:
        if self._closed:
            raise RuntimeError("this ExitSession is closed")
        if self._session is None:
            options = self._session_options()
            if self._fresh:
                options["connector"] = aiohttp.TCPConnector(force_close=True)
            self._session = aiohttp.ClientSession(**options)
        return self._session

    async def _socks_session(self, exit: Exit) -> _SocksSession:
        """The session of a SOCKS exit, counted in flight until :meth:`_socks_done`. An exit
        whose proxy URL changed (new credentials) gets a new one, so no connection opened with
        the old credentials is reused."""
        if self._closed:
            raise RuntimeError("this ExitSession is closed")
        entry = self._socks.get(exit.exit_id)
        if entry is None or entry.proxy != exit.proxy:
            options = self._session_options()
            for name in ("connector", "connector_owner"):
                options.pop(name, None)
            options["trust_env"] = False  # an HTTP_PROXY must not wrap the SOCKS exit
            options["connector"] = _socks_connector(exit, {"force_close": True} if self._fresh else {})
            new = _SocksSession(exit.proxy, aiohttp.ClientSession(**options))
            old, self._socks[exit.exit_id] = entry, new
            entry = new
            if old is not None:
                old.retired = True
                self._socks_retired.append(old)
                old.inflight += 1  # closed now, or when its last request ends
                await self._socks_done(old)
        entry.inflight += 1
        return entry

    async def _socks_done(self, entry: _SocksSession) -> None:
        entry.inflight -= 1
        if entry.retired and entry.inflight == 0 and entry in self._socks_retired:
            self._socks_retired.remove(entry)
            await entry.session.close()

    def _request_kwargs(self, lease: Lease, kwargs: Dict[str, Any]) -> Dict[str, Any]:
        out = dict(kwargs)
        exit = _exit_of(lease)
        if exit.scheme in _SOCKS_SCHEMES:
            # The exit's own session's connector goes through it: no proxy for aiohttp to add.
            if out.get("middlewares") is not None:
                out["middlewares"] = tuple(out["middlewares"]) + (_plain_http_proxy_auth,)
            return out
        proxy, auth = _proxy_parts(exit, _REFUSAL)
        out["proxy"] = proxy
        if auth is not None:
            out["proxy_headers"] = {_AUTH: auth}
        if out.get("middlewares") is not None:  # per-request middlewares replace the session's
            out["middlewares"] = tuple(out["middlewares"]) + (_plain_http_proxy_auth,)
        return out

    def request(
        self,
        method: str,
        url: Union[str, URL],
        *,
        key: Optional[str] = None,
        site: Optional[str] = _UNSET,
        lease_timeout: Optional[float] = _UNSET,
        **kwargs: Any,
    ) -> _LeasedRequest:
        """Lease an exit for ``key``, send the request through it, report the outcome."""
        bad = sorted(k for k in ("proxy", "proxy_auth", "proxy_headers") if k in kwargs)
        if bad:
            raise TypeError(f"ExitSession: {', '.join(bad)} cannot be set: the request leaves by its lease's exit")
        u = URL(url) if not isinstance(url, URL) else url
        full = self._base_url.join(u) if self._base_url is not None and not u.is_absolute() else u
        if not full.is_absolute():
            raise InvalidInput("ExitSession: a relative URL needs the session's base_url")
        if site is _UNSET:
            site = _site(full)
        timeout = self._lease_timeout if lease_timeout is _UNSET else lease_timeout
        return _LeasedRequest(self, method, u, key, site, timeout, kwargs)

    def get(self, url: Union[str, URL], **kwargs: Any) -> _LeasedRequest:
        return self.request("GET", url, **kwargs)

    def post(self, url: Union[str, URL], **kwargs: Any) -> _LeasedRequest:
        return self.request("POST", url, **kwargs)

    def put(self, url: Union[str, URL], **kwargs: Any) -> _LeasedRequest:
        return self.request("PUT", url, **kwargs)

    def patch(self, url: Union[str, URL], **kwargs: Any) -> _LeasedRequest:
        return self.request("PATCH", url, **kwargs)

    def delete(self, url: Union[str, URL], **kwargs: Any) -> _LeasedRequest:
        return self.request("DELETE", url, **kwargs)

    def head(self, url: Union[str, URL], **kwargs: Any) -> _LeasedRequest:
        kwargs.setdefault("allow_redirects", False)  # as aiohttp's own head()
        return self.request("HEAD", url, **kwargs)

    def options(self, url: Union[str, URL], **kwargs: Any) -> _LeasedRequest:
        return self.request("OPTIONS", url, **kwargs)

    async def close(self) -> None:
        """Close the underlying sessions and their connections."""
        self._closed = True
        session, self._session = self._session, None
        sessions = [session] if session is not None else []
        sessions += [e.session for e in [*self._socks.values(), *self._socks_retired]]
        self._socks, self._socks_retired = {}, []
        errors: List[BaseException] = []
        for s in sessions:
            try:
                await s.close()
            except Exception as e:  # close the others anyway
                errors.append(e)
        if errors:
            raise errors[0]

    async def __aenter__(self) -> ExitSession:
        self._open()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()
