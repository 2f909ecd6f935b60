"""Roles: the device of each part of a program whose parts run on different devices (``ANYDEVICE_ROLES``).

Grammar::

    roles := entry ("," entry)*        entry := role "=" selection      role: lower-case letters, digits, - _

A selection is what ``ANYDEVICE`` takes (a name, ``name:index``, ``auto`` or a list); a list's later
items continue their role (``trainer=tpu,cuda,rollout=cpu``: trainer is ``tpu,cuda``). A role without
an entry follows ``ANYDEVICE``; a role name one typo away from a declared one is an error (did you mean).

Before anything starts, :func:`plan` resolves every role and checks the pairings: two roles in
separate processes on one host cannot share a device whose chip belongs to one process
(``Hardware.exclusive``: TPU, NeuronCores), and the weight sync between each pair is chosen and named
(:func:`weight_sync`).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from anydevice import settings
from anydevice.contract.device_spec import Hardware
from anydevice.errors import AnyDeviceError, SelectionError
from anydevice.runtime.registry import Registry, get_registry
from anydevice.runtime.selection import Choice, parse, resolve
from anydevice.runtime.untrusted import clean

if TYPE_CHECKING:
    from anydevice.runtime.backend import Backend

_ROLE = re.compile(r"[a-z][a-z0-9_-]{0,63}", flags=re.ASCII)
SAME_PROCESS, SHARED_MEMORY, OBJECT_STORE, COLLECTIVE = "same-process copy", "shared memory", "ray object store", "collective"
"""The weight-sync transports :func:`weight_sync` names."""


def parse_roles(text: str | None) -> dict[str, str]:
    """``role -> selection`` from an ``ANYDEVICE_ROLES`` value; a clear error naming the entry when malformed."""
    roles: dict[str, str] = {}
    if not text or not text.strip():
        return roles
    name = settings.ANYDEVICE_ROLES.name
    example = f"{name}=trainer=xla,rollout=cpu"
    current: str | None = None
    for part in text.split(","):
        part = part.strip()
        if "=" in part:
            role, _, selection = (p.strip() for p in part.partition("="))
            role = role.lower()
            if not _ROLE.fullmatch(role):
                raise SelectionError(
                    f"{name}: {clean(role)!r} is not a role name (lower-case letters, digits, '-' or '_').",
                    f"Write e.g. {example}.",
                )
            if role in roles:
                raise SelectionError(f"{name}: the role {role!r} is given twice in {clean(text)!r}.", "Give each role one entry.")
            if not selection:
                raise SelectionError(f"{name}: the role {role!r} names no device.", f"Write e.g. {example}.")
            roles[role], current = selection, role
        elif current is None or not part:
            raise SelectionError(
                f"{name}={clean(text)!r} is malformed: {clean(part) or 'an empty entry'!r} belongs to no role.",
                f"Write e.g. {example}.",
            )
        else:
            roles[current] = f"{roles[current]},{part}"  # a list continues its role
    for role, selection in roles.items():
        try:
            parse(selection)
        except SelectionError as exc:
            raise SelectionError(f"{name}: role {role!r}: {exc.message}", exc.hint) from None
    return roles


def declared() -> dict[str, str]:
    """The roles ``ANYDEVICE_ROLES`` declares (``role -> selection``)."""
    return parse_roles(settings.ANYDEVICE_ROLES.get())


def request_for(role: str) -> str:
    """The selection in force for ``role``: its ``ANYDEVICE_ROLES`` entry, else what ``ANYDEVICE`` (or ``use()``) says."""
    from anydevice.runtime.backend import requested

    roles = declared()
    key = role.strip().lower() if isinstance(role, str) else role
    if not isinstance(key, str) or not _ROLE.fullmatch(key):
        raise SelectionError(f"{clean(str(role))!r} is not a role name.", "Name a role such as 'trainer' or 'rollout'.")
    if key in roles:
        return roles[key]
    close = difflib.get_close_matches(key, list(roles), n=1, cutoff=0.75)
    if close:
        raise SelectionError(
            f"Role {key!r} has no entry in {settings.ANYDEVICE_ROLES.name} ({', '.join(roles)}). Did you mean {close[0]!r}?",
            f"Use role={close[0]!r}, or add {key}=DEVICE to {settings.ANYDEVICE_ROLES.name}.",
        )
    return requested()


@dataclass(frozen=True)
class Placement:
    """One role's device: the role, its selection, and the resolved choice (why it was chosen)."""

    role: str
    request: str
    choice: Choice
    declared: bool

    @property
    def device(self) -> str:
        """``name`` or ``name:index``, what the role's processes get as ``ANYDEVICE``."""
        c = self.choice
        return c.name if c.index is None else f"{c.name}:{c.index}"


@dataclass(frozen=True)
class Sync:
    """How weights go from one role to another: the transport's name and why it was chosen."""

    source: str
    target: str
    transport: str
    why: str


@dataclass(frozen=True)
class Plan:
    """Every role's placement and the weight sync of each ordered pair, checked before anything starts."""

    placements: dict[str, Placement]
    syncs: tuple[Sync, ...]

    def as_dict(self) -> dict[str, object]:
        """A JSON-friendly description (``doctor``, ``rl.py``)."""
        return {
            "roles": {
                r: {"device": p.device, "request": p.request, "declared": p.declared, "why": p.choice.why}
                for r, p in self.placements.items()
            },
            "weight_sync": [{"from": s.source, "to": s.target, "transport": s.transport, "why": s.why} for s in self.syncs],
        }


def resolve_role(role: str, registry: Registry | None = None) -> Placement:
    """Resolve one role's device (by cheap detection); an unusable named device is an error naming the role."""
    registry = registry or get_registry()
    request = request_for(role)
    try:
        choice = resolve(request, registry)
    except AnyDeviceError as exc:
        exc.message = f"role {role!r} ({request}): {exc.message}"
        raise
    return Placement(role.strip().lower(), request, choice, role.strip().lower() in declared())


def plan(
    roles: tuple[str, ...] | list[str] | None = None,
    *,
    same_process: bool = False,
    one_host: bool = True,
    weights_from: str | None = None,
    registry: Registry | None = None,
) -> Plan:
    """Resolve ``roles`` (default: the declared ones) and check their pairings; raise before anything starts.

    ``same_process``: every role runs in this one process (weights are copied in memory). Otherwise each
    role has its own processes; with ``one_host`` (one machine, one slice) two roles on the same device
    whose chip belongs to one process (``Hardware.exclusive``) are refused. ``weights_from``: the role whose
    weights go to every other (the trainer); None: every ordered pair is named.
    """
    registry = registry or get_registry()
    names = list(roles) if roles is not None else list(declared())
    if not names:
        raise SelectionError(
            f"No roles to place: {settings.ANYDEVICE_ROLES.name} is unset and none were named.",
            f"Set e.g. {settings.ANYDEVICE_ROLES.name}=trainer=xla,rollout=cpu, or name the roles.",
        )
    placements = {p.role: p for p in (resolve_role(r, registry) for r in names)}
    if not same_process and one_host:
        _refuse_shared_exclusive(placements, registry)
    pairs = [(a, b) for a in placements for b in placements if a != b and (weights_from is None or a == weights_from)]
    syncs = tuple(weight_sync(placements[a], placements[b], same_process=same_process, registry=registry) for a, b in pairs)
    return Plan(placements, syncs)


def _hardware(name: str, registry: Registry) -> Hardware:
    """The device's declared :class:`Hardware` (every fact at its default where it declares none)."""
    return registry.get(name).spec.hardware or Hardware()


def _refuse_shared_exclusive(placements: dict[str, Placement], registry: Registry) -> None:
    seen: dict[tuple[str, int | None], str] = {}
    for role, p in placements.items():
        name, index = p.choice.name, p.choice.index
        if not _hardware(name, registry).exclusive:
            continue
        clash = next((other for (n, i), other in seen.items() if n == name and (i is None or index is None or i == index)), None)
        if clash is not None:
            raise SelectionError(
                f"Roles {clash!r} and {role!r} would share the {name} device on one host, but a {name} chip belongs to a single "
                "process: two roles in separate processes cannot use it at once (colocated worker groups are not possible).",
                f"Give each role its own slice (one host each; pass one_host=False to the Ray role groups when they land on "
                f"different hosts), put one role on another device ({settings.ANYDEVICE_ROLES.name}={clash}={name},{role}=cpu), "
                "or run both roles in one process.",
            )
        seen[(name, index)] = role


def weight_sync(source: Placement, target: Placement, *, same_process: bool, registry: Registry | None = None) -> Sync:
    """The transport for weights from ``source``'s role to ``target``'s, named, with why.

    One process: a same-process copy (``load_state_dict``, device to device). Separate processes: shared
    memory between host devices; the device's collective (its process group) between two processes on the
    same non-exclusive accelerator; otherwise the Ray object store, staged through host memory.
    """
    registry = registry or get_registry()
    a, b = source.choice.name, target.choice.name
    if same_process:
        how = "the same device" if a == b else f"{a} to {b} through the host"
        return Sync(source.role, target.role, SAME_PROCESS, f"both roles run in one process: load_state_dict, {how}")
    if _hardware(a, registry).host_memory and _hardware(b, registry).host_memory:
        return Sync(source.role, target.role, SHARED_MEMORY, "both devices are host memory: tensors pass through shared memory")
    if a == b and not _hardware(a, registry).exclusive:
        return Sync(
            source.role, target.role, COLLECTIVE, f"both roles on {a}: a broadcast over {a}'s process group, no host copy"
        )
    why = f"{a} to {b}" + (" (different devices)" if a != b else f" ({a} chips belong to one process each)")
    return Sync(source.role, target.role, OBJECT_STORE, f"{why}: staged through host memory and Ray's object store")


def backend_for(role: str) -> Backend:
    """The loaded backend of ``role`` (:func:`anydevice.runtime.backend.backend_beside`: the one loader and its cache)."""
    from anydevice.runtime.backend import backend_beside
    from anydevice.runtime.registry import get_registry

    registry = get_registry()
    placement = resolve_role(role, registry)
    return backend_beside(placement.choice, placement.request, registry)
