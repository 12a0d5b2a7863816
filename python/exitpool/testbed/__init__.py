"""A loopback world for tests, the demo and your own pytest suites.

``Testbed`` starts, on this machine only:

- ``n_exits`` HTTP forward proxies (:class:`Proxy`). Each listens on ``127.0.0.1:<free port>``,
  requires Basic ``Proxy-Authorization`` (its own user and password; 407 otherwise), forwards
  absolute-form ``http://`` requests and ``CONNECT`` tunnels, and opens its upstream connections
  from its own source address (``127.0.1.N`` by default), so the target sees one client IP per
  exit. At run time a proxy can be killed (connections refused, open ones closed), revived,
  slowed, made flaky, or made to drift (leave from another address).
- With ``Testbed(scheme="socks5")`` (or ``"socks5h"``, or a list, one scheme per exit) the
  exits are SOCKS5 proxies instead (:class:`Socks5Proxy`): RFC 1928 ``CONNECT`` with RFC 1929
  user name and password (wrong ones refused; ``socks_auth=False`` for none), destinations
  given as IPv4 addresses or as names resolved at the proxy (``hosts={"shop.test":
  "127.0.0.1"}``, for socks5h), leaving from their own source address like the HTTP ones.
  ``proxy.add_user(user, source_ip=...)`` puts more credentials on a proxy's port, each
  leaving from its own address (two exits on one host:port).
- A target site (:class:`Site`, aiohttp.web) that behaves like a guarded platform: per-IP rate
  limits (429 + ``Retry-After``), persistent bans (403) for IPs that keep hammering after 429s,
  captcha pages, verification challenges for an account seen from a new IP, and site-wide
  incidents (503 on every IP). It counts everything it sees, for assertions.
- Provider gateways (:class:`ProviderGateway`, ``Testbed(gateways=[...])``): one port that
  reads a sticky-session token from the proxy user name (``{user}-session-{session}``), gives
  each token a source address of its own (``127.0.2.N``) for a lifetime, answers 407 for wrong
  credentials, and can be killed, blackholed (connects time out), told to answer 502 "no exit
  available", or to break a token's stickiness.
- Control endpoints (:class:`Control`): ``GET /ip`` answers ``{"ip": "<client ip>"}``. They
  are separate servers from the site, so a site incident says nothing about them and one of
  them can be taken down on its own (quorum tests). The site answers ``/ip`` too, unguarded.

Everything binds to 127.x addresses (on Linux every 127.0.0.0/8 address is this machine; other
systems need the source aliases configured). Proxies refuse any destination that is not a
127.x address or ``localhost``, so no request ever leaves the machine. Every loop is bounded
(sizes, counts and timeouts) and closing the testbed closes every socket it opened.

Use it from async code::

    async with Testbed(n_exits=3) as tb:
        pool = Pool(tb.exits)
        async with aiohttp.ClientSession() as s:
            async with s.get(tb.control_url, proxy=tb.exits[0].proxy) as r:
                assert (await r.json())["ip"] == tb.exits[0].ip

or from sync code (requests, httpx): ``with Testbed() as tb:`` runs the world on a background
thread with its own event loop. Every control method (``proxy.kill()``, ``site.ban(ip)``, ...)
may be called from either side.

Site behaviour, in the order a guarded request meets it (any path except ``/ip``):

1. incident on (``site.incident(True)``): 503 with ``Retry-After``, for every IP.
2. banned IP: 403, until ``site.unban(ip)`` (or ``ban_ttl`` seconds, if set).
3. rate limit: a token bucket per client IP (``rate`` per second, ``burst`` deep); over it, 429
   with ``Retry-After`` (whole seconds, at least 1). An IP that collects ``ban_after`` 429s
   within ``ban_window`` seconds is banned.
4. account (header ``X-Account``): the first IP an account is seen from is its home; a request
   from an IP the account has never used gets a verification challenge, chosen to look like a
   real one: **status 200**, header ``X-Challenge: verify``, and a body containing
   ``"verify your identity"``. The IP is then recorded in the account's history
   (``site.account_ips(account)``), and ``site.teleports(account)`` counts how often
   consecutive requests of the account came from different IPs.
5. captcha: a flagged IP (poor reputation, ``site.flag(ip)``) always, any other IP with
   probability ``captcha_rate``: **status 200**, header ``X-Captcha: 1``, a body containing
   ``"captcha"``.
6. otherwise 200 with a small HTML page.

The package, one module a part: ``_server`` (the loopback TCP server base every part shares:
a fixed port, kill and revive, controls callable from any thread), ``_proxy`` (:class:`Proxy`),
``_gateway`` (:class:`ProviderGateway`), ``_app`` (the aiohttp server base of the site and the control endpoints), ``_site``
(:class:`Site`), ``_control`` (:class:`Control`), ``_world`` (:class:`Testbed`, which starts
and stops them all) and ``_scenario`` (:class:`Scenario`: a scripted world and a fleet workload
run through a picking policy, :class:`Naive`, :class:`PoolPolicy` or the :class:`Oracle` told
the world's truth, measured the same way into an :class:`Outcome`).
"""

from __future__ import annotations

try:
    from aiohttp import web  # noqa: F401  (the site and control servers are aiohttp apps)
except ImportError as _e:  # pragma: no cover - exercised only without the extra
    raise ImportError("exitpool.testbed needs aiohttp: pip install 'exitpool[aiohttp]'") from _e

from ._control import Control
from ._gateway import ProviderGateway
from ._proxy import Proxy
from ._scenario import Hold, Naive, Oracle, Outcome, PoolPolicy, Scenario, compare
from ._site import Site
from ._socks import Socks5Proxy
from ._world import Testbed

__all__ = [
    "Control",
    "Hold",
    "Naive",
    "Oracle",
    "Outcome",
    "PoolPolicy",
    "Proxy",
    "ProviderGateway",
    "Scenario",
    "Site",
    "Socks5Proxy",
    "Testbed",
    "compare",
]
