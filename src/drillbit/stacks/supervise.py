"""What every stack launcher does: start the stack's processes with their output in log
files, stop them all on SIGTERM/SIGINT (SIGTERM, then SIGKILL after a grace), and exit with
the main process's code."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path


class Group:
    def __init__(self, env: dict[str, str] | None = None) -> None:
        self.env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", **(env or {}))
        self.children: list[subprocess.Popen] = []
        self.stopping = False

    def start(self, argv: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            child = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env={**self.env, **(env or {})})
        self.children.append(child)
        return child

    def on_signals(self) -> None:
        def stop(_signum: int, _frame: object) -> None:
            self.stopping = True
            for child in self.children:
                if child.poll() is None:
                    child.send_signal(signal.SIGTERM)
        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)

    def wait_any(self, main: list[subprocess.Popen]) -> int:
        """Wait until every process in ``main`` has ended, or a stop was asked (then stop them
        all); return the first non-zero exit code among them."""
        while not self.stopping and any(p.poll() is None for p in main):
            time.sleep(0.2)
        if self.stopping:
            self.stop_all()  # asked to stop: a grace, then SIGKILL — not the stack's own long shutdown
        codes = [p.wait() for p in main]
        return next((c for c in codes if c), 0)

    def stop_all(self, grace: float = 5.0) -> None:
        for child in self.children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        deadline = time.time() + grace
        for child in self.children:
            while child.poll() is None and time.time() < deadline:
                time.sleep(0.05)
            if child.poll() is None:
                child.kill()
                child.wait()


def wait_port(host: str, port: int, timeout: float = 30.0) -> bool:
    import socket
    deadline = time.time() + timeout
    while time.time() < deadline:
        with socket.socket() as s:
            s.settimeout(0.5)
            if s.connect_ex((host, port)) == 0:
                return True
        time.sleep(0.1)
    return False


def tool(name: str) -> str:
    """A stack's command (torchft_lighthouse, ft_launcher, dlrover-run): the one installed beside
    this interpreter, else the first on PATH."""
    return shutil.which(name, path=os.path.dirname(sys.executable)) or name
