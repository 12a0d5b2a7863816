"""exitpool.playwright.leased_context driven with real Playwright and Debian's Chromium
(/usr/bin/chromium, no browser download) through the loopback testbed: each account's context
leaves from its exit's address (HTTP, SOCKS5 with a password through the relay, SOCKS5h
without one directly), 50 fetches in a row; two exits on one host:port with different
credentials are two addresses; the lease ends with the block or with the context; outcomes come
from the block or, with observe=True, from the main document; no credential shows."""

from __future__ import annotations

import asyncio
import json
import logging
import os

import pytest
import pytest_asyncio

pytest.importorskip("playwright")

from playwright.async_api import async_playwright  # noqa: E402

from exitpool import Pool  # noqa: E402
from exitpool.playwright import leased_context, proxy_settings  # noqa: E402
from exitpool.testbed import Testbed  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
N = 50  # fetches per account, in one context
PAGES = 3  # full page loads per account (each starts a renderer's navigation: slower)
T = 10_000  # ms, every Playwright call is bounded


@pytest_asyncio.fixture
async def browser():
    args = ["--no-sandbox"] if os.geteuid() == 0 else []
    async with async_playwright() as p:
        b = await p.chromium.launch(executable_path=CHROMIUM, headless=True, args=args)
        try:
            yield b
        finally:
            await b.close()


def key_for(pool, exit_id):
    return next(f"acct-{i}" for i in range(10_000) if pool.assign(f"acct-{i}").exit_id == exit_id)


def exit_outcomes(pool, exit_id):
    for e in pool.snapshot()["exits"]:
        if e["exit_id"] == exit_id:
            return {k: v for k, v in e["outcomes"].items() if v}
    raise KeyError(exit_id)


async def page_ip(page, url) -> str:
    response = await page.goto(url, timeout=T)
    assert response.status == 200
    return json.loads(await page.inner_text("body"))["ip"]


@pytest.mark.asyncio
async def test_each_account_leaves_from_its_exit_and_twins_are_two_ips(browser, caplog, capfd):
    caplog.set_level(logging.DEBUG)
    async with (
        Testbed(n_exits=3, scheme=["http", "socks5", "socks5h"]) as tb,
        Testbed(n_exits=1, scheme="socks5h", socks_auth=False, source_ips=["127.0.7.1"], n_controls=1) as open_tb,
    ):
        twins = [p.add_user(f"twin{i}", source_ip=f"127.0.6.{i + 1}") for i, p in enumerate(tb.proxies)]
        exits = [*tb.exits, *twins, open_tb.proxies[0].exit("open-socks5h")]
        pool = Pool(exits)
        seen = {}
        for exit in exits:
            async with leased_context(browser, pool, key_for(pool, exit.exit_id)) as (context, lease):
                assert lease.exit_id == exit.exit_id
                ips = set()
                for _ in range(N):
                    r = await context.request.get(tb.control_url, timeout=T)
                    assert r.status == 200
                    ips.add((await r.json())["ip"])
                page = await context.new_page()
                for _ in range(PAGES):
                    ips.add(await page_ip(page, tb.control_url))
                assert ips == {exit.ip}, (exit.exit_id, ips)
                seen[exit.exit_id] = exit.ip
        assert len(set(seen.values())) == len(exits)  # twins on one host:port: two addresses
        assert pool.snapshot()["live_leases"] == 0
        out, err = capfd.readouterr()
        for e in exits:
            if e.password:
                assert e.password not in out + err + caplog.text


@pytest.mark.asyncio
async def test_the_lease_ends_with_the_block_or_with_the_context(browser):
    async with Testbed(n_exits=1, scheme="socks5") as tb:
        pool = Pool(tb.exits)
        async with leased_context(browser, pool, "acct") as (context, lease):
            assert pool.snapshot()["live_leases"] == 1
            await context.close()  # closed inside the block: the exit is free at once
            for _ in range(100):
                if pool.snapshot()["live_leases"] == 0:
                    break
                await asyncio.sleep(0.01)
            assert pool.snapshot()["live_leases"] == 0
        assert exit_outcomes(pool, "exit-0") == {"success": 1}
        # An exception in the block is the outcome, and the context is closed.
        with pytest.raises(ConnectionError):
            async with leased_context(browser, pool, "acct") as (context, lease):
                held = context
                raise ConnectionError("the block's own failure")
        assert held.pages == [] and pool.snapshot()["live_leases"] == 0
        assert exit_outcomes(pool, "exit-0") == {"success": 1, "connect": 1}
        with pytest.raises(TypeError, match="proxy"):
            async with leased_context(browser, pool, "acct", proxy={"server": "http://x:1"}):
                pass
        assert pool.snapshot()["live_leases"] == 0


@pytest.mark.asyncio
async def test_observe_reports_the_main_document_by_the_ban_rules(browser):
    async with Testbed(n_exits=3, rate=1000.0) as tb:
        pool = Pool(tb.exits)
        tb.site.ban(tb.exits[1].ip)
        tb.site.flag(tb.exits[2].ip)
        for exit in tb.exits:
            async with leased_context(browser, pool, key_for(pool, exit.exit_id), observe=True) as (context, lease):
                page = await context.new_page()
                await page.goto(tb.site_url + "/page", timeout=T)
        assert exit_outcomes(pool, "exit-0") == {"success": 1}
        assert exit_outcomes(pool, "exit-1") == {"block": 1}
        assert exit_outcomes(pool, "exit-2") == {"captcha": 1}
        # Without observe, a page is not an outcome: the block ended cleanly.
        async with leased_context(browser, pool, key_for(pool, "exit-1")) as (context, lease):
            page = await context.new_page()
            await page.goto(tb.site_url + "/page", timeout=T)
        assert exit_outcomes(pool, "exit-1") == {"block": 1, "success": 1}


@pytest.mark.asyncio
async def test_a_dead_exit_is_a_connect_failure(browser):
    async with Testbed(n_exits=2, scheme=["http", "socks5"]) as tb:
        pool = Pool(tb.exits)
        for p in tb.proxies:
            p.kill()
        for exit in tb.exits:
            with pytest.raises(Exception) as info:
                async with leased_context(browser, pool, key_for(pool, exit.exit_id)) as (context, lease):
                    page = await context.new_page()
                    await page.goto(tb.control_url, timeout=T)
            assert exit.password not in str(info.value)
            assert exit_outcomes(pool, exit.exit_id) == {"connect": 1}, str(info.value)


def test_proxy_settings_keep_credentials_apart():
    from exitpool import Exit

    http = Exit("h", "http://al%40ice:p%3Ass@127.0.0.1:8080")
    assert proxy_settings(http) == {"server": "http://127.0.0.1:8080", "username": "al@ice", "password": "p:ss"}
    assert proxy_settings(Exit("s", "socks5h://127.0.0.1:1080")) == {"server": "socks5://127.0.0.1:1080"}
