"""`exitpool.prometheus.PoolCollector` as Prometheus sees it: a pool driven with known reports
on a ManualClock, its collector served by prometheus_client's own HTTP server on loopback,
scraped with urllib and parsed with prometheus_client's parser. The figures asserted are the
ones an operator reads off a dashboard: outcome counts, exits per state, per-exit latency."""

from __future__ import annotations

import contextlib
import math
import random
import re
import socket
import subprocess
import sys
import textwrap
import urllib.request

import pytest

pytest.importorskip("prometheus_client")

from prometheus_client import CollectorRegistry, generate_latest, start_http_server  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from exitpool import Exit, ManualClock, NoExitAvailable, Pool  # noqa: E402
from exitpool.prometheus import PoolCollector  # noqa: E402

PASSWORD = "s3cret-pw"
ACCOUNT = "acct-7f3e9c"
PROXIES = {
    "fast": f"http://user-fast:{PASSWORD}@gw-a.example:8001",
    "slow": f"socks5h://user-slow:{PASSWORD}@gw-b.example:1080",
    "mid": f"https://user-mid:{PASSWORD}@gw-c.example:8443",
    "flaky": f"http://user-flaky:{PASSWORD}@gw-a.example:8004",
    "idle": f"http://user-idle:{PASSWORD}@gw-d.example:8005",
}
SITES = ("shop.example", "news.example", "maps.example")
OUTCOMES = ("success", "captcha", "block", "rate_limited", "target_error", "timeout", "connect", "other")
# The core's stated bound for a latency quantile: 2^(1/8) - 1.
QUANTILE_ERROR = 2 ** (1 / 8) - 1

METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def classify(status=None, captcha=False, error=None, **_):
    """The outcome class of a report, written out here so the test does not ask the product."""
    if error == "timeout":
        return "timeout"
    if error in ("connect", "proxy"):
        return "connect"
    if error == "other":
        return "other"
    if captcha:
        return "captcha"
    if status in (403, 407, 451):
        return "block"
    if status == 429:
        return "rate_limited"
    if status is not None and 500 <= status <= 599:
        return "target_error"
    return "success"


def true_quantile(values, q):
    """The rank the core's estimator targets: the ceil(q * n)-th smallest value."""
    s = sorted(values)
    return s[max(1, math.ceil(q * len(s))) - 1]


class Driven:
    """A pool of five exits with credentials, driven by a known plan of reports.

    fast, slow, mid: healthy, with distinct latency profiles and a mix of outcomes across three
    sites; flaky: five connect errors in a row, so quarantined; idle: benched, never leased. At
    the end one keyed lease for ACCOUNT is held open on mid.
    """

    def __init__(self):
        self.clock = ManualClock(1000.0)
        self.pool = Pool(
            [Exit(x, url, capacity=2, tags={"name": x}) for x, url in PROXIES.items()],
            clock=self.clock,
        )
        self.reported = []  # (exit, site, outcome, latency or None)
        rng = random.Random(5)
        plan = []
        for x, (lo, hi) in {"fast": (0.06, 0.2), "slow": (1.1, 2.6), "mid": (0.3, 0.7)}.items():
            for _ in range(24):
                plan.append((x, "shop.example", dict(status=200, latency=rng.uniform(lo, hi))))
            for i in range(6):
                # Target errors interleaved with successes: the site is struggling, the exit is fine.
                status = 503 if i % 2 else 200
                plan.append((x, "news.example", dict(status=status, latency=rng.uniform(lo, hi))))
            plan.append((x, "maps.example", dict(status=200, captcha=True, latency=rng.uniform(lo, hi))))
            plan.append((x, "maps.example", dict(status=200, latency=rng.uniform(lo, hi))))
        plan.append(("slow", "maps.example", dict(error="timeout")))
        plan.append(("slow", "maps.example", dict(status=200, latency=2.0)))
        plan.append(("slow", "news.example", dict(error="other")))
        plan.append(("mid", "shop.example", dict(status=403)))
        plan.append(("mid", "shop.example", dict(status=200, latency=0.5)))
        rng.shuffle(plan)
        # Last on its site for its exit: a 429 cools the pair down.
        plan.append(("fast", "maps.example", dict(status=429, retry_after=5)))
        plan += [("flaky", "shop.example", dict(error="connect"))] * 5
        for x, site, report in plan:
            self.report(x, site, **report)
        self.quarantined_at = self.clock.now()
        self.clock.advance(5.0)
        self.pool.bench("idle")
        self.held = self.pool.subset(name="mid").acquire(ACCOUNT, site="shop.example")

    def report(self, x, site, **report):
        lease = self.pool.subset(name=x).acquire(site=site)
        assert lease.exit_id == x
        self.clock.advance(0.25)
        self.pool.release(lease, **report)
        self.reported.append((x, site, classify(**report), report.get("latency")))

    def outcomes(self, exit=None, site=None):
        counts = dict.fromkeys(OUTCOMES, 0)
        for x, s, outcome, _ in self.reported:
            if exit in (None, x) and site in (None, s):
                counts[outcome] += 1
        return counts

    def latencies(self, exit):
        return [lat for x, _, _, lat in self.reported if x == exit and lat is not None]


@pytest.fixture
def driven():
    d = Driven()
    yield d
    if d.held.active:
        d.pool.release(d.held, status=200)


@pytest.fixture(scope="module")
def scraped():
    """One driven pool, scraped over HTTP once without and once with per-site labels; the tests
    that only read the figures share it (each endpoint costs half a second to shut down)."""
    d = Driven()
    yield d, scrape_once(d.pool), scrape_once(d.pool, per_site=True)
    d.pool.release(d.held, status=200)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def served(registry):
    """prometheus_client's HTTP exposition server on loopback; yields a scrape function."""
    for attempt in range(5):
        port = free_port()
        try:
            started = start_http_server(port, addr="127.0.0.1", registry=registry)
            break
        except OSError:  # the port was taken between finding it and binding it
            if attempt == 4:
                raise
    try:

        def scrape():
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                assert r.status == 200
                assert r.headers["Content-Type"].startswith("text/plain")
                return r.read().decode("utf-8")

        yield scrape
    finally:
        # prometheus_client >= 0.20 returns (server, thread); older ones return None and leave
        # a daemon thread, which dies with the test process.
        if started:
            server, thread = started
            server.shutdown()
            server.server_close()
            thread.join(5)


class Exposition:
    """Parsed exposition text: families by name, and sample lookup by name and labels."""

    def __init__(self, text):
        self.text = text
        self.families = list(text_string_to_metric_families(text))
        self.samples = {}
        for fam in self.families:
            for s in fam.samples:
                key = (s.name, frozenset(s.labels.items()))
                assert key not in self.samples, f"duplicate series {key}"
                self.samples[key] = s.value

    def __call__(self, name, **labels):
        return self.samples[(name, frozenset(labels.items()))]

    def get(self, name, **labels):
        return self.samples.get((name, frozenset(labels.items())))

    def series(self, name):
        return {labels: v for (n, labels), v in self.samples.items() if n == name}

    def label_names(self):
        return {k for (_, labels) in self.samples for k, _ in labels}


def scrape_once(pool, **kw):
    """Serve a fresh registry holding the collector on loopback, scrape it once, parse it."""
    registry = CollectorRegistry()
    registry.register(PoolCollector(pool, **kw))
    with served(registry) as scrape:
        return Exposition(scrape())


def exposed(pool, **kw):
    """The exposition text without a server, for tests about the figures, not the transport."""
    registry = CollectorRegistry()
    registry.register(PoolCollector(pool, **kw))
    return Exposition(generate_latest(registry).decode("utf-8"))


# -- what a user relies on ----------------------------------------------------------------------


def test_outcome_and_lease_counters_equal_what_was_reported(scraped):
    driven, m = scraped[0], scraped[1]
    want = driven.outcomes()
    assert sum(want.values()) == len(driven.reported)
    for outcome in OUTCOMES:
        assert m("exitpool_outcomes_total", outcome=outcome) == want[outcome], outcome
    # Every class the plan meant to produce is there (the plan covers all but none of them).
    assert {o for o, n in want.items() if n} == set(OUTCOMES)
    for x in PROXIES:
        per_exit = driven.outcomes(exit=x)
        for outcome in OUTCOMES:
            assert m("exitpool_exit_outcomes_total", exit=x, outcome=outcome) == per_exit[outcome], (x, outcome)
        assert m("exitpool_exit_leases_total", exit=x) == sum(per_exit.values()) + (x == "mid")
    # Every report was a lease; one more is held open.
    assert m("exitpool_leases_acquired_total") == len(driven.reported) + 1
    assert m("exitpool_leases_released_total") == len(driven.reported)
    assert m("exitpool_leases_expired_total") == 0
    assert m("exitpool_releases_ignored_total") == 0


def test_exits_per_state_quarantine_and_bench(scraped):
    driven, m = scraped[0], scraped[1]
    assert m.series("exitpool_exits") == {
        frozenset({("state", "healthy")}): 4,  # the benched exit is healthy, just benched
        frozenset({("state", "degraded")}): 0,
        frozenset({("state", "probing")}): 0,
        frozenset({("state", "quarantined")}): 1,
        frozenset({("state", "dead")}): 0,
    }
    for x in PROXIES:
        current = "quarantined" if x == "flaky" else "healthy"
        for state in ("healthy", "degraded", "probing", "quarantined", "dead"):
            assert m("exitpool_exit_state", exit=x, state=state) == (state == current), (x, state)
    assert m("exitpool_exit_quarantines_total", exit="flaky") == 1
    assert m("exitpool_exit_quarantines_total", exit="fast") == 0
    # Quarantined 5 s ago on a ManualClock: exactly 5 s in state and 5 s quarantined.
    assert m("exitpool_exit_quarantined_seconds_total", exit="flaky") == pytest.approx(5.0)
    assert m("exitpool_exit_time_in_state_seconds", exit="flaky") == pytest.approx(5.0)
    assert m("exitpool_exit_benched", exit="idle") == 1
    assert m("exitpool_exit_benched", exit="fast") == 0
    assert m("exitpool_exits_benched") == 1
    in_service = m("exitpool_exits_in_service")
    assert in_service == 4
    assert m("exitpool_ejected_ratio") == pytest.approx(1 / in_service)
    # The quarantined exit really is out: the scrape is not describing some other pool.
    with pytest.raises(NoExitAvailable):
        driven.pool.subset(name="flaky").acquire(site="shop.example")


def test_live_leases_sessions_and_rates(scraped):
    driven, m = scraped[0], scraped[1]
    assert m("exitpool_live_leases") == 1
    assert m("exitpool_sessions") == 1
    assert m("exitpool_exit_active_leases", exit="mid") == 1
    assert m("exitpool_exit_sessions", exit="mid") == 1
    assert m("exitpool_exit_active_leases", exit="fast") == 0
    assert m("exitpool_exit_capacity", exit="fast") == 2
    for x in ("fast", "slow", "mid"):
        got = driven.outcomes(exit=x)
        n = sum(got.values())
        assert n <= 64  # within the recent window, so the ratio is over every report
        assert m("exitpool_exit_success_ratio", exit=x) == pytest.approx(got["success"] / n)
        assert m("exitpool_exit_captcha_ratio", exit=x) == pytest.approx(got["captcha"] / n)
    # The benched exit has no report: no ratio and no latency rather than a misleading 0.
    assert m.get("exitpool_exit_success_ratio", exit="idle") is None
    assert m.get("exitpool_exit_latency_seconds", exit="idle", quantile="0.5") is None
    assert m("exitpool_exit_latency_samples", exit="idle") == 0
    assert 0 <= m("exitpool_lease_gini_ratio") < 1
    assert m("exitpool_wait_seconds", quantile="0.99") == 0  # nobody waited
    assert m("exitpool_wait_seconds", quantile="0.5") == 0
    assert m("exitpool_site_incidents_open") == 0
    assert m("exitpool_global_incident") == 0
    # The version label is there for joins; its value is 1 by convention.
    assert m.series("exitpool_build_info") and set(m.series("exitpool_build_info").values()) == {1}


def test_exit_latency_quantiles_are_within_the_stated_bound(scraped):
    driven, m = scraped[0], scraped[1]
    for x in ("fast", "slow", "mid"):
        lat = driven.latencies(x)
        assert m("exitpool_exit_latency_samples", exit=x) == len(lat)
        for q in ("0.5", "0.95", "0.99"):
            want = true_quantile(lat, float(q))
            got = m("exitpool_exit_latency_seconds", exit=x, quantile=q)
            assert abs(got - want) <= QUANTILE_ERROR * want + 1e-12, (x, q, got, want)
    # And they tell the exits apart the way the plan made them.
    p50 = {x: m("exitpool_exit_latency_seconds", exit=x, quantile="0.5") for x in ("fast", "mid", "slow")}
    assert p50["fast"] < p50["mid"] < p50["slow"]


def test_no_site_label_unless_per_site(scraped):
    _driven, m = scraped[0], scraped[1]
    assert "site" not in m.label_names()
    for site in SITES:
        assert site not in m.text
    assert m.label_names() <= {"exit", "state", "outcome", "quantile", "version"}


def test_per_site_adds_site_outcomes_and_the_matrix(scraped):
    driven, m = scraped[0], scraped[2]
    assert "site" in m.label_names()
    for site in SITES:
        want = driven.outcomes(site=site)
        for outcome in OUTCOMES:
            assert m("exitpool_site_outcomes_total", site=site, outcome=outcome) == want[outcome], (site, outcome)
        assert m("exitpool_site_incident", site=site) == 0
    # Matrix cells only for the pairs that served a report: idle served nothing, flaky only shop.
    cells = m.series("exitpool_exit_site_reports_total")
    assert not any(("exit", "idle") in labels for labels in cells)
    assert {dict(labels)["site"] for labels in cells if ("exit", "flaky") in labels} == {"shop.example"}
    for x in ("fast", "slow", "mid", "flaky"):
        for site in SITES:
            want = driven.outcomes(exit=x, site=site)
            n = sum(want.values())
            if n == 0:
                assert m.get("exitpool_exit_site_reports_total", exit=x, site=site) is None
                continue
            assert m("exitpool_exit_site_reports_total", exit=x, site=site) == n, (x, site)
            assert m("exitpool_exit_site_success_ratio", exit=x, site=site) == pytest.approx(want["success"] / n)
            assert m("exitpool_exit_site_captcha_ratio", exit=x, site=site) == pytest.approx(want["captcha"] / n)
    # news.example is the bad site of the plan: every exit's success ratio there is below 1.
    for x in ("fast", "slow", "mid"):
        assert m("exitpool_exit_site_success_ratio", exit=x, site="news.example") < 1


@pytest.mark.parametrize("per_site", [False, True])
def test_no_credential_proxy_url_or_account_key_in_the_exposition(scraped, per_site):
    text = scraped[2 if per_site else 1].text
    assert PASSWORD not in text
    assert ACCOUNT not in text
    for x, url in PROXIES.items():
        assert url not in text
        user_host = url.split("://", 1)[1].split("@", 1)
        assert f"user-{x}" not in text  # not even the masked URL's user name
        assert user_host[1] not in text  # nor the gateway
    assert "[secure]" not in text
    assert "://" not in text


def test_metric_names_follow_the_conventions(scraped):
    _driven, m = scraped[0], scraped[2]
    assert len(m.families) >= 30
    for fam in m.families:
        assert METRIC_NAME.match(fam.name), fam.name
        assert fam.name.startswith("exitpool_"), fam.name
        assert fam.documentation, fam.name
        assert fam.type in ("counter", "gauge"), (fam.name, fam.type)
        if fam.type == "gauge":
            assert not fam.name.endswith("_total"), fam.name
        for s in fam.samples:
            assert METRIC_NAME.match(s.name), s.name
            if fam.type == "counter":
                assert s.name.endswith("_total"), s.name
                assert s.value >= 0
            if "quantile" in s.labels:
                assert fam.name.endswith("_seconds") and float(s.labels["quantile"]) <= 1
            for label in s.labels:
                assert LABEL_NAME.match(label) and not label.startswith("__"), label
            assert not math.isnan(s.value), s.name
    # The raw TYPE lines carry the `_total` name too, for the classic text format.
    for name, kind in re.findall(r"^# TYPE (\S+) (\S+)$", m.text, re.M):
        assert (kind == "counter") == name.endswith("_total"), name
    # Durations are in seconds and say so; no other time unit appears.
    assert not re.search(r"_(ms|milliseconds|minutes|hours)\b", m.text)


def test_counters_only_grow_across_scrapes(driven):
    registry = CollectorRegistry()
    registry.register(PoolCollector(driven.pool, per_site=True))
    with served(registry) as scrape:
        before = Exposition(scrape())
        for _ in range(3):
            driven.report("fast", "shop.example", status=200, latency=0.1)
        driven.report("slow", "news.example", status=502)
        after = Exposition(scrape())
    counters = {f.name for f in after.families if f.type == "counter"}
    for (name, labels), v in before.samples.items():
        if name[: -len("_total")] in counters:
            assert after.samples[(name, labels)] >= v, (name, labels)
    assert after("exitpool_outcomes_total", outcome="success") == before("exitpool_outcomes_total", outcome="success") + 3
    assert after("exitpool_exit_outcomes_total", exit="slow", outcome="target_error") == (
        before("exitpool_exit_outcomes_total", exit="slow", outcome="target_error") + 1
    )
    assert after("exitpool_site_outcomes_total", site="news.example", outcome="target_error") == (
        before("exitpool_site_outcomes_total", site="news.example", outcome="target_error") + 1
    )


# -- the collector as a registry sees it -------------------------------------------------------


class CountingPool:
    """A pool stand-in that counts snapshots."""

    def __init__(self, pool):
        self.pool, self.snapshots = pool, 0

    def snapshot(self, *args, **kwargs):
        self.snapshots += 1
        return self.pool.snapshot(*args, **kwargs)


def test_one_snapshot_per_scrape_and_none_on_registration(driven):
    counting = CountingPool(driven.pool)
    registry = CollectorRegistry(auto_describe=True)
    registry.register(PoolCollector(counting))
    assert counting.snapshots == 0  # describe() gave the names
    with served(registry) as scrape:
        scrape()
        assert counting.snapshots == 1
        scrape()
        assert counting.snapshots == 2


def test_describe_names_what_collect_yields(driven):
    for per_site in (False, True):
        c = PoolCollector(driven.pool, per_site=per_site)
        described = [(f.name, f.type) for f in c.describe()]
        assert all(not f.samples for f in c.describe())
        assert described == [(f.name, f.type) for f in c.collect()]


def test_namespace_and_two_pools_in_one_registry(driven):
    # An exit id with characters the text format must escape comes back as it went in.
    solo = 'solo "β"\\'
    other = Pool([Exit(solo, f"http://u:{PASSWORD}@gw.example:9000")])
    registry = CollectorRegistry(auto_describe=True)
    registry.register(PoolCollector(driven.pool))
    with pytest.raises(ValueError):
        registry.register(PoolCollector(other))  # same names: the registry refuses
    registry.register(PoolCollector(other, namespace="edge"))
    with served(registry) as scrape:
        m = Exposition(scrape())
    assert m("edge_exits", state="healthy") == 1
    assert m("edge_exit_leases_total", exit=solo) == 0
    assert m("exitpool_exits", state="quarantined") == 1
    assert PASSWORD not in m.text
    for bad in ("", "1abc", "exit-pool", "exit pool"):
        with pytest.raises(ValueError):
            PoolCollector(other, namespace=bad)
    with pytest.raises(TypeError):
        PoolCollector(object())


def test_import_exitpool_does_not_need_prometheus_client():
    code = textwrap.dedent(
        """
        import sys
        sys.modules["prometheus_client"] = None  # any import of it now raises ImportError
        import exitpool
        assert "prometheus_client" not in [m for m in sys.modules if sys.modules[m] is not None]
        pool = exitpool.Pool([exitpool.Exit("a", "http://u:pw@gw.example:1")])
        with pool.lease() as lease:
            pass
        try:
            import exitpool.prometheus
        except ImportError as e:
            print("ImportError:", e)
        else:
            raise SystemExit("exitpool.prometheus imported without prometheus_client")
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "pip install 'exitpool[prometheus]'" in out.stdout


# -- product bugs the exposition shows --------------------------------------------------------


def test_half_open_success_ratio_counts_trials_not_recoveries():
    """Every half-open trial succeeds, so the trial success ratio should be 1.

    Trials and successes are both counted per trial lease, so an exit that passed every trial
    reads 1.0 (not one recovery over eight trial leases).
    """
    clock = ManualClock(1000.0)
    pool = Pool([Exit(f"e{i}", f"http://u:{PASSWORD}@gw.example:{8000 + i}", tags={"name": f"e{i}"}) for i in range(4)], clock=clock)
    e0 = pool.subset(name="e0")
    for _ in range(5):
        lease = e0.acquire(site="shop.example")
        clock.advance(0.5)
        pool.release(lease, error="connect")
    assert pool.snapshot()["exits"][0]["state"] == "quarantined"
    clock.advance(120)  # past any quarantine
    for _ in range(20):
        lease = e0.acquire(site="shop.example")
        pool.release(lease, status=200, latency=0.1)
        if pool.snapshot()["exits"][0]["state"] == "healthy":
            break
    m = exposed(pool)
    assert m("exitpool_exit_state", exit="e0", state="healthy") == 1
    trials = m("exitpool_half_open_trials_total")
    assert trials >= 1
    assert m("exitpool_half_open_success_ratio") == pytest.approx(1.0), (
        f"{trials:g} trials, all successful, {m('exitpool_half_open_succeeded_total'):g} succeeded"
    )


def test_throughput_counts_from_the_pool_start_not_from_time_zero():
    """One lease a second for two minutes is 1 lease/s, whatever time the clock started at.

    The core's first throughput mark is (t=0, 0 leases) rather than the pool's creation time,
    so a pool on ManualClock(1000.0) divides 120 leases by 1120 s and reads 0.107.
    """
    clock = ManualClock(1000.0)
    pool = Pool([Exit("a", f"http://u:{PASSWORD}@gw.example:8000")], clock=clock)
    for _ in range(120):
        lease = pool.acquire()
        clock.advance(1.0)
        pool.release(lease, status=200)
    m = exposed(pool)
    assert m("exitpool_leases_per_second") == pytest.approx(1.0, rel=0.05)


# -- large pools: bounded per-exit series, aggregates beyond them ------------------------------

COUNTRIES = ("us", "de", "fr", "nl")


@pytest.fixture(scope="module")
def large_pool():
    """10,000 exits tagged by country, every one served once on a site, four quarantined."""
    exits = [
        Exit(f"x{i:05d}", f"http://user:{PASSWORD}@10.{i // 62500}.{i // 250 % 250}.{i % 250}:8000", tags={"country": COUNTRIES[i % 4]})
        for i in range(10000)
    ]
    pool = Pool(exits, strategy="round_robin", clock=ManualClock(), seed=1)
    for n in range(10000):
        pool.release(pool.acquire(site="shop.example"), status=200 if n % 5 else 403, latency=0.05)
    bad = ["x00007", "x04242", "x05000", "x09999"]
    for x in bad:
        one = pool.subset(country=COUNTRIES[int(x[1:]) % 4])
        others = [e.exit_id for e in one.exits if e.exit_id != x]
        for _ in range(5):
            pool.release(one.acquire(site="news.example", avoid=others), error="connect")
        assert pool.state(x) == "quarantined"
    return pool, bad


def exit_label_values(m):
    return {v for (name, labels) in m.samples for k, v in labels if k == "exit" and name.startswith("exitpool_exit_")}


def test_a_10000_exit_pool_exports_at_most_max_exits_the_worst_first(large_pool):
    pool, bad = large_pool
    m = exposed(pool, max_exits=100, per_site=True, max_cells=50)
    exported = exit_label_values(m)
    assert len(exported) == 100 == m("exitpool_exits_exported")
    assert set(bad) <= exported, "the quarantined exits are the ones worth a series"
    assert {x for (name, labels) in m.samples if name.startswith("exitpool_exit_site_") for k, x in labels if k == "exit"} <= exported
    assert len(m.series("exitpool_exit_site_reports_total")) == 50
    assert {x for labels in m.series("exitpool_exit_site_reports_total") for k, x in labels if k == "exit"} >= set(bad)
    # The pool-wide figures still count every exit.
    assert sum(m.series("exitpool_exits").values()) == 10000
    assert m("exitpool_exits", state="quarantined") == 4
    # At its defaults the collector exports at most 1,000 exits.
    assert len(exit_label_values(exposed(pool))) == 1000


def test_aggregates_by_tag_sum_to_the_pool_and_need_no_per_exit_series(large_pool):
    pool, bad = large_pool
    m = exposed(pool, max_exits=0, by_tag="country")
    assert exit_label_values(m) == set() and m("exitpool_exits_exported") == 0
    by_state = {}
    for labels, v in m.series("exitpool_tag_exits").items():
        labels = dict(labels)
        assert labels["country"] in COUNTRIES
        by_state[labels["state"]] = by_state.get(labels["state"], 0) + v
    assert by_state == {dict(labels)["state"]: v for labels, v in m.series("exitpool_exits").items()}
    assert sum(by_state.values()) == 10000
    assert m("exitpool_tag_exits", country="de", state="healthy") == 2500 - sum(int(x[1:]) % 4 == 1 for x in bad)
    for outcome in OUTCOMES:
        total = sum(v for labels, v in m.series("exitpool_tag_outcomes_total").items() if dict(labels)["outcome"] == outcome)
        assert total == m("exitpool_outcomes_total", outcome=outcome), outcome
    assert sum(m.series("exitpool_tag_leases_total").values()) == m("exitpool_leases_acquired_total")
    assert sum(m.series("exitpool_tag_active_leases").values()) == m("exitpool_live_leases")


class SnapshotSpy:
    """A pool stand-in that records how many exits each snapshot it hands out lists."""

    def __init__(self, pool):
        self.pool, self.listed = pool, []

    def snapshot(self, *args, **kwargs):
        snap = self.pool.snapshot(*args, **kwargs)
        self.listed.append(len(snap["exits"]))
        return snap


def test_a_scrape_asks_the_pool_for_the_exported_exits_only(large_pool):
    pool, _ = large_pool
    for max_exits, listed in ((100, 100), (0, 0)):
        spy = SnapshotSpy(pool)
        exposed(spy, max_exits=max_exits, by_tag="country")
        assert spy.listed == [listed]


def test_max_exits_none_exports_every_exit(driven):
    assert exit_label_values(exposed(driven.pool, max_exits=None)) == set(PROXIES)
    assert exit_label_values(exposed(driven.pool, max_exits=2)) == {"flaky", "fast"}


@pytest.mark.parametrize(
    "kwargs, named",
    [
        (dict(max_exits=-1), "max_exits"),
        (dict(max_exits="10"), "max_exits"),
        (dict(max_exits=True), "max_exits"),
        (dict(max_cells=None), "max_cells"),
        (dict(by_tag="state"), "'state'"),
        (dict(by_tag="has-dash"), "'has-dash'"),
        (dict(by_tag="__x"), "'__x'"),
        (dict(by_tag=""), "''"),
    ],
)
def test_bad_collector_knobs_raise_invalid_input(kwargs, named):
    from exitpool import InvalidInput

    with pytest.raises(InvalidInput, match=named):
        PoolCollector(Pool([Exit("a", "http://127.0.0.1:9")]), **kwargs)


# -- gateways ------------------------------------------------------------------------------------


def gateway_pool(slots=200):
    from exitpool import Gateway

    clock = ManualClock(1_700_000_000.0)
    gw = Gateway(
        "resi", f"http://customer-c1:{PASSWORD}@gw.provider.example:7777", slots=slots, username="{user}-session-{session}", lifetime=600
    )
    plain = [Exit(f"dc-{i}", f"http://u:{PASSWORD}@10.0.0.{i + 1}:3128") for i in range(3)]
    return Pool([gw, *plain], clock=clock, seed=1), clock, gw


def test_a_gateways_slots_are_its_series_not_an_exit_each():
    pool, clock, gw = gateway_pool()
    m = exposed(pool)
    exported = {dict(labels)["exit"] for labels in m.series("exitpool_exit_leases_total")}
    assert exported == {"dc-0", "dc-1", "dc-2"}, "max_exits is spent on the plain exits"
    assert m("exitpool_exits_exported") == 3
    assert m("exitpool_exits", state="healthy") == 203, "the pool-wide counts still count every slot"
    assert m("exitpool_gateway_state", gateway="resi", state="healthy") == 1
    assert m("exitpool_gateway_state", gateway="resi", state="quarantined") == 0
    assert m("exitpool_gateway_slots", gateway="resi", state="healthy") == 200
    assert m("exitpool_gateway_outages_total", gateway="resi") == 0
    assert m.series("exitpool_gateway_out_cause") == {}
    # Every exit, slots included, when the user asks for every exit.
    assert exposed(pool, max_exits=None)("exitpool_exits_exported") == 203


def test_a_gateway_out_for_its_credentials_and_its_rotations_are_counted():
    pool, clock, gw = gateway_pool()
    others = [e.exit_id for e in pool.exits if e.exit_id != "resi-7"]
    pool.release(pool.acquire(avoid=others, timeout=0), status=407)
    m = exposed(pool)
    assert m("exitpool_gateway_state", gateway="resi", state="quarantined") == 1
    assert m("exitpool_gateway_out_cause", gateway="resi", cause="credentials") == 1
    assert m("exitpool_gateway_credential_rejections_total", gateway="resi") == 1
    assert m("exitpool_gateway_outages_total", gateway="resi") == 1
    assert m("exitpool_gateway_leases_total", gateway="resi") == 1
    soonest = m("exitpool_gateway_next_rotation_seconds", gateway="resi")
    assert 0 < soonest <= 540
    assert m("exitpool_gateway_token_rotations_total", gateway="resi") == 0
    clock.advance(540.0)  # every slot's token is past its period: each rotates once
    m = exposed(pool)
    assert m("exitpool_gateway_token_rotations_total", gateway="resi") == 200
    assert PASSWORD not in m.text and "[secure]" not in m.text and "://" not in m.text
    for n in range(200):
        assert gw.token(n, at=clock.now()) not in m.text
