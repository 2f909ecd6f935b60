"""ad.profile / ad.record on cpu, for real: chrome traces that parse, schedules driven by ad.step()."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import anydevice as ad
from anydevice.errors import UnsupportedFeatureError
from anydevice.shims.torch_profiler import PERFETTO, viewers_for
from tests.utils import TRAIN, python

pytestmark = pytest.mark.torch_version_sensitive  # docs/architecture.md, "Which tests the core lanes run"


def events(path: Path) -> list[dict[str, object]]:
    """The events of a chrome trace; json.loads fails if the viewer's format is broken."""
    trace = json.loads(path.read_text())
    assert isinstance(trace["traceEvents"], list)
    return list(trace["traceEvents"])


def names(path: Path) -> list[object]:
    return [e.get("name") for e in events(path)]


def test_main_job_writes_a_chrome_trace_with_its_train_step_annotations(tmp_path: Path) -> None:
    out = python(str(TRAIN), "--steps", "20", "--profile", str(tmp_path / "prof"), env={"ANYDEVICE": "cpu"})
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    files = [Path(f) for f in result["profile_files"]]
    assert files and all(f.parent == tmp_path / "prof" and f.name.endswith(".pt.trace.json") for f in files)
    assert names(files[0]).count("train_step") == 20  # one annotation per step, in the viewer's format
    assert result["mfu"] is None and "not in the cpu plugin's" in result["mfu_note"]
    assert f"open with {PERFETTO}" in out.stderr  # the session says where the files went and what opens them


def test_schedule_records_only_the_active_steps(tmp_path: Path) -> None:
    ad.use("cpu")
    with ad.profile(tmp_path, wait=1, warmup=1, active=2) as session:
        for i in range(6):
            with ad.record(f"region{i}"):
                torch.randn(32, 32) @ torch.randn(32, 32)
            ad.step()
    assert len(session.files) == 1
    seen = set(names(session.files[0]))
    assert {"region2", "region3"} <= seen
    assert not seen & {"region0", "region1", "region4", "region5"}
    assert session.tool == "torch.profiler" and "Perfetto" in session.viewer


def test_a_schedule_that_never_reaches_its_active_steps_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ad.use("cpu")
    with ad.profile(tmp_path, wait=3, active=2) as session:
        for _ in range(2):
            ad.step()
    assert session.files == []
    assert "the schedule needs 5 ad.step() calls, the block made 2" in capsys.readouterr().err


def test_steps_outside_a_profile_do_not_reach_it(tmp_path: Path) -> None:
    ad.use("cpu")
    with ad.profile(tmp_path, active=1) as session:
        with ad.record("inside"):
            torch.ones(4).sum()
    ad.step()  # after the block: the session's listener is gone
    assert len(session.files) == 1 and "inside" in names(session.files[0])


def test_only_one_profile_at_a_time(tmp_path: Path) -> None:
    ad.use("cpu")
    with ad.profile(tmp_path / "a"), pytest.raises(UnsupportedFeatureError, match="already being recorded"):
        with ad.profile(tmp_path / "b"):
            pass
    with ad.profile(tmp_path / "c") as session:  # the guard is released on exit
        pass
    assert session.files


def test_schedule_options_are_checked(tmp_path: Path) -> None:
    ad.use("cpu")
    with pytest.raises(ValueError, match="active=N"), ad.profile(tmp_path, wait=2):
        pass
    with pytest.raises(ValueError, match="at least 1"), ad.profile(tmp_path, active=0):
        pass


def test_record_without_a_profile_is_harmless() -> None:
    ad.use("cpu")
    with ad.record("nothing listens"):
        assert torch.ones(2).sum().item() == 2.0


def test_quiet_silences_the_profile_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANYDEVICE_QUIET", "1")
    ad.use("cpu")
    with ad.profile(tmp_path):
        pass
    assert "profile" not in capsys.readouterr().err


def test_viewers_follow_the_files_written() -> None:
    assert viewers_for([Path("a.pt.trace.json")]) == PERFETTO
    both = viewers_for([Path("x.pt.trace.json"), Path("plugins/profile/1/host.xplane.pb")])
    assert "Perfetto" in both and "TensorBoard" in both
    assert "Neuron Profiler" in viewers_for([Path("model.ntff")])
    assert viewers_for([], default="XProf") == "XProf"
