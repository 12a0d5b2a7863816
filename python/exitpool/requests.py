"""requests through a leased exit: a session whose every call leaves by the lease's exit.

Usage::

    from exitpool.requests import session_for, report
    with pool.lease("account-3f9", site="shop.example") as lease, session_for(lease) as s:
        r = s.get("https://shop.example/cart", timeout=20)
        report(lease, r, captcha=lambda r: "captcha" in r.text)

``lease.proxies`` alone is not enough with a ``requests.Session``: an ``HTTP_PROXY`` or
``HTTPS_PROXY`` in the environment beats ``session.proxies`` (requests merges the environment in
first, psf/requests#2018), a per-call ``proxies=`` beats both, and ``NO_PROXY`` decides which of
them apply. :func:`session_for` therefore mounts a transport adapter that ignores whatever proxy
mapping the session worked out and always connects through the exit, so nothing the environment
or a caller sets can send an account's request from another address.

``socks5://`` and ``socks5h://`` exits go through urllib3's SOCKS support, which needs PySocks
(``pip install 'exitpool[requests-socks]'``): with ``socks5`` names are resolved here, with
``socks5h`` at the exit. Each adapter holds one exit's connections (keyed by its proxy URL,
credentials included), so two exits never share a connection; ``fresh=True`` opens new ones
for a lease, for gateways that rotate per connection.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional, Union

import requests
from requests.adapters import HTTPAdapter

from exitpool._clients import _exit_of, _report_response, _require_socks
from exitpool._core import Exit, Lease

__all__ = ["report", "session_for"]

_PREFIXES = ("http://", "https://")


class _ExitAdapter(HTTPAdapter):
    """An ``HTTPAdapter`` bound to one exit: it replaces the proxies every request arrives with
    (the session's, the environment's, the caller's) by the exit's."""

    def __init__(self, exit: Exit, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._exit = exit
        self._options = dict(kwargs)
        # A mapping that answers for every scheme and host, so select_proxy cannot fall through
        # to a direct connection.
        self._proxies = {"http": exit.proxy, "https": exit.proxy, "all": exit.proxy}

    def __repr__(self) -> str:
        return f"<exitpool.requests adapter exit={self._exit.exit_id!r} via {self._exit.masked_proxy}>"

    def _serves(self, exit: Exit, options: Mapping[str, Any]) -> bool:
        return self._exit.exit_id == exit.exit_id and self._exit.proxy == exit.proxy and self._options == options

    def send(  # type: ignore[override]
        self,
        request: requests.PreparedRequest,
        stream: bool = False,
        timeout: Any = None,
        verify: Any = True,
        cert: Any = None,
        proxies: Optional[Mapping[str, str]] = None,
    ) -> requests.Response:
        return super().send(request, stream=stream, timeout=timeout, verify=verify, cert=cert, proxies=self._proxies)


def session_for(
    lease: Union[Lease, Exit],
    session: Optional[requests.Session] = None,
    *,
    fresh: bool = False,
    **adapter_options: Any,
) -> requests.Session:
    """A ``requests.Session`` whose every ``http://`` and ``https://`` call goes through the
    lease's exit, whatever ``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``, ``NO_PROXY``,
    ``session.proxies`` or a per-call ``proxies=`` say.

    Without ``session``, a new session (close it: ``with session_for(lease) as s:``). With one
    (an account's own session, kept across leases for its cookies), that session is pointed at
    the exit and returned: its ``http(s)://`` adapters are replaced by one bound to the exit (the
    replaced ones are closed), and pointing it again at the same exit keeps the adapter and its
    open connections; ``fresh=True`` replaces it all the same, so this lease's requests open new
    connections (a new tunnel: a gateway that rotates per connection gives a new address).
    ``adapter_options`` go to ``requests.adapters.HTTPAdapter`` (``pool_connections``,
    ``pool_maxsize``, ``max_retries``, ``pool_block``).

    A ``socks5`` or ``socks5h`` exit needs PySocks; without it this raises ``ImportError``
    naming the extra to install (``exitpool[requests-socks]``).
    """
    exit = _exit_of(lease)
    _require_socks(exit, "requests", "socks", "PySocks", "requests-socks")
    s = requests.Session() if session is None else session
    current = [a for p, a in s.adapters.items() if p.lower().startswith(_PREFIXES)]
    if (
        not fresh
        and len(current) == len(_PREFIXES)
        and all(a is current[0] for a in current)
        and isinstance(current[0], _ExitAdapter)
        and current[0]._serves(exit, adapter_options)
    ):
        return s
    adapter = _ExitAdapter(exit, **adapter_options)
    for prefix in [p for p in s.adapters if p.lower().startswith(_PREFIXES)]:
        old = s.adapters.pop(prefix)
        if all(old is not a for a in s.adapters.values()):
            old.close()
    for prefix in _PREFIXES:
        s.mount(prefix, adapter)
    return s


def report(
    lease: Lease,
    outcome: Union[requests.Response, BaseException],
    *,
    captcha: Union[bool, Callable[[requests.Response], bool]] = False,
) -> None:
    """Record a request's outcome on the lease: a response's status, its latency
    (``r.elapsed``: until the headers arrived) and, on a 429 or 503, its ``Retry-After``; or an
    exception caught inside the block (classified as timeout, connection or other).

    ``captcha`` is a flag or a function of the response (say ``lambda r: "captcha" in r.text``).
    An exception that leaves the ``with pool.lease(...)`` block needs no call: the lease
    classifies it."""
    _report_response(lease, outcome, captcha)
