"""The local executor: one NodeAgent in the controller's process, the job as a subprocess.

The launched job gets a session (process group) of its own, so teardown reaches every
process it started, and the agent's guardian can stop it if the controller dies.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil

from drillbit.agent import NodeAgent, stop_process_group
from drillbit.proc import ProcRef
from drillbit.spec.config import JobProfile


def expand(text: str, run_dir: Path) -> str:
    return text.replace("{run_dir}", str(run_dir)).replace("{python}", sys.executable)


class LaunchedJob:
    def __init__(self, popen: subprocess.Popen, ref: ProcRef, stop_timeout: float) -> None:
        self.popen = popen
        self.ref = ref
        self.pgid = popen.pid
        self.stop_timeout = stop_timeout

    @property
    def pid(self) -> int:
        return self.popen.pid

    def exit_code(self) -> int | None:
        return self.popen.poll()

    def stop(self) -> int | None:
        if self.popen.poll() is None:
            stop_process_group(self.pgid, self.stop_timeout)
        else:
            stop_process_group(self.pgid, 2.0)  # stragglers left in the group
        try:
            return self.popen.wait(timeout=self.stop_timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            return self.popen.wait()


class LocalExecutor:
    engine = "local"

    def __init__(self, run_dir: Path, node: str = "local") -> None:
        self.run_dir = run_dir
        self.agents = {node: NodeAgent(node, run_dir / f"agent-{node}.json")}

    def launch(self, profile: JobProfile) -> LaunchedJob:
        assert profile.launch is not None
        spec = profile.launch
        argv = [expand(a, self.run_dir) for a in spec.command]
        env = dict(os.environ, **{k: expand(v, self.run_dir) for k, v in spec.env.items()})
        out = open(self.run_dir / "job.out", "ab")
        popen = subprocess.Popen(argv, cwd=expand(spec.cwd, self.run_dir) if spec.cwd else None, env=env,
                                 stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 start_new_session=True)
        out.close()
        ref = ProcRef.of(psutil.Process(popen.pid))
        job = LaunchedJob(popen, ref, spec.stop_timeout)
        for agent in self.agents.values():
            agent.register_job(ref, job.pgid)
        return job

    def log_paths(self, profile: JobProfile) -> list[Path]:
        return [Path(expand(p, self.run_dir)) for p in profile.logs]
