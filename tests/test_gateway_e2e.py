"""Gateways end to end, on the testbed's provider gateway (exitpool.testbed.ProviderGateway):
real clients through a Gateway's slots to the control endpoint that echoes the client's
address. Accounts keep their slot's IP, rotations end sessions visibly, probes learn each
slot's IP per token, a dead gateway goes out as one, and a 407 says "credentials", whichever
client saw it.

The pool's time is a ManualClock (taken as Unix time); the testbed gateway's sessions are held
for a lifetime on its own clock and told to expire where a test moves the pool's clock past a
rotation. Every loop that sends traffic is bounded; everything stays on loopback."""

from __future__ import annotations

import socket

import aiohttp
import httpx
import pytest
import requests
import urllib3

from exitpool import Gateway, ManualClock, NoExitAvailable, Pool, SessionExitLost
from exitpool.probe import ProbeLoop, probe
from exitpool.testbed import ProviderGateway, Testbed

T0 = 1_700_000_000.0
T = 5.0  # every client call is bounded
LIFETIME = 600.0


@pytest.fixture
def tb():
    with Testbed(n_exits=1, n_controls=2, gateways=[ProviderGateway("gw", lifetime=LIFETIME)]) as world:
        yield world


def slot_of(exit_id: str) -> int:
    return int(exit_id.rsplit("-", 1)[1])


def seen_ip(session: requests.Session, url: str, lease) -> str:
    r = session.get(url, proxies=lease.proxies, timeout=T)
    assert r.status_code == 200, r.text
    return r.json()["ip"]


def slot_states(pool, prefix="gw-"):
    return {e.exit_id: pool.state(e.exit_id) for e in pool.exits if e.exit_id.startswith(prefix)}


def kinds(pool):
    return [e["kind"] for e in pool.events()]


def test_accounts_see_their_slots_ip_stable_across_50_requests(tb):
    gw = tb.gateway
    g = gw.gateway(slots=8)
    pool = Pool([g], clock=ManualClock(T0))
    accounts = [f"account-{i}" for i in range(4)]
    seen = {a: set() for a in accounts}
    slots = {}
    with requests.Session() as s:
        for _ in range(50):
            for a in accounts:
                with pool.lease(a) as lease:
                    slots.setdefault(a, lease.exit_id)
                    assert lease.exit_id == slots[a]
                    seen[a].add(seen_ip(s, tb.control_url, lease))
    for a in accounts:
        assert len(seen[a]) == 1, (a, seen[a])
        # The IP is the one the provider holds for the slot's current token.
        token = g.token(slot_of(slots[a]), at=T0)
        assert seen[a] == {gw.ip_of(token)}
    # Accounts on distinct slots present distinct IPs, accounts on one slot the same.
    by_slot = {}
    for a in accounts:
        by_slot.setdefault(slots[a], set()).update(seen[a])
    assert all(len(ips) == 1 for ips in by_slot.values())
    assert len({ip for ips in by_slot.values() for ip in ips}) == len(by_slot)
    assert gw.auth_failures == 0


def test_a_rotation_ends_the_session_visibly_and_the_next_lease_sees_a_new_ip(tb):
    gw = tb.gateway
    g = gw.gateway(slots=4)
    clock = ManualClock(T0)
    pool = Pool([g], clock=clock)
    ips = []
    with requests.Session() as s:
        with pool.lease("account-1") as lease:
            exit_id = lease.exit_id
            ips.append(seen_ip(s, tb.control_url, lease))
        slot = slot_of(exit_id)
        for _ in range(2):  # two token lifetimes
            old = g.token(slot, at=clock.now())
            clock.advance(g.rotates_at(slot, at=clock.now()) - clock.now())
            gw.expire(old)  # the provider's lifetime of the old token is over too
            with pytest.raises(SessionExitLost, match="token rotated"):
                with pool.lease("account-1"):
                    pass
            with pool.lease("account-1") as lease:  # binds afresh: same slot, new token
                assert lease.exit_id == exit_id and g.token(slot, at=clock.now()) in lease.proxy
                ip = seen_ip(s, tb.control_url, lease)
            for _ in range(10):  # and holds it
                with pool.lease("account-1") as lease:
                    assert seen_ip(s, tb.control_url, lease) == ip
            ips.append(ip)
    assert len(set(ips)) == 3, ips
    assert gw.ip_of(old) is None
    # Nothing was held against the slot for its new IPs.
    assert pool.state(exit_id) == "healthy"


def test_probes_learn_each_slots_ip_per_token_and_a_stickiness_break_is_sticky_broken(tb):
    gw = tb.gateway
    g = gw.gateway(slots=3)
    clock = ManualClock(T0)
    pool = Pool([g], clock=clock)
    loop = ProbeLoop(pool, tb.control_urls, idle=0, stagger=0, timeout=T, seed=1)
    first = tb.run(loop.run_once())
    assert len(first.results) == 3 and all(r.ok for r in first.results)
    assert {r.observed_ip for r in first.results} == {gw.ip_of(g.token(n, at=T0)) for n in range(3)}
    assert first.drifted == ()
    # Every slot's token rotates (the provider's sessions end with them): new IPs, expected.
    clock.advance(max(g.rotates_at(n, at=T0) for n in range(3)) - T0)
    gw.expire()
    second = tb.run(loop.run_once())
    assert all(r.ok for r in second.results) and second.drifted == ()
    assert {r.observed_ip for r in second.results}.isdisjoint({r.observed_ip for r in first.results})
    assert not {"exit_drifted", "sticky_broken"} & set(kinds(pool))
    assert set(slot_states(pool).values()) == {"healthy"}
    # The provider moves slot 1's session within its token's lifetime: that is stickiness broken.
    gw.break_sticky(g.token(1, at=clock.now()))
    third = tb.run(loop.run_once())
    assert third.drifted == ("gw-1",)
    broken = [e for e in pool.events() if e["kind"] == "sticky_broken"]
    assert [e["exit_id"] for e in broken] == ["gw-1"]
    assert "exit_drifted" not in kinds(pool)


def test_a_gateway_taken_down_takes_every_slot_out_together_and_one_probe_brings_all_back(tb):
    gw = tb.gateway
    g = gw.gateway(slots=6)
    pool = Pool([g], clock=ManualClock(T0), seed=3)
    gw.kill()
    failed = set()
    with requests.Session() as s:
        for _ in range(10):
            if "gateway_down" in kinds(pool):
                break
            try:
                with pool.lease(avoid=failed, timeout=0) as lease:
                    slot = lease.exit_id
                    seen_ip(s, tb.control_url, lease)
            except requests.ConnectionError:
                failed.add(slot)
            except NoExitAvailable:
                break
    # Three failing slots (incident_min_exits) were the gateway's: every slot is out at once,
    # not one breaker per slot.
    assert len(failed) == 3
    assert set(slot_states(pool).values()) == {"quarantined"}
    assert kinds(pool).count("gateway_down") == 1
    assert not any(e["kind"] == "state_changed" and e["exit_id"] in failed for e in pool.events())
    # The pool's only host is out, so it panics (fewer than half its hosts in service) and
    # serves from the gateway's slots all the same rather than from none.
    assert pool.snapshot()["pool"]["panic"] is True
    pool.release(pool.acquire(timeout=0), error="connect")
    # Back up: one successful probe of one slot brings every slot back, and the panic ends.
    gw.revive()
    result = tb.run(probe(pool.exit("gw-5"), tb.control_urls, timeout=T))
    assert result.ok
    pool.record_probe("gw-5", True, observed_ip=result.observed_ip)
    assert set(slot_states(pool).values()) == {"healthy"}
    assert kinds(pool)[-2:] == ["gateway_up", "panic"]
    assert pool.snapshot()["pool"]["panic"] is False


def wrong_password(tb, slots=4):
    gw = tb.gateway
    url = gw.url.replace(f":{gw.password}@", ":not-the-password@")
    return Gateway("gw", url, slots=slots, username=gw.username_template, lifetime=LIFETIME)


def credentials_rejected_once(pool, tb):
    events = [e for e in pool.events() if e["kind"] == "gateway_credentials_rejected"]
    assert len(events) == 1
    assert "gateway gw" in events[0]["message"] and "not-the-password" not in str(pool.events())
    # All slots out as one, and no slot's own breaker moved: no slot changed state on its own,
    # and once a probe gets through every slot is healthy again (not degraded).
    assert set(slot_states(pool).values()) == {"quarantined"}
    assert not any(e["kind"] == "state_changed" for e in pool.events())
    pool.record_probe("gw-0", True, observed_ip="127.0.2.99")
    assert set(slot_states(pool).values()) == {"healthy"}


def test_a_wrong_password_answered_407_to_plain_http_is_credentials_rejected(tb):
    pool = Pool([wrong_password(tb)], clock=ManualClock(T0))
    with requests.Session() as s, pool.lease("account-1") as lease:
        r = s.get(tb.control_url, proxies=lease.proxies, timeout=T)
        assert r.status_code == 407
        lease.report(status=r.status_code)
    assert tb.gateway.auth_failures == 1
    credentials_rejected_once(pool, tb)


# A CONNECT refused with 407: the clients raise a proxy error without a status; the lease finds
# the status in it. The target is never reached (the CONNECT fails first), so any https URL does.
def https_target(tb):
    return f"https://127.0.0.1:{tb.controls[0].port}/ip"


def test_requests_407_on_connect_is_credentials_rejected(tb):
    pool = Pool([wrong_password(tb)], clock=ManualClock(T0))
    with pytest.raises(requests.exceptions.ProxyError):
        with requests.Session() as s, pool.lease("account-1") as lease:
            s.get(https_target(tb), proxies=lease.proxies, timeout=T)
    credentials_rejected_once(pool, tb)


def test_a_407_caught_and_reported_by_hand_is_credentials_rejected_too(tb):
    import exitpool.requests

    pool = Pool([wrong_password(tb)], clock=ManualClock(T0))
    with requests.Session() as s, pool.lease("account-1") as lease:
        try:
            s.get(https_target(tb), proxies=lease.proxies, timeout=T)
        except requests.RequestException as e:
            exitpool.requests.report(lease, e)
    credentials_rejected_once(pool, tb)


def test_urllib3_407_on_connect_is_credentials_rejected(tb):
    pool = Pool([wrong_password(tb)], clock=ManualClock(T0))
    with pytest.raises(urllib3.exceptions.ProxyError):
        with pool.lease("account-1") as lease:
            e = lease.exit
            headers = urllib3.make_headers(proxy_basic_auth=f"{e.username}:{e.password}")
            with urllib3.ProxyManager(f"http://{e.host}:{e.port}", proxy_headers=headers, retries=False, timeout=T) as pm:
                pm.request("GET", https_target(tb))
    credentials_rejected_once(pool, tb)


def test_httpx_407_on_connect_is_credentials_rejected(tb):
    pool = Pool([wrong_password(tb)], clock=ManualClock(T0))
    with pytest.raises(httpx.ProxyError):
        with pool.lease("account-1") as lease, httpx.Client(proxy=lease.proxy, timeout=T) as client:
            client.get(https_target(tb))
    credentials_rejected_once(pool, tb)


def test_aiohttp_407_on_connect_is_credentials_rejected(tb):
    pool = Pool([wrong_password(tb)], clock=ManualClock(T0))

    async def go():
        async with pool.lease("account-1") as lease, aiohttp.ClientSession(trust_env=False) as s:
            async with s.get(https_target(tb), proxy=lease.proxy, timeout=aiohttp.ClientTimeout(total=T)):
                pass

    with pytest.raises(aiohttp.ClientHttpProxyError):
        tb.run(go())
    credentials_rejected_once(pool, tb)


def test_a_probe_answered_407_takes_the_gateway_out_as_credentials(tb):
    # A plain exit beside it answers, so the round is not suspect and its verdicts count.
    pool = Pool([wrong_password(tb, slots=3), tb.exits[0]], clock=ManualClock(T0))
    loop = ProbeLoop(pool, tb.control_urls, idle=0, stagger=0, timeout=T, seed=1)
    rnd = tb.run(loop.run_once())
    rejected = [r for r in rnd.results if r.exit_id.startswith("gw-")]
    assert rejected and all(r.credentials_rejected for r in rejected)
    assert not any(r.credentials_rejected for r in rnd.results if r.exit_id == "exit-0")
    assert kinds(pool).count("gateway_credentials_rejected") == 1
    assert set(slot_states(pool).values()) == {"quarantined"}
    assert pool.state("exit-0") == "healthy"


def test_the_testbed_gateway_answers_no_exit_available_and_stops_by_itself():
    gw = ProviderGateway("gw", lifetime=LIFETIME, n_addresses=2)
    with Testbed(n_exits=1, gateways=[gw]) as world:
        g = gw.gateway(slots=3)
        exits = g.exits(at=T0)
        with requests.Session() as s:
            got = [s.get(world.control_url, proxies=e.proxies, timeout=T) for e in exits]
            # Two addresses, three tokens: the third gets the provider's "no exit available".
            assert [r.status_code for r in got] == [200, 200, 502]
            assert "no exit available" in got[2].text
            gw.expire(g.token(0, at=T0))  # an address comes free
            assert s.get(world.control_url, proxies=exits[2].proxies, timeout=T).status_code == 200
            gw.unavailable(True)
            r = s.get(world.control_url, proxies=exits[1].proxies, timeout=T)
            assert (r.status_code, r.text.strip()) == (502, "no exit available")
            with pytest.raises(requests.exceptions.ProxyError, match="502"):
                s.get(https_target(world), proxies=exits[1].proxies, timeout=T)
            gw.unavailable(False)
            assert s.get(world.control_url, proxies=exits[1].proxies, timeout=T).status_code == 200
        port = gw.port
    # Closed with the testbed: nothing listens there any more.
    with socket.socket() as sock, pytest.raises(ConnectionRefusedError):
        sock.settimeout(T)
        sock.connect(("127.0.0.1", port))


def test_the_testbed_gateways_sessions_end_after_their_lifetime():
    now = [0.0]
    gw = ProviderGateway("gw", lifetime=30.0, clock=lambda: now[0])
    with Testbed(n_exits=1, gateways=[gw]) as world:
        e = gw.gateway(slots=1, lifetime=30.0).exits(at=T0)[0]
        token = gw.gateway(slots=1, lifetime=30.0).token(0, at=T0)
        with requests.Session() as s:
            first = s.get(world.control_url, proxies=e.proxies, timeout=T).json()["ip"]
            now[0] = 29.0
            assert s.get(world.control_url, proxies=e.proxies, timeout=T).json()["ip"] == first
            now[0] = 30.0  # the lifetime counted from the token's first use is over
            second = s.get(world.control_url, proxies=e.proxies, timeout=T).json()["ip"]
        assert second != first and gw.ip_of(token) == second


# A gateway that drops connections without an answer: the clients' connect timeouts are tunnel
# evidence (through a proxy, the client's only connect is to the proxy), so the gateway goes out
# as a whole. A read timeout may be the site's slowness: it takes nothing out.
def fail_three_slots(pool, request):
    """Leases on distinct slots until three have failed (bounded); the exceptions seen."""
    failed, errors = set(), []
    for _ in range(10):
        try:
            with pool.lease(avoid=failed, timeout=0) as lease:
                slot = lease.exit_id
                request(lease)
        except NoExitAvailable:
            break
        except Exception as e:  # noqa: BLE001 - the client's own error, classified by the lease
            failed.add(slot)
            errors.append(type(e).__name__)
        if len(failed) == 3:
            break
    return failed, errors


def test_connect_timeouts_from_several_slots_take_a_silent_gateway_out_httpx(tb):
    pool = Pool([tb.gateway.gateway(slots=6)], clock=ManualClock(T0), seed=3)
    tb.gateway.blackhole()

    def request(lease):
        with httpx.Client(proxy=lease.proxy, timeout=httpx.Timeout(T, connect=0.5)) as client:
            client.get(tb.control_url)

    failed, errors = fail_three_slots(pool, request)
    assert len(failed) == 3 and set(errors) == {"ConnectTimeout"}
    assert kinds(pool).count("gateway_down") == 1
    assert set(slot_states(pool).values()) == {"quarantined"}
    tb.gateway.revive()


def test_connect_timeouts_from_several_slots_take_a_silent_gateway_out_aiohttp(tb):
    pool = Pool([tb.gateway.gateway(slots=6)], clock=ManualClock(T0), seed=3)
    tb.gateway.blackhole()

    def request(lease):
        async def go():
            async with aiohttp.ClientSession(trust_env=False) as s:
                async with s.get(tb.control_url, proxy=lease.proxy, timeout=aiohttp.ClientTimeout(total=T, sock_connect=0.5)):
                    pass

        tb.run(go())

    failed, errors = fail_three_slots(pool, request)
    assert len(failed) == 3 and set(errors) == {"ConnectionTimeoutError"}
    assert kinds(pool).count("gateway_down") == 1
    assert set(slot_states(pool).values()) == {"quarantined"}


def test_read_timeouts_through_a_slow_gateway_take_nothing_out(tb):
    pool = Pool([tb.gateway.gateway(slots=6)], clock=ManualClock(T0), seed=3)
    tb.gateway.slow(1.0)

    def request(lease):
        with httpx.Client(proxy=lease.proxy, timeout=httpx.Timeout(0.2, connect=T)) as client:
            client.get(tb.control_url)

    failed, errors = fail_three_slots(pool, request)
    assert len(failed) == 3 and set(errors) == {"ReadTimeout"}
    assert "gateway_down" not in kinds(pool)
    assert set(slot_states(pool).values()) == {"healthy"}


def test_the_testbed_gateway_reads_a_password_side_token_as_a_preset_writes_it():
    # IPRoyal's form: the session rides in the password, the user name is the account's.
    gw = ProviderGateway("ipr", username="{user}", password_template="{password}_session-{session}_lifetime-{lifetime}")
    with Testbed(n_exits=1, gateways=[gw]) as world:
        g = gw.gateway(slots=2, preset="iproyal", lifetime=3600)
        exits = g.exits(at=T0)
        assert exits[0].password.endswith("_lifetime-1h")
        with requests.Session() as s:
            ips = [s.get(world.control_url, proxies=e.proxies, timeout=T).json()["ip"] for e in exits]
            assert ips == [gw.ip_of(g.token(n, at=T0)) for n in range(2)] and ips[0] != ips[1]
            bad = exits[0].proxy.replace("_session-", "_sessionX-")
            assert s.get(world.control_url, proxies={"http": bad}, timeout=T).status_code == 407
