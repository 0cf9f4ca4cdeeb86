"""A detector's reach, measured (issue 58): the curves docs/measured.md and the README show,
each made by `drill sweep` as a user runs it, from a fresh project folder holding the
repository's drill.yaml (the graded.md/.html/.svg/.png land in its reports/).

1. fail-slow: slow-rank over slowdown, every repeat a segment of one launch, for the
   reference job's fleet-median detector and NVRx's rule on the same job (drillbit's own
   reading of the per-rank step times comes with each);
2. segmenting against separate launches: one level, the same repeats, both ways;
3. the hang-length axis: stall-nccl over its pause, the reference job's progress watchdog
   and NVRx's rank heartbeats (each with a restart budget for the sweep's restarts);
4. the network (root: `local-netns`, 2 nodes that are network namespaces, 2 ranks each):
   lossy-link over loss_pct and slow-link (bench/drills/slow-link.yaml, copied into the
   project's drills/) over rate_mbit, node 1's link at fault, for the reference job's
   detector (which must blame no rank: the link is at fault) and its fleet tax.

    python bench/reach_curves.py [--repeats 5] [--only slow|segments|hang|network] [--out DIR]

Prints each sweep's table and where its folder is; a summary.json beside them says which
command made which folder, and for the network sweeps the throughput lost by mean step time
(`mean_tax`). On 2 cores the whole run takes about 85 minutes (the network sweeps 25 of them).
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


SLOW_LINK_LEVELS = "rate_mbit=0.1,0.2,0.3,0.5,1,10"  # the reference job: no effect from 1 up, steps several times longer at 0.1


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
        "network-lossy": ["sweep", "lossy-link", "--param", "loss_pct=0.5,1,2,5,10,20", "--repeats", r,
                          "--one-launch", "--window", "15", "--gap", "8", "--cluster", "local-netns", "--json"],
        "network-slow": ["sweep", "slow-link", "--param", SLOW_LINK_LEVELS, "--repeats", r,
                         "--one-launch", "--window", "15", "--gap", "8", "--cluster", "local-netns", "--json"],
    }


def mean_tax(run_dir: str | Path, param: str) -> dict[float, list[float]]:
    """A link sweep's throughput lost, by level: rank 0's steps a second while each fault was
    on (inject to heal) against the quiet gap before it (from 1 s after the last heal), less
    one. The table's fleet tax is the median step's; a lossy link stretches only the steps that
    lose a packet (a retransmit timeout, 200 ms at least), which a median step does not see
    until half of them do."""
    events = [json.loads(line) for line in (Path(run_dir) / "history.jsonl").read_text().splitlines()]
    steps = [e["t"] for e in events if e["kind"] == "step" and e.get("rank") == 0]
    injects = [e for e in events if e["kind"] == "fault.inject"]
    heals = [e["t"] for e in events if e["kind"] == "fault.heal"]
    out: dict[float, list[float]] = {}
    last = min(steps, default=0.0)
    for inject, heal in zip(injects, heals, strict=False):
        t0, t1 = inject["t"], heal
        before = max(last + 1.0, t0 - 7.0)
        rate = sum(before <= t < t0 for t in steps) / (t0 - before)
        during = sum(t0 <= t < t1 for t in steps) / (t1 - t0)
        if rate > 0 and during > 0:
            out.setdefault(float(inject["data"]["params"][param]), []).append(rate / during - 1.0)
        last = heal
    return dict(sorted(out.items()))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--only", choices=["slow", "segments", "hang", "network"])
    p.add_argument("--out", help="the project folder (default: a fresh temporary one)")
    args = p.parse_args(argv)
    project = Path(args.out or tempfile.mkdtemp(prefix="drillbit-reach-"))
    project.mkdir(parents=True, exist_ok=True)
    config = (ROOT / "drill.yaml").read_text()
    (project / "drill.yaml").write_text(config.replace("\njobs:\n", "\njobs:\n" + NVRX_LONGRUN, 1))
    (project / "drills").mkdir(exist_ok=True)
    shutil.copy(ROOT / "bench" / "drills" / "slow-link.yaml", project / "drills" / "slow-link.yaml")
    env = {**os.environ, "DRILLBIT_REFERENCE_NPROC": "4"}
    env.pop("DRILLBIT_REFERENCE_SLICE_MS", None)  # the reference job's own 1 ms compute slice
    done = {}
    for name, argv_ in sweeps(args.repeats).items():
        if args.only and not name.startswith(args.only):
            continue
        if name.startswith("network") and os.geteuid() != 0:
            print(f"{name}: skipped (local-netns makes network namespaces: root)", file=sys.stderr)
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
        if name.startswith("network") and report.get("run_dir"):
            param = argv_[argv_.index("--param") + 1].split("=")[0]
            taxes = mean_tax(report["run_dir"], param)
            done[name]["mean_tax"] = {str(k): v for k, v in taxes.items()}
            print("Throughput lost (rank 0's steps a second, fault on against the gap before; median, range):\n")
            for level, v in taxes.items():
                v = sorted(v)
                print(f"- {param} {level:g}: {v[len(v) // 2]:.0%} ({v[0]:.0%} to {v[-1]:.0%}, {len(v)} repeats)")
            print()
    (project / "summary.json").write_text(json.dumps(done, indent=2))
    print(f"project folder: {project}")
    return 0 if all(d["exit"] == 0 for d in done.values()) else 1


if __name__ == "__main__":
    if shutil.which("drill") is None and not Path(DRILL).exists():
        raise SystemExit("install drillbit first (pip install -e '.[reference,stacks]')")
    raise SystemExit(main())
