"""The check step: an exported model's outputs against PyTorch's on the same inputs, within a stated tolerance.

An output element agrees when ``|exported - torch| <= atol + rtol * |torch|`` (``numpy.allclose``'s
rule). The defaults: float32 ``atol=rtol=1e-4`` (LiteRT's CPU kernels sum in another order);
quantized exports are judged on the error relative to the output's largest magnitude
(``atol = tolerance * max|torch|``), since int8 weights move every output a little.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FLOAT_TOLERANCE = 1e-4
"""atol and rtol of a float32 export."""

QUANTIZED_TOLERANCE = {"full_dynamic_recipe": 0.1, "full_weight_only_recipe": 0.1, "full_fp16_recipe": 0.01}
"""A quantized export's allowed error, as a fraction of the output's largest magnitude."""


@dataclass(frozen=True)
class Check:
    """How the exported model's outputs compared with PyTorch's (every output, every element)."""

    atol: float
    rtol: float
    max_abs_error: float
    max_rel_error: float  # max |exported - torch| / max |torch| over the outputs
    passed: bool
    worst_output: int  # index of the output with the largest excess over its tolerance

    def __str__(self) -> str:
        verdict = "agrees" if self.passed else "DISAGREES"
        return (
            f"{verdict} with PyTorch: max |error| {self.max_abs_error:.3g} (relative {self.max_rel_error:.3g}) "
            f"within atol {self.atol:.3g} + rtol {self.rtol:.3g}*|torch|"
        )


def tolerance_for(recipe: str | None, reference: list[np.ndarray], given: tuple[float, float] | None) -> tuple[float, float]:
    """(atol, rtol): the caller's, else float32's defaults, else the quantized rule scaled by the output's magnitude."""
    if given is not None:
        return given
    if recipe is None:
        return FLOAT_TOLERANCE, FLOAT_TOLERANCE
    scale = max((float(np.abs(r).max()) for r in reference if r.size), default=1.0)
    return QUANTIZED_TOLERANCE[recipe] * scale, 0.0


def compare(exported: list[np.ndarray], reference: list[np.ndarray], atol: float, rtol: float) -> Check:
    """Compare output by output; shapes must match exactly."""
    if len(exported) != len(reference):
        return Check(atol, rtol, float("inf"), float("inf"), False, 0)
    max_abs, scale, worst, worst_excess, passed = 0.0, 0.0, 0, -np.inf, True
    for i, (got, want) in enumerate(zip(exported, reference, strict=True)):
        if got.shape != want.shape:
            return Check(atol, rtol, float("inf"), float("inf"), False, i)
        want64, got64 = want.astype(np.float64), got.astype(np.float64)
        with np.errstate(invalid="ignore"):  # inf - inf: equal infinities agree, as numpy.allclose has it
            error = np.where(got64 == want64, 0.0, np.abs(got64 - want64))
        if not np.isfinite(error).all():
            return Check(atol, rtol, float("inf"), float("inf"), False, i)
        excess = float((error - (atol + rtol * np.abs(want64))).max(initial=-np.inf))
        passed = passed and excess <= 0
        if excess > worst_excess:
            worst, worst_excess = i, excess
        max_abs = max(max_abs, float(error.max(initial=0.0)))
        scale = max(scale, float(np.abs(want64).max(initial=0.0)))
    return Check(atol, rtol, max_abs, max_abs / scale if scale else max_abs, passed, worst)
