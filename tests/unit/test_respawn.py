"""drillbit.fixtures.defects.respawn, the node supervisor of the pytorch#147064 drill: it starts a
launcher that failed again at once, up to its limit; a launcher that succeeded, or a SIGTERM
to the supervisor, ends it."""
from __future__ import annotations

import signal
import subprocess
import sys
import time

COUNT = ("import sys, pathlib; p = pathlib.Path(sys.argv[1]); "
         "p.write_text(p.read_text() + 'x') if p.exists() else p.write_text('x'); sys.exit(int(sys.argv[2]))")


def respawn(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "drillbit.fixtures.defects.respawn", *args], capture_output=True, text=True,
                          timeout=60)


def test_a_failing_launcher_is_started_again_up_to_the_limit_and_a_clean_exit_ends_it(tmp_path):
    runs = tmp_path / "runs"
    done = respawn("--times", "2", "--delay", "0", "--", sys.executable, "-c", COUNT, str(runs), "3")
    assert done.returncode == 3 and runs.read_text() == "xxx"  # the first start and two more
    assert done.stdout.count("respawn: the launcher exited with code 3; starting it again") == 2
    runs.unlink()
    done = respawn("--times", "5", "--delay", "0", "--", sys.executable, "-c", COUNT, str(runs), "0")
    assert done.returncode == 0 and runs.read_text() == "x" and "respawn:" not in done.stdout


def test_sigterm_is_passed_on_and_nothing_is_started_after_it(tmp_path):
    started = tmp_path / "started"
    script = f"import pathlib, time; pathlib.Path({str(started)!r}).touch(); time.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-m", "drillbit.fixtures.defects.respawn", "--delay", "0", "--", sys.executable,
                             "-c", script], stdout=subprocess.PIPE, text=True)
    deadline = time.time() + 30
    while not started.exists() and time.time() < deadline:
        time.sleep(0.05)
    assert started.exists()
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGTERM and "respawn:" not in out
