"""Installs ``anydevice-cuda-compat.pth`` beside the package (wheel and ``pip install -e .``); the rest is pyproject.toml.

The .pth line costs one environment lookup per interpreter start and imports nothing unless
``ANYDEVICE_CUDA_COMPAT`` is set (see anydevice/startup.py).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.editable_wheel import editable_wheel

PTH = Path(__file__).resolve().parent / "anydevice" / "anydevice-cuda-compat.pth"


class BuildPyWithPth(build_py):
    """build_py, plus the .pth at the root of build_lib (the wheel's purelib)."""

    def run(self) -> None:
        super().run()
        self.copy_file(str(PTH), str(Path(self.build_lib) / PTH.name))

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), str(Path(self.build_lib) / PTH.name)]


class EditableWheelWithPth(editable_wheel):
    """editable_wheel, plus the .pth at the root of the editable wheel."""

    def _run_build_commands(self, dist_name: str, unpacked_wheel: Any, build_lib: Any, tmp_dir: Any) -> Any:
        result = super()._run_build_commands(dist_name, unpacked_wheel, build_lib, tmp_dir)
        shutil.copyfile(PTH, Path(unpacked_wheel) / PTH.name)
        return result


setup(cmdclass={"build_py": BuildPyWithPth, "editable_wheel": EditableWheelWithPth})
