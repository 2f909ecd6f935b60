"""The page in a real headless Chromium: it renders, cells open, filters and the diff work, no errors."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from anydevice.compat_matrix.cli import main
from anydevice.compat_matrix.merge import NOT_APPLICABLE
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

    def empty_sections(self) -> list[str]:
        """Sections (and h3 subsections) whose text is no more than their heading."""
        return list(
            self.page.evaluate(
                r"""() => {
                  const bad = [];
                  document.querySelectorAll('section').forEach(s => {
                    const h = s.querySelector('h2');
                    const text = s.innerText.trim();
                    if (!h || s.hidden || text.length <= h.innerText.trim().length + 5) bad.push(s.id || text);
                  });
                  document.querySelectorAll('section h3').forEach(h => {
                    const next = h.nextElementSibling;
                    if (!next || next.tagName === 'H3' || !next.innerText.trim() || /^none\.?$/i.test(next.innerText.trim()))
                      bad.push(h.innerText);
                  });
                  return bad;
                }"""
            )
        )

    def grid(self) -> dict[str, dict[str, str]]:
        """The summary grid: "column-id label" -> group -> the cell's text (symbol, status in words, counts)."""
        return dict(
            self.page.evaluate(
                """() => {
                  const groups = Array.from(document.querySelectorAll('#summary-grid thead th')).slice(1).map(t => t.innerText);
                  const out = {};
                  document.querySelectorAll('#summary-grid tbody tr').forEach(tr => {
                    const label = tr.getAttribute('data-column') + ' ' + tr.querySelector('th a').innerText;
                    out[label] = {};
                    tr.querySelectorAll('td.grid').forEach((td, i) => { out[label][groups[i]] = td.innerText; });
                  });
                  return out;
                }"""
            )
        )

    def column_counts(self) -> list[str]:
        return list(self.page.locator("#matrix > thead th.col .counts").all_inner_texts())


COUNT = re.compile(r"(\d+) (pass|fail|skip|partial|fake \(simulated\)|harness error|untested|disagree|pass \(CPU fallback\))")


def _check_summary_and_counts(view: Page, probes: int, columns: int) -> None:
    page = view.page
    grid = view.grid()
    assert len(grid) == columns
    for label, cells in grid.items():
        assert cells, label
        for group, text in cells.items():
            if text.endswith(NOT_APPLICABLE):  # an export column's group of device probes, or the reverse
                continue
            # the worst status in words (beside its symbol and colour) and how many work
            assert re.search(r"^. (pass|fail|skip|partial|fake \(simulated\)|harness error|untested|disagree)", text), text
            assert re.search(r"\d+/\d+ work", text), (label, group, text)
    # colour as well as words: a failing group cell is not painted like a passing one
    fail = page.locator("#summary-grid td.grid.st-fail").first
    ok = page.locator("#summary-grid td.grid.st-pass, #summary-grid td.grid.st-fake").first
    colour = "el => getComputedStyle(el).backgroundColor"
    assert fail.evaluate(colour) != ok.evaluate(colour)
    # every grid cell links down to its group's rows
    hrefs = page.locator("#summary-grid td.grid a").evaluate_all("els => els.map(a => a.getAttribute('href'))")
    assert hrefs and all(h.startswith("#group-") for h in hrefs)
    first = hrefs[0]
    page.locator(f'#summary-grid td.grid a[href="{first}"]').first.click()
    assert page.evaluate("location.hash") == first
    # per-column counts in the header, adding up to the probes
    counts = view.column_counts()
    assert len(counts) == columns
    not_run = page.evaluate(
        """(text) => {
          const out = [];
          document.querySelectorAll('#matrix tr.probe-row').forEach(tr => {
            tr.querySelectorAll('td.cell').forEach((td, i) => {
              out[i] = (out[i] || 0) + (td.innerText.includes(text) ? 1 : 0);
            });
          });
          return out;
        }""",
        NOT_APPLICABLE,
    )
    for text, skipped in zip(counts, not_run, strict=True):
        found = COUNT.findall(text)
        assert found and sum(int(n) for n, _ in found) == probes - skipped, (text, skipped)


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

    # summary grid, versions table, per-column counts, no empty section
    _check_summary_and_counts(view, probes=7, columns=7)
    versions = page.locator("#versions-table tbody tr")
    ran = {r.locator("th").inner_text(): r.locator("td").nth(3).inner_text() for r in versions.all()}  # "ran here"
    assert "torch 2.13.0" in ran["cpu"] and "torch-neuronx" in ran["neuron"]
    by_torch = {r.locator("th").inner_text(): [c.inner_text() for c in r.locator("td[class^=v-]").all()] for r in versions.all()}
    assert by_torch["cpu"][4] == "tested" and len(by_torch["cpu"]) == 7  # torch 2.9 ... 2.15; 2.13 ran here
    assert view.empty_sections() == []

    assert view.broken_links() == []
    assert view.dialogs == []
    assert view.errors == []


def test_single_run_page_has_no_empty_section(browser: Any, tmp_path: Path) -> None:
    assert main(["render", str(FIXTURES / "cpu-new.json"), "--out", str(tmp_path)]) == 0
    view = Page(browser, tmp_path / "index.html")
    assert view.page.locator("#diff").count() == 0  # one run: nothing to compare, no section
    assert view.empty_sections() == []
    _check_summary_and_counts(view, probes=view.page.locator("#matrix tr.probe-row").count(), columns=1)
    assert view.errors == [] and view.broken_links() == []


def test_committed_page_in_chromium(browser: Any) -> None:
    view = Page(browser, REPO / "docs" / "compat" / "index.html")
    page = view.page
    assert page.locator("#matrix tr.probe-row").count() >= 50
    first = page.locator("#probe-matmul td.cell").first
    first.locator("summary").click()
    assert "Reproduce:" in first.inner_text()
    page.select_option("#filter-shim", "compilation")
    assert 1 <= page.locator("#matrix tr.probe-row:visible").count() < 20
    assert page.locator("#matrix tr.group-row:visible").count() == 1
    page.select_option("#filter-shim", "all")
    columns = page.locator("#matrix > thead th.col").count()
    _check_summary_and_counts(view, probes=page.locator("#matrix tr.probe-row").count(), columns=columns)
    grid = view.grid()
    neuron = next(cells for label, cells in grid.items() if " neuron" in label)
    assert "from the simulation" in neuron["collectives"]  # the simulated column says whose failure it is
    versions = {r.locator("th").inner_text(): r.inner_text() for r in page.locator("#versions-table tbody tr").all()}
    assert {"cpu", "cuda", "neuron", "tpu", "xla"} <= set(versions)
    assert "torch_xla 2.9.0" in versions["xla"] and "not run here" in versions["cuda"]
    assert page.locator("#diff").count() == 0
    assert view.empty_sections() == []
    assert view.broken_links() == []
    assert view.errors == []
