"""exitpool._relay.Relay: an HTTP proxy on loopback that leaves through one SOCKS5 exit, for
clients that cannot speak SOCKS5 with a password (Scrapy, Chromium). Driven with requests
through the testbed's SOCKS5 proxies: tunnels and plain http requests leave from the exit's
address, socks5h resolves names at the exit, the relay asks for its own password, refusals are
502s without a credential, and closing it frees its port and thread."""

from __future__ import annotations

import base64
import json
import logging
import socket
import threading
import time

import pytest
import requests

from exitpool import Exit, InvalidInput
from exitpool._relay import Relay
from exitpool.testbed import Testbed

T = 5.0


@pytest.fixture
def world():
    with Testbed(n_exits=3, scheme=["socks5", "socks5h", "http"], hosts={"shop.test": "127.0.0.1"}) as tb:
        yield tb


def get(relay_proxy, url, **kwargs):
    with requests.Session() as s:
        s.trust_env = False
        return s.get(url, proxies={"http": relay_proxy, "https": relay_proxy}, timeout=T, **kwargs)


def tunnel_get(relay, target: str) -> dict:
    """A CONNECT tunnel through the relay, then ``GET /ip`` sent through it by hand."""
    with socket.create_connection(("127.0.0.1", relay.port), timeout=T) as c:
        token = base64.b64encode(f"{relay.username}:{relay.password}".encode()).decode()
        c.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\nProxy-Authorization: Basic {token}\r\n\r\n".encode())
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = c.recv(4096)
            assert chunk, data
            data += chunk
        assert data.startswith(b"HTTP/1.1 200 "), data
        c.sendall(f"GET /ip HTTP/1.1\r\nHost: {target}\r\nConnection: close\r\n\r\n".encode())
        answer = data.split(b"\r\n\r\n", 1)[1]
        for _ in range(1000):  # bounded: the server closes after its answer
            chunk = c.recv(65536)
            if not chunk:
                break
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    return json.loads(body)


def tunnel(relay, target: str, auth: bool = True) -> bytes:
    """A raw CONNECT to the relay: its answer's head (and a refusal's body)."""
    with socket.create_connection(("127.0.0.1", relay.port), timeout=T) as c:
        head = f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n"
        if auth:
            token = base64.b64encode(f"{relay.username}:{relay.password}".encode()).decode()
            head += f"Proxy-Authorization: Basic {token}\r\n"
        c.sendall((head + "\r\n").encode())
        data = b""
        while b"\r\n\r\n" not in data or not data.startswith(b"HTTP/1.1 200 "):
            chunk = c.recv(4096)  # a refusal is read to its end: the relay closes after it
            if not chunk:
                break
            data += chunk
        return data


@pytest.mark.parametrize("i", [0, 1], ids=["socks5", "socks5h"])
def test_plain_and_tunnelled_requests_leave_from_the_exit(world, i):
    tb = world
    exit = tb.exits[i]
    with Relay(exit) as relay:
        # Plain http (absolute-form, one request per connection) and a CONNECT tunnel (the
        # relay's raw answer: 200, then the exit carries the bytes).
        ips = {get(relay.proxy, tb.control_url).json()["ip"] for _ in range(50)}
        assert ips == {exit.ip}
        for _ in range(5):
            assert tunnel_get(relay, tb.control_url.split("/")[2]) == {"ip": exit.ip}


def test_socks5h_resolves_names_at_the_exit_socks5_here(world):
    tb = world
    port = tb.controls[0].port
    socks5, socks5h = tb.proxy("exit-0"), tb.proxy("exit-1")
    with Relay(tb.exits[1]) as relay:
        # shop.test is known only to the exit: socks5h hands it over as a name.
        r = get(relay.proxy, f"http://shop.test:{port}/ip")
        assert r.json()["ip"] == tb.exits[1].ip
        assert socks5h.domain_requests == {"shop.test": 1}
    with Relay(tb.exits[0]) as relay:
        assert get(relay.proxy, f"http://localhost:{port}/ip").json()["ip"] == tb.exits[0].ip
        assert not socks5.domain_requests and socks5.ipv4_requests >= 1
        # A name only the exit knows cannot be resolved here: the connection fails.
        with pytest.raises(requests.ConnectionError):
            get(relay.proxy, f"http://shop.test:{port}/ip")


def test_two_exits_on_one_host_port_get_two_relays_and_two_ips(world):
    tb = world
    twin = tb.proxies[1].add_user("twin", source_ip="127.0.6.1")
    a = tb.exits[1]
    assert (a.host, a.port) == (twin.host, twin.port)
    with Relay(a) as ra, Relay(twin) as rb:
        assert ra.port != rb.port
        for _ in range(10):
            assert get(ra.proxy, tb.control_url).json()["ip"] == a.ip
            assert get(rb.proxy, tb.control_url).json()["ip"] == "127.0.6.1"


def test_the_relay_asks_for_its_own_password(world):
    tb = world
    with Relay(tb.exits[0]) as relay:
        r = get(relay.server, tb.control_url)
        assert r.status_code == 407 and r.headers["Proxy-Authenticate"].startswith("Basic")
        wrong = relay.proxy.replace(relay.password, "not-it")
        assert get(wrong, tb.control_url).status_code == 407
        assert tunnel(relay, "127.0.0.1:1", auth=False).startswith(b"HTTP/1.1 407 ")


def test_refusals_are_502_without_credentials_and_nothing_leaks(world, caplog, capfd):
    caplog.set_level(logging.DEBUG)
    tb = world
    good = tb.exits[0]
    bad = Exit("bad", f"socks5://{good.username}:wrong-secret-42@{good.host}:{good.port}")
    with Relay(bad) as relay:
        # A tunnel is answered 502 with the reason; a plain request's connection just closes
        # (a 502 page would pass for the site's answer): a connection failure to the client.
        answer = tunnel(relay, tb.control_url.split("/")[2])
        assert answer.startswith(b"HTTP/1.1 502 ") and b"refused its SOCKS5 credentials" in answer
        with pytest.raises(requests.ConnectionError) as e:
            get(relay.proxy, tb.control_url)
        texts = [str(e.value), repr(relay), caplog.text]
        relay_password = relay.password
    with Relay(good) as relay:
        tb.proxy("exit-0").kill()
        assert tunnel(relay, tb.control_url.split("/")[2]).startswith(b"HTTP/1.1 502 ")
        with pytest.raises(requests.ConnectionError):
            get(relay.proxy, tb.control_url)
        texts += [repr(relay), caplog.text]
    out, err = capfd.readouterr()
    for text in [*texts, answer.decode("latin-1"), out, err]:
        assert "wrong-secret-42" not in text
        assert good.password not in text
        assert relay_password not in text


def test_close_frees_the_port_and_the_thread(world):
    tb = world
    before = threading.active_count()
    relay = Relay(tb.exits[0])
    port = relay.port
    assert get(relay.proxy, tb.control_url).status_code == 200
    relay.close()
    relay.close()  # idempotent
    assert relay.closed and threading.active_count() == before
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=T).close()


def test_only_socks_exits_and_sane_bounds(world):
    with pytest.raises(InvalidInput, match="exit-2"):
        Relay(world.exits[2])
    with pytest.raises(InvalidInput, match="max_connections"):
        Relay(world.exits[0], max_connections=0)


def test_connections_beyond_the_bound_are_answered_503(world):
    tb = world
    with Relay(tb.exits[0], max_connections=1) as relay:
        held = socket.create_connection(("127.0.0.1", relay.port), timeout=T)
        try:
            held.sendall(b"")  # an idle client holds the one slot
            for _ in range(100):  # bounded: the relay sees the first connection
                r = get(relay.proxy, tb.control_url)
                if r.status_code == 503:
                    break
                time.sleep(0.01)
            assert r.status_code == 503
        finally:
            held.close()


def test_a_plain_request_ends_its_connection_when_the_upstream_is_done(world):
    # The client keeps its side open (HTTP/1.1 keep-alive): the relay still lets go of the
    # connection once the upstream has answered and closed, instead of holding it idle.
    tb = world
    with Relay(tb.exits[0]) as relay:
        token = base64.b64encode(f"{relay.username}:{relay.password}".encode()).decode()
        with socket.create_connection(("127.0.0.1", relay.port), timeout=T) as c:
            c.sendall(f"GET {tb.control_url} HTTP/1.1\r\nHost: x\r\nProxy-Authorization: Basic {token}\r\n\r\n".encode())
            data = b""
            for _ in range(1000):  # bounded: read to the relay's end of the connection
                chunk = c.recv(65536)
                if not chunk:
                    break
                data += chunk
            assert json.loads(data.partition(b"\r\n\r\n")[2]) == {"ip": tb.exits[0].ip}
            for _ in range(500):  # bounded wait for the relay's side, the client's still open
                if not relay._writers:
                    break
                time.sleep(0.01)
            assert not relay._writers
