"""Downloader middlewares that tests/test_scrapy.py puts after exitpool's (priority 610) and
before Scrapy's HttpProxyMiddleware (750), as a project's own middlewares might sit."""

from __future__ import annotations

from scrapy.exceptions import IgnoreRequest


class RerouteMiddleware:
    """Points a request whose ``meta["reroute_to"]`` names a proxy URL (without credentials)
    at that proxy instead of the exit exitpool chose."""

    def process_request(self, request, spider=None):
        target = request.meta.get("reroute_to")
        if target:
            request.meta["proxy"] = target
        return None


class IgnoreTaggedMiddleware:
    """Drops a request whose ``meta["ignore_here"]`` is set, as a filtering middleware would."""

    def process_request(self, request, spider=None):
        if request.meta.get("ignore_here"):
            raise IgnoreRequest("dropped by a later middleware")
        return None
