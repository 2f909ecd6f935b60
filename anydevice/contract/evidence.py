"""What stands behind a claim about a device: :class:`Evidence`, one vocabulary for every view.

``anydevice list``, ``ad.capabilities()``, ``anydevice check``, the compatibility matrix and the docs say
the same six levels, strongest first:

========== ============================================================== =====================================
level      meaning                                                        ``source`` names
========== ============================================================== =====================================
ran        ran on the chip itself                                         where the results are (a result file)
compiled   compiled by the vendor's compiler for the chip, not run        the compiler and its version
registered the vendor's installed package registers it (kernels, names)   the package and its version
stand-in   ran on a stand-in, not the chip (torch_xla on PJRT CPU, a fake) the stand-in
declared   written from a document, not run                               the document (and ``date``)
unknown    nothing stands behind it                                       (nothing)
========== ============================================================== =====================================

Only ``ran`` is "verified on hardware". Importing this module imports nothing heavy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

Level = Literal["ran", "compiled", "registered", "stand-in", "declared", "unknown"]
"""The evidence levels, strongest first (:data:`LEVELS`)."""
LEVELS: Final[tuple[Level, ...]] = ("ran", "compiled", "registered", "stand-in", "declared", "unknown")
"""Every level, strongest first: sort by ``LEVELS.index(level)``."""

_WORDS: Final[dict[Level, str]] = {
    "ran": "ran on the chip",
    "compiled": "compiled by the vendor's compiler, not run",
    "registered": "registered in the vendor's package",
    "stand-in": "ran on a stand-in, not the chip",
    "declared": "declared, not run",
    "unknown": "unknown",
}


@dataclass(frozen=True)
class Evidence:
    """What stands behind a claim: a :data:`Level`, where the evidence is (``source``) and when (``date``).

    Build one with the class methods, which say what ``source`` must name::

        Evidence.ran("compat_matrix/results/cpu.json")
        Evidence.compiled("libtpu", "0.0.42.1")
        Evidence.declared("Google Cloud TPU docs", "2026-11-20")
    """

    level: Level = "unknown"
    source: str = ""
    """Where the evidence is: a result file (``ran``), a compiler (``compiled``), a package (``registered``),
    the stand-in (``stand-in``) or a document (``declared``); empty only for ``unknown``."""
    date: str = ""
    """When (ISO date): the document's date for ``declared``, the run's for ``ran``; empty: not said."""
    simulated: bool = False
    """With ``stand-in``: the stand-in is a simulated vendor module (a fake), not the vendor's own runtime on another
    backend (torch_xla on PJRT CPU): the compatibility matrix marks its results "simulated" from this, not from words."""

    @classmethod
    def ran(cls, results: str, date: str = "") -> Evidence:
        """Ran on the chip; ``results`` is where the results are (a file a reader can open)."""
        return cls("ran", results, date)

    @classmethod
    def compiled(cls, compiler: str, version: str, date: str = "") -> Evidence:
        """Compiled by the vendor's compiler (``libtpu``, ``neuronx-cc``) of ``version`` for the chip; never run."""
        return cls("compiled", f"{compiler} {version}", date)

    @classmethod
    def registered(cls, package: str, version: str) -> Evidence:
        """Read from the vendor's installed package (``torch_tpu``'s PrivateUse1 kernels) of ``version``."""
        return cls("registered", f"{package} {version}")

    @classmethod
    def stand_in(cls, what: str, date: str = "", *, simulated: bool = False) -> Evidence:
        """Ran on a stand-in for the chip: ``what`` names it (``torch_xla on PJRT CPU``, ``the torch-neuronx fake``);
        ``simulated``: it is a simulated vendor module, not the vendor's runtime (:attr:`simulated`)."""
        return cls("stand-in", what, date, simulated)

    @classmethod
    def declared(cls, source: str, date: str = "") -> Evidence:
        """Written from ``source`` (a document, a vendor's table) of ``date``; nothing was run."""
        return cls("declared", source, date)

    @property
    def verified_on_hardware(self) -> bool:
        """True only when the claim ran on the chip."""
        return self.level == "ran"

    @property
    def words(self) -> str:
        """The level in a few words (``declared, not run``), without the source."""
        return _WORDS[self.level]

    def label(self) -> str:
        """One phrase for people: ``ran on the chip (compat_matrix/results/cpu.json)``."""
        where = ", ".join(part for part in (self.source, self.date) if part)
        return f"{_WORDS[self.level]} ({where})" if where else _WORDS[self.level]

    def as_dict(self) -> dict[str, str]:
        """The JSON form every view writes: ``level``, ``source``, ``date`` and the ``label``."""
        return {"level": self.level, "source": self.source, "date": self.date, "words": self.words, "label": self.label()}

    def problems(self) -> list[str]:
        """What is wrong with this evidence (a level that says nothing of where); empty when valid."""
        if self.level not in LEVELS:
            return [f"level {self.level!r} is not one of {', '.join(LEVELS)}"]
        if self.level != "unknown" and not self.source.strip():
            return [f"level {self.level!r} needs its source (where the evidence is)"]
        if self.simulated and self.level != "stand-in":
            return [f"level {self.level!r} cannot be simulated: only a stand-in is (Evidence.stand_in(..., simulated=True))"]
        return []


UNKNOWN: Final = Evidence()
"""Nothing stands behind it: what a device that declares no evidence gets."""
