"""cuda-compat tells the truth: torch.accelerator as torch says on a host device, one answer for every thread,
stand-ins that subclass and pickle as torch's objects, and a bad request that is an error (issue 35).

Each runs a real interpreter with the start-up hook alone (``ANYDEVICE_CUDA_COMPAT=1 python``).
"""

from __future__ import annotations

from pathlib import Path

from tests.utils import python

ON = {"ANYDEVICE": "cpu", "ANYDEVICE_CUDA_COMPAT": "1", "ANYDEVICE_QUIET": "1"}


def last(done: object) -> str:
    return [line for line in getattr(done, "stdout", "").splitlines() if line.strip()][-1]


def test_torch_accelerator_on_cpu_reports_no_accelerator_as_torch_does() -> None:
    code = (
        "import torch\n"
        "print(torch.accelerator.is_available(), torch.accelerator.current_accelerator(), torch.accelerator.device_count(),"
        " torch.get_device_module().__name__, torch.cuda.is_available())"
    )
    done = python("-c", code, env=ON)
    assert done.returncode == 0, done.stderr[-3000:]
    assert last(done) == "False None 0 torch.cpu True"  # torch.cuda is the one that answers for cpu


def test_every_module_a_thread_pool_imports_at_start_up_gets_the_view(tmp_path: Path) -> None:
    for i in range(8):
        (tmp_path / f"part_{i}.py").write_text("import sys, torch\nVIEW = torch is not sys.modules['torch']\n")
    (tmp_path / "main.py").write_text(
        "from concurrent.futures import ThreadPoolExecutor\n"
        "from importlib import import_module\n"
        "with ThreadPoolExecutor(max_workers=8) as pool:\n"
        "    parts = list(pool.map(import_module, [f'part_{i}' for i in range(8)]))\n"
        "print(sum(p.VIEW for p in parts))\n"
    )
    for attempt in range(3):  # a race: before the fix 3 of 4 modules got the real torch in most runs
        done = python(str(tmp_path / "main.py"), env=ON)
        assert done.returncode == 0, done.stderr[-3000:]
        assert last(done) == "8", f"attempt {attempt}: only {last(done)} of 8 modules hold the view"


def test_stand_ins_subclass_and_pickle_as_torch_objects(tmp_path: Path) -> None:
    script = tmp_path / "stand_ins.py"
    script.write_text(
        "import functools, pickle, torch\n"
        "class Seeded(torch.Generator):\n"
        "    def reseeded(self, seed):\n"
        "        self.manual_seed(seed)\n"
        "        return self\n"
        "g = Seeded(device='cuda').reseeded(3)\n"
        "print(type(g).__name__, isinstance(g, torch.Generator), g.device, torch.randn(2, generator=g).tolist())\n"
        "print(torch.randn(2, generator=torch.Generator().manual_seed(3)).tolist())\n"
        "for obj in (torch.Generator, torch.cuda.device_count, functools.partial(torch.cuda.manual_seed, 0),\n"
        "            torch.cuda.Event, torch.cuda.Stream, torch.cuda.is_available):\n"
        "    back = pickle.loads(pickle.dumps(obj))\n"
        "    kind = 'class' if isinstance(back, type) else type(back).__name__\n"
        "    print(kind, getattr(back, '__name__', None) or back.func.__name__)\n"
        "class Timed(torch.cuda.Event):\n"
        "    pass\n"
        "print(Timed(enable_timing=True).query(), isinstance(torch.cuda.Event(), torch.cuda.Event))\n"
    )
    done = python(str(script), env=ON)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = done.stdout.splitlines()
    name, is_generator, device, draws = rows[0].split(" ", 3)
    assert (name, is_generator, device) == ("Seeded", "True", "cpu")
    assert draws == rows[1]  # the subclass draws what torch's own generator draws
    assert rows[2:8] == [
        "class Generator",
        "function device_count",
        "partial manual_seed",
        "class Event",
        "class Stream",
        "function is_available",
    ]  # each unpickles as torch's own object, as it does from CPU torch
    assert rows[8] == "True True"


def test_a_bad_request_is_an_error_at_import_torch_not_a_silent_off() -> None:
    maybe = python("-c", "import torch; print('ran')", env={**ON, "ANYDEVICE_CUDA_COMPAT": "maybe"})
    assert maybe.returncode == 1 and "ran" not in maybe.stdout
    assert "ANYDEVICE_CUDA_COMPAT='maybe' is not a yes/no value" in maybe.stderr
    assert "Error processing line" not in maybe.stderr  # raised at the script's import, not at interpreter start
    assert maybe.stderr.splitlines() == [  # issue 46: one line, no traceback
        "anydevice: ANYDEVICE_CUDA_COMPAT='maybe' is not a yes/no value. Set ANYDEVICE_CUDA_COMPAT=1 (on) or "
        "ANYDEVICE_CUDA_COMPAT=0 (off), or unset it."
    ], maybe.stderr
    caught = "try:\n    import torch\nexcept BaseException:\n    print('caught')\nimport torch\nprint('ran')"
    again = python("-c", caught, env={**ON, "ANYDEVICE_CUDA_COMPAT": "maybe"})  # refused every time, never silently off
    assert again.returncode == 1 and again.stdout == "caught\n" and again.stderr.count("is not a yes/no value") == 1
    unparsed = python("-c", "import torch; print('ran')", env={**ON, "ANYDEVICE": "cpu:zz"})
    assert unparsed.returncode == 1 and "ran" not in unparsed.stdout
    assert "Bad device index 'zz' in 'cpu:zz'" in unparsed.stderr
    no_torch = python("-c", "print('ran')", env={**ON, "ANYDEVICE_CUDA_COMPAT": "maybe"})
    assert no_torch.returncode == 0 and no_torch.stdout.strip() == "ran"  # pip and friends in the same environment


def test_questions_cuda_frameworks_ask_after_is_available_get_answers_that_go_on(tmp_path: Path) -> None:
    """Lightning's ``_is_ampere_or_later`` idiom, transformers' TF32 and bf16 checks: answers, not refusals."""
    script = tmp_path / "questions.py"
    script.write_text(
        "import torch\n"
        "from transformers.utils import import_utils\n"
        "def is_ampere_or_later(device=None):\n"
        "    major, _ = torch.cuda.get_device_capability(device)\n"
        "    return major >= 8\n"
        "if torch.cuda.is_available() and is_ampere_or_later():\n"
        "    torch.set_float32_matmul_precision('high')  # a CUDA-only path the answer must not select\n"
        "free, total = torch.cuda.mem_get_info()\n"
        "props = torch.cuda.get_device_properties(torch.cuda.current_device())\n"
        "print(torch.cuda.get_device_capability(), is_ampere_or_later(), torch.get_float32_matmul_precision(),\n"
        "      0 < free <= total, (props.major, props.minor), import_utils.is_torch_tf32_available(),\n"
        "      import_utils.is_torch_bf16_gpu_available() == torch.cuda.is_bf16_supported())\n"
    )
    done = python(str(script), env=ON)
    assert done.returncode == 0, done.stderr[-3000:]
    assert last(done) == "(0, 0) False highest True (0, 0) False True"


def test_a_warning_torch_raises_for_user_code_names_the_users_line(tmp_path: Path) -> None:
    script = tmp_path / "amp.py"
    script.write_text(
        "import torch\n"
        "x = torch.ones(2, device='cuda')\n"
        "with torch.autocast('cuda', dtype=torch.float64):  # not an autocast dtype on cpu: torch warns\n"
        "    y = x * 2\n"
    )
    done = python(str(script), env=ON)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"{script}:3: UserWarning: In CPU autocast, but the target dtype is not supported" in done.stderr
    assert "cuda_compat" not in done.stderr


def test_the_line_a_run_that_never_used_its_device_ends_with() -> None:
    """Issue 36: no silent CPU run (end to end on xla: tests/xla/test_cuda_compat_xla.py)."""
    import sys

    import torch  # noqa: F401 - a run that imported torch

    from anydevice.cli.device_use import never_used_line

    if "torch_xla" in sys.modules:
        return  # this process used torch_xla: the line is rightly not said
    line = never_used_line("xla:0", compat=False)
    assert line is not None and "ANYDEVICE=xla:0 was asked for, but this process never used xla" in line
    assert "torch_xla was never imported, so it ran on the CPU" in line and "anydevice run --cuda-compat" in line
    for quiet in ("cpu", "auto", "cpu,xla", "", "cuda"):
        assert never_used_line(quiet, compat=False) is None, quiet  # the host, a choice, a device torch finds itself
