"""Targets for multiprocessing children in tests/test_store_faults.py.

exitpool is imported inside each target, not here: a forkserver or spawned child that unpickles
a target imports this module first, and exitpool must also work when it is first imported in a
child that is already running.
"""

# Pools a child keeps for its whole life, as a worker that builds its pool once does: nothing
# drops them before the child ends.
_kept = []


def lease_once(url: str, namespace: str) -> None:
    """Builds a pool (kept), takes and releases one lease on its only exit, and returns."""
    import exitpool

    pool = exitpool.Pool([exitpool.Exit("e0", "http://127.0.0.1:9100")], store=url, namespace=namespace, max_leases=1, lease_ttl=60)
    _kept.append(pool)
    with pool.lease():
        pass


def lease_on(pool) -> None:
    """Takes and releases one lease on a pool the child inherited (fork), and returns."""
    with pool.lease():
        pass
