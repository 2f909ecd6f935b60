"""TorchTPU topology and caches: `anydevice run -n` takes whole slices only; compile caches under ANYDEVICE_CACHE_DIR."""

from __future__ import annotations

from pathlib import Path

import pytest

from anydevice.cli.launch import check_nproc
from anydevice.contract.device_spec import Detection
from anydevice.errors import DistributedError
from anydevice.plugins import tpu
from anydevice.runtime.registry import get_registry


def _check(n: int, chips: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tpu, "tpu_chips", lambda *a, **k: chips)
    spec = get_registry().get("tpu").spec
    check_nproc(n, "tpu", spec, Detection.ok("test host", count=8))


@pytest.mark.parametrize(
    ("generation", "allowed", "refused"),
    [("v4", (1, 2, 4, 8), (3, 5, 6, 7)), ("v5e", (1, 4, 8), (2, 3, 6)), ("v6e", (1, 4, 8), (2, 3)), ("v7", (2, 4, 8), (1, 3, 6))],
)
def test_only_whole_slice_process_counts_are_accepted(
    generation: str, allowed: tuple[int, ...], refused: tuple[int, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    for n in allowed:
        _check(n, [generation] * 8, monkeypatch)
    for n in refused:
        with pytest.raises(DistributedError, match=f"-n {n} is not a whole slice") as caught:
            _check(n, [generation] * 8, monkeypatch)
        assert ", ".join(map(str, allowed)) in str(caught.value)


def test_a_generation_without_a_table_is_not_restricted(monkeypatch: pytest.MonkeyPatch) -> None:
    _check(3, ["v5p"] * 8, monkeypatch)


def test_compile_caches_go_under_the_cache_dir_and_a_users_value_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANYDEVICE_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("TORCH_TPU_TIER2_COMPILATION_CACHE", raising=False)
    monkeypatch.setenv("TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT", "/mine")
    chosen = tpu.set_compile_caches()
    assert chosen == {"TORCH_TPU_TIER2_COMPILATION_CACHE": str(tmp_path / "tpu" / "tier2")}
    assert (tmp_path / "tpu" / "tier2").is_dir()
    import os

    assert os.environ["TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT"] == "/mine"
