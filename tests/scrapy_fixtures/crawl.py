"""Runs one real Scrapy crawl for tests/test_scrapy.py, in its own process (Twisted's reactor
cannot start twice in one process): ``python crawl.py config.json``.

The config holds the Scrapy settings, a plan of steps (each a list of requests sent together;
the next step starts when every request of the previous one has come back) and an output
path. Every response and error becomes a JSON line; the last line is a summary with the
crawl's stats, the pool's per-exit outcomes and the download slots Scrapy used. The test
middlewares of ``fixture_middlewares.py`` (next to this file, so importable by that name) can
be put between exitpool's middleware and Scrapy's HttpProxyMiddleware. Proxy
passwords never go into the output: of the Proxy-Authorization header only its user name is
kept, to compare with the exit that served.
"""

from __future__ import annotations

import base64
import json
import sys

import scrapy
from scrapy.crawler import CrawlerProcess

from exitpool.scrapy import ExitPoolMiddleware


class PlanSpider(scrapy.Spider):
    name = "plan"

    def __init__(self, plan=None, out=None, **kw):
        super().__init__(**kw)
        self.steps = list(plan or [])
        self.out = open(out, "a", encoding="utf-8")
        self.pending = 0
        self.slots = set()
        self.mw = None

    async def start(self):
        for request in self.next_step():
            yield request

    def start_requests(self):  # Scrapy < 2.13
        return self.next_step()

    def next_step(self):
        if not self.steps:
            return []
        step = self.steps.pop(0)
        self.pending = len(step)
        return [
            scrapy.Request(
                spec["url"],
                meta=dict(spec.get("meta", {}), tag=spec.get("tag")),
                headers=spec.get("headers"),
                callback=self.parse,
                errback=self.failed,
                dont_filter=True,
            )
            for spec in step
        ]

    def done(self):
        if self.mw is None:
            found = [m for m in self.crawler.engine.downloader.middleware.middlewares if isinstance(m, ExitPoolMiddleware)]
            self.mw = found[0] if found else None
        self.slots.update(str(k) for k in self.crawler.engine.downloader.slots)
        self.pending -= 1
        return self.next_step() if self.pending == 0 else []

    def write(self, record):
        self.out.write(json.dumps(record) + "\n")
        self.out.flush()

    def parse(self, response):
        auth = response.request.headers.get(b"Proxy-Authorization")
        user = base64.b64decode(auth.split(b" ", 1)[1]).decode().split(":", 1)[0] if auth else None
        ip = None
        if response.headers.get(b"Content-Type", b"").startswith(b"application/json"):
            ip = json.loads(response.text).get("ip")
        meta = response.meta
        self.write(
            {
                "kind": "response",
                "tag": meta.get("tag"),
                "url": response.url,
                "status": response.status,
                "ip": ip,
                "exit": meta.get("exitpool_exit"),
                "retries": meta.get("exitpool_retries", 0),
                "retry_times": meta.get("retry_times", 0),
                "ban": meta.get("exitpool_ban"),
                "slot": meta.get("download_slot"),
                "proxy": meta.get("proxy"),
                "auth_user": user,
                "cached": "cached" in response.flags,
                "session_moved": meta.get("exitpool_session_moved", False),
                "moved_from": meta.get("exitpool_moved_from"),
            }
        )
        return self.done()

    def failed(self, failure):
        meta = failure.request.meta
        self.write(
            {
                "kind": "error",
                "tag": meta.get("tag"),
                "url": failure.request.url,
                "error": failure.type.__name__,
                "exit": meta.get("exitpool_exit"),
                "retries": meta.get("exitpool_retries", 0),
            }
        )
        return self.done()


class OverrideSpider(PlanSpider):
    """Declares its own bans: a /ip answer from ``soft_ban_ip`` is a ban (a soft block a 200
    page reveals), a 403 is not (the page is forbidden, the exit is fine), and download errors
    are no opinion (Scrapy's RetryMiddleware retries them)."""

    name = "override"
    soft_ban_ip = None

    def response_is_ban(self, request, response):
        if response.status == 403:
            return False
        if response.url.split("?")[0].endswith("/ip"):
            return json.loads(response.text).get("ip") == self.soft_ban_ip
        return False

    def exception_is_ban(self, request, exception):
        return None


def main(path):
    with open(path, encoding="utf-8") as f:
        config = json.load(f)
    process = CrawlerProcess(config["settings"], install_root_handler=True)
    spidercls = {"plan": PlanSpider, "override": OverrideSpider}[config.get("spider", "plan")]
    crawler = process.create_crawler(spidercls)
    process.crawl(crawler, plan=config["plan"], out=config["out"], **config.get("spider_args", {}))
    process.start()
    spider = crawler.spider
    stats = {k: v for k, v in crawler.stats.get_stats().items() if isinstance(v, (int, float, str)) and not k.startswith("start_time")}
    summary = {"kind": "summary", "stats": stats, "slots": sorted(spider.slots)}
    if spider.mw is not None:
        snap = spider.mw.pool.snapshot()
        summary["outcomes"] = {e["exit_id"]: e["outcomes"] for e in snap["exits"]}
        summary["active_leases"] = snap["live_leases"]
    spider.write(summary)
    spider.out.close()


if __name__ == "__main__":
    main(sys.argv[1])
