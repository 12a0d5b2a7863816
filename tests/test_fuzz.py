"""A time-bounded run of each fuzzer in fuzz/ (atheris): nothing but InvalidInput escapes the
proxy-list parser, `Exit(...)` or `Pool.from_config`, no input hangs, and a password planted in
the inputs never shows in an error, a repr or an exit id. Every run starts from the seeds
(regressions included) and then explores with a random seed, printed and named in the failure
message so that a finding can be replayed (EXITPOOL_FUZZ_SEED=N). The longer runs are
documented in the manual (docs/fuzzing.md)."""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import atheris  # noqa: F401  (the test extra installs it: without it this file fails, never skips)
import pytest

FUZZ = Path(__file__).resolve().parent.parent / "fuzz"
# About 20 s of fuzzing per fuzzer keeps this file under a minute; EXITPOOL_FUZZ_SECONDS
# changes it (a longer local run).
SECONDS = int(os.environ.get("EXITPOOL_FUZZ_SECONDS", "20"))


@pytest.mark.parametrize(("fuzzer", "seeds"), [("fuzz_proxy_list.py", "proxy_list"), ("fuzz_config.py", "config")])
def test_a_bounded_fuzzing_run_finds_nothing(tmp_path, fuzzer, seeds):
    seed = int(os.environ.get("EXITPOOL_FUZZ_SEED") or random.SystemRandom().randrange(1, 2**31))
    print(f"{fuzzer}: -seed={seed} -max_total_time={SECONDS}")
    corpus = tmp_path / "corpus"
    shutil.copytree(FUZZ / "seeds" / seeds, corpus)  # libFuzzer adds to its corpus: not the repo's
    # -timeout bounds one input (a hang is a finding); -max_total_time the whole run, checked
    # between inputs, so the worst case is their sum.
    command = [
        sys.executable,
        str(FUZZ / fuzzer),
        f"-seed={seed}",
        f"-max_total_time={SECONDS}",
        "-max_len=4096",
        "-timeout=10",
        "-rss_limit_mb=2048",
        f"-artifact_prefix={tmp_path}/",
        str(corpus),
    ]
    r = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=SECONDS + 120)
    found = sorted(tmp_path.glob("crash-*")) + sorted(tmp_path.glob("timeout-*")) + sorted(tmp_path.glob("oom-*"))
    replay = f"-seed={seed}: replay the run with EXITPOOL_FUZZ_SEED={seed} python -m pytest tests/test_fuzz.py -k {seeds}" + "".join(
        f"\nor the input with: {sys.executable} {FUZZ / fuzzer} {p}" for p in found
    )
    assert r.returncode == 0 and not found, f"{replay}\n{r.stderr[-6000:]}"
    done = re.search(r"Done (\d+) runs in (\d+) second", r.stderr)
    assert done, f"{replay}\n{r.stderr[-3000:]}"
    # Past the seeds: it explored (a few thousand inputs a second here), for about the time given.
    seeds_count = len(list((FUZZ / "seeds" / seeds).iterdir()))
    assert int(done.group(1)) > seeds_count + 1000, f"{replay}\n{r.stderr[-3000:]}"
    assert int(done.group(2)) >= SECONDS - 1, f"{replay}\n{r.stderr[-3000:]}"


# A regression seed is only worth its bytes if it still builds the input it was made for: the
# structured inputs (first byte 0) are decoded by the harness's own generator, which may change.
REGRESSION = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, sys.argv[1])
    import fuzz_proxy_list as harness
    from exitpool import Exit
    seed = open(sys.argv[2], "rb").read()
    fdp = harness.atheris.FuzzedDataProvider(seed[1:])
    n = fdp.ConsumeIntInRange(1, harness.MAX_LINES)
    print(repr([harness._planted_line(fdp, []) for _ in range(n)]))
    harness.TestOneInput(seed)  # today's parser: refused, the password masked in the message
    # The parser as it was: the first token taken as the exit id, password and all.
    harness.load_exits = lambda lines: [Exit(line.split()[0], "http://" + line.split()[1]) for line in lines]
    try:
        harness.TestOneInput(seed)
    except harness.CheckFailed as e:
        print("flagged:", e)
    """
)


def test_the_ipv6_regression_seed_builds_its_line_and_the_checks_flag_it(tmp_path):
    r = subprocess.run(
        [sys.executable, "-c", REGRESSION, str(FUZZ), str(FUZZ / "seeds" / "proxy_list" / "ipv6-provider-line-as-id.bin")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    lines, flagged = r.stdout.strip().splitlines()[-2:]
    assert lines == repr(["[::1]:8000:user:Pl4ntedS3cret gw.example:8001"])
    assert flagged.startswith("flagged: the planted password appears in a rendering of a parsed exit"), flagged


# Issue 13: a password with a space (or another separator) must leave no piece of 4 characters
# or more in any message. The harness's `\x03` inputs build such lines; with the parser's old
# message (every token masked on its own), the check flags them.
SPACED = textwrap.dedent(
    """
    import random, sys
    sys.path.insert(0, sys.argv[1])
    import fuzz_proxy_list as harness
    from exitpool import InvalidInput
    from exitpool._core import _mask_raw
    rng = random.Random(13)
    inputs = [b"\\x03" + rng.randbytes(48) for _ in range(300)]
    for data in inputs:
        harness.TestOneInput(data)  # today's parser: nothing flagged
    def old(lines):
        tokens = lines[0].split()
        if len(tokens) > 1:
            raise InvalidInput(f'two proxies on one line: "{_mask_raw(tokens[0])}" and "{_mask_raw(tokens[1])}"')
        return []
    harness.load_exits = old
    flagged = 0
    for data in inputs:
        try:
            harness.TestOneInput(data)
        except harness.CheckFailed:
            flagged += 1
    print(flagged)
    """
)


def test_the_spaced_password_inputs_pass_today_and_flag_the_old_message(tmp_path):
    r = subprocess.run([sys.executable, "-c", SPACED, str(FUZZ)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert int(r.stdout.strip().splitlines()[-1]) >= 10, r.stdout
