"""A plugin whose module hangs at import (a vendor SDK waiting on a lock that is never released)."""

import time

time.sleep(600)
