"""A real Prometheus, Pushgateway and node-exporter (Debian's ``prometheus``,
``prometheus-pushgateway``, ``prometheus-node-exporter``) on 127.0.0.1, each on a free port
with a configuration of its own in a test's folder; every process is started and ended by
pid. node-exporter runs only its textfile collector, on the folder the drills write
``metrics.prom`` into; Prometheus scrapes it and the Pushgateway every second."""
from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

BINARIES = {"prometheus": "prometheus", "pushgateway": "prometheus-pushgateway",
            "node_exporter": "prometheus-node-exporter", "promtool": "promtool"}


def missing() -> list[str]:
    return [b for b in BINARIES.values() if shutil.which(b) is None]


def free_ports(count: int) -> int:
    """The first of ``count`` consecutive ports free on 127.0.0.1 (a job serves /metrics on
    base + rank)."""
    for _ in range(50):
        base = _free_port()
        socks = []
        try:
            for i in range(count):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", base + i))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError(f"no {count} consecutive free ports on 127.0.0.1")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_http(url: str, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited {proc.returncode} before {url} answered")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer in {timeout:g} s")


class PromStack:
    def __init__(self, folder: Path, textfiles: Path, targets: dict[str, list[int]] | None = None) -> None:
        """``targets``: more scrape jobs, by name, of 127.0.0.1 ports (a job's own /metrics)."""
        self.folder = folder
        self.textfiles = textfiles
        self.targets = targets or {}
        self.procs: list[subprocess.Popen] = []
        taken = {port for ports in self.targets.values() for port in ports}
        self.ports: dict[str, int] = {}
        for name in ("prometheus", "pushgateway", "node_exporter"):
            port = _free_port()
            while port in taken:  # never a port the job will serve its /metrics on
                port = _free_port()
            self.ports[name] = port
            taken.add(port)

    @property
    def pushgateway(self) -> str:
        return f"http://127.0.0.1:{self.ports['pushgateway']}"

    @property
    def prometheus(self) -> str:
        return f"http://127.0.0.1:{self.ports['prometheus']}"

    def _start(self, argv: list[str], log: str, ready: str) -> None:
        with open(self.folder / log, "w") as out:  # the server keeps its own copy
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=self.folder)
        self.procs.append(proc)
        _wait_http(ready, proc)

    def __enter__(self) -> "PromStack":
        self.folder.mkdir(parents=True, exist_ok=True)
        self.textfiles.mkdir(parents=True, exist_ok=True)
        p = self.ports
        try:
            self._start([BINARIES["node_exporter"], f"--web.listen-address=127.0.0.1:{p['node_exporter']}",
                         "--collector.disable-defaults", "--collector.textfile",
                         f"--collector.textfile.directory={self.textfiles}"],
                        "node_exporter.log", f"http://127.0.0.1:{p['node_exporter']}/metrics")
            self._start([BINARIES["pushgateway"], f"--web.listen-address=127.0.0.1:{p['pushgateway']}",
                         f"--persistence.file={self.folder / 'pushgateway.store'}"],
                        "pushgateway.log", f"{self.pushgateway}/metrics")
            config = self.folder / "prometheus.yml"
            config.write_text(
                "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
                "scrape_configs:\n"
                f"  - job_name: node\n    static_configs: [{{targets: ['127.0.0.1:{p['node_exporter']}']}}]\n"
                "  - job_name: pushgateway\n    honor_labels: true\n"
                f"    static_configs: [{{targets: ['127.0.0.1:{p['pushgateway']}']}}]\n"
                + "".join(f"  - job_name: {name}\n    scrape_timeout: 1s\n    static_configs: [{{targets: ["
                          + ", ".join(f"'127.0.0.1:{port}'" for port in ports) + "]}]\n"
                          for name, ports in self.targets.items()))
            self._start([BINARIES["prometheus"], f"--config.file={config}",
                         f"--storage.tsdb.path={self.folder / 'tsdb'}",
                         f"--web.listen-address=127.0.0.1:{p['prometheus']}"],
                        "prometheus.log", f"{self.prometheus}/-/ready")
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        self.procs.clear()

    def query(self, expr: str) -> list[dict]:
        url = f"{self.prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(url, timeout=10) as response:
            body = json.loads(response.read())
        assert body["status"] == "success", body
        return body["data"]["result"]

    def wait_for(self, expr: str, count: int = 1, timeout: float = 60.0) -> list[dict]:
        """The query's series once it has ``count`` of them (the next scrapes)."""
        end = time.time() + timeout
        found: list[dict] = []
        while time.time() < end:
            found = self.query(expr)
            if len(found) >= count:
                return found
            time.sleep(0.5)
        raise AssertionError(f"{expr}: {len(found)} series after {timeout:g} s, wanted {count}: {found}")
