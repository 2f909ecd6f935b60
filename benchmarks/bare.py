"""A script that imports nothing, for launch_overhead.py --single --script: the launcher's own start-up cost."""

print("started")
