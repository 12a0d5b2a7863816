"""exitpool.scrapy.ExitPoolMiddleware: real Scrapy crawls of the loopback testbed, each in its
own process (Twisted's reactor starts once per process), plus in-process checks of the parts a
crawl cannot isolate (Scrapy's HttpProxyMiddleware handing credentials between exits, error
classes, configuration)."""

from __future__ import annotations

import asyncio
import base64
import collections
import json
import os
import random
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest
import scrapy
from scrapy import Request
from scrapy.core.downloader.handlers.http11 import TunnelError
from scrapy.downloadermiddlewares.httpproxy import HttpProxyMiddleware
from scrapy.exceptions import IgnoreRequest, NotConfigured
from scrapy.http import HtmlResponse
from scrapy.utils.test import get_crawler

import exitpool.scrapy as exitpool_scrapy
from exitpool import Exit, InvalidInput, ManualClock, Pool
from exitpool.scrapy import BanPolicy, ExitPoolMiddleware
from exitpool.testbed import Testbed

sys.path.insert(0, str(Path(__file__).parent / "scrapy_fixtures"))
from gateway import Gateway  # noqa: E402  (a fixture of this test file)

CRAWL = Path(__file__).parent / "scrapy_fixtures" / "crawl.py"
CRAWL_TIMEOUT = 45.0
MW = "exitpool.scrapy.ExitPoolMiddleware"


def proxy_lines(tb):
    return [f"{e.exit_id} {e.proxy} ip={e.ip}" for e in tb.exits]


def crawl(tmp_path, tb, plan, settings=None, spider="plan", spider_args=None):
    """Runs one crawl in a subprocess; returns (records, summary, log). Fails the test if the
    crawl fails, outlives its bound, or prints any proxy password."""
    out = tmp_path / f"out-{len(list(tmp_path.glob('out-*')))}.jsonl"
    config = {
        "settings": {
            "DOWNLOADER_MIDDLEWARES": {MW: 610},
            "EXITPOOL_PROXY_LIST": proxy_lines(tb),
            "LOG_LEVEL": "DEBUG",
            "TELNETCONSOLE_ENABLED": False,
            "REMOTE_CONTROL_ENABLED": False,
            "HTTPERROR_ALLOW_ALL": True,  # 403 pages reach the spider, which records them
            "DOWNLOAD_TIMEOUT": 10,
            **(settings or {}),
        },
        "plan": plan,
        "out": str(out),
        "spider": spider,
        "spider_args": spider_args or {},
    }
    path = tmp_path / f"{out.stem}.json"
    path.write_text(json.dumps(config))
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    done = subprocess.run(
        [sys.executable, str(CRAWL), str(path)],
        capture_output=True,
        text=True,
        timeout=CRAWL_TIMEOUT,
        cwd=tmp_path,
        env=env,
    )
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-4000:]
    for p in tb.proxies:
        assert p.password not in log
        assert p.auth_header.split()[1] not in log  # nor its base64 form
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert records and records[-1]["kind"] == "summary", log[-4000:]
    return records[:-1], records[-1], log


def exit_of(tb):
    return {p.name: p for p in tb.proxies}


def get(url, tag, key=None, **meta):
    spec = {"url": url, "tag": tag, "meta": dict(meta)}
    if key is not None:
        spec["meta"]["exitpool_key"] = key
        spec["headers"] = {"X-Account": key}
    return spec


def assert_auth_matches(tb, records):
    """The Proxy-Authorization a response went out with belongs to the exit that served it, and
    no proxy ever saw a wrong or missing one (it answers 407 and counts it)."""
    proxies = exit_of(tb)
    for r in records:
        if r["kind"] == "response" and r["exit"] is not None:
            p = proxies[r["exit"]]
            assert r["auth_user"] == p.user
            assert r["proxy"] == f"http://127.0.0.1:{p.port}"  # no credentials in meta["proxy"]
            assert r["status"] != 407
    assert [p.auth_failures for p in tb.proxies] == [0] * len(tb.proxies)


# -- real crawls -------------------------------------------------------------------------------


def test_requests_go_through_leased_exits_sticky_keys_stay_and_own_proxies_are_left_alone(tmp_path):
    with Testbed(n_exits=5, rate=1000.0) as tb:
        ip_of = {e.exit_id: e.ip for e in tb.exits[:4]}
        own = tb.proxies[4]  # a proxy of the spider's own, outside the pool
        plan = [
            [get(f"{tb.site_url}/ip?n={i}", "keyless") for i in range(12)],
            [get(f"{tb.site_url}/page?a={a}&n={n}", f"acct-{a}", key=f"acct-{a}") for a in range(4) for n in range(4)],
            [get(f"{tb.site_url}/ip?own", "own", proxy=own.url), get(f"{tb.site_url}/ip?direct", "direct", proxy=None)],
        ]
        records, summary, log = crawl(tmp_path, tb, plan, settings={"EXITPOOL_PROXY_LIST": proxy_lines(tb)[:4]})
        by_tag = {}
        for r in records:
            assert r["kind"] == "response" and r["status"] == 200, r
            by_tag.setdefault(r["tag"], []).append(r)

        keyless = by_tag["keyless"]
        assert len(keyless) == 12
        for r in keyless:
            assert r["ip"] == ip_of[r["exit"]]  # the site saw the leased exit's address
            assert r["slot"] == f"exitpool:{r['exit']}"
        assert {r["exit"] for r in keyless} == set(ip_of)  # spread over every exit
        for a in range(4):
            rs = by_tag[f"acct-{a}"]
            assert len(rs) == 4 and len({r["exit"] for r in rs}) == 1  # one exit per account
            assert tb.site.account_ips(f"acct-{a}") == [ip_of[rs[0]["exit"]]]
            assert tb.site.teleports(f"acct-{a}") == 0 and tb.site.challenges(f"acct-{a}") == 0

        (mine,) = by_tag["own"]  # its own proxy: no lease, Scrapy's HttpProxyMiddleware did the rest
        assert mine["exit"] is None and mine["ip"] == own.source_ip and mine["slot"] == "127.0.0.1"
        (direct,) = by_tag["direct"]  # meta["proxy"] = None: straight to the site
        assert direct["exit"] is None and direct["ip"] == "127.0.0.1"

        assert_auth_matches(tb, records)
        # Scrapy's downloader keeps a slot per exit: delays and concurrency apply per exit.
        assert {f"exitpool:{x}" for x in ip_of} <= set(summary["slots"])
        stats = summary["stats"]
        assert stats["exitpool/leases"] == 28 and stats["exitpool/own_proxy"] == 2
        assert "exitpool/bans" not in stats and summary["active_leases"] == 0
        assert sum(o["success"] for o in summary["outcomes"].values()) == 28
        assert own.requests == 1


def test_banned_keyless_pages_move_to_another_exit_and_keyed_ones_never_do(tmp_path):
    with Testbed(n_exits=4, n_sites=2, rate=1000.0) as tb:
        shop, forum = tb.sites
        ip_of = {e.exit_id: e.ip for e in tb.exits}
        burned = tb.proxy("exit-1").source_ip
        shop.ban(burned)
        forum.ban(burned)
        ring = Pool(tb.exits)  # the crawl's pool has the same exits, so the same ring
        key = next(k for k in (f"acct-{i}" for i in range(200)) if ring.assign(k).exit_id == "exit-1")
        plan = [
            [get(f"{shop.url}/page?n={i}", "keyless") for i in range(12)],
            [get(f"{forum.url}/page?n=1", "keyed", key=key)],
            [get(f"{forum.url}/page?n=2", "keyed", key=key)],
            [get(f"{forum.url}/page?n=3", "keyed", key=key)],
        ]
        records, summary, log = crawl(tmp_path, tb, plan)
        keyless = [r for r in records if r["tag"] == "keyless"]
        assert len(keyless) == 12
        assert all(r["status"] == 200 and r["exit"] != "exit-1" for r in keyless)
        banned = shop.statuses(burned).get(403, 0)
        assert banned >= 1  # the weighted rotation reached the burned exit...
        moved = [r for r in keyless if r["retries"]]
        assert len(moved) == banned  # ...and every page it spoiled came back from another exit,
        assert all(r["retries"] == 1 for r in moved)  # at the first retry
        assert shop.requests(burned) == banned

        first, second, third = (r for r in records if r["tag"] == "keyed")
        # A sticky account is never moved by a ban: the spider gets the 403 from its own exit.
        for r in (first, second):
            assert (r["status"], r["exit"], r["retries"], r["ban"]) == (403, "exit-1", 0, True)
        # Two blocks quarantine the exit for the forum: the session ends there, visibly, and the
        # account starts afresh on another exit.
        assert third["status"] == 200 and third["exit"] != "exit-1"
        assert "moved at a session boundary" in log and key in log
        # ...and the request whose account moved says so, for the spider to log in again.
        assert (third["session_moved"], third["moved_from"]) == (True, "exit-1")
        assert not first["session_moved"] and not second["session_moved"] and first["moved_from"] is None
        assert forum.account_ips(key) == [ip_of[third["exit"]]]

        assert_auth_matches(tb, records)
        stats = summary["stats"]
        assert stats["exitpool/bans"] == banned + 2
        assert stats["exitpool/retries"] == banned
        assert stats["exitpool/bans/keyed"] == 2
        assert stats["exitpool/sessions_lost"] == 1
        assert summary["outcomes"]["exit-1"]["block"] == banned + 2


def test_a_spider_overrides_the_ban_policy_and_retries_move_credentials_with_the_exit(tmp_path):
    with Testbed(n_exits=4, rate=1000.0) as tb:
        ip_of = {e.exit_id: e.ip for e in tb.exits}
        soft = tb.proxy("exit-0").source_ip  # the spider reads a soft block in its /ip pages
        tb.site.ban(tb.proxy("exit-2").source_ip)  # 403s the spider says are not bans
        tb.proxy("exit-3").kill()  # refused: Scrapy's RetryMiddleware retries on the next exit
        plan = [
            [get(f"{tb.site_url}/ip?n={i}", "ip") for i in range(8)],
            [get(f"{tb.site_url}/page?n={i}", "page") for i in range(8)],
        ]
        records, summary, log = crawl(
            tmp_path,
            tb,
            plan,
            settings={"EXITPOOL_POOL_OPTIONS": {"strategy": "round_robin"}, "RETRY_TIMES": 3},
            spider="override",
            spider_args={"soft_ban_ip": soft},
        )
        assert all(r["kind"] == "response" for r in records), records
        ips = [r for r in records if r["tag"] == "ip"]
        assert len(ips) == 8 and all(r["status"] == 200 for r in ips)
        assert all(r["ip"] == ip_of[r["exit"]] != soft for r in ips)  # soft-banned pages moved
        stats = summary["stats"]
        assert stats["exitpool/retries"] >= 1 and summary["outcomes"]["exit-0"]["captcha"] == stats["exitpool/retries"]

        pages = [r for r in records if r["tag"] == "page"]
        forbidden = [r for r in pages if r["status"] == 403]
        assert forbidden and all(r["exit"] == "exit-2" and r["retries"] == 0 and r["ban"] is False for r in forbidden)
        assert summary["outcomes"]["exit-2"]["block"] == 0  # not held against the exit

        # Requests refused by the dead exit were retried by Scrapy's RetryMiddleware on
        # another exit: the copy carried the dead exit's Proxy-Authorization and Scrapy's
        # HttpProxyMiddleware bookkeeping for it, and still went out with the new exit's.
        rescued = [r for r in records if r["retry_times"]]
        assert rescued and all(r["exit"] != "exit-3" and r["status"] in (200, 403) for r in rescued)
        assert summary["outcomes"]["exit-3"]["connect"] >= 1 and stats["exitpool/errors/connect"] >= 1
        assert_auth_matches(tb, records)


# The wait sleeps on the reactor: Scrapy's default asyncio one and Twisted's own.
@pytest.mark.parametrize(
    "reactor", ["twisted.internet.asyncioreactor.AsyncioSelectorReactor", "twisted.internet.selectreactor.SelectReactor"]
)
def test_cooling_exits_delay_requests_instead_of_dropping_them(tmp_path, reactor):
    with Testbed(n_exits=2, rate=1000.0) as tb:
        path = tmp_path / "proxies.txt"
        path.write_text("# the exits\n" + "\n".join(proxy_lines(tb)) + "\n")
        plan = [[get(f"{tb.site_url}/ip?n={i}", "ip") for i in range(6)]]
        records, summary, log = crawl(
            tmp_path,
            tb,
            plan,
            settings={
                "EXITPOOL_PROXY_LIST": None,
                "EXITPOOL_PROXY_LIST_PATH": str(path),
                "EXITPOOL_POOL_OPTIONS": {"strategy": "lru", "cooldown": 0.2},
                "TWISTED_REACTOR": reactor,
            },
        )
        assert len(records) == 6 and all(r["kind"] == "response" and r["status"] == 200 for r in records)
        assert {r["exit"] for r in records} == {"exit-0", "exit-1"}
        stats = summary["stats"]
        assert stats["exitpool/waits"] >= 1 and "exitpool/no_exit" not in stats
        assert_auth_matches(tb, records)


def test_a_real_download_timeout_is_recorded_as_timeout_and_moves_a_keyless_page(tmp_path):
    with Testbed(n_exits=3, rate=1000.0) as tb:
        ip_of = {e.exit_id: e.ip for e in tb.exits}
        tb.proxy("exit-0").slow(4.0)  # answers long after DOWNLOAD_TIMEOUT
        plan = [[get(f"{tb.site_url}/ip?n={i}", "ip") for i in range(6)]]
        records, summary, log = crawl(
            tmp_path,
            tb,
            plan,
            settings={
                "DOWNLOAD_TIMEOUT": 1,
                "RETRY_ENABLED": False,  # only exitpool may send a page again
                "EXITPOOL_POOL_OPTIONS": {"strategy": "round_robin"},
            },
        )
        assert len(records) == 6 and all(r["kind"] == "response" and r["status"] == 200 for r in records), records
        assert all(r["exit"] != "exit-0" and r["ip"] == ip_of[r["exit"]] for r in records)
        moved = [r for r in records if r["retries"]]
        timeouts = summary["outcomes"]["exit-0"]["timeout"]
        assert moved and all(r["retries"] == 1 for r in moved)
        assert timeouts == len(moved) == summary["stats"]["exitpool/errors/timeout"] == summary["stats"]["exitpool/retries"]
        assert sum(summary["outcomes"]["exit-0"].values()) == timeouts  # recorded as timeouts, nothing else
        assert_auth_matches(tb, records)


def test_scrapys_retries_of_a_keyed_request_stay_on_its_exit(tmp_path):
    with Testbed(n_exits=3, n_sites=2, rate=1000.0) as tb:
        down, shop = tb.sites
        ip_of = {e.exit_id: e.ip for e in tb.exits}
        down.incident(True, status=503)
        ring = Pool(tb.exits)
        keys = iter(f"acct-{i}" for i in range(1000))
        a = next(k for k in keys if ring.assign(k).exit_id == "exit-0")
        b = next(k for k in keys if ring.assign(k).exit_id == "exit-1")
        # exit-1 resets its first connection without an answer and serves the second
        seed = next(s for s in range(1000) if (lambda rng: rng.random() < 0.5 <= rng.random())(random.Random(s)))
        tb.proxy("exit-1").flaky(0.5, seed=seed)
        plan = [[get(f"{down.url}/page?n=1", "503", key=a), get(f"{shop.url}/page?n=1", "reset", key=b)]]
        records, summary, log = crawl(tmp_path, tb, plan, settings={"RETRY_TIMES": 2})
        (unavailable,) = [r for r in records if r["tag"] == "503"]
        (reset,) = [r for r in records if r["tag"] == "reset"]
        # Scrapy's RetryMiddleware sent the 503 page twice more, every time from the account's exit
        assert (unavailable["status"], unavailable["exit"], unavailable["retry_times"], unavailable["retries"]) == (503, "exit-0", 2, 0)
        assert down.requests(ip_of["exit-0"]) == down.requests() == 3
        # and the page whose connection was reset: retried by Scrapy on the same exit, not moved
        assert (reset["status"], reset["exit"], reset["retry_times"], reset["retries"]) == (200, "exit-1", 1, 0)
        assert tb.proxy("exit-1").dropped == 1 and shop.account_ips(b) == [ip_of["exit-1"]]
        assert summary["outcomes"]["exit-1"]["connect"] == 1 and summary["outcomes"]["exit-1"]["success"] == 1
        assert "exitpool/retries" not in summary["stats"] and "exitpool/sessions_lost" not in summary["stats"]
        assert_auth_matches(tb, records)


def test_responses_from_scrapys_http_cache_are_not_reported(tmp_path):
    with Testbed(n_exits=2, rate=1000.0) as tb:
        plan = [
            [get(f"{tb.site_url}/ip?n={i}", "ip") for i in range(4)],
            [get(f"{tb.site_url}/page?a=1", "acct", key="acct-1")],
        ]
        settings = {"HTTPCACHE_ENABLED": True, "HTTPCACHE_DIR": str(tmp_path / "cache")}
        first, summary, _ = crawl(tmp_path, tb, plan, settings=settings)
        assert len(first) == 5 and all(r["status"] == 200 and not r["cached"] for r in first)
        assert sum(o["success"] for o in summary["outcomes"].values()) == 5
        sent = [p.requests for p in tb.proxies]

        second, summary, _ = crawl(tmp_path, tb, plan, settings=settings)
        assert len(second) == 5 and all(r["status"] == 200 and r["cached"] for r in second)
        assert [p.requests for p in tb.proxies] == sent  # no exit was used...
        for outcomes in summary["outcomes"].values():  # ...so none is held for or against it
            assert sum(n for kind, n in outcomes.items() if kind != "other") == 0, outcomes
        assert summary["active_leases"] == 0


def test_a_request_a_later_middleware_drops_is_reported_as_other(tmp_path):
    with Testbed(n_exits=2, rate=1000.0) as tb:
        plan = [[get(f"{tb.site_url}/ip?n={i}", "dropped", ignore_here=True) for i in range(3)] + [get(f"{tb.site_url}/ip?kept", "kept")]]
        records, summary, log = crawl(
            tmp_path,
            tb,
            plan,
            settings={"DOWNLOADER_MIDDLEWARES": {MW: 610, "fixture_middlewares.IgnoreTaggedMiddleware": 700}},
        )
        dropped = [r for r in records if r["tag"] == "dropped"]
        assert len(dropped) == 3 and all(r["kind"] == "error" and r["error"] == "IgnoreRequest" and r["retries"] == 0 for r in dropped)
        (kept,) = [r for r in records if r["tag"] == "kept"]
        assert kept["status"] == 200
        total = {kind: sum(o[kind] for o in summary["outcomes"].values()) for kind in ("success", "other", "timeout", "connect", "block")}
        assert total == {"success": 1, "other": 3, "timeout": 0, "connect": 0, "block": 0}
        stats = summary["stats"]
        assert stats["exitpool/errors/other"] == 3 and "exitpool/retries" not in stats
        assert summary["active_leases"] == 0 and sum(p.requests for p in tb.proxies) == 1


def test_a_middleware_that_reroutes_requests_sends_none_of_the_exits_credentials(tmp_path):
    with Testbed(n_exits=3, rate=1000.0) as tb:
        other = tb.proxies[2]  # a proxy outside the pool
        elsewhere = f"http://127.0.0.1:{other.port}"
        plan = [
            [get(f"{tb.site_url}/ip?n={i}", "rerouted", reroute_to=elsewhere) for i in range(3)] + [get(f"{tb.site_url}/ip?kept", "kept")]
        ]
        records, summary, log = crawl(
            tmp_path,
            tb,
            plan,
            settings={
                "EXITPOOL_PROXY_LIST": proxy_lines(tb)[:2],
                "DOWNLOADER_MIDDLEWARES": {MW: 610, "fixture_middlewares.RerouteMiddleware": 700},
            },
        )
        rerouted = [r for r in records if r["tag"] == "rerouted"]
        assert len(rerouted) == 3
        for r in rerouted:  # the other proxy got no credentials at all, and said so
            assert (r["status"], r["proxy"], r["auth_user"], r["retries"]) == (407, elsewhere, None, 0)
        assert other.auth_failures == 3 and other.requests == 0
        (kept,) = [r for r in records if r["tag"] == "kept"]
        assert kept["status"] == 200 and kept["auth_user"] == tb.proxy(kept["exit"]).user
        # the 407s are not the exits' doing: nothing held against them, nothing moved
        total = {kind: sum(o[kind] for o in summary["outcomes"].values()) for kind in ("success", "other", "block")}
        assert total == {"success": 1, "other": 3, "block": 0}
        assert [p.auth_failures for p in tb.proxies[:2]] == [0, 0]


def test_exits_on_one_gateway_that_differ_only_by_user_name_keep_their_own_credentials(tmp_path):
    with Testbed(n_exits=2, n_sites=2, rate=1000.0) as tb:
        pages, guarded = tb.sites
        passwords = {"sess-a": secrets.token_hex(8), "sess-b": secrets.token_hex(8)}
        gateway = Gateway({user: (passwords[user], proxy) for user, proxy in zip(passwords, tb.proxies)})
        tb.run(gateway.start())
        try:
            # no ids: each exit is named user@host:port, the same gateway for both
            lines = [
                f"http://{user}:{pw}@127.0.0.1:{gateway.port} ip={p.source_ip}" for (user, pw), p in zip(passwords.items(), tb.proxies)
            ]
            exit_a, exit_b = (f"{user}@127.0.0.1:{gateway.port}" for user in passwords)
            user_of = {exit_a: "sess-a", exit_b: "sess-b"}
            ip_of = {exit_a: tb.proxies[0].source_ip, exit_b: tb.proxies[1].source_ip}
            guarded.ban(ip_of[exit_a])  # sess-a's pages there are moved to sess-b, same gateway
            plan = [
                [get(f"{pages.url}/ip?n={i}", "ip") for i in range(6)],
                [get(f"{guarded.url}/page?n={i}", "moved") for i in range(4)],
                [get(f"{pages.url}/page?a={a}&n={n}", f"acct-{a}", key=f"acct-{a}") for a in range(4) for n in range(2)],
            ]
            records, summary, log = crawl(
                tmp_path,
                tb,
                plan,
                settings={"EXITPOOL_PROXY_LIST": lines, "EXITPOOL_POOL_OPTIONS": {"strategy": "round_robin"}},
            )
        finally:
            tb.run(gateway.close())
        assert all(pw not in log for pw in passwords.values())
        assert len(records) == 18
        for r in records:  # each request left with its own exit's user name, and from its address
            assert r["kind"] == "response" and r["status"] == 200, r
            assert r["auth_user"] == user_of[r["exit"]] and r["proxy"] == f"http://127.0.0.1:{gateway.port}"
            if r["tag"] == "ip":
                assert r["ip"] == ip_of[r["exit"]]
        assert {r["exit"] for r in records if r["tag"] == "ip"} == {exit_a, exit_b}
        moved = [r for r in records if r["tag"] == "moved"]
        banned = guarded.statuses(ip_of[exit_a]).get(403, 0)
        assert banned >= 1 and all(r["exit"] == exit_b for r in moved)
        assert len([r for r in moved if r["retries"] == 1]) == banned
        for a in range(4):
            (exit_id,) = {r["exit"] for r in records if r["tag"] == f"acct-{a}"}
            assert pages.account_ips(f"acct-{a}") == [ip_of[exit_id]]
        assert gateway.auth_failures == 0
        served = collections.Counter(user_of[r["exit"]] for r in records)
        assert gateway.requests == {"sess-a": served["sess-a"] + banned, "sess-b": served["sess-b"]}


def test_close_spider_when_no_exit_can_serve(tmp_path):
    with Testbed(n_exits=2, rate=1000.0) as tb:
        for p in tb.proxies:
            tb.site.ban(p.source_ip)
        plan = [
            [get(f"{tb.site_url}/page?n={i}", "banned") for i in range(2)],
            [get(f"{tb.site_url}/page?late={i}", "late") for i in range(3)],
        ]
        started = time.monotonic()
        records, summary, log = crawl(
            tmp_path,
            tb,
            plan,
            settings={
                "EXITPOOL_CLOSE_SPIDER": True,
                "EXITPOOL_WAIT": 30,
                # let the pool take every exit out (its defaults keep one in service, and its
                # panic threshold would serve from them all again)
                "EXITPOOL_POOL_OPTIONS": {
                    "health": {"min_in_service": 0, "max_ejected": 1.0, "incident_min_exits": 100, "panic_threshold": 0}
                },
            },
        )
        assert time.monotonic() - started < 20  # closed at once, not after EXITPOOL_WAIT per request
        stats = summary["stats"]
        assert stats["finish_reason"] == "exitpool_no_exits"
        assert stats["exitpool/no_exit"] >= 1 and "exitpool/waits" not in stats
        assert any(r["kind"] == "error" and r["error"] == "IgnoreRequest" for r in records)
        assert "closing the spider: no exit can serve" in log


# -- in process: the parts a crawl cannot isolate ----------------------------------------------


def middleware(settings=None, spidercls=None):
    settings = {
        "EXITPOOL_PROXY_LIST": [
            "exit-a http://alice:pw-a@127.0.0.1:9001",
            "exit-b http://bob:pw-b@127.0.0.1:9002",
            "exit-c 127.0.0.1:9003",  # no credentials at all
        ],
        "EXITPOOL_POOL_OPTIONS": {"strategy": "round_robin"},
        **(settings or {}),
    }
    crawler = get_crawler(spidercls, settings)
    return ExitPoolMiddleware.from_crawler(crawler), crawler


def basic(user, password):
    return b"Basic " + base64.b64encode(f"{user}:{password}".encode())


def run(coro):
    # bounded: a request that waited for an exit would sleep on a reactor nobody runs here
    return asyncio.run(asyncio.wait_for(coro, 10))


def response(request, status=200, body=b"<html>ok</html>", headers=None):
    return HtmlResponse(request.url, status=status, body=body, headers=headers, request=request)


def test_scrapy_httpproxymiddleware_keeps_each_exits_own_credentials():
    mw, crawler = middleware()
    httpproxy = HttpProxyMiddleware.from_crawler(crawler)
    expected = {"exit-a": basic("alice", "pw-a"), "exit-b": basic("bob", "pw-b"), "exit-c": None}

    request = Request("http://shop.example/p/1")
    seen = []
    for _attempt in range(4):  # round_robin: a, b, c, a; each retry copy comes back through both
        run(mw.process_request(request))
        httpproxy.process_request(request)
        exit_id = request.meta["exitpool_exit"]
        seen.append(exit_id)
        assert request.meta["proxy"] == f"http://127.0.0.1:{9001 + 'abc'.index(exit_id[-1])}"
        assert request.headers.get(b"Proxy-Authorization") == expected[exit_id]
        # a 503 is no ban: the lease ends and RetryMiddleware sends a copy of the request
        assert mw.process_response(request, response(request, 503)) is not None
        request = request.copy()
    assert seen == ["exit-a", "exit-b", "exit-c", "exit-a"]


def test_a_middleware_that_reroutes_a_request_takes_none_of_the_exits_credentials_along():
    mw, crawler = middleware()
    httpproxy = HttpProxyMiddleware.from_crawler(crawler)
    request = Request("http://shop.example/p/1")
    run(mw.process_request(request))
    assert request.meta["exitpool_exit"] == "exit-a"
    # a middleware between ours and HttpProxyMiddleware points the request at another proxy
    request.meta["proxy"] = "http://127.0.0.1:9009"
    httpproxy.process_request(request)
    assert request.meta["proxy"] == "http://127.0.0.1:9009"
    assert b"Proxy-Authorization" not in request.headers  # alice's credentials stay behind
    # the answer is not exit-a's doing: nothing is held for or against it, nothing moves
    got = mw.process_response(request, response(request, 407))
    assert got.status == 407 and "exitpool_ban" not in got.meta
    outcomes = mw.pool.snapshot()["counts"]["outcomes"]
    assert outcomes["other"] == 1 and sum(outcomes.values()) == 1
    assert mw.pool.snapshot()["live_leases"] == 0


def test_a_ban_retry_carries_nothing_of_the_banned_exit():
    mw, crawler = middleware()
    request = Request("http://shop.example/p/1")
    run(mw.process_request(request))
    assert request.meta["exitpool_exit"] == "exit-a"
    retry = mw.process_response(request, response(request, 403))
    assert isinstance(retry, Request) and retry.dont_filter and retry.meta["exitpool_retries"] == 1
    assert b"Proxy-Authorization" not in retry.headers
    assert not {"proxy", "_auth_proxy", "download_slot", "exitpool_exit"} & set(retry.meta)
    run(mw.process_request(retry))
    assert retry.meta["exitpool_exit"] == "exit-b"
    assert retry.headers[b"Proxy-Authorization"] == basic("bob", "pw-b")
    assert retry.meta["download_slot"] == "exitpool:exit-b"
    # a keyed request is never moved: the 403 is reported and handed to the spider
    keyed = Request("http://shop.example/p/2", meta={"exitpool_key": "acct-1"})
    run(mw.process_request(keyed))
    got = mw.process_response(keyed, response(keyed, 403))
    assert got.status == 403 and got.meta["exitpool_ban"] is True
    # a request in a download slot of its own keeps it
    slotted = Request("http://shop.example/p/3", meta={"download_slot": "mine"})
    run(mw.process_request(slotted))
    assert slotted.meta["download_slot"] == "mine"
    stats = crawler.stats.get_stats()
    assert stats["exitpool/bans"] == 2 and stats["exitpool/retries"] == 1 and stats["exitpool/bans/keyed"] == 1


def loadable(cases):
    """Recent Scrapy wraps Twisted's errors in its own classes; older Scrapy raises
    Twisted's (covered here too)."""
    from scrapy.utils.misc import load_object

    found = []
    for path, outcome in cases:
        try:
            found.append((load_object(path), outcome))
        except (ImportError, NameError, AttributeError):
            pass
    return found


@pytest.mark.parametrize(
    "cls, kind",
    loadable(
        [
            ("scrapy.exceptions.DownloadTimeoutError", "timeout"),
            ("twisted.internet.error.TimeoutError", "timeout"),
            ("twisted.internet.error.TCPTimedOutError", "connect"),
            ("scrapy.exceptions.DownloadConnectionRefusedError", "connect"),
            ("twisted.internet.error.ConnectionRefusedError", "connect"),
            ("twisted.internet.error.ConnectionLost", "connect"),
            ("twisted.web._newclient.ResponseNeverReceived", "connect"),
            ("scrapy.core.downloader.handlers.http11.TunnelError", "proxy"),
            ("scrapy.exceptions.IgnoreRequest", "other"),
            ("builtins.ValueError", "other"),
        ]
    ),
    ids=lambda v: getattr(v, "__name__", v),
)
def test_download_errors_reach_the_exits_health_in_the_right_class(cls, kind):
    error = cls([]) if cls.__name__ == "ResponseNeverReceived" else cls()
    mw, crawler = middleware()
    request = Request("http://shop.example/")
    run(mw.process_request(request))
    got = mw.process_exception(request, error)
    outcomes = {e["exit_id"]: e["outcomes"] for e in mw.pool.snapshot()["exits"]}["exit-a"]
    # the pool's health files a failed CONNECT tunnel ("proxy") with the connection failures
    outcome = "connect" if kind == "proxy" else kind
    assert outcomes[outcome] == 1 and sum(outcomes.values()) == 1
    assert crawler.stats.get_value(f"exitpool/errors/{kind}") == 1
    # transport failures of a keyless request move it to another exit at once
    assert isinstance(got, Request) == (kind in ("timeout", "connect", "proxy"))


def test_a_connect_tunnel_answered_407_is_the_gateways_credentials():
    import exitpool

    mw, crawler = middleware()
    gw = exitpool.Gateway("gw", "http://customer:pw@127.0.0.1:9009", slots=3, username="{user}-session-{session}", lifetime=600)
    mw.pool = Pool([gw], clock=ManualClock(1_700_000_000.0))
    request = Request("https://shop.example/")
    run(mw.process_request(request))
    error = TunnelError(
        "Could not open CONNECT tunnel with proxy 127.0.0.1:9009 [{'status': 407, 'reason': b'Proxy Authentication Required'}]"
    )
    mw.process_exception(request, error)
    assert [e["kind"] for e in mw.pool.events()].count("gateway_credentials_rejected") == 1
    assert {mw.pool.state(e.exit_id) for e in mw.pool.exits} == {"quarantined"}


def test_captcha_pages_are_bans_reported_as_captchas():
    policy = BanPolicy()
    request = Request("http://shop.example/")
    assert policy.response_is_ban(request, response(request, 200, b"<div class=g-recaptcha>solve the CAPTCHA</div>"))
    assert policy.response_is_ban(request, response(request, 200, headers={"X-Captcha": "1"}))
    assert not policy.response_is_ban(request, response(request, 200))
    assert not policy.response_is_ban(request, response(request, 503))
    mw, _ = middleware({"EXITPOOL_BAN_RETRIES": 0})
    run(mw.process_request(request))
    assert mw.process_response(request, response(request, 200, b"captcha")).status == 200  # no retries left
    assert mw.pool.snapshot()["counts"]["outcomes"]["captcha"] == 1


def test_no_exit_to_wait_for_drops_the_request_and_says_why(caplog):
    mw, crawler = middleware({"EXITPOOL_POOL_OPTIONS": {"max_leases": 1}, "EXITPOOL_WAIT": 0})
    held = [Request(f"http://shop.example/{i}") for i in range(3)]
    for r in held:
        run(mw.process_request(r))
    with pytest.raises(IgnoreRequest, match="exitpool"):
        run(mw.process_request(Request("http://shop.example/4")))
    assert crawler.stats.get_value("exitpool/no_exit") == 1
    assert "dropping" in caplog.text
    mw._spider_closed(None, "finished")  # leases still out are handed back at the end
    assert mw.pool.snapshot()["live_leases"] == 0
    assert crawler.stats.get_value("exitpool/leases_closed") == 3


def test_configuration_from_settings(tmp_path, monkeypatch):
    with pytest.raises(NotConfigured):
        ExitPoolMiddleware.from_crawler(get_crawler(None, {}))
    with pytest.raises(NotConfigured):
        ExitPoolMiddleware.from_crawler(get_crawler(None, {"EXITPOOL_PROXY_LIST": []}))
    lines = "exit-a http://alice:pw-a@127.0.0.1:9001\nexit-b 127.0.0.1:9002"
    path = tmp_path / "proxies.txt"
    path.write_text(lines)
    with pytest.raises(InvalidInput, match="EXITPOOL_PROXY_LIST_PATH and EXITPOOL_PROXY_LIST"):
        middleware({"EXITPOOL_PROXY_LIST_PATH": str(path), "EXITPOOL_PROXY_LIST": lines})
    (tmp_path / "empty.txt").write_text("# nothing yet\n")
    with pytest.raises(InvalidInput, match="holds no exit"):
        middleware({"EXITPOOL_PROXY_LIST_PATH": str(tmp_path / "empty.txt"), "EXITPOOL_PROXY_LIST": None})
    # socks5 exits are reached through a relay (tests/test_scrapy_socks.py)
    mw, _ = middleware({"EXITPOOL_PROXY_LIST": ["s socks5://carol:pw-c@127.0.0.1:1080"]})
    assert [e.scheme for e in mw.pool.exits] == ["socks5"]
    # a string of lines (from -s or an environment variable) works like a list
    mw, _ = middleware({"EXITPOOL_PROXY_LIST": lines, "EXITPOOL_KEY_META": "account", "EXITPOOL_POOL_OPTIONS": '{"session_ttl": 60}'})
    assert [e.exit_id for e in mw.pool.exits] == ["exit-a", "exit-b"] and mw.key_meta == "account"
    request = Request("http://shop.example:8080/x", meta={"account": 42})
    run(mw.process_request(request))
    mw.process_response(request, response(request))
    snap = mw.pool.snapshot()
    assert snap["pool"]["sessions"] == 1  # the key came from meta["account"]
    assert [s["site"] for s in snap["sites"]] == ["shop.example:8080"]  # the site is the host

    # EXITPOOL_CONFIG goes to Pool.from_config, which owns every pool option then
    calls = []

    class ConfiguredPool:
        @staticmethod
        def from_config(p, watch=False):
            calls.append((p, watch))
            return Pool([Exit("exit-z", "http://zed:pw-z@127.0.0.1:9009")])

    monkeypatch.setattr(exitpool_scrapy, "Pool", ConfiguredPool)
    mw, _ = middleware({"EXITPOOL_PROXY_LIST": None, "EXITPOOL_POOL_OPTIONS": {}, "EXITPOOL_CONFIG": "exitpool.toml"})
    # ... and watches it (EXITPOOL_PROXY_LIST_WATCH is on by default)
    assert calls == [("exitpool.toml", True)] and [e.exit_id for e in mw.pool.exits] == ["exit-z"]
    with pytest.raises(InvalidInput, match="config file"):
        middleware({"EXITPOOL_PROXY_LIST": None, "EXITPOOL_CONFIG": "exitpool.toml"})


class PolicyFromCrawler(BanPolicy):
    made_with = None

    @classmethod
    def from_crawler(cls, crawler):
        policy = cls()
        policy.made_with = crawler
        return policy

    def response_is_ban(self, request, response):
        return b"denied" in response.body


def test_a_ban_policy_from_settings():
    mw, crawler = middleware({"EXITPOOL_BAN_POLICY": f"{__name__}.PolicyFromCrawler"})
    assert isinstance(mw.policy, PolicyFromCrawler) and mw.policy.made_with is crawler
    request = Request("http://shop.example/")
    run(mw.process_request(request))
    assert isinstance(mw.process_response(request, response(request, 200, b"access denied")), Request)


class RaisingSpider(scrapy.Spider):
    """A spider whose ban rules are buggy, and whose error messages quote the request's
    headers (Proxy-Authorization included)."""

    name = "raising"

    def response_is_ban(self, request, response):
        raise ValueError(f"cannot judge {request.headers.to_unicode_dict()}")

    def exception_is_ban(self, request, exception):
        raise KeyError(f"cannot judge {request.headers!r}")


class RaisingPolicy(BanPolicy):
    def response_is_ban(self, request, response):
        raise ValueError(f"cannot judge {request.headers.to_unicode_dict()}")

    def exception_is_ban(self, request, exception):
        raise KeyError(f"cannot judge {request.headers!r}")


@pytest.mark.parametrize("where", ["spider", "policy"])
def test_a_ban_rule_that_raises_is_logged_taken_as_no_opinion_and_ends_the_lease(where, caplog):
    if where == "spider":
        mw, crawler = middleware()
        crawler.spider = RaisingSpider()
    else:
        mw, crawler = middleware({"EXITPOOL_BAN_POLICY": f"{__name__}.RaisingPolicy"})
    request = Request("http://shop.example/1")
    run(mw.process_request(request))
    got = mw.process_response(request, response(request, 403))
    # no opinion: the page is not moved, and the status alone is recorded (a block)
    assert got.status == 403 and got.meta["exitpool_ban"] is None
    failed = Request("http://shop.example/2")
    run(mw.process_request(failed))
    assert mw.process_exception(failed, TimeoutError()) is None  # not moved either
    snap = mw.pool.snapshot()
    assert snap["live_leases"] == 0  # both leases ended
    assert snap["counts"]["outcomes"]["block"] == 1 and snap["counts"]["outcomes"]["timeout"] == 1
    assert crawler.stats.get_value("exitpool/ban_rule_errors") == 2
    assert "response_is_ban raised ValueError" in caplog.text and "exception_is_ban raised KeyError" in caplog.text
    for secret in ("pw-a", "pw-b", basic("alice", "pw-a").split()[1].decode(), basic("bob", "pw-b").split()[1].decode()):
        assert secret not in caplog.text


class Abort(BaseException):
    """Not an Exception: it goes through the middleware (as KeyboardInterrupt would)."""


def test_whatever_goes_through_a_verdict_the_lease_ends():
    mw, crawler = middleware()

    class Judge:
        def response_is_ban(self, request, response):
            raise Abort()

        def exception_is_ban(self, request, exception):
            return [1, 2]  # truthy: taken as a ban

    crawler.spider = Judge()
    request = Request("http://shop.example/1")
    run(mw.process_request(request))
    with pytest.raises(Abort):
        mw.process_response(request, response(request))
    assert mw.pool.snapshot()["live_leases"] == 0
    failed = Request("http://shop.example/2")
    run(mw.process_request(failed))
    assert isinstance(mw.process_exception(failed, TimeoutError()), Request)
    assert mw.pool.snapshot()["live_leases"] == 0


def test_a_proxy_list_string_is_split_on_newlines_and_commas():
    # the form of `-s EXITPOOL_PROXY_LIST=...`, Scrapy's getlist and ROTATING_PROXY_LIST
    mw, _ = middleware(
        {
            "EXITPOOL_PROXY_LIST": "http://alice:pw-a@127.0.0.1:9001,http://bob:pw%2Cb@127.0.0.1:9002\n"
            "# spare ones, for later\n"
            "exit-c 127.0.0.1:9003, exit-d 127.0.0.1:9004",
        }
    )
    exits = {e.port: (e.username, e.password) for e in mw.pool.exits}
    assert exits == {9001: ("alice", "pw-a"), 9002: ("bob", "pw,b"), 9003: (None, None), 9004: (None, None)}
    request = Request("http://shop.example/")
    run(mw.process_request(request))
    assert request.headers[b"Proxy-Authorization"] == basic(*exits[int(request.meta["proxy"].rsplit(":", 1)[1])])
    # a list's items are lines, commas and all
    mw, _ = middleware({"EXITPOOL_PROXY_LIST": ["http://alice:pw,a@127.0.0.1:9001"]})
    assert [e.password for e in mw.pool.exits] == ["pw,a"]
    # a bad entry is named with its password masked, the others' too
    with pytest.raises(InvalidInput) as e:
        middleware({"EXITPOOL_PROXY_LIST": "http://alice:s3cret-a@127.0.0.1:port,http://bob:s3cret-b@127.0.0.1:9002"})
    assert "s3cret-a" not in str(e.value) and "s3cret-b" not in str(e.value)


def test_a_request_limits_its_own_ban_retries():
    mw, crawler = middleware({"EXITPOOL_BAN_RETRIES": 3, "EXITPOOL_WAIT": 0})
    # one site each: no exit gets blocked often enough by one site to be taken out
    never = Request("http://one.example/", meta={"exitpool_max_retries": 0})
    run(mw.process_request(never))
    assert mw.process_response(never, response(never, 403)).status == 403  # handed over, not moved
    once = Request("http://two.example/", meta={"exitpool_max_retries": 1})
    run(mw.process_request(once))
    retry = mw.process_response(once, response(once, 403))
    assert isinstance(retry, Request) and retry.meta["exitpool_retries"] == 1
    run(mw.process_request(retry))
    assert mw.process_response(retry, response(retry, 403)).status == 403
    assert crawler.stats.get_value("exitpool/retries") == 1 and crawler.stats.get_value("exitpool/retries/gave_up") == 2
    # without it, EXITPOOL_BAN_RETRIES applies
    page = Request("http://three.example/")
    run(mw.process_request(page))
    for _ in range(2):
        page = mw.process_response(page, response(page, 403))
        assert isinstance(page, Request)
        run(mw.process_request(page))
    assert page.meta["exitpool_retries"] == 2
    for bad in (-1, "2", 1.5, True):
        with pytest.raises(InvalidInput, match="exitpool_max_retries"):
            run(mw.process_request(Request("http://shop.example/4", meta={"exitpool_max_retries": bad})))


def test_the_default_lease_ttl_covers_the_wait_in_scrapys_download_slots(monkeypatch):
    clock = ManualClock()
    made = []

    def pool(exits, **options):
        made.append(options)
        return Pool(exits, clock=clock, **options)

    monkeypatch.setattr(exitpool_scrapy, "Pool", pool)
    base = {"EXITPOOL_POOL_OPTIONS": {}}
    middleware(base)
    assert made[-1]["lease_ttl"] == 180 + 60  # Scrapy's defaults: no delay
    # 100 s timeout + 60 s + 8 requests ahead in the slot x 5 s delay x 1.5 (Scrapy's jitter)
    mw, _ = middleware({**base, "DOWNLOAD_TIMEOUT": 100, "DOWNLOAD_DELAY": 5, "CONCURRENT_REQUESTS": 8})
    assert made[-1]["lease_ttl"] == 100 + 60 + 8 * 7.5
    # AutoThrottle may stretch a slot's delay to AUTOTHROTTLE_MAX_DELAY
    throttled = {**base, "DOWNLOAD_TIMEOUT": 30, "CONCURRENT_REQUESTS": 4, "AUTOTHROTTLE_MAX_DELAY": 10}
    middleware(throttled)
    assert made[-1]["lease_ttl"] == 120  # off: 30 + 60, and never below 120
    middleware({**throttled, "AUTOTHROTTLE_ENABLED": True})
    assert made[-1]["lease_ttl"] == 30 + 60 + 4 * 15
    middleware({**throttled, "DOWNLOAD_SLOTS": {"exitpool:exit-a": {"delay": 20, "jitter": 0}}})
    assert made[-1]["lease_ttl"] == 30 + 60 + 4 * 20
    middleware({**base, "EXITPOOL_POOL_OPTIONS": {"lease_ttl": 50}, "DOWNLOAD_DELAY": 5})
    assert made[-1]["lease_ttl"] == 50  # the pool options win

    # the pool really keeps a lease that long: one waiting 215 s in a slot still reports
    held, late = mw.pool.acquire(None, timeout=0), mw.pool.acquire(None, timeout=0)
    clock.advance(219)
    assert mw.pool.release(held, status=200) is True
    clock.advance(2)
    assert mw.pool.release(late, status=200) is False  # past lease_ttl: expired


def test_a_keyless_retry_after_a_ban_takes_another_exit_without_touching_the_banned_one():
    mw, crawler = middleware()  # round_robin over exit-a, exit-b, exit-c
    first, second, third = (Request(f"http://shop.example/{i}") for i in range(3))
    for r in (first, second, third):
        run(mw.process_request(r))
    assert [r.meta["exitpool_exit"] for r in (first, second, third)] == ["exit-a", "exit-b", "exit-c"]
    retry = mw.process_response(first, response(first, 403))
    # the rotation is back at exit-a, the exit the page was banned from: the pick passes over it
    run(mw.process_request(retry))
    assert retry.meta["exitpool_exit"] == "exit-b"
    mw.process_response(retry, response(retry))
    outcomes = mw.pool.snapshot()["counts"]["outcomes"]
    assert outcomes["other"] == 0 and outcomes["block"] == 1 and outcomes["success"] == 1
    assert {e["exit_id"]: e["leases"] for e in mw.pool.snapshot()["exits"]} == {"exit-a": 1, "exit-b": 2, "exit-c": 1}


def test_a_keyless_retry_that_only_banned_exits_can_serve_still_goes_out():
    mw, crawler = middleware({"EXITPOOL_POOL_OPTIONS": {"strategy": "round_robin", "max_leases": 1}, "EXITPOOL_WAIT": 0})
    page = Request("http://shop.example/page")
    run(mw.process_request(page))
    held = [Request(f"http://shop.example/{i}") for i in range(2)]  # exit-b and exit-c stay busy
    for r in held:
        run(mw.process_request(r))
    retry = mw.process_response(page, response(page, 403))
    run(mw.process_request(retry))
    assert retry.meta["exitpool_exit"] == "exit-a"  # the pool's own pick, as without a ban
    assert mw.pool.snapshot()["counts"]["outcomes"]["other"] == 0
