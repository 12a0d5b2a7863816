"""The pool report: "bad exit or bad site?" answered from one ``pool.snapshot()``.

One mechanism, :func:`verdict`, decides which exits and which sites are bad; two renderers
show it beside the figures it came from: :func:`render_terminal` (``rich``, the ``report``
extra) and :func:`render_html` (a self-contained page: inline CSS, no script, no external
asset). ``exitpool report SNAPSHOT.json`` is the command line for both.

Nothing here reads a credential: the snapshot carries proxies masked by the core already, and
the renderers show exit ids and masked proxies only.

The package, one module a part: ``_schema`` (reading a snapshot and checking its shape),
``_verdict`` (which exits and sites are bad, and why), ``_format`` (figures in words and
success rates in colour, shared by both renderers), ``_layout`` (what both renderers show, in
their order), ``_terminal`` and ``_html`` (the two renderers).
"""

from __future__ import annotations

from ._format import _rgb as _rgb
from ._html import render_html
from ._schema import STATES as STATES
from ._schema import SnapshotError, load
from ._schema import check as check
from ._terminal import TERMINAL_EXITS as TERMINAL_EXITS
from ._terminal import render_terminal
from ._verdict import FAIL_BELOW as FAIL_BELOW
from ._verdict import Finding, Verdict, verdict
from ._verdict import summary as summary

__all__ = ["Finding", "SnapshotError", "Verdict", "load", "render_html", "render_terminal", "verdict"]
