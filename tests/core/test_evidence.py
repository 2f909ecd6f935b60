"""Evidence on every claim: one vocabulary (anydevice.contract.evidence) in the contract, `list`, capabilities and the matrix."""

from __future__ import annotations

from pathlib import Path

import pytest

from anydevice.compat_matrix.merge import build_matrix, cell_evidence, column_evidence
from anydevice.contract.device_spec import REMOVED_KEYWORDS, Detection, DeviceSpec, spec_problems
from anydevice.contract.evidence import LEVELS, UNKNOWN, Evidence
from anydevice.runtime.registry import builtin_registry

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "compat_matrix" / "results"


def _spec(**kwargs: object) -> DeviceSpec:
    return DeviceSpec(name="mychip", detect=lambda: Detection.ok("here"), load=lambda: None, **kwargs)  # type: ignore[arg-type,return-value]  # load is never called


def test_a_plugin_that_says_nothing_is_unknown_and_not_verified() -> None:
    spec = _spec()
    assert spec.evidence == UNKNOWN and spec.evidence.label() == "unknown"
    assert spec.verified_on_hardware is False


def test_only_a_run_on_the_chip_is_verified_and_every_level_names_its_source() -> None:
    made = [
        Evidence.ran("results/mychip.json", "2026-12-01"),
        Evidence.compiled("libtpu", "0.0.42.1"),
        Evidence.registered("torch_tpu", "0.2.0"),
        Evidence.stand_in("torch_xla on PJRT CPU"),
        Evidence.declared("Google Cloud TPU docs", "2026-11-20"),
        UNKNOWN,
    ]
    assert [e.level for e in made] == list(LEVELS)
    assert [e.verified_on_hardware for e in made] == [True, False, False, False, False, False]
    assert made[1].label() == "compiled by the vendor's compiler, not run (libtpu 0.0.42.1)"
    assert made[0].as_dict() == {
        "level": "ran",
        "source": "results/mychip.json",
        "date": "2026-12-01",
        "words": "ran on the chip",
        "label": "ran on the chip (results/mychip.json, 2026-12-01)",
    }
    assert all(not e.problems() for e in made)


def test_a_claimed_run_without_its_source_is_refused_at_registration() -> None:
    assert spec_problems(_spec(evidence=Evidence("ran"))) == [
        "field 'evidence': level 'ran' needs its source (where the evidence is)"
    ]
    assert any("field 'evidence" in p for p in spec_problems(_spec(evidence=Evidence("proven", "x"))))  # type: ignore[arg-type]  # a wrong level, on purpose


@pytest.mark.parametrize("keyword", sorted(REMOVED_KEYWORDS))
def test_a_removed_keyword_is_an_error_naming_it_and_what_to_write(keyword: str) -> None:
    release, instead = REMOVED_KEYWORDS[keyword]
    with pytest.raises(TypeError) as caught:
        _spec(**{keyword: "x"})
    message = str(caught.value)
    assert f"DeviceSpec({keyword}=...) was removed in anydevice {release}" in message and instead in message


def test_a_0_2_plugin_declaring_a_description_gets_the_fix() -> None:
    with pytest.raises(TypeError, match=r"DeviceSpec\(description=\.\.\.\) was removed in anydevice 0\.3: leave it out"):
        DeviceSpec(name="mychip", detect=lambda: Detection.ok("here"), load=lambda: None, description="My chip")  # type: ignore[call-arg,arg-type,return-value]


def test_every_built_in_plugin_says_what_stands_behind_it() -> None:
    """No plugin that never ran on a chip says verified; one that ran says where its results are (a file here)."""
    registry = builtin_registry()
    evidence = {name: registry.get(name).spec.evidence for name in registry.names()}
    assert {name: e.level for name, e in evidence.items()} == {
        "cpu": "ran",
        "neuron": "stand-in",
        "xla": "stand-in",
        **dict.fromkeys(("cuda", "tpu", "mps", "xpu"), "declared"),
    }
    for name, e in evidence.items():
        assert not e.problems(), name
        if e.level == "ran":
            assert (ROOT / e.source).is_file(), f"{name} says it ran on the chip, but {e.source} is not here"
        if e.level == "declared":
            assert "never run on" in e.source and e.date, name


def test_capabilities_carry_the_device_evidence(monkeypatch: pytest.MonkeyPatch) -> None:
    import anydevice as ad
    from anydevice.capability_query import render

    monkeypatch.setenv("ANYDEVICE", "cpu")
    caps = ad.capabilities().as_dict()
    assert caps["evidence"]["level"] == "ran"
    assert "evidence   ran on the chip (compat_matrix/results/cpu.json" in render(caps)


def test_the_matrix_shows_the_evidence_of_every_column_and_cell() -> None:
    matrix = build_matrix(sorted(RESULTS.glob("*.json")))
    by_plugin = {c.runs[0].run.plugin.name + ("-export" if c.runs[0].run.export else ""): c for c in matrix.columns}
    assert column_evidence(by_plugin["cpu"]).level == "ran"
    assert column_evidence(by_plugin["xla"]).level == "stand-in"
    assert column_evidence(by_plugin["neuron"]).level == "stand-in"
    assert column_evidence(by_plugin["tpu"]) == UNKNOWN  # no chip: every probe skipped, nothing stands behind it
    for column in matrix.columns:
        for row in matrix.rows:
            level = cell_evidence(matrix.cell(row.probe, column), column).level
            assert level in LEVELS and (level == "unknown" or level == column_evidence(column).level)
