"""`anydevice run` with 2 real processes on CPU (gloo): collectives, DDP, FSDP2, crashes, elastic restarts."""

from __future__ import annotations

import json

import pytest

from tests.distributed.helpers import TRAIN, WORKERS, anydevice_run, python


def test_every_collective_across_two_ranks():
    result = anydevice_run("-n", "2", WORKERS / "collectives.py")
    assert result.returncode == 0, result.stderr
    ranks = result.by_rank()
    assert sorted(ranks) == [0, 1]
    for rank, row in ranks.items():
        assert row["world_size"] == 2
        assert row["local_rank"] == rank
        assert row["is_main"] is (rank == 0)
        assert row["sum"] == [3.0, 30.0]  # 1 + 2, 10 + 20
        assert row["avg"] == [1.5, 15.0]
        assert row["max"] == [2.0, -1.0]
        assert row["min"] == [1.0, -2.0]
        assert row["all_gather"] == [[1.0, 1.0], [2.0, 4.0]]  # rank order, stacked
        assert row["broadcast"] == [2.0, 2.0]  # rank 1's value everywhere
        assert row["after_barrier"] is True
        assert row["mesh"] == {"shape": [2], "names": ["dp"]}
        assert row["initialized_after_shutdown"] is False
    # arange(4) * (1 + 2) = [0, 3, 6, 9], split in two: rank 0 gets [0, 3], rank 1 gets [6, 9]
    assert ranks[0]["reduce_scatter"] == [0.0, 3.0]
    assert ranks[1]["reduce_scatter"] == [6.0, 9.0]


@pytest.mark.parametrize(
    "strategy, wrapper, param_type", [("ddp", "DistributedDataParallel", "Parameter"), ("fsdp", "FSDPNet", "DTensor")]
)
def test_wrap_keeps_ranks_in_step(strategy, wrapper, param_type):
    """Different data per rank, yet identical parameters after 5 steps: gradients were averaged."""
    result = anydevice_run("-n", "2", WORKERS / "wrap.py", strategy)
    assert result.returncode == 0, result.stderr
    ranks = result.by_rank()
    assert sorted(ranks) == [0, 1]
    assert ranks[0]["wrapper"] == wrapper
    assert ranks[0]["param_types"] == [param_type]
    assert ranks[0]["params"] == ranks[1]["params"]  # every parameter, bit for bit
    assert ranks[0]["losses"] != ranks[1]["losses"]  # the data really differed


def test_a_crashing_rank_ends_the_run_with_its_error():
    """Rank 1 raises while rank 0 sits in a barrier: the launcher stops both and exits non-zero."""
    result = anydevice_run("-n", "2", WORKERS / "crash.py", timeout=90)  # the barrier alone would wait 300 s
    assert result.returncode != 0
    assert "injected failure on rank 1" in result.stderr  # the rank's own traceback, via @record
    assert "rank 1 failed" in result.stderr
    assert "passed the barrier" not in result.stdout


def test_children_get_the_resolved_device_and_no_autoload():
    result = anydevice_run("-n", "2", WORKERS / "env.py", "--flag", "value", ANYDEVICE="cpu", OMP_NUM_THREADS="")
    assert result.returncode == 0, result.stderr
    ranks = result.by_rank()
    for rank, row in ranks.items():
        assert row["env"]["ANYDEVICE"] == "cpu"
        assert row["env"]["LOCAL_RANK"] == str(rank)
        assert row["env"]["WORLD_SIZE"] == "2"
        assert row["env"]["TORCH_DEVICE_BACKEND_AUTOLOAD"] == "0"  # cpu needs no autoloaded backend
        assert row["torch_tpu_imported"] is False
        assert row["env"]["OMP_NUM_THREADS"] == "1"  # unset in the parent: one thread per rank, as torchrun does
        assert row["argv"][1:] == ["--flag", "value"]
        assert row["argv"][0].endswith("env.py")


def test_per_rank_environment_is_set_before_the_script_runs():
    """The child side of the torchrun launcher applies launch_env(local_rank) (e.g. NEURON_RT_VISIBLE_CORES)."""
    rank_env = json.dumps({"0": {"PER_RANK": "core-0"}, "1": {"PER_RANK": "core-1"}})
    result = python("-m", "anydevice.cli.launch", "--as-rank", rank_env, "--", WORKERS / "env.py", LOCAL_RANK="1", RANK="1")
    assert result.returncode == 0, result.stderr
    assert result.json_lines()[0]["env"]["PER_RANK"] == "core-1"


def test_bad_arguments_fail_clearly():
    missing = anydevice_run("-n", "2", "no_such_script.py")
    assert missing.returncode == 2
    assert "No script at no_such_script.py" in missing.stderr
    zero = anydevice_run("-n", "0", WORKERS / "env.py")
    assert zero.returncode == 2
    assert "-n must be at least 1" in zero.stderr
    multi = anydevice_run("--nnodes", "2", WORKERS / "env.py")
    assert multi.returncode == 2
    assert "--rdzv-endpoint" in multi.stderr


@pytest.mark.slow
def test_train_two_ranks_data_parallel():
    """The issue's demo: `anydevice run -n 2 examples/train.py --steps 50`."""
    result = anydevice_run("-n", "2", TRAIN, "--steps", "50", timeout=240)
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.strip().splitlines()) == 1  # exactly one JSON line: the main rank's, for the whole job
    row = result.json_lines()[0]
    assert (row["world_size"], row["rank"], row["trained_steps"]) == (2, 0, 50)
    assert row["last_loss"] < row["first_loss"] - 1.0  # ~5.6 -> ~2.5, the mean over both ranks
    assert row["replicas_agree"] is True  # both ranks' parameters, bit for bit
    first, second = row["last_loss_by_rank"]
    assert first != second  # each rank saw its own shard of the data
    assert row["last_loss"] == pytest.approx((first + second) / 2, rel=1e-6)


@pytest.mark.slow
def test_elastic_restart_recovers_from_a_crash(tmp_path):
    """Rank 1 is SIGKILLed after step 6 on the first attempt; --max-restarts 1 restarts both ranks, which resume."""
    args = ["--steps", "10", "--d-model", "32", "--layers", "1", "--batch-size", "4", "--seq-len", "32"]
    ckpt = ["--checkpoint-dir", tmp_path, "--checkpoint-every", "5", "--crash-at-step", "6", "--crash-rank", "1"]
    result = anydevice_run("-n", "2", "--max-restarts", "1", TRAIN, *args, *ckpt, timeout=240)
    assert result.returncode == 0, result.stderr
    assert "rank 1: injected crash after step 6" in result.stderr
    (row,) = result.json_lines()  # only the second attempt finishes, and only its main rank prints
    assert row["world_size"] == 2
    assert row["resumed_from"].endswith("step-5.pt")
    assert row["trained_steps"] == 5  # steps 6..10 after the restart
    assert row["replicas_agree"] is True

    no_restart = anydevice_run(
        "-n",
        "2",
        TRAIN,
        *args,
        "--checkpoint-dir",
        tmp_path / "b",
        "--checkpoint-every",
        "5",
        "--crash-at-step",
        "6",
        "--crash-rank",
        "1",
        timeout=240,
    )
    assert no_restart.returncode != 0  # without --max-restarts the same crash ends the run
    assert "SIGKILL" in no_restart.stderr


def test_python_m_anydevice_run_help():
    result = anydevice_run("--help", timeout=60)
    assert result.returncode == 0
    assert "--max-restarts" in result.stdout and "--rdzv-endpoint" in result.stdout


def test_two_nodes_meet_at_a_rendezvous_endpoint():
    """Two `anydevice run --nnodes 2` agents (two "nodes" on loopback) form one world of 2 through c10d."""
    import socket
    import subprocess
    import sys

    from tests.distributed.helpers import REPO, _env

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [
        sys.executable,
        "-m",
        "anydevice",
        "run",
        "-n",
        "1",
        "--nnodes",
        "2",
        "--rdzv-endpoint",
        f"127.0.0.1:{port}",
        "--run-id",
        "two-nodes",
        str(WORKERS / "collectives.py"),
    ]
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True, "env": _env({}), "cwd": REPO}
    nodes = [subprocess.Popen(cmd, **pipes) for _ in range(2)]
    outputs = [node.communicate(timeout=120) for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], [err for _, err in outputs]
    rows = [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]
    assert sorted(row["rank"] for row in rows) == [0, 1]
    assert all(row["world_size"] == 2 and row["local_rank"] == 0 and row["sum"] == [3.0, 30.0] for row in rows)


def test_single_process_launcher_refuses_more_than_one_rank() -> None:
    from anydevice.cli.launch import LaunchSpec, single_process
    from anydevice.errors import DistributedError

    with pytest.raises(DistributedError, match="one process per machine; 2 were asked for"):
        single_process(LaunchSpec(script="train.py", nproc_per_node=2))
