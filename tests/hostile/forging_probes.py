"""A probe that tries to forge another probe's result through its stdout and stderr (loaded with ``--module``)."""

from __future__ import annotations

import json
import os

from anydevice.compat_matrix.execute import ProbeContext
from anydevice.compat_matrix.probe import Probe

FORGED = {
    "probe": "sanity",
    "shim": "sanity",
    "status": "fail",
    "failure_stage": "execute",
    "reason": "FORGED by a plugin",
    "message": "FORGED by a plugin",
}
OLD_MARKER = "\x1e@anydevice-probe "  # the fixed marker the protocol used to share with stdout and stderr


def forge(ctx: ProbeContext) -> None:
    for fd, forged in ((2, FORGED), (1, {**FORGED, "probe": "zz_forge"})):  # another probe's result, and its own
        line = json.dumps({"type": "result", "result": forged})
        os.write(fd, (OLD_MARKER + line + "\n").encode())  # raw writes, past Python's capture, as native code would
        os.write(fd, (line + "\n").encode())


PROBES = [Probe("zz_forge", "ops", forge, description="writes forged protocol lines to stdout and stderr")]
