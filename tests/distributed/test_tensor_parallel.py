"""ad.distributed.parallelize on gloo, real processes: TP and FSDP x TP equal the unsplit run (5 AdamW steps, fp32).

The 2-rank cases run one after another in one module-scoped launch (``two_ranks``); each test reads its case's rows.
"""

from __future__ import annotations

import json
from importlib.util import find_spec

import pytest

from tests.distributed.helpers import TRAIN, WORKERS, anydevice_run, python

pytestmark = pytest.mark.torch_version_sensitive  # docs/architecture.md, "Which tests the core lanes run"

WORKER = WORKERS / "tp_losses.py"


TIED_PLAN = {"blocks.*.up": "colwise", "blocks.*.down": "rowwise", "head": "colwise_rep", "embed": "embedding_rowwise"}
TWO_RANK_CASES = {  # the 2-rank cases, in one launch: a test's key -> the worker's case arguments
    "mlp": ("tp", "2", "mlp"),
    "hf-llama": ("tp", "2", "hf-llama"),
    "hf-llama-tied": ("tp", "2", "hf-llama-tied"),
    "tied-mlp-auto": ("tp", "2", "tied-mlp"),
    "tied-mlp-plan": ("tp", "2", "tied-mlp", json.dumps(TIED_PLAN)),
}


def _rows(*args: str, n: int) -> dict[int, dict[str, object]]:
    result = anydevice_run("-n", str(n), WORKER, *args, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = result.by_rank()
    assert sorted(rows) == list(range(n))
    return rows


@pytest.fixture(scope="module")
def two_ranks() -> dict[str, dict[int, dict[str, object]]]:
    """Every 2-rank case's rows by rank, from one ``anydevice run -n 2`` (transformers' cases where it is installed)."""
    here = {key: case for key, case in TWO_RANK_CASES.items() if not key.startswith("hf-") or find_spec("transformers")}
    args: list[str] = []
    for case in here.values():
        args += [*(["--and"] if args else []), *case]
    result = anydevice_run("-n", "2", WORKER, *args, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    rows: dict[str, dict[int, dict[str, object]]] = {key: {} for key in here}
    keys = list(here)
    for row in result.json_lines():
        rows[keys[row["case"]]][row["rank"]] = row
    assert all(sorted(by_rank) == [0, 1] for by_rank in rows.values()), rows
    return rows


def _assert_equal_losses(row: dict[str, object]) -> None:
    reference, losses = row["reference"], row["losses"]
    assert isinstance(reference, list) and isinstance(losses, list) and len(losses) == 5
    assert losses == pytest.approx(reference, abs=1e-5)
    assert reference[-1] != reference[0]  # it trained


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "n", "mesh"), [("tp", 2, {"dp": 1, "tp": 2}), ("fsdp+tp", 4, {"dp": 2, "tp": 2})])
def test_split_training_equals_the_unsplit_run(mode: str, n: int, mesh: dict[str, int], request: pytest.FixtureRequest) -> None:
    rows = request.getfixturevalue("two_ranks")["mlp"] if n == 2 else _rows(mode, "2", "mlp", n=n)
    for row in rows.values():
        assert row["mesh"] == mesh
        _assert_equal_losses(row)
        placements = row["placements"]
        assert isinstance(placements, dict)
        up = placements["blocks.0.up.weight"]
        assert up.rstrip(",)").endswith("Shard(dim=0")  # colwise: output features split on tp (the last mesh dim)
        if mode == "fsdp+tp":  # and FSDP's dim-0 shard on dp, strided over the tp shards
            assert up.startswith("(_StridedShard(dim=0") or up.startswith("(Shard(dim=0)")
        assert "Shard(dim=1)" in placements["blocks.0.down.weight"]  # rowwise: input features split


@pytest.mark.slow
def test_tp_over_four_ranks_equals_the_unsplit_run() -> None:
    for row in _rows("tp", "4", "mlp", n=4).values():
        assert row["mesh"] == {"dp": 1, "tp": 4}
        assert row["logits_diff"] is not None and row["logits_diff"] < 1e-5
        _assert_equal_losses(row)


@pytest.mark.slow
def test_transformers_llama_auto_plan_matches_logits_and_trains(two_ranks: dict[str, dict[int, dict[str, object]]]) -> None:
    pytest.importorskip("transformers")
    for row in two_ranks["hf-llama"].values():
        assert row["logits_diff"] is not None and row["logits_diff"] < 1e-5
        placements = row["placements"]
        assert isinstance(placements, dict)
        assert placements["model.layers.0.self_attn.q_proj.weight"] == "(Shard(dim=0),)"
        assert placements["model.layers.0.mlp.down_proj.weight"] == "(Shard(dim=1),)"
        _assert_equal_losses(row)


@pytest.mark.slow
def test_main_job_fsdp_tp_equals_one_process_with_the_same_global_batch() -> None:
    common = ("--steps", "3", "--log-every", "0")
    alone = python(TRAIN, *common, "--batch-size", "8", timeout=300)
    split = anydevice_run("-n", "4", TRAIN, *common, "--parallel", "fsdp+tp", "--tp", "2", "--batch-size", "4", timeout=300)
    assert alone.returncode == 0 and split.returncode == 0, split.stderr[-3000:]
    one, four = alone.json_lines()[-1], split.json_lines()[-1]
    assert four["mesh"] == {"dp": 2, "tp": 2} and four["parallel"] == "fsdp+tp"
    assert four["losses"] == pytest.approx(one["losses"], abs=1e-5)


def test_main_job_refuses_a_world_the_tp_degree_does_not_divide() -> None:
    result = anydevice_run("-n", "3", TRAIN, "--steps", "1", "--parallel", "tp", "--tp", "2", timeout=300)
    assert result.returncode != 0
    assert "does not divide the world size 3" in result.stderr


@pytest.mark.slow
def test_tied_llama_split_by_auto_stays_tied_and_trains_as_the_unsplit_tied_model(
    two_ranks: dict[str, dict[int, dict[str, object]]],
) -> None:
    # issue 35: parallelize gave lm_head and embed_tokens each its own DTensor; after 4 AdamW steps the
    # split run was 0.14 off the unsplit one. transformers' own plan splits both on dim 0: one Parameter again.
    pytest.importorskip("transformers")
    for row in two_ranks["hf-llama-tied"].values():
        assert row["tied"] is True
        assert row["placements"]["model.embed_tokens.weight"] == "(Shard(dim=0),)"  # type: ignore[index]
        assert row["logits_diff"] is not None and row["logits_diff"] < 1e-5
        _assert_equal_losses(row)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("case", "head"),
    [
        ("tied-mlp-auto", "plain"),  # the declared plan splits the head but not the embedding: auto leaves the pair whole
        ("tied-mlp-plan", "(Shard(dim=0),)"),  # TIED_PLAN splits both
    ],
)
def test_a_tied_head_and_embedding_stay_one_parameter_through_the_split(
    case: str, head: str, two_ranks: dict[str, dict[int, dict[str, object]]]
) -> None:
    for row in two_ranks[case].values():
        assert row["tied"] is True
        assert row["placements"]["embed.weight"] == head  # type: ignore[index]
        _assert_equal_losses(row)
