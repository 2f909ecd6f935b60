"""``anydevice serve-spec``: llm-d model-server specs per device, against the fields llm-d's P/D guide documents.

The guide: llm-d v0.9.0, ``guides/pd-disaggregation`` (modelserver/gpu/vllm, modelserver/tpu/v6/vllm,
tpu/base/vllm), as recorded in the project's field notes (field-0.4.md section 2). Snapshots are the whole
text; ``ANYDEVICE_UPDATE_SNAPSHOTS=1`` rewrites them (review the diff).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from anydevice.errors import SelectionError, UnsupportedFeatureError
from anydevice.integrations.llmd import check_pair, model_server, to_yaml
from tests.utils import REPO

GUIDE = "llm-d v0.9.0"
SNAPSHOTS = Path(__file__).parent / "snapshots"
CASES = [
    ("decode", "cuda:h200x4", "kustomize"),
    ("prefill", "cuda:h200x1", "kustomize"),
    ("decode", "tpu:v6e-8", "kustomize"),
    ("decode", "tpu:v7x-8", "kustomize"),
    ("prefill", "neuron:trn1-2", "kustomize"),
    ("prefill", "cpu", "kustomize"),
    ("decode", "cpu", "endpoints"),
]


@pytest.mark.parametrize(("role", "device", "form"), CASES)
def test_snapshot(role: str, device: str, form: str) -> None:
    spec = model_server(role, device)
    text = spec.kustomize() if form == "kustomize" else spec.endpoint()
    path = SNAPSHOTS / f"{role}-{device.replace(':', '-')}.{form}.yaml"
    if os.environ.get("ANYDEVICE_UPDATE_SNAPSHOTS") == "1":
        path.write_text(text)
    assert text == path.read_text()


def test_gpu_fields_are_the_guides() -> None:
    prefill = model_server("prefill", "cuda:h200x1")
    assert GUIDE in prefill.source
    assert prefill.resource == "nvidia.com/gpu" and prefill.chips == 1 and prefill.tensor_parallel == 1
    assert prefill.kv_transfer_config == {"kv_connector": "NixlConnector", "kv_role": "kv_producer"}
    assert prefill.env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == "$(POD_IP)" and "--block-size=128" in prefill.args
    assert "vllm-openai" in str(prefill.image)
    assert model_server("decode", "cuda:h200x4").tensor_parallel == 4  # the guide's TP=4 decode


def test_tpu_v6e_fields_are_the_guides() -> None:
    decode = model_server("decode", "tpu:v6e-8")
    assert GUIDE in decode.source and decode.image == "docker.io/vllm/vllm-tpu:v0.18.0"
    assert decode.resource == "google.com/tpu" and decode.chips == 8 and decode.tensor_parallel == 8
    assert decode.kv_transfer_config == {
        "kv_connector": "TPUConnector",
        "kv_connector_module_path": "tpu_inference.distributed.tpu_connector",
        "kv_role": "kv_both",
        "kv_ip": "$(POD_IP)",
    }
    assert decode.env == {"TPU_SIDE_CHANNEL_PORT": "9600", "TPU_KV_TRANSFER_PORT": "9100"}
    assert decode.labels["llm-d.ai/accelerator-vendor"] == "google"
    assert decode.labels["llm-d.ai/accelerator-variant"] == "tpu-v6e"
    assert decode.labels["llm-d.ai/engine-type"] == "vllm"
    container = decode.container()
    assert container["resources"]["limits"] == {"google.com/tpu": 8}
    assert container["env"][0] == {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}


def test_v7x_counts_two_devices_per_chip() -> None:
    decode = model_server("decode", "tpu:v7x-8")  # the guide: v7x, 4 chips -> TP 8
    assert (decode.chips, decode.tensor_parallel) == (4, 8)
    assert decode.container()["resources"]["limits"] == {"google.com/tpu": 4}
    with pytest.raises(SelectionError, match="not a whole number of chips"):
        model_server("decode", "tpu:v7x-7")


def test_host_staged_devices_and_declared_facts_say_so() -> None:
    neuron = model_server("prefill", "neuron:trn1-2")
    assert neuron.host_staged and neuron.kv_transfer_config["kv_buffer_device"] == "cpu" and neuron.tensor_parallel == 4
    assert neuron.source.startswith("declared") and neuron.image is None and any("--image" in n for n in neuron.notes)
    assert model_server("prefill", "neuron", image="my/neuron:1").image == "my/neuron:1"
    cpu = model_server("decode", "cpu")
    assert cpu.host_staged and cpu.resource is None and "resources" not in cpu.container() and cpu.tensor_parallel == 1


def test_refused_pairings_say_why() -> None:
    with pytest.raises(UnsupportedFeatureError, match="MooncakeConnector requires the same tensor-parallel size"):
        check_pair(
            model_server("prefill", "cuda:h200x1", connector="mooncake"),
            model_server("decode", "cuda:h200x4", connector="mooncake"),
        )
    with pytest.raises(UnsupportedFeatureError, match=r"Cross-vendor P/D .* needs both sides host-staged"):
        check_pair(model_server("prefill", "neuron:trn1-1"), model_server("decode", "cuda:h100x1"))
    with pytest.raises(UnsupportedFeatureError, match="Prefill uses TPUConnector and decode NixlConnector"):
        check_pair(model_server("prefill", "tpu:v6e-8"), model_server("decode", "cuda:h100x8"))
    staged = check_pair(
        model_server("prefill", "tpu:v6e-8", connector="nixl"), model_server("decode", "cuda:h100x8", connector="nixl-host")
    )
    assert staged == []  # cross-vendor, both host-staged: allowed
    assert (
        check_pair(
            model_server("prefill", "cuda:h200x1", connector="mooncake"),
            model_server("decode", "cuda:h200x1", connector="mooncake"),
        )
        == []
    )
    warned = check_pair(model_server("prefill", "cuda:h200x4"), model_server("decode", "cuda:h200x1"))
    assert len(warned) == 1 and "TP ratio direction" in warned[0]


def test_typos_get_did_you_mean() -> None:
    with pytest.raises(SelectionError, match="Did you mean 'v6e'"):
        model_server("decode", "tpu:v6f-8")
    with pytest.raises(SelectionError, match="Did you mean 'tpu'"):
        model_server("decode", "tpuu:v6e-8")
    with pytest.raises(SelectionError, match="Did you mean 'decode'"):
        model_server("decod", "cpu")


def test_the_role_device_comes_from_anydevice_roles(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANYDEVICE_ROLES", "prefill=tpu,decode=cpu")  # a role names a device; its first chip, one of it
    assert model_server("prefill").device == "tpu:v6e-1" and model_server("decode").device == "cpu"


def test_yaml_is_json_compatible_and_round_trips() -> None:
    yaml = pytest.importorskip("yaml")
    spec = model_server("decode", "tpu:v6e-8")
    patch = yaml.safe_load(spec.kustomize())
    assert patch["spec"]["template"]["spec"]["containers"][0] == spec.container()
    weird = {"a b": ["x: y", "#c", True, 3, "", {"k": "'\"\n"}], "e": {}, "f": []}
    assert yaml.safe_load(to_yaml(weird)) == weird


def test_cli_prints_the_spec_and_refuses_a_pairing() -> None:
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "anydevice", "serve-spec", *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=REPO)

    done = cli("--engine", "vllm", "--role", "decode", "--device", "tpu:v6e-8")
    assert done.returncode == 0 and done.stdout == model_server("decode", "tpu:v6e-8").kustomize()
    as_json = json.loads(cli("--role", "prefill", "--device", "cpu", "--format", "json").stdout)
    assert as_json["kv_transfer_config"]["kv_buffer_device"] == "cpu"
    refused = cli("--role", "prefill", "--device", "cuda:h200x1", "--pair", "cuda:h200x4", "--connector", "mooncake")
    assert refused.returncode == 2 and "MooncakeConnector requires the same tensor-parallel size" in refused.stderr
