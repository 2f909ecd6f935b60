"""SLURM: srun tasks form one process group (ad.distributed.init and anydevice run), node lists expand as SLURM writes them."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest

from anydevice.distributed import slurm as slurm_env
from anydevice.errors import DistributedError
from tests.distributed.helpers import REPO, TRAIN, WORKERS, _env, anydevice_run

SMALL = ["--steps", "12", "--d-model", "32", "--layers", "1", "--batch-size", "4", "--seq-len", "32", "--log-every", "0"]


@pytest.mark.parametrize(
    ("nodelist", "hosts"),
    [
        ("node[01-04,07]", ["node01", "node02", "node03", "node04", "node07"]),
        ("a[1-3,5],b7", ["a1", "a2", "a3", "a5", "b7"]),
        ("gpu-a100-[008-010]", ["gpu-a100-008", "gpu-a100-009", "gpu-a100-010"]),
        ("r[1-2]n[09-10]", ["r1n09", "r1n10", "r2n09", "r2n10"]),
        ("login,c[9-11].ib", ["login", "c9.ib", "c10.ib", "c11.ib"]),
        ("single", ["single"]),
    ],
)
def test_node_lists_expand_as_slurm_writes_them(nodelist: str, hosts: list[str]) -> None:
    assert slurm_env.expand_nodelist(nodelist) == hosts


@pytest.mark.parametrize(
    ("nodelist", "says"),
    [
        ("node[1-", "unclosed"),
        ("node]1[", "unbalanced"),
        ("a[3-1]", "backwards"),
        ("a[x]", "not a number"),
        ("a,,b", "empty"),
        # issue 35: absurd ranges used to be expanded until a MemoryError
        ("n[0-99999999999999]", r"the range 0-99999999999999 names 100000000000000 nodes, more than the 1000000"),
        ("r[1-2000]n[1-2000]", r"r\[1-2000\]n\[1-2000\] names 4000000 or more nodes"),
        ("a[1-600000],b[1-600000]", "names more than the 1000000 nodes"),
    ],
)
def test_a_malformed_node_list_is_one_clear_error(nodelist: str, says: str) -> None:
    with pytest.raises(DistributedError, match=says) as info:
        slurm_env.expand_nodelist(nodelist)
    assert "SLURM_NODELIST" in str(info.value) and "srun" in str(info.value)


def _srun_env(monkeypatch: pytest.MonkeyPatch, **values: str) -> None:
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    base = {
        "SLURM_STEP_ID": "0",  # srun's step: the batch script has none
        "SLURM_PROCID": "3",
        "SLURM_NTASKS": "8",
        "SLURM_LOCALID": "1",
        "SLURM_NODELIST": "gpu[07-10]",
        "SLURM_JOB_ID": "4242",
    }
    for name, value in {**base, **values}.items():
        monkeypatch.setenv(name, value)


def test_an_srun_task_reads_as_torchrun_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    _srun_env(monkeypatch, SLURM_TASKS_PER_NODE="2(x4)", SLURM_NODEID="1")
    task = slurm_env.srun_task()
    assert task is not None
    assert task.torchrun_env() == {
        "RANK": "3",
        "WORLD_SIZE": "8",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "2",
        "MASTER_ADDR": "gpu07",
        "MASTER_PORT": str(15000 + 4242),
    }
    import anydevice as ad

    assert (ad.distributed.rank(), ad.distributed.world_size(), ad.distributed.local_rank()) == (3, 8, 1)
    assert ad.distributed.launched()


def test_the_job_script_s_master_address_and_port_win(monkeypatch: pytest.MonkeyPatch) -> None:
    _srun_env(monkeypatch, MASTER_ADDR="head", MASTER_PORT="29500")
    task = slurm_env.srun_task()
    assert task is not None and (task.master_addr, task.master_port) == ("head", 29500)


def test_torchrun_variables_win_over_slurm(monkeypatch: pytest.MonkeyPatch) -> None:
    _srun_env(monkeypatch, RANK="0", WORLD_SIZE="1")
    assert slurm_env.srun_task() is None  # e.g. the ranks `anydevice run` starts inside an srun task


def test_no_slurm_no_task(monkeypatch: pytest.MonkeyPatch) -> None:
    _srun_env(monkeypatch)
    monkeypatch.delenv("SLURM_PROCID")
    assert slurm_env.srun_task() is None


@pytest.mark.parametrize(
    ("values", "says"),
    [
        ({"SLURM_PROCID": "x"}, "SLURM_PROCID='x' is not a whole number"),
        ({"SLURM_PROCID": "8"}, "SLURM_PROCID=8 is not below SLURM_NTASKS=8"),
        ({"SLURM_NTASKS": "0"}, "SLURM_NTASKS='0' is not a whole number of at least 1"),
        ({"SLURM_LOCALID": "-1"}, "SLURM_LOCALID='-1'"),
        ({"SLURM_NODELIST": ""}, "SLURM_NODELIST is not set"),
        ({"SLURM_JOB_ID": "abc"}, "SLURM_JOB_ID='abc'"),
        ({"SLURM_NODELIST": "gpu[07-"}, "unclosed"),
    ],
)
def test_bad_slurm_values_are_one_clear_error(monkeypatch: pytest.MonkeyPatch, values: dict[str, str], says: str) -> None:
    _srun_env(monkeypatch, **values)
    with pytest.raises(DistributedError, match=says.replace("[", r"\[")) as info:
        slurm_env.srun_task()
    assert "srun" in str(info.value)  # the fix


def _free_job_id() -> str:
    """A job id whose derived port is free on loopback now."""
    for job in range(900_001, 900_001 + 15_000, 97):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", slurm_env.PORT_BASE + job % slurm_env.PORT_SPAN))
            except OSError:
                continue
        return str(job)
    raise AssertionError("no free port in the derived range")


def _srun(argv: list[str], ntasks: int = 2, timeout: float = 240) -> list[tuple[int, str, str]]:
    """Start ``argv`` as srun would on one node: ``ntasks`` processes that differ only in SLURM_PROCID/SLURM_LOCALID."""
    job = _free_job_id()
    procs = []
    for task in range(ntasks):
        slurm = {"SLURM_PROCID": str(task), "SLURM_LOCALID": str(task), "SLURM_NTASKS": str(ntasks), "SLURM_NODEID": "0"}
        slurm["SLURM_STEP_ID"] = "0"
        env = _env({**slurm, "SLURM_TASKS_PER_NODE": str(ntasks), "SLURM_NODELIST": "localhost", "SLURM_JOB_ID": job})
        procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO))
    outs = [p.communicate(timeout=timeout) for p in procs]
    return [(p.returncode, out, err) for p, (out, err) in zip(procs, outs, strict=True)]


@pytest.mark.slow
def test_two_srun_tasks_train_as_one_world_equal_to_anydevice_run() -> None:
    tasks = _srun([sys.executable, str(TRAIN), *SMALL])
    assert [code for code, _, _ in tasks] == [0, 0], [err for _, _, err in tasks]
    assert tasks[1][1].strip() == ""  # rank 1 prints nothing: it is not a job of its own
    row = json.loads(tasks[0][1].strip().splitlines()[-1])
    reference = anydevice_run("-n", "2", TRAIN, *SMALL, timeout=240)
    assert reference.returncode == 0, reference.stderr
    ref = reference.json_lines()[0]
    assert (row["world_size"], row["trained_steps"], row["replicas_agree"]) == (2, 12, True)
    assert row["losses"] == ref["losses"]  # the same job, step for step
    assert row["last_loss_by_rank"] == ref["last_loss_by_rank"]
    assert row["param_checksum"] == ref["param_checksum"]


@pytest.mark.slow
def test_anydevice_run_inside_srun_tasks_forms_one_world() -> None:
    tasks = _srun([sys.executable, "-m", "anydevice", "run", "-n", "2", str(WORKERS / "collectives.py")])
    assert [code for code, _, _ in tasks] == [0, 0], [err for _, _, err in tasks]
    rows = [json.loads(line) for _, out, _ in tasks for line in out.splitlines() if line.startswith("{")]
    assert sorted(r["rank"] for r in rows) == [0, 1, 2, 3]  # 2 tasks x 2 ranks each
    assert all(r["world_size"] == 4 and r["sum"] == [10.0, 100.0] for r in rows)


@pytest.mark.slow
def test_two_srun_tasks_on_one_node_count_local_ranks_across_the_node() -> None:
    """2 tasks on one node, each `anydevice run -n 2`: local ranks 0,1 and 2,3 of 4, global ranks by task, one group."""
    tasks = _srun([sys.executable, "-m", "anydevice", "run", "-n", "2", str(WORKERS / "slurm_ranks.py")])
    assert [code for code, _, _ in tasks] == [0, 0], [err for _, _, err in tasks]
    by_task = [[json.loads(line) for line in out.splitlines() if line.startswith("{")] for _, out, _ in tasks]
    assert [sorted((r["rank"], r["local_rank"]) for r in rows) for rows in by_task] == [[(0, 0), (1, 1)], [(2, 2), (3, 3)]]
    rows = [r for rows in by_task for r in rows]
    for row in rows:
        env = row["env"]
        assert (int(env["RANK"]), int(env["LOCAL_RANK"])) == (row["rank"], row["local_rank"])
        assert (env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"], row["world_size"]) == ("4", "4", 4)
        assert row["pairs"] == [[0.0, 0.0], [1.0, 1.0], [2.0, 2.0], [3.0, 3.0]]  # the group formed, all 4 ranks in it


def _task(monkeypatch: pytest.MonkeyPatch, **values: str) -> slurm_env.SrunTask:
    for name in ("SLURM_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE", "SLURM_NODEID"):
        monkeypatch.delenv(name, raising=False)
    _srun_env(monkeypatch, **values)
    task = slurm_env.srun_task()
    assert task is not None
    return task


@pytest.mark.parametrize(
    ("values", "nproc", "expected"),
    [
        ({"SLURM_TASKS_PER_NODE": "2(x4)", "SLURM_NODEID": "1", "SLURM_LOCALID": "1"}, 2, (2, 4)),
        ({"SLURM_TASKS_PER_NODE": "2(x4)", "SLURM_NODEID": "1", "SLURM_LOCALID": "0"}, 3, (0, 6)),
        ({"SLURM_TASKS_PER_NODE": "3,1(x3)", "SLURM_NODEID": "0", "SLURM_LOCALID": "2"}, 1, (2, 3)),
        ({"SLURM_NTASKS_PER_NODE": "2", "SLURM_LOCALID": "1"}, 4, (4, 8)),
        ({"SLURM_LOCALID": "0"}, 4, (0, 4)),  # SLURM says nothing of other tasks: one per node
    ],
)
def test_local_ranks_of_a_task_follow_the_tasks_before_it_on_the_node(
    monkeypatch: pytest.MonkeyPatch, values: dict[str, str], nproc: int, expected: tuple[int, int]
) -> None:
    assert slurm_env.local_ranks(_task(monkeypatch, **values), nproc) == expected


@pytest.mark.parametrize(
    ("values", "says"),
    [
        ({"SLURM_LOCALID": "1"}, "SLURM_LOCALID=1 says several srun tasks share this node"),
        ({"SLURM_LOCALID": "2", "SLURM_NTASKS_PER_NODE": "2"}, "SLURM_LOCALID=2 is not below the 2 task"),
    ],
)
def test_local_ranks_that_cannot_be_counted_are_one_clear_error(
    monkeypatch: pytest.MonkeyPatch, values: dict[str, str], says: str
) -> None:
    with pytest.raises(DistributedError, match=says) as info:
        slurm_env.local_ranks(_task(monkeypatch, **values), 2)
    assert "srun" in str(info.value)


def _doctor(**env: str) -> list[dict[str, str]]:
    proc = subprocess.run(
        [sys.executable, "-m", "anydevice", "doctor", "--json"],
        capture_output=True,
        text=True,
        env=_env(env),
        cwd=REPO,
        timeout=300,
    )
    return [c for c in json.loads(proc.stdout)["checks"] if c["name"] == "slurm"]


def test_doctor_shows_the_slurm_view_of_the_job() -> None:
    assert _doctor() == []  # outside SLURM: no line
    srun = {"SLURM_PROCID": "1", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1", "SLURM_NODELIST": "a[1-2]", "SLURM_JOB_ID": "77"}
    srun["SLURM_STEP_ID"] = "0"
    (view,) = _doctor(**srun)
    assert view["status"] == "ok"
    assert "rank 1 of 4, local rank 1; job 77, 2 node(s)" in view["message"] and "a1:15077" in view["message"]
    (bad,) = _doctor(**{**srun, "SLURM_NTASKS": "1"})
    assert bad["status"] == "fail" and "SLURM_PROCID=1 is not below SLURM_NTASKS=1" in bad["message"]
    (shell,) = _doctor(SLURM_JOB_ID="77")
    assert shell["status"] == "info" and "srun" in shell["fix"]


def test_the_batch_script_is_not_a_task_but_a_world_of_one(monkeypatch: pytest.MonkeyPatch) -> None:
    # issue 35: sbatch's batch step has SLURM_PROCID=0 and the job's SLURM_NTASKS=2 but no SLURM_STEP_ID; it was taken
    # for srun's task 0, and `python train.py` there waited forever for a task 1 that never came.
    _srun_env(monkeypatch, SLURM_PROCID="0", SLURM_NTASKS="2", SLURM_LOCALID="0")
    monkeypatch.delenv("SLURM_STEP_ID")
    assert slurm_env.in_batch_step() and slurm_env.srun_task() is None
    code = "import anydevice as ad\nad.distributed.init()\nprint(ad.distributed.rank(), ad.distributed.world_size())"
    env = _env(_batch_env())
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0 and proc.stdout.split() == ["0", "1"], proc.stderr
    checks = _doctor(**_batch_env())
    assert [c["status"] for c in checks] == ["info"]
    assert "not an srun task (the batch script: no SLURM_STEP_ID): one process here is a world of one" in checks[0]["message"]


def _batch_env() -> dict[str, str]:
    return {"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0", "SLURM_NODELIST": "localhost", "SLURM_JOB_ID": "7"}
