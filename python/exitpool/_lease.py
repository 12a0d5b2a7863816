"""The async half of ``Lease``: waiting without blocking the event loop."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Optional

from ._errors import Cooling, NoExitAvailable, WarmingUp

# While every candidate exit is full, look again after this long, doubling up to the cap.
# A `Cooling` wait is looked at again after the cap at most: its `retry_after` is when the lease
# passes at the latest, and a site incident's spacing opens early, on the success of a trial
# lease. Waiting out the whole spacing made every waiting lease miss the site's return by up to
# an interval, and each doubling by up to its spacing (the test suite's "bad third" world, in
# the two seconds after its incident: 12-15 pages an exit, 15-16 looking again, the oracle 17).
# Not with a shared store: there each look is a round trip to it, twenty a second per waiter.
_POLL_FIRST = 0.001
_POLL_CAP = 0.05


async def _aenter(lease: Any, timeout: Optional[float]) -> Any:
    """Acquire for ``async with``: waits (asleep, never blocking the loop) while exits are full,
    and also waits out ``WarmingUp`` and ``Cooling`` when their wait fits in the timeout.

    A task cancelled while it waits gives the lease up: ``async with`` then never runs its
    exit, so a slot granted meanwhile (an attempt on a worker thread runs on after the cancel)
    would be held by nobody. ``_abandon`` hands it back unused, now or when that attempt ends.
    """
    try:
        return await _acquire(lease, timeout)
    except BaseException as e:
        if not isinstance(e, Exception):  # cancelled, interrupted, closed: not a refusal
            lease._abandon()
        raise


async def _acquire(lease: Any, timeout: Optional[float]) -> Any:
    deadline = None if timeout is None else time.monotonic() + timeout
    poll = _POLL_FIRST
    # With a shared store every try is a network round trip: it runs on a worker thread, so
    # the event loop never waits on the store (nor on its timeouts when it is down).
    shared = lease._shared
    while True:
        try:
            entered = await asyncio.to_thread(lease._try_enter) if shared else lease._try_enter()
            if entered:
                return lease
            wait = poll
            poll = min(poll * 2, _POLL_CAP)
            refusal: Optional[BaseException] = None
        except (WarmingUp, Cooling) as e:
            wait, refusal = e.retry_after, e
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or (refusal is not None and wait > left):
                if refusal is not None:
                    raise refusal
                raise NoExitAvailable(lease._full_message(timeout))
            wait = min(wait, left)
        if isinstance(refusal, Cooling) and not shared:
            wait = min(wait, _POLL_CAP)
        await asyncio.sleep(wait)


async def _aexit(lease: Any, exc_type: Any, exc: Any, tb: Any) -> bool:
    if lease._shared:
        # The release is handed to a worker thread before the first await, and shielded: a
        # task cancelled here gets CancelledError while the release still runs. Unshielded,
        # the cancel would reach the executor's future and drop the release if no thread had
        # started it yet (asyncio.to_thread's future cancels work not yet begun).
        loop = asyncio.get_running_loop()
        release = loop.run_in_executor(None, lease.__exit__, exc_type, exc, tb)
        return await asyncio.shield(release)
    return lease.__exit__(exc_type, exc, tb)
