"""Wall time of each drill, split into job recovery time and harness time.

Runs each drill --runs times on each --cluster (default: the one-process engine and the
embedded 2-node Ray cluster, side by side) with the reference job, then splits every
run's wall time from its history:
  startup    launch -> steady state (the job's own start-up: torch import, rendezvous)
  pre-fault  steady -> fault confirmed (waiting for the trigger step)
  recovery   fault confirmed -> first step after recovery (the job's recovery path)
  after      first step -> end of observation (steps counted after recovery)
  harness    everything else: preflight (on Ray: starting the cluster and the agents),
             inject+confirm, heal, teardown (on Ray: stopping the cluster), checks
Prints per-run rows, the medians, and the Ray/process ratios of total and harness time.
"""
from __future__ import annotations

import argparse
import statistics
import tempfile

from drillbit.runs.session import execute, resolve

PARTS = ("total", "startup", "pre-fault", "recovery", "after", "harness")


def split(history) -> dict[str, float]:
    first = {}
    for e in history:
        first.setdefault(e.kind, e.t)
    start, end = first["drill.start"], history.last("drill.end").t
    t_fault = first["fault.confirmed"]
    steady, launch, obs_end = first["steady"], first["job.launch"], first["observe.end"]
    steps_after = [e.t for e in history.of("step") if e.t > t_fault]
    restore = history.first("restore", after=t_fault) or history.first("restart", after=t_fault)
    recovered = [t for t in steps_after if restore is None or t >= restore.t]
    t_first = recovered[0] if recovered else obs_end
    parts = {"total": end - start, "startup": steady - launch, "pre-fault": t_fault - steady,
             "recovery": t_first - t_fault, "after": obs_end - t_first}
    parts["harness"] = parts["total"] - sum(parts[k] for k in PARTS[1:5])
    return parts


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--cluster", action="append", help="cluster(s) to compare (default: local-process, local)")
    p.add_argument("drills", nargs="*", default=["kill-rank", "stall-nccl"])
    args = p.parse_args()
    clusters = args.cluster or ["local-process", "local"]
    reports = tempfile.mkdtemp(prefix="drillbit-bench-")
    print(f"{'drill':<12}{'cluster':<15}{'run':>4}" + "".join(f"{k:>11}" for k in PARTS) + "  verdict")
    for drill in args.drills:
        meds = {}
        for cluster in clusters:
            rows = []
            for i in range(args.runs):
                payload, outcome = execute(resolve(drill, cluster=cluster), reports_dir=reports)
                rows.append(split(outcome.history))
                print(f"{drill:<12}{cluster:<15}{i + 1:>4}" + "".join(f"{rows[-1][k]:>10.2f}s" for k in PARTS)
                      + f"  {payload['verdict']}")
            med = meds[cluster] = {k: statistics.median(r[k] for r in rows) for k in PARTS}
            print(f"{drill:<12}{cluster:<15}{'med':>4}" + "".join(f"{med[k]:>10.2f}s" for k in PARTS)
                  + f"  harness share {med['harness'] / med['total']:.1%}")
        if len(clusters) == 2:
            a, b = (meds[c] for c in clusters)
            print(f"{drill:<12}{clusters[1]} / {clusters[0]}: total {b['total'] / a['total']:.2f}x, "
                  f"harness {b['harness'] / a['harness']:.1f}x, recovery {b['recovery'] / a['recovery']:.2f}x")


if __name__ == "__main__":
    main()
