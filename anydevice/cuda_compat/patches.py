"""Attribute patches that can be undone, newest first."""

from __future__ import annotations

from typing import Any

_MISSING = object()


class Patches:
    """``set(owner, name, value)`` remembers what was there; :meth:`restore` puts it back."""

    def __init__(self) -> None:
        self._undo: list[tuple[Any, str, Any]] = []
        self.handles: list[Any] = []  # torch hook handles (``.remove()``) dropped on restore

    def set(self, owner: Any, name: str, value: Any) -> None:
        """``owner.name = value``."""
        before = owner.__dict__.get(name, _MISSING) if isinstance(owner, type) else getattr(owner, name, _MISSING)
        self._undo.append((owner, name, before))
        setattr(owner, name, value)

    def restore(self) -> None:
        """Undo every patch and remove every hook, newest first."""
        while self.handles:
            self.handles.pop().remove()
        while self._undo:
            owner, name, before = self._undo.pop()
            if before is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, before)
