"""The probe catalogue: enough probes over every shim, selection, and probes from plugins."""

from __future__ import annotations

import types

import pytest

from anydevice.compat_matrix import catalog
from anydevice.compat_matrix.probe import COMPILE_GROUP, EXPORT_GROUP, GROUPS, TARGET_GROUPS, Probe, target_group
from anydevice.contract.hookspecs import hookimpl
from anydevice.runtime.registry import Registry, reset_registry


def _noop(ctx: object) -> None:
    return None


def test_at_least_fifty_unique_probes_over_every_group() -> None:
    probes = catalog.builtin_probes()
    names = [p.name for p in probes]
    assert len(probes) >= 50
    assert len(set(names)) == len(names)
    assert names[0] == catalog.SANITY_NAME
    assert {p.group for p in probes} == set(GROUPS)
    assert all(p.description for p in probes)


def test_select_keeps_sanity_first_and_matches_globs_substrings_and_shims() -> None:
    probes = catalog.builtin_probes()
    picked = [p.name for p in catalog.select(probes, "matmul")]
    assert picked[0] == "sanity" and "matmul" in picked and all("matmul" in n for n in picked[1:])
    assert {p.group for p in catalog.select(probes, "collectives")} == {"sanity", "collectives"}
    picked = [p.name for p in catalog.select(probes, "dtype_float*, sdpa")]
    assert picked[0] == "sanity" and "sdpa" in picked and "dtype_float16" in picked and "matmul" not in picked
    assert len(catalog.select(probes, None)) == len([p for p in probes if p.group not in TARGET_GROUPS])


def test_export_probes_run_only_for_their_export_target() -> None:
    probes = catalog.builtin_probes()
    device = catalog.select(probes, None)
    litert = catalog.select(probes, None, target="litert")
    assert EXPORT_GROUP not in {p.group for p in device}
    assert litert[0].name == catalog.SANITY_NAME and len(litert) >= 6
    assert {p.group for p in litert[1:]} == {EXPORT_GROUP} and {p.params["target"] for p in litert[1:]} == {"litert"}
    assert [p.name for p in catalog.select(probes, "svd", target="litert")] == ["sanity", "export_litert_linalg_svd"]
    assert catalog.select(probes, "export_litert", target=None) == [probes[0]]  # only sanity: they need --target


def test_compile_probes_run_only_for_a_slice_of_their_device() -> None:
    probes = catalog.builtin_probes()
    v5e = catalog.select(probes, None, target="tpu:v5e-8")
    assert v5e[0].name == catalog.SANITY_NAME and len(v5e) >= 6
    assert {p.group for p in v5e[1:]} == {COMPILE_GROUP} and {p.params["target"] for p in v5e[1:]} == {"tpu"}
    assert catalog.select(probes, None, target="tpu:v6e-8") == v5e  # any slice of the device
    assert COMPILE_GROUP not in {p.group for p in catalog.select(probes, None)}  # no device run takes them
    assert catalog.select(probes, None, target="litert")[1:] and not {p.group for p in catalog.select(probes, None, "litert")} & {
        COMPILE_GROUP
    }
    assert (target_group("tpu:v5e-8"), target_group("litert"), target_group("tpu"), target_group("cuda:1")) == (
        COMPILE_GROUP,
        EXPORT_GROUP,
        None,
        None,
    )


@pytest.mark.parametrize("name", ["Upper", "has space", "", "x" * 101])
def test_probe_names_are_validated(name: str) -> None:
    with pytest.raises(ValueError, match="must match"):
        Probe(name, "ops", _noop)


def test_plugin_probes_come_through_the_hook() -> None:
    plugin = types.ModuleType("probe_plugin")

    @hookimpl
    def anydevice_register_probes(register):  # type: ignore[no-untyped-def]
        register(Probe("myplugin_special", "ops", _noop, description="from a plugin"))
        register(Probe("matmul", "ops", _noop))  # a clash with a built-in: dropped and reported
        register("not a probe")

    plugin.anydevice_register_probes = anydevice_register_probes  # type: ignore[attr-defined]
    reset_registry(Registry(plugins=[("probe_plugin", plugin, None)]))
    problems: list[str] = []
    probes = catalog.all_probes(problems)
    names = [p.name for p in probes]
    assert "myplugin_special" in names and names.count("matmul") == 1
    assert any("registered twice" in p for p in problems)
    assert any("not an anydevice.compat_matrix.probe.Probe" in p for p in problems)


def test_module_probes_and_their_problems() -> None:
    problems: list[str] = []
    probes = catalog.all_probes(problems, with_plugins=False, modules=["tests.compat_matrix.crashy_probes", "no_such_module_xyz"])
    assert "zz_crash" in [p.name for p in probes]
    assert any("no_such_module_xyz" in p for p in problems)


def test_every_api_name_a_probe_calls_is_on_the_public_package_the_worker_hands_it() -> None:
    """Probes call ``ctx.api("name")`` on the module the worker imports; a name missing there turns the probe into
    a harness error on every device (ad.export and ad.distributed did, when the worker took ``anydevice.api``)."""
    import ast
    from pathlib import Path

    import anydevice
    from anydevice.compat_matrix import worker

    folder = Path(catalog.__file__).parent
    called = {
        node.args[0].value
        for path in folder.glob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call)
        and getattr(node.func, "attr", None) == "api"
        and node.args
        and isinstance(node.args[0], ast.Constant)
    }
    assert {"export", "distributed", "backend", "compile"} <= called
    assert [name for name in sorted(called) if not hasattr(anydevice, name.split(".")[0])] == []
    assert "import anydevice as ad" in Path(worker.__file__).read_text()
