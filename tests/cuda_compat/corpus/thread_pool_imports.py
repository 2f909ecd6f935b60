"""A thread pool imports the program's modules at start-up (each `import torch`), before the main thread does."""

import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from importlib import import_module
from pathlib import Path

MODULE = """
import torch
torch.manual_seed({i})
DEVICE = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else torch.device("cpu")
VALUE = (torch.randn(4, generator=torch.Generator().manual_seed({i})) * {i}).to(DEVICE)
"""
folder = Path(tempfile.mkdtemp())
for i in range(8):
    (folder / f"part_{i}.py").write_text(MODULE.format(i=i))
sys.path.insert(0, str(folder))
with ThreadPoolExecutor(max_workers=8) as pool:
    parts = list(pool.map(import_module, [f"part_{i}" for i in range(8)]))

import _digest  # noqa: E402 - after the pool: the pool's imports are the first of torch

_digest.record("values", [p.VALUE for p in parts])
_digest.record("devices", [str(p.DEVICE) for p in parts])
_digest.done()
