"""The recompile watch's host-side logic (anydevice.shims.recompiles), in the main lane, without torch_xla.

Tested here: input-shape noting with real global module hooks, step signatures, the user-frame
attribution (real Python frames), the warm-up / window / threshold bookkeeping, the cause and the
warning text, the one-warning-per-process rule and the report at exit. torch_xla's ``UncachedCompile``
counter is the one input that needs torch_xla: here a counter the test advances stands in for it
(``compile_count`` is replaced, nothing of torch_xla is faked). The xla lane (tests/xla/) runs the
watch against the real counter.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.util import find_spec

import pytest
import torch

from anydevice.shims import recompiles
from anydevice.shims.recompiles import (
    HINT,
    THRESHOLD,
    WARMUP,
    WINDOW,
    InputShapes,
    RecompileWarning,
    RecompileWatch,
    StepInputs,
    _shapes,
    stop_noting_inputs,
    user_frame,
)


@dataclass
class Graphs:
    """What torch_xla's UncachedCompile counter would read: the test compiles 'graphs' by adding to it."""

    value: int = 0


@pytest.fixture
def graphs(monkeypatch: pytest.MonkeyPatch) -> Iterator[Graphs]:
    counter = Graphs(value=3)  # graphs compiled before the device was selected
    monkeypatch.setattr(recompiles, "compile_count", lambda: counter.value)
    yield counter
    stop_noting_inputs()


@pytest.fixture
def noted() -> Iterator[InputShapes]:
    inputs = InputShapes()
    yield inputs
    stop_noting_inputs()


def _step(watch: RecompileWatch) -> None:
    watch.after_step()  # the line a RecompileWarning points at (the innermost frame outside anydevice and torch)


STEP_LINE = _step.__code__.co_firstlineno + 1


def _run(watch: RecompileWatch, graphs: Graphs, model: torch.nn.Module, batches: list[torch.Tensor], compiled: list[int]) -> None:
    """One training step per batch: the model runs, ``compiled[i]`` graphs compile, the step boundary is reached."""
    for batch, new in zip(batches, compiled, strict=True):
        model(batch)
        graphs.value += new
        _step(watch)


def _forget_exit_report(watch: RecompileWatch) -> None:
    atexit.unregister(watch.report_at_exit)  # a registered report would warn when the test process exits


# --- without torch_xla ---------------------------------------------------------------------------------------------


def test_the_compile_counter_needs_torch_xla_and_says_so() -> None:
    if find_spec("torch_xla") is not None:
        pytest.skip("torch_xla is installed here (the xla lane)")
    with pytest.raises(ModuleNotFoundError, match="torch_xla") as caught:
        RecompileWatch("xla")
    assert caught.value.name == "torch_xla"


# --- shapes and signatures -----------------------------------------------------------------------------------------


def test_shapes_are_collected_in_order_from_nested_tuples_and_lists() -> None:
    h, c = torch.zeros(1, 2, 3), torch.zeros(1, 2, 4)
    assert _shapes((torch.zeros(5, 3), (h, [c]), 7, "text", None)) == [(5, 3), (1, 2, 3), (1, 2, 4)]
    assert _shapes(torch.tensor(1.0)) == [()]
    assert _shapes({"x": torch.zeros(2)}) == []  # only tuples and lists are walked


def test_a_signature_keeps_each_call_once_in_first_seen_order() -> None:
    step = StepInputs(calls=["Encoder((8, 3))", "Decoder((8, 5))", "Encoder((8, 3))"])
    assert step.signature() == ("Encoder((8, 3))", "Decoder((8, 5))")
    assert StepInputs().signature() == () and not StepInputs().evaluating


def test_only_the_outermost_module_call_is_noted_with_its_input_shapes(noted: InputShapes) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    model(torch.zeros(8, 3))
    model(torch.zeros(5, 3))
    step = noted.take()
    assert step.calls == ["Sequential((8, 3))", "Sequential((5, 3))"]
    assert not step.evaluating
    assert noted.take().calls == []  # take() starts the next step's record


def test_a_module_called_with_several_tensors_shows_every_shape(noted: InputShapes) -> None:
    lstm = torch.nn.LSTM(3, 4, batch_first=True)
    state = (torch.zeros(1, 2, 4), torch.zeros(1, 2, 4))
    lstm(torch.zeros(2, 6, 3), state)
    assert noted.take().signature() == ("LSTM((2, 6, 3), (1, 2, 4), (1, 2, 4))",)


def test_a_call_in_eval_mode_or_without_grad_marks_the_step_as_evaluating(noted: InputShapes) -> None:
    model = torch.nn.Linear(3, 2)
    model.eval()
    model(torch.zeros(1, 3))
    assert noted.take().evaluating
    model.train()
    with torch.no_grad():
        model(torch.zeros(1, 3))
    assert noted.take().evaluating
    model(torch.zeros(1, 3))
    assert not noted.take().evaluating


def test_an_exception_inside_a_module_does_not_leave_the_next_call_nested(noted: InputShapes) -> None:
    class Boom(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        Boom()(torch.zeros(2))
    torch.nn.Linear(2, 2)(torch.zeros(3, 2))
    assert noted.take().calls == ["Boom((2,))", "Linear((3, 2))"]


def test_stopping_removes_every_hook_so_nothing_more_is_noted() -> None:
    first, second = InputShapes(), InputShapes()
    assert first in recompiles._NOTING and second in recompiles._NOTING
    stop_noting_inputs()
    assert first not in recompiles._NOTING and second not in recompiles._NOTING
    torch.nn.Linear(2, 2)(torch.zeros(1, 2))
    assert first.take().calls == [] and second.take().calls == []
    first.remove()  # removing twice is harmless


# --- the user's frame ----------------------------------------------------------------------------------------------


def test_the_users_frame_is_the_caller_outside_anydevice_and_torch() -> None:
    line = sys._getframe().f_lineno + 1
    assert user_frame() == (__file__, line)


def test_frames_in_torch_generated_code_and_the_standard_library_are_skipped() -> None:
    stdlib = os.path.dirname(os.__file__)
    layers = {
        "torch": os.path.join(os.path.dirname(torch.__file__), "nn", "_probe.py"),
        "generated": "<generated>",
        "stdlib": os.path.join(stdlib, "_probe_stdlib.py"),
    }
    namespace: dict[str, object] = {"user_frame": user_frame}
    inner = "find"
    for name, filename in layers.items():  # each layer calls the one defined before it
        exec(compile(f"def {name}():\n    return {inner}()\n", filename, "exec"), namespace)
        inner = name
    namespace["find"] = user_frame
    call = namespace["stdlib"]
    assert callable(call)
    line = sys._getframe().f_lineno + 1
    assert call() == (__file__, line)


def test_a_package_installed_in_site_packages_is_the_users_code() -> None:
    filename = os.path.join(os.path.dirname(os.__file__), "site-packages", "trainer", "loop.py")
    namespace: dict[str, object] = {"user_frame": user_frame}
    exec(compile("\n\ndef step():\n    return user_frame()\n", filename, "exec"), namespace)
    step = namespace["step"]
    assert callable(step)
    assert step() == (filename, 4)


def test_a_thread_with_no_user_frame_gives_none() -> None:
    filename = os.path.join(os.path.dirname(torch.__file__), "_probe_thread.py")
    namespace: dict[str, object] = {"user_frame": user_frame}
    exec(compile("def probe(out):\n    out.append(user_frame())\n", filename, "exec"), namespace)
    found: list[object] = []
    thread = threading.Thread(target=namespace["probe"], args=(found,))  # type: ignore[arg-type]
    thread.start()
    thread.join()
    assert found == [None]  # threading's frames are the standard library's, the probe is "torch"


# --- the watch: warm-up, window, threshold -------------------------------------------------------------------------


def test_warm_up_compilations_and_evaluation_steps_warn_nothing(graphs: Graphs) -> None:
    watch = RecompileWatch("xla")
    assert watch.compilations == 0
    model = torch.nn.Linear(3, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _step(watch)  # the first step boundary starts noting inputs
        assert watch.inputs is not None and watch.steps == 0
        _run(watch, graphs, model, [torch.zeros(4, 3)] * WARMUP, [2] * WARMUP)  # warm-up compiles are expected
        model.eval()
        _run(watch, graphs, model, [torch.zeros(9, 3)], [3])  # validation compiles once: not a step
        model.train()
        _run(watch, graphs, model, [torch.zeros(4, 3)] * 4, [0] * 4)
    assert watch.steps == WARMUP + 4
    assert watch.recompiles == [] and not watch.warned and not watch.exit_report
    assert list(watch.recent) == [False] * 4
    assert watch.seen == {("Linear((4, 3))",): 1}
    assert watch.compilations == 2 * WARMUP + 3


def test_steps_that_keep_compiling_on_the_same_shapes_warn_at_once_at_the_users_line(graphs: Graphs) -> None:
    watch = RecompileWatch("tpu")
    model = torch.nn.Linear(3, 2)
    batch = torch.zeros(4, 3)
    _step(watch)
    _run(watch, graphs, model, [batch] * WARMUP, [1] * WARMUP)
    _run(watch, graphs, model, [batch] * (THRESHOLD - 1), [2] * (THRESHOLD - 1))
    assert watch.exit_report and not watch.warned  # one compiling step: reported at exit unless more follow
    with pytest.warns(RecompileWarning) as record:
        _run(watch, graphs, model, [batch], [2])
    _forget_exit_report(watch)
    assert len(record) == 1
    warning = record[0]
    assert (warning.filename, warning.lineno) == (__file__, STEP_LINE)
    text = str(warning.message)
    assert text.startswith(
        f"anydevice: tpu: {THRESHOLD} of the last {THRESHOLD} steps compiled a new XLA graph "
        f"({2 * THRESHOLD} graphs in {THRESHOLD} steps after the first {WARMUP}), so every step pays a compilation."
    )
    assert "the model's input shapes were the same (Linear((4, 3))), so a value baked into the graph changed" in text
    assert text.endswith(HINT)
    assert [r.step for r in watch.recompiles] == list(range(WARMUP + 1, WARMUP + THRESHOLD + 1))
    assert all(not r.new_inputs and r.where == (__file__, STEP_LINE) for r in watch.recompiles)
    assert watch.inputs is None and recompiles._NOTING == []  # warning stops the noting hooks
    watch.warned = False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", module=r"anydevice\.shims\.recompiles")  # the module's own name silences it
        watch.report("again")
    watch.warned = True
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # one warning per process: more compiling steps stay silent
        _run(watch, graphs, model, [batch] * 3, [1] * 3)
        watch.report_at_exit()
    assert len(watch.recompiles) == THRESHOLD + 3


def test_new_input_shapes_are_named_before_and_after_with_the_fix(graphs: Graphs) -> None:
    watch = RecompileWatch("xla")
    model = torch.nn.Linear(3, 2)
    _step(watch)
    _run(watch, graphs, model, [torch.zeros(8, 3)] * WARMUP, [1] * WARMUP)
    lengths = [7, 6, 5, 4, 3]  # batches of varying size: each new size compiles
    with pytest.warns(RecompileWarning) as record:
        _run(watch, graphs, model, [torch.zeros(n, 3) for n in lengths], [1] * len(lengths))
    _forget_exit_report(watch)
    text = str(record[0].message)
    assert (
        "Likely cause: the model's input shapes changed: Linear((8, 3)) at the first steps, Linear((7, 3)) at step 6 "
        "(and 4 other input shape(s))." in text
    )
    assert "DataLoader(drop_last=True)" in text
    assert all(r.new_inputs for r in watch.recompiles)


def test_a_few_compiling_steps_are_reported_once_at_exit(graphs: Graphs) -> None:
    watch = RecompileWatch("xla")
    model = torch.nn.Linear(3, 2)
    full, short = torch.zeros(8, 3), torch.zeros(2, 3)
    _step(watch)
    _run(watch, graphs, model, [full] * WARMUP, [1] * WARMUP)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _run(watch, graphs, model, [full, short, full], [0, 2, 0])  # the short last batch of an epoch
    try:
        assert watch.exit_report and not watch.warned
        with pytest.warns(RecompileWarning) as record:
            watch.report_at_exit()
    finally:
        _forget_exit_report(watch)
    assert (record[0].filename, record[0].lineno) == (__file__, STEP_LINE)
    text = str(record[0].message)
    assert text.startswith(
        f"anydevice: xla: 1 step(s) after the first {WARMUP} compiled a new XLA graph (2 graphs; step(s) 7 of 8). "
        "Likely cause: the model's input shapes changed: Linear((8, 3)) at the first steps, Linear((2, 3)) at step 7. "
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        watch.report_at_exit()  # reported once


def test_a_long_run_of_sparse_recompiles_lists_the_first_eight_steps(graphs: Graphs) -> None:
    watch = RecompileWatch("xla")
    _step(watch)
    for _ in range(WARMUP):
        graphs.value += 1
        _step(watch)
    compiling = []
    for index in range(27):  # every third step compiles: never THRESHOLD in a window of WINDOW
        if index % 3 == 2:
            graphs.value += 1
            compiling.append(watch.steps + 1)
        _step(watch)
    assert sum(watch.recent) < THRESHOLD and len(watch.recent) == WINDOW
    try:
        with pytest.warns(RecompileWarning) as record:
            watch.report_at_exit()
    finally:
        _forget_exit_report(watch)
    text = str(record[0].message)
    shown = ", ".join(map(str, compiling[:8]))
    assert f"9 step(s) after the first {WARMUP} compiled a new XLA graph (9 graphs; step(s) {shown}, ... of 32)" in text
    # no module ran, so no shapes were noted: the cause is the general one
    assert "Likely cause: a shape or a Python number that changes every step" in text


def test_a_warning_without_a_user_frame_points_at_the_caller_of_report(graphs: Graphs) -> None:
    watch = RecompileWatch("xla")
    with pytest.warns(RecompileWarning, match="anydevice: xla: 0 step") as record:
        watch.report(watch.message(frequent=False))
    assert record[0].filename == __file__
    assert watch.warned
