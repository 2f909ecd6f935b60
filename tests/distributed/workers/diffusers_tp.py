"""Worker: a tiny random-init Diffusers transformer split by ad.distributed.parallelize against the unsplit model
(one process per rank under DTensor; one process over the host's devices on XLA SPMD).

argv: MODEL. ``qwenimage``: QwenImageTransformer2DModel with plan="auto" (the model's own ``_tp_plan``);
``flux``: FluxTransformer2DModel with its own plan's string entries for the double-stream blocks (its
single-stream blocks use a packed style anydevice does not lower); ``flux-pipeline``: that split transformer
inside a FluxPipeline (random-init VAE, prompt embeddings given: no text encoders, no downloads), two
denoising steps against the same pipeline with the unsplit transformer. Prints one JSON line per rank: the
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


def flux_pipeline(transformer: torch.nn.Module) -> Any:
    """A FluxPipeline around ``transformer``: a tiny random VAE, a scheduler, no text encoders (embeddings are given)."""
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, FluxPipeline

    vae = AutoencoderKL(
        in_channels=3, out_channels=3, latent_channels=1, block_out_channels=(8,), layers_per_block=1, norm_num_groups=8,
        down_block_types=("DownEncoderBlock2D",), up_block_types=("UpDecoderBlock2D",), shift_factor=0.0,
    )  # fmt: skip
    return FluxPipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(), vae=vae, text_encoder=None, tokenizer=None, text_encoder_2=None,
        tokenizer_2=None, transformer=transformer,
    )  # fmt: skip


def generate(pipe: Any, output_type: str) -> torch.Tensor:
    """Two denoising steps of a 8x8 image from fixed prompt embeddings and a seeded CPU generator."""
    g = torch.Generator().manual_seed(2)
    embeds = torch.randn(1, 4, 16, generator=g).to(ad.device())
    pooled = torch.randn(1, 16, generator=g).to(ad.device())
    out = pipe(
        prompt_embeds=embeds, pooled_prompt_embeds=pooled, height=8, width=8, num_inference_steps=2, guidance_scale=1.0,
        generator=g, output_type=output_type,
    )  # fmt: skip
    images: torch.Tensor = out.images
    return images.cpu()


def run_pipeline() -> None:
    """The split transformer runs a FluxPipeline's denoising loop: its latents and images equal the unsplit pipeline's."""
    torch.manual_seed(0)
    model, _, plan = flux()
    pipe = flux_pipeline(model).to(ad.device())
    pipe.set_progress_bar_config(disable=True)
    expected, expected_images = generate(pipe, "latent"), generate(pipe, "pt")
    mesh = ad.distributed.mesh({"tp": -1})
    split = ad.distributed.parallelize(copy.deepcopy(model), plan, mesh=mesh)
    pipe.transformer = split
    latents, images = generate(pipe, "latent"), generate(pipe, "pt")
    row = {
        "rank": ad.distributed.rank(),
        "mesh": ad.distributed.mesh_degrees(mesh),
        "max_diff": float((latents - expected).abs().max()),
        "scale": float(expected.abs().max()),
        "image_diff": float((images - expected_images).abs().max()),
        "image_shape": list(images.shape),
        "to_q": layout(split)["transformer_blocks.0.attn.to_q.weight"],
    }
    print(json.dumps(row), flush=True)
    del split, pipe
    ad.distributed.shutdown()


def main() -> None:
    if sys.argv[1] == "flux-pipeline":
        return run_pipeline()
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
