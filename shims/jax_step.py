"""The training step as a JAX program: the model's loss, its gradients and the real optimizer's update.

Used by :mod:`anydevice.shims.tpu_aot` only (imports JAX at call time). The optimizer update
is written out per torch optimizer class with its hyper-parameters read from ``param_groups``; its
state has the shapes and dtypes torch keeps (SGD's momentum buffer, Adam's two moments).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from anydevice.errors import AnyDeviceError

Update = Callable[[Any, Any, Any], tuple[Any, Any]]  # (params, grads, state) -> (new params, new state)


@dataclass(frozen=True)
class OptimizerProgram:
    """An optimizer as JAX code: how many state tensors per parameter, its update and a description."""

    name: str
    slots: int
    update: Update
    description: str


def optimizer_program(optimizer: Any) -> OptimizerProgram:
    """The JAX form of ``optimizer`` (a torch optimizer or None: no update); another class is refused by name."""
    import jax
    import jax.numpy as jnp

    if optimizer is None:
        return OptimizerProgram("none", 0, lambda p, g, s: (p, s), "no optimizer (forward and backward only)")
    kind = type(optimizer).__name__
    group = optimizer.param_groups[0]
    lr, wd = float(group.get("lr", 1e-3)), float(group.get("weight_decay", 0.0))
    tree = jax.tree.map
    if kind == "SGD":
        momentum, nesterov = float(group.get("momentum", 0.0)), bool(group.get("nesterov", False))

        def sgd(p: Any, g: Any, s: Any) -> tuple[Any, Any]:
            g = tree(lambda g, p: g + wd * p, g, p) if wd else g
            if not momentum:
                return tree(lambda p, g: p - lr * g, p, g), s
            (buf,) = s
            buf = tree(lambda b, g: momentum * b + g, buf, g)
            step = tree(lambda g, b: g + momentum * b, g, buf) if nesterov else buf
            return tree(lambda p, d: p - lr * d, p, step), (buf,)

        return OptimizerProgram(kind, 1 if momentum else 0, sgd, f"SGD(lr={lr:g}, momentum={momentum:g}, weight_decay={wd:g})")
    if kind in ("Adam", "AdamW"):
        b1, b2 = (float(b) for b in group.get("betas", (0.9, 0.999)))
        eps, decoupled = float(group.get("eps", 1e-8)), kind == "AdamW" or bool(group.get("decoupled_weight_decay", False))

        def adam(p: Any, g: Any, s: Any) -> tuple[Any, Any]:
            m, v = s
            if wd and not decoupled:
                g = tree(lambda g, p: g + wd * p, g, p)
            m = tree(lambda m, g: b1 * m + (1 - b1) * g, m, g)
            v = tree(lambda v, g: b2 * v + (1 - b2) * g * g, v, g)
            # the first step's bias corrections (step 1): the program's shape is that of every step
            c1, c2 = 1 - b1, 1 - b2
            decay = 1 - lr * wd if decoupled else 1.0
            p = tree(lambda p, m, v: p * decay - lr * (m / c1) / (jnp.sqrt(v / c2) + eps), p, m, v)
            return p, (m, v)

        return OptimizerProgram(kind, 2, adam, f"{kind}(lr={lr:g}, betas=({b1:g}, {b2:g}), eps={eps:g}, weight_decay={wd:g})")
    raise AnyDeviceError(
        f"The compiled check does not model the {kind} optimizer yet.",
        "Check with SGD, Adam or AdamW of the same size of state, or without --target tpu:<slice> for the CPU estimate.",
    )
