"""``examples/rl.py`` on cpu: one process and Ray actors per role give the same curves; its JSON says where each role ran."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from tests.roles.rl_runs import assert_same_curves, run_rl
from tests.utils import REPO, python

RL = REPO / "examples" / "rl.py"

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
    assert done.stderr.startswith("error: role 'trainer' (cpuu)") and "Traceback" not in done.stderr  # issue 46


def test_ray_asked_for_without_ray_is_one_line() -> None:
    """Issue 46: ``--ray`` where Ray cannot be imported is one line naming the fix, not a bare ModuleNotFoundError."""
    code = (
        "import runpy, sys\n"
        "sys.modules['ray'] = None  # as where Ray is not installed\n"
        f"sys.argv = [{str(RL)!r}, '--ray']\n"
        f"runpy.run_path({str(RL)!r}, run_name='__main__')\n"
    )
    done = python("-c", code, env={"ANYDEVICE_ROLES": "trainer=cpu,rollout=cpu"})
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        "error: --ray needs Ray (import of ray halted; None in sys.modules): pip install 'ray[default]', or leave out --ray"
    ], done.stderr
