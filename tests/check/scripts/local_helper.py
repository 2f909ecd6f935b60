"""A module next to ``writes_files.py``: the script imports it as ``python writes_files.py`` would."""

WIDTH = 2
