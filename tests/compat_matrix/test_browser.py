"""The page in a real headless Chromium: it renders, cells open, filters and the diff work, no errors."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from anydevice.compat_matrix.cli import main
from tests.compat_matrix.builders import FIXTURES

CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
REPO = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs /usr/bin/chromium (apt-get install -y chromium)"),
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as pw:
        instance = pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield instance
        instance.close()


class Page:
    """A page plus everything it complained about."""

    def __init__(self, browser: Any, path: Path) -> None:
        self.page = browser.new_page()
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type in ("error", "warning") else None)
        self.page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        self.page.on("requestfailed", lambda req: self.errors.append(f"request failed: {req.url}"))
        self.page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        self.page.goto(path.resolve().as_uri())

    def broken_links(self) -> list[str]:
        return list(
            self.page.evaluate(
                """() => Array.from(document.querySelectorAll('a[href]')).map(a => a.getAttribute('href'))
                   .filter(h => !h.startsWith('#') || !document.getElementById(decodeURIComponent(h.slice(1))))"""
            )
        )


@pytest.fixture
def fixture_site(tmp_path: Path) -> Path:
    assert main(["render", *map(str, sorted(FIXTURES.glob("*.json"))), "--out", str(tmp_path)]) == 0
    return tmp_path / "index.html"


def test_fixture_page_in_chromium(browser: Any, fixture_site: Path) -> None:
    view = Page(browser, fixture_site)
    page = view.page
    rows = page.locator("#matrix tr.probe-row")
    assert rows.count() == 7
    assert page.locator("#matrix > thead th.col").count() == 7

    # open a cell's evidence
    cell = page.locator("#probe-sdpa td.cell").first
    evidence = cell.locator(".evidence")
    assert not evidence.is_visible()
    cell.locator("summary").click()
    assert evidence.is_visible()
    text = evidence.inner_text()
    assert "Reproduce:" in text and "ANYDEVICE=cpu anydevice matrix probe --only sdpa" in text and "2026-03-01" in text

    # hostile text shows as text and runs nothing
    hostile = page.locator("#probe-matmul td.cell.st-fail")
    hostile.locator("summary").click()
    assert "<script>alert('x')</script>" in hostile.locator(".evidence").inner_text()

    # filters
    page.select_option("#filter-shim", "collectives")
    assert page.locator("#matrix tr.probe-row:visible").count() == 2  # all_reduce, fsdp_step
    assert page.locator("#filter-count").inner_text() == "2 of 7 probes shown"
    page.select_option("#filter-shim", "all")
    page.select_option("#filter-status", "fake")
    visible = page.locator("#matrix tr.probe-row:visible")
    assert visible.count() == 2 and page.locator("#probe-matmul").is_visible() and page.locator("#probe-sanity").is_visible()
    page.select_option("#filter-status", "claim-mismatch")  # mps-claims.json: pin_memory works, sdpa fails
    assert page.locator("#probe-pin_memory").is_visible() and page.locator("#probe-sdpa").is_visible()
    assert page.locator("#matrix tr.probe-row:visible").count() == 2
    page.select_option("#filter-status", "all")
    assert rows.locator("visible=true").count() == 7

    # the diff view between two runs of one device
    options = page.locator("#diff-a option").all_inner_texts()
    old = next(o for o in options if "cpu-old.json" in o)
    new = next(o for o in options if "cpu-new.json" in o)
    page.select_option("#diff-a", label=old)
    page.select_option("#diff-b", label=new)
    result = page.locator("#diff-result").inner_text()
    assert "Newly broken (1)" in result and "sdpa" in result and "Newly working (1)" in result and "conv2d" in result
    page.select_option("#diff-b", index=next(i for i, o in enumerate(options) if "tpu" in o))
    assert "different devices" in page.locator("#diff-result").inner_text()

    assert view.broken_links() == []
    assert view.dialogs == []
    assert view.errors == []


def test_committed_page_in_chromium(browser: Any) -> None:
    view = Page(browser, REPO / "docs" / "compat" / "index.html")
    page = view.page
    assert page.locator("#matrix tr.probe-row").count() >= 50
    first = page.locator("#probe-matmul td.cell").first
    first.locator("summary").click()
    assert "Reproduce:" in first.inner_text()
    page.select_option("#filter-shim", "compilation")
    assert 1 <= page.locator("#matrix tr.probe-row:visible").count() < 20
    assert view.broken_links() == []
    assert view.errors == []
