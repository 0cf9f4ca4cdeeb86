"""A detector's reach, measured (issue 58): the curves docs/measured.md and the README show,
each made by `drill sweep` as a user runs it, from a fresh project folder holding the
repository's drill.yaml (the graded.md/.html/.svg/.png land in its reports/).

1. fail-slow: slow-rank over slowdown, every repeat a segment of one launch, for the
   reference job's fleet-median detector and NVRx's rule on the same job (drillbit's own
   reading of the per-rank step times comes with each);
2. segmenting against separate launches: one level, the same repeats, both ways;
3. the hang-length axis: stall-nccl over its pause, the reference job's progress watchdog
   and NVRx's rank heartbeats (each with a restart budget for the sweep's restarts).

    python bench/reach_curves.py [--repeats 5] [--only slow|segments|hang] [--out DIR]

Prints each sweep's table and where its folder is; a summary.json beside them says which
command made which folder. On 2 cores the whole run takes about an hour.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DRILL = str(Path(sys.executable).with_name("drill"))

NVRX_LONGRUN = """
  nvrx-longrun:
    description: the NVRx job (ft_launcher, 10 s rank heartbeat timeout) with a restart budget for a sweep
    presets: [nvrx, torchrun]
    signals:
      - {kind: step, pattern: '^step=(?P<n>\\d+) rank=(?P<rank>\\d+) ', ints: [n, rank]}
      - {kind: ckpt.save, pattern: '^saved step=(?P<step>\\d+) path=(?P<path>\\S+)', ints: [step]}
      - {kind: restore, pattern: '^restored step=(?P<step>\\d+) path=(?P<path>\\S+)', ints: [step]}
    launch:
      command: ["{python}", "-m", "drillbit.fixtures.stacks.nvrx_job", "launch", "--run-dir", "{run_dir}/job",
                "--max-restarts", "100"]
    ranks: {cmdline: '-m drillbit\\.fixtures\\.stacks\\.nvrx_job train\\b', exclude_cmdline: 'ft_launcher'}
    launcher: 'ft_launcher|drillbit\\.fixtures\\.stacks\\.nvrx_job launch'
    logs: ["{run_dir}/job/launcher.log"]
    checkpoint: {dir: "{run_dir}/job/ckpt", layout: glob, glob: "step_*.pt", step_regex: 'step_(\\d+)\\.pt'}
    timeouts: {collective: 1800, watchdog: 10}
"""


def sweeps(repeats: int) -> dict[str, list[str]]:
    r = str(repeats)
    return {
        "slow": ["sweep", "slow-rank", "--param", "slowdown=1%,2%,3%,5%,10%,20%,50%", "--repeats", r, "--one-launch",
                 "--window", "15", "--gap", "8", "--cluster", "local-process", "--job", "reference",
                 "--job", "reference-nvrx", "--json"],
        "segments-one": ["sweep", "slow-rank", "--param", "slowdown=5%", "--repeats", r, "--one-launch",
                         "--window", "15", "--gap", "8", "--cluster", "local-process", "--json"],
        "segments-each": ["sweep", "slow-rank", "--param", "slowdown=5%", "--repeats", r, "--window", "15",
                          "--cluster", "local-process", "--json"],
        "hang": ["sweep", "stall-nccl", "--param", "duration=2s,5s,15s,30s,60s,120s", "--repeats",
                 str(max(1, repeats // 2)), "--one-launch", "--gap", "10", "--cluster", "local-process",
                 "--job", "reference-longrun", "--job", "nvrx-longrun", "--json"],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--only", choices=["slow", "segments", "hang"])
    p.add_argument("--out", help="the project folder (default: a fresh temporary one)")
    args = p.parse_args(argv)
    project = Path(args.out or tempfile.mkdtemp(prefix="drillbit-reach-"))
    project.mkdir(parents=True, exist_ok=True)
    config = (ROOT / "drill.yaml").read_text()
    (project / "drill.yaml").write_text(config.replace("\njobs:\n", "\njobs:\n" + NVRX_LONGRUN, 1))
    env = {**os.environ, "DRILLBIT_REFERENCE_NPROC": "4"}
    env.pop("DRILLBIT_REFERENCE_SLICE_MS", None)  # the reference job's own 1 ms compute slice
    done = {}
    for name, argv_ in sweeps(args.repeats).items():
        if args.only and not name.startswith(args.only):
            continue
        t = time.monotonic()
        run = subprocess.run([DRILL, *argv_], cwd=project, env=env, capture_output=True, text=True)
        wall = time.monotonic() - t
        try:
            report = json.loads(run.stdout)
        except json.JSONDecodeError:
            print(f"{name}: exit {run.returncode}\n{run.stderr[-2000:]}", file=sys.stderr)
            continue
        done[name] = {"command": "drill " + " ".join(argv_), "exit": run.returncode, "wall_s": round(wall, 1),
                      "folder": report.get("folder")}
        print(f"## {name}: `drill {' '.join(argv_)}` (exit {run.returncode}, {wall / 60:.1f} min)\n")
        print((Path(report["folder"]) / "graded.md").read_text())
    (project / "summary.json").write_text(json.dumps(done, indent=2))
    print(f"project folder: {project}")
    return 0 if all(d["exit"] == 0 for d in done.values()) else 1


if __name__ == "__main__":
    if shutil.which("drill") is None and not Path(DRILL).exists():
        raise SystemExit("install drillbit first (pip install -e '.[reference,stacks]')")
    raise SystemExit(main())
