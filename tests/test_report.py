"""`exitpool report`: the verdict, the terminal report (rich), the HTML page, and that page
rendered by a real headless browser (Debian's chromium, installed by scripts/test-deps.sh).

The snapshots come from a real pool driven with synthetic reports on a ManualClock: ten exits
whose proxies carry a password, one exit (e3) that fails everywhere with connect errors, one
site (shop.example) that answers 403 to every exit and so opens a site incident, and 200s
everywhere else."""

from __future__ import annotations

import io
import json
import os
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

import exitpool
from exitpool import Exit, ManualClock, Pool, _report
from exitpool._cli import main

PASSWORD = "s3cret-pw"
BAD_EXIT = "e3"
BAD_SITE = "shop.example"
GOOD_SITES = ("news.example", "maps.example", "wiki.example")
ROOT = Path(__file__).resolve().parent.parent


def drive(n_exits=10, sites=(BAD_SITE,) + GOOD_SITES, rounds=30, bad_exit=BAD_EXIT, bad_site=BAD_SITE, start=1000.0):
    """A pool of exits with passwords, driven round-robin over the sites for `rounds` seconds."""
    clock = ManualClock(start)
    exits = [Exit(f"e{i}", f"http://user{i}:{PASSWORD}@gw{i}.example:8000") for i in range(n_exits)]
    pool = Pool(exits, clock=clock, strategy="round_robin")
    for _ in range(rounds):
        for site in sites:
            for _ in range(n_exits):
                try:
                    lease = pool.acquire(site=site)
                except exitpool.Error:  # Cooling: the site's incident spaces its leases
                    continue
                if lease.exit_id == bad_exit:
                    pool.release(lease, error="connect")
                elif site == bad_site:
                    pool.release(lease, status=403, latency=0.3)
                else:
                    pool.release(lease, status=200, latency=0.12)
        clock.advance(1.0)
    return pool


@pytest.fixture(scope="module")
def snapshot():
    snap = drive().snapshot()
    assert PASSWORD not in json.dumps(snap)
    return snap


@pytest.fixture
def snap_file(tmp_path, snapshot):
    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps(snapshot))
    return path


# --- the verdict ------------------------------------------------------------------------------


def test_the_pool_saw_what_the_scenario_says(snapshot):
    assert BAD_SITE in snapshot["pool"]["incidents"]
    assert {e["exit_id"]: e["state"] for e in snapshot["exits"]}[BAD_EXIT] in ("quarantined", "dead", "probing")


def test_verdict_names_the_bad_exit_and_the_bad_site(snapshot):
    v = _report.verdict(snapshot)
    assert [f.name for f in v.bad_exits] == [BAD_EXIT]
    assert [f.name for f in v.bad_sites] == [BAD_SITE]
    (e,), (s,) = v.bad_exits, v.bad_sites
    assert "every site" in e.reason and "connect" in e.reason
    assert "incident" in s.reason and "block" in s.reason
    assert s.failed == s.tried == 10
    line = v.line()
    assert line.startswith(f"bad exits: {BAD_EXIT} (") and f"bad sites: {BAD_SITE} (" in line


def test_verdict_of_a_healthy_pool_is_all_clear():
    snap = drive(bad_exit=None, bad_site=None, rounds=5).snapshot()
    v = _report.verdict(snap)
    assert v.ok and v.line() == "no bad exit, no bad site"


def _matrix_snapshot(rates):
    """A hand-made snapshot: `rates[i][j]` is exit i's success rate on site j (None: no data)."""
    ne, ns = len(rates), len(rates[0])
    exits = [{"exit_id": f"x{i}", "state": "healthy", "success_rate": None, "outcomes": {}} for i in range(ne)]
    columns = ["state", "reports", "success_rate", "captcha_rate", "p50", "p95", "p99", "quarantines"]
    cells = [[None if r is None else ["healthy", 20, r, 0.0, 0.1, 0.2, 0.3, 0] for r in row] for row in rates]
    sites = [f"s{j}.example" for j in range(ns)]
    return {
        "pool": {"incidents": [], "global_incident": False, "states": {"healthy": ne}},
        "exits": exits,
        "sites": [{"site": s, "incident": False, "outcomes": {}} for s in sites],
        "matrix": {"exits": [e["exit_id"] for e in exits], "sites": sites, "columns": columns, "cells": cells},
    }


def test_verdict_blames_many_bad_exits_not_the_sites_they_fail_on():
    # Six of ten exits fail on both sites; the other four succeed on both: the sites are fine.
    rates = [[0.0, 0.0]] * 6 + [[1.0, 1.0]] * 4
    v = _report.verdict(_matrix_snapshot(rates))
    assert sorted(f.name for f in v.bad_exits) == [f"x{i}" for i in range(6)]
    assert v.bad_sites == ()


def test_verdict_when_everything_fails_points_at_our_side():
    v = _report.verdict(_matrix_snapshot([[0.0] * 3] * 4))
    assert any("our side" in n for n in v.notes)


# --- the terminal report ----------------------------------------------------------------------


def test_cli_report_in_the_terminal(snap_file, capsys):
    assert main(["report", str(snap_file), "--width", "120"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert PASSWORD not in out
    assert f"bad exits: {BAD_EXIT} (fails on every site" in out
    assert f"bad sites: {BAD_SITE} (fails on 10/10 exits: open site incident" in out
    # The figures, incidents included.
    for words in ("in service", "quarantined", "leases/s", "Gini", "ejected", "half-open", "wait p99", f"open site incident: {BAD_SITE}"):
        assert words in out, words
    # The exits table puts the worst state first; the heatmap marks the incident site and
    # sums rows and columns.
    lines = out.splitlines()
    table = lines.index(next(line for line in lines if line.startswith("exits by state")))
    first_exit = next(line for line in lines[table + 3 :] if line.strip())
    assert first_exit.split()[0] == BAD_EXIT
    assert f"!{BAD_SITE}" in out
    (row,) = [line for line in lines if line.startswith(BAD_EXIT + " ") and "sites" in line]
    assert row.rstrip().endswith("4/4 sites")
    assert "10/10" in next(line for line in lines if line.startswith("fails on"))


def test_cli_report_via_subprocess_reads_stdin(snap_file):
    r = subprocess.run(
        [sys.executable, "-m", "exitpool._cli", "report", "-"],
        input=snap_file.read_text(),
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "100"},
    )
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    assert PASSWORD not in r.stdout
    assert f"bad exits: {BAD_EXIT}" in r.stdout and f"bad sites: {BAD_SITE}" in r.stdout


def test_large_pools_are_capped_in_the_terminal_and_whole_in_html(tmp_path, capsys):
    sites = tuple(f"site{j:02d}.example" for j in range(20))
    snap = drive(n_exits=60, sites=sites, rounds=3, bad_exit="e7", bad_site="site05.example").snapshot()
    path = tmp_path / "big.json"
    path.write_text(json.dumps(snap))
    assert main(["report", str(path), "--width", "100"]) == 0
    out = capsys.readouterr().out
    assert "showing the worst 40 of 60 exits" in out
    assert "of 20 sites" in out and "--html FILE shows all" in out
    assert "bad exits: e7" in out and "bad sites: site05.example" in out
    html_path = tmp_path / "big.html"
    assert main(["report", str(path), "--html", str(html_path)]) == 0
    page = html_path.read_text()
    assert all(f">e{i}</th>" in page for i in range(60))
    assert all(s in page for s in sites)


def test_top_limits_the_exits_shown(snap_file, capsys):
    assert main(["report", str(snap_file), "--top", "3", "--width", "120"]) == 0
    out = capsys.readouterr().out
    assert "showing the worst 3 of 10 exits" in out


# --- the HTML page ----------------------------------------------------------------------------


def test_cli_html_is_self_contained_and_complete(snap_file, tmp_path, capsys, snapshot):
    out_path = tmp_path / "report.html"
    assert main(["report", str(snap_file), "--html", str(out_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"wrote {out_path}: bad exits: {BAD_EXIT}")
    page = out_path.read_text(encoding="utf-8")
    assert PASSWORD not in page and PASSWORD not in out
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    low = page.lower()
    for external in ("<script", "<link", "src=", "url(", "@import", "href="):
        assert external not in low, external
    for exit in snapshot["exits"]:
        assert f">{exit['exit_id']}</th>" in page
        assert exit["proxy"] in page  # masked
    for site in snapshot["matrix"]["sites"]:
        assert site in page
    assert f'<span class="name">{BAD_EXIT}</span>' in page
    assert f'<span class="name">{BAD_SITE}</span>' in page
    assert f"open site incident: {BAD_SITE}" in page


def _read_png(path):
    """(width, height, rows of RGB(A) bytes) of an 8-bit, non-interlaced PNG, standard library only."""
    data = Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, [], None
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + n]
        pos += 12 + n
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
    width, height, depth, colour, _, _, interlace = header
    assert depth == 8 and colour in (2, 6) and interlace == 0, header
    bpp = 3 if colour == 2 else 4
    raw = zlib.decompress(b"".join(idat))
    stride = width * bpp
    prev, rows = bytearray(stride), []
    low7, high = int.from_bytes(b"\x7f" * stride, "big"), int.from_bytes(b"\x80" * stride, "big")
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        if f == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 255
        elif f == 2:  # "up", bytewise over the whole row at once: add the low 7 bits, xor the 8th
            a, b = int.from_bytes(line, "big"), int.from_bytes(prev, "big")
            line = bytearray((((a & low7) + (b & low7)) ^ ((a ^ b) & high)).to_bytes(stride, "big"))
        elif f == 3:
            for i in range(stride):
                line[i] = (line[i] + (((line[i - bpp] if i >= bpp else 0) + prev[i]) >> 1)) & 255
        elif f == 4:
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b, c = prev[i], (prev[i - bpp] if i >= bpp else 0)
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(line)
        prev = line
    return width, height, bpp, rows


def test_html_renders_in_headless_chromium(snap_file, tmp_path):
    chromium = shutil.which("chromium")
    assert chromium, "chromium is missing: run scripts/test-deps.sh (make test-python does)"
    page, png = tmp_path / "report.html", tmp_path / "report.png"
    assert main(["report", str(snap_file), "--html", str(page)]) == 0
    r = subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            f"--user-data-dir={tmp_path / 'profile'}",
            f"--screenshot={png}",
            "--window-size=1400,1000",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert r.returncode == 0 and png.exists(), r.stderr[-2000:]
    width, height, bpp, rows = _read_png(png)
    assert (width, height) == (1400, 1000)

    # Not blank, and the heatmap's own colours are there: the 0% red of the bad row and
    # column, the 100% green of the good cells (each cell is about 46 x 24 pixels).
    def near(px, c, tol=10):
        return all(abs(px[k] - c[k]) <= tol for k in range(3))

    red, green = _report._rgb(0.0), _report._rgb(1.0)
    colours, n_red, n_green, reddish, greenish = set(), 0, 0, 0, 0
    for line in rows[::2]:
        for x in range(0, width * bpp, 2 * bpp):
            px = line[x : x + 3]
            colours.add(bytes(px))
            n_red += near(px, red)
            n_green += near(px, green)
            reddish += px[0] > 150 and px[1] < 90 and px[2] < 90
            greenish += px[1] > 110 and px[0] < 100 and px[2] < 110
    assert len(colours) > 50, "the screenshot is blank"
    # At quarter resolution: 13 red cells and 27 green ones of ~46x24 pixels, less borders and text.
    assert n_red > 13 * 150 and reddish >= n_red
    assert n_green > 27 * 150 and greenish >= n_green


# --- bad input and a missing rich -------------------------------------------------------------


@pytest.mark.parametrize(
    "content, says",
    [
        (None, "no such file"),
        ("", "empty"),
        ("{not json", "not JSON"),
        ("[1, 2]", "not a pool snapshot"),
        ('{"pool": {}, "exits": []}', "not a pool snapshot (no 'matrix')"),
        (
            '{"pool": {}, "exits": [], "matrix": {"exits": ["a"], "sites": [], "columns": ["success_rate"], "cells": []}}',
            "one row of cells per exit",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, content, says):
    path = tmp_path / "in.json"
    if content is not None:
        path.write_text(content)
    assert main(["report", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("exitpool: ") and err.count("\n") == 1 and says in err, err


def test_bad_input_on_stdin(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.StringIO("nope"))
    assert main(["report", "-"]) == 2
    assert capsys.readouterr().err.startswith("exitpool: <stdin>: not JSON")


def test_without_rich_the_terminal_report_says_so_and_html_still_works(snap_file, tmp_path, monkeypatch, capsys):
    for name in [m for m in sys.modules if m == "rich" or m.startswith("rich.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "rich", None)
    monkeypatch.setitem(sys.modules, "rich.console", None)
    assert main(["report", str(snap_file)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "needs rich" in err and "exitpool[report]" in err
    assert main(["report", str(snap_file), "--html", str(tmp_path / "r.html")]) == 0


# --- a figure the report shows -----------------------------------------------------------------


def test_throughput_counts_from_the_pools_start_not_from_clock_zero():
    # 100 leases in the 10 s since the pool was made on a clock that starts at 1000: about
    # 10 leases/s. Found with this report: the core used to measure from t=0 rather than from
    # the pool's start, and printed 100 / 1010 s = 0.099 leases/s.
    clock = ManualClock(1000.0)
    pool = Pool([Exit("a", "http://gw.example:8000")], clock=clock)
    for _ in range(10):
        for _ in range(10):
            pool.release(pool.acquire())
        clock.advance(1.0)
    assert pool.snapshot()["pool"]["throughput"] == pytest.approx(10.0, rel=0.2)


# --- a gateway: one row, its slots folded -----------------------------------------------------


def gateway_snapshot(slots=200):
    """A pool of a 200-slot gateway (the token in the user name, the password in the URL) out
    of service for its credentials, and two plain exits."""
    clock = ManualClock(1_700_000_000.0)
    gw = exitpool.Gateway(
        "resi", f"http://customer-c1:{PASSWORD}@gw.provider.example:7777", slots=slots, username="{user}-session-{session}", lifetime=600
    )
    pool = Pool([gw, Exit("dc-1", f"http://u:{PASSWORD}@10.0.0.7:3128"), Exit("dc-2", "http://10.0.0.8:3128")], clock=clock)
    for _ in range(2 * (slots + 2)):  # every exit serves a site: the heatmap has a row each
        pool.release(pool.acquire(site="news.example", timeout=0), status=200, latency=0.1)
    others = [e.exit_id for e in pool.exits if e.exit_id != "resi-7"]
    pool.release(pool.acquire(avoid=others, timeout=0), status=407)
    return pool.snapshot()


# Run by chromium after the page loads: how many gateway rows, and how many slot rows are shown
# before and after the first gateway row is opened (checkVisibility: what a reader sees).
_PROBE = """<script>
const shown = () => [...document.querySelectorAll('details.gateway td.id')].filter(td => td.checkVisibility()).length;
const rows = document.querySelectorAll('details.gateway');
const heat = () => [...document.querySelectorAll('details.gateway-heat th.exit')].filter(th => th.checkVisibility()).length;
const closed = shown(), heatClosed = heat();
rows[0].open = true;
document.querySelector('details.gateway-heat').open = true;
document.body.setAttribute('data-probe', JSON.stringify({rows: rows.length, closed: closed, open: shown(),
  heatClosed: heatClosed, heatOpen: heat(),
  summary: rows[0].querySelector('summary').innerText}));
</script></body>"""


def test_a_gateway_is_one_row_that_opens_to_its_slots_in_headless_chromium(tmp_path):
    chromium = shutil.which("chromium")
    assert chromium, "chromium is missing: run scripts/test-deps.sh (make test-python does)"
    snap_path, page = tmp_path / "snapshot.json", tmp_path / "report.html"
    snap_path.write_text(json.dumps(gateway_snapshot()))
    assert main(["report", str(snap_path), "--html", str(page)]) == 0
    html_text = page.read_text(encoding="utf-8")
    assert PASSWORD not in html_text
    # The page itself has no script: the probe goes into a copy.
    probed = tmp_path / "probed.html"
    probed.write_text(html_text.replace("</body>", _PROBE), encoding="utf-8")
    r = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", probed.as_uri()],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    import html as html_lib
    import re

    m = re.search(r'data-probe="([^"]*)"', r.stdout)
    assert m, r.stdout[-2000:]
    probe = json.loads(html_lib.unescape(m.group(1)))
    assert probe["rows"] == 1, "one row for the gateway, not one per slot"
    assert probe["closed"] == 0, "its slots are folded"
    assert probe["open"] == 200, "opened, it shows its 200 slots"
    assert (probe["heatClosed"], probe["heatOpen"]) == (0, 200), "the heatmap folds the slots too"
    summary = probe["summary"]
    assert "resi" in summary and "quarantined" in summary and "407" in summary and "200 slots" in summary, summary
    assert PASSWORD not in r.stdout
    # The plain exits stay in the exits table and the heatmap, one row each.
    assert html_text.count('<td class="id">dc-') == 2
    assert html_text.count('<th class="exit">dc-') == 2
