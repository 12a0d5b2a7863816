"""Packaging: the sdist holds everything a build needs, its build-system is complete (pip builds
its metadata in an isolated environment), the stubs match the native module (mypy.stubtest),
and the wheel built from the sdist installs and works on the oldest CPython this machine has.

pip builds the wheel from the sdist as a user's `pip install exitpool-*.tar.gz` would (build
isolation and all), once for the module, with a dev profile so that the compile takes about a
minute instead of a release build's several. That wheel is installed with pip into a fresh
venv of the running Python and into one of the oldest CPython here (it has no dependency: the
core reads TOML), and each runs the smoke test: leases, and
Pool.from_config on a small TOML file."""

from __future__ import annotations

import email
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import pytest

import exitpool

try:
    import tomllib
except ImportError:  # Python < 3.11
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def tool(name):
    """A console script of the test environment (the test extra installs maturin and mypy)."""
    path = BIN / name
    assert path.exists(), f"{name} is not installed beside {sys.executable}: pip install '.[test]'"
    return str(path)


@pytest.fixture(scope="module")
def sdist(tmp_path_factory):
    out = tmp_path_factory.mktemp("sdist")
    r = subprocess.run([tool("maturin"), "sdist", "-o", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    (path,) = out.glob("exitpool-*.tar.gz")
    return path


@pytest.fixture(scope="module")
def wheel(sdist, tmp_path_factory):
    """The wheel pip builds from the sdist, shared by the install tests."""
    out = tmp_path_factory.mktemp("wheel")
    # A dev build (the release profile's fat LTO takes minutes on 2 cores); its own target
    # directory inside the repository, so that a second run reuses the compile.
    target = ROOT / "target" / "sdist-check"
    # The sdist's files carry the fixed timestamp of a reproducible archive, older than any
    # earlier build: cargo would take exitpool's own last build for fresh and package stale
    # code. Its fingerprints go, so it is compiled again; the dependencies' stay reused.
    for stale in target.glob("*/.fingerprint/exitpool-*"):
        shutil.rmtree(stale)
    env = dict(os.environ, MATURIN_PEP517_ARGS="--profile dev", CARGO_TARGET_DIR=str(target))
    env.pop("VIRTUAL_ENV", None)
    r = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(out), str(sdist)],
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert r.returncode == 0, r.stderr[-4000:]
    (path,) = out.glob("exitpool-*.whl")
    # abi3: one wheel for every CPython from 3.10.
    assert re.search(r"-cp310-abi3-", path.name), path.name
    return path


def members(sdist):
    with tarfile.open(sdist) as tar:
        names = tar.getnames()
    top = names[0].split("/")[0]
    return top, {n[len(top) + 1 :] for n in names if n.startswith(top + "/")}


def test_the_sdist_holds_what_a_build_needs(sdist):
    top, files = members(sdist)
    assert top == f"exitpool-{exitpool.__version__}"
    needed = {
        "Cargo.toml",
        "Cargo.lock",
        "pyproject.toml",
        "README.md",
        "PKG-INFO",
        "python/exitpool/_core.pyi",
        "python/exitpool/py.typed",
    }
    # Every source file of the crate and of the package, as the working tree has them.
    for pattern in ("src/**/*.rs", "src/**/*.lua", "python/exitpool/*.py"):
        needed |= {str(Path(p).relative_to(ROOT)) for p in glob.glob(str(ROOT / pattern), recursive=True)}
    assert "src/lib.rs" in needed and "python/exitpool/_config.py" in needed
    assert needed <= files, sorted(needed - files)
    # Nothing built: no compiled module, nothing from target/.
    assert not [f for f in files if f.endswith((".so", ".pyd", ".dll")) or f.startswith("target/")]


def test_the_sdist_metadata(sdist):
    top, _ = members(sdist)
    with tarfile.open(sdist) as tar:
        meta = email.message_from_bytes(tar.extractfile(f"{top}/PKG-INFO").read())
    assert meta["Name"] == "exitpool"
    assert meta["Version"] == exitpool.__version__
    assert meta["Requires-Python"] == ">=3.10"


def test_the_build_system_is_complete(sdist, tmp_path):
    # pip builds the metadata in an isolated environment holding only what
    # [build-system] requires: if the backend or a build requirement were missing, this fails
    # (and users would need --no-build-isolation).
    report = tmp_path / "report.json"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--no-deps",
            "--ignore-installed",
            "--quiet",
            "--report",
            str(report),
            str(sdist),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    (item,) = json.loads(report.read_text())["install"]
    assert (item["metadata"]["name"], item["metadata"]["version"]) == ("exitpool", exitpool.__version__)


def test_the_package_needs_no_toml_library():
    # Pool.from_config's TOML is read by the Rust core, on every Python: no tomli on 3.10.
    assert tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"] == []


def test_the_stubs_match_the_native_module():
    r = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "exitpool._core", "--allowlist", str(ROOT / "tests" / "stubtest-allowlist.txt")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr


def interpreters():
    """The CPython interpreters this machine has, by version (one per minor version)."""
    found = {}
    candidates = [sys.executable] + glob.glob("/usr/bin/python3.*") + glob.glob("/usr/local/bin/python3.*")
    candidates += glob.glob(os.path.expanduser("~/.pyenv/versions/*/bin/python3"))
    for exe in candidates:
        if not re.search(r"python3(\.\d+)?$", exe) or not os.access(exe, os.X_OK):
            continue
        r = subprocess.run(
            [exe, "-c", "import sys, platform; print(platform.python_implementation(), *sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if r.returncode == 0:
            impl, major, minor = r.stdout.split()
            if impl == "CPython":
                found.setdefault((int(major), int(minor)), exe)
    return found


SMOKE = textwrap.dedent(
    """
    import asyncio, sys
    import exitpool
    from exitpool import Exit, Pool, load_exits
    pool = Pool(load_exits(["gw.example:8000:user:pw", "sess-b http://u:pw@gw.example:8001"]), strategy="round_robin")
    with pool.lease("account-1", site="shop.example") as lease:
        lease.report(status=200, latency=0.1)
    async def main():
        async with pool.lease() as lease:
            return lease.exit_id
    assert asyncio.run(main()) in ("user@gw.example:8000", "sess-b")
    assert "pw" not in repr(pool.exits)
    # Pool.from_config reads TOML with tomllib from 3.11 and tomli (a dependency) before.
    with open("proxies.txt", "w") as f:
        f.write("sess-b http://u:pw@gw.example:8001\\n")
    with open("exitpool.toml", "w") as f:
        f.write('exits_file = "proxies.txt"\\nstrategy = "lru"\\n[health]\\nconsecutive = 3\\n'
                '[[exit]]\\nproxy = "http://u:pw@gw.example:8000"\\n')
    config = Pool.from_config("exitpool.toml")
    with config.lease("account-1") as lease:
        assert lease.exit_id in ("sess-b", "u@gw.example:8000")
    print(repr(config))
    print(".".join(map(str, sys.version_info[:2])), exitpool.__version__, exitpool.__file__)
    """
)


def smoke_in_a_fresh_venv(python, wheel, tmp_path):
    """Installs the wheel with pip into a fresh venv of `python`, runs SMOKE there; returns
    (the pool it configured, the Python version, the package version) as it printed them."""
    venv = tmp_path / "venv"
    subprocess.run([python, "-m", "venv", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    env = dict(os.environ, PYTHONNOUSERSITE="1")
    for name in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"):
        env.pop(name, None)
    # Dependencies (tomli before 3.11) come from the package index, as a user's would.
    r = subprocess.run([str(py), "-m", "pip", "install", "--quiet", str(wheel)], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    r = subprocess.run([str(py), "-s", "-c", SMOKE], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-4000:]
    config, versions_line = r.stdout.strip().splitlines()
    version, package, where = versions_line.split()
    # It is the wheel's package, in the venv: not the checkout's.
    assert where.startswith(str(venv)), where
    return config, version, package


def test_the_sdist_installs_into_a_fresh_venv_and_works(wheel, tmp_path):
    config, version, package = smoke_in_a_fresh_venv(sys.executable, wheel, tmp_path)
    assert config == "Pool(2 exits, strategy='lru')"
    assert (version, package) == (f"{sys.version_info[0]}.{sys.version_info[1]}", exitpool.__version__)


def test_the_wheel_works_on_the_oldest_cpython_here(wheel, tmp_path):
    versions = interpreters()
    oldest = min(v for v in versions if v >= (3, 10))
    if oldest == tuple(sys.version_info[:2]):
        print(f"the oldest CPython here is the running one ({oldest[0]}.{oldest[1]}): checked in a fresh venv of it")
    else:
        print(f"the oldest CPython here: {oldest[0]}.{oldest[1]} ({versions[oldest]})")
    config, version, package = smoke_in_a_fresh_venv(versions[oldest], wheel, tmp_path)
    assert config == "Pool(2 exits, strategy='lru')"
    assert (version, package) == (f"{oldest[0]}.{oldest[1]}", exitpool.__version__)
