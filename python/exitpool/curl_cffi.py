"""curl_cffi through a leased exit: a ``Session`` (or ``AsyncSession``) whose every call leaves by
the lease's exit, with the browser impersonation curl_cffi is used for.

Usage::

    from exitpool.curl_cffi import session_for, report
    with pool.lease("account-3f9", site="shop.example") as lease, \\
            session_for(lease, impersonate="chrome") as s:
        r = s.get("https://shop.example/cart", timeout=20)
        report(lease, r, captcha=lambda r: "captcha" in r.text)

and ``async with async_session_for(lease, impersonate="chrome") as s:`` with
``await s.get(...)``.

Every scheme an exit may have works (``http``, ``https``, ``socks5``, ``socks5h``: libcurl
speaks them all, the SOCKS5 password included; ``socks5h`` resolves names at the exit).

Why more than ``Session(proxy=exit.proxy)``: a per-call ``proxy=`` or ``proxies=`` replaces the
session's, ``NO_PROXY`` in the environment makes libcurl skip an explicit proxy, and a session's
connection cache outlives a change of proxy (curl_cffi issues 294, 308 and 629: a session kept
using a connection to the previous proxy). :func:`session_for` therefore pins the exit in the
session's ``curl_options`` (applied after every per-call option), turns ``NO_PROXY`` off, keeps
libcurl from reusing a connection made with other proxy credentials, and drops the session's
open connections when it is pointed at another exit. Connections are reused per exit identity
(its URL, credentials included), never across exits. ``fresh=True`` drops them for a new lease
on the same exit too: a gateway that rotates per connection then gives each lease a new tunnel
(and the lease keeps that tunnel for its requests).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, TypeVar, Union

try:
    from curl_cffi import CurlOpt
    from curl_cffi.requests import AsyncSession, Session
except ImportError as _e:  # pragma: no cover - exercised only without the extra
    raise ImportError("exitpool.curl_cffi needs curl_cffi: pip install 'exitpool[curl_cffi]'") from _e

from exitpool._clients import _exit_of, _report_response
from exitpool._core import Exit, Lease

__all__ = ["async_session_for", "report", "session_for"]

S = TypeVar("S", Session, AsyncSession)
# Where a session keeps the identity of the exit it is bound to.
_BOUND = "_exitpool_exit"


def _pinned_options(exit: Exit) -> Dict[Any, Any]:
    """The curl options that hold a session to the exit, whatever a call or the environment
    says: curl_cffi applies ``curl_options`` after every other option of a request."""
    options: Dict[Any, Any] = {
        CurlOpt.PROXY: exit._proxy_without_credentials,
        # libcurl honours NO_PROXY even for an explicit proxy: an empty list turns it off.
        CurlOpt.NOPROXY: "",
        # A connection made with other proxy credentials is never reused (same host:port,
        # another account or session token).
        CurlOpt.PROXY_CREDENTIAL_NO_REUSE: 1,
    }
    if exit.username is not None or exit.password is not None:
        # Raw bytes, as libcurl sends them: after a per-call proxy_auth, so it cannot win.
        options[CurlOpt.PROXYUSERNAME] = (exit.username or "").encode()
        options[CurlOpt.PROXYPASSWORD] = (exit.password or "").encode()
    return options


def _identity(exit: Exit) -> tuple:
    return (exit.exit_id, exit.proxy)


def _bind(session: S, exit: Exit, fresh: bool) -> bool:
    """Point ``session`` at ``exit``; True when its open connections must be dropped (it was
    bound to another exit, or to none, or ``fresh`` asks for a new tunnel)."""
    previous = getattr(session, _BOUND, None)
    drop = fresh or previous != _identity(exit)
    session.proxies = {"all": exit.proxy}
    session.proxy_auth = None
    pinned = _pinned_options(exit)
    kept: Dict[Any, Any] = {k: v for k, v in session.curl_options.items() if k not in (CurlOpt.PROXYUSERNAME, CurlOpt.PROXYPASSWORD)}
    session.curl_options = {**kept, **pinned}
    setattr(session, _BOUND, _identity(exit))
    return drop


def _drop_connections(session: Session) -> None:
    """Close the calling thread's curl handle (its connection cache with it); the session makes
    a new one for its next request. Cookies live in ``session.cookies``, not in the handle."""
    if getattr(session, "_use_thread_local_curl", True):
        local = getattr(session, "_local", None)
        curl = getattr(local, "curl", None)
        if curl is not None:
            curl.close()
            local.curl = None  # type: ignore[union-attr]
    else:
        from curl_cffi import Curl

        session._curl.close()
        session._curl = Curl(debug=session.debug)
        session._attach_share(session._curl)


def _drop_async_connections(session: AsyncSession) -> None:
    """Forget the session's multi handle (which holds the connection cache of every pooled
    easy handle) and close it on the loop; the session makes a new one for its next request.
    Call between requests, not while one of the session's requests is running."""
    acurl = getattr(session, "_acurl", None)
    if acurl is None or not getattr(session, "_owns_acurl", True):
        return
    session._acurl = None
    pooled: List[None] = []
    while not session.pool.empty():
        curl = session.pool.get_nowait()
        if curl is not None:
            curl.close()
        pooled.append(None)
    for item in pooled:
        session.push_curl(item)
    session.loop.create_task(acurl.close())


def _point(lease: Union[Lease, Exit], session: Any, cls: Any, fresh: bool, options: Dict[str, Any], drop: Callable[[Any], None]) -> Any:
    """A new ``cls(**options)``, or ``session``, pointed at the lease's exit; ``drop`` closes
    its connections when they belong to another exit (or ``fresh`` asks)."""
    exit = _exit_of(lease)
    if session is None:
        session = cls(**options)
    elif options:
        raise TypeError(f"session options {sorted(options)} are for a new session; set them on the one you pass")
    if _bind(session, exit, fresh):
        drop(session)
    return session


def session_for(
    lease: Union[Lease, Exit],
    session: Optional[Session] = None,
    *,
    fresh: bool = False,
    **session_options: Any,
) -> Session:
    """A ``curl_cffi.requests.Session`` whose every call goes through the lease's exit,
    whatever ``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``, ``NO_PROXY``, the session's
    ``proxies`` or a per-call ``proxy=`` / ``proxies=`` / ``proxy_auth=`` say.

    Without ``session``, a new ``Session(**session_options)`` (``impersonate="chrome"``,
    ``timeout``, ``headers``...; close it: ``with session_for(lease) as s:``). With one (an
    account's own session, kept across leases for its cookies), that session is pointed at the
    exit and returned; ``session_options`` must then be empty. Pointing it again at the same
    exit keeps its open connections, unless ``fresh=True``; pointing it at another exit closes
    them (in the calling thread: rebind a session in the thread that uses it).
    """
    return _point(lease, session, Session, fresh, session_options, _drop_connections)


def async_session_for(
    lease: Union[Lease, Exit],
    session: Optional[AsyncSession] = None,
    *,
    fresh: bool = False,
    **session_options: Any,
) -> AsyncSession:
    """:func:`session_for` for ``curl_cffi.requests.AsyncSession``: ``async with
    async_session_for(lease, impersonate="chrome") as s: r = await s.get(url)``. Call it from
    the event loop the session runs on. Rebinding a session to another exit (or ``fresh=True``)
    closes its connections: do it between requests, not while one is running."""
    return _point(lease, session, AsyncSession, fresh, session_options, _drop_async_connections)


def report(
    lease: Lease,
    outcome: Any,
    *,
    captcha: Union[bool, Callable[[Any], bool]] = False,
) -> None:
    """Record a request's outcome on the lease: a response's status, its latency (``r.elapsed``)
    and, on a 429 or 503, its ``Retry-After``; or an exception caught inside the block (curl_cffi's
    errors are classified as timeout, connection or other).

    ``captcha`` is a flag or a function of the response (say ``lambda r: "captcha" in r.text``).
    An exception that leaves the ``with pool.lease(...)`` block needs no call: the lease
    classifies it."""
    _report_response(lease, outcome, captcha)
