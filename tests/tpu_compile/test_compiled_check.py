"""`check --target tpu:<slice>`: the step compiled by libtpu on this CPU host (the tpu-check lane; no chip).

Every assertion is on the compiler's own answer: fits or its out-of-memory words, the capacity it states,
the bytes of memory_analysis, the collectives of the compiled HLO.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import anydevice as ad
from anydevice.errors import AnyDeviceError
from tests.utils import anydevice_cli

pytestmark = pytest.mark.tpu_compile
GIB = 2**30
SCRIPTS = Path(__file__).with_name("scripts")


def wide_model(width: int = 16384, layers: int = 5) -> torch.nn.Module:
    """1.34B parameters on meta: AdamW's replicated state (12 bytes a parameter) alone is 15 GiB."""
    with torch.device("meta"):
        return torch.nn.Sequential(*[torch.nn.Linear(width, width, bias=False) for _ in range(layers)])


@pytest.fixture(scope="module")
def wide() -> dict[str, ad.preflight.schema.TargetReport]:  # type: ignore[name-defined]
    model = wide_model()
    opt = torch.optim.AdamW(model.parameters())
    x = torch.empty(2, 16384, device="meta")
    out = {}
    for key, target, mesh in (("v5e", "tpu:v5e-8", None), ("v6e", "tpu:v6e-8", None), ("v5e-fsdp", "tpu:v5e-8", {"fsdp": -1})):
        out[key] = ad.check(model, x, target=target, optimizer=opt, mesh=mesh).targets[0]
    return out


@pytest.mark.long("its fixture compiles three 1.3B-parameter steps with libtpu (two fit, one out of memory)")
def test_replicated_states_over_16_gib_will_not_fit_on_v5e_in_the_compilers_words(wide: dict) -> None:
    report = wide["v5e"]
    step = report.compile
    assert report.verdict == "will not fit"
    assert step.fits is False and step.ok is False
    assert "RESOURCE_EXHAUSTED" in step.error and "exceeds available HBM (15.75G)" in step.error
    assert step.capacity_bytes == int(15.75 * GIB)
    assert step.required_bytes > step.capacity_bytes
    assert step.mesh == {"dp": 8} and step.chips == 8 and step.topology == "v5e:2x4"
    memory = [f for f in report.findings if f.check == "memory"]
    assert memory and memory[0].severity == "error" and "fsdp" in (memory[0].fix or "")


def test_the_same_model_fits_on_v6e_with_the_bytes_the_compiler_counts(wide: dict) -> None:
    report = wide["v6e"]
    step = report.compile
    assert report.verdict == "runs" and step.ok and step.fits
    assert step.capacity_bytes == int(31.25 * GIB)
    params = 5 * 16384 * 16384 * 4
    assert step.per_chip_bytes["arguments"] >= 3 * params  # parameters and AdamW's two moments, replicated
    assert step.per_chip_bytes["aliased"] >= 3 * params  # donated: updated in place
    assert 16 * GIB <= step.per_chip_bytes["total"] < step.capacity_bytes
    assert step.collectives.get("all-reduce", 0) >= 1  # the gradients' data-parallel reduction
    assert "libtpu" in step.compiler and "torchax" in step.compiler


def test_the_same_model_fully_sharded_fits_on_v5e(wide: dict) -> None:
    step = wide["v5e-fsdp"].compile
    assert wide["v5e-fsdp"].verdict == "runs" and step.fits
    assert step.mesh == {"fsdp": 8}
    assert step.per_chip_bytes["arguments"] <= 3 * 5 * 16384 * 16384 * 4 // 8 + 2**20  # an eighth of the states
    assert step.collectives.get("all-gather", 0) >= 1  # the partitioner gathers the sharded weights


@pytest.mark.long("runs the script's first steps on the CPU, then compiles its step with libtpu")
def test_a_small_transformer_script_compiles_for_v5e_8_from_the_cli() -> None:
    """The CLI path: the script's first steps on the CPU, then its step (cross-entropy, AdamW) compiled for the slice."""
    done = anydevice_cli("check", str(SCRIPTS / "lm_step.py"), "--target", "tpu:v5e-8", "--json", timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    (target,) = report["targets"]
    step = target["compile"]
    assert target["target"] == "tpu:v5e-8" and target["verdict"] == "runs"
    assert step["ok"] and step["fits"] and step["devices"] == 8 and step["device_kind"] == "TPU v5 lite"
    assert "cross-entropy" in step["program"] and "AdamW(lr=0.001" in step["program"]
    assert set(step["per_chip_bytes"]) == {"arguments", "outputs", "aliased", "temporaries", "code", "total"}
    assert step["collectives"].get("all-reduce", 0) >= 1
    assert report["observation"]["compiled"]["tpu:v5e-8"]["ok"]


def test_a_float64_buffer_is_named_before_lowering() -> None:
    model = torch.nn.Linear(8, 8)
    model.register_buffer("scale", torch.ones(8, dtype=torch.float64))
    with pytest.raises(AnyDeviceError) as info:
        ad.check(model, torch.randn(4, 8), target="tpu:v5e-8")
    assert "buffer scale is torch.float64" in info.value.message


def test_an_optimizer_the_compiled_check_does_not_model_is_refused_by_name() -> None:
    model = torch.nn.Linear(8, 8)
    with pytest.raises(AnyDeviceError) as info:
        ad.check(model, torch.randn(4, 8), target="tpu:v5e-8", optimizer=torch.optim.Adagrad(model.parameters()))
    assert "Adagrad" in info.value.message


def test_a_mesh_that_does_not_divide_the_slice_is_refused() -> None:
    with pytest.raises(AnyDeviceError) as info:
        ad.check(torch.nn.Linear(8, 8), torch.randn(4, 8), target="tpu:v5e-8", mesh={"fsdp": 3})
    assert "slice has 8 devices" in info.value.message
