"""The compiled step covers every optimizer the script steps, or says which part it covers (issue 46).

Users' scripts from tests/check/scripts through `anydevice check --target tpu:v5e-8`: the first steps on the CPU,
then libtpu's compiler on this host (no chip). The models are a few hundred thousand parameters: seconds a compile.
"""

from __future__ import annotations

import json

import pytest

from tests.utils import REPO, anydevice_cli

pytestmark = pytest.mark.tpu_compile

SCRIPTS = REPO / "tests" / "check" / "scripts"
GENERATOR = (16 * 64 + 64) + (64 * 32 + 32)  # gan.py's two models, counted by hand
DISCRIMINATOR = (32 * 512 + 512) + (512 * 512 + 512) + (512 + 1)


def checked(script: str) -> dict:  # type: ignore[type-arg]
    done = anydevice_cli("check", str(SCRIPTS / script), "--target", "tpu:v5e-8", "--json", timeout=600)
    assert done.returncode in (0, 1), done.stderr[-2000:]
    report: dict = json.loads(done.stdout)  # type: ignore[type-arg]
    return report


@pytest.mark.long("runs a GAN's first steps on the CPU, then compiles both models' step with libtpu")
def test_a_gans_compiled_step_holds_both_models_and_both_optimizers() -> None:
    report = checked("gan.py")
    (target,) = report["targets"]
    step = target["compile"]
    assert target["verdict"] == "runs" and step["ok"] and step["fits"]
    assert sorted(step["optimizers"]) == [0, 1]  # the discriminator's AdamW (first stepped) and the generator's
    assert "the script's 1 other model(s) with their optimizers" in step["program"]
    assert "Sequential of 280,065 parameters" in step["program"] and step["program"].count("AdamW(") == 2
    # every chip holds both models' parameters and their AdamW moments (replicated over dp): 12 bytes a parameter;
    # before, the generator's alone (0.04 MB) was compiled and the discriminator's 3.4 MB were missing
    assert step["per_chip_bytes"]["arguments"] >= 12 * (GENERATOR + DISCRIMINATOR)
    memory = [f["message"] for f in target["findings"] if f["check"] == "memory"]
    assert any("all 2 optimizers the script steps are in the program" in m for m in memory)
    assert any("no gradient flows from one model through another" in a for a in step["assumptions"])


@pytest.mark.long("runs a script's first steps on the CPU, then compiles its step with libtpu")
def test_two_optimizers_on_one_model_are_answered_as_partly_checked() -> None:
    report = checked("two_optimizers_one_model.py")
    (target,) = report["targets"]
    assert target["verdict"] == "partly checked" and not report["ok"]
    assert target["summary"] == "partly checked (the compiled step covers 1 of 2 optimizers)"
    assert target["compile"]["ok"] and target["compile"]["optimizers"] == [0]
    (partial,) = [f for f in target["findings"] if f["message"].startswith("partly checked")]
    assert "this script steps 2 optimizers; the compiled answer covers one (the AdamW" in partial["message"]
    assert "SGD of 72 parameters" in partial["message"] and "its rule is not in the program" in partial["message"]
    assert partial["severity"] == "error" and partial["fix"]
