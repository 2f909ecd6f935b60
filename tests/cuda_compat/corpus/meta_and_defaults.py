"""torch.device contexts (meta, cpu), to_empty, set_default_device, set_default_dtype and generators."""

import _digest
import torch
from torch import nn

with torch.device("meta"):
    lazy = nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8))
    made = [torch.arange(3), torch.zeros(2), torch.empty(2, 2), torch.randn(2)]
_digest.record("meta.devices", [p.device.type for p in lazy.parameters()] + [t.device.type for t in made])
real = lazy.to_empty(device="cpu")
torch.manual_seed(0)
for module in real:
    module.reset_parameters()
_digest.record("to_empty", dict(real.named_parameters()))
torch.set_default_device("meta")
_digest.record("default_device.meta", [torch.ones(2).device.type, nn.Linear(2, 2).weight.device.type])
torch.set_default_device("cpu")
torch.manual_seed(1)
_digest.record("default_device.cpu", [torch.ones(2), nn.Linear(2, 2).weight])
torch.set_default_device(None)
torch.set_default_dtype(torch.float64)
torch.manual_seed(2)
_digest.record("default_dtype", [torch.randn(3), nn.Linear(2, 2).weight, torch.tensor([1.5])])
torch.set_default_dtype(torch.float32)
generator = torch.Generator().manual_seed(4)
_digest.record("generator", [torch.randn(3, generator=generator), isinstance(generator, torch.Generator), generator.device])
with torch.device("cpu"):
    _digest.record("cpu_context", torch.zeros(2).device.type)
_digest.record("linear_on_meta", nn.Linear(2, 2, device="meta").weight.device.type)
_digest.done()
