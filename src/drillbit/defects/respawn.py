"""A node's supervisor that starts a job's per-node launcher again the moment it dies, as a
systemd unit with ``Restart=on-failure`` does (RestartSec defaults to 100 ms), or an operator
who brings a node's torchrun straight back:

    python -m drillbit.defects.respawn [--times 5] [--delay 0.1] -- CMD ...

With it, a node whose elastic agent exits rejoins at once — the case of pytorch/pytorch#147064:
the other agents see a new node waiting while their own workers are healthy, restart them as a
membership change, and never count it against ``--max-restarts`` (torch 2.13's
``SimpleElasticAgent._invoke_run``: "membership changes do not count as retries").

SIGTERM or SIGINT is passed on to the launcher, and nothing is started after it. The launcher
runs in this process's session; the exit code is the last launcher's (128 + N when a
signal N ended it, as a shell reports it)."""
from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--times", type=int, default=5, help="start it again at most this many times")
    ap.add_argument("--delay", type=float, default=0.1, help="seconds between its exit and the next start")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ...")
    args = ap.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        ap.error("give the launcher's command after --")
    stopping = False
    child: subprocess.Popen | None = None

    def stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        if child is not None and child.poll() is None:
            child.send_signal(signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    code = 0
    for started in range(args.times + 1):
        if started:
            print(f"respawn: the launcher exited with code {code}; starting it again ({started}/{args.times})",
                  flush=True)
            time.sleep(args.delay)
            if stopping:
                break
        child = subprocess.Popen(command)
        code = child.wait()
        if stopping or code == 0:
            break
    return 128 - code if code < 0 else code  # killed by a signal: the shell's 128 + N


if __name__ == "__main__":
    sys.exit(main())
