"""Active probes over aiohttp: is an exit up, and does it still leave from its own address?

>>> result = await probe(exit, ["http://ctl-a.example/ip", "http://ctl-b.example/ip",
...                             "http://ctl-c.example/ip"])                 # doctest: +SKIP
>>> result.ok, result.observed_ip, result.drifted                             # doctest: +SKIP
(True, '203.0.113.7', False)

:func:`probe` sends one request through the exit to each control endpoint (each answers JSON
``{"ip": "..."}``, the address the request came from) and returns a :class:`ProbeResult`: whether a
quorum of endpoints (a majority by default) answered and agreed on one address, that address, the
latency, a classified error, and whether the address differs from ``exit.ip`` (drift: the exit's
token now lands elsewhere, and an account leased there would present a new address).

:class:`ProbeLoop` runs probes as an asyncio task and feeds the verdicts into the pool's health
(probes decide who comes back, traffic decides who leaves). If no exit of a round answers, the
probe system itself is suspect (our network, the control endpoints) and nothing is recorded.

Proxy credentials travel only in a ``Proxy-Authorization`` header sent to the proxy; they never
appear in a result, a log line or an exception message. Install with
``pip install 'exitpool[aiohttp]'``.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import math
import random
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, List, Optional, Sequence, Tuple, Union

try:
    import aiohttp
except ImportError as _exc:  # pragma: no cover - exercised by a test that hides aiohttp
    raise ImportError("exitpool.probe needs aiohttp, which is not installed: pip install 'exitpool[aiohttp]'") from _exc

from ._clients import _HTTP_SCHEMES as _SCHEMES
from ._clients import _proxy_parts, _scrub
from ._core import Exit
from ._errors import InvalidInput, UnknownExit
from ._outcome import _classify as _classify_request
from ._states import _in_service

__all__ = ["EndpointResult", "ProbeLoop", "ProbeResult", "ProbeRound", "probe"]

logger = logging.getLogger("exitpool")

#: The error classes a probe reports, besides ``"http_<status>"``.
ERRORS = ("timeout", "connect", "proxy", "bad_body", "disagree", "other")

_MAX_BODY = 64 * 1024


@dataclass(frozen=True)
class EndpointResult:
    """One control endpoint's answer through the exit."""

    url: str
    ok: bool
    ip: Optional[str] = None
    """The address the endpoint saw, normalized (``None`` unless ``ok``)."""
    status: Optional[int] = None
    """The HTTP status, when a response came back."""
    latency: float = 0.0
    """Seconds from sending the request to the end of the body (or to the failure)."""
    error: Optional[str] = None
    """``timeout``, ``connect``, ``proxy``, ``http_<status>``, ``bad_body`` or ``other``."""
    detail: str = ""
    """What went wrong, in words (never a credential)."""


@dataclass(frozen=True)
class ProbeResult:
    """A probe's verdict on one exit over every control endpoint."""

    exit_id: str
    ok: bool
    """A quorum of endpoints answered and agreed on one address."""
    observed_ip: Optional[str]
    """The address the answering endpoints agree on (the most common one when they do not)."""
    latency: Optional[float]
    """Median latency in seconds of the endpoints that answered; ``None`` if none did."""
    error: Optional[str]
    """Why the probe failed (``None`` when ``ok``): the most common endpoint error, or
    ``disagree`` when endpoints answered with different addresses and none reached quorum."""
    drifted: bool
    """``observed_ip`` is not the exit's ``ip`` (only judged when ``ok`` and ``ip`` is set)."""
    expected_ip: Optional[str] = None
    quorum: int = 1
    endpoints: Tuple[EndpointResult, ...] = field(default_factory=tuple)

    @property
    def credentials_rejected(self) -> bool:
        """The proxy answered 407 (to the request or to its CONNECT): it refuses the exit's
        credentials. ``ProbeLoop`` records it so (``record_probe(..., status=407)``): for a
        gateway's slot that takes the gateway out, as configuration rather than a bad slot."""
        return not self.ok and any(e.status == 407 for e in self.endpoints)

    @property
    def answered(self) -> int:
        """How many endpoints answered with an address."""
        return sum(1 for e in self.endpoints if e.ok)

    @property
    def detail(self) -> str:
        """One line for logs and ``pool.record_probe(detail=...)``: the error first."""
        n = len(self.endpoints)
        if self.ok:
            head = f"ok {self.observed_ip}"
            if self.drifted:
                head += f" (expected {self.expected_ip}: drifted)"
        else:
            head = self.error or "failed"
        errors = ", ".join(f"{e.error}" for e in self.endpoints if not e.ok)
        tail = f" [{errors}]" if errors else ""
        return f"{head}: {self.answered} of {n} endpoints answered, quorum {self.quorum}{tail}"


# Why an exit cannot be probed, for `_proxy_parts`.
_REFUSAL = "probe: exit {exit_id} is a {scheme} proxy; exitpool.probe speaks to http and https proxies only"


def _scrubbed(text: str, exit: Exit, auth: Optional[str]) -> str:
    """Removes anything credential-like from a message (aiohttp's own texts should hold none,
    but a message is only printed after this)."""
    secrets = [exit.proxy, exit.password or ""]
    if auth:
        secrets += [auth, auth.split(" ", 1)[-1]]
    return _scrub(text, secrets)[:200]


def _describe(exc: BaseException, exit: Exit, auth: Optional[str]) -> str:
    msg = str(exc)
    name = type(exc).__name__
    return _scrubbed(f"{name}: {msg}" if msg else name, exit, auth)


def _classify(exc: BaseException) -> str:
    """The pool's class of a failed request (the one table, ``_outcome``), and the probe's own
    ``bad_body``: an endpoint that answered but whose body could not be read is no transport
    failure a lease would report, but it fails the probe and the result says why."""
    kind = _classify_request(exc)
    if kind == "other" and isinstance(exc, (aiohttp.ClientPayloadError, aiohttp.ClientResponseError)):
        return "bad_body"
    return kind


def _parse_ip(body: bytes) -> Optional[str]:
    """The address in a control endpoint's body: JSON ``{"ip": ...}`` (or httpbin's
    ``{"origin": ...}``), or a bare address as text."""
    text = body.decode("utf-8", "replace").strip()
    value: Any = text
    if text.startswith("{"):
        try:
            doc = json.loads(text)
        except ValueError:
            return None
        if not isinstance(doc, dict):
            return None
        value = doc.get("ip", doc.get("origin"))
        if not isinstance(value, str):
            return None
        value = value.split(",")[0]
    try:
        return str(ipaddress.ip_address(value.strip()))
    except ValueError:
        return None


async def _read_capped(resp: aiohttp.ClientResponse) -> Optional[bytes]:
    chunks: List[bytes] = []
    size = 0
    while True:
        chunk = await resp.content.read(8192)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > _MAX_BODY:
            return None
        chunks.append(chunk)


async def _one(session: aiohttp.ClientSession, exit: Exit, url: str, proxy: str, auth: Optional[str], timeout: float) -> EndpointResult:
    headers = {"Accept": "application/json, text/plain;q=0.5"}
    proxy_headers = None
    if auth is not None:
        # Through a CONNECT tunnel (an https endpoint) aiohttp sends ``proxy_headers`` on the
        # CONNECT; for a plain-http endpoint the request itself goes to the proxy in absolute
        # form and aiohttp does not copy ``proxy_headers`` onto it, so the header rides on the
        # request (which only the proxy reads; proxies drop Proxy-* headers). Never both: inside
        # a tunnel the request reaches the endpoint.
        proxy_headers = {"Proxy-Authorization": auth}
        if not url.lower().startswith("https:"):
            headers["Proxy-Authorization"] = auth
    started = time.perf_counter()
    status: Optional[int] = None
    try:

        async def request() -> EndpointResult:
            nonlocal status
            async with session.get(
                url,
                proxy=proxy,
                proxy_headers=proxy_headers,
                headers=headers,
                allow_redirects=False,
                timeout=aiohttp.ClientTimeout(total=timeout),
            ) as resp:
                status = resp.status
                if status == 407:
                    return EndpointResult(
                        url,
                        False,
                        None,
                        status,
                        time.perf_counter() - started,
                        "proxy",
                        "407 Proxy Authentication Required: the proxy refused the credentials",
                    )
                if not 200 <= status < 300:
                    return EndpointResult(
                        url,
                        False,
                        None,
                        status,
                        time.perf_counter() - started,
                        f"http_{status}",
                        _scrubbed(f"{status} {resp.reason or ''}".strip(), exit, auth),
                    )
                body = await _read_capped(resp)
                latency = time.perf_counter() - started
                ip = _parse_ip(body) if body is not None else None
                if ip is None:
                    what = "a body over 64 KiB" if body is None else f"{body[:60]!r}"
                    return EndpointResult(url, False, None, status, latency, "bad_body", _scrubbed(f"no IP address in {what}", exit, auth))
                return EndpointResult(url, True, ip, status, latency)

        # ClientTimeout bounds each phase; wait_for bounds the whole, whatever the session does.
        return await asyncio.wait_for(request(), timeout)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - every failure becomes a classified result
        if isinstance(exc, aiohttp.ClientResponseError) and status is None:
            status = exc.status or None  # e.g. the proxy's answer to CONNECT
        return EndpointResult(url, False, None, status, time.perf_counter() - started, _classify(exc), _describe(exc, exit, auth))


def _urls(urls: Union[str, Iterable[str]]) -> List[str]:
    out = [urls] if isinstance(urls, str) else list(urls)
    if not out or not all(isinstance(u, str) and u for u in out):
        raise InvalidInput(f"probe: urls must be one or more control endpoint URLs, got {urls!r}")
    return out


def _quorum(quorum: Optional[int], n: int) -> int:
    if quorum is None:
        return n // 2 + 1
    if isinstance(quorum, bool) or not isinstance(quorum, int) or not 1 <= quorum <= n:
        raise InvalidInput(f"probe: quorum {quorum!r} must be an int between 1 and the {n} endpoints")
    return quorum


def _seconds(name: str, value: Any, *, positive: bool) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise InvalidInput(f"probe: {name} {value!r} is not a number") from None
    if not math.isfinite(v) or v < 0 or (positive and v == 0):
        raise InvalidInput(f"probe: {name} {value!r} must be a finite number {'> 0' if positive else '>= 0'}")
    return v


def _session() -> aiohttp.ClientSession:
    # A fresh connection per probe (a kept-alive tunnel would not show a new exit address), no
    # cookies, and no proxy from the environment.
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(force_close=True, limit=0),
        cookie_jar=aiohttp.DummyCookieJar(),
        trust_env=False,
    )


def _verdict(exit: Exit, results: Sequence[EndpointResult], quorum: int) -> ProbeResult:
    expected = exit.ip
    if expected is not None:
        try:
            expected = str(ipaddress.ip_address(expected))
        except ValueError:
            pass
    votes = Counter(r.ip for r in results if r.ok)
    observed: Optional[str] = None
    if votes:
        top = max(votes.values())
        observed = next(r.ip for r in results if r.ok and votes[r.ip] == top)
    ok = observed is not None and votes[observed] >= quorum
    error: Optional[str] = None
    if not ok:
        if sum(votes.values()) >= quorum:
            error = "disagree"
        else:
            errors = Counter(r.error for r in results if not r.ok)
            top = max(errors.values())
            error = next(r.error for r in results if not r.ok and errors[r.error] == top)
    answered = [r.latency for r in results if r.ok]
    latency = statistics.median(answered) if answered else None
    drifted = bool(ok and expected is not None and observed != expected)
    return ProbeResult(
        exit_id=exit.exit_id,
        ok=ok,
        observed_ip=observed,
        latency=latency,
        error=error,
        drifted=drifted,
        expected_ip=expected,
        quorum=quorum,
        endpoints=tuple(results),
    )


async def probe(
    exit: Exit,
    urls: Union[str, Iterable[str]],
    *,
    session: Optional[aiohttp.ClientSession] = None,
    timeout: float = 6.0,
    quorum: Optional[int] = None,
) -> ProbeResult:
    """Sends one GET through ``exit`` to each control endpoint in ``urls`` (at once) and
    returns the verdict. ``quorum`` endpoints (default: a majority) must answer with the same
    address for the probe to be ``ok``, so one endpoint going down condemns no exit. Each
    request is bounded by ``timeout`` seconds. ``session`` is used if given (it should not keep
    connections alive through proxies if drift matters); otherwise one is made and closed.

    Network failures never raise: they are classified in the result. An exit whose proxy is
    not http or https raises :class:`~exitpool.InvalidInput`.
    """
    url_list = _urls(urls)
    q = _quorum(quorum, len(url_list))
    t = _seconds("timeout", timeout, positive=True)
    proxy, auth = _proxy_parts(exit, _REFUSAL)
    own = session is None
    s = _session() if session is None else session
    try:
        results = await asyncio.gather(*(_one(s, exit, u, proxy, auth, t) for u in url_list))
    finally:
        if own:
            await s.close()
    result = _verdict(exit, results, q)
    if logger.isEnabledFor(logging.DEBUG):
        logger.debug("probe exit=%s: %s", exit.exit_id, result.detail)
    return result


@dataclass(frozen=True)
class ProbeRound:
    """What one :meth:`ProbeLoop.run_once` did."""

    results: Tuple[ProbeResult, ...]
    """The probes of the exits that were due, in the pool's order."""
    controls: Tuple[ProbeResult, ...]
    """Healthy exits probed as a check of the probe system, when none of those due answered."""
    suspect: bool
    """No exit answered: the probe system is suspect and nothing was recorded."""
    recorded: int
    """Verdicts fed into the pool."""
    drifted: Tuple[str, ...]
    """Exit ids the pool judged drifted."""
    skipped: Tuple[str, ...]
    """Exit ids not probed (a proxy scheme aiohttp cannot speak) or gone before recording."""
    duration: float


def _interval(value: Any) -> Tuple[float, float]:
    if isinstance(value, (int, float)):
        lo = hi = _seconds("interval", value, positive=False)
    else:
        try:
            lo_, hi_ = value
        except (TypeError, ValueError):
            raise InvalidInput(f"probe: interval {value!r} must be seconds or a (low, high) pair") from None
        lo, hi = _seconds("interval", lo_, positive=False), _seconds("interval", hi_, positive=False)
    if lo > hi:
        raise InvalidInput(f"probe: interval {value!r} has low above high")
    return lo, hi


class ProbeLoop:
    """Probes a pool's exits as an asyncio task: ``async with ProbeLoop(pool, urls):``, or
    :meth:`start` and ``await`` :meth:`stop`.

    Each round asks ``pool.probe_due(idle)`` which exits to check (exits in service idle for
    ``idle`` seconds, quarantined exits whose backoff is over, dead ones), probes them with
    start times spread at random over ``stagger`` seconds (default: a tenth of the shorter
    interval, at most 3 s) and at most ``concurrency`` at a time, and feeds each verdict into
    ``pool.record_probe``. Rounds are ``interval`` seconds apart (a random draw in the range).

    When no exit due answers, up to ``controls`` healthy exits that were not due are probed as
    a check. If none of them answers either, the probe system itself is suspect (our network,
    the control endpoints): nothing is recorded for that round, a warning goes to the
    ``exitpool`` logger, :attr:`suspect` is set and :attr:`suspect_rounds` counts it.
    """

    def __init__(
        self,
        pool: Any,
        urls: Union[str, Iterable[str]],
        *,
        interval: Union[float, Tuple[float, float]] = (30.0, 60.0),
        idle: float = 30.0,
        timeout: float = 6.0,
        concurrency: int = 8,
        seed: Optional[int] = None,
        quorum: Optional[int] = None,
        stagger: Optional[float] = None,
        controls: int = 2,
        session: Optional[aiohttp.ClientSession] = None,
    ) -> None:
        self.pool = pool
        self.urls = _urls(urls)
        self.quorum = _quorum(quorum, len(self.urls))
        self.interval = _interval(interval)
        self.idle = _seconds("idle", idle, positive=False)
        self.timeout = _seconds("timeout", timeout, positive=True)
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise InvalidInput(f"probe: concurrency {concurrency!r} must be an int >= 1")
        self.concurrency = concurrency
        if isinstance(controls, bool) or not isinstance(controls, int) or controls < 0:
            raise InvalidInput(f"probe: controls {controls!r} must be an int >= 0")
        self.controls = controls
        self.stagger = min(3.0, self.interval[0] / 10) if stagger is None else _seconds("stagger", stagger, positive=False)
        self._rng = random.Random(seed)
        self._session = session
        self._own_session: Optional[aiohttp.ClientSession] = None
        self._task: Optional[asyncio.Task[None]] = None
        self._warned: set = set()
        #: Rounds run so far.
        self.rounds = 0
        #: Whether the last round found the probe system suspect.
        self.suspect = False
        #: Rounds found suspect so far.
        self.suspect_rounds = 0
        #: The last round's :class:`ProbeRound`.
        self.last_round: Optional[ProbeRound] = None

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<ProbeLoop {state} urls={len(self.urls)} rounds={self.rounds} suspect={self.suspect}>"

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def _probeable(self, exits: Iterable[Exit]) -> Tuple[List[Exit], List[str]]:
        ok, skipped = [], []
        for e in exits:
            if e.scheme in _SCHEMES:
                ok.append(e)
                continue
            skipped.append(e.exit_id)
            if e.exit_id not in self._warned:
                self._warned.add(e.exit_id)
                logger.warning("probe: exit %s is a %s proxy, which exitpool.probe cannot speak to; not probed", e.exit_id, e.scheme)
        return ok, skipped

    async def _probe_all(self, exits: Sequence[Exit], session: aiohttp.ClientSession, stagger: float) -> List[ProbeResult]:
        sem = asyncio.Semaphore(self.concurrency)
        offsets = [self._rng.uniform(0.0, stagger) if stagger > 0 else 0.0 for _ in exits]

        async def one(e: Exit, delay: float) -> ProbeResult:
            if delay > 0:
                await asyncio.sleep(delay)
            async with sem:
                return await probe(e, self.urls, session=session, timeout=self.timeout, quorum=self.quorum)

        return list(await asyncio.gather(*(one(e, d) for e, d in zip(exits, offsets))))

    async def run_once(self) -> ProbeRound:
        """One round: probe the exits due now and record the verdicts (or, if the probe system
        is suspect, nothing). Returns what it did."""
        started = time.perf_counter()
        due, skipped = self._probeable(self.pool.probe_due(self.idle))
        results: List[ProbeResult] = []
        controls: List[ProbeResult] = []
        suspect = False
        session = self._session or self._own_session
        temp = None
        try:
            if due:
                if session is None:  # none given and none from start(): one for this round only
                    session = temp = _session()
                results = await self._probe_all(due, session, self.stagger)
                if not any(r.ok for r in results):
                    due_ids = {e.exit_id for e in due}
                    candidates, _ = self._probeable(e for e in self.pool.exits if e.exit_id not in due_ids and self._serving(e.exit_id))
                    picks = self._rng.sample(candidates, min(self.controls, len(candidates)))
                    if picks:
                        controls = await self._probe_all(picks, session, 0.0)
                    suspect = not any(r.ok for r in controls)
        finally:
            if temp is not None:
                await temp.close()

        recorded = 0
        drifted: List[str] = []
        if suspect:
            self.suspect_rounds += 1
            errors = Counter(r.error for r in results + controls)
            logger.warning(
                "probe: none of %d exits probed answered (%s): the probe system itself is suspect "
                "(network or control endpoints); nothing recorded this round",
                len(results) + len(controls),
                ", ".join(f"{k} x{v}" for k, v in errors.most_common()),
            )
        else:
            for r in results + controls:
                try:
                    if self.pool.record_probe(
                        r.exit_id,
                        r.ok,
                        observed_ip=r.observed_ip if r.ok else None,
                        detail="" if r.ok else r.detail,
                        status=407 if r.credentials_rejected else None,
                    ):
                        drifted.append(r.exit_id)
                    recorded += 1
                except UnknownExit:
                    skipped.append(r.exit_id)  # removed from the pool while it was probed
        self.rounds += 1
        self.suspect = suspect
        self.last_round = ProbeRound(
            results=tuple(results),
            controls=tuple(controls),
            suspect=suspect,
            recorded=recorded,
            drifted=tuple(drifted),
            skipped=tuple(skipped),
            duration=time.perf_counter() - started,
        )
        return self.last_round

    def _serving(self, exit_id: str) -> bool:
        try:
            return _in_service(self.pool.state(exit_id))
        except UnknownExit:
            return False

    async def _run(self) -> None:
        while True:
            try:
                await self.run_once()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - one bad round must not end the loop
                logger.exception("probe: a round failed; the next one runs as scheduled")
            await asyncio.sleep(self._rng.uniform(*self.interval))

    def start(self) -> None:
        """Starts the loop as a task on the running event loop (a no-op if it runs)."""
        if self.running:
            return
        if self._session is None and self._own_session is None:
            self._own_session = _session()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="exitpool-probe-loop")

    async def stop(self) -> None:
        """Cancels the loop and waits for it to end; closes the session it made. Idempotent."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if current is not None and getattr(current, "cancelling", lambda: 0)():
                    raise  # our caller is being cancelled too: let that through
        elif task is not None and not task.cancelled() and task.exception() is not None:
            logger.error("probe: the loop had ended with %r", task.exception())
        if self._own_session is not None:
            session, self._own_session = self._own_session, None
            await session.close()

    async def __aenter__(self) -> ProbeLoop:
        self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()
