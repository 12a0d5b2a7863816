"""What both fuzzers share: proxies built from fuzzer bytes with a planted password, so that
every place the password could leak to can be searched for it.

A structured proxy puts PLANT only where every shape of the parser reads a password; the
fragments around it never contain PLANT, whitespace (a token boundary) or, where the shape
would read them as another field, ``=`` and ``:``. So finding PLANT in an error message, a
repr or an exit id is a leak, never the fuzzer's own doing.
"""

from __future__ import annotations

import re
import urllib.parse
from typing import Optional

PLANT = "Pl4ntedS3cret"
# A password may be cut by what splits a line or a URL: whitespace (a token boundary), `:`,
# `@`, `/`, `#` (a comment after whitespace). Never `=`, which would make a piece a field.
SEPARATORS = [" ", "\t", "  ", ":", "@", "/", "#", ";", "%", " :", "@ "]
# Every 4-character window of the password: a message must show none of them.
FRAGMENT = 4
SCHEMES = ["http", "https", "socks5", "socks5h", "HTTP", "ftp", "socks4", ""]
HOSTS = ["gw.example", "10.0.0.1", "[::1]", "[2001:db8::7]", "xn--bcher-kva.example", "localhost", ""]
SHAPES = ("url", "hostport_userpass", "userpass_at_hostport")


class CheckFailed(AssertionError):
    """A property the fuzzer checks did not hold: the input is a finding."""


def fragment(fdp, limit: int, forbid: str = "") -> str:
    """A short fuzzed string that cannot carry PLANT or split a token."""
    s = fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(0, limit))
    s = re.sub(r"\s", "", s)
    for c in forbid:
        s = s.replace(c, "")
    # No piece of the password either, so that finding one in a message is always a leak.
    changed = True
    while changed:
        changed = False
        for w in windows(PLANT):
            if w in s:
                s, changed = s.replace(w, ""), True
    return s


def windows(password: str) -> list:
    """The password's runs of FRAGMENT characters that hold no whitespace (what a message could
    quote of it: it splits at whitespace)."""
    return sorted(
        {
            password[i : i + FRAGMENT]
            for i in range(len(password) - FRAGMENT + 1)
            if not any(c.isspace() for c in password[i : i + FRAGMENT])
        }
    )


def spaced_password(fdp) -> str:
    """PLANT cut by one to three separators, a space among them most of the time."""
    password = PLANT
    for _ in range(fdp.ConsumeIntInRange(1, 3)):
        at = fdp.ConsumeIntInRange(1, len(password) - 1)
        password = password[:at] + fdp.PickValueInList(SEPARATORS) + password[at:]
    return password


def spaced_proxy(fdp) -> str:
    """A well-formed proxy in one of the shapes whose password holds a separator."""
    shape = fdp.PickValueInList(list(SHAPES))
    password = spaced_password(fdp)
    user = fdp.PickValueInList(["user", "user-sess-1", "u", "ü"])
    host = fdp.PickValueInList(HOSTS[:-1])
    port = str(fdp.ConsumeIntInRange(1, 65535))
    if shape == "url":
        return f"{fdp.PickValueInList(SCHEMES[:4])}://{user}:{password}@{host}:{port}"
    if shape == "hostport_userpass":
        return f"{host}:{port}:{user}:{password}"
    return f"{user}:{password}@{host}:{port}"


def check_no_fragment(where: str, text: str) -> None:
    """No run of FRAGMENT characters of the planted password in `text` (raw or decoded)."""
    for shown in (text, urllib.parse.unquote(text)):
        for w in windows(PLANT):
            if w in shown:
                raise CheckFailed(f"a piece {w!r} of the planted password appears in {where}: {text!r}")


def planted_proxy(fdp, well_formed: Optional[bool] = None) -> str:
    """A proxy string, in one of the shapes proxy lists use, whose password contains PLANT.
    Half of them are well formed apart from the password, so that parsing gets past the host
    (all of them with ``well_formed=True``: a shape any reader takes for a proxy)."""
    shape = fdp.PickValueInList(list(SHAPES))
    if well_formed is None:
        well_formed = fdp.ConsumeBool()
    suffix = fragment(fdp, 6)
    password = PLANT + suffix
    if fdp.ConsumeBool():  # percent-encode some of it: the parser decodes URL passwords
        password = "".join(urllib.parse.quote(c, safe="") if fdp.ConsumeBool() else c for c in password)
    if well_formed:
        user = fdp.PickValueInList(["user", "user-sess-1", "u", "", "user%40x", "ü"])
        host = fdp.PickValueInList(HOSTS[:-1])
        port = str(fdp.ConsumeIntInRange(1, 65535))
    else:
        user = fragment(fdp, 8, forbid="=:" if shape == "userpass_at_hostport" else "=")
        # A `host:port:user:pass` line whose host and port read `http://...` is a URL to every
        # reader (its password is what follows the first `:` after `//`): no `/` there.
        around = "=/" if shape == "hostport_userpass" else "="
        host = fdp.PickValueInList(HOSTS) if fdp.ConsumeBool() else fragment(fdp, 12, forbid=around)
        port = str(fdp.ConsumeIntInRange(0, 70000)) if fdp.ConsumeBool() else fragment(fdp, 5, forbid=around)
    if shape == "url":
        scheme = fdp.PickValueInList(SCHEMES[:4] if well_formed else SCHEMES)
        tail = fragment(fdp, 4, forbid="=") if fdp.ConsumeBool() and not well_formed else ""
        return f"{scheme}://{user}:{password}@{host}:{port}{tail}"
    if shape == "hostport_userpass":
        return f"{host}:{port}:{user}:{password}"
    return f"{user}:{password}@{host}:{port}"


def unplanted(text: str) -> str:
    return text.replace(PLANT, "")


def check_no_plant(where: str, text: str) -> None:
    decoded = urllib.parse.unquote(text)
    if PLANT in text or PLANT in decoded:
        raise CheckFailed(f"the planted password appears in {where}: {text!r}")


def check_exit(e, planted: bool) -> None:
    """Every printable rendering of a parsed exit hides its password; the URL with credentials
    parses back to the same exit."""
    from exitpool import Exit

    shown = [repr(e), str(e), e.masked_proxy, e.exit_id, repr(e.tags)]
    if planted:
        for text in shown:
            check_no_plant("a rendering of a parsed exit", text)
    pw = e.password
    if pw and len(pw) >= 6:
        innocent = [e.username or "", e.host, str(e.port), e.scheme, e.exit_id, *e.tags, *e.tags.values()]
        if not any(pw in part for part in innocent):
            for text in shown[:3]:
                if pw in text:
                    raise CheckFailed(f"password {pw!r} shown in {text!r}")
    # The exit, rebuilt with Exit() from what it shows (its id, its URL with credentials and
    # its fields), is the same exit: the parser makes no id, URL or field that Exit() refuses
    # or reads differently (it refuses ids with control characters, as Exit() does).
    try:
        again = Exit(e.exit_id, e.proxy, ip=e.ip, capacity=e.capacity, tags=e.tags)
    except Exception as err:
        raise CheckFailed(f"{e!r}: Exit() refuses what the exit shows: {type(err).__name__}: {err}") from None
    fields = ("exit_id", "proxy", "scheme", "host", "port", "username", "password", "ip", "capacity", "tags")
    if [getattr(again, f) for f in fields] != [getattr(e, f) for f in fields]:
        raise CheckFailed(f"{e!r}: it does not rebuild to the same exit: {again!r}")
