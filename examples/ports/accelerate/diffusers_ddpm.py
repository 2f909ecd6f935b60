"""Train a tiny UNet2DModel a few steps, then sample with DDPMPipeline."""

import json
import sys

import torch
import torch.nn.functional as F
from accelerate import Accelerator
from diffusers import DDPMPipeline, DDPMScheduler, UNet2DModel


def main(steps: int) -> None:
    accelerator = Accelerator()
    torch.manual_seed(0)
    model = UNet2DModel(
        sample_size=8,
        in_channels=1,
        out_channels=1,
        layers_per_block=1,
        block_out_channels=(8, 16),
        down_block_types=("DownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "UpBlock2D"),
        norm_num_groups=4,
    )
    scheduler = DDPMScheduler(num_train_timesteps=10)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, opt = accelerator.prepare(model, opt)
    data = torch.Generator().manual_seed(0)
    images = torch.randn(8, 1, 8, 8, generator=data)
    losses = []
    for _ in range(steps):
        noise = torch.randn(images.shape, generator=data)
        t = torch.randint(0, 10, (images.shape[0],), generator=data)
        noisy = scheduler.add_noise(images, noise, t)
        device = accelerator.device
        loss = F.mse_loss(model(noisy.to(device), t.to(device)).sample, noise.to(device))
        accelerator.backward(loss)
        opt.step()
        opt.zero_grad()
        losses.append(loss.detach())
    pipe = DDPMPipeline(unet=accelerator.unwrap_model(model), scheduler=scheduler).to(accelerator.device)
    pipe.set_progress_bar_config(disable=True)
    image = pipe(batch_size=1, generator=torch.Generator().manual_seed(0), num_inference_steps=3, output_type="np").images
    result = {"losses": [x.item() for x in losses], "sample_sum": float(image.sum())}
    if "--no-offload" not in sys.argv:
        pipe.enable_model_cpu_offload(device=accelerator.device)  # the UNet waits on the CPU, moves to the device for its forward
        offloaded = pipe(batch_size=1, generator=torch.Generator().manual_seed(0), num_inference_steps=3, output_type="np").images
        result["offloaded_sum"] = float(offloaded.sum())
    print(json.dumps({**result, "device": str(next(model.parameters()).device)}))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
