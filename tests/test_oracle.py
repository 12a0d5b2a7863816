"""The oracle (issue 17): on every world, the same workload through a picker told the world's
truth is an upper bound for exitpool and the naive pick, exitpool reaches 95% of its successes,
and exitpool beats the naive pick on the rows a user reads.

Each world runs 20 seconds a policy: what exitpool pays to discover a dead exit, a flagged one
and the incident is a fixed number of requests, which a short run weighs more heavily. 20 s
runs measured: demo 96-97%, bad third 98-99%, tight limits 99-100% (pacing at the site's depth
less 50 ms, the incident's waiters looking again every 50 ms, no lease counted that was granted
after the run's end)."""

from __future__ import annotations

import asyncio
import re
from contextlib import asynccontextmanager

import pytest

from exitpool import _demo as demo
from exitpool._cli import main as cli
from exitpool.testbed import Hold, Naive, Oracle, PoolPolicy, Scenario, compare

DURATION = 20.0
WORLDS = {"demo": Scenario.demo(), "bad third": Scenario.bad_third(), "tight limits": Scenario.tight_limits()}


@pytest.fixture(scope="module", params=list(WORLDS))
def world(request):
    scenario = WORLDS[request.param]
    outcomes = compare(scenario, [Naive(), PoolPolicy(), Oracle()], DURATION)
    oracle, pool = outcomes["oracle"], outcomes["exitpool"]
    share = pool.share_of(oracle)
    print(f"\n{scenario.name}: exitpool {pool.ok} successes = {share:.0%} of the oracle's {oracle.ok}; the rest: {pool.failures()}")
    return scenario, outcomes


def test_the_worlds_are_what_the_issue_asks_for():
    bad_third, tight = Scenario.bad_third(), Scenario.tight_limits()
    assert len(bad_third.bad()) * 3 == bad_third.exits
    assert tight.rate <= 2 and tight.ban_after <= 3
    for sc in WORLDS.values():
        assert 0 < sc.incident[0] < sc.incident[1] < 1


def test_the_oracle_is_an_upper_bound(world):
    scenario, o = world
    for outcome in o.values():
        assert outcome.ok <= scenario.capacity(DURATION), (outcome.name, outcome.ok, scenario.capacity(DURATION))
    assert o["oracle"].ok > o["naive"].ok, (o["oracle"].ok, o["naive"].ok)
    # exitpool comes within a request or two of the oracle on tight limits (both lose only
    # what the site's bucket refills at the incident's edges), and the script's events land a
    # few milliseconds late: a run apart, it may pass the oracle by that much, never by 1%.
    assert o["oracle"].ok >= 0.99 * o["exitpool"].ok, (o["oracle"].ok, o["exitpool"].ok, o["exitpool"].failures())


def test_exitpool_reaches_95_percent_of_the_oracles_successes(world):
    scenario, o = world
    pool, oracle = o["exitpool"], o["oracle"]
    assert pool.share_of(oracle) >= 0.95, f"{scenario.name}: {pool.ok} of the oracle's {oracle.ok}; the rest: {pool.failures()}"


def test_the_oracle_uses_the_truth(world):
    scenario, o = world
    oracle = o["oracle"]
    verdicts = oracle.verdicts
    # Never a dead, burned or flagged exit, never an account moved mid-session: those it knows
    # for sure. An account whose exit goes logs in again elsewhere (one challenge each).
    assert oracle.into_dead == 0
    assert verdicts["dead exit"] == verdicts["burned"] == verdicts["captcha"] == 0, verdicts
    assert oracle.teleports == 0
    assert verdicts["challenge"] <= scenario.accounts, verdicts
    # Paced by the site's own bucket, counting what is on its way: never a 429, so never a ban.
    assert verdicts["429"] == verdicts["ban"] == 0, verdicts
    # Held during the incident: what it sends succeeds (a request sent just before the
    # incident may reach the site late on a loaded machine).
    assert oracle.ok >= 0.95 * oracle.sent, verdicts
    a, b = (s * DURATION for s in scenario.incident)
    assert not [r for r in oracle.log if a <= r[0] < b]
    assert oracle.time_to_full_traffic() is not None and oracle.time_to_full_traffic() < 0.5


def test_exitpool_beats_the_naive_pick(world):
    scenario, o = world
    naive, pool = o["naive"], o["exitpool"]
    assert pool.success_rate > naive.success_rate
    # Captchas wasted: exitpool pays a fixed discovery cost for a flagged exit (its threshold
    # of captchas), the naive pick a share of all its traffic. In a run this short the cost
    # can still be the larger share of exitpool's few requests, so the count is compared.
    if scenario.flagged:
        assert pool.verdicts["captcha"] < naive.verdicts["captcha"]
    else:
        assert pool.verdicts["captcha"] == naive.verdicts["captcha"] == 0
    assert pool.teleports == 0 < naive.teleports
    assert pool.extra["false quarantines"] == 0 < naive.extra["false quarantines"]
    if scenario.dead:
        assert pool.into_dead < naive.into_dead
    else:
        assert pool.into_dead == naive.into_dead == 0


def test_exitpool_stays_under_the_sites_limits_and_resumes_after_the_incident(world):
    """The demo's pool, paced by the world's documented limit, is never banned for its pace, and
    a site incident holds no lease for the site once the site has been back a second (one
    ``incident_interval`` to notice, then a round trip per doubling): bans for pace used to open
    a site incident, or keep one open, that held the site's leases until the end of the run."""
    scenario, o = world
    pool = o["exitpool"]
    assert pool.verdicts["ban"] == 0, pool.failures()
    end = scenario.incident[1] * DURATION
    late = [at for at, cause in pool.holds if cause == "cooling: site incident" and at > end + 1.0]
    assert not late, f"{len(late)} leases held for a site incident after it ended at {end:.2f} s, from {late[0]:.2f} s"


def test_time_to_full_traffic_and_requests_into_dead_exits_are_measured(world):
    scenario, o = world
    for outcome in o.values():
        row = demo.row(outcome)
        assert re.fullmatch(r">?\d+\.\ds", row["time to full traffic after the incident"]), row
        assert row["requests into dead exits"] == f"{outcome.into_dead:,}"
    # The naive pick never stops sending, so it is back at full traffic at once.
    assert o["naive"].time_to_full_traffic() is not None and o["naive"].time_to_full_traffic() < 0.5


def test_time_to_full_traffic_counts_from_the_incident_end():
    sc = Scenario.demo()
    from exitpool.testbed import Outcome

    steady = Outcome("steady", sc, 10.0)
    steady.log = [[i / 10, "exit-0", None, "ok", 0] for i in range(100)]  # 10 a second throughout
    assert steady.time_to_full_traffic() == 0.0
    paused = Outcome("paused", sc, 10.0)
    # Silent from the incident (4 s) until 7.5 s, then 10 a second again.
    paused.log = [r for r in steady.log if not 4.0 <= r[0] < 7.5]
    assert paused.time_to_full_traffic() == pytest.approx(2.0, abs=0.1)
    never = Outcome("never", sc, 10.0)
    never.log = [r for r in steady.log if r[0] < 4.0]
    assert never.time_to_full_traffic() is None


class RoundRobin:
    """A user's own policy: every exit in turn, accounts pinned, holding after a 429."""

    name = "round robin"

    async def start(self, live):
        self.exits = live.exits
        self.home = {}
        self.i = 0

    class _Lease:
        def __init__(self, exit):
            self.exit_id, self.proxy = exit.exit_id, exit.proxy

        def report(self, *, status, **_):
            if status == 429:
                raise Hold("429 seen", 0.5)

    @asynccontextmanager
    async def lease(self, key, site):
        if key is None:
            self.i += 1
            exit = self.exits[self.i % len(self.exits)]
        else:
            exit = self.home.setdefault(key, self.exits[len(self.home) % len(self.exits)])
        yield self._Lease(exit)


def test_a_users_own_policy_runs_against_the_oracle():
    scenario = Scenario.tight_limits().replace(accounts=4, keyless=2)
    outcomes = compare(scenario, [RoundRobin(), Oracle()], 2.0)
    mine, oracle = outcomes["round robin"], outcomes["oracle"]
    assert mine.sent > 0 and oracle.ok >= mine.ok
    assert mine.refusals["429 seen"] == mine.verdicts["429"] > 0
    assert 0.0 <= mine.share_of(oracle) <= 1.0


class LateGrant:
    """A policy whose every lease is granted only after the run has ended."""

    name = "late"

    async def start(self, live):
        self.live = live
        self.exit = live.exits[0]

    @asynccontextmanager
    async def lease(self, key, site):
        await asyncio.sleep(max(0.0, self.live.duration - self.live.now()) + 0.2)
        yield RoundRobin._Lease(self.exit)


def test_a_lease_granted_after_the_run_ends_sends_nothing_and_counts_nothing():
    scenario = Scenario.tight_limits().replace(accounts=1, keyless=1)
    late = scenario.run(LateGrant(), 1.0)
    assert late.sent == 0 and late.ok == 0, late.log


def test_a_scenario_refuses_a_duration_it_cannot_run():
    with pytest.raises(ValueError, match="duration 0.1"):
        Scenario.demo().run(Oracle(), 0.1)


@pytest.mark.parametrize(
    "change, named",
    [
        ({"dead": ("exit-12",)}, "exit-12"),
        ({"removed": "exit-10"}, "exit-10"),
        ({"incident": (0.6, 0.4)}, "incident"),
        ({"die_at": 1.5}, "die_at"),
        ({"rate": 0.0}, "rate"),
        ({"accounts": 0, "keyless": 0}, "worker"),
        ({"think": (0.3, 0.1)}, "think"),
    ],
)
def test_a_scenario_refuses_a_world_it_cannot_script(change, named):
    with pytest.raises(ValueError, match=re.escape(named)):
        Scenario.demo().replace(**change)


def test_the_demo_prints_the_oracle_column_and_the_headline(capsys):
    assert cli(["demo", "--duration", "3", "--plain"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^\s+naive\s+exitpool\s+oracle$", out, flags=re.M), out
    assert re.search(r"^exitpool reached \d+% of the oracle's successes$", out, flags=re.M), out
    for name, _ in demo.ROWS:
        assert re.search(rf"^{re.escape(name)}(\s+\S+){{3}}$", out, flags=re.M), name


def test_the_site_tells_an_oracle_how_many_requests_an_ip_has_left():
    import requests

    from exitpool.testbed import Testbed

    with Testbed(n_exits=1, rate=0.01, burst=3) as tb:
        ip = tb.proxies[0].source_ip
        assert tb.site.tokens(ip) == 3  # an IP not seen yet: a full bucket
        for left in (2, 1, 0):
            assert requests.get(tb.site_url + "/page", proxies=tb.exits[0].proxies, timeout=5).status_code == 200
            assert tb.site.tokens(ip) == pytest.approx(left, abs=0.01)
        assert requests.get(tb.site_url + "/page", proxies=tb.exits[0].proxies, timeout=5).status_code == 429
