"""Fuzz the proxy-list parser (`load_exits` on lines and files) and `Exit(...)`.

Properties: nothing but `exitpool.InvalidInput` escapes; a parsed exit rebuilds with `Exit()`
from its id, URL and fields to the same exit; the planted password (see _plant.py) never
appears in an error message, a repr, a str, a masked URL or an exit id, even where a line puts
a proxy in the id column; and where the password is cut by a space or another separator (a
password with a space splits a line into tokens), no piece of it of 4 characters or more does.
Inputs are capped (`-max_len`), so a hang is a finding too
(`-timeout`). Run `python fuzz/fuzz_proxy_list.py -help=1` for libFuzzer's options; the
README's "Fuzzing" section has the commands.
"""

from __future__ import annotations

import os
import sys
import tempfile

import atheris

with atheris.instrument_imports(include=["exitpool", "_plant"]):
    from _plant import HOSTS, PLANT, CheckFailed, check_exit, check_no_fragment, check_no_plant, fragment, planted_proxy, spaced_proxy

    import exitpool
    from exitpool import Exit, InvalidInput, load_exits

MAX_LINES = 8
_TMP = tempfile.mkdtemp(prefix="exitpool-fuzz-")
_FILE = os.path.join(_TMP, "proxies.txt")


def _field(fdp) -> str:
    name = fdp.PickValueInList(["id", "ip", "capacity", "country", "kind", "", "9x", "_a-b"])
    if name == "capacity":
        value = str(fdp.ConsumeIntInRange(-5, 20000)) if fdp.ConsumeBool() else fragment(fdp, 6)
    elif name == "ip":
        value = fdp.PickValueInList(["93.184.10.7", "2001:db8::7", "::1", "300.1.1.1"]) if fdp.ConsumeBool() else fragment(fdp, 8)
    else:
        value = fragment(fdp, 8)
    return f"{name}={value}"


def _planted_line(fdp, proxies) -> str:
    tokens = []
    lead = fdp.ConsumeIntInRange(0, 2)
    if lead == 1:
        tokens.append(fragment(fdp, 10, forbid="=#"))  # an id column
    elif lead == 2:
        # A proxy where the id goes: a password there must never become the exit id (a
        # provider's `[::1]:8000:user:pass` did, before a second column).
        tokens.append(planted_proxy(fdp, well_formed=True))
        proxies.append(tokens[-1])
    if lead == 2 and fdp.ConsumeBool():
        tokens.append(f"{fdp.PickValueInList(HOSTS[:-1])}:{fdp.ConsumeIntInRange(1, 65535)}")
    else:
        proxy = planted_proxy(fdp)
        proxies.append(proxy)
        tokens.append(proxy)
    for _ in range(fdp.ConsumeIntInRange(0, 3)):
        tokens.append(_field(fdp))
    sep = fdp.PickValueInList([" ", "\t", "  "])
    line = sep.join(t for t in tokens if t)
    if fdp.ConsumeBool():
        line += " # " + fragment(fdp, 10)
    return line


def _parse(lines, planted: bool, via_file: bool) -> None:
    try:
        if via_file:
            with open(_FILE, "w", encoding="utf-8", newline="") as f:
                f.write("\n".join(lines))
            exits = load_exits(_FILE)
        else:
            exits = load_exits(lines)
    except InvalidInput as e:
        if planted:
            check_no_plant("an error message", str(e))
        return
    except UnicodeEncodeError:
        return  # the fuzzer's own write of an unencodable line, never the parser
    ids = [e.exit_id for e in exits]
    if len(set(ids)) != len(ids):
        raise CheckFailed(f"duplicate ids accepted: {ids!r}")
    for e in exits:
        check_exit(e, planted)


def _exit(fdp) -> None:
    planted = fdp.ConsumeBool()
    proxy = planted_proxy(fdp) if planted else fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(0, 60))
    kwargs = {}
    if fdp.ConsumeBool():
        kwargs["ip"] = fragment(fdp, 16)
    if fdp.ConsumeBool():
        kwargs["capacity"] = fdp.ConsumeIntInRange(-(2**70), 2**70) if fdp.ConsumeBool() else fdp.ConsumeIntInRange(-2, 12)
    if fdp.ConsumeBool():
        kwargs["tags"] = {fragment(fdp, 6): fragment(fdp, 6) for _ in range(fdp.ConsumeIntInRange(0, 3))}
    exit_id = fragment(fdp, 12) if planted else fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(0, 12))
    try:
        e = Exit(exit_id, proxy, **kwargs)
    except InvalidInput as err:
        if planted:
            check_no_plant("an error message", str(err))
        return
    check_exit(e, planted)


def _spaced(fdp) -> None:
    """A line whose password is cut by a space or another separator (a `host:port:user:pass`
    password may hold one): it is read whole or refused, and no message, repr or id shows a
    piece of it."""
    tokens = []
    if fdp.ConsumeBool():
        tokens.append(fragment(fdp, 10, forbid="=#:@"))  # an id column
    proxy = spaced_proxy(fdp)
    tokens.append(proxy)
    for _ in range(fdp.ConsumeIntInRange(0, 2)):
        tokens.append(_field(fdp))
    line = fdp.PickValueInList([" ", "\t"]).join(t for t in tokens if t)
    try:
        # Exit() takes a URL whole: its userinfo ends at the last `@`, spaces and all.
        exits = Exit("x", proxy) if "://" in proxy and fdp.ConsumeBool() else load_exits([line])
    except InvalidInput as e:
        check_no_fragment("an error message", str(e))
        return
    for e in exits if isinstance(exits, list) else [exits]:
        for text in (repr(e), str(e), e.masked_proxy, e.exit_id, repr(e.tags)):
            check_no_fragment("a rendering of a parsed exit", text)


def TestOneInput(data: bytes) -> None:
    # The first byte picks the kind of input; text seeds (fuzz/seeds/proxy_list/) start with
    # a printable one and are read as they are.
    kind, rest = data[:1], data[1:]
    if kind == b"\x00":  # lines in the shapes users have, with the planted password
        fdp = atheris.FuzzedDataProvider(rest)
        proxies = []
        lines = [_planted_line(fdp, proxies) for _ in range(fdp.ConsumeIntInRange(1, MAX_LINES))]
        _parse(lines, planted=True, via_file=fdp.ConsumeBool())
    elif kind == b"\x01":
        _exit(atheris.FuzzedDataProvider(rest))
    elif kind == b"\x03":
        _spaced(atheris.FuzzedDataProvider(rest))
    elif kind == b"\x02":  # raw bytes through a file, where the BOM and the encoding are read too
        with open(_FILE, "wb") as f:
            f.write(rest)
        try:
            exits = load_exits(_FILE)
        except InvalidInput:
            return
        for e in exits:
            check_exit(e, planted=False)
    else:  # raw text, as lines
        _parse(data.decode("utf-8", "replace").splitlines()[:64], planted=False, via_file=False)


def main() -> None:
    assert PLANT not in repr(exitpool.__version__)
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
