"""The guarded target site (:class:`Site`): rate limits, bans, captchas, account challenges
and site-wide incidents, with counters of everything it saw. The rules, in the order a request
meets them, are in the ``exitpool.testbed`` docstring.

Its own module because it is the largest part of the testbed and the one whose rules tests
assert against.
"""

from __future__ import annotations

import collections
import math
import random
import time
from typing import Any, Deque, Dict, List, Optional, Set, Tuple

from aiohttp import web

from ._app import _AppServer, _client_ip

_CAPTCHA_PAGE = """<!doctype html>
<html><head><title>Are you a robot?</title></head>
<body><div id="captcha" class="g-recaptcha">Please solve this captcha to continue.</div></body></html>
"""

_CHALLENGE_PAGE = """<!doctype html>
<html><head><title>Security check</title></head>
<body><h1>Please verify your identity</h1>
<p>We noticed a sign-in to {account} from a new location ({ip}).</p></body></html>
"""

_PAGE = """<!doctype html>
<html><head><title>{path}</title></head>
<body><h1>{path}</h1><p>{greeting}</p><ul>{items}</ul></body></html>
"""


class Site(_AppServer):
    """A target that guards itself like a real platform; see the ``exitpool.testbed``
    docstring for the rules. Every control and counter is safe to call from any thread.

    ``rate``: requests per second per client IP (token bucket, ``burst`` deep, default
    ``max(1, rate)``); ``ban_after`` 429s within ``ban_window`` seconds ban the IP (``ban_ttl`` None:
    for good); ``captcha_rate``: the share of requests from unflagged IPs that get a captcha
    (``seed`` makes the draws reproducible).
    """

    def __init__(
        self,
        name: str = "site",
        *,
        host: str = "127.0.0.1",
        rate: float = 10.0,
        burst: Optional[float] = None,
        ban_after: int = 10,
        ban_window: float = 10.0,
        ban_ttl: Optional[float] = None,
        captcha_rate: float = 0.0,
        seed: Optional[int] = None,
    ) -> None:
        super().__init__(host)
        self.name = name
        self._rng = random.Random(seed)
        self._incident: Optional[int] = None
        self._banned: Dict[str, Optional[float]] = {}  # ip -> until (None: for good)
        self._flagged: Set[str] = set()
        self._buckets: Dict[str, Tuple[float, float]] = {}  # ip -> (tokens, at)
        self._strikes: Dict[str, Deque[float]] = {}
        self._accounts: Dict[str, List[str]] = {}  # account -> distinct IPs, first seen first
        self._last_ip: Dict[str, str] = {}
        self._teleports: collections.Counter = collections.Counter()
        self._challenges: collections.Counter = collections.Counter()
        self._by_ip: Dict[str, collections.Counter] = {}
        self._statuses_by_ip: Dict[str, collections.Counter] = {}
        self.rate = self.burst = 0.0
        self.ban_after = 0
        self.ban_window = 0.0
        self.ban_ttl: Optional[float] = None
        self.captcha_rate = 0.0
        self.configure(
            rate=rate,
            burst=burst,
            ban_after=ban_after,
            ban_window=ban_window,
            ban_ttl=ban_ttl,
            captcha_rate=captcha_rate,
        )

    def __repr__(self) -> str:
        return f"<Site {self.name} {self.url}>"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def host_port(self) -> str:
        """``127.0.0.1:port``, a natural ``site=`` for a pool."""
        return f"{self.host}:{self.port}"

    # -- configuration and controls
    _UNSET: Any = object()

    def configure(
        self,
        *,
        rate: Any = _UNSET,
        burst: Any = _UNSET,
        ban_after: Any = _UNSET,
        ban_window: Any = _UNSET,
        ban_ttl: Any = _UNSET,
        captcha_rate: Any = _UNSET,
    ) -> None:
        """Change the rules at run time (only the arguments given)."""
        u = Site._UNSET
        with self._lock:
            if rate is not u:
                if not (isinstance(rate, (int, float)) and math.isfinite(rate) and rate > 0):
                    raise ValueError(f"rate {rate!r}: need requests per second > 0")
                self.rate = float(rate)
                if burst is u and self.burst < 1:
                    burst = None
            if burst is not u:
                b = max(1.0, self.rate) if burst is None else burst
                if not (isinstance(b, (int, float)) and math.isfinite(b) and b >= 1):
                    raise ValueError(f"burst {burst!r}: need at least 1")
                self.burst = float(b)
            if ban_after is not u:
                if not (isinstance(ban_after, int) and ban_after >= 1):
                    raise ValueError(f"ban_after {ban_after!r}: need an int >= 1")
                self.ban_after = ban_after
            if ban_window is not u:
                if not (isinstance(ban_window, (int, float)) and math.isfinite(ban_window) and ban_window > 0):
                    raise ValueError(f"ban_window {ban_window!r}: need seconds > 0")
                self.ban_window = float(ban_window)
            if ban_ttl is not u:
                if ban_ttl is not None and not (isinstance(ban_ttl, (int, float)) and ban_ttl > 0):
                    raise ValueError(f"ban_ttl {ban_ttl!r}: need seconds > 0 or None")
                self.ban_ttl = None if ban_ttl is None else float(ban_ttl)
            if captcha_rate is not u:
                if not (isinstance(captcha_rate, (int, float)) and 0.0 <= captcha_rate <= 1.0):
                    raise ValueError(f"captcha_rate {captcha_rate!r}: need a share in [0, 1]")
                self.captcha_rate = float(captcha_rate)

    def incident(self, on: bool = True, *, status: int = 503) -> None:
        """A site-wide incident: every guarded request gets ``status`` (503), whatever its IP."""
        with self._lock:
            self._incident = status if on else None

    @property
    def in_incident(self) -> bool:
        return self._incident is not None

    def tokens(self, ip: str) -> float:
        """The requests ``ip`` may send now before a 429 (its bucket; ``burst`` for an IP not
        seen yet): the world's truth, for an oracle."""
        now = time.monotonic()
        with self._lock:
            tokens, at = self._buckets.get(ip, (self.burst, now))
            return min(self.burst, tokens + (now - at) * self.rate)

    def ban(self, ip: str, seconds: Optional[float] = None) -> None:
        """Ban ``ip`` (403) for ``seconds`` or for good."""
        with self._lock:
            self._banned[ip] = None if seconds is None else time.monotonic() + seconds

    def unban(self, ip: str) -> None:
        with self._lock:
            self._banned.pop(ip, None)
            self._strikes.pop(ip, None)

    def is_banned(self, ip: str) -> bool:
        with self._lock:
            return self._is_banned(ip, time.monotonic())

    def flag(self, ip: str) -> None:
        """Give ``ip`` a poor reputation: every guarded request from it gets a captcha."""
        with self._lock:
            self._flagged.add(ip)

    def unflag(self, ip: str) -> None:
        with self._lock:
            self._flagged.discard(ip)

    # -- what it saw
    def account_ips(self, account: str) -> List[str]:
        """The distinct IPs ``account`` was seen from, in order of first appearance."""
        with self._lock:
            return list(self._accounts.get(account, ()))

    def teleports(self, account: Optional[str] = None) -> int:
        """How often consecutive requests of ``account`` (of all accounts) changed IP."""
        with self._lock:
            return self._teleports[account] if account is not None else sum(self._teleports.values())

    def challenges(self, account: Optional[str] = None) -> int:
        with self._lock:
            return self._challenges[account] if account is not None else sum(self._challenges.values())

    def accounts(self) -> Dict[str, List[str]]:
        with self._lock:
            return {a: list(ips) for a, ips in self._accounts.items()}

    def requests(self, ip: Optional[str] = None) -> int:
        """Guarded requests seen (from ``ip``); ``/ip`` is not counted."""
        with self._lock:
            if ip is not None:
                return sum(self._by_ip.get(ip, {}).values())
            return sum(sum(c.values()) for c in self._by_ip.values())

    def outcomes(self, ip: Optional[str] = None) -> Dict[str, int]:
        """Counts by verdict: ``ok``, ``captcha``, ``challenge``, ``rate_limited``,
        ``banned``, ``incident``."""
        with self._lock:
            return dict(self._sum(self._by_ip, ip))

    def statuses(self, ip: Optional[str] = None) -> Dict[int, int]:
        with self._lock:
            return dict(self._sum(self._statuses_by_ip, ip))

    def ips(self) -> List[str]:
        """Every client IP it has seen a guarded request from."""
        with self._lock:
            return sorted(self._by_ip)

    def stats(self) -> Dict[str, Any]:
        """Everything above as plain data."""
        with self._lock:
            now = time.monotonic()
            return {
                "requests": sum(sum(c.values()) for c in self._by_ip.values()),
                "outcomes": dict(self._sum(self._by_ip, None)),
                "statuses": dict(self._sum(self._statuses_by_ip, None)),
                "by_ip": {ip: {"outcomes": dict(c), "statuses": dict(self._statuses_by_ip.get(ip, {}))} for ip, c in self._by_ip.items()},
                "banned": sorted(ip for ip in self._banned if self._is_banned(ip, now)),
                "flagged": sorted(self._flagged),
                "incident": self._incident is not None,
                "accounts": {a: list(ips) for a, ips in self._accounts.items()},
                "teleports": dict(self._teleports),
                "challenges": dict(self._challenges),
            }

    def reset_counters(self) -> None:
        """Forget the counters (not bans, flags or account histories)."""
        with self._lock:
            self._by_ip.clear()
            self._statuses_by_ip.clear()

    @staticmethod
    def _sum(table: Dict[str, collections.Counter], ip: Optional[str]) -> collections.Counter:
        if ip is not None:
            return collections.Counter(table.get(ip, {}))
        total: collections.Counter = collections.Counter()
        for c in table.values():
            total.update(c)
        return total

    # -- the rules
    def _is_banned(self, ip: str, now: float) -> bool:
        if ip not in self._banned:
            return False
        until = self._banned[ip]
        if until is not None and now >= until:
            del self._banned[ip]
            return False
        return True

    def _take_token(self, ip: str, now: float) -> Optional[float]:
        """None if the request fits the rate, else the seconds until it would."""
        tokens, at = self._buckets.get(ip, (self.burst, now))
        tokens = min(self.burst, tokens + (now - at) * self.rate)
        if tokens >= 1.0:
            self._buckets[ip] = (tokens - 1.0, now)
            return None
        self._buckets[ip] = (tokens, now)
        return (1.0 - tokens) / self.rate

    def _strike(self, ip: str, now: float) -> None:
        strikes = self._strikes.setdefault(ip, collections.deque(maxlen=max(1, self.ban_after)))
        strikes.append(now)
        while strikes and now - strikes[0] > self.ban_window:
            strikes.popleft()
        if len(strikes) >= self.ban_after:
            self._banned[ip] = None if self.ban_ttl is None else now + self.ban_ttl
            strikes.clear()

    def _decide(self, ip: str, account: Optional[str]) -> Tuple[str, int, Dict[str, str]]:
        now = time.monotonic()
        with self._lock:
            if self._incident is not None:
                return "incident", self._incident, {"Retry-After": "5"}
            if self._is_banned(ip, now):
                return "banned", 403, {}
            wait = self._take_token(ip, now)
            if wait is not None:
                self._strike(ip, now)
                return "rate_limited", 429, {"Retry-After": str(max(1, math.ceil(wait)))}
            if account:
                ips = self._accounts.setdefault(account, [])
                last = self._last_ip.get(account)
                self._last_ip[account] = ip
                if last is not None and last != ip:
                    self._teleports[account] += 1
                if ip not in ips:
                    ips.append(ip)
                    if last is not None:
                        self._challenges[account] += 1
                        return "challenge", 200, {"X-Challenge": "verify"}
            if ip in self._flagged or (self.captcha_rate > 0 and self._rng.random() < self.captcha_rate):
                return "captcha", 200, {"X-Captcha": "1"}
            return "ok", 200, {}

    def _count(self, ip: str, verdict: str, status: int) -> None:
        with self._lock:
            self._by_ip.setdefault(ip, collections.Counter())[verdict] += 1
            self._statuses_by_ip.setdefault(ip, collections.Counter())[status] += 1

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/ip", self._ip)
        app.router.add_route("*", "/{tail:.*}", self._page)
        return app

    async def _ip(self, request: web.Request) -> web.StreamResponse:
        return web.json_response({"ip": _client_ip(request)})

    async def _page(self, request: web.Request) -> web.StreamResponse:
        ip = _client_ip(request)
        account = request.headers.get("X-Account")
        verdict, status, headers = self._decide(ip, account)
        self._count(ip, verdict, status)
        if verdict == "incident":
            text, ctype = "Service temporarily unavailable\n", "text/plain"
        elif verdict == "banned":
            text, ctype = "Forbidden: your address has been blocked\n", "text/plain"
        elif verdict == "rate_limited":
            text, ctype = "Too many requests, slow down\n", "text/plain"
        elif verdict == "challenge":
            text, ctype = _CHALLENGE_PAGE.format(account=account, ip=ip), "text/html"
        elif verdict == "captcha":
            text, ctype = _CAPTCHA_PAGE, "text/html"
        else:
            greeting = f"Welcome back, {account}." if account else "Hello, visitor."
            items = "".join(f"<li>item {i}</li>" for i in range(5))
            text, ctype = _PAGE.format(path=request.path, greeting=greeting, items=items), "text/html"
        return web.Response(status=status, text=text, content_type=ctype, headers=headers)
