"""The reference job's stand-in compute counts only time the process runs: a rank stopped in
the middle of a step (a SIGSTOP duty cycle, a throttled GPU) takes longer by what it was
stopped, less at most 1.5 ms per stop (the rest of the 1 ms slice it cut into, and the
slack). A real process, stopped by a real signal. The bound
is a lower one, which load only makes easier to meet; a compute that credited wall time
would miss it by the whole stop."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from drillbit.fixtures.reference.train import SLICE_ENV

CHILD = """
import sys, time
from drillbit.fixtures.reference.train import compute
t = time.perf_counter()
print("ready", flush=True)
compute(float(sys.argv[1]))
print(f"{time.perf_counter() - t:.6f}", flush=True)
"""


@pytest.mark.parametrize("stops", [1, 3])
def test_time_stopped_is_not_counted_as_compute(stops):
    work, hold = 0.5, 0.2
    env = {k: v for k, v in os.environ.items() if k != SLICE_ENV}  # the 1 ms slice, whatever the suite's
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(work)], stdout=subprocess.PIPE, text=True, env=env)
    stopped = 0.0
    try:
        assert child.stdout.readline().strip() == "ready"
        for _ in range(stops):  # the child runs ~5 ms between stops: its 0.5 s of work outlasts them
            t = time.perf_counter()
            child.send_signal(signal.SIGSTOP)
            time.sleep(hold)
            child.send_signal(signal.SIGCONT)
            stopped += time.perf_counter() - t
            time.sleep(0.005)
        elapsed = float(child.stdout.readline())
    finally:
        child.send_signal(signal.SIGCONT)
        child.kill()
        child.wait()
    assert elapsed >= work + stopped - stops * 0.0015 - 0.002, (elapsed, stopped)
