"""The Slurm commands drillbit runs, in one place: ``scontrol``, ``sbatch``, ``scancel`` and
``srun``, each with the cluster's configuration (``SLURM_CONF``) when the cluster entry
names one. Every call has a timeout; a failing command raises :class:`SlurmError` with
what Slurm printed.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import psutil

from drillbit.core.errors import DrillError

# Job states in which the job holds no allocation and never will again
FINISHED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE",
            "OUT_OF_MEMORY", "SPECIAL_EXIT", "REVOKED"}


class SlurmError(DrillError):
    """A Slurm command failed."""


def parse_fields(text: str) -> dict[str, str]:
    """One record of ``scontrol show … -o``: ``Key=Value`` pairs separated by spaces (a value
    runs until the next `` Key=``, so a Reason with spaces stays whole)."""
    out: dict[str, str] = {}
    key: str | None = None
    for part in text.strip().split(" "):
        head, eq, value = part.partition("=")
        if eq and head and head.replace("/", "").replace(":", "").isalnum() and head[0].isupper():
            key = head
            out[key] = value
        elif key is not None:
            out[key] += " " + part
    return out


@dataclass(frozen=True)
class JobInfo:
    job_id: str
    state: str
    reason: str
    restarts: int
    nodes: tuple[str, ...]
    batch_host: str
    exit_code: int | None
    eligible: str
    requeue: bool

    @property
    def finished(self) -> bool:
        return self.state in FINISHED


class Slurm:
    def __init__(self, conf: str | None = None, partition: str | None = None, via: list[str] | tuple[str, ...] = ()) -> None:
        self.conf = conf
        self.partition = partition
        self.via = list(via)  # a prefix every command runs through (a namespace's ``ip netns exec``)
        self.env = dict(os.environ)
        if conf:
            self.env["SLURM_CONF"] = conf

    def binary(self, name: str) -> str:
        found = shutil.which(name) or (str(Path("/usr/sbin", name)) if Path("/usr/sbin", name).exists() else None)
        if found is None:
            raise SlurmError(f"{name} is not installed on this machine (the controller runs Slurm's commands; "
                             "Debian: apt-get install slurm-client)")
        return found

    def run(self, *argv: str, timeout: float = 30.0, check: bool = True) -> subprocess.CompletedProcess:
        cmd = [*self.via, self.binary(argv[0]), *argv[1:]]
        try:
            done = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise SlurmError(f"{' '.join(argv)}: no answer in {timeout:g} s") from None
        if check and done.returncode != 0:
            raise SlurmError(f"{' '.join(argv)}: {(done.stderr or done.stdout).strip() or f'exit {done.returncode}'}")
        return done

    def reachable(self) -> str | None:
        """None when slurmctld answers; else why not."""
        try:
            done = self.run("scontrol", "ping", check=False, timeout=15)
        except SlurmError as exc:
            return str(exc)
        return None if done.returncode == 0 and "UP" in done.stdout else (done.stdout + done.stderr).strip()

    def config(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for line in self.run("scontrol", "show", "config").stdout.splitlines():
            key, sep, value = line.partition("=")
            if sep:
                out[key.strip()] = value.strip()
        return out

    def hostnames(self, expr: str) -> list[str]:
        if not expr or expr in ("(null)", "None"):
            return []
        return self.run("scontrol", "show", "hostnames", expr).stdout.split()

    def job(self, job_id: str) -> JobInfo | None:
        done = self.run("scontrol", "show", "job", "-o", job_id, check=False)
        if done.returncode != 0:
            if "Invalid job id" in done.stderr:
                return None
            raise SlurmError(f"scontrol show job {job_id}: {done.stderr.strip()}")
        f = parse_fields(done.stdout.splitlines()[0] if done.stdout else "")
        code = f.get("ExitCode", "")
        exit_code: int | None = None
        if ":" in code:
            status, sig = code.split(":", 1)
            exit_code = 128 + int(sig) if sig.isdigit() and int(sig) else int(status) if status.isdigit() else None
        return JobInfo(job_id=job_id, state=f.get("JobState", "UNKNOWN"), reason=f.get("Reason", "None"),
                       restarts=int(f.get("Restarts", "0") or 0), nodes=tuple(self.hostnames(f.get("NodeList", ""))),
                       batch_host=f.get("BatchHost", ""), exit_code=exit_code, eligible=f.get("EligibleTime", ""),
                       requeue=f.get("Requeue", "0") == "1")

    def nodes(self) -> dict[str, dict[str, str]]:
        out = {}
        for line in self.run("scontrol", "show", "node", "-o").stdout.splitlines():
            f = parse_fields(line)
            if "NodeName" in f:
                out[f["NodeName"]] = f
        return out

    def node_state(self, node: str) -> str:
        return self.nodes().get(node, {}).get("State", "UNKNOWN")

    def update_node(self, node: str, state: str, reason: str | None = None) -> None:
        args = ["scontrol", "update", f"nodename={node}", f"state={state}"]
        if reason:
            args.append(f"reason={reason}")
        self.run(*args)

    def sbatch(self, args: list[str]) -> str:
        done = self.run("sbatch", "--parsable", *(["--partition", self.partition] if self.partition else []), *args)
        return done.stdout.strip().split(";")[0]

    def scancel(self, job_id: str, signal: str | None = None, full: bool = False) -> None:
        self.run("scancel", *(["--signal", signal] if signal else []), *(["--full"] if full else []), job_id,
                 check=False)

    def srun_argv(self, job_id: str, node: str, argv: list[str]) -> list[str]:
        """A process inside the job's allocation on one node, beside the job's own steps."""
        return [*self.via, self.binary("srun"), "--overlap", "--jobid", job_id, "-w", node, "-N", "1", "-n", "1", "-u",
                "--kill-on-bad-exit=0", *argv]


def job_processes(job_id: str, node: str | None = None, exclude_step: str | None = None) -> list[psutil.Process]:
    """This machine's processes of Slurm job ``job_id`` (on ``node`` where several slurmds
    share the machine), by the job's variables in each process's environment; the processes
    of step ``exclude_step`` (drillbit's own agent) are left out."""
    out = []
    for proc in psutil.process_iter(["pid"]):
        try:
            env = proc.environ()
        except (psutil.NoSuchProcess, psutil.AccessDenied, OSError):
            continue
        if env.get("SLURM_JOB_ID") != job_id:
            continue
        if node is not None and env.get("SLURMD_NODENAME", node) != node:
            continue
        if exclude_step is not None and env.get("SLURM_STEP_ID") == exclude_step:
            continue
        out.append(proc)
    return out
