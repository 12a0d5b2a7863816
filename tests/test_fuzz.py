"""A bounded run of each fuzzer in fuzz/ (atheris, a fixed number of inputs from the seeds):
nothing but InvalidInput escapes the proxy-list parser, `Exit(...)` or `Pool.from_config`, no
input hangs, and a password planted in the inputs never shows in an error or a repr. The
longer runs are documented in the README ("Fuzzing")."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import atheris  # noqa: F401  (the test extra installs it: without it this file fails, never skips)
import pytest

FUZZ = Path(__file__).resolve().parent.parent / "fuzz"


@pytest.mark.parametrize(
    ("fuzzer", "seeds", "runs"),
    [("fuzz_proxy_list.py", "proxy_list", 4000), ("fuzz_config.py", "config", 1500)],
)
def test_a_bounded_fuzzing_run_finds_nothing(tmp_path, fuzzer, seeds, runs):
    corpus = tmp_path / "corpus"
    shutil.copytree(FUZZ / "seeds" / seeds, corpus)  # libFuzzer adds to its corpus: not the repo's
    r = subprocess.run(
        [sys.executable, str(FUZZ / fuzzer), f"-runs={runs}", "-seed=1", "-max_len=4096", "-timeout=30",
         "-rss_limit_mb=2048", f"-artifact_prefix={tmp_path}/", str(corpus)],
        cwd=tmp_path, capture_output=True, text=True, timeout=900,
    )
    found = sorted(p.name for p in tmp_path.glob("crash-*")) + sorted(p.name for p in tmp_path.glob("timeout-*"))
    assert r.returncode == 0 and not found, f"{found}\n{r.stderr[-6000:]}"
    assert f"Done {runs} runs" in r.stderr
