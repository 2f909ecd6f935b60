"""A Diffusers UNet (random tiny config) saved and loaded with from_pretrained: parameters, output, one train step."""

import tempfile

import _digest

_digest.need("diffusers")
import torch  # noqa: E402
from diffusers import UNet2DModel  # noqa: E402

torch.manual_seed(0)
config = {
    "sample_size": 8, "in_channels": 3, "out_channels": 3, "layers_per_block": 1, "block_out_channels": (8, 16),
    "down_block_types": ("DownBlock2D", "DownBlock2D"), "up_block_types": ("UpBlock2D", "UpBlock2D"), "norm_num_groups": 4,
}  # fmt: skip
with tempfile.TemporaryDirectory() as saved:
    UNet2DModel(**config).save_pretrained(saved)
    unet = UNet2DModel.from_pretrained(saved)
_digest.record("parameters", dict(unet.named_parameters()))
_digest.record("buffers", dict(unet.named_buffers()))
sample = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(1))
out = unet(sample, timestep=10).sample
_digest.record("output", out)
optimizer = torch.optim.Adam(unet.parameters(), lr=1e-3)
out.pow(2).mean().backward()
optimizer.step()
_digest.record("after_step", dict(unet.named_parameters()))
_digest.done()
