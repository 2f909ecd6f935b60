"""torch.compile (eager, aot_eager and inductor backends) forward and backward; torch.save/torch.load round trips."""

import io
import tempfile
from pathlib import Path

import _digest
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
x = torch.randn(4, 8, generator=torch.Generator().manual_seed(1))
for backend in ("eager", "aot_eager", "inductor"):
    compiled = torch.compile(model, backend=backend)
    out = compiled(x)
    out.sum().backward()
    _digest.record(f"compile.{backend}", [out, [p.grad for p in model.parameters()]])
    model.zero_grad()


@torch.compile(fullgraph=True, backend="eager")
def branchy(t: torch.Tensor) -> torch.Tensor:
    return t * 2 if torch.cuda.is_available() else t - 1


_digest.record("compile.branch_matches_eager", bool(torch.equal(branchy(x), x * 2 if torch.cuda.is_available() else x - 1)))
state = {"model": model.state_dict(), "step": 3, "nested": [torch.arange(4), {"t": torch.ones(2, dtype=torch.bfloat16)}]}
buffer = io.BytesIO()
torch.save(state, buffer)
buffer.seek(0)
_digest.record("load.bytes", torch.load(buffer))
with tempfile.TemporaryDirectory() as d:
    path = Path(d) / "state.pt"
    torch.save(state, path)
    _digest.record("load.file", torch.load(path, map_location="cpu", weights_only=True))
    _digest.record("load.unsafe", torch.load(path, weights_only=False))
_digest.done()
