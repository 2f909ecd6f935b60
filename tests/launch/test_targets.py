"""``anydevice launch --target``: hosts, chips per host, processes and topology read from the chips catalogue, and
every shape the catalogue does not hold refused in one line with the valid choices."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

import pytest

from anydevice.contract.chips import Chip, SliceShape
from anydevice.errors import SelectionError
from anydevice.launch_specs import Plan, parse_target, write
from anydevice.plugin import hookimpl
from anydevice.runtime.registry import Registry, get_registry
from tests.utils import TRAIN, cli_in_process


@pytest.mark.parametrize(
    ("text", "hosts", "chips_per_host", "processes", "topology", "accelerator_type"),
    [
        ("tpu:v5e-8", 1, 8, 8, "2x4", "v5litepod-8"),
        ("tpu:v5e-16", 4, 4, 4, "4x4", "v5litepod-16"),
        ("tpu:v5litepod-16", 4, 4, 4, "4x4", "v5litepod-16"),
        ("tpu:v5p-16", 2, 4, 4, "2x2x2", "v5p-16"),
        ("tpu:v6e-32", 8, 4, 4, "4x8", "v6e-32"),
        ("tpu:v7x-16", 2, 4, 8, "2x2x2", "tpu7x-16"),  # v7x: 2 devices per chip, counted in cores
        ("cuda:h100x8", 1, 8, 8, None, None),
        ("cuda:h100x8x2", 2, 8, 8, None, None),
        ("neuron:trn2-16", 1, 16, 64, None, None),  # trn2.48xlarge: 16 chips, 4 logical NeuronCores each
        ("neuron:trn2-16x2", 2, 16, 64, None, None),
        ("cpu", 1, 0, 1, None, None),
        ("cpu:1x2", 2, 0, 1, None, None),
    ],
)
def test_a_target_is_read_from_the_catalogue(
    text: str, hosts: int, chips_per_host: int, processes: int, topology: str | None, accelerator_type: str | None
) -> None:
    target = parse_target(text)
    assert (target.hosts, target.chips_per_host, target.processes) == (hosts, chips_per_host, processes)
    assert (target.topology, target.accelerator_type) == (topology, accelerator_type)
    assert target.multi_host is (hosts > 1)


@pytest.mark.parametrize(
    ("text", "said", "choices"),
    [
        ("tpu:v5e-12", "no v5e slice has 12 chips", "tpu:v5e-16"),
        ("tpu:v5e-0", "asks for 0 chips", "tpu:v5e-8"),
        ("tpu:v5p-12", "no v5p slice has 12 cores", "tpu:v5p-16"),
        ("tpu:v5e-16x2", "several slices (multislice) are not written", "one larger slice"),
        ("tpu:v9z-8", "Unknown tpu chip 'v9z'", "Known tpu chips: v4, v5e, v5p, v6e, v7x"),
        ("tpu:v6f-8", "Unknown tpu chip 'v6f'", "Did you mean 'v6e'?"),
        ("tpu", "a launch target names a chip and a count, or a slice", "tpu:v5e-8"),
        ("tpu:v5e-１６", "write it with the ASCII digits 0-9", "tpu:v5e-8"),  # a full-width digit is not a count
        ("cuda:h100x9", "no h100 slice has 9 chips", "cuda:h100-8"),
        ("cuda:h100x8x0", "0 hosts is outside", "x2"),
        ("cpu:2", "cpu:2 is a device index, not a launch target", "cpu:1x2"),
        ("tpuu:v5e-8", "Unknown device", "tpu"),
    ],
)
def test_an_impossible_shape_is_refused_with_the_choices(text: str, said: str, choices: str) -> None:
    with pytest.raises(SelectionError) as info:
        parse_target(text)
    message = str(info.value) + " " + str(getattr(info.value, "fix", "") or "")
    assert said in message and choices in message, message


def test_the_cli_refuses_a_bad_target_in_one_line_without_a_traceback() -> None:
    result = cli_in_process("launch", str(TRAIN), "--target", "tpu:v5e-12", "--emit", "jobset")
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.startswith("anydevice: error: 'tpu:v5e-12': no v5e slice has 12 chips")
    assert "Valid: tpu:v5e-1, tpu:v5e-4, tpu:v5e-8, tpu:v5e-16" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--emit", "jobset"], "No --target given."),
        (["--target", "cpu"], "No --emit given."),
        (["--target", "cpu", "--emit", "nomad"], "--emit 'nomad' is not an engine anydevice writes for."),
        (["--target", "cpu", "--emit", "slurm", "--name", "Bad_Name"], "--name 'Bad_Name' is not a job name"),
        (["--target", "cpu", "--emit", "slurm", "--port", "70000"], "--port 70000 is not a port"),
        (["--target", "cpu", "--emit", "slurm", "--check", "--no-check"], "--check and --no-check contradict"),
    ],
)
def test_usage_errors_are_one_line(args: list[str], said: str) -> None:
    result = cli_in_process("launch", str(TRAIN), *args)
    assert result.returncode == 2, result.stderr
    assert said in result.stderr.splitlines()[0]


def test_a_missing_script_and_an_existing_out_file_are_refused(tmp_path: Any) -> None:
    missing = cli_in_process("launch", "nope.py", "--target", "cpu", "--emit", "slurm")
    assert missing.returncode == 2 and "No such script: nope.py." in missing.stderr
    out = tmp_path / "job.sbatch"
    out.write_text("keep me\n")
    kept = cli_in_process("launch", str(TRAIN), "--target", "cpu", "--emit", "slurm", "--out", str(out))
    assert kept.returncode == 2 and f"--out {out} exists." in kept.stderr
    assert out.read_text() == "keep me\n"
    replaced = cli_in_process("launch", str(TRAIN), "--target", "cpu", "--emit", "slurm", "--out", str(out), "--force")
    assert replaced.returncode == 0, replaced.stderr
    assert out.read_text().startswith("#!/bin/bash\n")


def _with_chip(chip: Chip) -> Registry:
    """A registry whose tpu plugin's catalogue also holds ``chip`` (every other fact the built-in plugin's)."""
    spec = get_registry().get("tpu").spec
    changed = dataclasses.replace(spec, chips=(*spec.chips, chip))

    @hookimpl
    def anydevice_register_devices(register: Any) -> None:
        register(changed)

    return Registry([("tpu", SimpleNamespace(anydevice_register_devices=anydevice_register_devices), "anydevice")])


@dataclasses.dataclass(frozen=True)
class _GkeChip(Chip):
    gke_accelerator: str | None = None
    """GKE's node label for the slice (read from the catalogue entry where it declares one)."""


def test_a_new_generation_in_the_catalogue_reaches_the_jobset() -> None:
    """A fictitious generation added to the catalogue: its hosts, chips per host and topology are in the JobSet."""
    yaml = pytest.importorskip("yaml")
    v9z = _GkeChip(
        "v9z",
        "TPU v9z",
        "a test's fictitious generation",
        "2026-12-07",
        shapes=(SliceShape(8, "2x4"), SliceShape(48, "4x4x3", hosts=6)),
        topology_prefix="v9z",
        accelerator_type="v9zpod",
        gke_accelerator="tpu-v9z-slice",
    )
    target = parse_target("tpu:v9z-48", _with_chip(v9z))
    assert (target.hosts, target.chips_per_host, target.topology) == (6, 8, "4x4x3")
    spec = yaml.safe_load(write("jobset", Plan(target, "train.py", name="v9z")))
    job = spec["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert job["parallelism"] == job["completions"] == 6
    pod = job["template"]["spec"]
    assert pod["nodeSelector"] == {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v9z-slice",
        "cloud.google.com/gke-tpu-topology": "4x4x3",
    }
    assert pod["containers"][0]["resources"]["limits"] == {"google.com/tpu": 8}
    assert "anydevice run -n 8 --nnodes 6 " in pod["containers"][0]["command"][2]
