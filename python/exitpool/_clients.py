"""What the client helpers (requests, httpx, aiohttp) and the probes share."""

from __future__ import annotations

import base64
import email.utils
import importlib
import math
from datetime import datetime, timezone
from typing import Any, Dict, Iterable, Mapping, Optional, Tuple, Union

from . import _core
from ._core import Exit, Lease
from ._errors import InvalidInput

# The proxy schemes aiohttp can speak to.
_HTTP_SCHEMES = ("http", "https")
# SOCKS proxy schemes: each client speaks them through its ecosystem's SOCKS package, an extra.
_SOCKS_SCHEMES = ("socks5", "socks5h")
# The statuses whose ``Retry-After`` the client helpers pass on to ``lease.report`` (the core
# uses it to cool a rate-limited exit).
_RETRY_AFTER_STATUSES = (429, 503)


def _exit_of(lease: Union[Lease, Exit]) -> Exit:
    """The exit a client helper was handed, given a lease or the exit itself."""
    exit = getattr(lease, "exit", lease)
    if not isinstance(exit, Exit):
        raise TypeError(f"expected an exitpool Lease or Exit, got {type(lease).__name__}")
    return exit


def _proxy_parts(exit: Exit, refusal: str) -> Tuple[str, Optional[str]]:
    """The proxy URL without credentials, and the ``Proxy-Authorization`` value (or None).
    A socks exit raises ``InvalidInput``: ``refusal`` (formatted with ``exit_id`` and
    ``scheme``) says who cannot use it and what to do instead."""
    if exit.scheme not in _HTTP_SCHEMES:
        raise InvalidInput(refusal.format(exit_id=repr(exit.exit_id), scheme=exit.scheme))
    url = exit._proxy_without_credentials
    user, password = exit.username, exit.password
    if user is None and password is None:
        return url, None
    token = base64.b64encode(f"{user or ''}:{password or ''}".encode()).decode("ascii")
    return url, f"Basic {token}"


def _require_socks(exit: Exit, client: str, module: str, package: str, extra: str) -> None:
    """For a SOCKS exit, import ``module`` (the client's SOCKS package) or raise ImportError
    naming the exitpool extra that installs it: at the moment the exit is handed over, not
    inside the client's first request, where its own message would not say what to install."""
    if exit.scheme not in _SOCKS_SCHEMES:
        return
    try:
        importlib.import_module(module)
    except ImportError:
        raise ImportError(
            f"exitpool.{client}: exit {exit.exit_id!r} is a {exit.scheme} proxy, which {client} speaks through "
            f"{package}: pip install 'exitpool[{extra}]'"
        ) from None


def _site(host: Optional[str], port: Optional[int], default_port: bool) -> str:
    """The site a request is for, as its Host header names it (health is scoped to it): the
    host in lower case, an IPv6 one bracketed, and its port unless it is the scheme's own."""
    host = (host or "").lower()
    if ":" in host:
        host = f"[{host}]"
    return host if port is None or default_port else f"{host}:{port}"


def _scrub(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every secret in it masked: the core's rule (``mask::scrub``), which the
    Redis store's messages follow too."""
    return _core._scrub(text, list(secrets))


def _retry_after(value: Optional[str]) -> Optional[float]:
    """Seconds from a ``Retry-After`` header (delta-seconds or an HTTP date), or None."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None:
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        seconds = (when - datetime.now(timezone.utc)).total_seconds()
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)


def _retry_after_kwargs(status: int, headers: Optional[Mapping[str, str]]) -> Dict[str, Any]:
    """``{"retry_after": seconds}`` for ``lease.report`` when a 429 or 503 carries a readable
    ``Retry-After`` header, else nothing: one rule for every client helper."""
    if status not in _RETRY_AFTER_STATUSES or headers is None:
        return {}
    retry_after = _retry_after(headers.get("Retry-After"))
    return {} if retry_after is None else {"retry_after": retry_after}


def _report_response(lease: Lease, outcome: Any, captcha: Any) -> None:
    """``report(lease, outcome, captcha=...)`` for a requests-shaped response (``status_code``,
    ``headers``, ``elapsed`` as a timedelta) or a caught exception: one rule for the clients
    whose responses look like requests' (curl_cffi)."""
    if isinstance(outcome, BaseException):
        lease.report(error=outcome)
        return
    is_captcha = bool(captcha(outcome)) if callable(captcha) else bool(captcha)
    kwargs: Dict[str, Any] = {"status": outcome.status_code, "captcha": is_captcha}
    elapsed = getattr(outcome, "elapsed", None)
    if elapsed is not None:
        kwargs["latency"] = max(0.0, elapsed.total_seconds())
    kwargs.update(_retry_after_kwargs(outcome.status_code, outcome.headers))
    lease.report(**kwargs)
