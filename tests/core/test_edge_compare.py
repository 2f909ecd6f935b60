"""The export check step (``anydevice.edge.compare``): tolerances and the output-by-output comparison, on numpy arrays.

Plain numpy here; the litert lane (tests/export) runs the same check on a real LiteRT model's outputs.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from anydevice.edge import compare, litert
from anydevice.edge.compare import Check


def test_a_caller_given_tolerance_wins_over_every_default() -> None:
    assert compare.tolerance_for("full_dynamic_recipe", [np.ones(3)], (0.5, 0.25)) == (0.5, 0.25)
    assert compare.tolerance_for(None, [np.ones(3)], (0.0, 0.0)) == (0.0, 0.0)


def test_a_float_export_gets_float32_defaults() -> None:
    assert compare.tolerance_for(None, [np.full(4, 1000.0)], None) == (1e-4, 1e-4)


def test_a_quantized_export_scales_its_atol_by_the_largest_output_magnitude() -> None:
    reference = [np.array([1.0, -20.0]), np.array([], dtype=np.float32), np.array([[3.0]])]
    atol, rtol = compare.tolerance_for("full_dynamic_recipe", reference, None)
    assert atol == pytest.approx(2.0) and rtol == 0.0
    atol, rtol = compare.tolerance_for("full_fp16_recipe", reference, None)
    assert atol == pytest.approx(0.2) and rtol == 0.0


def test_a_quantized_export_with_only_empty_outputs_scales_by_one() -> None:
    assert compare.tolerance_for("full_weight_only_recipe", [np.zeros((0, 3))], None) == (0.1, 0.0)
    assert compare.tolerance_for("full_weight_only_recipe", [], None) == (0.1, 0.0)


def test_every_quantize_name_has_a_tolerance() -> None:
    assert set(litert.QUANTIZE.values()) <= set(compare.QUANTIZED_TOLERANCE)


def test_outputs_within_tolerance_agree_and_report_their_errors() -> None:
    reference = [np.array([1.0, 2.0]), np.array([[4.0]])]
    exported = [np.array([1.00001, 2.0]), np.array([[4.00002]])]
    check = compare.compare(exported, reference, 1e-4, 1e-4)
    assert check.passed
    assert check.max_abs_error == pytest.approx(2e-5)
    assert check.max_rel_error == pytest.approx(2e-5 / 4.0)
    assert str(check).startswith("agrees with PyTorch: max |error| 2e-05 (relative 5e-06)")
    assert str(check).endswith("within atol 0.0001 + rtol 0.0001*|torch|")


def test_the_rtol_term_follows_each_elements_own_magnitude() -> None:
    reference = [np.array([1000.0, 1.0])]
    assert compare.compare([np.array([1000.05, 1.0])], reference, 0.0, 1e-4).passed
    assert not compare.compare([np.array([1000.0, 1.05])], reference, 0.0, 1e-4).passed


def test_the_worst_output_is_the_one_furthest_over_its_tolerance() -> None:
    reference = [np.zeros(3), np.zeros(3), np.zeros(3)]
    exported = [np.array([0.5, 0.0, 0.0]), np.array([0.0, 2.0, 0.0]), np.array([0.0, 0.0, 1.0])]
    check = compare.compare(exported, reference, 0.1, 0.0)
    assert not check.passed
    assert check.worst_output == 1
    assert check.max_abs_error == 2.0
    assert check.max_rel_error == 2.0  # the reference is all zeros: the relative error is the absolute one
    assert str(check).startswith("DISAGREES with PyTorch: max |error| 2")


def test_a_different_number_of_outputs_disagrees_at_the_first() -> None:
    check = compare.compare([np.ones(2)], [np.ones(2), np.ones(2)], 1e-4, 1e-4)
    assert check == Check(1e-4, 1e-4, math.inf, math.inf, False, 0)


def test_a_shape_mismatch_disagrees_at_that_output_even_when_values_broadcast() -> None:
    check = compare.compare([np.ones(2), np.ones((1, 2))], [np.ones(2), np.ones(2)], 1e-4, 1e-4)
    assert (check.passed, check.worst_output, check.max_abs_error) == (False, 1, math.inf)


def test_a_non_finite_output_disagrees_whatever_the_tolerance() -> None:
    check = compare.compare([np.ones(2), np.array([np.nan, 1.0])], [np.ones(2), np.ones(2)], 1e9, 1e9)
    assert (check.passed, check.worst_output, check.max_rel_error) == (False, 1, math.inf)
    assert not compare.compare([np.array([np.inf])], [np.array([1.0])], 1.0, 1.0).passed


def test_the_same_infinity_on_both_sides_agrees_as_in_numpy_allclose() -> None:
    exported, reference = [np.array([np.inf, -np.inf, 1.0])], [np.array([np.inf, -np.inf, 1.0])]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "invalid value encountered in subtract"
        check = compare.compare(exported, reference, 1e-4, 1e-4)
    assert np.allclose(exported[0], reference[0]) and check.passed and check.max_abs_error == 0.0
    assert not compare.compare([np.array([-np.inf])], [np.array([np.inf])], 1.0, 1.0).passed


def test_low_precision_outputs_are_compared_in_float64() -> None:
    exported = [np.array([0.1, 65504.0], dtype=np.float16)]
    reference = [np.array([0.1, 65504.0], dtype=np.float32)]
    check = compare.compare(exported, reference, 1e-4, 1e-3)
    assert check.passed  # float16 0.1 is 0.0999755..., within atol + rtol * 0.1
    assert 0 < check.max_abs_error < 3e-5


def test_empty_outputs_agree_with_no_error() -> None:
    check = compare.compare([np.zeros((0, 4))], [np.zeros((0, 4))], 0.0, 0.0)
    assert (check.passed, check.max_abs_error, check.max_rel_error, check.worst_output) == (True, 0.0, 0.0, 0)
