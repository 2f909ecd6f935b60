"""Preflight: does a vendor package pair with the installed torch? Answered before importing either.

A torch_xla or torch-neuronx built for another torch fails at import with undefined symbols
(pytorch/xla issues 8626, 8813, 9422); these checks turn that into one sentence with the fix.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import metadata
from typing import Literal

from anydevice.contract.detect import major_minor, torch_version, version_of

PairRule = Literal["lockstep", "requires_dist"]
"""How a vendor package's version relates to torch's: ``lockstep`` (its x.y must equal torch's x.y)
or ``requires_dist`` (its own Requires-Dist on torch says which torch). Plugins declare it per package."""


@dataclass(frozen=True)
class PairCheck:
    """The outcome of comparing a vendor package's version with torch's."""

    package: str
    package_version: str
    torch_version: str
    ok: bool
    reason: str
    fix: str | None = None


def _mm(version: str) -> str:
    return ".".join(map(str, major_minor(version)))


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version.split("+", 1)[0])[:3])


def _satisfies(version: str, spec: str) -> bool:
    """Whether ``version`` meets a comma-joined specifier such as ``>=2.11.0,<=2.15.0``."""
    have = _release(version)
    for clause in filter(None, (c.strip() for c in spec.split(","))):
        parsed = re.match(r"(~=|==|!=|<=|>=|<|>)?\s*(.+)", clause)
        if parsed is None:  # "(.+)" matches any non-empty clause; filter() dropped the empty ones
            return False
        op, want_text = parsed.groups()
        want = _release(want_text)
        width = max(len(have), len(want))
        h, w = have + (0,) * (width - len(have)), want + (0,) * (width - len(want))
        ok = {
            None: h == w,
            "==": h == w,
            "!=": h != w,
            "<=": h <= w,
            ">=": h >= w,
            "<": h < w,
            ">": h > w,
            "~=": h >= w and h[: len(want) - 1] == want[: len(want) - 1],
        }[op]
        if not ok:
            return False
    return True


def torch_requirement(distribution: str) -> str | None:
    """The specifier a distribution puts on torch in its metadata, e.g. ``>=2.11.0,<=2.15.0``."""
    try:
        requirements = metadata.requires(distribution) or []
    except metadata.PackageNotFoundError:
        return None
    for req in requirements:
        match = re.match(r"^torch\s*([^;\s][^;]*)?(;.*)?$", req.strip())
        if match and not (match.group(2) and "extra" in match.group(2)):
            return (match.group(1) or "").strip().strip("()") or None
    return None


def check_pair(package: str, rule: PairRule) -> PairCheck | None:
    """Compare ``package`` with the installed torch by ``rule``; None when the package is not installed.

    The plugin that needs the package says which rule applies (``DeviceSpec.paired_packages``).
    Computed once per process (detection and the preflight before import ask the same question).
    """
    return _check_pair(package, rule)


@functools.cache
def _check_pair(package: str, rule: PairRule) -> PairCheck | None:
    pkg_version = version_of(package)
    if pkg_version is None:
        return None
    tv = torch_version()
    if tv is None:
        return PairCheck(
            package,
            pkg_version,
            "not installed",
            False,
            "torch is not installed",
            f"pip install torch for {package} {pkg_version}",
        )
    if rule == "lockstep":
        want = ".".join(map(str, major_minor(pkg_version)))
        if major_minor(pkg_version) == major_minor(tv):
            return PairCheck(package, pkg_version, tv, True, f"{package} {pkg_version} pairs with torch {tv}")
        return PairCheck(
            package,
            pkg_version,
            tv,
            False,
            f"{package} {pkg_version} needs torch {want}.x but torch {tv} is installed",
            f"pip install torch=={want}.* {package}=={pkg_version}  (or the {package} built for torch {_mm(tv)})",
        )
    spec = torch_requirement(package)
    if spec is None or _satisfies(tv, spec):
        return PairCheck(
            package, pkg_version, tv, True, f"{package} {pkg_version} accepts torch {tv}" + (f" ({spec})" if spec else "")
        )
    return PairCheck(
        package,
        pkg_version,
        tv,
        False,
        f"{package} {pkg_version} needs torch{spec} but torch {tv} is installed",
        f'pip install "torch{spec}"',
    )


# -- the torch releases anydevice claims ------------------------------------------------------
TORCH_MINORS = tuple(f"2.{minor}" for minor in range(9, 16))
"""The torch releases anydevice claims (README: "torch 2.9 to 2.15"), oldest first."""
