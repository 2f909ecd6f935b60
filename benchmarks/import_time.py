"""Import, selection and plugin-discovery cost of anydevice, beside what peers add to ``import torch``.

    python benchmarks/import_time.py [--rounds 7] [--plugins 50]

Every measurement is a fresh interpreter; cases run in rotated rounds (benchmarks/rotate.py) and
the JSON gives medians with spread. Cases:

* ``import anydevice`` alone, ``import torch``, and anydevice imported after torch (what it adds);
* selection: the first ``anydevice.device()`` after the imports, with ``ANYDEVICE=cpu`` and ``auto``
  (entry-point discovery, every plugin's registration, detection, the cpu plugin's shims);
* discovery: ``Registry().load()`` with the built-in plugins, then with ``--plugins`` extra
  dummy plugin distributions (generated in a temporary directory put on ``PYTHONPATH``: one
  module and one ``.dist-info`` with an ``anydevice`` entry point each), and selection with them;
* peers: ``import torch, accelerate`` and ``import torch, lightning_fabric`` (when installed).

Writes benchmarks/results/import_time.json.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import rotate

# Each snippet prints the seconds of the part it measures (``t`` starts after the setup part).
CASES: dict[str, tuple[str, str]] = {
    "python": ("", "pass"),
    "import anydevice": ("", "import anydevice"),
    "import torch": ("", "import torch"),
    "import anydevice after torch": ("import torch", "import anydevice"),
    "select cpu (first ad.device())": ("import torch, anydevice", "anydevice.device()"),
    "select auto (first ad.device())": ("import torch, anydevice", "anydevice.device()"),
    "discover built-in plugins": ("import torch; from anydevice.runtime.registry import Registry", "Registry().load()"),
    "discover +N plugins": ("import torch; from anydevice.runtime.registry import Registry", "r = Registry().load()"),
    "select cpu with +N plugins": ("import torch, anydevice", "anydevice.device()"),
    "import accelerate after torch": ("import torch", "import accelerate"),
    "import lightning_fabric after torch": ("import torch", "import lightning_fabric"),
}
NEEDS = {"import accelerate after torch": "accelerate", "import lightning_fabric after torch": "lightning_fabric"}

PLUGIN = """from anydevice.contract.device_spec import Detection, DeviceSpec
from anydevice.contract.hookspecs import hookimpl


def _load():
    raise RuntimeError("a dummy benchmark plugin is never selected")


@hookimpl
def anydevice_register_devices(register):
    register(DeviceSpec(name="{name}", detect=lambda: Detection.ok("dummy"), load=_load, priority=-10))
"""


def make_plugins(directory: Path, n: int) -> None:
    """Write ``n`` installed-looking plugin distributions (module + dist-info with an entry point)."""
    for i in range(n):
        name = f"benchdummy{i}"
        (directory / f"anydevice_{name}.py").write_text(PLUGIN.format(name=name))
        info = directory / f"anydevice_{name}-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: anydevice-{name}\nVersion: 0.1\n")
        (info / "entry_points.txt").write_text(f"[anydevice]\n{name} = anydevice_{name}\n")


def measure(setup: str, code: str, env: dict[str, str]) -> float:
    snippet = f"{setup}\nimport time\nt = time.perf_counter()\n{code}\nprint(time.perf_counter() - t)"
    out = subprocess.run([sys.executable, "-c", snippet], capture_output=True, text=True, env=env, timeout=300)
    if out.returncode != 0:
        raise RuntimeError(f"{code!r} failed:\n{out.stderr[-2000:]}")
    return float(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--plugins", type=int, default=50, help="dummy plugin distributions for the discovery cases")
    p.add_argument("--out", type=Path, help="JSON file (default benchmarks/results/import_time.json)")
    opts = p.parse_args(argv)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("ANYDEVICE", "PJRT"))}
    base.update(ANYDEVICE="cpu", ANYDEVICE_QUIET="1")
    skipped = {name: f"{m} is not installed" for name, m in NEEDS.items() if importlib.util.find_spec(m) is None}
    with tempfile.TemporaryDirectory() as tmp:
        make_plugins(Path(tmp), opts.plugins)
        plugged = {**base, "PYTHONPATH": os.pathsep.join(filter(None, [tmp, base.get("PYTHONPATH")]))}
        envs = {name: base for name in CASES}
        envs["select auto (first ad.device())"] = {**base, "ANYDEVICE": "auto"}
        envs["discover +N plugins"] = envs["select cpu with +N plugins"] = plugged
        check = "from anydevice.runtime.registry import Registry; r = Registry().load(); print(len(r.devices), len(r.failures))"
        found = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, env=plugged, check=True)
        devices, failures = map(int, found.stdout.split())
        cases = {name: c for name, c in CASES.items() if name not in skipped}
        samples = rotate.rotate({name: (lambda n=name: measure(*cases[n], envs[n])) for name in cases}, opts.rounds)
    summary = {name.replace("+N", f"+{opts.plugins}"): rotate.spread(v) for name, v in samples.items()}
    result: dict[str, Any] = {
        "benchmark": "import_time",
        "machine": rotate.machine(),
        "rounds": opts.rounds,
        "dummy_plugins": opts.plugins,
        "devices_registered_with_dummies": devices,
        "plugin_failures_with_dummies": failures,
        "skipped": skipped,
        "seconds": summary,
    }
    for name, s in summary.items():
        print(f"{name:<40} {s['median'] * 1e3:9.1f} ms  [{s['min'] * 1e3:.1f}..{s['max'] * 1e3:.1f}]")
    rotate.write("import_time", result, opts.out)
    print(json.dumps({k: round(v["median"], 4) for k, v in summary.items()}))
    return result


if __name__ == "__main__":
    main()
