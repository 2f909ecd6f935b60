"""``examples/rl.py`` with the trainer on xla and the rollout on cpu: the same curves as both on cpu (same seeds)."""

from __future__ import annotations

import importlib.util

import pytest

from tests.roles.rl_runs import assert_same_curves, run_rl

pytestmark = pytest.mark.xla
pytest.importorskip("torch_xla")


def test_trainer_on_xla_rollout_on_cpu_matches_cpu() -> None:
    cpu = run_rl("trainer=cpu,rollout=cpu", "--iterations", "3")
    mixed = run_rl("trainer=xla,rollout=cpu", "--iterations", "3")
    assert isinstance(cpu, dict) and isinstance(mixed, dict)
    assert mixed["roles"] == {"trainer": "xla:0", "rollout": "cpu"} and mixed["weight_sync"] == "same-process copy"
    assert_same_curves(mixed, cpu)
    if importlib.util.find_spec("ray") is not None:  # the lane venv has no Ray; a copy with Ray runs the actors too
        actors = run_rl("trainer=xla,rollout=cpu", "--iterations", "3", "--ray")
        assert isinstance(actors, dict) and actors["weight_sync"] == "ray object store"
        assert actors["roles"] == {"trainer": "xla:0", "rollout": "cpu"}
        assert_same_curves(actors, cpu)
