"""Ray Train for the selected device: a ``TorchTrainer`` whose workers run with the same ``ANYDEVICE``.

    pip install 'anydevice[ray]'

    from anydevice.integrations.ray import trainer

    def loop(config):
        import anydevice as ad
        ad.distributed.init()                     # adopts the process group Ray made
        model = ad.distributed.wrap(ad.to(Net()), "ddp")
        ...

    result = trainer(loop, num_workers=4).fit()  # asks Ray for the device's resource per worker

Pipelines with a device per stage (a Ray Data map on cpu, training on tpu, an inference actor pool
on cuda) give each stage's workers :func:`stage` options (or ``trainer(device=...)``). Programs with
roles (``ANYDEVICE_ROLES=trainer=xla,rollout=cpu``) start one actor group per role with
:func:`role_groups`, after the pairings are checked (:func:`anydevice.runtime.roles.plan`).

The driver resolves the device from its name alone (no detection, no vendor import) when
``ANYDEVICE`` (or ``device=``) names one, so a CPU-only head node can launch GPU or TPU workers;
``auto`` and lists are resolved by detection on the driver.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from anydevice import settings
from anydevice.errors import DistributedError, UnsupportedFeatureError
from anydevice.runtime import autoload

if TYPE_CHECKING:
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

FORWARDED = (settings.ANYDEVICE_PLUGINS, settings.ANYDEVICE_CACHE_DIR, settings.ANYDEVICE_ROLES)
"""Driver settings the workers inherit besides ``ANYDEVICE`` and the selected device's own (``DeviceSpec.settings``)."""


def _ray() -> Any:
    try:
        import ray.train
        import ray.train.torch
    except ImportError as exc:
        raise UnsupportedFeatureError(
            f"Ray Train is not installed ({exc}).", "Install the extra: pip install 'anydevice[ray]'."
        ) from exc
    return ray


def resolve_device(device: str | None = None) -> str:
    """The device the workers will use: a named device by its name alone, ``auto``/lists by detection here."""
    from anydevice.runtime.backend import requested
    from anydevice.runtime.registry import get_registry
    from anydevice.runtime.selection import parse, resolve

    text = device or requested()
    request = parse(text)
    registry = get_registry()
    if len(request.items) == 1:
        item = request.items[0]
        name = registry.canonical(item.name)
        if name is not None:
            return name if item.index is None else f"{name}:{item.index}"
    return resolve(text, registry).name  # auto, a list, or an unknown name (which raises "did you mean")


def worker_resource(device: str) -> str | None:
    """The Ray resource one worker of ``device`` needs (its plugin's ``DeviceSpec.hardware.ray_resource``), or None."""
    from anydevice.runtime.registry import get_registry
    from anydevice.runtime.selection import split_ref

    registry = get_registry()
    name = registry.canonical(split_ref(device)[0])
    hardware = registry.get(name).spec.hardware if name is not None else None
    resource = hardware.ray_resource if hardware is not None else None
    return resource() if callable(resource) else resource


def scaling_config(num_workers: int, device: str | None = None, per_worker: float = 1, **options: Any) -> ScalingConfig:
    """A ``ScalingConfig`` asking for ``per_worker`` of the device's resource on each of ``num_workers`` workers.

    ``options`` go to ``ScalingConfig`` (e.g. ``topology`` and ``accelerator_type`` for TPU slices).
    """
    ray = _ray()
    resource = worker_resource(resolve_device(device))
    resources = dict(options.pop("resources_per_worker", None) or {})
    if resource is not None:
        resources.setdefault(resource, per_worker)
    switch = f"use_{(resource or '').lower()}"  # Ray's use_gpu / use_tpu, where it has one
    flags = {switch: True} if resource and switch in inspect.signature(ray.train.ScalingConfig).parameters else {}
    try:
        config: ScalingConfig = ray.train.ScalingConfig(
            num_workers=num_workers, resources_per_worker=resources or None, **flags, **options
        )
    except ValueError as exc:
        raise DistributedError(f"Ray rejected the scaling config: {exc}", "Pass the missing option to scaling_config().") from exc
    return config


def worker_env(device: str | None = None) -> dict[str, str]:
    """The environment every worker gets: ``ANYDEVICE``, forwarded settings, and autoload off where not needed."""
    name = resolve_device(device)
    from anydevice.runtime.registry import get_registry
    from anydevice.runtime.selection import split_ref

    registry = get_registry()
    canonical = registry.canonical(split_ref(name)[0])
    own = registry.get(canonical).spec.settings if canonical is not None else ()
    env = {settings.ANYDEVICE.name: name}
    env.update({s.name: value for s in (*FORWARDED, *own) if (value := s.get()) is not None})
    autoload.apply(env, selection=name)
    return env


def stage(device: str | None = None, per_worker: float = 1) -> dict[str, Any]:
    """Ray options for one pipeline stage's workers on ``device``: its resource request and its :func:`worker_env`.

    For the stages of one workflow on different devices: ``ds.map_batches(fn, **stage("cpu"))``,
    ``ray.remote(**stage("cuda"))(Actor)`` for an actor pool, and :func:`trainer` with ``device=`` for
    training. Each stage's workers start with their own ``ANYDEVICE``; ``per_worker`` of the device's
    resource is asked for each (``num_gpus`` for ``GPU``, ``resources`` otherwise, nothing for cpu).
    """
    name = resolve_device(device)
    resource = worker_resource(name)
    options: dict[str, Any] = {"runtime_env": {"env_vars": worker_env(name)}}
    if resource == "GPU":
        options["num_gpus"] = per_worker
    elif resource is not None:
        options["resources"] = {resource: per_worker}
    return options


def run_config(base: RunConfig | None = None, device: str | None = None, **options: Any) -> RunConfig:
    """``base`` (or a new ``RunConfig(**options)``) whose workers run with :func:`worker_env`."""
    ray = _ray()
    config: Any = base if base is not None else ray.train.RunConfig(**options)  # Ray Train v2 RunConfig
    runtime_env = dict(config.worker_runtime_env or {})
    runtime_env["env_vars"] = {**worker_env(device), **dict(runtime_env.get("env_vars") or {})}
    replaced: RunConfig = dataclasses.replace(config, worker_runtime_env=runtime_env)
    return replaced


def trainer(
    train_loop: Callable[..., Any],
    *,
    num_workers: int,
    train_loop_config: dict[str, Any] | None = None,
    device: str | None = None,
    scaling: ScalingConfig | None = None,
    run: RunConfig | None = None,
    torch_config: TorchConfig | None = None,
    **options: Any,
) -> TorchTrainer:
    """A Ray ``TorchTrainer`` for the selected device: resources per worker, same ``ANYDEVICE`` everywhere.

    Inside ``train_loop``, ``anydevice.distributed.init()`` adopts the process group Ray made.
    ``options`` go to ``TorchTrainer`` (e.g. ``datasets``).
    """
    ray = _ray()
    built: TorchTrainer = ray.train.torch.TorchTrainer(
        train_loop,
        train_loop_config=train_loop_config,
        scaling_config=scaling or scaling_config(num_workers, device),
        run_config=run_config(run, device),
        torch_config=torch_config,
        **options,
    )
    return built


def role_options(role: str, per_worker: float = 1) -> dict[str, Any]:
    """Ray options for the actors of ``role``: its device's resource and environment (:func:`stage` of the role's device)."""
    from anydevice.runtime.roles import resolve_role

    options = stage(resolve_role(role).device, per_worker)
    options["runtime_env"]["env_vars"][settings.ANYDEVICE_ROLES.name] = settings.ANYDEVICE_ROLES.get() or ""
    return options


def role_groups(
    actors: dict[str, tuple[type, int]],
    *,
    weights_from: str | None = None,
    one_host: bool = True,
    per_worker: float = 1,
    args: dict[str, tuple[Any, ...]] | None = None,
) -> tuple[dict[str, list[Any]], Any]:
    """One Ray actor group per role: ``{role: (ActorClass, count)}`` -> ``({role: [handles]}, plan)``.

    The roles are resolved and their pairings checked before any actor starts (``one_host``: the groups
    share one host, so two roles cannot share a device whose chip belongs to one process). Each group's
    actors run with the role's ``ANYDEVICE`` and ask Ray for its resource; the plan names the weight sync
    from ``weights_from`` to the other roles. ``args`` gives each role's constructor arguments.
    """
    try:
        import ray
    except ImportError as exc:
        raise UnsupportedFeatureError(
            f"Ray is not installed ({exc}).", "Install the extra: pip install 'anydevice[ray]'."
        ) from exc
    from anydevice.runtime.roles import plan

    checked = plan(list(actors), one_host=one_host, weights_from=weights_from)
    groups: dict[str, list[Any]] = {}
    for role, (cls, count) in actors.items():
        remote: Any = ray.remote(**role_options(role, per_worker))(cls)
        groups[role] = [remote.remote(*(args or {}).get(role, ())) for _ in range(count)]
    return groups, checked
