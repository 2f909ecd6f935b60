"""The XLA lane's tests need torch_xla; other lanes do not even collect them (no skip noise there)."""

import importlib.util

collect_ignore_glob = [] if importlib.util.find_spec("torch_xla") else ["test_*.py"]
