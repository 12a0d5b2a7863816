"""The main job (README, docs/demo.md): the demo's exitpool column beats the naive one on every row."""

from __future__ import annotations

import io
import re

from exitpool import _demo as demo
from exitpool._cli import main as cli


def test_exitpool_beats_the_naive_pick_on_every_row():
    out = io.StringIO()
    outcomes, snapshot = demo.run(6.0, plain=True, out=out)
    naive, pool = outcomes["naive"], outcomes["exitpool"]
    for kind in demo.KINDS:
        assert f"running {kind}" in out.getvalue()
    assert naive.sent > 100 and pool.sent > 50
    assert pool.success_rate > naive.success_rate
    rate = lambda t, n: n / max(1, t.sent)  # noqa: E731
    assert rate(pool, pool.verdicts["captcha"]) < rate(naive, naive.verdicts["captcha"])
    assert pool.teleports < naive.teleports and pool.teleports == 0
    assert pool.into_dead < naive.into_dead
    # Dead exits leave rotation after a few failures: a handful of requests, not a share of
    # the traffic (an ejection cap too tight for the scenario once let one dead exit keep a
    # third of it).
    assert pool.into_dead < 0.1 * pool.sent, (pool.into_dead, pool.sent)
    assert pool.extra["false quarantines"] < naive.extra["false quarantines"] and pool.extra["false quarantines"] == 0
    assert pool.extra["keys moved"] < naive.extra["keys moved"]
    assert 0.05 < pool.extra["keys moved"] < 0.2
    assert snapshot["pool"]["exits"] == demo.EXITS - 1  # one exit removed: the resize


def test_the_demo_command_prints_the_table(capsys):
    assert cli(["demo", "--duration", "3", "--plain"]) == 0
    out = capsys.readouterr().out
    for row in (
        "success rate",
        "captcha rate",
        "account IP changes mid-session",
        "requests into dead exits",
        "exits falsely quarantined in the incident",
        "keys moved when one exit is removed",
        "time to full traffic after the incident",
    ):
        assert re.search(rf"^{re.escape(row)}\s+\S+\s+\S+\s+\S+$", out, flags=re.M), row
    assert cli(["demo", "--duration", "1"]) == 2


def test_keys_moved_when_one_exit_is_removed():
    # hash % n moves almost every key; the ring only the removed exit's arc; the oracle, which
    # places accounts itself, exactly the removed exit's share.
    assert demo.keys_moved("naive") > 0.8
    assert 0.05 < demo.keys_moved("exitpool") < 0.2
    assert demo.keys_moved("oracle") == 1 / demo.EXITS
