"""The Ray test needs the 'ray' extra (in the main lane's venv); other lanes do not collect it."""

import importlib.util

collect_ignore = [] if importlib.util.find_spec("ray") else ["test_distributed_ray.py"]
