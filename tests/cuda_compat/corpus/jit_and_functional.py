"""TorchScript, torch.func, activation checkpointing, hooks, parametrizations, autocast on the CPU, grad clipping."""

import _digest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint


@torch.jit.script
def scripted(x: torch.Tensor) -> torch.Tensor:
    return torch.zeros(x.shape[0]) + torch.arange(x.shape[0]).float() * x.sum()


torch.manual_seed(0)
x = torch.randn(4, 8, generator=torch.Generator().manual_seed(1))
_digest.record("jit.script", scripted(x))
_digest.record("jit.trace", torch.jit.trace(nn.Linear(8, 2), x)(x))
model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
seen = []
model[0].register_forward_hook(lambda module, args, out: seen.append(out.sum()))
params = {k: v.detach() * 2 for k, v in model.named_parameters()}
_digest.record("func.functional_call", torch.func.functional_call(model, params, (x,)))
_digest.record("func.grad", torch.func.grad(lambda t: (t**2).sum())(x))
out = checkpoint(model, x, use_reentrant=False)
out.sum().backward()
_digest.record("checkpoint.grads", [p.grad for p in model.parameters()] + seen)
norm = nn.utils.clip_grad_norm_(model.parameters(), 0.1)
_digest.record("clip_grad_norm", norm)
weighted = nn.utils.parametrizations.weight_norm(nn.Linear(8, 3))
_digest.record("weight_norm", weighted(x))
with torch.autocast("cpu", dtype=torch.bfloat16):
    _digest.record("autocast.cpu", [model(x), torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")])
_digest.done()
