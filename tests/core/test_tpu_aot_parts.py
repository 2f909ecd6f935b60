"""The parts of the compiled TPU check that need torch alone: the environment set before JAX loads, the mesh
it resolves over the slice's devices, the tensor-parallel dimensions it splits, the loss the step takes the
gradient of, the torch overloads it tolerates missing, and how a compiler's refusal becomes the answer's
``error``/``fits``/``required_bytes`` (from libtpu's and torchax's own words, recorded below). The compiles
themselves run in the tpu-check lane (tests/tpu_compile); tests/core/test_tpu_aot_inputs.py covers the float64
refusal and the missing-extra message.
"""

from __future__ import annotations

import inspect
import os
import sys
import types
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from anydevice.contract.check_facts import StepLoss
from anydevice.errors import AnyDeviceError
from anydevice.shims import tpu_aot

GIB = 2**30

# Recorded in the tpu-check venv (jax 0.10.2, jaxlib 0.10.2, libtpu 0.0.42.1, torchax 0.0.13, torch 2.13.0+cpu) with
# `JAX_PLATFORMS=cpu TPU_SKIP_MDS_QUERY=1 python capture.py`, where capture.py built each step with
# tpu_aot._program(model, inputs, {}, optimizer, {"dp": 8}, <v5e:2x4 topology devices>, StepLoss(), "auto"), ran it
# and printed str(exc) of what it raised:
OOM_WIDE = (  # jax.errors.JaxRuntimeError: five bias-free Linear(16384, 16384) on meta, AdamW, replicated over v5e-8
    "RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO temporaries (16.00G) "
    "exceeds available HBM (15.75G)."
)
OOM_TERABYTE = (  # jax.errors.JaxRuntimeError: capacity_bytes("v5e:2x4")'s probe, a 1 TiB float32 array on one device
    "RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO temporaries (1.00T) "
    "exceeds available HBM (15.75G)."
)
BOOLEAN_MASK = (  # jax.errors.NonConcreteBooleanIndexError: the mask_index compile probe's h[h > 0]
    "Array boolean indices must be concrete; got bool[64,16]\n\n"
    "See https://docs.jax.dev/en/latest/errors.html#jax.errors.NonConcreteBooleanIndexError"
)
NO_LOWERING = "Operator with name aten::adaptive_max_pool3d has no lowering"  # torchax.tensor.OperatorNotFound
V5E_CAPACITY = 16911433728  # capacity_bytes("v5e:2x4") in the same venv: libtpu's 15.75G


def raise_in_user_code(exc: BaseException) -> BaseException:
    """Raise ``exc`` from this file (the user's model code, as the compile sees it) and return it, traceback on."""
    try:
        raise exc  # the user's line
    except BaseException as caught:
        return caught


_lines, _first = inspect.getsourcelines(raise_in_user_code)
USER_LINE = f"{__file__}:{_first + next(i for i, line in enumerate(_lines) if 'raise exc' in line)}"


def blank_result() -> dict:
    return {"target": "tpu:v5e-8", "ok": False, "seconds": 0.04, "capacity_bytes": V5E_CAPACITY}


# -- the environment before JAX loads -----------------------------------------------------------------------------


def test_the_environment_points_jax_at_the_cpu_and_libtpu_at_a_compile_only_topology(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "JAX_PLATFORMS",
        "TPU_SKIP_MDS_QUERY",
        "TPU_WORKER_HOSTNAMES",
        "TPU_ACCELERATOR_TYPE",
        "ALLOW_MULTIPLE_LIBTPU_LOAD",
    ):
        monkeypatch.setenv(name, "")  # recorded, so that what prepare_environment sets is undone after the test
        monkeypatch.delenv(name)
    tpu_aot.prepare_environment()
    env = os.environ
    assert env["TPU_SKIP_MDS_QUERY"] == "1" and env["TPU_WORKER_HOSTNAMES"] == "localhost"
    assert env["TPU_ACCELERATOR_TYPE"] == "v5litepod-8" and env["ALLOW_MULTIPLE_LIBTPU_LOAD"] == "1"
    # JAX reads JAX_PLATFORMS once, when it loads: set only while it has not (the main lane has no jax)
    assert env.get("JAX_PLATFORMS") == (None if "jax" in sys.modules else "cpu")


def test_what_the_user_already_set_in_the_environment_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TPU_ACCELERATOR_TYPE", "v6e-8")
    monkeypatch.setenv("JAX_PLATFORMS", "cpu,tpu")
    for name in ("TPU_SKIP_MDS_QUERY", "TPU_WORKER_HOSTNAMES", "ALLOW_MULTIPLE_LIBTPU_LOAD"):
        monkeypatch.setenv(name, os.environ.get(name, ""))  # restored after the test, whatever prepare_environment sets
    tpu_aot.prepare_environment()
    env = os.environ
    assert env["TPU_ACCELERATOR_TYPE"] == "v6e-8" and env["JAX_PLATFORMS"] == "cpu,tpu"


# -- the mesh over the slice's devices ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mesh", "devices", "resolved"),
    [
        (None, 8, {"dp": 8}),
        ({}, 4, {"dp": 4}),
        ({"fsdp": -1}, 8, {"fsdp": 8}),
        ({"dp": 2, "tp": -1}, 8, {"dp": 2, "tp": 4}),
        ({"dp": 2, "fsdp": 2, "tp": 2}, 8, {"dp": 2, "fsdp": 2, "tp": 2}),
    ],
)
def test_the_mesh_defaults_to_data_parallel_over_every_device_and_resolves_minus_one(
    mesh: dict | None, devices: int, resolved: dict
) -> None:
    assert tpu_aot._degrees(mesh, devices) == resolved


def test_a_mesh_axis_the_check_does_not_know_is_named_with_the_ones_it_does() -> None:
    with pytest.raises(AnyDeviceError) as info:
        tpu_aot._degrees({"dp": 2, "pp": 4}, 8)
    assert info.value.message == "Mesh axis 'pp' is not one the compiled check knows."
    assert all(axis in (info.value.hint or "") for axis in ("dp", "fsdp", "tp"))


def test_degrees_that_do_not_fit_the_slice_say_how_many_devices_it_has() -> None:
    with pytest.raises(AnyDeviceError) as info:
        tpu_aot._degrees({"dp": 3, "tp": -1}, 8)
    assert info.value.message.endswith("(the slice has 8 devices)") and "does not divide the world size 8" in info.value.message
    assert "8" in (info.value.hint or "")
    with pytest.raises(AnyDeviceError, match=r"but the world size is 8\. \(the slice has 8 devices\)"):
        tpu_aot._degrees({"dp": 2, "fsdp": 2}, 8)


# -- the tensor-parallel dimensions -------------------------------------------------------------------------------


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(32, 8)
        self.up = torch.nn.Linear(8, 16)
        self.down = torch.nn.Linear(16, 8)
        self.head = torch.nn.Linear(8, 32, bias=False)
        self.norm = torch.nn.LayerNorm(8)


def test_without_a_tp_axis_nothing_is_split_and_the_plan_is_not_read() -> None:
    assert tpu_aot._tp_dims(Block(), {"no_such_module": "colwise"}, 1) == {}


def test_colwise_splits_weight_and_bias_rows_rowwise_splits_weight_columns_only() -> None:
    plan = {"up": "colwise", "down": "rowwise", "head": "colwise_rep", "norm": "replicated"}
    assert tpu_aot._tp_dims(Block(), plan, 2) == {"up.weight": 0, "up.bias": 0, "down.weight": 1, "head.weight": 0}


@pytest.mark.parametrize(("style", "dim"), [("embedding_colwise", 1), ("embedding_rowwise", 0)])
def test_an_embedding_is_split_on_its_dim_or_its_vocabulary(style: str, dim: int) -> None:
    assert tpu_aot._tp_dims(Block(), {"embed": style}, 4) == {"embed.weight": dim}


def test_a_tp_degree_that_does_not_divide_a_split_weight_names_it() -> None:
    with pytest.raises(
        AnyDeviceError, match=r"up\.weight dimension 0 has size 16, not divisible by the tensor-parallel degree 3"
    ):
        tpu_aot._tp_dims(Block(), {"up": "colwise"}, 3)


def test_a_plan_that_names_no_module_is_refused_before_lowering() -> None:
    with pytest.raises(AnyDeviceError, match=r"The plan's glob 'mlp\.up' matches no module of Block"):
        tpu_aot._tp_dims(Block(), {"mlp.up": "colwise"}, 2)


# -- the loss the step differentiates -----------------------------------------------------------------------------


def test_an_output_with_its_own_loss_is_the_loss_whatever_was_recognised() -> None:
    own = torch.tensor(2.5)
    out = types.SimpleNamespace(loss=own, logits=torch.randn(2, 3))  # a transformers ModelOutput has .loss and .logits
    assert tpu_aot._loss_value(out, StepLoss("cross_entropy"), [torch.zeros(2, dtype=torch.long)]) is own


def test_a_scalar_output_is_taken_as_the_loss_in_float32() -> None:
    value = tpu_aot._loss_value(torch.tensor(1.5, dtype=torch.bfloat16), StepLoss("sum"), [])
    assert value.dtype == torch.float32 and value.item() == 1.5


def test_the_model_kind_takes_the_first_tensor_of_a_tuple() -> None:
    first, second = torch.tensor([1.0, 2.0]), torch.tensor(7.0)
    value = tpu_aot._loss_value(("not a tensor", first, second), StepLoss("model"), [])
    assert torch.equal(value, first)


def test_cross_entropy_flattens_the_logits_against_the_batch_targets() -> None:
    logits, targets = torch.randn(2, 3, 5), torch.randint(0, 5, (2, 3))
    value = tpu_aot._loss_value(logits, StepLoss("cross_entropy"), [targets.int()])  # targets arrive as int32 on TPU
    assert torch.allclose(value, F.cross_entropy(logits.reshape(6, 5), targets.reshape(6)))


def test_mse_compares_the_first_output_with_the_batch_target_in_float32() -> None:
    out, target = torch.randn(4, 2, dtype=torch.bfloat16), torch.randn(4, 2)
    value = tpu_aot._loss_value({"pred": out, "aux": torch.ones(1)}, StepLoss("mse"), [target])
    assert value.dtype == torch.float32 and torch.allclose(value, F.mse_loss(out.float(), target))


def test_an_unrecognised_loss_sums_every_floating_output_and_skips_integer_ones() -> None:
    out = {"a": torch.ones(2, 3), "ids": torch.arange(4), "b": torch.full((2,), 0.5, dtype=torch.bfloat16)}
    assert tpu_aot._loss_value(out, StepLoss("sum"), []).item() == 7.0
    # a cross-entropy with no target tensor to compare against falls back to the same sum
    assert tpu_aot._loss_value([torch.ones(3), torch.ones(2)], StepLoss("cross_entropy"), []).item() == 5.0


# -- torch overloads removed since torchax was written ------------------------------------------------------------


def test_a_removed_named_tensor_overload_reads_as_a_placeholder_only_inside_the_block() -> None:
    prod = torch.ops.aten.prod
    if hasattr(prod, "dim_Dimname"):
        pytest.skip(f"torch {torch.__version__} still has aten::prod.dim_Dimname (removed in 2.13)")
    with pytest.raises(AttributeError):
        getattr(prod, "dim_Dimname")  # removed in torch 2.13 (torchax 0.0.13 still names it)
    with tpu_aot._tolerate_removed_overloads():
        placeholder = prod.dim_Dimname
        assert repr(placeholder) == "<overload aten::prod.dim_Dimname removed from torch>"
        assert placeholder.name == "aten::prod.dim_Dimname"
        assert prod.dim_int is torch.ops.aten.prod.dim_int  # an overload torch has is the real one
        with pytest.raises(AttributeError):
            getattr(prod, "no_such_overload")  # any other missing name still raises
    with pytest.raises(AttributeError):
        getattr(prod, "dim_Dimname")


def test_the_original_lookup_is_restored_when_the_block_raises() -> None:
    original = torch._ops.OpOverloadPacket.__getattr__
    with pytest.raises(RuntimeError, match="lowering failed"), tpu_aot._tolerate_removed_overloads():
        assert torch._ops.OpOverloadPacket.__getattr__ is not original
        raise RuntimeError("lowering failed")
    assert torch._ops.OpOverloadPacket.__getattr__ is original


# -- a refusal from the compiler becomes the answer ---------------------------------------------------------------


def test_out_of_memory_is_the_compilers_verdict_with_its_figures() -> None:
    result = tpu_aot._failed(blank_result(), RuntimeError(OOM_WIDE), per_chip=1)
    assert result["error"] == OOM_WIDE
    assert result["fits"] is False and result["ok"] is False
    assert result["required_bytes"] == 16 * GIB
    assert result["capacity_bytes"] == int(15.75 * GIB) == V5E_CAPACITY  # the probe's capacity agrees with the OOM's
    assert "error_line" not in result  # the compiler's verdict, not a line of the user's code


def test_out_of_memory_figures_are_per_chip_where_a_chip_has_two_devices() -> None:
    """v4 and v7x count one device per TensorCore (v4:2x2x1 has 8 devices on 4 chips): per chip is twice the device's."""
    result = tpu_aot._failed(blank_result(), RuntimeError(OOM_TERABYTE), per_chip=2)
    assert result["required_bytes"] == 2 * 2**40 and result["capacity_bytes"] == 2 * V5E_CAPACITY


def test_host_memory_running_out_leaves_the_slices_answer_unknown() -> None:
    result = tpu_aot._failed(blank_result(), MemoryError(), per_chip=1)
    assert "out of host memory" in result["error"] and "unknown" in result["error"]
    assert "fits" not in result and "required_bytes" not in result


def test_a_lowering_error_keeps_its_type_first_line_and_the_users_line() -> None:
    exc = raise_in_user_code(IndexError(BOOLEAN_MASK))
    result = tpu_aot._failed(blank_result(), exc, per_chip=1)
    assert result["error"] == "IndexError: Array boolean indices must be concrete; got bool[64,16]"
    assert result["error_line"] == USER_LINE
    assert "fits" not in result  # no verdict: the step never reached the compiler's memory planning


def test_an_op_without_a_lowering_is_named_once() -> None:
    result = tpu_aot._failed(blank_result(), raise_in_user_code(RuntimeError(NO_LOWERING)), per_chip=1)
    assert result["error"] == f"RuntimeError: {NO_LOWERING}"


def test_an_error_with_no_message_is_named_by_its_type() -> None:
    result = tpu_aot._failed(blank_result(), raise_in_user_code(NotImplementedError()), per_chip=1)
    assert result["error"] == "NotImplementedError"  # not "NotImplementedError: NotImplementedError"


# -- the user's line in a traceback -------------------------------------------------------------------------------


def test_the_users_line_skips_anydevice_frames_for_the_innermost_user_frame() -> None:
    try:
        tpu_aot._degrees({"pp": 2}, 8)  # raised inside shims/: the line the user wrote is this one
    except AnyDeviceError as exc:
        caught = exc
    line = caught.__traceback__.tb_lineno  # type: ignore[union-attr]
    assert tpu_aot._user_line(caught) == f"{__file__}:{line}"


def test_generated_code_is_not_the_users_line() -> None:
    try:
        exec(compile("raise ValueError('in generated code')", "<generated>", "exec"))
    except ValueError as exc:
        caught = exc
    line = caught.__traceback__.tb_lineno  # type: ignore[union-attr]
    assert tpu_aot._user_line(caught) == f"{__file__}:{line}"


def test_only_a_site_packages_folder_hides_a_frame_not_a_name_containing_it(tmp_path: Path) -> None:
    """Frames are matched by path components: an installed library's frame is skipped, a user's folder whose name
    merely contains "site-packages" is not."""
    script = str(tmp_path / "my-site-packages-notes" / "train.py")
    try:
        exec(compile("raise ValueError('in the user script')", script, "exec"))
    except ValueError as exc:
        caught = exc
    assert tpu_aot._user_line(caught) == f"{script}:1"
    library = str(tmp_path / "site-packages" / "lib.py")
    try:
        exec(compile("raise ValueError('in an installed library')", library, "exec"))
    except ValueError as exc:
        caught = exc
    line = caught.__traceback__.tb_lineno  # type: ignore[union-attr]
    assert tpu_aot._user_line(caught) == f"{__file__}:{line}"


def test_an_exception_never_raised_has_no_users_line() -> None:
    assert tpu_aot._user_line(RuntimeError("built, not raised")) is None
