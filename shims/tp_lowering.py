"""What every tensor-parallel lowering shares: the plan expanded and checked before anything is split.

Subclasses (shims/tp_dtensor.py, shims/tp_spmd.py) add the device's meshes, splits and batches;
``Collectives.tensor_parallelism`` returns one.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

from anydevice.errors import DistributedError
from anydevice.shims import tp_checks
from anydevice.shims.tp_plan import TP_AXIS, Rule, check_divisible, degrees, expand


class Lowering(ABC):
    """What every tensor-parallel lowering shares: the plan's checks. Subclasses add the device's
    meshes, splits and batches (``Collectives.tensor_parallelism`` returns one)."""

    kind = ""
    local_shards = True
    """Each rank computes on its local shard (DTensor); False where the compiler partitions a global program
    (XLA SPMD), which keeps any split correct, so whole heads per rank are not required."""

    @abstractmethod
    def world(self) -> int:
        """What a mesh spans: ranks, or the host's devices."""

    def resolve(self, spec: Mapping[str, int]) -> dict[str, int]:
        """Named degrees with ``-1`` resolved against :meth:`world`."""
        return degrees(spec, self.world())

    def default_degrees(self) -> dict[str, int]:
        """The mesh ``parallelize`` makes when given none: every rank (device) on ``tp``."""
        return self.resolve({TP_AXIS: -1})

    def expand(self, model: Any, plan: Mapping[str, str] | str) -> list[Rule]:
        """:func:`expand`: the plan's modules and styles (``"auto"`` leaves out a tied pair it would split apart)."""
        rules = expand(model, plan)
        return tp_checks.untie_auto(model, rules) if plan == "auto" else rules

    def check(self, model: Any, rules: list[Rule], mesh_degrees: Mapping[str, int]) -> None:
        """Real weights; a ``tp`` axis whose degree divides every split dimension and head count; tied weights
        placed alike; every split activation taken split (``anydevice.shims.tp_checks``)."""
        tp_checks.refuse_meta(model)
        if TP_AXIS not in mesh_degrees:
            raise DistributedError(
                f"The mesh has no '{TP_AXIS}' axis: {dict(mesh_degrees)}.",
                "Build it with ad.distributed.mesh({'dp': -1, 'tp': 2}).",
            )
        check_divisible(model, rules, mesh_degrees[TP_AXIS])
        if self.local_shards:  # each rank views its own shard: a head split across ranks breaks the model's view()
            tp_checks.check_heads(model, rules, mesh_degrees[TP_AXIS])
        tp_checks.check_ties(model, rules)
        tp_checks.check_flow(model, rules)
        tp_checks.check_chains(model, rules)
