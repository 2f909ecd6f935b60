"""A plugin whose module fails to import (a missing dependency)."""

import anydevice_nonexistent_vendor_sdk  # noqa: F401
