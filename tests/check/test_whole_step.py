"""A check answer covers the whole step or says which part: every optimizer the script steps is counted, a closure
optimizer is refused by name or run through the script's closure, a ``@torch.compile``'d step function is observed,
and the short-last-batch prediction reads the sampler (issue 46).

The scripts are users' scripts (tests/check/scripts), run by ``anydevice check`` with its child process on the CPU;
the sampler rule is also asked directly of real DataLoaders (no process needed).
"""

from __future__ import annotations

import functools

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler, RandomSampler, TensorDataset

import anydevice as ad
from anydevice.errors import AnyDeviceError
from anydevice.preflight.compiled import compiled_memory
from anydevice.preflight.epoch import short_last_batch
from anydevice.preflight.schema import CompiledStep, Finding, OptimizerUse, Report
from tests.utils import REPO, cli_in_process

SCRIPTS = REPO / "tests" / "check" / "scripts"
GENERATOR = (16 * 64 + 64) + (64 * 32 + 32)  # gan.py's two models, counted by hand
DISCRIMINATOR = (32 * 512 + 512) + (512 * 512 + 512) + (512 + 1)


def marker(case: str, script: str = "gan.py") -> str:
    """``NAME:N`` of the line marked ``# CHECK: case``."""
    lines = (SCRIPTS / script).read_text().splitlines()
    return f"{script}:{next(i for i, line in enumerate(lines, 1) if f'# CHECK: {case}' in line)}"


@functools.cache
def checked(script: str, *args: str) -> Report:
    done = cli_in_process("check", str(SCRIPTS / script), *args, "--target", "tpu,cpu", "--json")
    assert done.returncode in (0, 1), done.stderr
    return Report.model_validate_json(done.stdout)


@pytest.mark.slow
def test_a_gan_steps_two_optimizers_and_the_estimate_counts_both() -> None:
    report = checked("gan.py")
    obs = report.observation
    discriminator, generator = obs.optimizers  # in the order of their first steps: D's, then G's
    assert (discriminator.name, discriminator.parameters, discriminator.updates_model) == ("AdamW", DISCRIMINATOR, False)
    assert (generator.name, generator.parameters, generator.updates_model) == ("AdamW", GENERATOR, True)
    assert discriminator.line and discriminator.line.endswith(marker("discriminator step"))
    assert generator.line and generator.line.endswith(marker("generator step"))
    assert discriminator.steps == generator.steps == 2  # 4 steps: two whole iterations, each optimizer in both
    assert discriminator.state_bytes >= 2 * 4 * DISCRIMINATOR  # AdamW's two moments
    mem = obs.memory
    assert mem is not None and mem.optimizers == 2 and mem.optimizer == "AdamW + AdamW"
    assert mem.parameters == 4 * (GENERATOR + DISCRIMINATOR)
    assert mem.optimizer_state == discriminator.state_bytes + generator.state_bytes
    assert mem.activations >= 4 * 8 * (32 + 512 + 512)  # the discriminator's first forward saves its input and two layers
    (tpu,) = [t for t in report.targets if t.target == "tpu"]
    (memory,) = [f for f in tpu.findings if f.check == "memory"]
    assert "2 optimizers' (AdamW + AdamW) state" in memory.message


def test_the_compiled_answer_for_one_of_two_optimizers_is_partly_checked_never_fits() -> None:
    """A compiled step holding the generator's AdamW alone (the discriminator's outside it) is "partly checked", or
    "will not fit" when the discriminator's parameters and state push the step past the chip; one holding both is
    the whole answer. (tests/tpu_compile/test_whole_step_compiled.py compiles gan.py itself.)"""
    step = CompiledStep(
        compiler="libtpu", target="tpu:v5e-8", topology="v5e:2x4", counting="8 chips", chips=8, devices=8,
        device_kind="TPU v5 lite", mesh={"dp": 8}, program="forward", ok=True, fits=True, seconds=1.0,
        per_chip_bytes={"total": 2 * 2**30}, capacity_bytes=16 * 2**30,
    )  # fmt: skip
    generator = OptimizerUse(name="AdamW", parameters=GENERATOR, parameter_bytes=4 * GENERATOR, state_bytes=8 * GENERATOR,
                             steps=2, line="gan.py:23", updates_model=True)  # fmt: skip
    small = OptimizerUse(name="AdamW", parameters=DISCRIMINATOR, parameter_bytes=4 * DISCRIMINATOR,
                         state_bytes=8 * DISCRIMINATOR, steps=2, line="gan.py:19")  # fmt: skip
    findings: list[Finding] = []
    assert compiled_memory(step, findings, [small, generator]) == ["partly checked"]
    assert "this script steps 2 optimizers; the compiled answer covers one" in findings[-1].message
    assert "gan.py:19" in findings[-1].message and findings[-1].severity == "error"
    assert "the compiled part fits" in findings[0].message
    huge = small.model_copy(update={"parameter_bytes": 5 * 2**30, "state_bytes": 10 * 2**30})
    findings = []
    assert compiled_memory(step, findings, [huge, generator]) == ["will not fit"]
    assert "at least 17.00 GiB per chip of 16.00 GiB" in findings[-1].message
    sharded = step.model_copy(update={"mesh": {"fsdp": 8}})
    assert compiled_memory(sharded, [], [huge, generator]) == ["partly checked"]  # 15 GiB over 8 shards fits beside it
    assert compiled_memory(step, [], [generator]) == []  # one optimizer: the compiled answer is the whole step
    both = step.model_copy(update={"optimizers": [1, 0]})  # the runner compiled the discriminator's part too
    findings = []
    assert compiled_memory(both, findings, [huge, generator]) == []
    assert "fits (all 2 optimizers the script steps are in the program" in findings[0].message


def test_ad_check_refuses_a_closure_optimizer_by_name() -> None:
    model = torch.nn.Linear(8, 2)
    with pytest.raises(AnyDeviceError) as info:
        ad.check(model, torch.randn(4, 8), target="cpu", optimizer=torch.optim.LBFGS(model.parameters()))
    assert "LBFGS" in info.value.message and "closure" in info.value.message
    assert "anydevice check" in info.value.hint


@pytest.mark.slow
def test_a_script_stepping_lbfgs_with_its_closure_is_checked() -> None:
    obs = checked("lbfgs.py").observation
    (lbfgs,) = obs.optimizers
    assert lbfgs.name == "LBFGS" and lbfgs.parameters == 9 and lbfgs.line and lbfgs.line.endswith(marker("step", "lbfgs.py"))
    # its state: the direction and step history (4 inner iterations a step, two tensors of 9 floats each) beside d and t
    assert lbfgs.state_bytes > 2 * 3 * 9 * 4
    assert obs.memory is not None and obs.memory.optimizer == "LBFGS" and obs.memory.optimizer_state == lbfgs.state_bytes


@pytest.mark.slow
def test_a_compiled_step_function_is_observed_eagerly() -> None:
    report = checked("compiled_step.py")
    obs = report.observation
    assert obs.steps == 4 and [o.name for o in obs.optimizers] == ["SGD"]
    model_line = marker("model call", "compiled_step.py")
    assert any(u.op == "aten::addmm" and u.line and u.line.endswith(model_line) for u in obs.ops)
    assert obs.signatures[0].signature == "(8, 16):float32, (8,):int64"
    (tpu,) = [t for t in report.targets if t.target == "tpu"]
    noted = [f for f in tpu.findings if f.check == "capture" and "torch.compile" in f.message]
    assert noted and noted[0].line and noted[0].line.endswith(marker("compiled", "compiled_step.py"))
    assert tpu.verdict == "runs"


ROWS = TensorDataset(torch.randn(102, 4))


def short(loader: DataLoader, world: int = 1) -> tuple[int, int, str | None, str] | None:
    found = short_last_batch(loader, world, None)
    return None if found is None else (found.rows, found.last, found.sampler, found.fix)


def test_the_short_last_batch_is_read_from_the_sampler() -> None:
    assert short(DataLoader(ROWS, batch_size=8)) == (102, 6, None, "drop_last=True on the DataLoader")
    assert short(DataLoader(ROWS, batch_size=8, drop_last=True)) is None
    full = RandomSampler(ROWS, replacement=True, num_samples=96)
    assert short(DataLoader(ROWS, batch_size=8, sampler=full)) is None  # 12 whole batches: nothing to drop
    draws = RandomSampler(ROWS, replacement=True, num_samples=90)
    assert short(DataLoader(ROWS, batch_size=8, sampler=draws)) == (
        90, 2, "RandomSampler(replacement=True, num_samples=90)", "drop_last=True on the DataLoader"
    )  # fmt: skip
    # a DistributedSampler built over check's one process: the run's 4 ranks take 26 rows each (padded) or 25
    one = DistributedSampler(ROWS, num_replicas=1, rank=0)
    assert short(DataLoader(ROWS, batch_size=8, sampler=one), world=4)[:3] == (26, 2, "DistributedSampler over 4 ranks (padded)")
    dropping = DistributedSampler(ROWS, num_replicas=1, rank=0, drop_last=True)
    assert short(DataLoader(ROWS, batch_size=5, sampler=dropping), world=4) is None  # 25 rows: 5 whole batches
    given = DistributedSampler(ROWS, num_replicas=3, rank=0)  # the script names its ranks: 34 each
    assert short(DataLoader(ROWS, batch_size=8, sampler=given), world=1)[:3] == (34, 2, "DistributedSampler over 3 ranks")
    own = BatchSampler(RandomSampler(ROWS), batch_size=8, drop_last=False)
    assert short(DataLoader(ROWS, batch_sampler=own))[3] == "drop_last=True on the BatchSampler"
    assert short(DataLoader(ROWS, batch_sampler=BatchSampler(RandomSampler(ROWS), batch_size=8, drop_last=True))) is None
    custom = [list(range(i, min(i + 8, 102))) for i in range(0, 102, 8)]
    assert short(DataLoader(ROWS, batch_sampler=custom)) is None  # its own batch sizes: not predicted from a length


@pytest.mark.slow
def test_a_sampler_whose_batches_are_all_full_predicts_no_recompile() -> None:
    report = checked("samplers.py", "replacement")
    assert report.observation.short_last_batch is None
    (tpu,) = [t for t in report.targets if t.target == "tpu"]
    assert tpu.verdict == "runs" and not any("drop_last" in fix for fix in tpu.fixes)
    report = checked("samplers.py", "distributed")
    found = report.observation.short_last_batch
    assert found is not None and (found.rows, found.last, found.sampler) == (25, 1, "DistributedSampler over 4 ranks")
    (tpu,) = [t for t in report.targets if t.target == "tpu"]
    assert tpu.verdict == "will recompile" and tpu.fixes[0].startswith("drop_last=True on the DataLoader")


@pytest.mark.slow
def test_an_optimizer_stepping_every_fifth_step_is_waited_for_and_one_never_stepped_is_listed() -> None:
    obs = checked("wgan.py").observation
    critic, generator, finetune = obs.optimizers
    assert (critic.name, critic.updates_model) == ("RMSprop", False) and critic.steps >= 5
    assert (generator.name, generator.updates_model) == ("RMSprop", True) and generator.steps >= 1  # past --steps 4
    assert generator.line and generator.line.endswith(marker("generator step", "wgan.py"))
    assert (finetune.name, finetune.steps, finetune.parameters) == ("SGD", 0, critic.parameters)
    assert finetune.line and finetune.line.endswith(marker("made for later", "wgan.py"))
    assert finetune.state_bytes == finetune.parameter_bytes  # estimated from its kind: one momentum buffer
    mem = obs.memory
    assert mem is not None and mem.optimizers == 3
    assert mem.parameters == critic.parameter_bytes + generator.parameter_bytes  # the critic's counted once
