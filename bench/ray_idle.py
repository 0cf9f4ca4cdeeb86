"""What each node of the embedded Ray cluster costs while a drill waits (issue 60): the cluster
started with N raylets and drillbit's agent actor on each (handshake done, switch armed,
heartbeats going), then --seconds of nothing. Per node: the RSS of the raylet and of the agent
actor's worker, and their CPU per second; the controller's CPU per second (its heartbeats);
the machine's memory taken by the whole cluster; how long it took to come up.

    python bench/ray_idle.py [--nodes 4,8,16] [--seconds 20]

Each size is measured in a process of its own (one Ray driver per process). The largest size
this machine holds is where the cluster stops coming up, or its memory would pass what is
free: the bench says which.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil


def kind(proc: psutil.Process) -> str | None:
    try:
        cmd = " ".join(proc.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None
    if "raylet" in cmd and "--node_ip_address" in cmd or cmd.endswith("/raylet") or "/raylet " in cmd:
        return "raylet"
    if "AgentActor" in cmd or "ray::AgentActor" in cmd:
        return "agent"
    if "gcs_server" in cmd:
        return "gcs"
    if cmd.startswith("ray::") or "default_worker.py" in cmd:
        return "worker"
    if "dashboard" in cmd or "runtime_env" in cmd or "log_monitor" in cmd or "monitor.py" in cmd:
        return "ray-other"
    return None


def one(n: int, seconds: float) -> dict:
    from drillbit.core.proc import ProcRef
    from drillbit.transport.ray import RayNodes

    me = psutil.Process()
    before = psutil.virtual_memory().used
    with tempfile.TemporaryDirectory() as tmp:
        nodes = RayNodes(Path(tmp), f"idle{n}", address=None, nodes=n, cpus_per_node=1)
        t = time.monotonic()
        nodes.start(ProcRef.of(me))
        up = time.monotonic() - t
        try:
            time.sleep(3)
            procs = {p.pid: (p, kind(p)) for p in psutil.process_iter() if p.pid != me.pid}
            procs = {pid: (p, k) for pid, (p, k) in procs.items() if k is not None}
            cpu0 = {pid: sum(p.cpu_times()[:2]) for pid, (p, _) in procs.items() if p.is_running()}
            me0 = sum(me.cpu_times()[:2])
            time.sleep(seconds)
            me1 = sum(me.cpu_times()[:2])
            by: dict[str, list[tuple[float, float]]] = {}
            for pid, (p, k) in procs.items():
                try:
                    cpu = (sum(p.cpu_times()[:2]) - cpu0[pid]) / seconds
                    by.setdefault(k, []).append((p.memory_info().rss / 2**20, cpu))
                except (psutil.NoSuchProcess, KeyError):
                    continue
            used = psutil.virtual_memory().used - before
        finally:
            nodes.close()
    out = {"nodes": n, "up_s": up, "cluster_mib": used / 2**20, "controller_cpu_per_s": (me1 - me0) / seconds}
    for k, rows in by.items():
        out[k] = {"count": len(rows), "rss_mib_median": statistics.median(r for r, _ in rows),
                  "cpu_per_s_median": statistics.median(c for _, c in rows),
                  "rss_mib_sum": sum(r for r, _ in rows), "cpu_per_s_sum": sum(c for _, c in rows)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", nargs="?", default="all", choices=["all", "one"])
    ap.add_argument("--nodes", default="4,8,16")
    ap.add_argument("--seconds", type=float, default=20.0)
    args = ap.parse_args()
    if args.mode == "one":
        print(json.dumps(one(int(args.nodes), args.seconds)))
        return
    for n in [int(x) for x in args.nodes.split(",")]:
        free = psutil.virtual_memory().available / 2**20
        done = subprocess.run([sys.executable, __file__, "one", "--nodes", str(n), "--seconds", str(args.seconds)],
                              capture_output=True, text=True, timeout=900)
        lines = [x for x in done.stdout.splitlines() if x.startswith("{")]
        if done.returncode != 0 or not lines:
            print(f"{n} nodes: did not come up ({free:.0f} MiB free before): {done.stderr[-600:]}")
            break
        r = json.loads(lines[-1])
        print(json.dumps(r))
        per_node = r["cluster_mib"] / n
        if per_node * n * 2 > free:
            print(f"the next size doubles {r['cluster_mib']:.0f} MiB with {free:.0f} MiB free: stopping here")
            break


if __name__ == "__main__":
    main()
