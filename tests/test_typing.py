"""Typing: the package type-checks with mypy (py.typed promises users that its annotations hold),
against the stubs of the native module and of the optional dependencies the test extra installs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "python" / "exitpool"


def test_the_package_type_checks(tmp_path):
    # The cache goes to tmp_path, so that a test run leaves nothing in the repository.
    r = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "mypy-cache"), str(PACKAGE)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr
