"""Claimed vs observed: plugins' DeviceSpec.unsupported against probe statuses, in the runner and on the page."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from html import unescape

import pytest

from anydevice.compat_matrix import catalog, claims
from anydevice.compat_matrix.page import build_site
from anydevice.compat_matrix.runner import _assemble, _State
from anydevice.compat_matrix.schema import Claim, Status
from anydevice.runtime.registry import get_registry
from tests.compat_matrix.builders import FIXTURES, result

UNSUPPORTED = Claim(supported=False, reason="not offered here.")


@pytest.mark.parametrize(
    ("status", "claim", "contradiction"),
    [
        (Status.FAIL, UNSUPPORTED, None),
        (Status.SKIP, UNSUPPORTED, None),
        (Status.PASS, UNSUPPORTED, "claimed unsupported, but it works"),
        (Status.FAKE, UNSUPPORTED, "claimed unsupported, but it works"),
        (Status.FAIL, claims.SUPPORTED, "claimed supported, but it fails"),
        (Status.PARTIAL, claims.SUPPORTED, "claimed supported, but it works only in part"),
        (Status.SKIP, claims.SUPPORTED, None),
        (Status.HARNESS_ERROR, claims.SUPPORTED, None),
        (Status.FAIL, None, None),
    ],
)
def test_mismatch_rules(status: Status, claim: Claim | None, contradiction: str | None) -> None:
    assert claims.mismatch(result("matmul", status, expected=claim)) == contradiction


def test_unsupported_claim_needs_a_reason() -> None:
    with pytest.raises(ValueError, match="needs a reason"):
        Claim(supported=False)


def test_runner_sets_the_plugins_claim_on_every_probe() -> None:
    probes = catalog.select(catalog.all_probes([]), "matmul,conv2d")
    state = _State(backend={"name": "cpu", "unsupported": {"conv2d": "no convolutions here."}})
    state.results = {"sanity": result("sanity", shim="sanity"), "matmul": result("matmul")}  # conv2d lost: harness error
    run = _assemble(state, probes, datetime.now(timezone.utc), [], 0, None)
    by_name = {r.probe: r for r in run.results}
    assert by_name["sanity"].expected == by_name["matmul"].expected == claims.SUPPORTED
    assert by_name["conv2d"].status is Status.HARNESS_ERROR
    assert by_name["conv2d"].expected == Claim(supported=False, reason="no convolutions here.")


def test_no_claims_without_a_selected_device() -> None:
    probes = catalog.select(catalog.all_probes([]), "matmul")
    state = _State(setup_error={"verdict": "skip", "message": "no chip"})
    run = _assemble(state, probes, datetime.now(timezone.utc), [], 0, None)
    assert run.results and all(r.expected is None for r in run.results)


def test_plugins_declare_only_probes_that_exist() -> None:
    known = {p.name for p in catalog.all_probes([])}
    registry = get_registry()
    declared = {name: dict(registry.get(name).spec.unsupported) for name in registry.names()}
    assert declared["xla"].keys() == {"fsdp_step", "pin_memory", "compile_dynamic_shapes", "adamw_fused_step"}
    assert declared["mps"].keys() == {"fsdp_step"}
    for name, table in declared.items():
        assert set(table) <= known, f"{name} declares unknown probes: {set(table) - known}"
        assert all(reason.strip() for reason in table.values()), name


def _cell(html: str, probe: str) -> tuple[str, str]:
    """The page has one column: the cell's summary and evidence as text (tags dropped)."""
    row = re.search(rf'<tr class="probe-row" id="probe-{probe}".*?</details></td>\s*</tr>', html, re.S)
    assert row is not None
    summary, evidence = row.group(0).split('<td class="cell ')[1].split("</summary>")
    text = unescape(re.sub(r"<[^>]+>", "", summary.split("<summary>")[1]))
    return text, " ".join(unescape(re.sub(r"<[^>]+>", " ", evidence)).split())


def test_html_shows_claims_in_words() -> None:
    html = build_site([FIXTURES / "mps-claims.json"]).files["index.html"]
    (fsdp, fsdp_ev), (pinned, pinned_ev), (sdpa, _), (conv, _) = (
        _cell(html, p) for p in ("fsdp_step", "pin_memory", "sdpa", "conv2d")
    )
    # declared unsupported and failing: a match, said in words, no mismatch mark
    assert fsdp == "✘ fail at place (declared unsupported) from the plugin"
    assert "claim vs observed agree" in fsdp_ev
    # declared unsupported but passing: a mismatch, with a symbol and words, not colour alone
    assert pinned == "✔ pass ‼ claimed unsupported"
    assert "claim vs observed ‼ claimed unsupported, but it works" in pinned_ev
    assert "plugin claims unsupported: pinned memory is not offered on mps." in pinned_ev
    assert sdpa == "✘ fail at execute ‼ claimed supported from the device"
    assert conv == "✔ pass"
    assert 'data-statuses="claim-mismatch pass"' in html and 'value="claim-mismatch"' in html
    section = html.split('<section id="claims">')[1].split("</section>")[0]
    assert "Contradicting the plugin (2)" in section and "Declared unsupported (1)" in section


def test_markdown_shows_claims_in_words() -> None:
    markdown = build_site([FIXTURES / "mps-claims.json"]).files["index.md"]
    rows = {m.group(1).replace("\\", ""): m.group(2) for m in re.finditer(r"^\| ([\w\\]+) \| (.*) \|$", markdown, re.M)}
    assert rows["fsdp_step"] == "✘ fail at place (declared unsupported), from the plugin"
    assert rows["pin_memory"] == "✔ pass ‼ claimed unsupported"
    assert rows["sdpa"] == "✘ fail at execute ‼ claimed supported, from the device"
    assert rows["conv2d"] == "✔ pass"
    section = markdown.split("## Claimed vs observed")[1].split("\n## ")[0]
    assert "### Contradicting the plugin (2)" in section and "### Declared unsupported (1)" in section
    assert "pin\\_memory on c1 (mps-claims.json): ‼ claimed unsupported, but it works; observed ✔ pass" in section
    assert "fsdp\\_step on c1 (mps-claims.json): agrees; observed ✘ fail at place" in section
