"""Who is told that CUDA is the selected device: decided once per module, at import, never per call.

Torch's own modules, torch_xla's, anydevice's and the selected vendor's hold the real ``torch``:
nothing they see changes, so their code paths (optimizers, DataLoader, dynamo, inductor, serialization)
are the ones they take without cuda-compat. Every other module (the script, its libraries) holds a
*view* of ``torch``: a module object that reads through to the real one, except that ``torch.cuda`` and
``torch.accelerator`` answer for the selected device (and a few names only scripts call, such as
``torch.Generator``). The view is bound where a module binds ``torch``:

* ``import torch``, ``import torch.cuda``, ``from torch import cuda`` and ``from torch.cuda import x``
  through ``builtins.__import__`` (the importer's module name comes with the call: no frame is read);
* modules that imported torch before cuda-compat was enabled are rebound once, at enable.

So a question gets one answer wherever the script asks it: eager, inside ``torch.compile`` (dynamo
reads the same module globals), in DataLoader workers (forked: the same state) and in spawned children
(the start-up hook enables cuda-compat there too). What goes around the import system
(``importlib.import_module("torch.cuda")``, ``sys.modules["torch"]``) gets the real module: the truth,
consistently.
"""

from __future__ import annotations

import builtins
import sys
import threading
import types
from collections.abc import Callable, Iterable, Mapping
from typing import Any

INTERNAL_PACKAGES = frozenset({"torch", "functorch", "torchgen", "anydevice", "_remote_module_non_scriptable"})
"""Top-level packages whose modules keep the real ``torch`` (``_remote_module_non_scriptable``: torch's RemoteModule
template, which torch 2.9 writes to a temporary file and imports by that top-level name); the selected device's vendor
packages (those its backend reports versions of, such as torch_xla) are added at enable."""


SHARED_VALUES = (int, float, str, bool, bytes, tuple, frozenset)
"""Values never taken as a real object to replace: equal ones are shared (CPU torch's ``default_generators`` is the
empty tuple every ``__slots__ = ()`` holds)."""


def is_internal(module_name: str | None, internal: Iterable[str] = INTERNAL_PACKAGES) -> bool:
    """Whether the module named ``module_name`` is torch's, anydevice's or a vendor's own code."""
    if not module_name:
        return False
    return module_name.partition(".")[0] in internal


class ViewModule(types.ModuleType):
    """A module that reads and writes through to ``real``, except for the names in its own dict.

    Reads of names the view does not override fall through to the real module (``__getattr__`` runs
    only for names missing from the view), so attributes torch adds or a library patches later are
    seen at once; writes go to the real module, so a script's ``torch.x = y`` is seen by everyone.
    """

    def __init__(self, real: types.ModuleType, overrides: Mapping[str, Any]) -> None:
        super().__init__(real.__name__, real.__doc__)
        for dunder in ("__file__", "__path__", "__package__", "__spec__", "__loader__"):
            if hasattr(real, dunder):
                object.__setattr__(self, dunder, getattr(real, dunder))
        object.__setattr__(self, "_anydevice_real", real)
        for name, value in overrides.items():
            object.__setattr__(self, name, value)

    def __getattr__(self, name: str) -> Any:
        return getattr(object.__getattribute__(self, "_anydevice_real"), name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self.__dict__:
            object.__setattr__(self, name, value)
        else:
            setattr(object.__getattribute__(self, "_anydevice_real"), name, value)

    def __delattr__(self, name: str) -> None:
        if name in self.__dict__:
            object.__delattr__(self, name)
        else:
            delattr(object.__getattribute__(self, "_anydevice_real"), name)

    def __dir__(self) -> list[str]:
        return sorted(set(dir(object.__getattribute__(self, "_anydevice_real"))) | set(self.__dict__))

    def __repr__(self) -> str:
        return repr(object.__getattribute__(self, "_anydevice_real"))


class Scope:
    """The views of one enabled cuda-compat and the hook that binds them.

    ``replacements`` maps ``id(real object)`` to what a non-internal module holds instead: the real
    ``torch`` to its view, ``torch.cuda`` and ``torch.accelerator`` to theirs, and every function of
    theirs a module may have taken by name (``from torch.cuda import is_available``) to the view's.
    """

    def __init__(self, internal: Iterable[str] = INTERNAL_PACKAGES) -> None:
        self.internal = frozenset(internal)
        self.replacements: dict[int, tuple[Any, Any]] = {}  # id(real) -> (real, view): real kept alive
        self.views: dict[str, ViewModule] = {}
        self.later: dict[str, Callable[[types.ModuleType], Mapping[str, Any]]] = {}
        """Views of torch submodules too costly to import at enable: made when the module is first imported."""
        self.rebound: list[tuple[types.ModuleType, str]] = []
        """(module, name) of each global :meth:`rebind` replaced (names bound before enable)."""

    def add_view(self, real: types.ModuleType, overrides: Mapping[str, Any]) -> ViewModule:
        """A view of ``real`` with ``overrides``; names a module took from ``real`` map to the overrides."""
        view = ViewModule(real, overrides)
        self.views[real.__name__] = view
        self.replacements[id(real)] = (real, view)
        for name, value in overrides.items():
            original = real.__dict__.get(name)
            if original is not None and original is not value and not isinstance(original, SHARED_VALUES):
                self.replacements.setdefault(id(original), (original, value))
        return view

    def attach(self, parent: ViewModule, name: str, child: ViewModule) -> None:
        """``parent.name`` is ``child`` in the view (``torch.cuda`` in the view of ``torch``)."""
        object.__setattr__(parent, name, child)

    def attach_all(self) -> None:
        """Put every view where its parent's view has it (``torch.cuda`` in ``torch``, ``cpp_extension`` in ``torch.utils``)."""
        for name, child in list(self.views.items()):
            parent, _, leaf = name.rpartition(".")
            if parent in self.views:
                self.attach(self.views[parent], leaf, child)

    def make_later_views(self) -> None:
        """Make the views in :attr:`later` whose modules are imported by now."""
        for name in [n for n in self.later if n in sys.modules]:
            self.add_view(sys.modules[name], self.later.pop(name)(sys.modules[name]))
            self.attach_all()

    def swap(self, value: Any) -> Any:
        """What a non-internal module holds instead of ``value`` (``value`` itself when nothing)."""
        found = self.replacements.get(id(value))
        return found[1] if found is not None and found[0] is value else value

    def rebind(self, modules: Iterable[types.ModuleType]) -> int:
        """Replace real torch objects in the globals of ``modules`` that are not internal; returns how many."""
        done = 0
        for module in modules:
            name = getattr(module, "__name__", None)
            if not isinstance(name, str) or is_internal(name, self.internal) or isinstance(module, ViewModule):
                continue
            namespace = getattr(module, "__dict__", None)
            if not isinstance(namespace, dict):
                continue
            for key, value in list(namespace.items()):
                swapped = self.swap(value)
                if swapped is not value:
                    namespace[key] = swapped
                    self.rebound.append((module, key))
                    done += 1
        return done

    def held_elsewhere(self, modules: Iterable[types.ModuleType]) -> list[str]:
        """Where the functions and classes of non-internal ``modules`` hold real torch objects that :meth:`rebind`
        cannot reach: default arguments, closures, class attributes (``"__main__.step (default argument)"``)."""
        found: list[str] = []

        def real(value: Any) -> bool:
            entry = self.replacements.get(id(value))
            return entry is not None and entry[0] is value

        def function(owner: str, fn: Any) -> None:
            defaults = (*(fn.__defaults__ or ()), *(fn.__kwdefaults__ or {}).values())
            if any(real(value) for value in defaults):
                found.append(f"{owner} (default argument)")
            cells = fn.__closure__ or ()
            if any(real(_cell_value(cell)) for cell in cells):
                found.append(f"{owner} (closure)")

        for module in modules:
            name = getattr(module, "__name__", None)
            if not isinstance(name, str) or is_internal(name, self.internal) or isinstance(module, ViewModule):
                continue
            for key, value in list(getattr(module, "__dict__", {}).items()):
                if getattr(value, "__module__", None) != name:
                    continue
                if isinstance(value, types.FunctionType):
                    function(f"{name}.{key}", value)
                elif isinstance(value, type):
                    for attribute, member in list(vars(value).items()):
                        if real(member):
                            found.append(f"{name}.{key}.{attribute} (class attribute)")
                        elif isinstance(member, types.FunctionType):
                            function(f"{name}.{key}.{attribute}", member)
        return list(dict.fromkeys(found))  # a module under two names in sys.modules is said once

    def unbind(self, modules: Iterable[types.ModuleType]) -> None:
        """Give every module that holds one of this scope's views (or view functions) the real object back."""
        back = {id(view): real for real, view in self.replacements.values()}
        for module in modules:
            namespace = getattr(module, "__dict__", None)
            if not isinstance(namespace, dict) or isinstance(module, ViewModule):
                continue
            for key, value in list(namespace.items()):
                real = back.get(id(value))
                if real is not None:
                    namespace[key] = real


class ImportHook:
    """``builtins.__import__`` that hands views to non-internal importers of ``torch``.

    Installed at interpreter start by the start-up hook (or at enable): it costs one dict lookup per
    import statement. ``on_torch`` runs once, the first time a non-internal module imports ``torch``
    after torch is loaded (that is where cuda-compat enables itself); ``scope`` is set once enabled.
    One answer for every thread: a thread that imports torch while another runs ``on_torch`` waits for
    its outcome (a thread pool importing the script's modules at start-up gets the view in each).
    """

    def __init__(self, on_torch: Callable[[], Scope | None]) -> None:
        self.original: Callable[..., Any] = builtins.__import__
        self.on_torch = on_torch
        self.scope: Scope | None = None
        self.waiting = True
        self.deciding = threading.RLock()  # re-entrant: on_torch's own imports of torch pass through

    def decide(self) -> Scope | None:
        """Run ``on_torch`` once (every thread waits for it); the scope it made, or None."""
        with self.deciding:
            if self.scope is None and self.waiting:
                self.waiting = False
                scope = self.on_torch()
                if scope is not None:
                    self.scope = scope
            return self.scope

    def __call__(
        self,
        name: str,
        globals: Mapping[str, Any] | None = None,  # noqa: A002 - __import__'s own parameter names
        locals: Mapping[str, Any] | None = None,  # noqa: A002
        fromlist: Any = (),
        level: int = 0,
    ) -> Any:
        module = self.original(name, globals, locals, fromlist, level)
        if level or not (name == "torch" or name.startswith("torch.")):
            return module
        importer = globals.get("__name__") if globals is not None else None
        scope = self.scope
        if scope is None:
            if is_internal(importer) or not torch_loaded():
                return module
            scope = self.decide()  # waits while another thread decides
            if scope is None:
                return module
        if scope.later and name in scope.later:
            scope.make_later_views()
        if is_internal(importer, scope.internal):
            return module
        return scope.swap(module)

    def install(self) -> None:
        """Put the hook in place (once)."""
        if not isinstance(builtins.__import__, ImportHook):
            self.original = builtins.__import__
            builtins.__import__ = self

    def remove(self) -> None:
        """Put the original ``__import__`` back (if nobody replaced it since)."""
        if builtins.__import__ is self:
            builtins.__import__ = self.original


def _cell_value(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return None


def torch_loaded() -> bool:
    """Whether ``torch`` is imported and has finished initialising (not a module importing it from inside torch's import)."""
    torch = sys.modules.get("torch")
    return torch is not None and not getattr(getattr(torch, "__spec__", None), "_initializing", False)


def installed_hook() -> ImportHook | None:
    """The hook in place, if any."""
    hook = builtins.__import__
    return hook if isinstance(hook, ImportHook) else None
