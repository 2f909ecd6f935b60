"""``examples/rl.py`` on cpu: one process and Ray actors per role give the same curves; its JSON says where each role ran."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from tests.roles.rl_runs import assert_same_curves, run_rl

ITERATIONS = "4"


@pytest.fixture(scope="module")
def one_process() -> dict[str, Any]:
    result = run_rl(None, "--iterations", ITERATIONS)
    assert isinstance(result, dict)
    return result


def test_last_line_is_the_result(one_process: dict[str, Any]) -> None:
    r = one_process
    assert r["iterations"] == 4 and r["roles"] == {"trainer": "cpu", "rollout": "cpu"}
    assert r["weight_sync"] == "same-process copy"
    assert len(r["rewards"]) == len(r["losses"]) == 4 and all(0 <= x <= 1 for x in r["rewards"])
    assert r["mean_reward"] == pytest.approx(sum(r["rewards"]) / 4) and r["last_loss"] == r["losses"][-1]


def test_ray_actors_per_role_give_the_same_curves(one_process: dict[str, Any]) -> None:
    pytest.importorskip("ray")
    ray_run = run_rl("trainer=cpu,rollout=cpu", "--iterations", ITERATIONS, "--ray")
    assert isinstance(ray_run, dict)
    assert ray_run["roles"] == {"trainer": "cpu", "rollout": "cpu"} and ray_run["weight_sync"] == "shared memory"
    assert_same_curves(ray_run, one_process)


def test_a_bad_role_device_is_refused_before_anything_starts() -> None:
    done = run_rl("trainer=cpuu,rollout=cpu", "--iterations", "1", check=False)
    assert isinstance(done, subprocess.CompletedProcess)
    assert done.returncode != 0 and "role 'trainer' (cpuu): Unknown device 'cpuu'. Did you mean 'cpu'?" in done.stderr
    assert "iterations" not in done.stdout
