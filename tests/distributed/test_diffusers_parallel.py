"""ad.distributed.parallelize on Diffusers transformers (tiny random configs), 2 gloo ranks: output equals the unsplit model."""

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
