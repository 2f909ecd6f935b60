"""A trivial script for benchmarks/launch_overhead.py --single: import torch, make one tensor, print it."""

import torch

print(torch.ones(2))
