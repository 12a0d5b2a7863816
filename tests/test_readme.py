"""The README's and the manual's Python examples run as written: per file, in order, in one
namespace. Blocks not meant to run are tagged ```text, never ```python."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
# Every page of the manual, the per-provider pages under docs/presets/ included.
PAGES = sorted(DOCS.rglob("*.md"))


def page_name(page: Path) -> str:
    """The page as mkdocs.yml names it: its path under docs/."""
    return page.relative_to(DOCS).as_posix()


def python_blocks(path: Path) -> list[str]:
    """The file's ```python blocks, each padded with blank lines so that a traceback names
    the line of the page it fails on."""
    text = path.read_text(encoding="utf-8")
    return ["\n" * text.count("\n", 0, m.start(1)) + m.group(1) for m in re.finditer(r"```python\n(.*?)```", text, flags=re.S)]


def run_blocks(path: Path) -> None:
    namespace: dict = {"__name__": path.stem}
    for block in python_blocks(path):
        exec(compile(block, str(path), "exec"), namespace)


def test_readme_python_blocks_run(capsys):
    assert python_blocks(README)
    run_blocks(README)
    assert "sess-" in capsys.readouterr().out


@pytest.mark.parametrize("page", [p for p in PAGES if python_blocks(p)], ids=page_name)
def test_docs_page_python_blocks_run(page):
    run_blocks(page)


def test_docs_examples_cover_the_manual():
    # The pages whose examples the parametrized test runs: the manual's runnable examples
    # did not silently disappear (a block retagged or a page dropped).
    runnable = {page_name(p) for p in PAGES if python_blocks(p)}
    assert {
        "quickstart.md",
        "sessions-and-leases.md",
        "pacing.md",
        "gateways.md",
        "observability.md",
        "configuration.md",
        "clients.md",
        "clients/aiohttp.md",
        "clients/curl_cffi.md",
        "clients/httpx.md",
        "clients/playwright.md",
        "clients/requests.md",
        "scrapy.md",
        "presets/oxylabs.md",
        "presets/thordata.md",
        "presets/geonode.md",
        "presets/pingnetwork.md",
        "presets/iproyal.md",
        "presets/massive.md",
        "presets/massive_isp.md",
    } <= runnable


def test_mkdocs_nav_lists_every_page():
    nav = re.findall(r":\s*(\S+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(encoding="utf-8"), flags=re.M)
    assert sorted(nav) == sorted(page_name(p) for p in PAGES)
