"""The compatibility matrix: probes, their result files, and the merged page.

``anydevice matrix probe`` runs :func:`~anydevice.compat_matrix.runner.run_probes` on the selected
device; ``anydevice matrix render`` merges result files into ``index.html`` and ``index.md``
(:mod:`~anydevice.compat_matrix.page`). Plugins add probes with the
``anydevice_register_probes(register)`` hook, registering :class:`~anydevice.compat_matrix.probe.Probe`
objects. Importing this package does not import torch.
"""

from __future__ import annotations

from anydevice.compat_matrix.probe import HarnessError, Partial, Probe, Skip

__all__ = ["HarnessError", "Partial", "Probe", "Skip"]
