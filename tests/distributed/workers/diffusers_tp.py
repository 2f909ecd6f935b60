"""Worker: a tiny random-init Diffusers transformer split by ad.distributed.parallelize against the unsplit model
(one process per rank under DTensor; one process over the host's devices on XLA SPMD).

argv: MODEL. ``qwenimage``: QwenImageTransformer2DModel with plan="auto" (the model's own ``_tp_plan``);
``flux``: FluxTransformer2DModel with its own plan's string entries for the double-stream blocks (its
single-stream blocks use a packed style anydevice does not lower). Prints one JSON line per rank: the
largest output difference and the layout of one split weight (DTensor placements or the XLA sharding spec).
"""

from __future__ import annotations

import copy
import json
import sys
from typing import Any

import torch

import anydevice as ad
from anydevice.compat_matrix.parallel_job import layout

G = torch.Generator().manual_seed(1)
SHAPE = {"patch_size": 1, "in_channels": 4, "attention_head_dim": 8, "num_attention_heads": 2, "joint_attention_dim": 16}


def qwenimage() -> tuple[torch.nn.Module, dict[str, Any], Any]:
    from diffusers import QwenImageTransformer2DModel

    model = QwenImageTransformer2DModel(**SHAPE, out_channels=4, num_layers=2, axes_dims_rope=(4, 2, 2))
    inputs = {
        "hidden_states": torch.randn(2, 16, 4, generator=G),
        "encoder_hidden_states": torch.randn(2, 4, 16, generator=G),
        "encoder_hidden_states_mask": torch.ones(2, 4),
        "timestep": torch.tensor([0.5, 0.7]),
        "img_shapes": [(1, 4, 4)] * 2,
    }
    return model, inputs, "auto"


def flux() -> tuple[torch.nn.Module, dict[str, Any], Any]:
    from diffusers import FluxTransformer2DModel

    model = FluxTransformer2DModel(**SHAPE, num_layers=2, num_single_layers=1, pooled_projection_dim=16, axes_dims_rope=(4, 2, 2))
    inputs = {
        "hidden_states": torch.randn(2, 16, 4, generator=G),
        "encoder_hidden_states": torch.randn(2, 4, 16, generator=G),
        "pooled_projections": torch.randn(2, 16, generator=G),
        "timestep": torch.tensor([0.5, 0.7]),
        "img_ids": torch.randn(16, 3, generator=G),
        "txt_ids": torch.zeros(4, 3),
    }
    plan = {k: v for k, v in type(model)._tp_plan.items() if k.startswith("transformer_blocks.")}
    return model, inputs, plan


def main() -> None:
    torch.manual_seed(0)
    model, inputs, plan = {"qwenimage": qwenimage, "flux": flux}[sys.argv[1]]()
    model.eval()
    with torch.no_grad():
        expected = model(**inputs).sample
    mesh = ad.distributed.mesh({"tp": -1})  # before any tensor is on the device (XLA SPMD starts here)
    split = ad.distributed.parallelize(copy.deepcopy(model), plan, mesh=mesh)
    with torch.no_grad():
        out = split(**{k: v.to(ad.device()) if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}).sample
    row = {
        "rank": ad.distributed.rank(),
        "mesh": ad.distributed.mesh_degrees(mesh),
        "max_diff": float((out.cpu() - expected).abs().max()),
        "scale": float(expected.abs().max()),
        "to_q": layout(split)["transformer_blocks.0.attn.to_q.weight"],
    }
    print(json.dumps(row), flush=True)
    del split
    ad.distributed.shutdown()


if __name__ == "__main__":
    main()
