"""The Kubernetes JobSet (``kubectl apply -f jobset.yaml``, ``jobset.x-k8s.io/v1alpha2``): one replicated Job of the hosts.

The Job is Indexed with ``parallelism = completions = hosts``: each pod is one host, its index in
``JOB_COMPLETION_INDEX`` is the node rank. JobSet gives each pod a DNS name on its headless service
(``<jobset>-<replicatedJob>-<job index>-<pod index>.<jobset>``): the first pod's is the rendezvous. On GKE TPU
node pools the pods select the slice by ``cloud.google.com/gke-tpu-accelerator`` and ``gke-tpu-topology``, ask
``google.com/tpu`` for the chips per host, and use the host's network (tpu-recipes' and xpk's manifests do).
"""

from __future__ import annotations

from typing import Any

from anydevice.errors import UnsupportedFeatureError
from anydevice.integrations.llmd import to_yaml
from anydevice.launch_specs.plan import Plan

API_VERSION = "jobset.x-k8s.io/v1alpha2"
REPLICATED_JOB = "workers"
CONTAINER = "anydevice"
DEFAULT_IMAGE = "python:3.12"
"""The image when ``--image`` names none: Python with pip; the spec's command installs anydevice in it."""
COORDINATOR = "ANYDEVICE_COORDINATOR"
"""The pod variable holding the first pod's DNS name (the rehearsal points it at loopback, as /etc/hosts would)."""
GKE_TPU_ACCELERATOR = {
    "v4": "tpu-v4-podslice",
    "v5e": "tpu-v5-lite-podslice",
    "v5p": "tpu-v5p-slice",
    "v6e": "tpu-v6e-slice",
    "v7x": "tpu7x",
}
"""GKE's ``cloud.google.com/gke-tpu-accelerator`` node label per chip (GKE's TPU docs), where the catalogue entry
declares no ``gke_accelerator`` of its own."""
EXCLUSIVE = {"alpha.jobset.sigs.k8s.io/exclusive-topology": "cloud.google.com/gke-nodepool"}
"""One slice's pods on one node pool (a GKE TPU slice is a node pool)."""


def coordinator(plan: Plan) -> str:
    """The first pod's DNS name on the JobSet's headless service."""
    return f"{plan.name}-{REPLICATED_JOB}-0-0.{plan.name}"


def gke_accelerator(plan: Plan) -> str:
    """The slice's GKE accelerator label, from the catalogue entry or :data:`GKE_TPU_ACCELERATOR`; refused when unknown."""
    chip = plan.target.chip_facts
    declared = getattr(chip, "gke_accelerator", None) or GKE_TPU_ACCELERATOR.get(plan.target.chip or "")
    if declared is None:
        raise UnsupportedFeatureError(
            f"{plan.target.text}: no GKE accelerator label is declared for the {plan.target.model} slice.",
            "Declare it in the chip's catalogue entry, or use --emit skypilot.",
        )
    return str(declared)


DNS_WAIT_S = 300
"""How long a pod waits for the first pod's DNS record (the headless service publishes it a few seconds after the
pods start; ``anydevice run`` refuses an endpoint that does not resolve rather than wait for torch's timeout)."""


def command(plan: Plan) -> str:
    """The container's shell script: install anydevice where the image lacks it, wait for the first pod's name to
    resolve (several hosts), then the start command."""
    lines = ["set -e", f"command -v anydevice >/dev/null 2>&1 || {plan.install()}"]
    if plan.target.multi_host:
        lines.append(f'for _ in $(seq {DNS_WAIT_S}); do getent hosts "${COORDINATOR}" >/dev/null && break; sleep 1; done')
    lines.append(plan.start((str(plan.target.hosts), '"$JOB_COMPLETION_INDEX"', f'"${COORDINATOR}"')))
    return "\n".join(lines) + "\n"


def pod_spec(plan: Plan) -> dict[str, Any]:
    """The pod template's spec: one container, the slice's node selector, host networking on a TPU slice."""
    target = plan.target
    env = [{"name": k, "value": v} for k, v in plan.device_env.items()]
    if target.multi_host:
        env.append({"name": COORDINATOR, "value": coordinator(plan)})
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": plan.image or DEFAULT_IMAGE,
        "command": ["bash", "-c", command(plan)],
        "env": env,
        "ports": [{"containerPort": plan.port, "name": "rendezvous"}],
    }
    key, chips = target.resource, target.chips_per_host
    if key is not None and chips:
        container["resources"] = {"limits": {key: chips}, "requests": {key: chips}}
    spec: dict[str, Any] = {"restartPolicy": "Never"}
    if target.slice:
        spec["nodeSelector"] = {
            "cloud.google.com/gke-tpu-accelerator": gke_accelerator(plan),
            "cloud.google.com/gke-tpu-topology": target.topology,
        }
        spec["hostNetwork"] = True
        spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    spec["containers"] = [container]
    return spec


def jobset(plan: Plan) -> dict[str, Any]:
    """The JobSet as a mapping."""
    hosts = plan.target.hosts
    metadata: dict[str, Any] = {"name": plan.name}
    if plan.target.slice:
        metadata["annotations"] = dict(EXCLUSIVE)
    job = {
        "parallelism": hosts,
        "completions": hosts,
        "completionMode": "Indexed",
        "backoffLimit": 0,
        "template": {"spec": pod_spec(plan)},
    }
    return {
        "apiVersion": API_VERSION,
        "kind": "JobSet",
        "metadata": metadata,
        "spec": {
            "failurePolicy": {"maxRestarts": 0},
            "network": {"enableDNSHostnames": True},
            "replicatedJobs": [{"name": REPLICATED_JOB, "replicas": 1, "template": {"spec": job}}],
        },
    }


def emit(plan: Plan, header: str) -> str:
    """The JobSet YAML, after ``header`` (comment lines)."""
    return header + to_yaml(jobset(plan))


def rehearsal_env(plan: Plan, host: int, hosts: int, address: str) -> dict[str, str]:
    """What Kubernetes sets in pod ``host``: its completion index; the coordinator's DNS name resolves to ``address``."""
    return {"JOB_COMPLETION_INDEX": str(host), COORDINATOR: address, "HOSTNAME": f"{plan.name}-{REPLICATED_JOB}-0-{host}"}
