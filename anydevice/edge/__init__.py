"""Export to edge runtimes: ``ad.export(model, example_inputs, target="litert", path=...)``.

Nothing of a runtime is imported until an export is asked for (:mod:`anydevice.edge.litert`).
"""

from __future__ import annotations

from anydevice.edge.api import ExportedModel, export

__all__ = ["ExportedModel", "export"]
