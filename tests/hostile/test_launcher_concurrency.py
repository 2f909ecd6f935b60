"""Issue 25: two ``anydevice run -n 2`` jobs started together while ``MASTER_PORT`` (from the environment) is taken.

Each job's ranks meet at a rendezvous whose port the kernel picks when the store binds it (port 0, never
a port found free and bound later), so neither the taken ``MASTER_PORT`` nor the other job can collide
with it. 20 pairs of runs started at the same moment: two waves of five runs started together (each wave
holds ten simultaneous pairs, each run also against the taken port), so the pairs cost ten launches instead
of forty; every job's two ranks must all-reduce and exit 0.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.utils import REPO, child_env

JOB = """
import os, torch, torch.distributed as dist
dist.init_process_group("gloo")
total = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(total)
line = f"rank {dist.get_rank()} sum {total.item():g} port {os.environ['MASTER_PORT']}\\n"
os.write(1, line.encode())  # one write: the two ranks share the pipe, and print() writes the newline apart
dist.destroy_process_group()
"""


@pytest.mark.slow
@pytest.mark.long("ten launches, five at a time")
def test_twenty_pairs_of_simultaneous_runs_with_master_port_taken_all_succeed(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text(JOB)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = child_env(
            {
                "ANYDEVICE": "cpu",
                "ANYDEVICE_QUIET": "1",
                "OMP_NUM_THREADS": "1",
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port),
            }
        )
        failures = []
        for wave in range(2):  # 5 runs at once: C(5, 2) = 10 simultaneous pairs a wave
            jobs = [
                subprocess.Popen(
                    [sys.executable, "-m", "anydevice", "run", "-n", "2", str(script)],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    env=env,
                    cwd=REPO,
                )
                for _ in range(5)
            ]
            for n, job in enumerate(jobs):
                out, err = job.communicate(timeout=300)
                lines = sorted(line for line in out.splitlines() if line.startswith("rank "))
                ports = {line.split()[-1] for line in lines}
                if job.returncode != 0 or [line.split()[:4] for line in lines] != [
                    ["rank", "0", "sum", "3"],
                    ["rank", "1", "sum", "3"],
                ]:
                    failures.append(f"wave {wave} run {n}: exit {job.returncode}\n{out}\n{err[-2000:]}")
                elif ports == {str(port)}:
                    failures.append(f"wave {wave} run {n}: the ranks met at the taken MASTER_PORT {port}")
    assert failures == []
