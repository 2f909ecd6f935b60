"""The distributed checks without a script: mesh degrees against the world, whole slices, lacking reduce ops."""

from __future__ import annotations

import pytest

import anydevice as ad
from anydevice.preflight.topology import resolve_mesh

torch = pytest.importorskip("torch")


@pytest.mark.parametrize(
    ("mesh", "world", "resolved", "problem"),
    [
        ({"dp": -1, "tp": 4}, 8, {"dp": 2, "tp": 4}, None),
        ({"dp": 2, "tp": 4}, 8, {"dp": 2, "tp": 4}, None),
        ({"dp": -1, "tp": 3}, 8, None, "3 does not divide the world of 8"),
        ({"dp": 2, "tp": 2}, 8, None, "needs 4 process(es), but the world has 8"),
        ({"dp": -1, "tp": -1}, 8, None, "at most one -1"),
        ({"dp": 0, "tp": 8}, 8, None, "must be positive"),
    ],
)
def test_mesh_degrees_are_resolved_against_the_world(
    mesh: dict[str, int], world: int, resolved: dict[str, int] | None, problem: str | None
) -> None:
    got, why = resolve_mesh(mesh, world)
    if problem is None:
        assert why is None and got == resolved
    else:
        assert why is not None and problem in why


def test_ad_check_judges_world_size_and_mesh_per_target() -> None:
    model = torch.nn.Linear(4, 4)
    report = ad.check(model, torch.randn(2, 4), target="tpu,cpu", world_size=4, mesh={"dp": -1, "tp": 2})
    assert report.ok and report.observation.mesh == {"dp": -1, "tp": 2}
    report = ad.check(model, torch.randn(2, 4), target="tpu,cpu", world_size=4, mesh={"dp": 3, "tp": 2})
    assert [t.verdict for t in report.targets] == ["will not launch", "will not launch"]
    report = ad.check(model, torch.randn(2, 4), target="tpu,cpu", world_size=3)
    assert [t.verdict for t in report.targets] == ["will not launch", "runs"]
