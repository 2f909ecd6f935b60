"""`anydevice run` with 2 real processes on CPU (gloo): collectives, DDP, FSDP2, crashes, elastic restarts."""

from __future__ import annotations

import json
import sys

import pytest

from tests.distributed.helpers import TRAIN, WORKERS, anydevice_run, python

pytestmark = pytest.mark.torch_version_sensitive  # docs/architecture.md, "Which tests the core lanes run"


@pytest.fixture(scope="module")
def two_ranks():
    """One 2-rank launch of collectives.py serves the collectives test and the launcher-environment test (the
    worker prints both; OMP_NUM_THREADS is left empty in the parent, arguments are passed through)."""
    return anydevice_run("-n", "2", WORKERS / "collectives.py", "--flag", "value", ANYDEVICE="cpu", OMP_NUM_THREADS="")


def test_every_collective_across_two_ranks(two_ranks):
    result = two_ranks
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


@pytest.fixture(scope="module")
def wrapped():
    """One 2-rank launch of wrap.py trains with DDP, then FSDP2 (a fresh model each): it serves both cases below."""
    return anydevice_run("-n", "2", WORKERS / "wrap.py", "ddp", "fsdp")


@pytest.mark.parametrize(
    "strategy, wrapper, param_type", [("ddp", "DistributedDataParallel", "Parameter"), ("fsdp", "FSDPNet", "DTensor")]
)
def test_wrap_keeps_ranks_in_step(wrapped, strategy, wrapper, param_type):
    """Different data per rank, yet identical parameters after 5 steps: gradients were averaged."""
    assert wrapped.returncode == 0, wrapped.stderr
    ranks = {row["rank"]: row for row in wrapped.json_lines() if row["strategy"] == strategy}
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


def test_children_get_the_resolved_device_and_no_autoload(two_ranks):
    result = two_ranks
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
        assert row["argv"][0].endswith("collectives.py")


def test_per_rank_environment_is_set_before_the_script_runs():
    """The child side of the torchrun launcher applies launch_env(local_rank) (e.g. NEURON_RT_VISIBLE_CORES)."""
    from anydevice.cli.launch import LaunchSpec, rank_args

    spec = LaunchSpec(script=str(WORKERS / "env.py"), rank_env={0: {"PER_RANK": "core-0"}, 1: {"PER_RANK": "core-1"}})
    result = python(*rank_args(spec), LOCAL_RANK="1", RANK="1")
    assert result.returncode == 0, result.stderr
    assert result.json_lines()[0]["env"]["PER_RANK"] == "core-1"


MODULE = """
import json, os, sys
print(json.dumps({
    "rank": int(os.environ["RANK"]), "world": int(os.environ["WORLD_SIZE"]), "name": __name__, "argv": sys.argv,
    "path0": sys.path[0], "cuda_compat_loaded": "anydevice.cuda_compat" in sys.modules,
    "cuda_compat_env": os.environ.get("ANYDEVICE_CUDA_COMPAT"),
}), flush=True)
"""


def _run_in(cwd, *args, **extra):
    import subprocess
    import sys

    from tests.distributed.helpers import Result, _env

    cmd = [sys.executable, "-c", "import sys; del sys.path[0]; from anydevice.cli import main; sys.exit(main())", "run"]
    proc = subprocess.run([*cmd, *map(str, args)], capture_output=True, text=True, timeout=240, env=_env(extra), cwd=cwd)
    return Result(proc.returncode, proc.stdout, proc.stderr)


def test_m_runs_a_module_on_two_ranks_with_cuda_compat(tmp_path):
    """`anydevice run -n 2 --cuda-compat -m pkg.train ARGS`: python's -m on every rank, cuda-compat loaded first."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "train.py").write_text(MODULE)
    result = _run_in(tmp_path, "-n", "2", "--cuda-compat", "-m", "pkg.train", "--steps", "3")
    assert result.returncode == 0, result.stderr
    ranks = result.by_rank()
    assert sorted(ranks) == [0, 1]
    for row in ranks.values():
        assert row["world"] == 2 and row["name"] == "__main__"
        assert row["argv"] == [str(tmp_path / "pkg" / "train.py"), "--steps", "3"]
        assert row["path0"] == str(tmp_path)
        assert row["cuda_compat_loaded"] is True and row["cuda_compat_env"] == "1"


def test_m_runs_a_package_main(tmp_path):
    (tmp_path / "tool").mkdir()
    (tmp_path / "tool" / "__init__.py").write_text("")
    (tmp_path / "tool" / "__main__.py").write_text(MODULE)
    result = _run_in(tmp_path, "-n", "1", "-m", "tool")
    assert result.returncode == 0, result.stderr
    (row,) = result.json_lines()
    assert row["name"] == "__main__" and row["argv"][0].endswith("__main__.py") and row["cuda_compat_loaded"] is False


def test_a_command_gets_the_selection_environment():
    """`anydevice run -- COMMAND`: what ranks get (device, autoload, integrations), one process, its exit status."""
    from anydevice.integrations import launch_environment
    from anydevice.runtime.backend import select

    show = "import json, os; print(json.dumps(dict(os.environ))); raise SystemExit(3)"
    result = anydevice_run("--cuda-compat", "--", sys.executable, "-c", show, ANYDEVICE="cpu")
    assert result.returncode == 3, result.stderr  # the command's status
    (env,) = result.json_lines()
    assert env["ANYDEVICE"] == "cpu"
    assert env["TORCH_DEVICE_BACKEND_AUTOLOAD"] == "0"
    assert env["ANYDEVICE_CUDA_COMPAT"] == "1"
    assert env["ANYDEVICE_LAUNCH_PARENT"].isdigit()
    expected = launch_environment(select("cpu"))
    assert expected, "the cpu selection gives the integrations' variables"
    assert {k: env.get(k) for k in expected} == expected
    assert "RANK" not in env and "WORLD_SIZE" not in env  # a command is not a rank


def test_plan_resolves_the_device_once(monkeypatch):
    import anydevice.runtime.selection as selection
    from anydevice.cli.launch import build_parser, plan

    calls = []
    real = selection.resolve
    monkeypatch.setattr(selection, "resolve", lambda *a, **k: calls.append(a) or real(*a, **k))
    monkeypatch.setenv("ANYDEVICE", "cpu")
    spec, launcher = plan(build_parser().parse_args(["-n", "2", str(WORKERS / "env.py")]))
    assert len(calls) == 1
    assert spec.nproc_per_node == 2 and launcher == "torchrun"


def test_the_launcher_is_the_one_the_device_declares(monkeypatch):
    """`anydevice run` calls LAUNCHERS[DeviceSpec.launch.launcher]."""
    from anydevice.cli import launch, lifeline

    seen = []
    monkeypatch.setitem(launch.LAUNCHERS, "torchrun", lambda spec: seen.append(spec) or 7)
    monkeypatch.setattr(lifeline, "guard_descendants", lambda: None)
    monkeypatch.setenv("ANYDEVICE", "cpu")
    assert launch.main(["-n", "2", str(WORKERS / "env.py"), "--x"]) == 7
    (spec,) = seen
    assert spec.script_args == ("--x",) and spec.nproc_per_node == 2 and not spec.is_module


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


def test_an_unknown_declared_launcher_is_a_clear_error() -> None:
    from anydevice.cli.launch import registered_launcher
    from anydevice.errors import DistributedError

    with pytest.raises(DistributedError, match="launcher 'nope' is not known to anydevice run") as info:
        registered_launcher("nope")
    assert "register_launcher(name, fn)" in str(info.value) and "torchrun" in str(info.value)


@pytest.mark.slow
def test_fsdp_trains_right_after_an_evaluation_forward() -> None:
    """wrap(model, "fsdp") reshards the root after forward: a no_grad forward must not leave stale full weights there."""
    result = anydevice_run("-n", "2", WORKERS / "fsdp_eval_first.py", "default", "keep", timeout=300)  # one launch, both
    assert result.returncode == 0, result.stderr[-3000:]
    rows: dict[str, dict[int, dict]] = {"default": {}, "keep": {}}
    for row in result.json_lines():
        rows[row["root"]][row["rank"]] = row
    assert {root: sorted(by_rank) for root, by_rank in rows.items()} == {"default": [0, 1], "keep": [0, 1]}
    for row in rows["default"].values():
        assert row["losses"] == pytest.approx(row["reference"], abs=1e-5)
    # FSDP2's own root default (kept full weights) trains on stale ones: the difference this guards against
    assert any(abs(a - b) > 1e-4 for a, b in zip(rows["keep"][0]["losses"], rows["keep"][0]["reference"], strict=True))
