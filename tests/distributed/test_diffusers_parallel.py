"""ad.distributed.parallelize on Diffusers transformers (tiny random configs), 2 gloo ranks: output equals the unsplit model,
alone and inside a pipeline."""

from __future__ import annotations

import pytest

from tests.distributed.helpers import WORKERS, anydevice_run

pytest.importorskip("diffusers")


@pytest.mark.slow
@pytest.mark.parametrize("model", ["qwenimage", "flux"])
def test_a_split_diffusers_transformer_equals_the_unsplit_one(model: str) -> None:
    result = anydevice_run("-n", "2", WORKERS / "diffusers_tp.py", model, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = result.by_rank()
    assert sorted(rows) == [0, 1]
    for row in rows.values():
        assert row["mesh"] == {"tp": 2}
        assert row["to_q"] == "(Shard(dim=0),)"  # split, not replicated
        assert row["scale"] > 0.1 and row["max_diff"] < 1e-5


@pytest.mark.slow
def test_a_pipeline_runs_with_the_split_transformer() -> None:
    """FluxPipeline (random-init VAE, given prompt embeddings) with the split transformer: latents and images equal unsplit."""
    result = anydevice_run("-n", "2", WORKERS / "diffusers_tp.py", "flux-pipeline", timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = result.by_rank()
    assert sorted(rows) == [0, 1]
    for row in rows.values():
        assert row["mesh"] == {"tp": 2} and row["to_q"] == "(Shard(dim=0),)"
        assert row["image_shape"] == [1, 3, 8, 8]
        assert row["scale"] > 0.1 and row["max_diff"] < 1e-5 and row["image_diff"] < 1e-5, row


def test_auto_refuses_a_diffusers_plan_with_packed_styles(monkeypatch: pytest.MonkeyPatch) -> None:
    from diffusers import FluxTransformer2DModel

    import anydevice as ad
    from anydevice.errors import DistributedError

    monkeypatch.setenv("ANYDEVICE", "cpu")
    model = FluxTransformer2DModel(
        patch_size=1, in_channels=4, num_layers=1, num_single_layers=1, attention_head_dim=8, num_attention_heads=2,
        joint_attention_dim=16, pooled_projection_dim=16, axes_dims_rope=(4, 2, 2),
    )  # fmt: skip
    with pytest.raises(DistributedError, match=r"single_transformer_blocks\.\*\.proj_out \(PackedRowwiseParallel\)") as info:
        ad.distributed.parallelize(model, "auto")
    assert "transformer_blocks.*" in str(info.value.hint)
