"""Probes that misbehave on purpose, loaded with ``--module`` to test the runner's isolation."""

from __future__ import annotations

import os
import time

from anydevice.compat_matrix.execute import ProbeContext
from anydevice.compat_matrix.probe import Probe


def crash(ctx: ProbeContext) -> None:
    os.abort()  # a hard crash, like a segfault in a vendor library


def hang(ctx: ProbeContext) -> None:
    time.sleep(600)


def after(ctx: ProbeContext) -> None:
    print("still alive")


PROBES = [
    Probe("zz_crash", "ops", crash, description="aborts the process"),
    Probe("zz_hang", "ops", hang, description="never returns"),
    Probe("zz_after", "ops", after, description="runs in a fresh worker"),
]
