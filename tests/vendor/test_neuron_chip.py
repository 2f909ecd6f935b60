"""The Neuron chip from the EC2 instance type, so MFU is known on Trainium (not verified on hardware)."""

from __future__ import annotations

from pathlib import Path

import pytest

from anydevice.plugins import neuron

pytestmark = pytest.mark.torch_version_sensitive  # docs/architecture.md, "Which tests the core lanes run"

torch = pytest.importorskip("torch")


@pytest.mark.parametrize(
    ("product", "chip"),
    [
        ("trn1.32xlarge", "Trainium1"),
        ("trn1n.32xlarge\n", "Trainium1"),
        ("trn2.48xlarge", "Trainium2"),
        ("inf2.xlarge", "Inferentia2"),
        ("c7i.large", None),
    ],
)
def test_the_instance_type_names_the_chip(tmp_path: Path, product: str, chip: str | None) -> None:
    path = tmp_path / "product_name"
    path.write_text(product)
    assert neuron.chip(str(path)) == chip


def test_no_dmi_means_no_chip(tmp_path: Path) -> None:
    assert neuron.chip(str(tmp_path / "missing")) is None


def test_both_stacks_use_the_peak_table_with_the_chip() -> None:
    """The XLA-based table and the native one both carry the chip function and the peaks: MFU follows the chip."""
    from anydevice.shims.common import peak_flops

    vendor = neuron.xla_vendor()
    assert vendor.chip is neuron.chip and vendor.peak_tflops is neuron.PEAK_BF16_TFLOPS
    assert peak_flops(vendor.peak_tflops, "Trainium2", torch.bfloat16) == 667.0e12
