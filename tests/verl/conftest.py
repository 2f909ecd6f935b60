"""The verl lane's tests need verl (requirements/verl.txt); other lanes do not even collect them."""

import importlib.util

collect_ignore_glob = [] if importlib.util.find_spec("verl") else ["test_*.py"]
