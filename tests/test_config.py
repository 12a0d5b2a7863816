"""`Pool.from_config("exitpool.toml")`: every option of the file reaches the pool and shows in
its behaviour, exits come from a proxy-list file (relative to the TOML file) and `[[exit]]`
tables, and every mistake raises InvalidInput naming the key and its line, never a password.
Time-dependent options run on a ManualClock, given as an override in code."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

import exitpool
from exitpool import Cooling, Exit, InvalidInput, ManualClock, NoExitAvailable, Pool, Ring, WarmingUp, load_exits
from exitpool._config import from_config as _from_config

DOCS = Path(__file__).resolve().parent.parent / "docs"
CONFIG_PAGE = DOCS / "configuration.md"  # the manual's "Configuration files"
HEALTH_PAGE = DOCS / "health.md"  # the manual's "Health"
PASSWORD = "hunter2-S3CRET"
LIST = f"""\
# the provider's list
gw.example:8000:user-a:{PASSWORD}
sess-b http://user-b:{PASSWORD}@gw.example:8001 country=DE capacity=2
"""


def write(directory, text, name="exitpool.toml"):
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def config(tmp_path, text, exits=True):
    """A config file; with `exits`, it also reads a two-exit proxy list beside it."""
    if exits:
        write(tmp_path, LIST, "proxies.txt")
        text = 'exits_file = "proxies.txt"\n' + textwrap.dedent(text)
    return write(tmp_path, text)


def summary(exits):
    return [(e.exit_id, e.proxy, e.ip, e.capacity, e.tags) for e in exits]


def leased_ids(pool, n, **kw):
    out = []
    for _ in range(n):
        with pool.lease(**kw) as lease:
            out.append(lease.exit_id)
    return out


# --- every option, as Pool(...) receives it ---


EVERY_OPTION = """\
strategy = "p2c"
replicas = 40
session_ttl = 600
lease_ttl = 30.5
max_leases = 4
balance_factor = 1.25
seed = 7
cooldown = 2
calibrate = true

[warmup]
ramp = 900
initial_interval = 20
horizon = 3600

[health]
consecutive = 4
degrade_at = 1.5
block_weight = 2
connect_weight = 1.5
window = 32
min_calls = 12
failure_rate = 0.4
captcha_rate = 0.2
captcha_consecutive = 2
recover_successes = 6
half_open_trials = 2
base_ejection = 20
max_ejection = 300
jitter = 0.1
min_hold = 5
forgive_after = 300
dead_after = 4
max_ejected = 0.5
min_in_service = 2
panic_threshold = 0.4
incident_fraction = 0.6
incident_min_exits = 4
incident_interval = 0.5
rate_limit_cooldown = 15

[[exit]]
id = "sess-c"
proxy = "socks5://user-c:{password}@10.0.0.3:1080"
ip = "198.51.100.3"
capacity = 3
tags = {{ country = "FR", kind = "mobile" }}
"""


def test_every_option_reaches_pool_as_written(tmp_path):
    calls = []

    def spy(exits, **options):
        calls.append((exits, options))
        return Pool(exits, **options)

    path = config(tmp_path, EVERY_OPTION.format(password=PASSWORD))
    pool = _from_config(spy, path)
    assert isinstance(pool, Pool)
    exits, options = calls[-1]
    assert options == {
        "strategy": "p2c",
        "replicas": 40,
        "session_ttl": 600,
        "lease_ttl": 30.5,
        "max_leases": 4,
        "balance_factor": 1.25,
        "seed": 7,
        "cooldown": 2,
        "calibrate": True,
        "warmup": {"ramp": 900, "initial_interval": 20, "horizon": 3600},
        "health": {
            "consecutive": 4,
            "degrade_at": 1.5,
            "block_weight": 2,
            "connect_weight": 1.5,
            "window": 32,
            "min_calls": 12,
            "failure_rate": 0.4,
            "captcha_rate": 0.2,
            "captcha_consecutive": 2,
            "recover_successes": 6,
            "half_open_trials": 2,
            "base_ejection": 20,
            "max_ejection": 300,
            "jitter": 0.1,
            "min_hold": 5,
            "forgive_after": 300,
            "dead_after": 4,
            "max_ejected": 0.5,
            "min_in_service": 2,
            "panic_threshold": 0.4,
            "incident_fraction": 0.6,
            "incident_min_exits": 4,
            "incident_interval": 0.5,
            "rate_limit_cooldown": 15,
        },
    }
    # The list first, then the tables, each exactly as load_exits and Exit make them.
    assert summary(exits) == summary(load_exits(tmp_path / "proxies.txt")) + [
        ("sess-c", f"socks5://user-c:{PASSWORD}@10.0.0.3:1080", "198.51.100.3", 3, {"country": "FR", "kind": "mobile"})
    ]
    assert summary(pool.exits) == summary(exits)


def test_store_and_namespace_are_passed_only_when_written(tmp_path):
    seen = []

    def spy(exits, **options):
        seen.append(options)
        return "built"

    assert _from_config(spy, config(tmp_path, 'strategy = "lru"\n')) == "built"
    assert seen[-1] == {"strategy": "lru"}
    text = 'store = "redis://127.0.0.1:6379/0"\nnamespace = "fleet-a"\n'
    assert _from_config(spy, config(tmp_path, text)) == "built"
    assert seen[-1] == {"store": "redis://127.0.0.1:6379/0", "namespace": "fleet-a"}


def test_overrides_in_code_win_over_the_file(tmp_path):
    clock = ManualClock(100.0)
    pool = _from_config(Pool, config(tmp_path, 'strategy = "lru"\n'), clock=clock, strategy="round_robin")
    assert pool.now() == 100.0
    assert leased_ids(pool, 4) == ["user-a@gw.example:8000", "sess-b"] * 2


# --- each option shows in the pool's behaviour ---


def test_defaults_when_the_file_sets_only_exits(tmp_path):
    pool = Pool.from_config(config(tmp_path, ""))
    assert repr(pool) == "Pool(2 exits, strategy='weighted')"
    keys = [f"account-{i}" for i in range(300)]
    assert [pool.assign(k).exit_id for k in keys] == [e.exit_id for e in Ring(pool.exits).assign_many(keys)]


def test_strategy(tmp_path):
    pool = Pool.from_config(config(tmp_path, 'strategy = "round_robin"\n'))
    assert repr(pool) == "Pool(2 exits, strategy='round_robin')"
    with pool.lease() as lease:
        assert lease.strategy == "round_robin"
    # Capacities 1 and 2: weighted would give sess-b two leases in three; round-robin alternates.
    assert leased_ids(pool, 4) == ["sess-b", "user-a@gw.example:8000"] * 2


def test_replicas(tmp_path):
    pool = Pool.from_config(config(tmp_path, "replicas = 3\n"))
    keys = [f"account-{i}" for i in range(500)]
    want = [e.exit_id for e in Ring(pool.exits, replicas=3).assign_many(keys)]
    assert [pool.assign(k).exit_id for k in keys] == want
    assert want != [e.exit_id for e in Ring(pool.exits).assign_many(keys)]


def test_session_ttl(tmp_path):
    clock = ManualClock()
    pool = _from_config(Pool, config(tmp_path, "session_ttl = 60\n"), clock=clock)
    with pool.lease("account-1") as lease:
        home = lease.exit_id
    clock.advance(59)
    assert pool.bench(home) == ["account-1"]  # still live: it would move when it ends
    pool.unbench(home)
    clock.advance(1.5)
    assert pool.bench(home) == []


def test_lease_ttl_and_max_leases(tmp_path):
    clock = ManualClock()
    pool = _from_config(Pool, config(tmp_path, "lease_ttl = 10\nmax_leases = 2\n"), clock=clock)
    held = [pool.acquire(site="s") for _ in range(4)]  # two per exit
    assert sorted(lease.exit_id for lease in held) == ["sess-b", "sess-b", "user-a@gw.example:8000", "user-a@gw.example:8000"]
    with pytest.raises(NoExitAvailable):
        pool.acquire(timeout=0)
    clock.advance(10.5)  # the four were never released: they expire
    assert pool.acquire(timeout=0).active


def test_balance_factor(tmp_path):
    plain = Pool.from_config(config(tmp_path, ""))
    crowded = [k for k in (f"account-{i}" for i in range(400)) if plain.assign(k).exit_id == "sess-b"][:40]
    pool = Pool.from_config(config(tmp_path, "balance_factor = 1.1\n"))
    how = [pool.acquire(k).strategy for k in crowded]
    assert "ring_bounded" in how
    sessions = {row["exit_id"]: row["sessions"] for row in pool.snapshot()["exits"]}
    # sess-b has capacity 2 of 3: its bound is ceil(1.1 * 2/3 * live sessions) at most 30.
    assert sessions["sess-b"] <= 30 and sessions["user-a@gw.example:8000"] >= 10


def test_warmup_table(tmp_path):
    clock = ManualClock()
    text = "[warmup]\nramp = 600\ninitial_interval = 30\nhorizon = 3600\n"
    pool = _from_config(Pool, config(tmp_path, text), clock=clock)

    def lease():
        with pool.lease("account-1"):
            pass

    lease()
    with pytest.raises(WarmingUp) as e:
        lease()
    assert e.value.retry_after == pytest.approx(30.0)  # initial_interval
    clock.advance(601)
    lease()
    lease()  # the ramp is over at 600 s (the default 1800 s would still space them)
    clock.advance(3601)
    lease()  # unused for longer than the horizon: a new pairing, slow again
    with pytest.raises(WarmingUp):
        lease()


@pytest.mark.parametrize(("value", "interval"), [("true", 60.0), ("900", 60.0)])
def test_warmup_switch_or_ramp(tmp_path, value, interval):
    pool = Pool.from_config(config(tmp_path, f"warmup = {value}\n"))
    with pool.lease("account-1"):
        pass
    with pytest.raises(WarmingUp) as e:
        with pool.lease("account-1"):
            pass
    assert 0 < e.value.retry_after <= interval
    off = Pool.from_config(config(tmp_path, "warmup = false\n"))
    assert leased_ids(off, 2, key="account-1")[0] == leased_ids(off, 1, key="account-1")[0]


def test_seed(tmp_path):
    exits = [Exit(f"e{i}", f"http://gw.example:{9000 + i}") for i in range(8)]
    lines = "".join(f"e{i} http://gw.example:{9000 + i}\n" for i in range(8))
    write(tmp_path, lines, "eight.txt")
    path = write(tmp_path, 'exits_file = "eight.txt"\nstrategy = "p2c"\nseed = 7\n')
    picks = [leased_ids(Pool.from_config(path), 40) for _ in range(2)]
    assert picks[0] == picks[1] == leased_ids(Pool(exits, strategy="p2c", seed=7), 40)
    assert picks[0] != leased_ids(Pool(exits, strategy="p2c", seed=8), 40)


def test_cooldown(tmp_path):
    clock = ManualClock()
    pool = _from_config(Pool, config(tmp_path, 'strategy = "lru"\ncooldown = 3\n'), clock=clock)
    leased_ids(pool, 2, site="shop.example")
    with pytest.raises(Cooling) as e:
        leased_ids(pool, 1, site="shop.example")
    assert e.value.retry_after == pytest.approx(3.0)


def test_health(tmp_path):
    pool = Pool.from_config(config(tmp_path, "[health]\nconsecutive = 2\nmax_ejected = 0.5\n"))
    home = pool.assign("account-1").exit_id
    for _ in range(2):
        pool.release(pool.acquire("account-1", site="shop.example"), error="timeout")
    assert pool.state(home, site="shop.example") == "quarantined"  # the default takes 5


def test_store_and_namespace(tmp_path):
    shared = config(tmp_path, 'store = "memory://config-test"\nnamespace = "fleet-a"\nmax_leases = 1\n')
    a, b = Pool.from_config(shared), Pool.from_config(shared)
    assert a.store == 'memory://config-test (namespace "fleet-a")'
    held = [a.acquire(), a.acquire()]  # both exits, one lease each
    with pytest.raises(NoExitAvailable):
        b.acquire(timeout=0)  # the same store and namespace: the same leases
    other = Pool.from_config(config(tmp_path, 'store = "memory://config-test"\nnamespace = "fleet-b"\nmax_leases = 1\n'))
    assert other.acquire(timeout=0).active
    assert all(lease.active for lease in held)


def test_calibrate(tmp_path):
    with pytest.raises(InvalidInput, match="calibrate=True"):
        Pool.from_config(config(tmp_path, "")).recalibrate()
    assert Pool.from_config(config(tmp_path, "calibrate = true\n")).recalibrate() == []


# --- exits ---


def test_exits_file_is_relative_to_the_config_file(tmp_path, monkeypatch):
    write(tmp_path / "lists", LIST, "proxies.txt")
    path = write(tmp_path / "conf", 'exits_file = "../lists/proxies.txt"\n')
    monkeypatch.chdir(tmp_path)  # from here, ../lists/proxies.txt does not exist
    assert summary(Pool.from_config(path).exits) == summary(load_exits(tmp_path / "lists" / "proxies.txt"))
    assert summary(Pool.from_config(str(path)).exits) == summary(load_exits(tmp_path / "lists" / "proxies.txt"))


def test_exit_tables(tmp_path):
    path = write(
        tmp_path,
        f"""\
        [[exit]]
        proxy = "http://user-d:{PASSWORD}@gw.example:8003"

        [[exit]]
        id = "static-1"
        proxy = "https://gw.example:8443"
        ip = "2001:db8::7"
        capacity = 2
        [exit.tags]
        country = "DE"
        """,
    )
    pool = Pool.from_config(path)
    # Without an id, the same id a proxy list gives: user@host:port, which a new password keeps.
    (listed,) = load_exits([f"http://user-d:{PASSWORD}@gw.example:8003"])
    assert summary([pool.exit(listed.exit_id)]) == summary([listed])
    static = pool.exit("static-1")
    assert (static.proxy, static.ip, static.capacity, static.tags) == ("https://gw.example:8443", "2001:db8::7", 2, {"country": "DE"})
    assert [e.exit_id for e in pool.subset(country="DE").exits] == ["static-1"]


def test_a_config_file_that_cannot_be_opened_raises_like_open(tmp_path):
    with pytest.raises(FileNotFoundError):
        Pool.from_config(tmp_path / "missing.toml")


def test_a_byte_order_mark_is_fine(tmp_path):
    write(tmp_path, LIST, "proxies.txt")
    path = tmp_path / "exitpool.toml"
    path.write_bytes(b'\xef\xbb\xbfexits_file = "proxies.txt"\nstrategy = "lru"\n')
    assert repr(Pool.from_config(path)) == "Pool(2 exits, strategy='lru')"


# --- errors: the key, the line, no password ---

# (file text after the exits_file line, key, line, a fragment of the message). Line 1 is
# `exits_file = "proxies.txt"`.
BAD_OPTIONS = [
    ('stratgy = "lru"', "stratgy", 2, "unknown key"),
    ("clock = 1", "clock", 2, "unknown key"),
    ('strategy = "fastest"', "strategy", 2, "is not one of"),
    ("strategy = 1", "strategy", 2, "must be a string, got 1"),
    ("replicas = 0", "replicas", 2, "replicas"),
    ("replicas = 2.5", "replicas", 2, "must be a whole number, got 2.5"),
    ("session_ttl = 0", "session_ttl", 2, "> 0"),
    ('session_ttl = "15m"', "session_ttl", 2, 'must be a number, got the string "15m"'),
    ("lease_ttl = -1", "lease_ttl", 2, "> 0"),
    ("lease_ttl = nan", "lease_ttl", 2, "finite"),
    ("max_leases = 0", "max_leases", 2, "leave it out for no limit"),
    ("max_leases = true", "max_leases", 2, "must be a whole number, got true"),
    ("max_sessions = 0", "max_sessions", 2, "0 is outside 1..=4294967295 (None for no bound)"),
    ("max_pairings = -3", "max_pairings", 2, "-3 is outside 1..=4294967295"),
    ('max_sessions = "many"', "max_sessions", 2, "must be a whole number"),
    ("balance_factor = 0.9", "balance_factor", 2, "> 1"),
    ("seed = -1", "seed", 2, "0..="),
    ("seed = 1979-05-27", "seed", 2, "a date"),
    ("cooldown = -0.5", "cooldown", 2, ">= 0"),
    ('calibrate = "yes"', "calibrate", 2, "true or false"),
    ('warmup = "slow"', "warmup", 2, "a ramp in seconds"),
    ("[warmup]\nramp = 600\nsteep = 2", "warmup.steep", 4, "unknown key (the keys are ramp, initial_interval, horizon)"),
    ("[warmup]\nramp = -5", "warmup.ramp", 3, "> 0"),
    ("warmup = { ramp = 600, horizon = 60 }", "warmup.horizon", 2, "at least its ramp"),
    ('[warmup]\ninitial_interval = "1m"', "warmup.initial_interval", 3, "must be a number"),
    ("health = 5", "health", 2, "[health] table"),
    ("[health]\nconsecutive = 5\nwindow = 70", "health.window", 4, "1..=64"),
    ("[health]\nwindow = 8", "health.window", 3, "min_calls"),
    ("[health]\nmin_calls = 30", "health.min_calls", 3, "min_calls 30"),
    ("[health]\nbase_ejection = 700", "health.base_ejection", 3, "below base_ejection"),
    ("[health]\nconsecutve = 3", "health.consecutve", 3, "unknown key (the keys are consecutive, degrade_at,"),
    ("[health]\njitter = 1.0", "health.jitter", 3, "[0, 1)"),
    ("[health]\ndead_after = 2.5", "health.dead_after", 3, "whole number"),
    ("[health]\nfailure_rate = false", "health.failure_rate", 3, "must be a number, got false"),
    ("health.degrade_at = 9", "health.degrade_at", 2, "above consecutive"),
    ('store = "ftp://gw.example:21"', "store", 2, "is not a store URL"),
    ("store = true", "store", 2, "must be a string"),
    ('store = "memory://x"\nnamespace = ""', "namespace", 3, "1 to 200 characters"),
    ("namespace = 5", "namespace", 2, "must be a string"),
]


@pytest.mark.parametrize(("text", "key", "line", "fragment"), BAD_OPTIONS, ids=[b[1] + ":" + b[3] for b in BAD_OPTIONS])
def test_a_bad_option_names_its_key_and_line(tmp_path, text, key, line, fragment):
    path = config(tmp_path, text + "\n")
    with pytest.raises(InvalidInput) as e:
        Pool.from_config(path)
    message = str(e.value)
    assert message.startswith(f"{path}:{line}: {key}: "), message
    assert fragment in message


def exit_table(*fields):
    return "[[exit]]\n" + "".join(f + "\n" for f in fields)


PROXY = f'proxy = "http://user:{PASSWORD}@gw.example:8000"'
BAD_EXITS = [
    (exit_table(PROXY, "port = 1"), "exit[0].port", 3, "unknown key"),
    (exit_table('id = "a"'), "exit[0]", 1, "needs a proxy"),
    (exit_table(f'proxy = "ftp://user:{PASSWORD}@gw.example:21"'), "exit[0].proxy", 2, "ftp://user:[secure]@gw.example:21"),
    (exit_table(f'proxy = "http://user:{PASSWORD}@gw.example:99999"'), "exit[0].proxy", 2, "[secure]"),
    (exit_table(f'proxy = "gw.example:8000:user:{PASSWORD}"'), "exit[0].proxy", 2, "gw.example:8000:user:[secure]"),
    (exit_table("proxy = 8000"), "exit[0].proxy", 2, "must be a proxy URL string"),
    (exit_table(PROXY, 'ip = "gw.example"'), "exit[0].ip", 3, "not an IP address"),
    (exit_table(PROXY, "capacity = -1"), "exit[0].capacity", 3, "-1 is outside"),
    (exit_table(PROXY, 'capacity = "3"'), "exit[0].capacity", 3, "whole number"),
    (exit_table(PROXY, "tags = { country = 49 }"), "exit[0].tags.country", 3, "must be a string"),
    (exit_table(PROXY, 'tags = "DE"'), "exit[0].tags", 3, "must be a table"),
    (exit_table(PROXY, 'id = " padded"'), "exit[0].id", 3, "surrounding spaces"),
    # No id: the one made from the proxy (user@host:port) is refused, and the proxy is to blame.
    (
        exit_table('ip = "93.184.10.7"', f'proxy = "http://\\u0001user:{PASSWORD}@gw.example:1"'),
        "exit[0].proxy",
        3,
        "control characters (the id an [[exit]] without `id` gets",
    ),
    (
        exit_table(PROXY) + "\n" + exit_table(PROXY.replace(PASSWORD, "other")),
        "exit[1]",
        4,
        'duplicate exit id "user@gw.example:8000" (also at exit[0])',
    ),
    (exit_table(PROXY, 'id = "a"') + exit_table('id = "a"', PROXY), "exit[1]", 4, 'duplicate exit id "a" (also at exit[0])'),
    ("exit = 5", "exit", 1, "must be [[exit]] tables"),
    ('exits_file = "nowhere.txt"', "exits_file", 1, "does not exist"),
    ('exits_file = "."', "exits_file", 1, "is not a file"),
    ("exits_file = ['a.txt']", "exits_file", 1, "must be a path"),
    ('exits_file = "empty.txt"', "exits_file", 1, "holds no exits"),
    ('exits_file = "bad.txt"', "exits_file", 1, "line 2: bad proxy"),
    ('exits_file = "dup.txt"\n' + exit_table('id = "sess-b"', PROXY), "exit[0]", 2, "also at exits_file"),
    # Paths the OS refuses: each an InvalidInput at exits_file, never a bare ValueError or OSError.
    ('exits_file = "~\\u0000x"', "exits_file", 1, "'~\\x00x' is not a usable path: it contains a NUL character"),
    ('\nexits_file = "empty.txt\\u0000"', "exits_file", 2, "NUL character"),
    ('exits_file = "bad.txt/proxies.txt"', "exits_file", 1, "cannot be opened: Not a directory"),
    ('exits_file = "loop"', "exits_file", 1, "cannot be opened: Too many levels of symbolic links"),
    (f'exits_file = "{"x" * 300}"', "exits_file", 1, "cannot be opened: File name too long"),
    ('exits_file = "latin1.txt"', "exits_file", 1, "latin1.txt: not UTF-8 text (invalid continuation byte at byte 16)"),
]


@pytest.mark.parametrize(("text", "key", "line", "fragment"), BAD_EXITS, ids=[b[1] + ":" + b[3] for b in BAD_EXITS])
def test_a_bad_exit_names_its_key_and_line(tmp_path, text, key, line, fragment):
    write(tmp_path, "", "empty.txt")
    write(tmp_path, f"gw.example:1\nsocks4://user:{PASSWORD}@gw.example:2\n", "bad.txt")
    write(tmp_path, "sess-b gw.example:1\n", "dup.txt")
    (tmp_path / "latin1.txt").write_bytes(b"gw.example:1 caf\xe9=1\n")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    path = write(tmp_path, text)
    with pytest.raises(InvalidInput) as e:
        Pool.from_config(path)
    message = str(e.value)
    assert message.startswith(f"{path}:{line}: {key}: "), message
    assert fragment in message
    assert PASSWORD not in message


def test_an_exits_file_that_cannot_be_read_names_the_key(tmp_path, monkeypatch):
    # Permission denied cannot be had as root (these tests may run as root): the OS's error,
    # raised where the loader stats and reads the file, is what the user would get.
    path = config(tmp_path, "")
    denied = PermissionError(13, "Permission denied", str(tmp_path / "proxies.txt"))
    real_stat = exitpool._config.os.stat

    def stat(p, *a, **kw):
        if str(p).endswith("proxies.txt"):
            raise denied
        return real_stat(p, *a, **kw)

    def load_exits(p):
        raise denied

    for target, fake in (("os.stat", stat), ("load_exits", load_exits)):
        with monkeypatch.context() as m:
            m.setattr(exitpool._config.os, "stat", fake) if target == "os.stat" else m.setattr(exitpool._config, "load_exits", fake)
            with pytest.raises(InvalidInput) as e:
                Pool.from_config(path)
        assert str(e.value).startswith(f"{path}:1: exits_file: "), str(e.value)
        assert str(e.value).count("Permission denied") == 1, str(e.value)


def test_a_config_path_with_a_nul_is_invalid_input(tmp_path):
    # open() raises a bare ValueError for it; InvalidInput is a ValueError too.
    with pytest.raises(InvalidInput, match="embedded null byte"):
        Pool.from_config(str(tmp_path / "exitpool\0.toml"))


# --- keywords given in code: their mistakes are theirs, not the file's ---


def test_an_unknown_keyword_in_code_is_a_type_error_naming_it(tmp_path):
    path = config(tmp_path, 'strategy = "lru"\n')
    with pytest.raises(TypeError, match="unexpected keyword argument 'stratgy'") as e:
        Pool.from_config(path, stratgy="lru")
    assert not isinstance(e.value, exitpool.Error)
    with pytest.raises(TypeError, match=r"ManualClock.*\(in a keyword argument given in code: clock\)"):
        Pool.from_config(path, clock=5)


@pytest.mark.parametrize(
    ("text", "overrides", "key"),
    [
        ('strategy = "lru"\n', {"strategy": "bad"}, "strategy"),  # the file's value is fine
        ("", {"strategy": "bad"}, "strategy"),
        ("[health]\nconsecutive = 5\n", {"health": {"window": 70}}, "health.window"),
        ('store = "ftp://gw.example:21"\n', {"store": "memory://x", "namespace": ""}, "namespace"),
    ],
)
def test_a_bad_value_given_in_code_is_blamed_on_the_keyword(tmp_path, text, overrides, key):
    path = config(tmp_path, text)
    with pytest.raises(InvalidInput) as e:
        Pool.from_config(path, **overrides)
    message = str(e.value)
    assert message.startswith(f"keyword argument {key} (given in code, not read from {path}): "), message
    assert not re.search(rf"{re.escape(str(path))}:\d", message)


def test_the_file_is_still_blamed_when_code_passes_keywords_too(tmp_path):
    path = config(tmp_path, 'strategy = "lru"\nreplicas = 0\n')
    with pytest.raises(InvalidInput) as e:
        Pool.from_config(path, clock=ManualClock(), session_ttl=60)
    assert str(e.value).startswith(f"{path}:3: replicas: "), str(e.value)


# --- absurd values: the core's bounds, named at their key and line ---

HUGE = [
    ("session_ttl = 1e300", r"session_ttl", 2),
    ("lease_ttl = 1e300", r"lease_ttl", 2),
    ('strategy = "lru"\ncooldown = 1e300', r"cooldown", 3),
    ("[warmup]\ninitial_interval = 1e300", r"warmup\.initial_interval", 3),
    ("[warmup]\nramp = 1e308\nhorizon = 1e308", r"warmup\.(ramp|horizon)", None),
    ("[health]\nbase_ejection = 1e300\nmax_ejection = 1e300", r"health\.(base|max)_ejection", None),
    ("[health]\nmin_hold = 1e300", r"health\.min_hold", 3),
    ("[health]\nrate_limit_cooldown = 1e300", r"health\.rate_limit_cooldown", 3),
]


@pytest.mark.parametrize(("text", "key", "line"), HUGE)
def test_absurd_durations_are_refused_at_their_key_and_line(tmp_path, text, key, line):
    path = config(tmp_path, text + "\n")
    with pytest.raises(InvalidInput) as e:
        Pool.from_config(path)
    m = re.match(rf"{re.escape(str(path))}:(\d+): ({key}): ", str(e.value))
    assert m, str(e.value)
    where = {"ramp": 3, "horizon": 4, "base_ejection": 3, "max_ejection": 4}
    assert int(m.group(1)) == (line or where[m.group(2).split(".")[1]])


def test_a_file_without_exits(tmp_path):
    path = write(tmp_path, 'strategy = "lru"\n')
    with pytest.raises(InvalidInput, match=r": no exits: set exits_file or add \[\[exit\]\] or \[\[gateway\]\] tables"):
        Pool.from_config(path)


def test_invalid_toml_names_the_line(tmp_path):
    path = write(tmp_path, 'exits_file = "proxies.txt"\nstrategy = \n')
    with pytest.raises(InvalidInput) as e:
        Pool.from_config(path)
    assert str(e.value).startswith(f"{path}:2: invalid TOML: "), str(e.value)
    path = write(tmp_path, 'exits_file = "a"\nexits_file = "b"\n')
    with pytest.raises(InvalidInput, match=r":2: invalid TOML"):
        Pool.from_config(path)


def test_text_that_is_not_utf8_names_the_line(tmp_path):
    path = tmp_path / "exitpool.toml"
    path.write_bytes(b'exits_file = "proxies.txt"\nstrategy = "l\xffru"\n')
    with pytest.raises(InvalidInput, match=r"exitpool.toml:2: not UTF-8"):
        Pool.from_config(path)


def test_every_error_is_an_exitpool_error_and_a_value_error(tmp_path):
    path = config(tmp_path, "replicas = 0\n")
    with pytest.raises(exitpool.Error):
        Pool.from_config(path)
    with pytest.raises(ValueError):
        Pool.from_config(path)


# A password where a user might paste a proxy URL by mistake: every message masks it. The
# second item says whether the message shows the value (masked) at all.
MISPLACED = [
    (f'strategy = "http://user:{PASSWORD}@gw.example:8000"', True),
    (f'replicas = "http://user:{PASSWORD}@gw.example:8000"', True),
    (f'store = "ftp://user:{PASSWORD}@gw.example:21"', True),
    (f'"http://user:{PASSWORD}@gw.example:8000" = 1', True),
    (f'["socks5://user:{PASSWORD}@gw.example:1080"]\n["socks5://user:{PASSWORD}@gw.example:1080"]', True),
    (f'session_ttl = "gw.example:8000:user:{PASSWORD}"', True),
    (f'warmup = "http://user:{PASSWORD}"', True),
    (f'[health]\n"user:{PASSWORD}@gw.example:8000" = 1', True),
    (f'[[exit]]\nproxy = "http://user:{PASSWORD}@gw.example:8000"\n[exit.tags]\n"http://u:{PASSWORD}@h:1" = 1', True),
    (f'strategy = "http://user:{PASSWORD}@gw.example:8000', False),
    (f'[[exit]]\nproxy = "http://user:{PASSWORD}@gw.example:8000"\ncapacity = 10001', False),
    (f'[[exit]]\nproxy = "http://user:{PASSWORD.replace("-", "%2D")}@gw.example:8000"\nip = "x"', False),
]


@pytest.mark.parametrize(("text", "shown"), MISPLACED)
def test_no_password_in_any_error(tmp_path, text, shown):
    with pytest.raises(InvalidInput) as e:
        Pool.from_config(config(tmp_path, text + "\n"))
    message = str(e.value)
    assert PASSWORD not in message and PASSWORD.replace("-", "%2D") not in message
    assert ("[secure]" in message) == shown, message


def test_the_readme_documents_every_option_in_a_config_that_loads(tmp_path):
    blocks = re.findall(r"```toml\n(.*?)```", CONFIG_PAGE.read_text(encoding="utf-8"), flags=re.S)
    assert blocks, "docs/configuration.md shows an exitpool.toml in a ```toml block"
    keywords = re.findall(r"(\w+)=", Pool.__text_signature__)
    documented = "\n".join(blocks)
    missing = [k for k in keywords if k != "clock" and not re.search(rf"^(#? ?{k} =|\[{k}\])", documented, flags=re.M)]
    assert not missing
    for block in blocks:
        write(tmp_path, "gw.example:8000\n", "proxies.txt")
        assert len(Pool.from_config(write(tmp_path, block))) >= 1


# --- the location as data: .loc, .file, .line (issue 14) ---

LOCATED = [
    # (file text after the exits_file line, loc, line)
    ('[health]\nwindow = "8"', ("health", "window"), 3),
    ("[health]\nconsecutve = 3", ("health", "consecutve"), 3),
    ("[health]\nwindow = 70", ("health", "window"), 3),
    ("warmup = { ramp = 600, horizon = 60 }", ("warmup", "horizon"), 2),
    ('stratgy = "lru"', ("stratgy",), 2),
    ('[[exit]]\nproxy = "http://gw.example:1"\n[[exit]]\nproxy = "ftp://user:pw@gw.example:21"', ("exit", 1, "proxy"), 5),
    ('[[exit]]\nid = "x"', ("exit", 0), 2),
    ("strategy = ", None, 2),
]


@pytest.mark.parametrize(("text", "loc", "line"), LOCATED, ids=[str(b[1]) for b in LOCATED])
def test_a_config_error_carries_its_key_path_file_and_line_as_data(tmp_path, text, loc, line):
    path = config(tmp_path, text + "\n")
    with pytest.raises(InvalidInput) as e:
        Pool.from_config(path)
    assert (e.value.loc, e.value.file, e.value.line) == (loc, str(path), line), str(e.value)


def test_a_bad_line_of_the_exits_file_is_located_at_the_exits_file_key(tmp_path):
    write(tmp_path, "gw.example:1\ngw.example:2 capacity=x\n", "bad.txt")
    path = write(tmp_path, 'strategy = "lru"\nexits_file = "bad.txt"\n')
    with pytest.raises(InvalidInput) as e:
        Pool.from_config(path)
    assert (e.value.loc, e.value.file, e.value.line) == (("exits_file",), str(path), 2)
    assert "line 2: capacity" in str(e.value)


@pytest.mark.parametrize(
    ("override", "loc"),
    [({"strategy": "fastest"}, ("strategy",)), ({"health": {"window": 70}}, ("health", "window")), ({"max_leases": 0}, ("max_leases",))],
)
def test_a_bad_keyword_given_in_code_is_located_at_the_keyword_not_the_file(tmp_path, override, loc):
    path = config(tmp_path, "[health]\nwindow = 32\n")
    with pytest.raises(InvalidInput) as e:
        Pool.from_config(path, **override)
    assert (e.value.loc, e.value.file, e.value.line) == (loc, None, None)
    assert str(e.value).startswith(f"keyword argument {'.'.join(loc)} (given in code, not read from {path}): ")


@pytest.mark.parametrize(
    ("kwargs", "loc"),
    [
        ({"health": {"window": 70}}, ("health", "window")),
        ({"health": {"window": 2.5}}, ("health", "window")),
        ({"health": {"consecutive": True}}, ("health", "consecutive")),
        ({"health": {"bogus": 1}}, ("health", "bogus")),
        ({"warmup": {"speed": 1}}, ("warmup", "speed")),
        ({"warmup": {"ramp": -1}}, ("warmup", "ramp")),
        ({"max_leases": 2**70}, ("max_leases",)),
        ({"replicas": 0}, ("replicas",)),
        ({"strategy": "fastest"}, ("strategy",)),
    ],
)
def test_a_refusal_of_pool_carries_the_keyword_it_is_about(kwargs, loc):
    with pytest.raises(InvalidInput) as e:
        Pool(EXITS, **kwargs)
    assert (e.value.loc, e.value.file, e.value.line) == (loc, None, None), str(e.value)


def test_an_error_about_no_setting_has_no_location():
    with pytest.raises(InvalidInput) as e:
        Exit("a", "ftp://gw.example:1")
    assert (e.value.loc, e.value.file, e.value.line) == (None, None, None)


# --- the manual's key lists are exactly what the loader and the core accept ---

EXITS = [Exit("a", "http://gw.example:8000"), Exit("b", "http://gw.example:8001")]


def core_settings(option):
    """The settings a dict option of Pool(...) accepts: the fields of the core's configuration
    object, as its refusal of an unknown key lists them."""
    with pytest.raises(InvalidInput) as e:
        Pool(EXITS, **{option: {"no_such_setting": 1}})
    assert e.value.loc == (option, "no_such_setting")
    return re.fullmatch(rf'{option} has no setting "no_such_setting" \(([\w, ]+)\)', str(e.value)).group(1).split(", ")


def readme_config_block():
    section = CONFIG_PAGE.read_text(encoding="utf-8")
    return section, re.search(r"```toml\n(.*?)```", section, flags=re.S).group(1)


def readme_table_keys(block, header):
    """The keys the exitpool.toml of docs/configuration.md shows under `header`, written or commented out."""
    lines = block.splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(rf"(# ?)?{re.escape(header)}(\s|$)", line))
    keys = []
    for line in lines[start + 1 :]:
        m = re.match(r"(?:# ?)?(\w+)\s*=", line)
        if not m:
            break
        keys.append(m.group(1))
    return keys


def refused_as_unknown(**option):
    try:
        Pool(EXITS, **option)
    except InvalidInput as e:
        return "has no setting" in str(e)
    return False


def test_the_readme_lists_exactly_the_health_settings_the_core_accepts():
    section, _ = readme_config_block()
    listed = section[section.index("Every key of `[health]`") :]
    listed = re.findall(r"`(\w+)`", listed[: listed.index("\n- ")])
    accepted = core_settings("health")
    assert len(accepted) >= 20 and sorted(listed) == sorted(accepted)
    # And the defaults table of "Health", which that list points to.
    health = HEALTH_PAGE.read_text(encoding="utf-8").split("\n## ", 1)[0]  # up to "Probes"
    rows = re.findall(r"^\| (`\w+`(?:, `\w+`)*) \|", health, flags=re.M)
    assert sorted(re.findall(r"`(\w+)`", " ".join(rows))) == sorted(accepted)
    # The binding really takes each (and nothing else), and so does a [health] table.
    assert not [k for k in accepted if refused_as_unknown(health={k: 1})]
    assert refused_as_unknown(health={"consecutve": 1})


def test_the_readme_shows_exactly_the_warmup_settings_the_core_accepts(tmp_path):
    _, block = readme_config_block()
    shown = readme_table_keys(block, "[warmup]")
    accepted = core_settings("warmup")
    assert len(accepted) >= 3 and shown == accepted
    assert not [k for k in accepted if refused_as_unknown(warmup={k: 86400})]
    assert refused_as_unknown(warmup={"steep": 1})


def test_the_readme_shows_exactly_the_exit_fields_the_loader_accepts(tmp_path):
    _, block = readme_config_block()
    shown = readme_table_keys(block, "[[exit]]")
    # Exit(exit_id, proxy, *, ip, capacity, tags): the table's id is the exit_id.
    keywords = re.findall(r"(\w+)=", Exit.__text_signature__)
    # The fields the core's [[exit]] table takes, as its refusal of an unknown key lists them.
    with pytest.raises(InvalidInput) as e:
        Pool.from_config(write(tmp_path, '[[exit]]\nproxy = "http://gw.example:1"\nno_such_field = 1\n'))
    accepted = re.search(r"unknown key \(the keys are ([\w, ]+)\)", str(e.value)).group(1).split(", ")
    assert sorted(shown) == sorted(accepted) == sorted(["id", "proxy", *keywords])
    table = {"id": '"x"', "proxy": '"http://gw.example:1"', "ip": '"10.0.0.1"', "capacity": "2", "tags": '{ a = "b" }'}
    path = write(tmp_path, "[[exit]]\n" + "".join(f"{k} = {table[k]}\n" for k in shown))
    assert summary(Pool.from_config(path).exits) == [("x", "http://gw.example:1", "10.0.0.1", 2, {"a": "b"})]


def test_the_readme_config_changes_no_default(tmp_path):
    # "every option, with its default": copying the block as it is must turn nothing on or change
    # any default of Pool(...).
    _, block = readme_config_block()
    write(tmp_path, "gw.example:8000\n", "proxies.txt")
    seen = []

    def spy(exits, **options):
        seen.append(options)
        return Pool(exits, **options)

    pool = _from_config(spy, write(tmp_path, block))
    options = {k: v for k, v in seen[-1].items() if k != "health"}  # [health] shows a few, "for example"
    defaults = {k: eval(v) for k, v in re.findall(r'(\w+)=("[^"]*"|[^,)]+)', Pool.__text_signature__)}
    defaults["replicas"] = exitpool.DEFAULT_REPLICAS
    assert options == {k: defaults[k] for k in options}
    assert leased_ids(pool, 3, key="account-1")  # a key's second lease is not held back by warm-up


def test_a_key_a_table_header_defines_implicitly_is_named_at_the_header(tmp_path):
    # `[exit.tags]` defines `exit` as a table on its own line (found by fuzzing: the error used
    # to point at the first key under the header instead).
    write(tmp_path, "gw.example:8000\n", "proxies.txt")
    path = write(tmp_path, 'exits_file = "proxies.txt"\n\n[exit.tags]\na = "b"\n')
    with pytest.raises(InvalidInput, match=rf"^{re.escape(str(path))}:3: exit: must be \[\[exit\]\] tables"):
        Pool.from_config(path)


# --- sizes and integers: the error names the right key (issue 13) ---


@pytest.mark.parametrize(
    ("text", "key", "line", "message"),
    [
        ("replicas = 18446744073709551616", "replicas", 2, "18446744073709551616 is outside 1..=100000"),
        ("replicas = 1000000", "replicas", 2, "1000000 is outside 1..=100000"),
        ("max_leases = 18446744073709551616", "max_leases", 2, "18446744073709551616 is outside 1..=4294967295"),
        ("max_leases = 4294967296", "max_leases", 2, "4294967296 is outside 1..=4294967295"),
        ("[health]\nwindow = 18446744073709551616", "health.window", 3, "18446744073709551616 is outside 0..=4294967295"),
        # The ring these exits (capacities 1 and 2) would need at 100,000 replicas fits; at a
        # capacity of 10,000 it would not: the blame goes to replicas, with every figure.
        (
            'replicas = 100000\n[[exit]]\nproxy = "http://gw.example:1"\ncapacity = 10000',
            "replicas",
            2,
            "the ring would hold 1000300000 points (3 exits, capacity total 10003, times replicas 100000)",
        ),
    ],
)
def test_sizes_and_integers_are_blamed_on_their_key(tmp_path, text, key, line, message):
    path = config(tmp_path, text + "\n")
    with pytest.raises(InvalidInput) as e:
        Pool.from_config(path)
    assert str(e.value).startswith(f"{path}:{line}: {key}: {message}"), str(e.value)
    assert PASSWORD not in str(e.value)


def test_a_proxy_line_pasted_as_exits_file_is_masked_in_the_path_read_as(tmp_path):
    # Found by the config fuzzer: the path "read as" showed the password the name had masked.
    path = write(tmp_path, 'exits_file = "gw.example:8000:user:Pl4ntedS3cret"\n')
    with pytest.raises(InvalidInput) as e:
        Pool.from_config(path)
    assert "Pl4ntedS3cret" not in str(e.value)
    assert "does not exist (read as '" in str(e.value) and e.value.loc == ("exits_file",)


# --- [[gateway]] tables ---

GATEWAY = f"""\
[[exit]]
id = "dc-1"
proxy = "http://10.0.0.7:3128"

[[gateway]]
id = "resi"
proxy = "http://customer-c1:{PASSWORD}@gw.provider.example:7777"
slots = 3
username = "{{user}}-cc-{{country}}-session-{{session}}"
password = "{{password}}"
lifetime = 600
margin = 30
capacity = 2
tags = {{ country = "de" }}
rebind = true
session_alphabet = "lower"
session_length = 12
"""


def test_a_gateway_table_takes_every_keyword_of_gateway(tmp_path):
    seen = []

    def spy(exits, **options):
        seen.append(exits)
        return "built"

    _from_config(spy, config(tmp_path, GATEWAY))
    members = seen[-1]
    assert [type(m).__name__ for m in members] == ["Exit", "Exit", "Exit", "Gateway"]
    g = members[-1]
    expected = exitpool.Gateway(
        "resi",
        f"http://customer-c1:{PASSWORD}@gw.provider.example:7777",
        slots=3,
        username="{user}-cc-{country}-session-{session}",
        password="{password}",
        lifetime=600,
        margin=30,
        capacity=2,
        tags={"country": "de"},
        rebind=True,
        session_alphabet="lower",
        session_length=12,
    )
    attrs = [
        "gateway_id",
        "masked_proxy",
        "slots",
        "lifetime",
        "margin",
        "capacity",
        "tags",
        "preset",
        "rebind",
        "session_alphabet",
        "session_length",
    ]
    assert [getattr(g, a) for a in attrs] == [getattr(expected, a) for a in attrs]
    assert [e.proxy for e in g.exits(at=1.7e9)] == [e.proxy for e in expected.exits(at=1.7e9)]
    assert PASSWORD not in repr(g)
    preset = '[[gateway]]\nid = "ox"\nproxy = "http://c:pw@pr.oxylabs.io:7777"\nslots = 2\npreset = "oxylabs"\n'
    _from_config(spy, config(tmp_path, preset, exits=False))
    assert (seen[-1][0].preset, seen[-1][0].lifetime) == ("oxylabs", 600.0)


def test_a_gateway_from_a_file_leases_and_rotates_as_in_code(tmp_path):
    clock = ManualClock(1_000.0)
    pool = _from_config(Pool, config(tmp_path, GATEWAY.replace("rebind = true", "rebind = false")), clock=clock)
    resi = pool.subset(country="de")
    assert sorted(e.exit_id for e in resi.exits) == ["resi-0", "resi-1", "resi-2"]
    with resi.lease(key="acct-1") as lease:
        first = lease.exit_id
    clock.advance(600)
    with pytest.raises(exitpool.SessionExitLost, match="gateway session expired"):
        resi.lease(key="acct-1").__enter__()
    with resi.lease(key="acct-1") as lease:
        assert lease.exit_id == first


BAD_GATEWAYS = [
    ("slots = 3", "slots = 0", "gateway[0].slots", 8, "slots 0 is outside 1..=100000"),
    ("margin = 30", "margin = 600", "gateway[0].margin", 12, "margin 600 must be"),
    ("lifetime = 600", "lifetime = 0.5", "gateway[0].lifetime", 11, "lifetime 0.5 must be"),
    ("capacity = 2", "capacity = 0", "gateway[0].capacity", 13, "capacity 0 is outside"),
    ("capacity = 2", "capacity = 2.5", "gateway[0].capacity", 13, "must be a whole number, got 2.5"),
    ("rebind = true", 'rebind = "yes"', "gateway[0].rebind", 15, 'must be true or false, got the string "yes"'),
    ("session_length = 12", "session_length = 99", "gateway[0].session_length", 17, "session_length 99 is outside"),
    ('session_alphabet = "lower"', 'session_alphabet = "hex"', "gateway[0].session_alphabet", 16, 'session_alphabet "hex"'),
    ("-session-{session}", "-{city}-{session}", "gateway[0].username", 9, "names the tag {city}"),
    ('password = "{password}"', f'password = "{PASSWORD}_{{bad name}}"', "gateway[0].password", 10, "unknown placeholder"),
    ('password = "{password}"', 'preset = "nope"', "gateway[0].preset", 10, 'preset "nope" is not one of'),
    ("gw.provider.example:7777", "gw.provider.example:99999", "gateway[0].proxy", 7, "[secure]"),
    ("slots = 3", "slts = 3", "gateway[0].slts", 8, "unknown key"),
    ('id = "resi"\n', "", "gateway[0]", 5, "needs an id and a proxy"),
    (
        "session_length = 12\n",
        'session_length = 12\n[[gateway]]\nid = "resi"\nproxy = "http://u:p@10.0.0.8:1"\nslots = 1\n',
        "gateway[1]",
        18,
        'duplicate gateway id "resi" (also at gateway[0])',
    ),
    ('id = "resi"', 'id = "dc"', "gateway[0]", 5, 'duplicate exit id "dc-1" (gateway[0], slot 1 of gateway "dc"; also at exit[0])'),
]


@pytest.mark.parametrize(("old", "new", "key", "line", "fragment"), BAD_GATEWAYS, ids=[b[2] + ":" + b[4] for b in BAD_GATEWAYS])
def test_a_bad_gateway_value_names_its_key_and_line_with_the_password_masked(tmp_path, old, new, key, line, fragment):
    assert old in GATEWAY
    path = config(tmp_path, GATEWAY.replace(old, new, 1), exits=False)
    with pytest.raises(InvalidInput) as e:
        Pool.from_config(path)
    message = str(e.value)
    assert message.startswith(f"{path}:{line}: {key}: "), message
    assert fragment in message and PASSWORD not in message, message
    assert (e.value.file, e.value.line) == (str(path), line)


def test_a_gateway_slot_id_taken_in_the_proxy_list_names_both(tmp_path):
    write(tmp_path, f"resi-1 http://u:{PASSWORD}@10.0.0.9:1\n", "proxies.txt")
    path = write(tmp_path, 'exits_file = "proxies.txt"\n' + GATEWAY)
    with pytest.raises(InvalidInput) as e:
        Pool.from_config(path)
    assert str(e.value) == f'{path}:6: gateway[0]: duplicate exit id "resi-1" (gateway[0], slot 1 of gateway "resi"; also at exits_file)'
