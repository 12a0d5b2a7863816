"""Playwright through a leased exit: one browser context per account, leaving by its exit.

Usage::

    from exitpool.playwright import leased_context
    browser = await p.chromium.launch(executable_path="/usr/bin/chromium")
    async with leased_context(browser, pool, "account-3f9", site="shop.example") as (context, lease):
        page = await context.new_page()
        await page.goto("https://shop.example/cart")

The context is new, its proxy is the leased exit (server, user name and password), and it is
closed when the block ends; the lease is released then, or as soon as the context closes
(closed by the block, or with its browser). The outcome is the block's: an exception that
leaves it (classified as every integration classifies), or an explicit ``lease.report(...)``;
with ``observe=True`` also the main document's responses (a status the pool counts as a block,
a 429 with its ``Retry-After``, a captcha page), by the rules the other integrations use.

Chromium speaks SOCKS5 only without a password (playwright#10567), and resolves names at a
SOCKS5 proxy always: a ``socks5`` exit (names resolved here) or one with a password goes
through a loopback relay (:class:`exitpool._relay.Relay`) owned by the context, a ``socks5h``
exit without a password directly.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from typing import Any, AsyncIterator, Awaitable, Callable, Dict, List, Optional, Tuple, Union

from ._clients import _retry_after_kwargs
from ._core import BLOCK_STATUSES, Exit, Lease, Pool
from ._relay import SOCKS_SCHEMES, Relay

__all__ = ["leased_context", "proxy_settings"]

# How much of a 2xx text document is searched for "captcha" (the Scrapy BanPolicy's rule).
_CAPTCHA_SCAN = 16 * 1024
_CAPTCHA = re.compile(rb"captcha", re.IGNORECASE)
# How long the release waits for the observer to finish reading a document's body.
_OBSERVE_GRACE = 5.0

CaptchaRule = Callable[[Any], Union[bool, Awaitable[bool]]]


def proxy_settings(exit: Exit, relay: Optional[Relay] = None) -> Dict[str, str]:
    """Playwright's ``proxy=`` for an exit (or the relay in front of it): ``server`` without
    credentials, ``username`` and ``password`` apart, as Playwright wants them."""
    if relay is not None:
        return {"server": relay.server, "username": relay.username, "password": relay.password}
    if exit.scheme in SOCKS_SCHEMES:
        return {"server": f"socks5://{exit.host}:{exit.port}"}
    settings = {"server": exit._proxy_without_credentials}
    if exit.username is not None or exit.password is not None:
        settings["username"] = exit.username or ""
        settings["password"] = exit.password or ""
    return settings


def _needs_relay(exit: Exit) -> bool:
    """Chromium cannot carry a SOCKS5 password, and resolves names at a SOCKS5 proxy whatever
    the scheme says: socks5 (local names) and any SOCKS exit with a password need the relay."""
    if exit.scheme not in SOCKS_SCHEMES:
        return False
    return exit.scheme == "socks5" or exit.username is not None or exit.password is not None


class _Observer:
    """Reports the main document's responses on the lease: the status and latency, a 429's
    Retry-After, and a captcha (a header naming it, or the word in a 2xx text document, or
    the caller's rule). The first ban sticks: a later good page does not hide it."""

    def __init__(self, lease: Lease, captcha: Optional[CaptchaRule]) -> None:
        self.lease = lease
        self.captcha = captcha
        self.banned = False
        self.tasks: List[asyncio.Task] = []

    def on_response(self, response: Any) -> None:
        try:
            request = response.request
            frame = response.frame
            if not request.is_navigation_request() or frame.parent_frame is not None:
                return
        except Exception:  # a service worker's response has no frame
            return
        self.tasks.append(asyncio.ensure_future(self._judge(response)))

    async def _judge(self, response: Any) -> None:
        status = response.status
        headers = response.headers  # lower-case names
        captcha = any("captcha" in name for name in headers)
        if not captcha and self.captcha is not None:
            verdict = self.captcha(response)
            captcha = bool(await verdict) if asyncio.iscoroutine(verdict) or isinstance(verdict, asyncio.Future) else bool(verdict)
        elif not captcha and 200 <= status < 300 and "text" in headers.get("content-type", ""):
            try:
                body = await response.body()
            except Exception:  # the page moved on: its body is gone
                body = b""
            captcha = bool(_CAPTCHA.search(body[:_CAPTCHA_SCAN]))
        if self.banned:
            return
        kwargs: Dict[str, Any] = {"status": status, "captcha": captcha}
        timing = getattr(response.request, "timing", None) or {}
        start = timing.get("responseStart", -1)
        if isinstance(start, (int, float)) and start >= 0:
            kwargs["latency"] = start / 1000.0
        kwargs.update(_retry_after_kwargs(status, {"Retry-After": headers.get("retry-after")}))
        self.banned = captcha or status in BLOCK_STATUSES or status == 429
        try:
            self.lease.report(**kwargs)
        except Exception:  # the lease already ended (its context closed): nothing to record on
            pass

    async def settle(self) -> None:
        if self.tasks:
            await asyncio.wait(self.tasks, timeout=_OBSERVE_GRACE)
            for t in self.tasks:
                t.cancel()


@contextlib.asynccontextmanager
async def leased_context(
    browser: Any,
    pool: Pool,
    key: Optional[str] = None,
    *,
    site: Optional[str] = None,
    timeout: Optional[float] = None,
    observe: bool = False,
    captcha: Optional[CaptchaRule] = None,
    **options: Any,
) -> AsyncIterator[Tuple[Any, Lease]]:
    """``async with leased_context(browser, pool, key, site=...) as (context, lease):`` a new
    context of ``browser`` (``browser.new_context(proxy=..., **options)``) leaving by the exit
    ``pool.lease(key, site=site, timeout=timeout)`` grants.

    ``options`` go to ``new_context`` (``user_agent``, ``storage_state``, ``locale``...; a
    ``proxy`` of your own is refused: the exit is the proxy). ``observe=True`` reports the
    main document's responses on the lease; ``captcha`` (a function of a Playwright response,
    sync or async) replaces the default captcha test of that observer. The lease is released
    when the block ends or when the context closes, whichever comes first.
    """
    if "proxy" in options:
        raise TypeError("leased_context sets the context's proxy to the leased exit; do not pass proxy=")
    lease = pool.lease(key, site=site, timeout=timeout)
    await lease.__aenter__()
    relay: Optional[Relay] = None
    context: Any = None
    observer: Optional[_Observer] = None
    released = False

    async def release(exc: Optional[BaseException] = None) -> None:
        nonlocal released
        if not released:
            released = True
            await lease.__aexit__(type(exc) if exc is not None else None, exc, exc.__traceback__ if exc is not None else None)

    closing: List[asyncio.Future] = []

    def on_close(_: Any) -> None:
        # Closed inside the block, with its browser or by a crash: the exit is free at once.
        if not released:
            closing.append(asyncio.ensure_future(release()))

    try:
        exit = lease.exit
        if _needs_relay(exit):
            relay = await asyncio.to_thread(Relay, exit)
        context = await browser.new_context(proxy=proxy_settings(exit, relay), **options)
        if observe:
            observer = _Observer(lease, captcha)
            context.on("response", observer.on_response)
        context.on("close", on_close)
    except BaseException as e:
        try:
            await release(e)
        finally:
            if relay is not None:
                relay.close()
        raise
    error: Optional[BaseException] = None
    try:
        yield context, lease
    except BaseException as e:
        error = e
        raise
    finally:
        try:
            context.remove_listener("close", on_close)
            if observer is not None:
                await observer.settle()
            await context.close()
        finally:
            try:
                await asyncio.gather(*closing, return_exceptions=True)
                await release(error)
            finally:
                if relay is not None:
                    relay.close()
