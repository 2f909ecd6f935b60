"""A plugin whose non-daemon thread runs a builtin (no frame of the plugin's own on its stack)."""

from __future__ import annotations

import threading
import time

from anydevice_lingering import registration

threading.Thread(target=time.sleep, args=(3600,), name="idle-sleeper", daemon=False).start()
anydevice_register_devices = registration("sleeper")
