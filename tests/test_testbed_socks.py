"""The testbed's SOCKS5 proxies (exitpool.testbed.Socks5Proxy), driven with a raw socket
client that speaks RFC 1928 / RFC 1929 byte by byte, so the handshake itself is under test."""

import json
import socket
import struct

import pytest

from exitpool import Exit
from exitpool.testbed import Socks5Proxy, Testbed

T = 5.0  # every socket operation is bounded


def _recv_exact(sock, n):
    buf = b""
    for _ in range(n):  # each recv returns at least one byte or ends the loop
        if len(buf) == n:
            break
        chunk = sock.recv(n - len(buf))
        if not chunk:
            break
        buf += chunk
    return buf


def greet(port, methods):
    """Connect and send the method selection; the socket and the server's two-byte answer."""
    s = socket.create_connection(("127.0.0.1", port), timeout=T)
    s.sendall(bytes([5, len(methods), *methods]))
    return s, _recv_exact(s, 2)


def authenticate(s, user, password):
    u, p = user.encode(), password.encode()
    s.sendall(bytes([1, len(u)]) + u + bytes([len(p)]) + p)
    return _recv_exact(s, 2)


def request(s, host, port, *, cmd=1, atyp=None):
    """Send a request; the reply code (None if the connection closed first)."""
    if atyp is None:
        try:
            addr = bytes([1]) + socket.inet_aton(host)
        except OSError:
            addr = bytes([3, len(host)]) + host.encode()
    elif atyp == 4:
        addr = bytes([4]) + socket.inet_pton(socket.AF_INET6, host)
    s.sendall(bytes([5, cmd, 0]) + addr + struct.pack("!H", port))
    head = _recv_exact(s, 10)
    return head[1] if len(head) >= 2 else None


def open_tunnel(proxy, host, port, *, user=None, password=None):
    """A socket tunnelled through ``proxy`` to host:port, with the proxy's own credentials
    unless others are given."""
    if proxy.auth:
        s, answer = greet(proxy.port, [0, 2])
        assert answer == b"\x05\x02"
        assert authenticate(s, user or proxy.user, password or proxy.password) == b"\x01\x00"
    else:
        s, answer = greet(proxy.port, [0])
        assert answer == b"\x05\x00"
    assert request(s, host, port) == 0
    return s


def observed_ip(sock, host="127.0.0.1"):
    """GET /ip over an open tunnel; the JSON answer's ip."""
    sock.sendall(f"GET /ip HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
    data = b""
    for _ in range(1000):
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    return json.loads(body)["ip"]


@pytest.fixture
def socks_world():
    with Testbed(n_exits=3, scheme="socks5", hosts={"shop.test": "127.0.0.1"}) as tb:
        yield tb


def test_each_socks_exit_leaves_from_its_own_source_ip(socks_world):
    tb = socks_world
    control = tb.controls[0]
    seen = []
    for proxy, exit in zip(tb.proxies, tb.exits):
        assert isinstance(proxy, Socks5Proxy)
        assert isinstance(exit, Exit) and exit.scheme == "socks5" and exit.ip == proxy.source_ip
        assert proxy.url == f"socks5://{proxy.user}:{proxy.password}@127.0.0.1:{proxy.port}"
        assert proxy.password not in repr(exit) and proxy.password not in repr(proxy)
        with open_tunnel(proxy, "127.0.0.1", control.port) as s:
            seen.append(observed_ip(s))
        assert proxy.tunnels == 1 and proxy.ipv4_requests == 1
    assert seen == [p.source_ip for p in tb.proxies]
    assert len(set(seen)) == 3


def test_a_wrong_password_is_refused(socks_world):
    proxy = socks_world.proxies[0]
    s, answer = greet(proxy.port, [2])
    with s:
        assert answer == b"\x05\x02"
        assert authenticate(s, proxy.user, "not-the-password") == b"\x01\x01"
        assert s.recv(1) == b""  # and the connection is closed
    s, answer = greet(proxy.port, [2])
    with s:
        assert authenticate(s, "nobody", proxy.password) == b"\x01\x01"
    assert proxy.auth_failures == 2 and proxy.tunnels == 0


def test_a_client_without_credentials_is_refused_by_an_auth_proxy(socks_world):
    proxy = socks_world.proxies[0]
    s, answer = greet(proxy.port, [0])
    with s:
        assert answer == b"\x05\xff"
        assert s.recv(1) == b""
    assert proxy.auth_failures == 1


def test_a_proxy_without_auth_takes_no_credentials():
    with Testbed(n_exits=1, scheme="socks5", socks_auth=False) as tb:
        proxy = tb.proxies[0]
        assert tb.exits[0].proxy == f"socks5://127.0.0.1:{proxy.port}"
        assert tb.exits[0].username is None
        with open_tunnel(proxy, "127.0.0.1", tb.controls[0].port) as s:
            assert observed_ip(s) == proxy.source_ip
        s, answer = greet(proxy.port, [2])  # offers only user/password: nothing acceptable
        with s:
            assert answer == b"\x05\xff"


def test_a_name_is_resolved_at_the_proxy(socks_world):
    proxy = socks_world.proxies[1]
    with open_tunnel(proxy, "shop.test", socks_world.controls[0].port) as s:
        assert observed_ip(s, "shop.test") == proxy.source_ip
    with open_tunnel(proxy, "localhost", socks_world.controls[0].port) as s:
        assert observed_ip(s) == proxy.source_ip
    assert proxy.domain_requests == {"shop.test": 1, "localhost": 1}
    assert proxy.ipv4_requests == 0


@pytest.mark.parametrize(
    "host, kwargs, code",
    [
        ("nowhere.test", {}, 4),  # a name the proxy cannot resolve: host unreachable
        ("10.0.0.1", {}, 2),  # off loopback: not allowed, nothing is attempted
        ("::1", {"atyp": 4}, 8),  # IPv6: address type not supported
        ("127.0.0.1", {"cmd": 2}, 7),  # BIND: command not supported
    ],
)
def test_requests_it_does_not_serve_get_a_socks_error(socks_world, host, kwargs, code):
    proxy = socks_world.proxies[0]
    s, _ = greet(proxy.port, [2])
    with s:
        authenticate(s, proxy.user, proxy.password)
        assert request(s, host, socks_world.controls[0].port, **kwargs) == code
    assert proxy.tunnels == 0


def test_a_refused_destination_is_connection_refused(socks_world):
    proxy = socks_world.proxies[0]
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    port = free.getsockname()[1]
    free.close()  # nothing listens there now
    s, _ = greet(proxy.port, [2])
    with s:
        authenticate(s, proxy.user, proxy.password)
        assert request(s, "127.0.0.1", port) == 5
    assert proxy.upstream_errors == 1


def test_kill_refuses_and_revive_restores(socks_world):
    proxy = socks_world.proxies[0]
    proxy.kill()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", proxy.port), timeout=T)
    proxy.revive()
    with open_tunnel(proxy, "127.0.0.1", socks_world.controls[0].port) as s:
        assert observed_ip(s) == proxy.source_ip


def test_drift_changes_the_observed_ip(socks_world):
    proxy = socks_world.proxies[0]
    proxy.drift("127.0.9.9")
    with open_tunnel(proxy, "127.0.0.1", socks_world.controls[0].port) as s:
        assert observed_ip(s) == "127.0.9.9"


def test_added_users_on_one_port_leave_from_their_own_addresses():
    with Testbed(n_exits=2, scheme=["http", "socks5"]) as tb:
        http, socks = tb.proxies
        assert not isinstance(http, Socks5Proxy) and isinstance(socks, Socks5Proxy)
        assert [e.scheme for e in tb.exits] == ["http", "socks5"]
        extra = socks.add_user("alice", source_ip="127.0.5.1")
        assert extra.scheme == "socks5" and extra.ip == "127.0.5.1" and extra.exit_id == "exit-1-alice"
        assert extra.host == tb.exits[1].host and extra.port == tb.exits[1].port
        with open_tunnel(socks, "127.0.0.1", tb.controls[0].port, user="alice", password=extra.password) as s:
            assert observed_ip(s) == "127.0.5.1"
        with open_tunnel(socks, "127.0.0.1", tb.controls[0].port) as s:
            assert observed_ip(s) == socks.source_ip
        # a known user with another user's password is refused
        s, _ = greet(socks.port, [2])
        with s:
            assert authenticate(s, "alice", socks.password) == b"\x01\x01"

        # the HTTP proxy maps added users the same way, and 407s a wrong password
        import requests

        bob = http.add_user("bob", source_ip="127.0.5.2")
        r = requests.get(tb.control_url, proxies=bob.proxies, timeout=T)
        assert r.json() == {"ip": "127.0.5.2"}
        r = requests.get(tb.control_url, proxies=tb.exits[0].proxies, timeout=T)
        assert r.json() == {"ip": http.source_ip}
        wrong = bob.proxy.replace(bob.password, "wrong")
        r = requests.get(tb.control_url, proxies={"http": wrong}, timeout=T)
        assert r.status_code == 407


def test_bad_socks_options_are_refused():
    with pytest.raises(ValueError, match="schemes for"):
        Testbed(n_exits=2, scheme=["socks5"])
    with pytest.raises(ValueError, match="'ftp'"):
        Testbed(n_exits=1, scheme="ftp")
    with pytest.raises(ValueError, match="not a 127.x"):
        Testbed(n_exits=1, scheme="socks5", hosts={"shop.test": "10.0.0.1"})
    with pytest.raises(ValueError, match="255 bytes"):
        Socks5Proxy("x", source_ip="127.0.1.1", password="p" * 256)
