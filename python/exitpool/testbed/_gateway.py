"""The testbed's provider gateway (:class:`ProviderGateway`): one loopback host:port that mints
sticky sessions from a token in the proxy credentials, as residential providers do.

Its own module because it is a concept of its own: the proxy speaks HTTP (``_proxy``); this part
is only the provider's session table (token -> exit address, held for a lifetime) and the
gateway's own failures (407, "no exit available", broken stickiness).
"""

from __future__ import annotations

import base64
import binascii
import math
import re
import secrets
import time
from typing import Any, Callable, Dict, List, Optional, Pattern, Sequence, Tuple

from .._core import Gateway
from ._proxy import Proxy, _proxy_auth_required, _Reject
from ._server import _check_loopback

# Every placeholder the gateway's templates may hold: ``{user}`` and ``{password}`` are the
# account's own, ``{session}`` the token; any other (``{country}``, ``{lifetime}``) is taken as
# given, as a provider takes targeting parameters.
_PLACEHOLDER = re.compile(r"\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_]*)\}")
_SESSION = r"(?P<session>[A-Za-z0-9_]{1,255})"
_ANY = r"[A-Za-z0-9_.]+?"


def _default_addresses(n: int) -> List[str]:
    """``127.0.2.1``, ``127.0.2.2``, ...: apart from the proxies' ``127.0.1.x``."""
    return [f"127.0.{2 + i // 250}.{1 + i % 250}" for i in range(n)]


def _pattern(template: str, user: str, password: str, what: str) -> Pattern[str]:
    """A template as the gateway reads it: ``{user}`` / ``{password}`` literal, ``{session}``
    captured, any other placeholder a parameter value."""
    out: List[str] = []
    pos = 0
    sessions = 0
    for m in _PLACEHOLDER.finditer(template):
        out.append(re.escape(template[pos : m.start()]))
        pos = m.end()
        token, name = m.group(0), m.group(1)
        if token in ("{{", "}}"):
            out.append(re.escape(token[0]))
        elif name == "user":
            out.append(re.escape(user))
        elif name == "password":
            out.append(re.escape(password))
        elif name == "session":
            sessions += 1
            out.append(_SESSION)
        else:
            out.append(_ANY)
    out.append(re.escape(template[pos:]))
    if sessions > 1:
        raise ValueError(f"{what} template names {{session}} {sessions} times")
    return re.compile("".join(out))


class ProviderGateway(Proxy):
    """A provider's sticky-session gateway on loopback: one ``host:port`` (HTTP ``CONNECT``
    and plain-HTTP forwarding, like :class:`Proxy`) whose every session token gets an exit of
    its own.

    A request's ``Proxy-Authorization`` is read with the templates ``username`` (default
    ``{user}-session-{session}``) and ``password`` (default ``{password}``), as an
    :class:`exitpool.Gateway` fills them: ``{user}`` and ``{password}`` must be the gateway's
    own, anything else is a 407. The first request with a token picks it a source address from
    ``addresses`` (default ``127.0.2.1``, ``127.0.2.2``, ...: not held by another live session)
    and holds it for ``lifetime`` seconds from that first use (``None``: for ever); after that
    the token's next request gets another address, as a provider's expired session does.
    When every address is held, the answer is 502 "no exit available".

    Controls, callable from any thread: :meth:`kill` / :meth:`revive` (refuse connections),
    :meth:`blackhole` (drop connection attempts unanswered: clients' connects time out),
    :meth:`unavailable` (answer 502 "no exit available" to every request),
    :meth:`break_sticky` (move a live token to another address before its lifetime ends),
    :meth:`expire` (end a token's session, or every one, now), :meth:`slow`, :meth:`flaky`.
    Views: :meth:`ip_of` (a token's address), :meth:`sessions`, ``auth_failures``,
    ``refusals`` (502s answered). :meth:`gateway` gives the :class:`exitpool.Gateway` for it.
    ``clock`` (default ``time.monotonic``) measures the lifetimes.
    """

    def __init__(
        self,
        name: str = "gateway",
        *,
        user: str = "customer",
        password: Optional[str] = None,
        username: str = "{user}-session-{session}",
        password_template: str = "{password}",
        lifetime: Optional[float] = 600.0,
        addresses: Optional[Sequence[str]] = None,
        n_addresses: int = 250,
        clock: Callable[[], float] = time.monotonic,
        host: str = "127.0.0.1",
        timeout: float = 30.0,
        idle_timeout: float = 30.0,
        tunnel_ttl: float = 300.0,
    ) -> None:
        if addresses is None:
            if not isinstance(n_addresses, int) or not 1 <= n_addresses <= 64_000:
                raise ValueError(f"n_addresses {n_addresses!r}: need 1 to 64000 source addresses")
            addresses = _default_addresses(n_addresses)
        addresses = [_check_loopback(ip, "address") for ip in addresses]
        if not addresses or len(set(addresses)) != len(addresses):
            raise ValueError("addresses must be one or more distinct 127.x addresses")
        if lifetime is not None:
            lifetime = float(lifetime)
            if not math.isfinite(lifetime) or lifetime <= 0:
                raise ValueError(f"lifetime {lifetime!r}: need a finite number of seconds > 0, or None")
        password = password if password is not None else secrets.token_hex(8)
        super().__init__(
            name,
            source_ip=addresses[0],
            user=user,
            password=password,
            host=host,
            timeout=timeout,
            idle_timeout=idle_timeout,
            tunnel_ttl=tunnel_ttl,
        )
        self.username_template = username
        self.password_template = password_template
        self._user_re = _pattern(username, user, password, "username")
        self._password_re = _pattern(password_template, user, password, "password")
        if "session" not in self._user_re.groupindex and "session" not in self._password_re.groupindex:
            raise ValueError("a provider gateway reads its session token from {session} in the username or password template")
        self.lifetime = lifetime
        self.addresses: Tuple[str, ...] = tuple(addresses)
        self._clock = clock
        self._next = 0
        # token -> (address, when the session ends or None). Bounded: a session lives only
        # while it holds one of `addresses`, and expired ones are dropped before a new one.
        self._sessions: Dict[str, Tuple[str, Optional[float]]] = {}
        self._unavailable = False
        self.refusals = 0

    def __repr__(self) -> str:
        state = "killed" if self._killed else ("unavailable" if self._unavailable else "up")
        return f"<ProviderGateway {self.name} 127.0.0.1:{self.port} {len(self._sessions)} sessions {state}>"

    def gateway(self, gateway_id: Optional[str] = None, *, slots: int, **options: Any) -> Gateway:
        """An :class:`exitpool.Gateway` of ``slots`` slots over this gateway: its URL and
        templates, and its lifetime unless ``lifetime=`` says otherwise (given to the pool, a
        slot's token then rotates before this gateway ends its session)."""
        options.setdefault("username", self.username_template)
        options.setdefault("password", self.password_template)
        options.setdefault("lifetime", self.lifetime)
        return Gateway(gateway_id or self.name, self.url, slots=slots, **options)

    # -- controls
    def unavailable(self, on: bool = True) -> None:
        """Answer every request with 502 "no exit available" (a provider out of exits for the
        targeting asked), until ``unavailable(False)``."""
        self._unavailable = bool(on)

    def break_sticky(self, token: str) -> str:
        """Move a live session to another address before its lifetime ends (the provider's
        device went offline); returns the new address. Its end stays where it was."""
        return self._call(lambda: self._move(token))

    def expire(self, token: Optional[str] = None) -> None:
        """End the session of ``token`` (every session if None) now: its next request gets
        another address, as after its lifetime."""

        def run() -> None:
            if token is None:
                self._sessions.clear()
            else:
                self._sessions.pop(token, None)

        self._call(run)

    def ip_of(self, token: str) -> Optional[str]:
        """The address a live session leaves from, or None."""
        live = self._live(token, self._clock())
        return live[0] if live is not None else None

    def sessions(self) -> Dict[str, str]:
        """Every live session: token -> address."""
        now = self._clock()
        return {t: ip for t, (ip, end) in list(self._sessions.items()) if end is None or end > now}

    def stats(self) -> Dict[str, Any]:
        out = super().stats()
        out.update(sessions=len(self.sessions()), unavailable=self._unavailable, refusals=self.refusals)
        return out

    # -- the provider's side
    def _admit(self, authorization: str) -> str:
        token = self._token(authorization)
        if token is None:
            self.auth_failures += 1
            raise _proxy_auth_required()
        if self._unavailable:
            raise self._no_exit()
        now = self._clock()
        live = self._live(token, now)
        if live is not None:
            return live[0]
        address = self._free_address(now, avoid=None)
        self._sessions[token] = (address, None if self.lifetime is None else now + self.lifetime)
        return address

    def _token(self, authorization: str) -> Optional[str]:
        """The session token in a ``Basic`` Proxy-Authorization, or None if the credentials are
        not this gateway's."""
        scheme, _, value = authorization.strip().partition(" ")
        if scheme.lower() != "basic":
            return None
        try:
            user, sep, password = base64.b64decode(value.strip(), validate=True).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None
        u = self._user_re.fullmatch(user)
        p = self._password_re.fullmatch(password)
        if not sep or u is None or p is None:
            return None
        return u.groupdict().get("session") or p.groupdict().get("session") or ""

    def _live(self, token: str, now: float) -> Optional[Tuple[str, Optional[float]]]:
        s = self._sessions.get(token)
        if s is None or (s[1] is not None and s[1] <= now):
            return None
        return s

    def _no_exit(self) -> _Reject:
        self.refusals += 1
        return _Reject(502, "Bad Gateway", "no exit available")

    def _free_address(self, now: float, avoid: Optional[str]) -> str:
        """The next address no live session holds (round robin), dropping expired sessions."""
        for t in [t for t in self._sessions if self._live(t, now) is None]:
            del self._sessions[t]
        held = {ip for ip, _ in self._sessions.values()}
        n = len(self.addresses)
        for i in range(n):
            ip = self.addresses[(self._next + i) % n]
            if ip not in held and ip != avoid:
                self._next = (self._next + i + 1) % n
                return ip
        raise self._no_exit()

    def _move(self, token: str) -> str:
        now = self._clock()
        live = self._live(token, now)
        if live is None:
            raise KeyError(f"no live session for that token on {self.name}")
        try:
            address = self._free_address(now, avoid=live[0])
        except _Reject:
            raise ValueError(f"{self.name}: every address is held, nowhere to move the session") from None
        self._sessions[token] = (address, live[1])
        return address
