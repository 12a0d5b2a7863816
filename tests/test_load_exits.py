"""`load_exits`: proxy lists in every shape providers hand out, from a file or from lines."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exitpool import Exit, InvalidInput, Ring, load_exits

SECRET = "hunter2"

# One line of each shape, with what it must become: (id, proxy URL, password, capacity, ip, tags).
SHAPES = [
    ("# provider A, residential", None),
    ("", None),
    ("   \t  ", None),
    ("gw.example:8000", ("gw.example:8000", "http://gw.example:8000", None, 1, None, {})),
    (
        "gw.example:8001:user-sess-1:p@ss:w#rd  # inline comment",
        ("user-sess-1@gw.example:8001", "http://user-sess-1:p%40ss%3Aw%23rd@gw.example:8001", "p@ss:w#rd", 1, None, {}),
    ),
    (
        "user-sess-2:secret@gw.example:8001",
        ("user-sess-2@gw.example:8001", "http://user-sess-2:secret@gw.example:8001", "secret", 1, None, {}),
    ),
    (
        "socks5://u:pw@10.0.0.1:1080 ip=93.184.10.7 capacity=3 country=DE kind=mobile",
        ("u@10.0.0.1:1080", "socks5://u:pw@10.0.0.1:1080", "pw", 3, "93.184.10.7", {"country": "DE", "kind": "mobile"}),
    ),
    (
        "https://u:p%40w@gw.example:9443",
        ("u@gw.example:9443", "https://u:p%40w@gw.example:9443", "p@w", 1, None, {}),
    ),
    (
        "socks5h://gw.example:1081 capacity=2",
        ("gw.example:1081", "socks5h://gw.example:1081", None, 2, None, {}),
    ),
    (
        "sess-a1b2 http://u:pw@gw.example:9000",
        ("sess-a1b2", "http://u:pw@gw.example:9000", "pw", 1, None, {}),
    ),
    (
        "sess-b2c3 gw.example:9002:u2:pw2 ip=2001:db8::7",
        ("sess-b2c3", "http://u2:pw2@gw.example:9002", "pw2", 1, "2001:db8::7", {}),
    ),
    (
        "http://u:pw@gw.example:9001 id=sess-c3d4 capacity=2",
        ("sess-c3d4", "http://u:pw@gw.example:9001", "pw", 2, None, {}),
    ),
    (
        "\t出口-東京   http://u:pw@gw.example:9003\t# tabs and a Unicode id",
        ("出口-東京", "http://u:pw@gw.example:9003", "pw", 1, None, {}),
    ),
    ("#gw.example:1 commented out", None),
]
LINES = [line for line, _ in SHAPES]
EXPECTED = [want for _, want in SHAPES if want is not None]


def summary(exits):
    return [(e.exit_id, e.proxy, e.password, e.capacity, e.ip, e.tags) for e in exits]


def write(tmp_path, text, name="proxies.txt"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8", newline="")
    return path


def test_every_shape_from_a_list_of_lines():
    exits = load_exits(LINES)
    assert all(type(e) is Exit for e in exits)
    assert summary(exits) == EXPECTED


def test_every_shape_from_a_file(tmp_path):
    path = write(tmp_path, "\n".join(LINES) + "\n")
    assert summary(load_exits(path)) == EXPECTED
    assert summary(load_exits(str(path))) == EXPECTED


def test_windows_line_endings(tmp_path):
    path = write(tmp_path, "\r\n".join(LINES) + "\r\n")
    assert summary(load_exits(path)) == EXPECTED


def test_file_with_a_byte_order_mark(tmp_path):
    # Notepad and Excel write UTF-8 with a BOM; it must not become part of the first line.
    path = write(tmp_path, "\ufeff# provider A\nsess-a1b2 http://u:pw@gw.example:9000\n")
    assert summary(load_exits(path)) == [("sess-a1b2", "http://u:pw@gw.example:9000", "pw", 1, None, {})]
    path = write(tmp_path, "\ufeffsess-a1b2 http://u:pw@gw.example:9000\n")
    assert [e.exit_id for e in load_exits(path)] == ["sess-a1b2"]


def test_lines_from_any_iterable():
    assert summary(load_exits(iter(LINES))) == EXPECTED
    assert summary(load_exits(line for line in LINES)) == EXPECTED
    assert summary(load_exits(tuple(LINES))) == EXPECTED
    # Lines that still carry their newline, or one string holding several lines, in a list.
    assert summary(load_exits([line + "\n" for line in LINES])) == EXPECTED
    assert summary(load_exits(["\n".join(LINES)])) == EXPECTED


def test_an_open_file_is_an_iterable_of_lines(tmp_path):
    path = write(tmp_path, "\n".join(LINES) + "\n")
    with open(path, encoding="utf-8") as f:
        assert summary(load_exits(f)) == EXPECTED


def test_empty_inputs(tmp_path):
    assert load_exits([]) == []
    assert load_exits(["# only a comment", "", "   "]) == []
    assert load_exits(write(tmp_path, "")) == []


def test_comment_needs_a_line_start_or_whitespace_before_it():
    # `#` inside a password is a character of the password, not a comment.
    (e,) = load_exits(["gw.example:8000:user:pa#ss#word # note"])
    assert e.password == "pa#ss#word"
    (e,) = load_exits(["http://user:pa#ss@gw.example:8000 #note"])
    assert e.password == "pa#ss"


def test_fields_become_ip_capacity_and_tags():
    (e,) = load_exits(["gw.example:8000 country=DE ip=93.184.10.7 kind=mobile capacity=6 Provider=acme"])
    assert e.ip == "93.184.10.7"
    assert e.capacity == 6
    assert e.tags == {"country": "DE", "kind": "mobile", "Provider": "acme"}


def test_loaded_exits_feed_a_ring():
    exits = load_exits(LINES)
    ring = Ring(exits, replicas=1)
    assert len(ring) == len(EXPECTED)
    assert ring.assign("account-3f9") in exits


# --- the id rule -------------------------------------------------------------------------------


def test_id_survives_a_password_change():
    before = load_exits(
        ["gw.example:8000:user-sess-1:old-pw", "user-sess-2:old-pw@gw.example:8000", "http://user-sess-3:old@gw.example:8000"]
    )
    after = load_exits(
        ["gw.example:8000:user-sess-1:new-pw", "user-sess-2:new-pw@gw.example:8000", "http://user-sess-3:new@gw.example:8000"]
    )
    assert (
        [e.exit_id for e in before]
        == [e.exit_id for e in after]
        == [
            "user-sess-1@gw.example:8000",
            "user-sess-2@gw.example:8000",
            "user-sess-3@gw.example:8000",
        ]
    )
    assert [e.password for e in after] == ["new-pw", "new-pw", "new"]
    # So the ring keeps every account where it was.
    keys = [f"account-{i}" for i in range(2000)]
    assert Ring(before).moved(Ring(after), keys) == []


def test_the_same_exit_in_every_shape_has_the_same_id():
    lines = [
        "gw.example:8000:user:pw",
        "user:pw@gw.example:8000",
        "http://user:pw@gw.example:8000",
        "http://user:pw@GW.Example:8000/",
    ]
    ids = {load_exits([line])[0].exit_id for line in lines}
    assert ids == {"user@gw.example:8000"}


def test_two_users_on_one_gateway_stay_two_exits():
    exits = load_exits(
        [
            "gw.example:8000:customer-1-session-aaa:pw",
            "gw.example:8000:customer-1-session-bbb:pw",
            "customer-1-session-ccc:pw@gw.example:8000",
        ]
    )
    assert [e.exit_id for e in exits] == [
        "customer-1-session-aaa@gw.example:8000",
        "customer-1-session-bbb@gw.example:8000",
        "customer-1-session-ccc@gw.example:8000",
    ]
    assert len(Ring(exits)) == 3


def test_one_gateway_on_two_ports_is_two_exits():
    exits = load_exits(["gw.example:8000", "gw.example:8001"])
    assert [e.exit_id for e in exits] == ["gw.example:8000", "gw.example:8001"]


def test_an_explicit_id_wins():
    exits = load_exits(["sess-1 gw.example:8000:user:pw", "gw.example:8000:user:pw id=sess-2"])
    assert [e.exit_id for e in exits] == ["sess-1", "sess-2"]


# --- errors: name the file and the line, mask the password -------------------------------------

BAD_LINES = [
    (
        "capacity=-1 gw.example:8000:user:hunter2",
        "capacity -1 is outside 1..=10000",
    ),
    (
        "capacity=10001 gw.example:8000:user:hunter2",
        "capacity 10001 is outside 1..=10000",
    ),
    (
        "capacity=1.5 gw.example:8000:user:hunter2",
        'capacity "1.5" is not a whole number',
    ),
    (
        "gw.example:8000 capacity=many",
        'capacity "many" is not a whole number',
    ),
    (
        "ip=93.184.10 gw.example:8000:user:hunter2",
        'ip "93.184.10" is not an IP address',
    ),
    # After a password a field may be the rest of it (a password with a space): its value is
    # not shown, the field and the rule are.
    (
        "gw.example:8000:user:hunter2 capacity=10001",
        "the capacity (not shown: it follows a password and may be part of it) is outside 1..=10000",
    ),
    (
        "gw.example:8000:user:hunter2 capacity=many",
        "the capacity (not shown: it follows a password and may be part of it) is not a whole number",
    ),
    (
        "gw.example:8000:user:hunter2 ip=93.184.10",
        "the ip (not shown: it follows a password and may be part of it) is not an IP address",
    ),
    (
        "ftp://user:hunter2@gw.example:21",
        'bad proxy URL "ftp://user:[secure]@gw.example:21": unsupported scheme (expected http, https, socks5 or socks5h)',
    ),
    (
        "socks5://user:hunter2@gw.example",
        'bad proxy URL "socks5://user:[secure]@gw.example": socks5 proxy needs a port',
    ),
    (
        "http://user:hunter2@gw.example:99999",
        'bad proxy URL "http://user:[secure]@gw.example:99999": invalid port number',
    ),
    (
        "gw.example:99999:user:hunter2",
        'bad proxy "http://user:[secure]@gw.example:99999": invalid port number',
    ),
    (
        "gw.example:port:user:hunter2",
        'cannot read "gw.example:port:user:[secure]" as a proxy (expected a URL, host:port, host:port:user:pass or user:pass@host:port)',
    ),
    (
        "gw.example",
        'cannot read "gw.example" as a proxy (expected a URL, host:port, host:port:user:pass or user:pass@host:port)',
    ),
    (
        "sess-1 gw.example:8000:user:hunter2 extra",
        'expected `[ID] PROXY [key=value ...]`, got "sess-1 gw.example:8000:user:[secure]" and 1 more (not shown: it follows '
        "a password and may be part of it); a password with a space goes in a URL, percent-encoded",
    ),
    (
        "id= gw.example:8000:user:hunter2",
        'exit id "" must be non-empty with no surrounding spaces',
    ),
    (
        "gw.example:8000:user:hunter2 id=",
        "the exit id (not shown: it follows a password and may be part of it) must be non-empty, without surrounding "
        "spaces or control characters",
    ),
    # Issue 13: a password with a space; no part of it after the space is shown.
    (
        "gw.example:8000:user:abc defSECRET",
        'two proxies on one line, or a password with a space: proxy "gw.example:8000:user:[secure]" and one more token '
        "(not shown: it follows a password and may be part of it); one exit a line, and a password with a space goes in "
        "a URL, percent-encoded (`http://user:pass%20word@host:port`)",
    ),
]


@pytest.mark.parametrize(("line", "message"), BAD_LINES)
def test_bad_line_from_lines_names_the_line(line, message):
    with pytest.raises(InvalidInput) as info:
        load_exits(["gw.example:1", "# comment", "", line, "gw.example:2"])
    assert str(info.value) == f"line 4: {message}"
    assert SECRET not in repr(info.value)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(("line", "message"), BAD_LINES)
def test_bad_line_from_a_file_names_the_file_and_line(tmp_path, line, message):
    path = write(tmp_path, f"gw.example:1\n# comment\n\n{line}\ngw.example:2\n")
    with pytest.raises(InvalidInput) as info:
        load_exits(path)
    assert str(info.value) == f"{path}: line 4: {message}"
    assert SECRET not in repr(info.value)


def test_duplicate_ids_from_lines():
    with pytest.raises(InvalidInput) as info:
        load_exits(["gw.example:8000:user:hunter2", "# the same session, rotated password", "gw.example:8000:user:hunter3"])
    assert str(info.value) == ('duplicate exit id "user@gw.example:8000" on lines 1 and 3 (an id column tells them apart: `id=NAME`)')
    assert "hunter" not in str(info.value)


def test_duplicate_ids_from_a_file(tmp_path):
    path = write(tmp_path, "sess-a1b2 gw.example:8000:u:hunter2\ngw.example:8001\nsess-a1b2 gw.example:8002:u:hunter3\n")
    with pytest.raises(InvalidInput) as info:
        load_exits(path)
    assert str(info.value) == (f'{path}: duplicate exit id "sess-a1b2" on lines 1 and 3 (an id column tells them apart: `id=NAME`)')
    assert "hunter" not in str(info.value)


def test_duplicate_between_an_id_field_and_a_derived_id():
    with pytest.raises(InvalidInput) as info:
        load_exits(["gw.example:8000", "gw.example:8001 id=gw.example:8000"])
    assert str(info.value) == ('duplicate exit id "gw.example:8000" on lines 1 and 2 (an id column tells them apart: `id=NAME`)')


def test_not_utf8_file(tmp_path):
    path = tmp_path / "proxies.txt"
    path.write_bytes(b"gw:1\n\xff\xfe\n")
    with pytest.raises(InvalidInput) as info:
        load_exits(path)
    assert str(info.value) == f"{path}: not UTF-8 text (invalid start byte at byte 5)"


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_exits(tmp_path / "nope.txt")


def test_wrong_types():
    with pytest.raises(TypeError) as info:
        load_exits(b"gw.example:8000")
    assert str(info.value) == "load_exits takes a path or an iterable of str lines, not bytes"
    with pytest.raises(TypeError) as info:
        load_exits(["gw.example:8000", b"gw.example:8001:user:hunter2"])
    assert str(info.value) == "load_exits lines must be str, got bytes"
    with pytest.raises(TypeError):
        load_exits(8000)


# --- properties --------------------------------------------------------------------------------

# A password as providers print them in `host:port:user:pass` lists: anything but whitespace
# (which separates the fields of a line). The sentinel keeps it from matching other text.
list_passwords = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc", "Zs", "Zl", "Zp")),
    max_size=24,
).map(lambda s: f"Qz9{s}Xk7")


@settings(max_examples=300, deadline=None)
@given(password=list_passwords)
def test_host_port_user_pass_takes_the_password_literally(password):
    (e,) = load_exits([f"gw.example:8000:user-sess-1:{password}"])
    # Nothing is decoded in this shape: what the provider printed is the password.
    assert e.password == password
    assert e.exit_id == "user-sess-1@gw.example:8000"
    # The URL handed to clients decodes back to it.
    assert Exit("x", e.proxy).password == password
    for shown in (repr(e), str(e), e.masked_proxy):
        assert password not in shown


ERROR_SHAPES = [
    "gw.example:8000:user:{} capacity=-1",
    "user:{}@gw.example:8000 capacity=-1",
    "http://user:{}@gw.example:8000 capacity=-1",
    "sess-1 socks5://user:{}@gw.example",  # no port
    "sess-1 user:{}@gw.example:8000 stray",
]


@settings(max_examples=300, deadline=None)
@given(password=list_passwords, shape=st.sampled_from(ERROR_SHAPES))
def test_errors_never_show_the_password(password, shape):
    line = shape.format(password)
    with pytest.raises(InvalidInput) as info:
        load_exits(["gw.example:1", line])
    assert str(info.value).startswith("line 2: ")
    assert password not in str(info.value)


@settings(max_examples=300, deadline=None)
@given(lines=st.lists(st.text(), max_size=5))
def test_arbitrary_lines_never_panic(lines):
    # A Rust panic would surface as pyo3's PanicException, which is not an InvalidInput.
    try:
        exits = load_exits(lines)
    except InvalidInput:
        return
    assert all(type(e) is Exit for e in exits)
    assert len({e.exit_id for e in exits}) == len(exits)
