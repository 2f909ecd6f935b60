"""llm-d model-server specs from the one flag: the overlay (or ``endpoints.yaml`` entry) of a prefill or decode server.

    from anydevice.integrations.llmd import model_server, check_pair
    decode = model_server("decode", "tpu:v6e-8")      # image, google.com/tpu: 8, TP 8, TPUConnector, ports, labels
    print(decode.kustomize())                          # a Kustomize patch of the model-server Deployment
    print(decode.endpoint())                           # an endpoints.yaml entry (llm-d without Kubernetes)
    check_pair(model_server("prefill", "cuda:h200x1"), model_server("decode", "cuda:h200x4"))

Every device fact (image, resource key, connector, labels, chips) is declared by the device's plugin
(``Serving.model_server``) with where it comes from (``source``: the llm-d guide and its version, or
"declared"). Pure text: nothing here needs the device, the engine or Kubernetes. The device is
``name[:chip[-|x]count]`` (``cuda:h200x8``, ``tpu:v7x-8``, ``neuron:trn1-2``, ``cpu``); the
tensor-parallel size is the host's chips times the chip's devices per chip (v7x: 2).
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from anydevice.contract.chips import Chip, shape_for
from anydevice.contract.device_spec import ModelServer
from anydevice.errors import SelectionError, UnsupportedFeatureError
from anydevice.runtime.registry import Registry, get_registry

ROLES = ("prefill", "decode")
CONNECTORS = {"nixl": "NixlConnector", "nixl-host": "NixlConnector", "mooncake": "MooncakeConnector"}
"""``--connector`` choices: ``nixl-host`` stages the KV cache in host memory (``kv_buffer_device: cpu``) on every device."""
PORTS = {"prefill": {"vllm": 8000}, "decode": {"vllm": 8200, "sidecar": 8000}}
"""Declared: the decode server listens behind llm-d's routing sidecar (its port), the prefill server directly."""
POD_IP = "$(POD_IP)"


@dataclass(frozen=True)
class ServerSpec:
    """One model server: everything the overlay and the endpoints entry say, and why."""

    engine: str
    role: str
    device: str
    chip: str | None
    chips: int
    tensor_parallel: int
    image: str | None
    resource: str | None
    kv_transfer_config: dict[str, str]
    env: dict[str, str]
    args: tuple[str, ...]
    ports: dict[str, int]
    labels: dict[str, str]
    host_staged: bool
    source: str
    notes: tuple[str, ...] = field(default=())

    def as_dict(self) -> dict[str, Any]:
        """A JSON-friendly description."""
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}

    def container(self) -> dict[str, Any]:
        """The model-server container: image, args, env, ports, resources."""
        args = [
            f"--tensor-parallel-size={self.tensor_parallel}",
            f"--port={self.ports['vllm']}",
            f"--kv-transfer-config={json.dumps(self.kv_transfer_config, separators=(',', ':'))}",
            *self.args,
        ]
        env: list[dict[str, Any]] = []
        if any(POD_IP in v for v in (*self.env.values(), *args)):  # Kubernetes expands $(POD_IP) from an earlier variable
            env.append({"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
        env += [{"name": k, "value": v} for k, v in self.env.items()]
        out: dict[str, Any] = {"name": "vllm", "image": self.image or "IMAGE (none declared: pass --image)", "args": args}
        if env:
            out["env"] = env
        out["ports"] = [{"name": name, "containerPort": port} for name, port in self.ports.items() if name == "vllm"]
        if self.resource is not None:
            out["resources"] = {"limits": {self.resource: self.chips}, "requests": {self.resource: self.chips}}
        return out

    def kustomize(self) -> str:
        """A Kustomize strategic-merge patch of the ``<role>`` model-server Deployment (llm-d's P/D overlay)."""
        patch = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": f"ms-pd-llm-d-modelservice-{self.role}", "labels": self.labels},
            "spec": {"template": {"metadata": {"labels": self.labels}, "spec": {"containers": [self.container()]}}},
        }
        return self._header() + to_yaml(patch)

    def endpoint(self, address: str = "127.0.0.1", index: int = 0) -> str:
        """One ``endpoints.yaml`` entry for llm-d without Kubernetes (file discovery); the field names are anydevice's."""
        entry = {"name": f"{self.role}-{index}", "address": address, "port": self.ports["vllm"], "labels": self.labels}
        note = "# endpoints.yaml for llm-d's file discovery: the field names are anydevice's reading, not checked against llm-d\n"
        return self._header() + note + to_yaml({"endpoints": [entry]})

    def _header(self) -> str:
        lines = [
            f"# anydevice serve-spec: {self.engine} {self.role} on {self.device} (TP {self.tensor_parallel})",
            f"# source: {self.source}",
        ]
        lines += [f"# note: {n}" for n in self.notes]
        return "\n".join(lines) + "\n"


def parse_device(text: str, registry: Registry | None = None) -> tuple[str, str | None, int | None]:
    """``name[:chip[-|x]count]`` -> (canonical device, chip or None, count or None), by the one device grammar
    (:func:`anydevice.runtime.selection.parse_ref`); a bare number is a count here (``cpu:2``), and 0 is refused."""
    from anydevice.runtime.selection import parse_ref

    ref = parse_ref(text, registry)
    if ref.index is not None:
        if ref.index == 0:
            raise SelectionError(f"'{text}' asks for 0 of {ref.name}: a count is 1 or more.", f"Write e.g. {ref.name}:1.")
        return ref.name, None, ref.index
    return ref.name, ref.chip.name if ref.chip is not None else None, ref.count


def declared_server(device: str, engine: str = "vllm", registry: Registry | None = None) -> ModelServer:
    """The plugin's declared model server of ``engine`` on ``device``, or a clear error."""
    registry = registry or get_registry()
    serving = registry.get(device).spec.serving.get(engine)
    if serving is None or serving.model_server is None:
        raise UnsupportedFeatureError(
            f"The {device} plugin declares no llm-d model server for {engine}.",
            "Choose a device whose plugin declares one (`anydevice serve-spec --help` lists them), or declare "
            "Serving.model_server in the plugin.",
        )
    return serving.model_server


def serving_chips(device: str, registry: Registry | None = None) -> dict[str, Chip]:
    """The device's chips serve-spec offers (its catalogue's chips with an llm-d label), by name; the first is the default."""
    registry = registry or get_registry()
    return {c.name: c for c in registry.get(device).spec.chips if c.llmd_label}


def _chip(device: str, chips: dict[str, Chip], chip: str | None) -> tuple[str | None, Chip | None]:
    if not chips:
        if chip is not None:
            raise SelectionError(
                f"The {device} model server names no chip models; '{chip}' is not one.", f"Write {device} alone."
            )
        return None, None
    name = chip or next(iter(chips))
    found = next((c for c in chips.values() if name in c.names), None)
    if found is None:  # a chip of the device's catalogue (the grammar checked) that declares no llm-d label
        raise SelectionError(
            f"The {device} chip '{name}' has no llm-d model server: its plugin declares no llm-d accelerator label for it.",
            f"serve-spec offers {device} chips: {', '.join(chips)}.",
        )
    return found.name, found


def model_server(
    role: str,
    device: str | None = None,
    engine: str = "vllm",
    *,
    connector: str | None = None,
    image: str | None = None,
    registry: Registry | None = None,
) -> ServerSpec:
    """The llm-d model server of ``role`` (prefill or decode) on ``device`` (default: the role's, ``ANYDEVICE_ROLES``).

    ``connector``: ``nixl``, ``nixl-host`` or ``mooncake`` instead of the device's own; NIXL on a device whose own
    connector is not NIXL, and ``nixl-host`` everywhere, is host-staged (``kv_buffer_device: cpu``). ``image``
    replaces the declared image.
    """
    if role not in ROLES:
        close = difflib.get_close_matches(role, ROLES, n=1)
        raise SelectionError(
            f"Unknown role '{role}'." + (f" Did you mean '{close[0]}'?" if close else ""), "Use prefill or decode."
        )
    if engine != "vllm":
        raise UnsupportedFeatureError(
            f"llm-d model-server specs are declared for vllm only, not {engine!r}.", "Use --engine vllm."
        )
    if device is None:
        from anydevice.runtime.roles import request_for

        device = request_for(role)
    registry = registry or get_registry()
    name, chip_name, count = parse_device(device, registry)
    server = declared_server(name, engine, registry)
    chip_name, chip = _chip(name, serving_chips(name, registry), chip_name)
    per_chip = chip.devices if chip else 1
    count = count or (chip.per_count if chip else 1)
    chips = shape_for(chip, count, name, device).chips if chip else count
    config = dict(server.connector)
    notes: list[str] = []
    if connector is not None:
        if connector not in CONNECTORS:
            raise SelectionError(f"Unknown connector '{connector}'.", f"Use one of: {', '.join(CONNECTORS)}.")
        own = server.connector.get("kv_connector")
        config = {"kv_connector": CONNECTORS[connector]}
        if connector == "nixl-host" or (connector == "nixl" and (own != CONNECTORS["nixl"] or server.host_staged)):
            config["kv_buffer_device"] = "cpu"  # NIXL from host memory (vLLM's TPU, XPU and CPU paths)
        if config != dict(server.connector):
            notes.append(f"{json.dumps(config)} instead of the device's own {json.dumps(dict(server.connector))}")
    config["kv_role"] = server.kv_role or ("kv_producer" if role == "prefill" else "kv_consumer")
    labels = {"llm-d.ai/role": role, "llm-d.ai/engine-type": engine, "llm-d.ai/guide": "pd-disaggregation", **server.labels}
    if chip is not None and chip.llmd_label:
        labels["llm-d.ai/accelerator-variant"] = chip.llmd_label
    if image is None and server.image is None:
        notes.append(f"no {name} image is declared: pass --image")
    return ServerSpec(
        engine=engine,
        role=role,
        device=f"{name}:{chip_name}-{count}" if chip_name else name,
        chip=chip_name,
        chips=chips,
        tensor_parallel=chips * per_chip,
        image=image or server.image,
        resource=server.resource,
        kv_transfer_config=config,
        env=dict(server.env),
        args=server.args,
        ports=dict(PORTS[role]),
        labels=labels,
        host_staged=config.get("kv_buffer_device") == "cpu",
        source=server.source,
        notes=tuple(notes),
    )


def check_pair(prefill: ServerSpec, decode: ServerSpec) -> list[str]:
    """Refuse a prefill/decode pairing llm-d refuses (with the reason); return warnings for one it runs with known issues."""
    p, d = prefill.kv_transfer_config["kv_connector"], decode.kv_transfer_config["kv_connector"]
    fix = "Choose the same connector on both sides (--connector nixl-host stages through host memory on every device)."
    if prefill.role != "prefill" or decode.role != "decode":
        raise SelectionError(
            "check_pair takes a prefill spec, then a decode spec.", "Build them with model_server('prefill'/'decode', ...)."
        )
    if p != d:
        raise UnsupportedFeatureError(f"Prefill uses {p} and decode {d}: KV passes only between the same connector.", fix)
    if p == CONNECTORS["mooncake"] and prefill.tensor_parallel != decode.tensor_parallel:
        raise UnsupportedFeatureError(
            f"MooncakeConnector requires the same tensor-parallel size on prefill and decode (llm-d's P/D guide); "
            f"prefill has TP {prefill.tensor_parallel}, decode TP {decode.tensor_parallel}.",
            "Give both the same chips per host, or use NixlConnector (heterogeneous TP).",
        )
    vendor_p, vendor_d = prefill.labels.get("llm-d.ai/accelerator-vendor"), decode.labels.get("llm-d.ai/accelerator-vendor")
    if vendor_p != vendor_d and not (prefill.host_staged and decode.host_staged):
        raise UnsupportedFeatureError(
            f"Cross-vendor P/D ({prefill.device} prefill, {decode.device} decode) needs both sides host-staged "
            "(kv_buffer_device: cpu): device memory of one vendor cannot be read by the other's transfer.",
            "Use --connector nixl-host on both sides (NIXL from host memory).",
        )
    warnings = []
    if p == CONNECTORS["nixl"] and prefill.tensor_parallel > decode.tensor_parallel:
        warnings.append(
            f"NixlConnector with prefill TP {prefill.tensor_parallel} > decode TP {decode.tensor_parallel}: llm-d's guide lists "
            "known issues with the TP ratio direction; its tested layout is prefill TP <= decode TP"
        )
    return warnings


# -- a YAML emitter for the subset above: mappings, lists, strings, ints, bools ------------------------
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_./-]+")


def to_yaml(value: Any, indent: int = 0) -> str:
    """Block YAML of nested dicts/lists of str/int/bool; every string JSON-quoted (valid YAML, never re-typed), but a
    multi-line one (a shell script) as a literal block (``|``) where it reads back exactly."""
    return "\n".join(_lines(value, indent)) + "\n"


def _scalar(value: Any) -> str:
    if isinstance(value, bool) or value is None or isinstance(value, (int, float)):
        return json.dumps(value)
    if isinstance(value, str):
        return json.dumps(value)
    raise TypeError(f"to_yaml cannot write {type(value).__name__}")


def _key(key: str) -> str:
    return key if _PLAIN_KEY.fullmatch(key) and not key[0].isdigit() else json.dumps(key)


def _literal(value: Any) -> list[str] | None:
    """A multi-line string as a literal block's header and lines, or None where a block would not read back exactly."""
    if not isinstance(value, str) or "\n" not in value.rstrip("\n") or value.endswith("\n\n"):
        return None
    lines = value.removesuffix("\n").split("\n")
    if lines[0][:1] in (" ", "") or any(line != line.strip(" ") and not line.strip() for line in lines):
        return None  # a leading space needs an indentation indicator; a blank line of spaces is not kept
    if not all(line.isprintable() for line in lines):
        return None
    return ["|" if value.endswith("\n") else "|-", *lines]


def _lines(value: Any, indent: int) -> list[str]:
    pad = " " * indent
    block = _literal(value)
    if block is not None:
        return [pad + block[0], *(f"{pad}{line}" if line else "" for line in block[1:])]
    if isinstance(value, dict):
        if not value:
            return [pad + "{}"]
        out: list[str] = []
        for k, v in value.items():
            if isinstance(v, (dict, list)) and v:
                out.append(f"{pad}{_key(str(k))}:")
                out += _lines(v, indent + 2)
            elif _literal(v) is not None:
                header, *body = _lines(v, indent + 2)
                out += [f"{pad}{_key(str(k))}: {header.lstrip()}", *body]
            else:
                out.append(f"{pad}{_key(str(k))}: {'{}' if v == {} else '[]' if v == [] else _scalar(v)}")
        return out
    if isinstance(value, list):
        out = []
        for item in value:
            inner = _lines(item, indent + 2)
            out.append(f"{pad}- {inner[0].lstrip()}")
            out += inner[1:]
        return out
    return [pad + _scalar(value)]
