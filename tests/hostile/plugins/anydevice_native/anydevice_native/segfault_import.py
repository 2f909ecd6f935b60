"""A plugin that crashes (SIGSEGV) when imported."""

import ctypes

ctypes.string_at(0)
