"""Slurm's requeue path, measured: kill-rank, node-down and node-crash on the reference job
under sbatch (reference-slurm), on a local Slurm (drillbit.core.slurm.local: munged, slurmctld,
three slurmd on 127.0.0.1) with Slurm's defaults and with the requeue hold removed.

  defaults  AuthInfo cred_expire=120 (the requeue hold), sched_interval=60
  tuned     cred_expire=5, sched_interval=1

For each drill and setting, the median over --runs of: detect, requeue, running again
(Slurm's rerun, or torchrun's in-job restart for kill-rank), first step after recovery,
lost steps; and the verdicts against the catalogue drill's SLOs. Under the defaults the
observation window is stretched (--window) so the held rerun is still measured.
Needs Debian's slurm-wlm and munge, and root (SlurmUser=root).
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
from dataclasses import replace
from pathlib import Path

from drillbit.runs.session import execute, resolve
from drillbit.core.slurm.local import LocalSlurm

SETTINGS = {"defaults": {"requeue_hold": 120, "sched_interval": 60}, "tuned": {"requeue_hold": 5, "sched_interval": 1}}
FIELDS = ("time_to_detect", "time_to_requeue", "time_to_restart", "time_to_first_step", "lost_steps")


def fmt(v) -> str:
    return "—" if v is None else f"{v:.1f}" if isinstance(v, float) else str(v)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--window", type=float, default=240.0, help="observation window under Slurm's defaults")
    p.add_argument("--setting", action="append", choices=list(SETTINGS))
    p.add_argument("drills", nargs="*", default=["kill-rank", "node-down", "node-crash"])
    args = p.parse_args()
    print(f"{'drill':<12}{'setting':<10}{'run':>4}" + "".join(f"{f.replace('time_to_', ''):>12}" for f in FIELDS)
          + "  rerun on  verdict")
    summary = []
    for setting in args.setting or list(SETTINGS):
        with tempfile.TemporaryDirectory(prefix="drillbit-slurm-bench-") as tmp:
            cluster = LocalSlurm(Path(tmp) / "slurm", **SETTINGS[setting]).start()
            try:
                config = Path(tmp) / "drill.yaml"
                config.write_text(f"clusters:\n  slurm:\n    engine: slurm\n    slurm_conf: {cluster.conf}\n")
                for drill in args.drills:
                    rows, verdicts = [], []
                    for i in range(args.runs):
                        r = resolve(drill, cluster="slurm", job="reference-slurm", config_path=str(config))
                        if setting == "defaults":
                            spec = r.spec
                            r = replace(r, spec=spec.model_copy(update={
                                "observe": spec.observe.model_copy(update={"window": args.window}),
                                "abort": spec.abort.model_copy(update={"max_duration": args.window + 180})}))
                        payload, _ = execute(r, reports_dir=str(Path(tmp) / "reports"))
                        m = payload["measurements"]
                        rows.append(m)
                        verdicts.append(payload["verdict"])
                        print(f"{drill:<12}{setting:<10}{i + 1:>4}" + "".join(f"{fmt(m.get(f)):>12}" for f in FIELDS)
                              + f"  {','.join(m.get('rerun_nodes') or ['—']):<9} {payload['verdict']}", flush=True)
                    med = {f: statistics.median(v) if (v := [m[f] for m in rows if m.get(f) is not None]) else None
                           for f in FIELDS}
                    summary.append((drill, setting, med, "/".join(sorted(set(verdicts)))))
            finally:
                cluster.stop()
    print("\nmedians")
    print(f"{'drill':<12}{'setting':<10}" + "".join(f"{f.replace('time_to_', ''):>12}" for f in FIELDS) + "  verdict")
    for drill, setting, med, verdict in summary:
        print(f"{drill:<12}{setting:<10}" + "".join(f"{fmt(med[f]):>12}" for f in FIELDS) + f"  {verdict}")


if __name__ == "__main__":
    main()
