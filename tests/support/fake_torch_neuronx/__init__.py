"""FAKE torch-neuronx for tests: the one simulated vendor module in this repository.

torch-neuronx is not on PyPI and there is no Trainium here, so the neuron plugin is tested
against this faithful fake of the documented surface (AWS Neuron docs, TorchNeuron pages):
``import torch_neuronx`` registers the PrivateUse1 device ``neuron`` with a ``torch.neuron``
module, the process-group backend ``neuron`` and the ``torch.compile`` backend ``neuron``;
``torch_neuronx.memory_stats()``; ``torch_neuronx.profiling.NeuronConfig`` / ``ProfileMode``.

:func:`install` lays it out as a real distribution (``torch_neuronx-<version>.dist-info`` with
METADATA and a ``torch.backends`` entry point) in a target directory that tests put on
``PYTHONPATH`` of a subprocess, so the plugin's version branch (>= 2.10 native, older XLA-based)
runs against real package metadata. Nothing here is importable by the package itself.
"""

from __future__ import annotations

import shutil
from pathlib import Path

SOURCE = Path(__file__).parent / "torch_neuronx"
NATIVE = "2.14.0"  # native TorchNeuron
XLA_BASED = "2.9.0.2.10.1"  # an XLA-based release: torch 2.9.0 + Neuron 2.10.1


def install(target: Path, version: str = NATIVE, torch_requirement: str = "torch>=2.13,<2.15") -> Path:
    """Lay out the fake as installed distribution ``torch-neuronx==version`` under ``target``."""
    target.mkdir(parents=True, exist_ok=True)
    shutil.copytree(SOURCE, target / "torch_neuronx", ignore=shutil.ignore_patterns("__pycache__"), dirs_exist_ok=True)
    info = target / f"torch_neuronx-{version}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: torch-neuronx\nVersion: {version}\nSummary: FAKE torch-neuronx for anydevice tests\n"
        f"Requires-Dist: {torch_requirement}\n"
    )
    (info / "entry_points.txt").write_text("[torch.backends]\ntorch_neuronx = torch_neuronx:_autoload\n")
    (info / "top_level.txt").write_text("torch_neuronx\n")
    (info / "INSTALLER").write_text("anydevice-tests\n")
    (info / "RECORD").write_text("")
    return target


SIMULATED_PLUGIN = '''"""SIMULATED Neuron device (tests only): the built-in neuron plugin over the FAKE torch-neuronx.

There is no Trainium here, so this entry point stands in for the built-in ``neuron`` plugin's
hardware detection (``/dev/neuron*``) and hands everything else to it unchanged. Select it with
``ANYDEVICE_PLUGINS=cpu,neuron_simulated ANYDEVICE=neuron``; every result it produces is marked
fake (its evidence is a stand-in, ``neuron.EVIDENCE``: not verified on hardware).
"""

from anydevice.contract.device_spec import Detection, DeviceSpec
from anydevice.contract.hookspecs import hookimpl
from anydevice.plugins import neuron


def detect():
    return Detection.ok("SIMULATED: the fake torch-neuronx with no Neuron hardware", count=1, chip=None)


@hookimpl
def anydevice_register_devices(register):
    register(DeviceSpec(
        name="neuron", detect=detect, load=neuron.load, prepare_environment=neuron.prepare_environment,
        vendor_package="torch-neuronx", autoload_module="torch_neuronx", evidence=neuron.EVIDENCE,
        settings=neuron.NEURON_SETTINGS,  # SIMULATED neuron device over the fake torch-neuronx (tests only)
    ))
'''


def install_simulated_device(target: Path, version: str = NATIVE) -> Path:
    """:func:`install` plus a plugin distribution ``anydevice-neuron-simulated`` (entry point
    ``neuron_simulated``) whose ``neuron`` device skips the hardware check, for end-to-end runs."""
    install(target, version)
    (target / "anydevice_neuron_simulated.py").write_text(SIMULATED_PLUGIN)
    info = target / "anydevice_neuron_simulated-0.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: anydevice-neuron-simulated\nVersion: 0\n")
    (info / "entry_points.txt").write_text("[anydevice]\nneuron_simulated = anydevice_neuron_simulated\n")
    (info / "top_level.txt").write_text("anydevice_neuron_simulated\n")
    (info / "RECORD").write_text("")
    return target


if __name__ == "__main__":  # python tests/support/fake_torch_neuronx DIR: lay out both for a manual run
    import sys

    print(install_simulated_device(Path(sys.argv[1])))
