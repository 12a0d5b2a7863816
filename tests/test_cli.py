"""The ``exitpool`` command as a user runs it (a subprocess): gateways in a config file are
listed, assigned and churned as gateways, never with a password or a slot's token."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import time

from exitpool import Exit, Gateway, Ring

PASSWORD = "hunter2-S3CRET"
GATEWAY = Gateway(
    "resi",
    f"http://customer-c1:{PASSWORD}@gw.provider.example:7777",
    slots=500,
    username="{user}-cc-{country}-session-{session}",
    lifetime=600,
    tags={"country": "de"},
)


def run(*args):
    p = subprocess.run([sys.executable, "-m", "exitpool._cli", *args], capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


def config(tmp_path):
    (tmp_path / "proxies.txt").write_text(f"dc-1 http://user:{PASSWORD}@10.0.0.7:3128 country=us\n")
    path = tmp_path / "exitpool.toml"
    path.write_text(
        textwrap.dedent(f"""\
            exits_file = "proxies.txt"
            [[exit]]
            id = "dc-2"
            proxy = "socks5://10.0.0.8:1080"
            capacity = 2
            [[gateway]]
            id = "resi"
            proxy = "http://customer-c1:{PASSWORD}@gw.provider.example:7777"
            slots = 500
            username = "{{user}}-cc-{{country}}-session-{{session}}"
            lifetime = 600
            tags = {{ country = "de" }}
            """)
    )
    return str(path)


def no_secret(text, at):
    assert PASSWORD not in text
    # A slot's token is part of its credentials: no row shows one (tokens of the minute around `at`).
    for t in (at - 60, at, at + 60):
        tokens = {GATEWAY.token(s, at=t) for s in range(GATEWAY.slots)}
        assert not any(tok in text for tok in tokens)


def test_exits_lists_a_gateway_as_one_row_with_its_slots_lifetime_and_next_rotation(tmp_path):
    before = time.time()
    code, out, err = run("exits", "--config", config(tmp_path))
    after = time.time()
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].split()[:2] == ["ID", "KIND"]
    assert [line.split()[0] for line in lines[1:]] == ["dc-1", "dc-2", "resi"]
    row = lines[3]
    assert re.match(r"resi\s+gateway\s+500\s+600 s\s+in \d+ s \(resi-\d+\)\s+1 per slot\s+country=de\s+", row), row
    assert row.endswith("http://customer-c1:[secure]@gw.provider.example:7777")
    seconds, slot = re.search(r"in (\d+) s \(resi-(\d+)\)", row).groups()
    # The next rotation is the gateway's soonest, over its slots, at the moment the command
    # read the time. 500 slots rotate about once a second between them, so that moment (between
    # `before` and `after`) decides which: any slot whose rotation is the next one at some time
    # in that window, up to the first one due after it.
    due = sorted((GATEWAY.rotates_at(s, at=before), s) for s in range(500))
    first_after = next(i for i, (at, _) in enumerate(due) if at > after)
    soonest = {s for at, s in due[: first_after + 1] if at > before}
    assert int(slot) in soonest
    at = GATEWAY.rotates_at(int(slot), at=before)
    assert at - after - 1 <= int(seconds) <= at - before + 1
    assert "http://user:[secure]@10.0.0.7:3128" in lines[1]
    no_secret(out, before)


def test_assign_places_keys_on_gateway_slots_and_shows_the_gateway_not_the_token(tmp_path):
    keys = [f"account-{i}" for i in range(40)]
    now = time.time()
    code, out, err = run("assign", "--config", config(tmp_path), *keys)
    assert (code, err) == (0, "")
    members = [Exit("dc-1", f"http://user:{PASSWORD}@10.0.0.7:3128"), Exit("dc-2", "socks5://10.0.0.8:1080", capacity=2)]
    ring = Ring(members + GATEWAY.exits(at=now))
    expected = [e.exit_id for e in ring.assign_many(keys)]
    rows = [line.split() for line in out.splitlines()]
    assert [r[1] for r in rows] == expected
    slot_rows = [r for r in rows if r[1].startswith("resi-")]
    assert slot_rows, "some keys land on the gateway's slots"
    assert all(r[2:] == ["gateway", "resi", "http://customer-c1:[secure]@gw.provider.example:7777"] for r in slot_rows)
    no_secret(out, now)


def test_churn_takes_a_config_and_a_slot_id(tmp_path):
    code, out, err = run("churn", "--config", config(tmp_path), "--remove", "resi-7", "--keys", "5000")
    assert (code, err) == (0, "")
    assert out.startswith("pool: 502 exits -> 501 exits (remove resi-7), 5,000 keys")


def test_a_bad_gateway_in_the_config_is_one_line_naming_file_line_and_key(tmp_path):
    path = config(tmp_path)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    with open(path, "w", encoding="utf-8") as f:
        f.write(text.replace("lifetime = 600", "lifetime = 600\nmargin = 900"))
    code, out, err = run("exits", "--config", path)
    assert (code, out) == (2, "")
    assert err.startswith(f"exitpool: {path}:12: gateway[0].margin: ") and err.count("\n") == 1, err
    assert PASSWORD not in err
    code, _, err = run("exits", "--config", path, "--exits", str(tmp_path / "proxies.txt"))
    assert code == 2 and "not allowed with argument" in err
