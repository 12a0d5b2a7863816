"""The ``exitpool`` command."""

from __future__ import annotations

import argparse
import sys
from typing import Any, Dict, List, NoReturn, Optional, Sequence, Tuple, Union

from ._core import DEFAULT_REPLICAS, Exit, Gateway, Ring, _position
from ._errors import Error
from ._exits import load_exits


class _Parser(argparse.ArgumentParser):
    """argparse that fails with one line and exit status 2, like the rest of the command."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"exitpool: {message}\n")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="exitpool",
        description="A native pool of proxy exits: which exit should this account use?",
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    a = sub.add_parser(
        "assign",
        help="print the exit each key is assigned to",
        description="Print the exit each key is assigned to by the ring (passwords masked).",
    )
    _source(a)
    a.add_argument("--replicas", type=int, default=DEFAULT_REPLICAS, help="ring points per unit of capacity (default %(default)s)")
    a.add_argument("keys", nargs="+", metavar="KEY", help="account or session keys")

    c = sub.add_parser(
        "churn",
        help="show how many keys move when the pool changes: ring vs hash %% n",
        description=(
            "Show, side by side, how many keys change exit when the pool changes, with the "
            "consistent-hash ring and with a naive hash %% n over the list."
        ),
    )
    _source(c)
    c.add_argument("--add", type=int, default=0, metavar="N", help="add N new exits")
    c.add_argument("--remove", action="append", default=[], metavar="ID", help="remove the exit with this id (repeatable)")
    c.add_argument("--keys", type=int, default=100_000, metavar="N", help="number of keys to place (default %(default)s)")
    c.add_argument("--replicas", type=int, default=DEFAULT_REPLICAS, help="ring points per unit of capacity (default %(default)s)")

    x = sub.add_parser(
        "exits",
        help="list the exits and gateways of a proxy list or config file",
        description=(
            "List the exits of a proxy list or of a config file (exitpool.toml): one row per exit, "
            "and one per gateway with its slot count, token lifetime and next rotation. Passwords masked."
        ),
    )
    _source(x)

    r = sub.add_parser(
        "report",
        help="render a pool snapshot: figures, exits by state, the exit x site heatmap, a verdict",
        description=(
            "Render a pool.snapshot() written as JSON: the pool figures, the exits by state, the "
            "exit x site success-rate heatmap (a red row is a bad exit, a red column a bad site) "
            "and a verdict naming the bad exits and bad sites."
        ),
    )
    r.add_argument("snapshot", metavar="SNAPSHOT", help="the snapshot JSON file, or - for standard input")
    r.add_argument("--html", metavar="FILE", help="write a self-contained HTML page (every exit and site) instead")
    r.add_argument("--top", type=int, default=40, metavar="N", help="terminal: show the worst N exits (default %(default)s)")
    r.add_argument("--width", type=int, default=None, metavar="COLUMNS", help="terminal: render this wide (default: the terminal's)")
    r.add_argument(
        "--live",
        action="store_true",
        help="re-render whenever SNAPSHOT changes (a running pool writing it, e.g. exitpool demo --snapshot FILE)",
    )
    r.add_argument("--for", dest="live_for", type=float, default=None, metavar="S", help="with --live: stop after S seconds")

    d = sub.add_parser(
        "demo",
        help="run a fleet through a loopback testbed three times, naive vs exitpool vs an oracle, and compare",
        description=(
            "Start loopback proxies and a guarded site (dead exits, a burned exit, a site "
            "incident, a pool resize), run the same fleet of accounts and keyless tasks through "
            "them three times -- a random pick from the proxy list, exitpool, and an oracle told the "
            "world's truth (the upper bound) -- and print them side by side. Nothing leaves this machine."
        ),
    )
    d.add_argument("--duration", type=float, default=60.0, metavar="S", help="seconds per run (default %(default)s)")
    d.add_argument("--quick", action="store_true", help="10 seconds per run")
    d.add_argument("--plain", action="store_true", help="no live display: progress lines, for CI logs")
    d.add_argument(
        "--snapshot",
        metavar="FILE",
        help="write exitpool's snapshot here every second while it runs (watch it with exitpool report --live FILE)",
    )
    return p


def _source(p: argparse.ArgumentParser) -> None:
    """Where the exits come from: a proxy list, or a config file (exits_file, [[exit]], [[gateway]])."""
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--exits", metavar="FILE", help="proxy list, one exit per line")
    g.add_argument("--config", metavar="FILE", help="config file (exitpool.toml): its exits_file, [[exit]] and [[gateway]] tables")


def _members(args: argparse.Namespace) -> List[Union[Exit, Gateway]]:
    """The exits and gateways named on the command line, in the file's order."""
    if args.exits is not None:
        return list(load_exits(args.exits))
    from ._config import from_config

    return list(from_config(lambda members, **_: members, args.config))


def _expanded(members: Sequence[Union[Exit, Gateway]], now: float) -> Tuple[List[Exit], Dict[str, Gateway]]:
    """The exits the ring places keys on (a gateway's slots with their tokens now), and the
    gateway of each slot id."""
    exits: List[Exit] = []
    gateway_of: Dict[str, Gateway] = {}
    for m in members:
        if isinstance(m, Gateway):
            slots = m.exits(at=now)
            exits.extend(slots)
            gateway_of.update((e.exit_id, m) for e in slots)
        else:
            exits.append(m)
    return exits, gateway_of


def _source_name(args: argparse.Namespace) -> str:
    return args.exits if args.exits is not None else args.config


def _exits(args: argparse.Namespace) -> int:
    """One row per exit and per gateway (never a slot's URL: its user name carries a token)."""
    import time

    now = time.time()
    rows = [("ID", "KIND", "SLOTS", "LIFETIME", "NEXT ROTATION", "CAPACITY", "TAGS", "PROXY")]
    for m in _members(args):
        tags = " ".join(f"{k}={v}" for k, v in sorted(m.tags.items())) or "-"
        if isinstance(m, Gateway):
            lifetime = "never" if m.lifetime is None else f"{m.lifetime:g} s"
            if m.lifetime is None:
                rotation = "never"
            else:
                at, slot = min((m.rotates_at(s, at=now), s) for s in range(m.slots))
                rotation = f"in {max(0.0, at - now):.0f} s ({m.slot_id(slot)})"
            rows.append((m.gateway_id, "gateway", f"{m.slots:,}", lifetime, rotation, f"{m.capacity} per slot", tags, m.masked_proxy))
        else:
            rows.append((m.exit_id, "exit", "-", "-", "-", str(m.capacity), tags, m.masked_proxy))
    if len(rows) == 1:
        raise _Usage(f"{_source_name(args)}: no exits in the file")
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for r in rows:
        print("  ".join(f"{c:<{w}}" for c, w in zip(r, widths)) + "  " + r[-1])
    return 0


def _demo(args: argparse.Namespace) -> int:
    try:
        from . import _demo as demo
    except ImportError as e:
        raise _Usage(f"the demo needs aiohttp: pip install 'exitpool[aiohttp]' ({e})") from None
    duration = 10.0 if args.quick else args.duration
    if not 2.0 <= duration <= 3600.0:
        raise _Usage(f"--duration must be between 2 and 3600 seconds, got {duration:g}")
    plain = args.plain or not sys.stdout.isatty()
    if not plain:
        try:
            import rich  # noqa: F401
        except ImportError:
            plain = True
    outcomes, snapshot = demo.run(duration, plain=plain, out=sys.stdout, snapshot_path=args.snapshot)
    rows = demo.table(outcomes)
    width = max(len(r[0]) for r in rows)
    print()
    print(f"{'':<{width}}  " + "  ".join(f"{k:>10}" for k in demo.KINDS))
    for name, *cells in rows:
        print(f"{name:<{width}}  " + "  ".join(f"{c:>10}" for c in cells))
    print()
    print(demo.headline(outcomes))
    print()
    print("naive: a random exit from the list for every request (accounts too); its 'falsely quarantined'")
    print("figure is what a 3-strikes health check would have quarantined on the same traffic.")
    print("oracle: told the world's truth (dead, burned and flagged exits, the site's per-IP limit, the")
    print("incident), it paces every exit to the limit and holds requests during the incident: the upper bound.")
    if args.snapshot:
        print(f"exitpool's final snapshot: {args.snapshot} (exitpool report {args.snapshot})")
    return 0


def _assign(args: argparse.Namespace) -> int:
    import time

    exits, gateway_of = _expanded(_members(args), time.time())
    ring = Ring(exits, replicas=args.replicas)
    width = max(len(k) for k in args.keys)
    for key, exit in zip(args.keys, ring.assign_many(args.keys)):
        # A slot is shown by its gateway: its own URL carries the slot's token.
        g = gateway_of.get(exit.exit_id)
        where = exit.masked_proxy if g is None else f"gateway {g.gateway_id} {g.masked_proxy}"
        print(f"{key:<{width}}  {exit.exit_id}  {where}")
    return 0


def _naive(keys: Sequence[str], ids: Sequence[str]) -> List[str]:
    n = len(ids)
    return [ids[_position(k) % n] for k in keys]


def _churn(args: argparse.Namespace) -> int:
    if args.keys < 1:
        raise _Usage(f"--keys must be at least 1, got {args.keys}")
    if args.add < 0:
        raise _Usage(f"--add must be 0 or more, got {args.add}")
    import time

    before_exits, _ = _expanded(_members(args), time.time())
    if not before_exits:
        raise _Usage(f"{_source_name(args)}: no exits in the file")
    ids = [e.exit_id for e in before_exits]
    missing = [r for r in args.remove if r not in ids]
    if missing:
        raise _Usage(f"--remove {missing[0]!r}: no exit with that id in {_source_name(args)}")
    if not args.add and not args.remove:
        raise _Usage("nothing changes: give --add N and/or --remove ID")

    before = Ring(before_exits, replicas=args.replicas)
    after = Ring(before_exits, replicas=args.replicas)
    for r in args.remove:
        after.remove(r)
    added: List[Exit] = []
    for i in range(args.add):
        new_id = f"new-{i + 1}"
        while new_id in before:
            new_id += "'"
        added.append(Exit(new_id, f"http://new-{i + 1}.invalid:8000"))
        after.add(added[-1])
    if len(after) == 0:
        raise _Usage("removing every exit leaves nothing to assign to")

    keys = [f"account-{i}" for i in range(args.keys)]
    ids_after = [i for i in ids if i not in set(args.remove)] + [e.exit_id for e in added]
    ring_moved = len(after.moved(before, keys))
    naive_before, naive_after = _naive(keys, ids), _naive(keys, ids_after)
    naive_moved = sum(1 for a, b in zip(naive_before, naive_after) if a != b)
    # What a perfect capacity-weighted scheme must move: the removed exits' share, plus the
    # share the new exits take from the rest.
    weight = {e.exit_id: max(1, e.capacity) for e in before_exits}
    w0 = sum(weight.values())
    w_removed = sum(weight[r] for r in args.remove)
    w1 = w0 - w_removed + sum(max(1, e.capacity) for e in added)
    floor = w_removed / w0 + (1 - w_removed / w0) * (len(added) / w1)
    n0, n1 = len(ids), len(ids_after)

    change = []
    if args.add:
        change.append(f"add {args.add}")
    if args.remove:
        change.append(f"remove {', '.join(args.remove)}")
    print(f"pool: {n0} exits -> {n1} exits ({'; '.join(change)}), {args.keys:,} keys, ring replicas {args.replicas}")
    print()
    print(f"{'':<22}{'keys moved':>12}{'share':>9}")
    print(f"{'consistent-hash ring':<22}{ring_moved:>12,}{ring_moved / args.keys:>9.2%}")
    print(f"{'naive hash % n':<22}{naive_moved:>12,}{naive_moved / args.keys:>9.2%}")
    print(f"{'fair share':<22}{round(floor * args.keys):>12,}{floor:>9.2%}")
    return 0


def _report(args: argparse.Namespace) -> int:
    from . import _report as report

    if args.top < 1:
        raise _Usage(f"--top must be at least 1, got {args.top}")
    if args.width is not None and args.width < 40:
        raise _Usage(f"--width must be at least 40, got {args.width}")
    if args.html is None:
        try:
            from rich.console import Console
        except ImportError:
            raise _Usage("the terminal report needs rich: pip install 'exitpool[report]' (or use --html FILE)") from None
    if args.live:
        if args.html is not None or args.snapshot == "-":
            raise _Usage("--live watches a snapshot file: give a path, and no --html")
        return _report_live(args, report, Console(highlight=False, width=args.width))
    try:
        snapshot = report.load(args.snapshot)
    except report.SnapshotError as e:
        raise _Usage(str(e)) from None
    if args.html is not None:
        page = report.render_html(snapshot)
        with open(args.html, "w", encoding="utf-8") as f:
            f.write(page)
        print(f"wrote {args.html}: {report.verdict(snapshot).line()}")
        return 0
    report.render_terminal(snapshot, Console(highlight=False, width=args.width), max_exits=args.top)
    return 0


def _report_live(args: argparse.Namespace, report: Any, console: Any) -> int:
    """Re-render whenever the file changes; bounded by --for, else until Ctrl-C."""
    import os
    import time

    deadline = None if args.live_for is None else time.monotonic() + args.live_for
    seen = None
    while deadline is None or time.monotonic() < deadline:
        try:
            stamp = os.stat(args.snapshot).st_mtime_ns
        except OSError:
            stamp = None
        if stamp is not None and stamp != seen:
            try:
                snapshot = report.load(args.snapshot)
            except report.SnapshotError:
                snapshot = None  # caught mid-write: the writer replaces it whole, look again
            if snapshot is not None:
                seen = stamp
                console.clear()
                report.render_terminal(snapshot, console, max_exits=args.top)
                console.print(f"[dim]live: {args.snapshot}, re-rendered when it changes (Ctrl-C to stop)[/dim]")
        time.sleep(0.25)
    return 0


class _Usage(Exception):
    pass


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return {"assign": _assign, "churn": _churn, "exits": _exits, "report": _report, "demo": _demo}[args.command](args)
    except (_Usage, Error, OSError) as e:
        print(f"exitpool: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
