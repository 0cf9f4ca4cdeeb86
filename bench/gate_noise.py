"""Does the gate cry wolf? Three measurements on the reference job (local-process cluster):

1. False alarms: kill-rank run N times on an unchanged checkout; each run is judged against
   the others as its baseline, under the old one-sample rule (the previous passing run,
   `max_regression` allowance) and under the distribution rule (judging/checks/baseline.py: the
   other runs' median, allowance, 3 x MAD, a floor of three step times). Prints how many of
   the N would have failed a gate under each rule, for time_to_detect and time_to_first_step.
2. The pre-deploy gate run twice in a row on an unchanged checkout (--confirm 2): both verdicts.
3. A real regression: stall-nccl with the reference job's watchdog deadline doubled (10 s ->
   20 s), gated (--confirm 2) against a baseline of normal stall-nccl runs: confirmed or not.

    python bench/gate_noise.py [--repeats 20] [--baseline-runs 3] [--skip-gate]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from drillbit.judging.checks.baseline import Baseline
from drillbit.judging.checks.recovery import Measurements

GATED = ("time_to_detect", "time_to_first_step")
ALLOWANCE = 0.5  # the pre-deploy suite's max_regression


def drill(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "drillbit.entry.cli", *args], capture_output=True, text=True)


def false_alarms(runs: list[dict]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for name in GATED:
        values = [r["measurements"].get(name) for r in runs]
        old = new = 0
        for i, v in enumerate(values):
            if v is None:
                continue
            prev = next((values[j] for j in range(i - 1, -1, -1) if values[j] is not None), None)
            if prev is not None and prev > 0 and (v - prev) / prev > ALLOWANCE:
                old += 1
            others = [Measurements.model_validate(r["measurements"])
                      for j, r in enumerate(runs) if j != i]
            verdict = Baseline(runs=list(range(len(others))), samples=others).judge(name, v, ALLOWANCE)
            new += int(bool(verdict and verdict.regressed))
        out[name] = {"judged": sum(v is not None for v in values), "old_rule": old, "new_rule": new,
                     "median": statistics.median(v for v in values if v is not None),
                     "min": min(v for v in values if v is not None), "max": max(v for v in values if v is not None)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--baseline-runs", type=int, default=3)
    ap.add_argument("--skip-gate", action="store_true")
    args = ap.parse_args()
    here = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory() as tmp:
        reports = Path(tmp) / "noise"
        proc = drill("run", "kill-rank", "--cluster", "local-process", "--repeat", str(args.repeats),
                     "--reports", str(reports), "--json")
        agg = json.loads(proc.stdout)
        runs = [json.loads((Path(d) / "result.json").read_text()) for d in agg["run_dirs"]]
        print(f"kill-rank x{args.repeats} on local-process: {agg['passes']} passed")
        for name, s in agg["stats"].items():
            if name in GATED:
                print(f"  {name}: median {s['median']:.2f} s, p90 {s['p90']:.2f} s, min {s['min']:.2f} s, "
                      f"max {s['max']:.2f} s")
        for name, f in false_alarms(runs).items():
            print(f"  false alarms on {name} over {f['judged']} judged runs: one-sample rule {f['old_rule']}, "
                  f"distribution rule {f['new_rule']}")
        if args.skip_gate:
            return
        gate_reports = Path(tmp) / "gate"
        for i in (1, 2):
            proc = drill("gate", "--suite", "pre-deploy", "--cluster", "local-process", "--confirm", "2",
                         "--reports", str(gate_reports), "--json")
            verdict = json.loads(proc.stdout)["verdict"] if proc.stdout.strip().startswith("{") else proc.stderr[-300:]
            print(f"pre-deploy gate, run {i} on an unchanged checkout: exit {proc.returncode}, {verdict}")
        # a real regression: the same job name, its watchdog deadline doubled
        reg = Path(tmp) / "regress"
        # stall-nccl as the catalogue has it, less the fleet projection (a doubled detection time
        # may also breach that floor outright: then it is a failure, never a suspicion)
        spec = Path(tmp) / "stall-nccl.yaml"
        spec.write_text("".join(line for line in (here / "drills" / "stall-nccl.yaml").read_text().splitlines(True)
                                if not line.lstrip().startswith("project:")))
        for _ in range(args.baseline_runs):
            drill("run", str(spec), "--cluster", "local-process", "--reports", str(reg))
        slow = Path(tmp) / "slow.yaml"
        slow.write_text(json.dumps({"jobs": {"reference": {
            "presets": ["reference", "torchrun"],
            "launch": {"command": ["{python}", "-m", "drillbit.fixtures.reference.launch", "--run-dir", "{run_dir}/job",
                                   "--nnodes", "{nnodes}", "--node-rank", "{node_rank}", "--node-name", "{node}",
                                   "--rdzv-endpoint", "{head}:{port}", "--watchdog-deadline", "20"],
                       "per_node": True},
            "ranks": {"cmdline": "-m drillbit\\.fixtures\\.reference\\.train\\b", "exclude_cmdline": "torch\\.distributed\\.run"},
            "launcher": "torch\\.distributed\\.run|drillbit\\.fixtures\\.reference\\.launch",
            "logs": ["{run_dir}/job/events.log", "{run_dir}/job/launcher.log"],
            "checkpoint": {"dir": "{run_dir}/job/ckpt", "layout": "reference"}}}}))
        suite = Path(tmp) / "stall.yaml"
        suite.write_text(f"name: stall-gate\nmax_regression: 0.5\ndrills: [{spec}]\n")
        proc = drill("gate", "--suite", str(suite), "--cluster", "local-process", "--confirm", "2",
                     "--config", str(slow), "--reports", str(reg), "--json")
        out = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else {}
        result = (out.get("drills") or [{}])[0]
        print(f"stall-nccl with the watchdog deadline doubled, gated with --confirm 2 against {args.baseline_runs} "
              f"normal runs: exit {proc.returncode}; {result.get('regression_check') or result.get('reasons')}")


if __name__ == "__main__":
    main()
