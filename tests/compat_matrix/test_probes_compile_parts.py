"""The compile probes' parts that need torch alone: each probe's step runs on the CPU as the probe describes it,
a probe without a slice or without a compiled answer is the harness's fault, the main lane's missing compiler is
a failure at ``compile`` naming the extra, and the compiler's recorded answers become a pass, a ``CompilerRefused``
and the one-line log. The real compiles run in the tpu-check lane (tests/tpu_compile/test_matrix_compile_column.py).
"""

from __future__ import annotations

import math
import types
from typing import Any

import pytest
import torch

import anydevice as ad
from anydevice.compat_matrix import probes_compile
from anydevice.compat_matrix.execute import ProbeContext
from anydevice.compat_matrix.probe import COMPILE_GROUP, HarnessError
from anydevice.compat_matrix.schema import Stage
from anydevice.errors import AnyDeviceError
from anydevice.preflight.schema import CompiledStep
from anydevice.shims import tpu_aot

TARGET = "tpu:v5e-8"
COMPILER = "libtpu 0.0.42.1 via JAX 0.10.2, lowered by torchax 0.0.13"
ASSUMPTIONS = [
    "parameters and optimizer state are donated (updated in place, as torch's optimizers do)",
    "gradients are temporaries of the step (zero_grad(set_to_none=True), torch's default)",
    "each data-parallel replica takes the script's batch",
    "lowered by torchax (JAX/XLA's lowering of the PyTorch program, not TorchTPU's own): compiled, not run",
]
SLICE = dict(compiler=COMPILER, target=TARGET, topology="v5e:2x4", counting="8 chips", chips=8, devices=8)
SLICE |= dict(device_kind="TPU v5 lite", assumptions=ASSUMPTIONS, capacity_bytes=16911433728)
ADAMW = "AdamW(lr=0.001, betas=(0.9, 0.999), eps=1e-08, weight_decay=0.01)"
PROGRAM = "forward, the summed output (the script's loss was not recognised: a backward through every output), backward, {}"

# Recorded in the tpu-check venv (jax 0.10.2, jaxlib 0.10.2, libtpu 0.0.42.1, torchax 0.0.13, torch 2.13.0+cpu) with
# `JAX_PLATFORMS=cpu TPU_SKIP_MDS_QUERY=1 python capture.py`, where capture.py printed
# tpu_aot.compile_step(model, inputs, {}, optimizer=..., target="v5e-8", mesh=mesh) for these probes' steps
# (host_peak_rss_bytes left out):
MLP_ANSWER = SLICE | dict(
    mesh={"dp": 8},
    program=PROGRAM.format(f"{ADAMW}; mesh dp=8; batch x8 over the data axes"),
    ok=True,
    fits=True,
    seconds=2.91,
    lower_seconds=0.09,
    per_chip_bytes=dict(arguments=406016, outputs=398848, aliased=397824, temporaries=0, code=188928, total=595968),
    collectives={"all-reduce": 1},
)
MLP_FSDP_ANSWER = SLICE | dict(
    mesh={"fsdp": 8},
    program=PROGRAM.format(f"{ADAMW}; mesh fsdp=8; batch x8 over the data axes"),
    ok=True,
    fits=True,
    seconds=0.49,
    lower_seconds=0.04,
    per_chip_bytes=dict(arguments=109568, outputs=102400, aliased=101376, temporaries=0, code=233472, total=344064),
    collectives={"all-reduce": 2, "all-gather": 1},
)
MASK_ANSWER = SLICE | dict(
    mesh={"dp": 8},
    program=PROGRAM.format("SGD(lr=0.1, momentum=0.9, weight_decay=0); mesh dp=8; batch x8 over the data axes"),
    ok=False,
    seconds=0.04,
    error="NonConcreteBooleanIndexError: Array boolean indices must be concrete; got bool[64,16]",
    error_line="/work/main/compat_matrix/probes_compile.py:91",
)
# The same venv's compile_step for five bias-free Linear(16384, 16384) on meta with AdamW, replicated over v5e-8
# (a (2, 16384) meta batch): the compiler's out-of-memory verdict.
OOM_ANSWER = SLICE | dict(
    mesh={"dp": 8},
    program=PROGRAM.format(f"{ADAMW}; mesh dp=8; batch x8 over the data axes"),
    ok=False,
    fits=False,
    seconds=1.44,
    error="RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO temporaries (16.00G) "
    "exceeds available HBM (15.75G).",
    required_bytes=16 * 2**30,
)


def probe_named(name: str) -> Any:
    return next(p for p in probes_compile.PROBES if p.name == f"compile_tpu_{name}")


def recorded(answer: dict[str, Any] | None) -> tuple[types.ModuleType, list[dict[str, Any]]]:
    """An ``ad`` whose ``check`` gives the recorded compiled answer, and the calls it took (the probe's side of it)."""
    calls: list[dict[str, Any]] = []

    def check(model: torch.nn.Module, inputs: Any, **kwargs: Any) -> Any:
        calls.append(dict(model=model, inputs=inputs, **kwargs))
        step = CompiledStep(**answer) if answer is not None else None
        return types.SimpleNamespace(targets=[types.SimpleNamespace(compile=step)])

    module = types.ModuleType("recorded_anydevice")
    module.check = check  # type: ignore[attr-defined]
    return module, calls


def context(module: types.ModuleType = ad, target: str | None = TARGET) -> ProbeContext:
    return ProbeContext(module, torch.device("cpu"), {}, target=target)


# -- the catalog's compile probes ---------------------------------------------------------------------------------


def test_every_compile_probe_is_in_the_compile_group_for_tpu_slices() -> None:
    names = [p.name for p in probes_compile.PROBES]
    assert len(set(names)) == len(names) == 6
    assert all(p.group == COMPILE_GROUP and p.params == {"target": "tpu"} and p.description for p in probes_compile.PROBES)


@pytest.mark.parametrize(
    ("build", "optimizer", "mesh"),
    [
        (probes_compile._mlp, torch.optim.AdamW, None),
        (probes_compile._mlp_fsdp, torch.optim.AdamW, {"fsdp": -1}),
        (probes_compile._convnet, torch.optim.SGD, None),
        (probes_compile._causal_lm, torch.optim.AdamW, None),
        (probes_compile._mask_index, torch.optim.SGD, None),
        (probes_compile._float64_buffer, torch.optim.SGD, None),
    ],
)
def test_each_probes_step_trains_on_the_cpu_with_its_optimizer(build: Any, optimizer: type, mesh: dict | None) -> None:
    """What the compiler is handed is a working step: forward, a scalar loss, backward, an update that moves weights."""
    torch.manual_seed(0)
    model, inputs, make_optimizer, step_mesh = build()
    opt = make_optimizer(list(model.parameters()))
    assert type(opt) is optimizer and step_mesh == mesh
    before = [p.detach().clone() for p in model.parameters()]
    out = model(*inputs)
    loss = out if out.dim() == 0 else out.sum()
    loss.backward()
    opt.step()
    assert torch.isfinite(loss) and any(not torch.equal(b, p) for b, p in zip(before, model.parameters()))


def test_the_tiny_causal_lms_loss_starts_near_uniform_over_its_vocabulary() -> None:
    torch.manual_seed(0)
    model, (tokens,), _, _ = probes_compile._causal_lm()
    assert tokens.dtype == torch.long and tokens.shape == (4, 32) and int(tokens.max()) < 128
    assert abs(model(tokens).item() - math.log(128)) < 0.5


def test_the_mask_index_output_depends_on_the_data_and_the_buffer_is_float64() -> None:
    model = probes_compile._MaskIndex()
    x = torch.randn(8, 16)
    assert torch.allclose(model(x), model.linear(x).clamp(min=0).sum())  # h[h > 0]: a data-dependent count
    buffered, (x,), _, _ = probes_compile._float64_buffer()
    assert buffered.scale.dtype == torch.float64 and buffered(x).dtype == torch.float32


def test_the_optimizers_carry_the_hyper_parameters_the_compiled_program_reports() -> None:
    param = [torch.nn.Parameter(torch.zeros(2))]
    adamw, sgd = probes_compile._adamw(param).param_groups[0], probes_compile._sgd(param).param_groups[0]
    assert (adamw["lr"], adamw["weight_decay"], adamw["betas"]) == (1e-3, 0.01, (0.9, 0.999))
    assert (sgd["lr"], sgd["momentum"]) == (0.1, 0.9)


# -- the probe: what it asks of ad.check and what it makes of the answer ------------------------------------------


def test_a_compile_probe_without_a_slice_is_the_harnesss_fault() -> None:
    with pytest.raises(HarnessError, match=r"needs the run's slice \(anydevice matrix probe --target tpu:v5e-8\)"):
        probe_named("mlp_adamw").fn(context(target=None))


def test_without_the_compiler_the_probe_fails_at_compile_naming_the_extra() -> None:
    if tpu_aot.available() is None:
        pytest.skip("this venv has jax[tpu] and torchax (the tpu-check lane compiles for real)")
    ctx = context()
    with pytest.raises(AnyDeviceError) as info:
        probe_named("mlp_fsdp").fn(ctx)
    assert "not installed" in info.value.message and TARGET in info.value.message
    assert "anydevice[tpu-check]" in (info.value.hint or "")
    assert ctx.stage_of(info.value) is Stage.COMPILE


def test_a_step_that_compiled_and_fits_passes_and_logs_the_compilers_figures(capsys: pytest.CaptureFixture[str]) -> None:
    module, calls = recorded(MLP_ANSWER)
    probe_named("mlp_adamw").fn(context(module))
    (call,) = calls
    assert call["target"] == TARGET and call["mesh"] is None and isinstance(call["optimizer"], torch.optim.AdamW)
    assert call["optimizer"].param_groups[0]["params"] == list(call["model"].parameters())
    assert capsys.readouterr().out == (
        f"tpu:v5e-8 (v5e:2x4, 8 chips), mesh {{'dp': 8}}: fits, 0.001 GiB per chip of 15.75; 1 all-reduce; 2.9 s ({COMPILER})\n"
    )


def test_a_lowering_error_is_the_compilers_refusal_at_compile_with_the_users_line(capsys: pytest.CaptureFixture[str]) -> None:
    module, _ = recorded(MASK_ANSWER)
    ctx = context(module)
    with pytest.raises(probes_compile.CompilerRefused) as info:
        probe_named("mask_index").fn(ctx)
    assert str(info.value) == f"{COMPILER}: {MASK_ANSWER['error']} (at /work/main/compat_matrix/probes_compile.py:91)"
    assert ctx.stage_of(info.value) is Stage.COMPILE
    assert "no verdict, no memory figures of 15.75; no collectives; 0.0 s" in capsys.readouterr().out


def test_an_out_of_memory_answer_fails_with_the_compilers_words(capsys: pytest.CaptureFixture[str]) -> None:
    module, _ = recorded(OOM_ANSWER)
    ctx = context(module)
    with pytest.raises(probes_compile.CompilerRefused, match=r"RESOURCE_EXHAUSTED: .* exceeds available HBM \(15\.75G\)\.$"):
        probe_named("mlp_adamw").fn(ctx)
    assert ": will not fit, no memory figures of 15.75;" in capsys.readouterr().out


def test_a_step_that_compiled_but_the_bytes_exceed_the_capacity_will_not_fit_in_figures() -> None:
    """No compiler error to quote (it compiled): the refusal gives the per-chip bytes against the capacity."""
    over = MLP_ANSWER | dict(fits=False, capacity_bytes=2**19)  # 0.5 MiB per chip against the step's 0.57 MiB
    module, _ = recorded(over)
    ctx = context(module)
    with pytest.raises(probes_compile.CompilerRefused) as info:
        probe_named("mlp_adamw").fn(ctx)
    assert str(info.value) == f"{COMPILER}: compiled, will not fit: 0.001 GiB per chip of 0.00"
    assert ctx.stage_of(info.value) is Stage.COMPILE


def test_no_compiled_answer_from_ad_check_is_the_harnesss_fault() -> None:
    module, _ = recorded(None)
    with pytest.raises(HarnessError, match=r"ad\.check gave no compiled answer for tpu:v5e-8"):
        probe_named("convnet_sgd").fn(context(module))


# -- the log line ---------------------------------------------------------------------------------------------------


def test_the_summary_sorts_the_collectives_and_shows_the_sharded_mesh() -> None:
    line = probes_compile._summary(CompiledStep(**MLP_FSDP_ANSWER))
    assert line == (
        f"tpu:v5e-8 (v5e:2x4, 8 chips), mesh {{'fsdp': 8}}: fits, 0.000 GiB per chip of 15.75; "
        f"1 all-gather, 2 all-reduce; 0.5 s ({COMPILER})"
    )


def test_the_summary_without_a_stated_capacity_gives_the_bytes_alone() -> None:
    line = probes_compile._summary(CompiledStep(**(MLP_ANSWER | dict(capacity_bytes=None))))
    assert ": fits, 0.001 GiB per chip; 1 all-reduce;" in line
