"""How soon after a save's first file appears does kill-during-save land? inotify vs polling.

A real writer process saves like the reference job (a folder, then files with a pause
after each) and notes the time just before it creates the save's first file.
The kill-during-save fault, armed on it with ``point: create shard_*.pt`` (the first file),
SIGKILLs it when it sees that file. The lag is the kill time minus the writer's own
timestamp: the window in which a real job could still write on. Printed per mode: median,
p90, min, max over N saves, and the ratio of the medians.

    python bench/save_watch.py [--runs 15] [--poll-interval 0.05]
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from drillbit.spec.checkpoints import CheckpointSpec
from drillbit.core.dirwatch import inotify_available
from drillbit.faults.kill_during_save import KillDuringSave
from drillbit.core.proc import ProcRef

WRITER = r"""
import os, sys, time
root, stamp = sys.argv[1], sys.argv[2]
time.sleep(0.5)  # armed before the save starts
tmp = os.path.join(root, ".tmp-step_00000010-%d" % os.getpid())
os.mkdir(tmp)
for i, name in enumerate(["shard_0.pt", "meta.json", "MANIFEST.json", "COMPLETE"]):
    t = time.time()  # just before the file exists: the lag measured is an upper bound
    with open(os.path.join(tmp, name), "wb") as fh:
        if i == 0:
            open(stamp, "w").write(repr(t))
        fh.write(b"x" * 4096)
    time.sleep(0.2)
os.rename(tmp, os.path.join(root, "step_00000010"))
time.sleep(30)
"""


def one(mode: str, interval: float) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        root, stamp = Path(tmp) / "ckpt", Path(tmp) / "stamp"
        root.mkdir()
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(root), str(stamp)])
        try:
            target = ProcRef.of(psutil.Process(proc.pid), rank=0)
            fault = KillDuringSave(scratch=Path(tmp))
            params = fault.Params(point="create shard_*.pt", watch=mode, poll_interval_s=interval, keep_copy="none",
                                  arm_timeout_s=20, checkpoint=CheckpointSpec(dir=str(root), layout="reference"))
            state = fault.act(target, params, fault.prepare(target, params))
            deadline = time.time() + 20
            evidence = None
            while evidence is None and time.time() < deadline:
                evidence = fault.confirm(target, params, state)
            fault.heal(target, params, state)
            if evidence is None or "t_kill" not in evidence.data:
                raise RuntimeError(f"{mode}: the fault did not land: {evidence}")
            return evidence.data["t_kill"] - float(stamp.read_text())
        finally:
            proc.kill()
            proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--poll-interval", type=float, default=0.05)
    args = ap.parse_args()
    modes = (["inotify"] if inotify_available() else []) + ["poll"]
    medians = {}
    for mode in modes:
        lags = sorted(one(mode, args.poll_interval) * 1000 for _ in range(args.runs))
        p90 = lags[max(0, round(0.9 * len(lags)) - 1)]
        medians[mode] = statistics.median(lags)
        label = mode if mode == "inotify" else f"poll every {args.poll_interval * 1000:g} ms"
        print(f"{label}: first file created -> SIGKILL sent: median {medians[mode]:.2f} ms, p90 {p90:.2f} ms, "
              f"min {lags[0]:.2f} ms, max {lags[-1]:.2f} ms ({args.runs} saves)")
    if len(medians) == 2:
        print(f"polling / inotify (medians): {medians['poll'] / medians['inotify']:.1f}x")


if __name__ == "__main__":
    main()
