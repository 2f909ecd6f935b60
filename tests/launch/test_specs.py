"""Each spec ``anydevice launch`` writes, loaded by its engine's own parser or schema.

- SkyPilot: ``sky.Task.from_yaml`` (its schema and resources parsing, offline) where SkyPilot is installed.
- JobSet: the Job and its pod template by the Kubernetes schema (``kubernetes-validate``, strict: no unknown
  field) where it is installed, and always the JobSet fields against ``jobset.x-k8s.io/v1alpha2`` as its API
  reference documents them (:data:`JOBSET_V1ALPHA2`, written here from the field list).
- SLURM: ``bash -n`` and the ``#SBATCH`` lines; the script runs under a stand-in srun in test_rehearsal.py.

Neither SkyPilot nor kubernetes-validate is in the main lane (SkyPilot brings ~450 MB of cloud clients); to run
those tests: ``pip install skypilot kubernetes-validate`` into a venv with anydevice, then pytest this file.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from anydevice.launch_specs import ENGINES, Plan, parse_target, write
from tests.utils import TRAIN, cli_in_process

yaml = pytest.importorskip("yaml")

TARGETS = ("tpu:v5e-8", "tpu:v5e-16", "tpu:v5p-16", "cuda:h100x8", "cuda:h100x8x2", "neuron:trn2-16", "cpu:1x2")
ARGS = ("--steps", "100", "--model", "tiny", "--note", 'it\'s a "quoted" $HOME')


def _plan(target: str) -> Plan:
    return Plan(parse_target(target), str(TRAIN), ARGS, name="train-7")


def _written(engine: str, target: str) -> str:
    """The spec as the command writes it (``--no-check``: this lane has no TPU compiler)."""
    result = cli_in_process("launch", str(TRAIN), *ARGS, "--target", target, "--emit", engine, "--no-check", "--name", "train-7")
    assert result.returncode == 0, result.stderr
    return result.stdout


_INT = {"type": "integer", "minimum": 0}
JOBSET_V1ALPHA2: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "jobset.x-k8s.io/v1alpha2"},
        "kind": {"const": "JobSet"},
        "metadata": {
            "type": "object",
            "required": ["name"],
            "properties": {
                "name": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "maxLength": 63},
                "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
            },
        },
        "spec": {
            "type": "object",
            "required": ["replicatedJobs"],
            "additionalProperties": False,
            "properties": {
                "failurePolicy": {"type": "object", "properties": {"maxRestarts": _INT}, "additionalProperties": False},
                "network": {
                    "type": "object",
                    "properties": {"enableDNSHostnames": {"type": "boolean"}, "subdomain": {"type": "string"}},
                    "additionalProperties": False,
                },
                "replicatedJobs": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "required": ["name", "template"],
                        "additionalProperties": False,
                        "properties": {
                            "name": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"},
                            "replicas": _INT,
                            "template": {"type": "object", "required": ["spec"]},
                        },
                    },
                },
                "successPolicy": {"type": "object"},
                "startupPolicy": {"type": "object"},
                "suspend": {"type": "boolean"},
                "managedBy": {"type": "string"},
                "ttlSecondsAfterFinished": _INT,
                "coordinator": {"type": "object"},
            },
        },
    },
}
"""The JobSet v1alpha2 fields this spec uses, with the API reference's types; the Job template is Kubernetes'
own ``batch/v1`` JobTemplateSpec, checked by kubernetes-validate below."""


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("target", TARGETS)
def test_every_spec_says_what_it_asks_for_and_parses(engine: str, target: str) -> None:
    text = _written(engine, target)

    def body(spec: str) -> list[str]:
        return [line for line in spec.splitlines() if not line.startswith("# ")]

    assert body(text) == body(write(engine, _plan(target)))  # the command writes what the library writes
    t = parse_target(target)
    said = [line for line in text.splitlines() if line.startswith("# anydevice launch ")]
    assert (
        len(said) == 1
        and f"on {t.text} ({t.hosts} host(s)" in said[0]
        and f"anydevice run -n {t.processes} on each host" in said[0]
    )
    if engine != "slurm":
        assert isinstance(yaml.safe_load(text), dict)


@pytest.mark.parametrize("target", TARGETS)
def test_the_jobset_holds_the_slice_and_the_api_fields(target: str) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    spec = yaml.safe_load(_written("jobset", target))
    jsonschema.validate(spec, JOBSET_V1ALPHA2)
    t = parse_target(target)
    job = spec["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert (job["parallelism"], job["completions"], job["completionMode"]) == (t.hosts, t.hosts, "Indexed")
    pod = job["template"]["spec"]
    container = pod["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["ANYDEVICE"] == t.device
    script = container["command"][2]
    if t.multi_host:
        assert env["ANYDEVICE_COORDINATOR"] == "train-7-workers-0-0.train-7"  # JobSet's headless service: <js>-<rj>-0-0.<js>
        assert f'--nnodes {t.hosts} --node-rank "$JOB_COMPLETION_INDEX" --rdzv-endpoint "$ANYDEVICE_COORDINATOR":29400' in script
    else:
        assert "--nnodes" not in script
    assert f"anydevice run -n {t.processes} " in script
    if t.slice:
        assert pod["nodeSelector"]["cloud.google.com/gke-tpu-topology"] == t.topology
        assert pod["hostNetwork"] is True
        assert container["resources"]["limits"] == {"google.com/tpu": t.chips_per_host}


@pytest.mark.launch_tools
@pytest.mark.parametrize("target", TARGETS)
def test_the_job_and_pod_template_pass_the_kubernetes_schema(target: str) -> None:
    validate = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate to run it")
    spec = yaml.safe_load(_written("jobset", target))
    replicated = spec["spec"]["replicatedJobs"][0]
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": replicated["name"]},
        "spec": replicated["template"]["spec"],
    }
    validate.validate(job, validate.latest_version(), strict=True)  # strict: an unknown or misspelt field fails


@pytest.mark.launch_tools
@pytest.mark.parametrize("target", TARGETS)
def test_skypilot_loads_the_task(target: str, tmp_path: Path) -> None:
    sky = pytest.importorskip("sky", reason="pip install skypilot to run it")
    path = tmp_path / "task.yaml"
    path.write_text(_written("skypilot", target))
    task = sky.Task.from_yaml(str(path))
    t = parse_target(target)
    assert task.name == "train-7"
    assert task.num_nodes == (1 if t.slice else t.hosts)  # a TPU slice is one SkyPilot node of several hosts
    assert task.envs["ANYDEVICE"] == t.device
    (resources,) = task.resources
    if t.slice:
        assert resources.accelerators == {f"tpu-{t.accelerator_type}": 1}
        assert str(resources.cloud) == "GCP"
    elif t.model is not None:
        assert list(resources.accelerators.values()) == [t.chips_per_host]
    assert "anydevice run" in task.run


@pytest.mark.parametrize("target", TARGETS)
def test_the_sbatch_script_is_bash_and_asks_for_the_nodes(target: str, tmp_path: Path) -> None:
    text = _written("slurm", target)
    path = tmp_path / "job.sbatch"
    path.write_text(text)
    syntax = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert syntax.returncode == 0, syntax.stderr
    t = parse_target(target)
    directives = [line for line in text.splitlines() if line.startswith("#SBATCH")]
    assert f"#SBATCH --nodes={t.hosts}" in directives and "#SBATCH --ntasks-per-node=1" in directives
    body = text.splitlines()[len(directives) + 1 :]
    assert not any(line.startswith("#SBATCH") for line in body)  # sbatch reads directives before the first command only
    assert f"export ANYDEVICE={t.device}" in body
    assert f"srun anydevice run -n {t.processes} {TRAIN}" in text


def test_the_script_arguments_reach_the_host_unchanged(tmp_path: Path) -> None:
    """Quotes, spaces and ``$`` in the script's arguments survive each engine's quoting to the start command."""
    spec = yaml.safe_load(_written("skypilot", "cpu"))
    echo = spec["run"].replace("anydevice run -n 1", "printf '%s\\n'")
    shown = subprocess.run(["bash", "-c", echo], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert shown.stdout.splitlines() == [str(TRAIN), *ARGS]


@pytest.mark.parametrize(
    "text",
    [
        "set -e\necho hi\n",
        "a\nb",
        "a\n\n  b\n",
        " leading\nspace",
        "a\n  \nb",
        "two\nends\n\n",
        "tab\tin\nit",
        "é\n✓",
        "a\x1bb\nc",
    ],
)
def test_the_yaml_writer_reads_back_every_string_exactly(text: str) -> None:
    """Multi-line strings (the engines' shell scripts) become literal blocks only where a block reads back the same."""
    from anydevice.integrations.llmd import to_yaml

    value = {"run": text, "list": [text, {"inner": text}]}
    assert yaml.safe_load(to_yaml(value)) == value
