"""A plugin that starts a non-daemon thread at import polling its driver forever (a telemetry loop)."""

from __future__ import annotations

import threading
import time

from anydevice_lingering import registration


def poll_forever() -> None:
    while True:
        time.sleep(0.2)


threading.Thread(target=poll_forever, name="driver-poller", daemon=False).start()
anydevice_register_devices = registration("poller")
