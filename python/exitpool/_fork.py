"""A ``multiprocessing`` child's last releases reach the fleet's store before it ends.

A store sends a release with the next command, or by itself a moment later, and what still
waits when the store is dropped. A child started by fork or forkserver drops nothing: it ends
with ``os._exit``, after multiprocessing's own exit finalizers (``util.Finalize`` with an
``exitpriority``, run by ``util._exit_function``, also when the target raised). So each child
registers one that sends what every store of the process still holds (``_flush_stores``).

A child starts by clearing the finalizers it inherited, then runs the after-fork hooks: the
finalizer is registered from one of those when exitpool was imported before the child began
(a pool built in the parent, a forkserver that preloaded it), and at import when exitpool is
first imported inside a running child (a pool built there). A spawned child registers it too;
its stores would be dropped at exit anyway, and a second send finds nothing waiting.

Any fork (multiprocessing's or ``os.fork``) also holds every pool's and every store's locks
across the fork (``_before_fork``, ``_after_fork``): a lock held at that moment by the store's
sender thread, or by a thread waiting on the store, a snapshot or a free slot, would otherwise
stay held forever in the child, which has no such thread.
"""

from __future__ import annotations

import multiprocessing
import os
from multiprocessing import util

from ._core import _after_fork, _before_fork, _flush_stores


def _flush_at_exit(_hook: object = None) -> None:
    util.Finalize(None, _flush_stores, exitpriority=10)


class _Hook:
    """What the after-fork registry (weak references) holds on to for as long as exitpool is loaded."""


_hook = _Hook()
util.register_after_fork(_hook, _flush_at_exit)
if multiprocessing.parent_process() is not None:
    _flush_at_exit()
os.register_at_fork(before=_before_fork, after_in_parent=_after_fork, after_in_child=_after_fork)
