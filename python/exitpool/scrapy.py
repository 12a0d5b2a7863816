"""Scrapy integration: sticky exits and exit health for a Scrapy project, by settings alone.

``settings.py``::

    DOWNLOADER_MIDDLEWARES = {"exitpool.scrapy.ExitPoolMiddleware": 610}
    EXITPOOL_PROXY_LIST_PATH = "proxies.txt"        # or EXITPOOL_PROXY_LIST = [...]; reloaded on change
    EXITPOOL_POOL_OPTIONS = {"strategy": "weighted", "max_leases": 4}

and ``yield scrapy.Request(url, meta={"exitpool_key": "account-3f9"})`` for a request that must
leave from its account's exit. Every other request is keyless and spread by the pool.

Per request the middleware leases an exit for the request's host (the pool's ``site``), points
``meta["proxy"]`` at the exit's URL *without* credentials, sets ``Proxy-Authorization`` itself
(so one exit's credentials can never ride along to another exit), and puts the request in a
download slot of its own exit, so Scrapy's per-slot concurrency and delays apply per exit.
SOCKS5 exits (which Scrapy cannot reach, scrapy#747) go through a loopback relay per exit
(:class:`exitpool._relay.Relay`), started on the exit's first request and closed with the
spider. Two exits never share a connection: Scrapy keys its https tunnels by proxy and
``Proxy-Authorization``, each relay has a port of its own, and a plain ``http://`` request to
an exit whose host:port another exit shares goes out with ``Connection: close`` (Scrapy keys
those connections by the proxy's host:port alone).
Every response and download error is reported to the pool; a banned keyless page is tried
again on another exit. See the manual's Scrapy page (docs/scrapy.md) for every setting.

The priority must be below 750, where Scrapy's ``HttpProxyMiddleware`` runs: that middleware
must see the proxy this one chose, or it may apply environment proxies first.

This module is one concept, the downloader middleware: its ban policy, the settings it reads
and the request bookkeeping exist only for it, and Scrapy names it by this module's path.
"""

from __future__ import annotations

import base64
import collections
import itertools
import logging
import math
import re
import time
import traceback
from typing import Any, Dict, Iterable, List, Optional
from urllib.parse import quote

from scrapy import signals
from scrapy.exceptions import IgnoreRequest, NotConfigured
from scrapy.http import Request, Response, TextResponse
from scrapy.utils.httpobj import urlparse_cached
from scrapy.utils.misc import load_object

from . import Pool, load_exits
from ._clients import _HTTP_SCHEMES as _SCHEMES
from ._clients import _retry_after as _header_retry_after
from ._clients import _scrub
from ._clients import _site as _site_of
from ._core import BLOCK_STATUSES
from ._errors import Cooling, Error, InvalidInput, NoExitAvailable, SessionExitLost, WarmingUp
from ._outcome import _classify, _classify_failure
from ._relay import SOCKS_SCHEMES, Relay
from ._states import _ejected

__all__ = ["BanPolicy", "ExitPoolMiddleware"]

logger = logging.getLogger("exitpool.scrapy")

# Our bookkeeping in request.meta: a dict replaced (never mutated) on every attempt, because
# request.copy() shares nested values between a request and its retries.
_STATE = "_exitpool"
# Public meta keys: which exit served the response, how often the page was moved after a ban,
# the ban policy's verdict on the response, the request's own limit on moves, and whether (and
# from which exit) the request's account moved at a session boundary.
_EXIT = "exitpool_exit"
_RETRIES = "exitpool_retries"
_BAN = "exitpool_ban"
_MAX_RETRIES = "exitpool_max_retries"
_MOVED = "exitpool_session_moved"
_MOVED_FROM = "exitpool_moved_from"
# The reason a spider is closed with when EXITPOOL_CLOSE_SPIDER is on and no exit can serve.
CLOSE_REASON = "exitpool_no_exits"

# The core's list (403, 407, 451 and 999): one definition of a block for every integration.
_BLOCK_STATUSES = BLOCK_STATUSES
_DEFAULT_PORTS = {"http": 80, "https": 443}


def _site(request: Request) -> str:
    """The request's host as its Host header names it: the pool scopes health to it."""
    parsed = urlparse_cached(request)
    try:
        port = parsed.port
    except ValueError:
        port = None
    return _site_of(parsed.hostname, port, port == _DEFAULT_PORTS.get(parsed.scheme))


def _retry_after(response: Response) -> Optional[float]:
    value = response.headers.get(b"Retry-After")
    return _header_retry_after(value.decode("latin-1") if value else None)


async def _sleep(seconds: float) -> None:
    """Sleep on the reactor, whether Scrapy runs coroutines on Twisted or on asyncio."""
    from twisted.internet import reactor
    from twisted.internet.task import deferLater

    d = deferLater(reactor, seconds, lambda: None)  # type: ignore[arg-type]
    try:
        from scrapy.utils.defer import maybe_deferred_to_future
    except ImportError:  # pragma: no cover - Scrapy < 2.6
        await d
    else:
        await maybe_deferred_to_future(d)


class BanPolicy:
    """The default ban rules; subclass it and name the subclass in ``EXITPOOL_BAN_POLICY``, or
    give the spider ``response_is_ban(request, response)`` / ``exception_is_ban(request,
    exception)`` methods, which win over the policy.

    A verdict is ``True`` (a ban: the exit is at fault, a keyless page moves to another exit),
    ``False`` (not a ban: a 403, 407, 451 or 999 then counts as a success for the exit) or ``None``
    (no opinion: the outcome is recorded from the status or error alone, and nothing moves).
    """

    #: Statuses that mean the site refuses this exit (the core's blocks: 403, 407, 451, 999;
    #: and 429: it is going too fast).
    ban_statuses = BLOCK_STATUSES | {429}
    #: How much of a 2xx text body is searched for ``captcha``.
    captcha_scan = 16 * 1024
    _captcha = re.compile(rb"captcha", re.IGNORECASE)

    def response_is_ban(self, request: Request, response: Response) -> Optional[bool]:
        if response.status in self.ban_statuses:
            return True
        if any(b"captcha" in name.lower() for name in response.headers):
            return True
        # A captcha wall usually comes as a 200 page. Some real pages carry a captcha widget
        # (a login form): a spider that crawls such pages should override this method.
        if 200 <= response.status < 300 and isinstance(response, TextResponse):
            return bool(self._captcha.search(response.body[: self.captcha_scan]))
        return False

    def exception_is_ban(self, request: Request, exception: BaseException) -> Optional[bool]:
        # A refused, broken or timed-out tunnel is the exit's fault; anything else says
        # nothing about it.
        return True if _classify(exception) in ("timeout", "connect", "proxy") else None


class ExitPoolMiddleware:
    """A Scrapy downloader middleware that routes every request through an exit of an
    :class:`exitpool.Pool`; see the module docstring and docs/scrapy.md.

    ``pool`` is the pool (``pool.snapshot()`` for its health and figures); from a spider:
    ``self.crawler.get_downloader_middleware(ExitPoolMiddleware).pool`` (Scrapy 2.12+).
    """

    def __init__(
        self,
        pool: Pool,
        *,
        crawler: Any = None,
        key_meta: str = "exitpool_key",
        policy: Any = None,
        ban_retries: int = 3,
        wait: float = 30.0,
        auth_encoding: str = "latin-1",
        close_spider: bool = False,
        fresh: bool = False,
    ) -> None:
        unsupported = sorted(f"{e.exit_id} ({e.scheme})" for e in pool.exits if e.scheme not in _SCHEMES + SOCKS_SCHEMES)
        if unsupported:
            raise InvalidInput(f"exits Scrapy cannot reach (http, https, socks5, socks5h only): {', '.join(unsupported)}")
        if not _is_count(ban_retries):
            raise InvalidInput(f"EXITPOOL_BAN_RETRIES {ban_retries!r}: need an int >= 0")
        if not (isinstance(wait, (int, float)) and math.isfinite(wait) and wait >= 0):
            raise InvalidInput(f"EXITPOOL_WAIT {wait!r}: need seconds >= 0")
        self.pool = pool
        self.crawler = crawler
        self.key_meta = key_meta
        self.policy = policy if policy is not None else BanPolicy()
        self.ban_retries = ban_retries
        self.wait = float(wait)
        self.auth_encoding = auth_encoding or "latin-1"
        self.close_spider = bool(close_spider)
        self.fresh = bool(fresh)
        self._leases: Dict[int, Any] = {}
        self._tokens = itertools.count(1)
        self._auth: Dict[str, Optional[bytes]] = {}
        # Per SOCKS5 exit, its relay; per exit, whether another exit shares its host:port.
        self._relays: Dict[str, Relay] = {}
        self._shared: Dict[str, bool] = {}
        self._closing = False
        self._closer: Any = None
        self._owns_pool = False

    # -- construction

    @classmethod
    def from_crawler(cls, crawler: Any) -> ExitPoolMiddleware:
        s = crawler.settings
        config = s.get("EXITPOOL_CONFIG")
        path = s.get("EXITPOOL_PROXY_LIST_PATH")
        lines = s.get("EXITPOOL_PROXY_LIST")
        given = [name for name, v in (("EXITPOOL_CONFIG", config), ("EXITPOOL_PROXY_LIST_PATH", path)) if v]
        if lines:
            given.append("EXITPOOL_PROXY_LIST")
        if not given:
            raise NotConfigured("exitpool: no EXITPOOL_PROXY_LIST, EXITPOOL_PROXY_LIST_PATH or EXITPOOL_CONFIG")
        if len(given) > 1:
            raise InvalidInput(f"exitpool: set one of {' and '.join(given)}, not both")
        options = dict(s.getdict("EXITPOOL_POOL_OPTIONS"))
        # A list file (or config) that changes during a crawl is applied with pool.update.
        watch = s.getbool("EXITPOOL_PROXY_LIST_WATCH", True)
        if config:
            if options:
                raise InvalidInput("exitpool: with EXITPOOL_CONFIG, put the pool options in the config file")
            pool = Pool.from_config(config, watch=watch)  # type: ignore[attr-defined]
        else:
            exits = load_exits(path, watch=watch) if path else load_exits(_lines(lines))
            if not exits:
                raise InvalidInput(f"exitpool: {'EXITPOOL_PROXY_LIST_PATH ' + str(path) if path else 'EXITPOOL_PROXY_LIST'} holds no exit")
            options.setdefault("lease_ttl", default_lease_ttl(s))
            pool = Pool(exits, **options)
        policy_path = s.get("EXITPOOL_BAN_POLICY")
        policy = None
        if policy_path:
            policy_cls = load_object(policy_path)
            policy = policy_cls.from_crawler(crawler) if hasattr(policy_cls, "from_crawler") else policy_cls()
        mw = cls(
            pool,
            crawler=crawler,
            key_meta=s.get("EXITPOOL_KEY_META") or "exitpool_key",
            policy=policy,
            ban_retries=s.getint("EXITPOOL_BAN_RETRIES", 3),
            wait=s.getfloat("EXITPOOL_WAIT", 30.0),
            auth_encoding=s.get("HTTPPROXY_AUTH_ENCODING") or "latin-1",
            close_spider=s.getbool("EXITPOOL_CLOSE_SPIDER", False),
            fresh=s.getbool("EXITPOOL_FRESH", False),
        )
        crawler.signals.connect(mw._spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(mw._spider_closed, signal=signals.spider_closed)
        mw._owns_pool = True
        return mw

    # -- the three hooks

    async def process_request(self, request: Request, spider: Any = None) -> None:
        meta = request.meta
        state = meta.get(_STATE)
        if "proxy" in meta and (state is None or meta["proxy"] != state.get("proxy")):
            # The request chose its own proxy (or none, with None): not ours to route.
            self._inc("own_proxy")
            return None
        limit = meta.get(_MAX_RETRIES)
        if limit is not None and not _is_count(limit):
            raise InvalidInput(f"meta[{_MAX_RETRIES!r}] {limit!r}: need an int >= 0")
        state = state or {}
        stale = self._leases.pop(state.get("token", 0), None)
        if stale is not None:
            # The previous attempt never reached process_response or process_exception (a
            # later middleware answered it): hand its lease back without a verdict.
            self._release(stale, error="other")
        key = meta.get(self.key_meta)
        key = None if key is None or key == "" else str(key)
        avoid = list(state.get("avoid", ()))
        lease = await self._lease(request, key, _site(request), avoid)
        exit = lease.exit
        token = next(self._tokens)
        self._leases[token] = lease
        proxy, auth = self._route(exit)
        # A gateway that rotates per connection gets a new tunnel per lease (EXITPOOL_FRESH or
        # meta["exitpool_fresh"]): the connection, and the tunnel it rides, ends with the response.
        fresh = meta.get("exitpool_fresh", self.fresh)
        if fresh or (urlparse_cached(request).scheme == "http" and self._shares_endpoint(exit)):
            request.headers[b"Connection"] = b"close"
        if auth is None:
            request.headers.pop(b"Proxy-Authorization", None)
            meta.pop("_auth_proxy", None)
        else:
            request.headers[b"Proxy-Authorization"] = auth
            # HttpProxyMiddleware remembers in _auth_proxy which proxy a Proxy-Authorization
            # header is for (the proxy URL without credentials, as urlunparse rebuilds it:
            # "scheme://host:port", which is this string) and deletes the header when
            # meta["proxy"] no longer names that proxy. Naming this exit hands its header
            # over, and if any middleware between this one and HttpProxyMiddleware points the
            # request elsewhere, Scrapy itself drops this exit's credentials.
            meta["_auth_proxy"] = proxy
        meta["proxy"] = proxy
        slot = None
        if meta.get("download_slot") in (None, state.get("slot")):
            slot = f"exitpool:{exit.exit_id}"
            meta["download_slot"] = slot
        meta[_EXIT] = exit.exit_id
        meta.pop(_BAN, None)
        meta[_STATE] = {"token": token, "proxy": proxy, "slot": slot, "avoid": avoid}
        self._inc("leases")
        return None

    def process_response(self, request: Request, response: Response, spider: Any = None) -> Any:
        lease = self._take(request)
        if lease is None:
            return response
        outcome: Dict[str, Any] = {"error": "other"}
        verdict: Optional[bool] = None
        try:
            if "cached" in response.flags:  # HttpCacheMiddleware answered: the exit was not used
                return response
            if self._rerouted(request):  # a later middleware sent it elsewhere: not the exit's
                return response
            verdict = self._judge("response_is_ban", request, response)
            request.meta[_BAN] = verdict
            # Any status is an outcome (the core's table: 999 a block, a non-HTTP one "other").
            status: Optional[int] = response.status
            captcha = False
            if verdict:
                captcha = status not in _BLOCK_STATUSES and status != 429
                self._inc("bans")
                self._inc(f"bans/status/{response.status}")
            elif verdict is False and status in _BLOCK_STATUSES:
                status = None  # the policy says this refusal is the page's, not the exit's
            outcome = {
                "status": status,
                "latency": _latency(request),
                "captcha": captcha,
                "retry_after": _retry_after(response) if response.status == 429 else None,
            }
        finally:
            # Whatever happens above (a ban rule that raises included), the lease ends here.
            self._release(lease, **outcome)
        if verdict:
            if lease.key is None:
                reason = f"status {response.status}" + (" (captcha)" if outcome["captcha"] else "")
                retry = self._retry(request, lease.exit_id, reason)
                if retry is not None:
                    return retry
            else:
                # A sticky account never changes exit mid-session: the spider gets the page,
                # with response.meta["exitpool_ban"] set, and decides.
                self._inc("bans/keyed")
                logger.info(
                    "exitpool: %s banned on exit %s for account %s; not moved (sticky session)",
                    request,
                    lease.exit_id,
                    lease.key,
                )
        return response

    def process_exception(self, request: Request, exception: BaseException, spider: Any = None) -> Any:
        lease = self._take(request)
        if lease is None:
            return None
        kind, proxy_status = _classify_failure(exception)
        outcome: Dict[str, Any] = {"error": "other"}
        verdict: Optional[bool] = None
        try:
            if self._rerouted(request):
                return None
            verdict = self._judge("exception_is_ban", request, exception)
            outcome = {"error": "other" if verdict is False else kind, "latency": _latency(request)}
            if proxy_status is not None and verdict is not False:
                outcome["status"] = proxy_status  # a CONNECT answered 407: the gateway's credentials
        finally:
            self._release(lease, **outcome)
            self._inc(f"errors/{kind}")
        if verdict and lease.key is None:
            return self._retry(request, lease.exit_id, f"{type(exception).__name__}")
        return None

    # -- leasing

    async def _lease(self, request: Request, key: Optional[str], site: str, avoid: List[str]) -> Any:
        """A lease now, or after waiting out Cooling, WarmingUp and full exits for up to
        EXITPOOL_WAIT seconds; IgnoreRequest when none comes (at once, closing the spider,
        when EXITPOOL_CLOSE_SPIDER is on and no exit can serve the site at all)."""
        deadline: Optional[float] = None
        poll = 0.05
        lost = 0
        while True:
            refusal: Error
            try:
                return self._acquire(key, site, avoid)
            except SessionExitLost as e:
                lost += 1
                if key is None or lost > 3:
                    raise IgnoreRequest(f"exitpool: {e}") from None
                # The account's exit can no longer serve (removed, quarantined, dead). Moving
                # it is a session boundary, never a silent teleport: end the session, say so
                # (in the log and in the request's meta, so that the spider can log in again),
                # and bind afresh.
                self.pool.end_session(key)
                self._inc("sessions_lost")
                request.meta[_MOVED] = True
                request.meta[_MOVED_FROM] = e.exit_id
                logger.warning(
                    "exitpool: account %s moved at a session boundary: its exit %s can no longer serve %s",
                    key,
                    e.exit_id,
                    site or "this site",
                )
                continue
            except (Cooling, WarmingUp) as e:
                wait, refusal = max(0.01, float(e.retry_after)), e
            except NoExitAvailable as e:
                wait, refusal = poll, e
                poll = min(poll * 2, 1.0)
                if self.close_spider and not self._closing and not self._any_in_service(site):
                    self._inc("no_exit")
                    logger.error("exitpool: closing the spider: no exit can serve %s (%s)", site or "this site", e)
                    self._close_spider()
                    raise IgnoreRequest(f"exitpool: {e}") from None
            now = time.monotonic()
            if deadline is None:
                deadline = now + self.wait
            left = deadline - now
            retry_later = isinstance(refusal, (Cooling, WarmingUp))
            if self._closing or left <= 0 or (retry_later and wait > left):
                self._inc("no_exit")
                logger.warning("exitpool: dropping %s: %s", request, refusal)
                raise IgnoreRequest(f"exitpool: {refusal}")
            self._inc("waits")
            await _sleep(max(0.0, min(wait, left)))

    def _acquire(self, key: Optional[str], site: str, avoid: List[str]) -> Any:
        """A lease; for a keyless retry, on an exit it has not been banned from when the pool
        has one that can serve now (the pool's pick passes over ``avoid``, so no lease is
        taken and handed back, and no strategy state moves for an exit not used). When only
        exits it was banned from can serve, the pool's normal pick."""
        if key is None and avoid:
            try:
                return self.pool.acquire(None, site=site or None, timeout=0, avoid=avoid)
            except NoExitAvailable:
                pass
        return self.pool.acquire(key, site=site or None, timeout=0)

    def _any_in_service(self, site: str) -> bool:
        """Whether any exit could serve the site once waiting is over: one that is neither
        benched nor quarantined or dead (for the site or for every site). Full exits and
        exits on trial (probing) count: a release or a trial's end frees them."""
        benched = {e["exit_id"] for e in self.pool.snapshot()["exits"] if e["benched"]}
        for exit in self.pool.exits:
            if exit.exit_id in benched:
                continue
            if not _ejected(self.pool.state(exit.exit_id, site or None)):
                return True
        return False

    def _close_spider(self) -> None:
        """Closes the spider with reason CLOSE_REASON, from inside the downloader: scheduled,
        never awaited (closing waits for the downloader, this request included)."""
        self._closing = True
        engine = getattr(self.crawler, "engine", None)
        if engine is None:
            return
        close_async = getattr(engine, "close_spider_async", None)
        if close_async is not None:  # Scrapy 2.14+
            from scrapy.utils.defer import deferred_from_coro

            self._closer = deferred_from_coro(close_async(reason=CLOSE_REASON))
        else:  # pragma: no cover - older Scrapy
            self._closer = engine.close_spider(self.crawler.spider, CLOSE_REASON)
        self._closer.addErrback(lambda failure: logger.error("exitpool: closing the spider failed: %s", failure.value))

    def _take(self, request: Request) -> Any:
        state = request.meta.get(_STATE)
        if not state:
            return None
        return self._leases.pop(state.get("token", 0), None)

    def _rerouted(self, request: Request) -> bool:
        """A middleware after this one pointed the request at another proxy (or none): the
        answer is not the exit's doing, so it is neither reported for nor against it."""
        state = request.meta.get(_STATE) or {}
        return request.meta.get("proxy") != state.get("proxy")

    def _release(self, lease: Any, **outcome: Any) -> None:
        try:
            self.pool.release(lease, **outcome)
        except InvalidInput as e:  # an outcome out of range: the lease ended without it
            logger.debug("exitpool: outcome not recorded for exit %s: %s", lease.exit_id, e)

    def _route(self, exit: Any) -> tuple:
        """The proxy URL (no credentials) and Proxy-Authorization a request to ``exit`` goes
        out with: the exit's own, or for a SOCKS5 exit its relay's (started on first use)."""
        if exit.scheme not in SOCKS_SCHEMES:
            return exit._proxy_without_credentials, self._auth_header(exit)
        relay = self._relays.get(exit.exit_id)
        if relay is None or relay.exit.proxy != exit.proxy:
            if relay is not None:
                relay.close()
            relay = self._relays[exit.exit_id] = Relay(exit)
        return relay.server, relay.auth_header

    def _shares_endpoint(self, exit: Any) -> bool:
        """Whether another exit of the pool has this exit's scheme, host and port (with other
        credentials). Worked out for every exit at once, again when an exit is new to it."""
        shared = self._shared.get(exit.exit_id)
        if shared is None:
            endpoints = collections.Counter((e.scheme, e.host, e.port) for e in self.pool.exits)
            self._shared = {e.exit_id: endpoints[(e.scheme, e.host, e.port)] > 1 for e in self.pool.exits}
            shared = self._shared.get(exit.exit_id, False)
        return shared

    def _auth_header(self, exit: Any) -> Optional[bytes]:
        if exit.exit_id not in self._auth:
            user = exit.username
            if user is None:
                self._auth[exit.exit_id] = None
            else:
                raw = f"{user}:{exit.password or ''}"
                try:
                    data = raw.encode(self.auth_encoding)
                except (UnicodeEncodeError, LookupError):
                    data = raw.encode("utf-8")
                self._auth[exit.exit_id] = b"Basic " + base64.b64encode(data)
        return self._auth[exit.exit_id]

    # -- bans and retries

    def _judge(self, rule: str, request: Request, subject: Any) -> Optional[bool]:
        """The verdict of the spider's ``rule`` method, else the policy's. A rule that raises is
        the spider's (or policy's) bug: it is logged, counted, and taken as no opinion."""
        spider = getattr(self.crawler, "spider", None)
        judge = getattr(spider, rule, None) or getattr(self.policy, rule)
        try:
            verdict = judge(request, subject)
            return None if verdict is None else bool(verdict)
        except Exception as e:
            self._inc("ban_rule_errors")
            frames = traceback.extract_tb(e.__traceback__)
            where = f" at {frames[-1].filename}:{frames[-1].lineno} in {frames[-1].name}" if frames else ""
            logger.error(
                "exitpool: %s raised %s%s on %s; taken as no opinion (None): %s",
                rule,
                type(e).__name__,
                where,
                request,
                _scrub(str(e), self._secrets()),
            )
            return None

    def _secrets(self) -> List[str]:
        """Every exit's password (raw and percent-encoded) and Proxy-Authorization token: a
        spider's exception message may quote anything, the request's headers included."""
        secrets = []
        for relay in self._relays.values():
            secrets += [relay.password, relay.auth_header.split()[1].decode("ascii")]
        for exit in self.pool.exits:
            secrets += [exit.password or "", quote(exit.password or "", safe="")]
            auth = self._auth_header(exit)
            if auth is not None:
                secrets.append(auth.split()[1].decode("ascii"))
        return secrets

    def _retry(self, request: Request, exit_id: str, reason: str) -> Optional[Request]:
        """A copy of a banned keyless request for another exit, or None when its retries are
        spent (``meta["exitpool_max_retries"]``, else EXITPOOL_BAN_RETRIES) or it has been
        banned from every exit."""
        retries = int(request.meta.get(_RETRIES, 0))
        limit = request.meta.get(_MAX_RETRIES)
        limit = self.ban_retries if limit is None else limit
        state = request.meta.get(_STATE) or {}
        avoid = list(dict.fromkeys([*state.get("avoid", ()), exit_id]))
        if retries >= limit or len(avoid) >= len(self.pool):
            self._inc("retries/gave_up")
            logger.info(
                "exitpool: gave up moving %s after %d retries (%s on exit %s)",
                request,
                retries,
                reason,
                exit_id,
            )
            return None
        retry = request.replace(dont_filter=True)
        meta = retry.meta
        meta[_RETRIES] = retries + 1
        meta[_STATE] = {"avoid": avoid}
        meta.pop("proxy", None)
        meta.pop("_auth_proxy", None)
        meta.pop(_BAN, None)
        meta.pop(_EXIT, None)
        if state.get("slot") is not None and meta.get("download_slot") == state["slot"]:
            meta.pop("download_slot", None)
        retry.headers.pop(b"Proxy-Authorization", None)
        self._inc("retries")
        logger.debug(
            "exitpool: retrying %s on another exit (%s on exit %s; retry %d of %d)",
            request,
            reason,
            exit_id,
            retries + 1,
            limit,
        )
        return retry

    # -- signals and stats

    def _spider_opened(self, spider: Any) -> None:
        self._closing = False
        logger.info(
            "exitpool: %d exits; sticky key from meta[%r]; up to %d ban retries per keyless page",
            len(self.pool),
            self.key_meta,
            self.ban_retries,
        )

    def _spider_closed(self, spider: Any, reason: str = "") -> None:
        self._closing = True
        leases, self._leases = list(self._leases.values()), {}
        for lease in leases:
            self._release(lease, error="other")
        if leases:
            self._inc("leases_closed", len(leases))
        relays, self._relays = list(self._relays.values()), {}
        for relay in relays:
            relay.close()
        stats = getattr(self.crawler, "stats", None)
        if stats is not None:
            figures = self.pool.snapshot()["pool"]
            for state, n in figures["states"].items():
                stats.set_value(f"exitpool/exits/{state}", n)
        if self._owns_pool:
            self.pool.close()  # stops the list's watch (and saves state=, if set)

    def _inc(self, name: str, n: int = 1) -> None:
        stats = getattr(self.crawler, "stats", None)
        if stats is not None:
            stats.inc_value(f"exitpool/{name}", n)


def default_lease_ttl(settings: Any) -> float:
    """The pool's ``lease_ttl`` for a crawl with these Scrapy settings, unless
    ``EXITPOOL_POOL_OPTIONS`` sets one: ``DOWNLOAD_TIMEOUT + 60 + CONCURRENT_REQUESTS * delay``
    seconds, at least 120, where ``delay`` is the longest a download slot may space two
    requests (``DOWNLOAD_DELAY``, any ``DOWNLOAD_SLOTS`` delay and, with AutoThrottle,
    ``AUTOTHROTTLE_MAX_DELAY``, each stretched by its jitter).

    Why: a lease is taken in the middleware, before Scrapy puts the request in its download
    slot's queue, and ends at the response. Scrapy's downloader holds at most
    ``CONCURRENT_REQUESTS`` requests from the middleware to the response, so a request waits
    in its slot behind at most that many others, each sent at most ``delay`` after the one
    before; then its download lasts at most ``DOWNLOAD_TIMEOUT`` (180 s by default). The
    60 s cover the middlewares and callbacks around it. A lease that expired early would lose
    its outcome and free its exit's ``max_leases`` slot too soon; one that lasts too long only
    matters for a crashed process, and the spider's close hands every lease back anyway. Waits
    behind slow downloads in a slot of low concurrency are not bounded by this rule: set
    ``lease_ttl`` yourself for such a crawl.
    """
    timeout = settings.getfloat("DOWNLOAD_TIMEOUT", 180.0)
    # Scrapy 2.19 spaces a slot's requests by delay * (1 +- jitter): DOWNLOAD_DELAY_JITTER, or
    # the older RANDOMIZE_DOWNLOAD_DELAY's 0.5. The larger of the two bounds both versions.
    jitter = max(
        settings.getfloat("DOWNLOAD_DELAY_JITTER", 0.0),
        0.5 if settings.getbool("RANDOMIZE_DOWNLOAD_DELAY", True) else 0.0,
    )
    delays = [settings.getfloat("DOWNLOAD_DELAY", 0.0) * (1 + jitter)]
    if settings.getbool("AUTOTHROTTLE_ENABLED", False):
        throttle = max(settings.getfloat("AUTOTHROTTLE_MAX_DELAY", 60.0), settings.getfloat("AUTOTHROTTLE_START_DELAY", 5.0))
        delays.append(throttle * (1 + jitter))
    for slot in settings.getdict("DOWNLOAD_SLOTS").values():
        if isinstance(slot, dict) and slot.get("delay"):
            if "jitter" in slot:  # a slot's own jitter replaces the default one
                slot_jitter = float(slot["jitter"])
            elif "randomize_delay" in slot:  # its deprecated form
                slot_jitter = 0.5 if slot["randomize_delay"] else 0.0
            else:
                slot_jitter = jitter
            delays.append(float(slot["delay"]) * (1 + slot_jitter))
    # CONCURRENT_REQUESTS = 0 means no limit, which no rule can bound: Scrapy's default stands in.
    concurrent = settings.getint("CONCURRENT_REQUESTS", 16) or 16
    return max(120.0, timeout + 60.0 + concurrent * max(delays))


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _latency(request: Request) -> Optional[float]:
    value = request.meta.get("download_latency")
    if isinstance(value, (int, float)) and math.isfinite(value) and value >= 0:
        return float(value)
    return None


def _lines(value: Any) -> Iterable[str]:
    """EXITPOOL_PROXY_LIST as lines: a list's items are lines; one string (from ``-s`` or an
    environment variable) is split on newlines and on commas, as Scrapy's
    ``settings.getlist`` and scrapy-rotating-proxies' ``ROTATING_PROXY_LIST`` split it. A
    comma inside a password must be percent-encoded (``%2C``). A ``#`` comment is kept whole,
    commas and all."""
    if isinstance(value, str):
        lines: List[str] = []
        for line in value.splitlines():
            code, hash_, comment = line.partition("#")
            *parts, last = code.split(",")
            lines.extend(parts)
            lines.append(last + hash_ + comment)
        return lines
    if isinstance(value, bytes):
        raise InvalidInput("EXITPOOL_PROXY_LIST: give text lines, not bytes")
    return list(value)
