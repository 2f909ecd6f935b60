"""The SkyPilot task (``sky launch task.yaml``): resources from the target, ``setup`` installs anydevice, ``run`` starts it.

SkyPilot runs ``run`` on every host with ``SKYPILOT_NODE_RANK`` (this host's index), ``SKYPILOT_NODE_IPS`` (one
address a line, the first host first) and ``SKYPILOT_NUM_NODES``; a TPU slice is one "node" of the task whose
hosts each run ``run`` (SkyPilot counts them in ``SKYPILOT_NUM_NODES``). The first address is the rendezvous.
"""

from __future__ import annotations

from typing import Any

from anydevice.integrations.llmd import to_yaml
from anydevice.launch_specs.plan import Plan

HEAD = 'HEAD=$(printf "%s\\n" "$SKYPILOT_NODE_IPS" | head -n 1)'
"""The first host's address, as every host computes it from ``SKYPILOT_NODE_IPS``."""
SKY_NAMES = {"Trainium1": "Trainium", "A100": "A100-80GB"}
"""SkyPilot's accelerator name where it is not the chip's model (its AWS catalogue calls trn1's chip Trainium; the
catalogue's A100 is the 80 GB part)."""


def accelerators(plan: Plan) -> str | None:
    """SkyPilot's ``accelerators`` value: ``tpu-v5litepod-16`` (a slice), ``H100:8`` (per host), None for cpu."""
    target = plan.target
    if target.slice and target.accelerator_type:
        return f"tpu-{target.accelerator_type}"
    if target.model is None:
        return None
    return f"{SKY_NAMES.get(target.model, target.model.replace(' ', '-'))}:{target.chips_per_host}"


def run_script(plan: Plan) -> str:
    """``run``: the start command with SkyPilot's variables (one host: no rendezvous to find)."""
    start = plan.start(('"$SKYPILOT_NUM_NODES"', '"$SKYPILOT_NODE_RANK"', '"$HEAD"'))
    lines = ["set -e", *([HEAD] if plan.target.multi_host else []), start]
    return "\n".join(lines) + "\n"


def task(plan: Plan) -> dict[str, Any]:
    """The task as a mapping (what ``sky.Task.from_yaml_config`` takes)."""
    resources: dict[str, Any] = {}
    acc = accelerators(plan)
    if acc is not None:
        resources["accelerators"] = acc
    if plan.target.slice:
        resources["infra"] = "gcp"  # TPU slices are Google Cloud's
    if plan.image:
        resources["image_id"] = f"docker:{plan.image}"
    return {
        "name": plan.name,
        "num_nodes": 1 if plan.target.slice else plan.target.hosts,
        "resources": resources or {"cpus": "2+"},
        "envs": plan.device_env,
        "setup": plan.install(),
        "run": run_script(plan),
    }


def emit(plan: Plan, header: str) -> str:
    """The task YAML, after ``header`` (comment lines)."""
    return header + to_yaml(task(plan))


def rehearsal_env(plan: Plan, host: int, hosts: int, address: str) -> dict[str, str]:
    """What SkyPilot sets on host ``host`` of ``hosts`` (all at ``address`` here), besides the task's ``envs``."""
    return {
        "SKYPILOT_NODE_RANK": str(host),
        "SKYPILOT_NODE_IPS": "\n".join([address] * hosts),
        "SKYPILOT_NUM_NODES": str(hosts),
        "SKYPILOT_NUM_GPUS_PER_NODE": str(plan.target.chips_per_host),
        "SKYPILOT_TASK_ID": f"rehearsal-{plan.name}",
    }
