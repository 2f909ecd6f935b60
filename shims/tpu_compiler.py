"""Where a TPU slice target's compiler is found: libtpu's, through :mod:`anydevice.shims.tpu_aot` (the tpu-check extra).

A module of its own so that the slice catalogue (:mod:`anydevice.shims.tpu_slices`, which the compiler reads) never
imports the compiler back; nothing heavy is imported until a slice target asks for it.
"""

from __future__ import annotations

from anydevice.contract.check_facts import SliceCompiler


def compiler() -> SliceCompiler:
    """libtpu's slice compiler (:mod:`anydevice.shims.tpu_aot`), imported only when asked for."""
    from anydevice.shims import tpu_aot

    return tpu_aot
