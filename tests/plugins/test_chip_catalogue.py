"""A chip generation is one edit in one file: a third-party plugin declares a fictitious chip in its catalogue
(``DeviceSpec.chips``) and detection, the device grammar (``check --target``), and serve-spec all read it.

The plugin is real: a module with an entry point in the ``anydevice`` group (metadata-only distribution), found by
a fresh process as any installed plugin is.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.utils import anydevice_cli, metadata_only_distribution, python

PLUGIN = """
from anydevice.plugin import Chip, Detection, DeviceSpec, ModelServer, Serving, SliceShape, hookimpl

Z9 = Chip(
    "z9", "FutureChip Z9", source="a fictitious datasheet", as_of="2026-12-07", aliases=("zeta9",), cores=2, devices=2,
    hbm_bytes=64 << 30, peak_bf16=1.5e15,
    shapes=(SliceShape(4, "2x2"), SliceShape(8, "2x4"), SliceShape(32, "4x8", hosts=4)), llmd_label="future-z9",
)


def detect():
    return Detection.ok("one fictitious chip", count=1, chip=Z9.model)


def load():
    raise RuntimeError("never loaded here")


@hookimpl
def anydevice_register_devices(register):
    server = ModelServer(image="example/future:1", resource="example.com/future", connector={"kv_connector": "NixlConnector"})
    register(DeviceSpec(name="future", detect=detect, load=load, chips=(Z9,), serving={"vllm": Serving(model_server=server)}))
"""

PROBE = """
import json
from anydevice.errors import AnyDeviceError
from anydevice.preflight import targets_of
from anydevice.runtime.registry import get_registry
from anydevice.runtime.selection import parse_ref

out = {"chip": get_registry().detect("future").chip}
ref = parse_ref("future:zeta9-32")
out["ref"] = [str(ref), ref.shape.chips, ref.shape.hosts, ref.shape.chips_per_host, ref.chip.topology_name(ref.shape)]
for text in ("future:z9-7", "future:z9-0", "future:q1-8", "future:z9-8"):
    try:
        out[text] = targets_of(text)
    except AnyDeviceError as exc:
        out[text] = str(exc)
print(json.dumps(out))
"""


def _site(tmp_path: Path) -> Path:
    (tmp_path / "anydevice_future.py").write_text(PLUGIN)
    metadata_only_distribution(tmp_path, "anydevice-future", "0.1", "[anydevice]\nfuture = anydevice_future\n")
    return tmp_path


def test_a_new_generation_is_seen_by_detection_check_and_serve_spec(tmp_path: Path) -> None:
    site = _site(tmp_path)
    probe = python("-c", PROBE, pythonpath=site, timeout=120)
    assert probe.returncode == 0, probe.stderr
    seen = json.loads(probe.stdout)
    assert seen["chip"] == "FutureChip Z9"  # detection names the catalogue's model
    assert seen["ref"] == ["future:z9-32", 32, 4, 8, None]  # an alias resolves; no topology prefix: no compiler name
    assert "no z9 slice has 7 chips" in seen["future:z9-7"] and "future:z9-8" in seen["future:z9-7"]  # the valid list
    assert "asks for 0 chips" in seen["future:z9-0"]
    assert "Unknown future chip 'q1'" in seen["future:q1-8"] and "Known future chips: z9" in seen["future:q1-8"]
    assert "future names no slices" in seen["future:z9-8"]  # past the grammar: no compiler declared for a slice

    served = anydevice_cli("serve-spec", "--role", "decode", "--device", "future:z9-8", "--format", "json", pythonpath=site)
    assert served.returncode == 0, served.stderr
    spec = json.loads(served.stdout)
    assert (spec["chips"], spec["tensor_parallel"]) == (8, 16)  # two devices per chip, from the catalogue
    assert spec["labels"]["llm-d.ai/accelerator-variant"] == "future-z9"
    refused = anydevice_cli("serve-spec", "--role", "decode", "--device", "future:z9-5", pythonpath=site)
    assert refused.returncode == 2 and "no z9 slice has 5 chips" in refused.stderr and "Traceback" not in refused.stderr
