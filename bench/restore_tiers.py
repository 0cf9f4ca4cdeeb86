"""Where a restore comes from, measured: the JAX job with Orbax's emergency (multi-tier)
checkpoints (drillbit.fixtures.stacks.jax_job: a local tier every 5 steps on the non-primary replica
slice, a persistent tier every 10 from the primary one) and with Orbax's P2P manager (a
local copy on every process, served to peers over TCP), and the DLRover job with flash
checkpoints (memory every 2 steps, disk every 10), under each tier drill, on the
one-process engine — inside a private network namespace where this machine allows one
(Orbax's P2P server and DLRover's master bind every interface).

  restore-tier-kill   rank 1 SIGKILLed, its host (and local tier, and the agent's memory) intact
  lose-local-tier     rank 1 killed and its local tier taken away (a replaced host)
  stall-nccl          rank 1 SIGSTOPped: JAX's coordination heartbeat must notice

For each drill and job profile, the median over --runs of: detect, restore, first step,
the restored step and tier, the best step any surviving tier held, and the verdict (the
cases that wait out their window, --slow-runs).
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
from collections import Counter
from dataclasses import replace

from drillbit.core import netns
from drillbit.runs.session import execute, resolve

# (drill, job, waits out its window or a stall's grace: run --slow-runs times)
CASES = [("restore-tier-kill", "jax-orbax", False), ("restore-tier-kill", "jax-orbax-persistent", False),
         ("lose-local-tier", "jax-orbax", False), ("restore-tier-kill", "jax-orbax-p2p", False),
         ("lose-local-tier", "jax-orbax-p2p", False),
         ("lose-local-tier", "jax-orbax-p2p-unreachable", True),
         ("stall-nccl", "jax-orbax", True), ("stall-nccl", "jax-orbax-slowheartbeat", True),
         ("restore-tier-kill", "dlrover-flash", False), ("restore-tier-kill", "dlrover-flash-diskonly", False)]
FIELDS = ("time_to_detect", "time_to_restore", "time_to_first_step", "restored_step", "best_available_step")
HEAD = ("detect", "restore", "first step", "restored", "best left")


def fmt(v) -> str:
    return "—" if v is None else f"{v:.1f}" if isinstance(v, float) else str(v)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--slow-runs", type=int, default=1, help="runs of the cases that wait out a window (minutes)")
    p.add_argument("--only", default=None, help="comma-separated job profiles to run (default: all)")
    args = p.parse_args()
    if netns.available():
        netns.enter()
    reports = tempfile.mkdtemp(prefix="drillbit-tiers-")
    print(f"{'drill':<19}{'job':<27}" + "".join(f"{h:>12}" for h in HEAD)
          + "  tier        verdict")
    for drill, job, slow in CASES:
        if args.only and job not in args.only.split(","):
            continue
        rows, tiers, verdicts = [], Counter(), Counter()
        for _ in range(args.slow_runs if slow else args.runs):
            r = resolve(drill, job=job, cluster="local-process")
            if drill == "stall-nccl":  # the stall's recovery includes torchrun's 30 s SIGTERM grace
                r = replace(r, spec=r.spec.model_copy(update={
                    "observe": r.spec.observe.model_copy(update={"window": 150.0}),
                    "slo": r.spec.slo.model_copy(update={"first_step_within": 120.0})}))
            payload, _ = execute(r, reports_dir=reports)
            m = payload["measurements"]
            rows.append(m)
            tiers[m.get("restored_from") or "—"] += 1
            verdicts[payload["verdict"]] += 1
        med = {f: statistics.median(v) if (v := [m[f] for m in rows if m.get(f) is not None]) else None for f in FIELDS}
        print(f"{drill:<19}{job:<27}" + "".join(f"{fmt(med[f]):>12}" for f in FIELDS)
              + f"  {'/'.join(tiers):<11} {'/'.join(f'{v}x{n}' for v, n in verdicts.items())}", flush=True)
    print(f"(median of {args.runs}, slow cases {args.slow_runs}; reports in {reports})")


if __name__ == "__main__":
    main()
