"""ad.export to LiteRT, for real: litert-torch converts, LiteRT's CPU interpreter runs the file (the litert lane)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

import anydevice as ad
from anydevice.errors import ExportError
from tests.export.conftest import entries

pytestmark = pytest.mark.litert
pytest.importorskip("litert_torch", reason="litert-torch is not installed: the litert lane (requirements/litert.txt) has it")

FP32 = 1e-4  # the stated float32 tolerance: |exported - torch| <= 1e-4 + 1e-4 * |torch|


def tiny_llama() -> torch.nn.Module:
    from llama import PRESETS, Llama, Logits

    torch.manual_seed(0)
    return Logits(Llama(PRESETS["tiny"].config))


def tokens(length: int = 64) -> torch.Tensor:
    from corpus import corpus_bytes

    return corpus_bytes()[:length].long().unsqueeze(0)


def test_the_main_jobs_model_exports_and_matches_pytorch_in_litert(tmp_path: Path) -> None:
    model = tiny_llama()
    compiled = ad.compile(ad.to(model))  # as anydevice leaves it: placed, compiled, in training mode
    exported = ad.export(compiled, (tokens(),), target="litert", path=tmp_path / "llama.tflite")
    assert (tmp_path / "llama.tflite").read_bytes()[4:8] == b"TFL3"
    assert exported.size_bytes == (tmp_path / "llama.tflite").stat().st_size
    assert [(s.shape, s.dtype) for s in exported.inputs] == [((1, 64), "int32")]  # int64 tokens become int32
    assert [(s.shape, s.dtype) for s in exported.outputs] == [((1, 64, 256), "float32")]
    assert exported.quantize is None and exported.versions["litert-torch"] == "0.10.0"
    check = exported.check
    assert check is not None and check.passed and (check.atol, check.rtol) == (FP32, FP32)
    assert check.max_abs_error < FP32
    assert model.training  # the caller's model is left as it was
    # the file itself, run again in LiteRT's interpreter on other tokens, still matches PyTorch
    other = tokens(128)[:, 64:]
    with torch.no_grad():
        want = model.eval()(other).numpy()
    got = exported(other)[0]
    assert abs(got - want).max() <= FP32 + FP32 * abs(want).max()
    assert "float32" in exported.summary() and "agrees with PyTorch" in exported.summary()


def test_a_small_transformers_model_exports_and_matches(tmp_path: Path) -> None:
    from anydevice.compat_matrix.probes_export import tiny_hf_llama

    torch.manual_seed(0)
    model = tiny_hf_llama()  # the matrix's export_litert_hf_llama probe model
    ids = torch.randint(0, 128, (1, 16), generator=torch.Generator().manual_seed(1))
    exported = ad.export(model, ids, path=tmp_path / "hf.tflite")
    assert exported.check is not None and exported.check.passed and exported.check.max_abs_error < FP32
    with torch.no_grad():
        want = model(ids).numpy()
    assert abs(exported(ids)[0] - want).max() < FP32 + FP32 * abs(want).max()


@pytest.mark.slow
def test_int8_export_reports_its_error_against_fp32(tmp_path: Path) -> None:
    model, x = tiny_llama(), tokens()
    fp32 = ad.export(model, x, path=tmp_path / "fp32.tflite")
    int8 = ad.export(model, x, path=tmp_path / "int8.tflite", quantize="int8")
    assert int8.quantize == "full_dynamic_recipe" and "quantized (full_dynamic_recipe)" in int8.summary()
    assert int8.size_bytes < fp32.size_bytes / 3  # int8 weights
    assert int8.check is not None and fp32.check is not None
    # against the same float32 PyTorch outputs: int8 moves them more than float32 does, within its stated tolerance
    assert fp32.check.max_abs_error < int8.check.max_abs_error <= int8.check.atol
    assert 1e-4 < int8.check.max_rel_error < 0.1


def test_disagreement_beyond_the_tolerance_is_an_error_and_writes_nothing(tmp_path: Path) -> None:
    with pytest.raises(ExportError, match="disagrees with PyTorch") as caught:
        ad.export(tiny_llama(), tokens(), path=tmp_path / "m.tflite", quantize="int8", tolerance=(1e-6, 0.0))
    assert "max |error|" in str(caught.value) and "Nothing was written" in str(caught.value)
    assert entries(tmp_path) == []


class Svd(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.linalg.svd(x)[1]  # LiteRT has no SVD


class ValueBranch(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:  # depends on the values, not the shapes
            return x * 2
        return x


def _line_of(text: str) -> str:
    return f"{__file__}:{next(i for i, line in enumerate(Path(__file__).read_text().splitlines(), 1) if text in line)}"


def test_an_op_litert_lacks_is_one_clear_error_naming_it_and_its_line(tmp_path: Path) -> None:
    with pytest.raises(ExportError) as caught:
        ad.export(Svd(), torch.randn(4, 4), path=tmp_path / "svd.tflite")
    error = caught.value
    assert error.construct == "the op aten._linalg_svd has no LiteRT lowering"
    assert error.where == _line_of("torch.linalg.svd(x)[1]")
    assert str(error).startswith(f"Cannot export the model to litert: {error.construct} at {error.where}. Nothing was written.")
    assert error.finding is not None  # the finding `anydevice check` reports, filed under its "ops" check
    assert (error.finding.check, error.finding.severity, error.finding.line) == ("ops", "error", error.where)
    assert error.finding.fix is not None and error.finding.fix.startswith("Replace aten._linalg_svd")
    assert entries(tmp_path) == []


def test_a_data_dependent_branch_is_named_with_its_line(tmp_path: Path) -> None:
    with pytest.raises(ExportError) as caught:
        ad.export(ValueBranch(), torch.randn(4, 4), path=tmp_path / "branch.tflite")
    assert caught.value.construct is not None and "data-dependent branch" in caught.value.construct
    assert caught.value.where == _line_of("if x.sum() > 0:")
    assert entries(tmp_path) == []


def test_an_earlier_export_is_replaced_and_another_file_is_refused(tmp_path: Path) -> None:
    model, x = torch.nn.Linear(8, 4), torch.randn(2, 8)
    target = tmp_path / "m.tflite"
    ad.export(model, x, path=target)
    first = target.read_bytes()
    with torch.no_grad():
        model.weight.add_(1.0)
    ad.export(model, x, path=target)
    assert target.read_bytes() != first and entries(tmp_path) == ["m.tflite"]
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    with pytest.raises(ExportError, match="not a LiteRT model"):
        ad.export(model, x, path=notes)
    assert notes.read_text() == "mine"


def test_ddp_and_fsdp2_wrapped_models_are_gathered_and_left_as_they_were(tmp_path: Path) -> None:
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    plain = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    x = torch.randn(3, 8)
    with torch.no_grad():
        want = plain(x).numpy()
    dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
    try:
        ddp = torch.nn.parallel.DistributedDataParallel(copy.deepcopy(plain))
        sharded = copy.deepcopy(plain)
        fully_shard(sharded[0])
        fully_shard(sharded)
        for name, model in (("ddp", ddp), ("fsdp", sharded)):
            exported = ad.export(model, x, path=tmp_path / f"{name}.tflite")
            assert abs(exported(x)[0] - want).max() < FP32, name
        assert type(sharded).__name__ == "FSDPSequential" and type(sharded[0].weight).__name__ == "DTensor"
    finally:
        dist.destroy_process_group()


class Reshape(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(4, -1) * 2  # holds only for batch 2: a dynamic batch cannot export


def test_a_dynamic_shape_the_exporter_refuses_is_named(tmp_path: Path) -> None:
    from torch.export import Dim

    with pytest.raises(ExportError) as caught:
        ad.export(Reshape(), torch.randn(2, 8), path=tmp_path / "dyn.tflite", dynamic_shapes=({0: Dim("batch")},))
    assert caught.value.construct == "a dynamic shape the exporter refuses"
    assert "Constraints violated (batch)" in str(caught.value) and entries(tmp_path) == []


class TiedHead(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(32, 8)
        self.head = torch.nn.Linear(8, 32, bias=False)
        self.head.weight = self.embed.weight  # tied, as many language models are

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.embed(ids)))


def test_tied_weights_export_with_their_values(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model, ids = TiedHead(), torch.randint(0, 32, (2, 5))
    exported = ad.export(model, ids, path=tmp_path / "tied.tflite")
    with torch.no_grad():
        want = model(ids).numpy()
    assert exported.check is not None and exported.check.passed
    assert abs(exported(ids)[0] - want).max() < FP32
