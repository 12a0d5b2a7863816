"""No proxy password anywhere an operator or a log can see it: one pool with passwords driven
through every path (leases, reports, exceptions, events, logs, snapshot, Prometheus, the
terminal report, the HTML report, reprs), then a search for the password in all of it."""

from __future__ import annotations

import json
import logging

import pytest
from prometheus_client import CollectorRegistry, generate_latest

import exitpool
from exitpool import Exit, ManualClock, Pool, Ring, load_exits
from exitpool._cli import main as cli
from exitpool._report import render_html
from exitpool.prometheus import PoolCollector

PASSWORD = "hunter2-S3CRET"


def test_the_password_appears_nowhere(tmp_path, caplog, capsys):
    caplog.set_level(logging.DEBUG, logger="exitpool")
    seen: list = []
    clock = ManualClock()
    exits = [Exit(f"e{i}", f"http://user{i}:{PASSWORD}@gw.example:{8000 + i}", ip=f"198.51.100.{i + 1}") for i in range(6)]
    pool = Pool(exits, strategy="round_robin", clock=clock, warmup=True, calibrate=True, lease_ttl=5.0, seed=1)
    pool.on_event(seen.append)
    texts: list = [repr(e) for e in exits] + [str(e) for e in exits] + [repr(pool), repr(Ring(exits))]
    errors: list = []

    def attempt(fn):
        try:
            fn()
        except exitpool.Error as e:
            errors.append(e)

    for step in range(300):
        clock.advance(0.5)
        site = ["shop.example", "news.example"][step % 2]
        key = f"acct-{step % 5}" if step % 3 == 0 else None
        try:
            with pool.lease(key, site=site, timeout=0) as lease:
                texts.append(repr(lease))
                if lease.exit_id == "e2":
                    raise ConnectionError("proxy refused")
                lease.report(status=403 if site == "shop.example" else 200, latency=0.2, captcha=step % 11 == 0)
        except ConnectionError:
            pass
        except exitpool.Error as e:
            errors.append(e)
            if isinstance(e, exitpool.SessionExitLost):
                pool.end_session(e.key)
    pool.acquire()  # left to expire: a lease_expired event
    clock.advance(10)
    pool.record_probe("e1", True, observed_ip="203.0.113.9")  # drift
    attempt(lambda: Exit("bad", f"http://user:{PASSWORD}@gw.example:99999"))
    attempt(lambda: Exit("bad", f"ftp://user:{PASSWORD}@gw.example:21"))
    attempt(lambda: load_exits([f"gw.example:8000:user:{PASSWORD}", f"gw.example:8000:user:{PASSWORD}"]))
    attempt(lambda: pool.add(exits[0]))
    pool.recalibrate()
    pool.bench("e3")

    snapshot = pool.snapshot()
    texts.append(json.dumps(snapshot))
    texts.append(json.dumps(pool.events()))
    texts.append(json.dumps(seen))
    texts += [str(e) for e in errors] + [repr(e) for e in errors]
    texts += [r.getMessage() for r in caplog.records]
    registry = CollectorRegistry()
    registry.register(PoolCollector(pool, per_site=True))
    texts.append(generate_latest(registry).decode())
    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps(snapshot))
    html = tmp_path / "report.html"
    assert cli(["report", str(path)]) == 0
    assert cli(["report", str(path), "--html", str(html)]) == 0
    texts.append(html.read_text())
    texts.append(render_html(snapshot))
    exits_file = tmp_path / "exits.txt"
    exits_file.write_text("".join(f"http://user{i}:{PASSWORD}@gw.example:{9000 + i}\n" for i in range(3)))
    assert cli(["assign", "--exits", str(exits_file), "acct-1", "acct-2"]) == 0
    assert cli(["churn", "--exits", str(exits_file), "--add", "1", "--keys", "1000"]) == 0
    out = capsys.readouterr()
    texts += [out.out, out.err]

    # The run really went through the paths it claims to.
    kinds = {e["kind"] for e in seen}
    assert {"state_changed", "lease_expired", "exit_drifted", "benched"} <= kinds, kinds
    assert errors and caplog.records
    assert "exitpool_exit_outcomes_total" in texts[-5] or any("exitpool_exit_outcomes_total" in t for t in texts)
    leaks = [t for t in texts if PASSWORD in t]
    assert not leaks, leaks[0][:400]
    # The password is still there for the clients that need it.
    assert PASSWORD in exits[0].proxy and PASSWORD in exits[0].proxies["https"]


def test_no_gateway_password_nor_a_token_in_a_password_appears(tmp_path, caplog, capsys):
    """Gateways through the observability paths: one with the token in the user name, one
    (IPRoyal's format) with the token in the password; leases, a 407, rotations, a broken
    sticky session; then the snapshot (whole and summary), events, logs, Prometheus (bounded
    and every exit) and both reports."""
    caplog.set_level(logging.DEBUG, logger="exitpool")
    clock = ManualClock(1_700_000_000.0)
    user_side = exitpool.Gateway(
        "resi", f"http://customer-c1:{PASSWORD}@gw.provider.example:7777", slots=20, username="{user}-session-{session}", lifetime=600
    )
    pw_side = exitpool.Gateway("ipr", f"http://acme:{PASSWORD}@geo.iproyal.com:12321", slots=20, preset="iproyal", lifetime=600)
    pool = Pool([user_side, pw_side], clock=clock, seed=1)
    secrets = {PASSWORD}
    texts: list = [repr(user_side), repr(pw_side), repr(pool)]
    for step in range(40):
        secrets |= {pw_side.token(n, at=clock.now()) for n in range(20)}
        try:  # a session whose token rotated ends with SessionExitLost: its message too
            with pool.lease(f"acct-{step % 7}", timeout=0) as lease:
                texts.append(repr(lease))
                lease.report(status=200, latency=0.1)
        except exitpool.Error as e:
            texts += [str(e), repr(e)]
        pool.record_probe("ipr-3", True, observed_ip=f"198.51.100.{step % 2 + 1}")  # sticky broken
        clock.advance(31.0)  # over two token lifetimes in all: every slot rotates
    others = [e.exit_id for e in pool.exits if e.exit_id != "ipr-5"]
    pool.release(pool.acquire(avoid=others, timeout=0), status=407)
    snapshot = pool.snapshot()
    texts += [json.dumps(snapshot), json.dumps(pool.snapshot(exits=False)), json.dumps(pool.events())]
    texts += [r.getMessage() for r in caplog.records]
    for kw in ({}, {"max_exits": None, "per_site": True}):
        registry = CollectorRegistry()
        registry.register(PoolCollector(pool, **kw))
        texts.append(generate_latest(registry).decode())
    path, html = tmp_path / "snapshot.json", tmp_path / "report.html"
    path.write_text(json.dumps(snapshot))
    assert cli(["report", str(path)]) == 0
    assert cli(["report", str(path), "--html", str(html)]) == 0
    texts.append(html.read_text())
    out = capsys.readouterr()
    texts += [out.out, out.err]

    kinds = {e["kind"] for e in pool.events()}
    assert {"token_rotated", "sticky_broken", "gateway_credentials_rejected"} <= kinds, kinds
    assert snapshot["gateways"][1]["rotations"] >= 20 and len(secrets) > 40
    leaks = [(secret, t) for t in texts for secret in secrets if secret in t]
    assert not leaks, (leaks[0][0], leaks[0][1][:400])
    # The token in a user name is no secret: the snapshot shows the URL a slot leases with.
    assert user_side.token(0, at=clock.now()) in json.dumps(snapshot)


def test_a_proxy_url_given_where_something_else_belongs_comes_back_masked():
    # A proxy URL pasted into the wrong argument: every error that quotes the argument masks it.
    url = f"http://user:{PASSWORD}@gw.example:8000"
    pool = Pool([Exit("e0", url)])
    wrong = [
        lambda: Pool([Exit("e0", url)], strategy=url),
        lambda: Pool([Exit("e0", url)], health={url: 1}),
        lambda: Pool([Exit("e0", url)], warmup={url: 1}),
        lambda: pool.bench(url),
        lambda: pool.exit(url),
        lambda: Exit("e1", url, ip=url),
        lambda: pool.release(pool.acquire(), error=url),
        lambda: load_exits([f"gw.example:8000 ip={url}"]),
    ]
    for call in wrong:
        with pytest.raises(exitpool.Error) as e:
            call()
        assert PASSWORD not in str(e.value) and "[secure]" in str(e.value), str(e.value)


# --- what masking may hide (issue 13): only what could be a credential ---------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from exitpool._core import _mask_raw  # noqa: E402

_v6 = st.ip_addresses(v=6).map(str)
_zone = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,14}", fullmatch=True)
_host = st.one_of(
    st.ip_addresses(v=4).map(str),
    _v6.map(lambda a: f"[{a}]"),
    st.from_regex(r"[a-z0-9][a-z0-9-]{0,10}(\.[a-z0-9-]{1,10}){0,3}", fullmatch=True),
)
_port = st.integers(0, 10**7).map(str)  # out-of-range ports too: a typo, never a secret
_path = st.from_regex(r"(/[A-Za-z0-9._-]{0,8}){0,2}", fullmatch=True)
_scheme = st.sampled_from(["http", "https", "socks5", "socks5h", "redis", "rediss"])
NO_CREDENTIAL = st.one_of(
    st.ip_addresses().map(str),
    st.tuples(_v6, _zone).map(lambda t: f"{t[0]}%{t[1]}"),  # fe80::1%eth0
    st.tuples(_v6, _zone, _port).map(lambda t: f"[{t[0]}%{t[1]}]:{t[2]}"),
    st.tuples(_host, _port).map(lambda t: f"{t[0]}:{t[1]}"),
    st.tuples(_scheme, _host, _port, _path).map(lambda t: f"{t[0]}://{t[1]}:{t[2]}{t[3]}"),  # redis://h:99999/0
    st.tuples(_scheme, _v6, _zone, _port).map(lambda t: f"{t[0]}://[{t[1]}%25{t[2]}]:{t[3]}"),
)


@settings(max_examples=400, deadline=None)
@given(text=NO_CREDENTIAL)
def test_masking_leaves_text_that_holds_no_credential_whole(text):
    assert _mask_raw(text) == text


@settings(max_examples=400, deadline=None)
@given(
    scheme=_scheme,
    user=st.from_regex(r"[a-z]{1,6}", fullmatch=True),
    host=_host,
    port=_port,
    path=_path,
    shape=st.sampled_from(["url", "url-no-host", "hostport", "userpass"]),
)
def test_masking_still_hides_every_password_next_to_such_text(scheme, user, host, port, path, shape):
    raw = {
        "url": f"{scheme}://{user}:{PASSWORD}@{host}:{port}{path}",
        "url-no-host": f"{scheme}://{user}:{PASSWORD}{path}",
        "hostport": f"{host}:{port}:{user}:{PASSWORD}",
        "userpass": f"{user}:{PASSWORD}@{host}:{port}",
    }[shape]
    assert "S3CRET" not in _mask_raw(raw)


def test_the_issues_store_and_ip_are_shown_as_written():
    for make, shown in [
        (lambda: Pool([Exit("a", "http://gw.example:1")], store="redis://127.0.0.1:99999/0"), "redis://127.0.0.1:99999/0"),
        (lambda: Exit("a", "http://gw.example:1", ip="fe80::1%eth0"), '"fe80::1%eth0"'),
    ]:
        with pytest.raises(exitpool.InvalidInput) as info:
            make()
        assert shown in str(info.value) and "[secure]" not in str(info.value), str(info.value)
