"""Issue 46's cuda-compat minors, as a user's script meets them: ``torch.cuda.default_generators[0]``, a
``torch.Generator`` subclass with its own ``__init__(self, seed)``, and a late ``cuda_compat.enable()``.

Each runs a real interpreter with the start-up hook alone (``ANYDEVICE_CUDA_COMPAT=1 python``), or none.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.utils import python

ON = {"ANYDEVICE": "cpu", "ANYDEVICE_CUDA_COMPAT": "1", "ANYDEVICE_QUIET": "1"}

SEEDS = """
import json

import torch


class Seeded(torch.Generator):  # its own __init__: the seed is its argument, never a device
    def __init__(self, seed):
        super().__init__()
        self.manual_seed(seed)


class Plain(torch.Generator):
    pass


default = torch.cuda.default_generators[0]  # as Megatron and apex's RNG trackers take it
default.manual_seed(7)
after_default = torch.rand(3).tolist()
torch.manual_seed(7)
seeded = Seeded(1234)
reference = torch.Generator().manual_seed(1234)
try:
    torch.cuda.default_generators[5]
    past = "no error"
except IndexError as exc:
    past = str(exc)
print(json.dumps({
    "default_is_cpu_generator": default is torch.default_generator,
    "same_draws": after_default == torch.rand(3).tolist(),
    "count": len(torch.cuda.default_generators),
    "past": past,
    "seeded": [str(seeded.device), seeded.initial_seed(), isinstance(seeded, torch.Generator)],
    "seeded_draws": torch.rand(2, generator=seeded).tolist() == torch.rand(2, generator=reference).tolist(),
    "plain_cuda": str(Plain(device="cuda").device),
}))
"""


def test_default_generators_and_a_seeded_generator_subclass_on_the_cpu(tmp_path: Path) -> None:
    script = tmp_path / "seeds.py"
    script.write_text(SEEDS)
    done = python(str(script), env=ON)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.splitlines()[-1])
    assert got == {
        "default_is_cpu_generator": True,  # on the host the CUDA generator's job is the CPU generator's
        "same_draws": True,
        "count": 1,
        "past": "torch.cuda.default_generators[5]: cuda-compat on cpu has 1 device(s), indices 0 to 0",
        "seeded": ["cpu", 1234, True],  # the seed reached __init__, not the device
        "seeded_draws": True,
        "plain_cuda": "cpu",
    }, got


LATE = """
import torch
from torch.cuda import device_count, is_available


def count(fn=device_count):
    return fn()


class Config:
    available = is_available


from anydevice import cuda_compat

cuda_compat.enable()
cuda_compat.enable()  # said once
print(device_count(), count(), Config.available())
"""


def test_a_late_enable_says_once_what_it_rebound_and_what_stays_real(tmp_path: Path) -> None:
    script = tmp_path / "late.py"
    script.write_text(LATE)
    done = python(str(script), env={"ANYDEVICE": "cpu", "ANYDEVICE_QUIET": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["1", "0", "False"]  # the global is redirected; the other two are torch's own
    said = [line for line in done.stderr.splitlines() if "enabled after the program bound torch's names" in line]
    assert len(said) == 1, done.stderr
    assert "rebound now: __main__.torch, __main__.device_count, __main__.is_available;" in said[0]
    assert "not redirected: __main__.count (default argument), __main__.Config.available (class attribute)." in said[0]


def test_an_early_enable_says_nothing_of_the_kind(tmp_path: Path) -> None:
    script = tmp_path / "early.py"
    script.write_text("import torch\nfrom torch.cuda import device_count\nprint(device_count())\n")
    done = python(str(script), env=ON)
    assert done.returncode == 0 and done.stdout.split() == ["1"], done.stderr[-3000:]
    assert "enabled after" not in done.stderr
