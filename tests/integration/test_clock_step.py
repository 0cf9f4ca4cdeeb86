"""A real step of the wall clock in the middle of a real drill (opt-in: it steps this machine's
clock +1 s and back, which every other test running beside would feel; run it alone, as root,
with DRILLBIT_TEST_CLOCK_STEP=1).

Before drillbit named processes by their start after boot, this drill ended "aborted: ... the job
has ranks []" (exit 2) after the step, as a CI run's drills did (tests/unit/test_proc_identity.py
fakes the step for the suite)."""
from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.integration.cli import drill_script

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(os.environ.get("DRILLBIT_TEST_CLOCK_STEP") != "1" or os.geteuid() != 0,
                                 reason="steps the machine's clock: opt-in (DRILLBIT_TEST_CLOCK_STEP=1, as root)")]


def step(seconds: float) -> None:
    time.clock_settime(time.CLOCK_REALTIME, time.time() + seconds)


def wait_for(reports: Path, kind: str, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        found = list(reports.glob("*/history.jsonl"))
        if found and f'"kind":"{kind}"' in found[0].read_text():
            return
        time.sleep(0.1)
    raise AssertionError(f"no {kind} in the drill's history")


@pytest.mark.parametrize("when", ["steady", "fault.confirmed"])
def test_a_drill_survives_a_step_of_the_wall_clock(tmp_path, when):
    proc = subprocess.Popen([drill_script(), "run", "stall-nccl", "--cluster", "local-process", "--reports",
                             str(tmp_path), "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stepped = False
    try:
        wait_for(tmp_path, when, proc)
        step(1.0)
        stepped = True
        out, err = proc.communicate(timeout=300)
    finally:
        if stepped:
            step(-1.0)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    result = json.loads(out)
    assert proc.returncode == 0 and result["verdict"] == "pass", (result["reasons"], err[-2000:])
    assert all(h["verified"] for h in result["fault"]["heals"]), result["fault"]["heals"]
