"""`Exit`: parsing proxy URLs, masking credentials, value semantics, and refusing bad input."""

from __future__ import annotations

import copy
import math
import pickle
from urllib.parse import unquote, urlsplit

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import exitpool
from exitpool import Exit, InvalidInput

SECRET = "hunter2"


# --- schemes and the parts of a proxy URL -------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "scheme", "host", "port", "proxy"),
    [
        ("http://user:pw@gw.example:8000", "http", "gw.example", 8000, "http://user:pw@gw.example:8000"),
        ("https://user:pw@gw.example:8443", "https", "gw.example", 8443, "https://user:pw@gw.example:8443"),
        ("socks5://user:pw@10.0.0.1:1080", "socks5", "10.0.0.1", 1080, "socks5://user:pw@10.0.0.1:1080"),
        ("socks5h://user:pw@gw.example:1080", "socks5h", "gw.example", 1080, "socks5h://user:pw@gw.example:1080"),
        # Default ports of http and https are filled in, so every client sees the same URL.
        ("http://user:pw@gw.example", "http", "gw.example", 80, "http://user:pw@gw.example:80"),
        ("https://user:pw@gw.example", "https", "gw.example", 443, "https://user:pw@gw.example:443"),
        ("http://gw.example:80", "http", "gw.example", 80, "http://gw.example:80"),
        # Scheme and host are case-insensitive; the URL is normalised to lower case.
        ("SOCKS5H://GW.Example:1080", "socks5h", "gw.example", 1080, "socks5h://gw.example:1080"),
        # Surrounding whitespace (a copy-paste) and a trailing slash are harmless.
        ("  http://gw.example:3128/ \n", "http", "gw.example", 3128, "http://gw.example:3128"),
        ("http://[::1]:3128", "http", "[::1]", 3128, "http://[::1]:3128"),
    ],
)
def test_schemes_hosts_and_ports(raw, scheme, host, port, proxy):
    e = Exit("sess-a1b2", raw)
    assert (e.scheme, e.host, e.port, e.proxy) == (scheme, host, port, proxy)
    assert e.exit_id == "sess-a1b2"


def test_defaults_and_attributes():
    e = Exit("sess-a1b2", "http://user:pw@gw.example:8000")
    assert e.ip is None
    assert e.capacity == 1
    assert e.tags == {}
    assert e.username == "user"
    assert e.password == "pw"
    assert e.proxies == {"http": "http://user:pw@gw.example:8000", "https": "http://user:pw@gw.example:8000"}

    e = Exit("sess-a1b2", "http://gw.example:8000", ip="93.184.10.7", capacity=3, tags={"country": "DE", "kind": "mobile"})
    assert e.ip == "93.184.10.7"
    assert e.capacity == 3
    assert e.tags == {"country": "DE", "kind": "mobile"}
    assert e.username is None and e.password is None
    # An IPv6 exit address and surrounding spaces are fine.
    assert Exit("x", "http://h:1", ip=" 2001:db8::1 ").ip == "2001:db8::1"
    # Capacity 1 and the largest capacity are accepted (0 is refused: pool.bench takes an exit out).
    assert Exit("x", "http://h:1", capacity=1).capacity == 1
    assert Exit("x", "http://h:1", capacity=10_000).capacity == 10_000


def test_exit_is_immutable_and_tags_are_a_copy():
    e = Exit("sess-a1b2", "http://gw.example:8000", tags={"country": "DE"})
    with pytest.raises(AttributeError):
        e.capacity = 5
    tags = e.tags
    tags["country"] = "FR"
    assert e.tags == {"country": "DE"}


def test_ip_must_be_keyword():
    with pytest.raises(TypeError):
        Exit("sess-a1b2", "http://gw.example:8000", "93.184.10.7")


# --- credentials with reserved characters ---------------------------------------------------

PASSWORD = "p@s/s:w#rd"
ENCODED = "http://user:p%40s%2Fs%3Aw%23rd@gw.example:8000"


@pytest.mark.parametrize(
    "raw",
    [
        "http://user:p@s/s:w#rd@gw.example:8000",  # raw: the userinfo ends at the last @
        ENCODED,  # percent-encoded
        "http://user:p%40s/s%3Aw#rd@gw.example:8000",  # a mix of both
    ],
)
def test_reserved_characters_in_password(raw):
    e = Exit("sess-a1b2", raw)
    assert e.password == PASSWORD
    assert e.username == "user"
    assert (e.host, e.port) == ("gw.example", 8000)
    assert e.proxy == ENCODED
    assert e.proxies == {"http": ENCODED, "https": ENCODED}
    # What requests, aiohttp and httpx do with the URL: split it, then unquote the password.
    parts = urlsplit(e.proxy)
    assert unquote(parts.password) == PASSWORD
    assert (parts.username, parts.hostname, parts.port) == ("user", "gw.example", 8000)


def test_reserved_characters_in_username():
    e = Exit("sess-a1b2", "http://us%40er%3Ax:p%3Aw@gw.example:8000")
    assert e.username == "us@er:x"
    assert e.password == "p:w"
    assert e.proxy == "http://us%40er%3Ax:p%3Aw@gw.example:8000"
    assert e.masked_proxy == "http://us%40er%3Ax:[secure]@gw.example:8000"


def test_percent_that_starts_no_escape_is_kept():
    e = Exit("sess-a1b2", "http://user:100%@gw.example:8000")
    assert e.password == "100%"
    assert e.proxy == "http://user:100%25@gw.example:8000"
    assert unquote(urlsplit(e.proxy).password) == "100%"


def test_unicode_and_space_in_password():
    e = Exit("sess-a1b2", "http://user:pä ss€@gw.example:8000")
    assert e.password == "pä ss€"
    assert e.proxy == "http://user:p%C3%A4%20ss%E2%82%AC@gw.example:8000"
    assert unquote(urlsplit(e.proxy).password) == "pä ss€"


def test_reencoded_proxy_parses_back_to_the_same_exit():
    e = Exit("sess-a1b2", "socks5h://us er:p@s/s:w#rd%@gw.example:1080")
    again = Exit("sess-a1b2", e.proxy)
    assert again == e
    assert (again.username, again.password) == ("us er", "p@s/s:w#rd%")


# --- masking exactly like httpx ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "masked"),
    [
        ("http://user:hunter2@gw.example:8000", "http://user:[secure]@gw.example:8000"),
        ("https://user:hunter2@gw.example", "https://user:[secure]@gw.example:443"),
        ("socks5://user:hunter2@10.0.0.1:1080", "socks5://user:[secure]@10.0.0.1:1080"),
        ("socks5h://user:hunter2@gw.example:1080", "socks5h://user:[secure]@gw.example:1080"),
        ("http://user:p@hunter2/s:w#rd@gw.example:8000", "http://user:[secure]@gw.example:8000"),
        ("http://user:p%40hunter2%2F@gw.example:8000", "http://user:[secure]@gw.example:8000"),
        # httpx masks whenever the userinfo has a colon, even around an empty part.
        ("http://:hunter2@gw.example:8000", "http://:[secure]@gw.example:8000"),
        ("http://user:@gw.example:8000", "http://user:[secure]@gw.example:8000"),
        # No password: nothing to mask, the username stays.
        ("http://user@gw.example:8000", "http://user@gw.example:8000"),
        ("http://gw.example:8000", "http://gw.example:8000"),
    ],
)
def test_masked_proxy_like_httpx(raw, masked):
    e = Exit("sess-a1b2", raw)
    assert e.masked_proxy == masked
    assert repr(e) == f"Exit('sess-a1b2', '{masked}')"
    assert str(e) == f"sess-a1b2 via {masked}"
    for shown in (repr(e), str(e), e.masked_proxy, f"{e}", f"{e!r}", repr([e]), repr({"k": e})):
        assert SECRET not in shown
        assert "hunter" not in shown


@pytest.mark.parametrize(
    "raw",
    [
        "http://user:hunter2@gw.example:8000",
        "https://user:p@hunter2/s:w#rd@gw.example:8443",
        "socks5://us%40er%3Ax:hunter2%3A@gw.example:1080",
        "socks5h://user:hunter2 ä€@gw.example:1080",
        "http://:hunter2@gw.example:8000",
        "http://user:@gw.example:8000",
        "http://user@gw.example:8000",
        "http://gw.example:8000",
        "http://user:hunter2@[2001:db8::1]:3128",
    ],
)
def test_masking_and_credentials_agree_with_httpx(raw):
    # httpx is what most users print proxy URLs with: the mask must be its mask, character for
    # character, and httpx must read the same credentials out of `.proxy`.
    e = Exit("sess-a1b2", raw)
    url = httpx.URL(e.proxy)
    assert repr(url) == f"URL('{e.masked_proxy}')"
    assert (url.username, url.password) == (e.username or "", e.password or "")  # httpx says "" for none
    assert (url.host, url.port) == (e.host.strip("[]"), e.port)


def test_repr_shows_every_non_default_field():
    e = Exit(
        "sess-a1b2",
        "http://user:hunter2@gw.example:8000",
        ip="93.184.10.7",
        capacity=3,
        tags={"kind": "mobile", "country": "DE"},
    )
    assert repr(e) == (
        "Exit('sess-a1b2', 'http://user:[secure]@gw.example:8000', ip='93.184.10.7', capacity=3, tags={'country': 'DE', 'kind': 'mobile'})"
    )
    assert str(e) == "sess-a1b2 via http://user:[secure]@gw.example:8000"
    assert repr(Exit("出口-東京", "http://h:1", capacity=2)) == "Exit('出口-東京', 'http://h:1', capacity=2)"


# --- equality, hashing, pickling ---------------------------------------------------------------


def test_equal_exits_are_equal_and_hash_alike():
    a = Exit("sess-a1b2", "http://user:p@s/s:w#rd@gw.example:8000", ip="93.184.10.7", capacity=3, tags={"c": "DE"})
    b = Exit("sess-a1b2", ENCODED, ip="93.184.10.7", capacity=3, tags={"c": "DE"})
    c = Exit("sess-a1b2", "HTTP://user:p%40s%2Fs%3Aw%23rd@GW.EXAMPLE:8000", ip="93.184.10.7", capacity=3, tags={"c": "DE"})
    assert a == b == c
    assert not (a != b)
    assert hash(a) == hash(b) == hash(c)
    assert len({a, b, c}) == 1
    assert {a: "x"}[b] == "x"


@pytest.mark.parametrize(
    "other",
    [
        Exit("sess-c3d4", ENCODED, ip="93.184.10.7", capacity=3, tags={"c": "DE"}),
        Exit("sess-a1b2", "http://user:other@gw.example:8000", ip="93.184.10.7", capacity=3, tags={"c": "DE"}),
        Exit("sess-a1b2", "http://user2:p%40s%2Fs%3Aw%23rd@gw.example:8000", ip="93.184.10.7", capacity=3, tags={"c": "DE"}),
        Exit("sess-a1b2", "https://user:p%40s%2Fs%3Aw%23rd@gw.example:8000", ip="93.184.10.7", capacity=3, tags={"c": "DE"}),
        Exit("sess-a1b2", "http://user:p%40s%2Fs%3Aw%23rd@gw.example:8001", ip="93.184.10.7", capacity=3, tags={"c": "DE"}),
        Exit("sess-a1b2", ENCODED, ip="93.184.10.8", capacity=3, tags={"c": "DE"}),
        Exit("sess-a1b2", ENCODED, capacity=3, tags={"c": "DE"}),
        Exit("sess-a1b2", ENCODED, ip="93.184.10.7", capacity=2, tags={"c": "DE"}),
        Exit("sess-a1b2", ENCODED, ip="93.184.10.7", capacity=3, tags={"c": "FR"}),
        Exit("sess-a1b2", ENCODED, ip="93.184.10.7", capacity=3),
    ],
)
def test_exits_differing_in_any_field_are_not_equal(other):
    base = Exit("sess-a1b2", ENCODED, ip="93.184.10.7", capacity=3, tags={"c": "DE"})
    assert base != other
    assert not (base == other)
    assert len({base, other}) == 2


def test_exit_is_not_equal_to_other_types():
    e = Exit("sess-a1b2", "http://gw.example:8000")
    assert e != "sess-a1b2"
    assert e != "http://gw.example:8000"
    assert e != None  # noqa: E711
    assert e != ("sess-a1b2", "http://gw.example:8000")


@pytest.mark.parametrize("protocol", range(2, pickle.HIGHEST_PROTOCOL + 1))
def test_pickle_round_trip(protocol):
    e = Exit("sess-ü", "socks5h://user:p@s/s:w#rd@gw.example:1080", ip="2001:db8::1", capacity=2, tags={"country": "DE"})
    back = pickle.loads(pickle.dumps(e, protocol))
    assert type(back) is Exit
    assert back == e
    assert hash(back) == hash(e)
    assert back.password == "p@s/s:w#rd"
    assert (back.exit_id, back.proxy, back.ip, back.capacity, back.tags) == (
        e.exit_id,
        e.proxy,
        e.ip,
        e.capacity,
        e.tags,
    )


def test_copy_and_deepcopy():
    e = Exit("sess-a1b2", "http://user:pw@gw.example:8000", capacity=2, tags={"k": "v"})
    assert copy.copy(e) == e
    assert copy.deepcopy(e) == e
    assert copy.deepcopy([e])[0].password == "pw"


# --- bad input: InvalidInput (a ValueError) with an exact, masked message ----------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            dict(proxy="ftp://user:hunter2@gw.example:21"),
            'bad proxy URL "ftp://user:[secure]@gw.example:21": unsupported scheme (expected http, https, socks5 or socks5h)',
        ),
        (
            dict(proxy="socks4://user:hunter2@gw.example:1080"),
            'bad proxy URL "socks4://user:[secure]@gw.example:1080": unsupported scheme (expected http, https, socks5 or socks5h)',
        ),
        (
            dict(proxy="user:hunter2@gw.example:8000"),
            'bad proxy URL "user:[secure]@gw.example:8000": no scheme (expected http://, https://, socks5:// or socks5h://)',
        ),
        (
            dict(proxy="gw.example:8000:user:hunter2"),
            'bad proxy URL "gw.example:8000:user:[secure]": no scheme (expected http://, https://, socks5:// or socks5h://)',
        ),
        (
            dict(proxy=""),
            'bad proxy URL "": no scheme (expected http://, https://, socks5:// or socks5h://)',
        ),
        (
            dict(proxy="http://user:hunter2@gw.example:99999"),
            'bad proxy URL "http://user:[secure]@gw.example:99999": invalid port number',
        ),
        (
            dict(proxy="http://user:hunter2@gw.example:65536"),
            'bad proxy URL "http://user:[secure]@gw.example:65536": invalid port number',
        ),
        (
            dict(proxy="http://user:hunter2@gw.example:port"),
            'bad proxy URL "http://user:[secure]@gw.example:port": invalid port number',
        ),
        (
            dict(proxy="http://user:hunter2@gw.example:-1"),
            'bad proxy URL "http://user:[secure]@gw.example:-1": invalid port number',
        ),
        (
            dict(proxy="socks5://user:hunter2@gw.example"),
            'bad proxy URL "socks5://user:[secure]@gw.example": socks5 proxy needs a port',
        ),
        (
            dict(proxy="socks5h://user:hunter2@gw.example"),
            'bad proxy URL "socks5h://user:[secure]@gw.example": socks5h proxy needs a port',
        ),
        (
            dict(proxy="http://user:hunter2@gw.example:8000/path"),
            'bad proxy URL "http://user:[secure]@gw.example:8000/path": a proxy URL has no path, query or fragment',
        ),
        (
            dict(proxy="http://user:hunter2@"),
            'bad proxy URL "http://user:[secure]@": no host',
        ),
        (
            dict(proxy="http://user:%FFhunter2@gw.example:8000"),
            'bad proxy URL "http://user:[secure]@gw.example:8000": password is not UTF-8 once decoded',
        ),
        (
            dict(capacity=-1),
            "capacity -1 is outside 1..=10000",
        ),
        (
            dict(capacity=10_001),
            "capacity 10001 is outside 1..=10000",
        ),
        (
            dict(capacity=10**30),
            "capacity 1000000000000000000000000000000 is outside 1..=10000",
        ),
        (
            dict(capacity=1.0),
            "capacity must be a whole number, got 1.0",
        ),
        (
            dict(capacity=2.5),
            "capacity must be a whole number, got 2.5",
        ),
        (
            dict(capacity=math.nan),
            "capacity must be a whole number, got nan",
        ),
        (
            dict(capacity=math.inf),
            "capacity must be a whole number, got inf",
        ),
        (
            dict(capacity=True),
            "capacity must be a whole number, got True",
        ),
        (
            dict(capacity=False),
            "capacity must be a whole number, got False",
        ),
        (
            dict(capacity="3"),
            "capacity must be a whole number, got a str",
        ),
        (
            dict(ip="93.184.10"),
            'exit "sess-a1b2": ip "93.184.10" is not an IP address',
        ),
        (
            dict(ip="93.184.10.7/32"),
            'exit "sess-a1b2": ip "93.184.10.7/32" is not an IP address',
        ),
        (
            dict(ip="gw.example"),
            'exit "sess-a1b2": ip "gw.example" is not an IP address',
        ),
        (
            dict(ip=""),
            'exit "sess-a1b2": ip "" is not an IP address',
        ),
        (
            dict(exit_id=""),
            'exit id "" must be non-empty with no surrounding spaces',
        ),
        (
            dict(exit_id=" sess-a1b2"),
            'exit id " sess-a1b2" must be non-empty with no surrounding spaces',
        ),
        (
            dict(exit_id="sess-a1b2\n"),
            'exit id "sess-a1b2\\n" must be non-empty with no surrounding spaces',
        ),
        (
            dict(exit_id="sess\x00a1b2"),
            'exit id "sess\\0a1b2" must not contain control characters',
        ),
        (
            dict(tags={"country": 49}),
            "tags must map str to str, got 'country': 49",
        ),
    ],
)
def test_bad_input_raises_invalid_input_with_exact_message(kwargs, message):
    args = dict(exit_id="sess-a1b2", proxy="http://user:hunter2@gw.example:8000")
    args.update(kwargs)
    exit_id, proxy = args.pop("exit_id"), args.pop("proxy")
    with pytest.raises(InvalidInput) as info:
        Exit(exit_id, proxy, **args)
    assert str(info.value) == message
    assert SECRET not in repr(info.value)
    assert all(SECRET not in str(a) for a in info.value.args)
    # The one exception type users catch for bad input, also what `except ValueError` catches.
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, exitpool.Error)


def test_port_zero_is_refused():
    # Nothing listens on port 0: a proxy URL naming it is a typo, and accepting it only moves
    # the failure to the first request through the exit.
    with pytest.raises(InvalidInput) as info:
        Exit("sess-a1b2", "http://user:hunter2@gw.example:0")
    assert "port" in str(info.value)
    assert '"http://user:[secure]@gw.example:0"' in str(info.value)
    assert SECRET not in str(info.value)


@pytest.mark.parametrize(
    ("raw", "port"),
    [
        ("http://gw.example:080", 80),
        ("https://gw.example:080", 80),
        ("https://gw.example:0080", 80),
        ("socks5://gw.example:01080", 1080),
        ("socks5://gw.example:080", 80),
    ],
)
def test_leading_zeros_in_port(raw, port):
    # A URL parser reads `:080` as port 80 (urllib, httpx and WHATWG URL all agree); the exit
    # must connect where every HTTP client would, not fall back to the scheme's default port.
    assert urlsplit(raw).port == port
    assert Exit("sess-a1b2", raw).port == port


def test_wrong_types_raise_type_error_without_the_password():
    for args in [("sess-a1b2", b"http://user:hunter2@gw.example:8000"), (None, "http://user:hunter2@gw.example:8000")]:
        with pytest.raises(TypeError) as info:
            Exit(*args)
        assert SECRET not in str(info.value)


# --- properties --------------------------------------------------------------------------------

# Passwords made of anything printable, reserved URL characters and non-ASCII included. The
# sentinel makes sure the password cannot be a substring of the rest of a message by chance.
passwords = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc")),
    min_size=0,
    max_size=24,
).map(lambda s: f"Qz9{s}Xk7")


@settings(max_examples=300, deadline=None)
@given(password=passwords, scheme=st.sampled_from(["http", "https", "socks5", "socks5h"]))
def test_any_password_round_trips_or_fails_masked(password, scheme):
    raw = f"{scheme}://user:{password}@gw.example:8000"
    try:
        e = Exit("sess-a1b2", raw)
    except InvalidInput as err:
        # Only a percent-escape that decodes to invalid UTF-8 may fail, and it never shows the password.
        assert "password is not UTF-8 once decoded" in str(err)
        assert password not in str(err)
        assert unquote(password) not in str(err)
        return
    # `%XX` escapes are decoded exactly as a client would decode them.
    assert e.password == unquote(password)
    assert e.username == "user"
    assert (e.scheme, e.host, e.port) == (scheme, "gw.example", 8000)
    parts = urlsplit(e.proxy)
    assert unquote(parts.password) == e.password
    assert (parts.username, parts.hostname, parts.port) == ("user", "gw.example", 8000)
    # The encoded URL reads back to the same exit, and httpx reads and masks it the same way.
    assert Exit("sess-a1b2", e.proxy) == e
    url = httpx.URL(e.proxy)
    assert url.password == e.password
    assert repr(url) == f"URL('{e.masked_proxy}')"
    for shown in (repr(e), str(e), e.masked_proxy):
        assert e.password not in shown
        assert "[secure]" in shown


@settings(max_examples=300, deadline=None)
@given(exit_id=st.text(), proxy=st.text(), ip=st.none() | st.text(), capacity=st.integers())
def test_arbitrary_text_never_panics(exit_id, proxy, ip, capacity):
    # A Rust panic would surface as pyo3's PanicException, which is not an exitpool error.
    try:
        e = Exit(exit_id, proxy, ip=ip, capacity=capacity)
    except InvalidInput:
        return
    assert e.exit_id == exit_id
    assert 1 <= e.capacity <= 10_000
    assert repr(e).startswith("Exit(")


# --- every str and every integer argument of the public API (issue 13, points 12 and 13) ---------

from exitpool import ManualClock, Pool, Ring, load_exits  # noqa: E402

URL = f"http://user:{SECRET}@gw.example:8000"


def _pool(**kw):
    return Pool([Exit("a", URL, tags={"t": "x"}), Exit("b", URL)], clock=ManualClock(), **kw)


# Every entry point that takes a str, with the name its message must give. `s` is the bad text.
TEXT_ARGUMENTS = {
    "Exit exit_id": (lambda s: Exit(s, URL), "exit_id"),
    "Exit proxy": (lambda s: Exit("a", s), "proxy"),
    "Exit ip": (lambda s: Exit("a", URL, ip=s), "ip"),
    "Exit tag name": (lambda s: Exit("a", URL, tags={s: "x"}), "a tag name"),
    "Exit tag value": (lambda s: Exit("a", URL, tags={"t": s}), "a tag value"),
    "load_exits line": (lambda s: load_exits(["gw.example:1", s]), "line 2"),
    "load_exits path": (lambda s: load_exits("/nonexistent/\ud800" + s), "path"),
    "Ring salt": (lambda s: Ring([], salt=s), "salt"),
    "Ring.assign": (lambda s: Ring([Exit("a", URL)]).assign(s), "key"),
    "Ring.assign_many": (lambda s: Ring([Exit("a", URL)]).assign_many(["k", s]), "key"),
    "Ring.moved": (lambda s: Ring([Exit("a", URL)]).moved(Ring([Exit("b", URL)]), [s]), "key"),
    "Ring.remove": (lambda s: Ring([Exit("a", URL)]).remove(s), "exit_id"),
    "Pool strategy": (lambda s: _pool(strategy=s), "strategy"),
    "Pool store": (lambda s: _pool(store=s), "store"),
    "Pool namespace": (lambda s: _pool(store="memory://x", namespace=s), "namespace"),
    "Pool health key": (lambda s: _pool(health={s: 1}), "a health setting name"),
    "Pool warmup key": (lambda s: _pool(warmup={s: 1}), "a warmup setting name"),
    "Pool.lease key": (lambda s: _pool().lease(s), "key"),
    "Pool.lease site": (lambda s: _pool().lease("k", site=s), "site"),
    "Pool.acquire key": (lambda s: _pool().acquire(s), "key"),
    "Pool.acquire site": (lambda s: _pool().acquire(site=s), "site"),
    "Pool.acquire avoid": (lambda s: _pool().acquire(avoid=[s]), "an exit id in avoid"),
    "Pool.assign": (lambda s: _pool().assign(s), "key"),
    "Pool.end_session": (lambda s: _pool().end_session(s), "key"),
    "Pool.bench": (lambda s: _pool().bench(s), "exit_id"),
    "Pool.unbench": (lambda s: _pool().unbench(s), "exit_id"),
    "Pool.remove": (lambda s: _pool().remove(s), "exit_id"),
    "Pool.exit": (lambda s: _pool().exit(s), "exit_id"),
    "Pool.revive": (lambda s: _pool().revive(s), "exit_id"),
    "Pool.set_capacity": (lambda s: _pool().set_capacity(s, 2), "exit_id"),
    "Pool.state exit_id": (lambda s: _pool().state(s), "exit_id"),
    "Pool.state site": (lambda s: _pool().state("a", s), "site"),
    "Pool.subset name": (lambda s: _pool().subset(**{s: "x"}), "a subset tag name"),
    "Pool.subset value": (lambda s: _pool().subset(t=s), "a subset tag value"),
    "Pool.record_probe exit_id": (lambda s: _pool().record_probe(s, True), "exit_id"),
    "Pool.record_probe observed_ip": (lambda s: _pool().record_probe("a", True, observed_ip=s), "observed_ip"),
    "Pool.record_probe detail": (lambda s: _pool().record_probe("a", True, detail=s), "detail"),
    "Lease.report error": (lambda s: _pool().acquire().report(error=s), "error"),
    "Pool.from_config path": (lambda s: Pool.from_config("/nonexistent/\ud800" + s), "path"),
    "Pool.from_config keyword": (lambda s: Pool.from_config(_CONFIG, strategy=s), "strategy"),
}
_CONFIG = None


@pytest.fixture(scope="module", autouse=True)
def _config_file(tmp_path_factory):
    global _CONFIG
    path = tmp_path_factory.mktemp("cfg") / "exitpool.toml"
    path.write_text('[[exit]]\nproxy = "http://gw.example:8000"\n', encoding="utf-8")
    _CONFIG = str(path)


# Text with at least one lone surrogate somewhere, sometimes around a proxy URL.
surrogate_text = st.tuples(
    st.sampled_from(["", "a", URL, "gw.example:8000:user:" + SECRET]),
    st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF),
    st.text(max_size=8),
).map(lambda t: "".join(t))


@pytest.mark.parametrize("entry", sorted(TEXT_ARGUMENTS))
@settings(max_examples=15, deadline=None)
@given(s=surrogate_text)
def test_text_that_is_not_valid_text_is_invalid_input_naming_the_argument(entry, s):
    call, name = TEXT_ARGUMENTS[entry]
    with pytest.raises(InvalidInput) as info:
        call(s)
    message = str(info.value)
    # The argument is named just before the verdict (the config loader puts its own frame around).
    before, _, _ = message.partition(" is not valid text")
    assert before.endswith(name) or before.endswith(f"keyword argument {name} (given in code, not read from {_CONFIG}):"), message
    assert SECRET not in message
    # Membership is a question, not an input: no exit has such an id.
    assert s not in _pool() and s not in Ring([Exit("a", URL)])


U32, U64 = 2**32 - 1, 2**64 - 1
# Every integer argument, its range and how to pass it.
INT_ARGUMENTS = {
    "Exit capacity": (lambda n: Exit("a", URL, capacity=n), "capacity", 1, 10_000),
    "Pool.set_capacity": (lambda n: _pool().set_capacity("a", n), "capacity", 1, 10_000),
    "Ring replicas": (lambda n: Ring([], replicas=n), "replicas", 1, 100_000),
    "Pool replicas": (lambda n: _pool(replicas=n), "replicas", 1, 100_000),
    "Pool max_leases": (lambda n: _pool(max_leases=n), "max_leases", 1, U32),
    "Pool max_sessions": (lambda n: _pool(max_sessions=n), "max_sessions", 1, U32),
    "Pool max_pairings": (lambda n: _pool(max_pairings=n), "max_pairings", 1, U32),
    "Pool seed": (lambda n: _pool(seed=n), "seed", 0, U64),
    "Pool.events since": (lambda n: _pool().events(n), "since", 0, U64),
    **{
        # The outer lambda binds k now (ruff's B023 does not see through the immediate call).
        f"Pool health {k}": ((lambda k: lambda n: _pool(health={k: n}))(k), f"health {k}", 0, U32)  # noqa: B023
        for k in (
            "window",
            "min_calls",
            "captcha_consecutive",
            "recover_successes",
            "half_open_trials",
            "dead_after",
            "min_in_service",
            "incident_min_exits",
        )
    },
}


def _shown(n: int) -> str:
    s = str(n)
    return s if len(s) <= 40 else f"{s[:20]}... ({len(s.lstrip('-'))} digits)"


@pytest.mark.parametrize("entry", sorted(INT_ARGUMENTS))
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_an_integer_out_of_its_range_is_invalid_input_naming_it_the_value_and_the_range(entry, data):
    call, name, lo, hi = INT_ARGUMENTS[entry]
    n = data.draw(
        st.one_of(
            st.integers(max_value=lo - 1),
            st.integers(min_value=hi + 1),
            st.sampled_from([lo - 1, hi + 1, -(2**64), 2**64, 2**128, -(2**200), 10**60]),
        )
    )
    with pytest.raises(InvalidInput) as info:
        call(n)
    assert str(info.value).startswith(f"{name} {_shown(n)} is outside {lo}..={hi}"), str(info.value)


# Every float argument (a duration, a factor) and how to pass it. The report's own numbers
# (latency, retry_after) have their property in tests/test_lease_end.py.
FLOAT_ARGUMENTS = {
    "Pool session_ttl": lambda x: _pool(session_ttl=x),
    "Pool lease_ttl": lambda x: _pool(lease_ttl=x),
    "Pool cooldown": lambda x: _pool(cooldown=x),
    "Pool balance_factor": lambda x: _pool(balance_factor=x),
    "Pool.lease timeout": lambda x: _pool().lease(timeout=x),
    "Pool.acquire timeout": lambda x: _pool().acquire(timeout=x),
    "Pool.probe_due idle": lambda x: _pool().probe_due(x),
    "ManualClock start": lambda x: ManualClock(x),
    "ManualClock.advance": lambda x: ManualClock().advance(x),
    **{
        f"Pool health {k}": ((lambda k: lambda x: _pool(health={k: x}))(k))  # noqa: B023
        for k in ("base_ejection", "max_ejection", "jitter", "max_ejected", "rate_limit_cooldown")
    },
    "Pool warmup ramp": lambda x: _pool(warmup={"ramp": x}),
}


@pytest.mark.parametrize("entry", sorted(FLOAT_ARGUMENTS))
@settings(max_examples=25, deadline=None)
@given(
    x=st.one_of(
        st.floats(allow_nan=True, allow_infinity=True),
        st.integers(),
        st.sampled_from([10**400, -(10**400), 2**1024, 1e308, -1e308, float("nan"), float("inf"), -0.0, 0, 1]),
    )
)
def test_a_float_argument_is_taken_or_refused_as_invalid_input(entry, x):
    # Any number, however large, NaN or infinite: accepted (within its rules) or refused with
    # InvalidInput naming the value; never OverflowError or anything else.
    try:
        FLOAT_ARGUMENTS[entry](x)
    except InvalidInput as e:
        shown = str(e)
        assert "[secure]" not in shown and shown, shown
    except (exitpool.NoExitAvailable, exitpool.Cooling, exitpool.WarmingUp):
        pass  # a valid timeout on a full pool, not an argument error
