"""Delivering the pool's events to the ``exitpool`` logger and to ``pool.on_event`` callbacks.

The core keeps events in a bounded buffer; the bindings hand new ones here after the call that
produced them. Formatting is lazy (nothing is formatted unless the logger would emit), and a
raising callback is logged, never raised into the lease that happened to trigger it."""

from __future__ import annotations

import logging
from typing import Any, Callable, Dict, List

from ._states import _ejected

logger = logging.getLogger("exitpool")

_WARNING_KINDS = frozenset(
    {
        "site_incident_opened",
        "global_incident_opened",
        "session_lost",
        "ejection_refused",
        "lease_expired",
        "exit_drifted",
        "probe_failed",
        "store_unavailable",
        "gateway_down",
        "gateway_credentials_rejected",
        "sticky_broken",
        "panic",
        "exits_reload_failed",
        "state_discarded",
        "state_save_failed",
    }
)

#: Routine events a large gateway makes many of (one per slot per token lifetime).
_DEBUG_KINDS = frozenset({"token_rotated"})


def _level(event: Dict[str, Any]) -> int:
    if event["kind"] in _WARNING_KINDS or _ejected(event["to"]):
        return logging.WARNING
    if event["kind"] in _DEBUG_KINDS:
        return logging.DEBUG
    return logging.INFO


def _deliver(listeners: List[Callable[[Dict[str, Any]], Any]], events: List[Dict[str, Any]]) -> None:
    for event in events:
        level = _level(event)
        if logger.isEnabledFor(level):
            logger.log(level, "%s exit=%s site=%s: %s", event["kind"], event["exit_id"], event["site"], event["message"])
        for fn in listeners:
            try:
                fn(event)
            except Exception:  # noqa: BLE001 - a callback must never break a lease
                logger.exception("exitpool: event callback %r raised; the pool carries on", fn)
