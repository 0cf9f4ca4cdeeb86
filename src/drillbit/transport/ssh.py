"""The SSH transport, for hosts without Ray (Slurm-style): Fabric opens one connection per
host and runs ``python -m drillbit.agent serve`` there; the controller speaks JSON lines
with it over that channel (:mod:`drillbit.agent.serve`). The agent is the same as on Ray.

Host keys are checked against ``known_hosts`` and an unknown or changed key is refused
(Fabric's own default would add it silently). Passwords are SecretStr: never in reports,
logs or error messages. If the controller dies the connection drops, the remote agent
reads end of input, and its dead-man's switch heals what it holds.
"""
from __future__ import annotations

import json
import os
import shlex
import threading
from pathlib import Path
from typing import Any

from drillbit.errors import DrillError
from drillbit.nodes import Nodes
from drillbit.spec.config import ClusterSpec, SshHost
from drillbit.transport.client import AgentClient


class SshAgentClient(AgentClient):
    def __init__(self, host: SshHost, known_hosts: str | None, skew: float = 0.0, version: str | None = None) -> None:
        super().__init__(host.name)
        from fabric import Connection
        from paramiko import RejectPolicy
        from paramiko.ssh_exception import SSHException

        kwargs: dict[str, Any] = {}
        if host.key_filename:
            kwargs["key_filename"] = os.path.expanduser(host.key_filename)
        if host.password is not None:
            kwargs["password"] = host.password.get_secret_value()
        self.where = f"{host.user + '@' if host.user else ''}{host.host}:{host.port}"
        self.conn = Connection(host.host, user=host.user, port=host.port, connect_timeout=15, connect_kwargs=kwargs)
        client = self.conn.client
        client.set_missing_host_key_policy(RejectPolicy())
        known = os.path.expanduser(known_hosts or "~/.ssh/known_hosts")
        try:
            client.load_host_keys(known)
        except OSError as exc:
            raise DrillError(f"{host.name}: cannot read known_hosts {known}: {exc.strerror}") from None
        try:
            self.conn.open()
        except SSHException as exc:
            reason = str(exc).replace(host.password.get_secret_value(), "***") if host.password else str(exc)
            raise DrillError(f"{host.name} ({self.where}): {reason} (host keys are checked against {known})") from None
        except OSError as exc:
            raise DrillError(f"{host.name} ({self.where}): {exc}") from None
        command = [host.python, "-m", "drillbit.agent", "serve", "--node", host.name, "--state-dir", host.state_dir]
        if skew:
            command += ["--skew", repr(skew)]
        if version:
            command += ["--pretend-version", version]
        self.chan = self.conn.client.get_transport().open_session()
        self.chan.exec_command(" ".join(shlex.quote(c) for c in command))
        self._out = self.chan.makefile_stdin("w")
        self._in = self.chan.makefile("r")
        self._lock = threading.Lock()
        self._next = 1
        first = (threading.Event(), [])
        self._waiting: dict[int, tuple[threading.Event, list]] = {0: first}
        self._reader = threading.Thread(target=self._read, name=f"ssh-{host.name}", daemon=True)
        self._reader.start()
        self._wait(0, first, 60.0, "start")  # the server's greeting: it started

    def _read(self) -> None:
        for line in self._in:
            try:
                reply = json.loads(line)
            except ValueError:
                continue
            slot = self._waiting.pop(reply.get("id"), None)
            if slot is not None:
                slot[1].append(reply)
                slot[0].set()
        for event, box in list(self._waiting.values()):  # the channel closed
            box.append({"closed": True})
            event.set()

    def _write(self, method: str, payload: dict, want: bool) -> tuple[int, tuple[threading.Event, list]]:
        slot: tuple[threading.Event, list] = (threading.Event(), [])
        with self._lock:
            rid = self._next
            self._next += 1
            if want:
                self._waiting[rid] = slot
            self._out.write(json.dumps({"id": rid, "method": method, "payload": payload}) + "\n")
            self._out.flush()
        return rid, slot

    def _wait(self, rid: int, slot: tuple[threading.Event, list], timeout: float, method: str) -> Any:
        event, box = slot
        if not event.wait(timeout):
            self._waiting.pop(rid, None)
            stderr = self.chan.recv_stderr(4096).decode(errors="replace") if self.chan.recv_stderr_ready() else ""
            raise DrillError(f"agent on {self.node}: {method} gave no answer in {timeout:g} s {stderr}".strip())
        reply = box[0]
        if reply.get("closed"):
            raise DrillError(f"agent on {self.node}: {method}: the SSH channel closed")
        return {k: v for k, v in reply.items() if k != "id"}

    def _send(self, method: str, payload: dict[str, Any], timeout: float) -> Any:
        try:
            rid, slot = self._write(method, payload, want=True)
        except OSError as exc:
            raise DrillError(f"agent on {self.node}: the SSH channel is gone ({exc})") from None
        return self._wait(rid, slot, timeout, method)

    def _post(self, method: str, payload: dict[str, Any]) -> None:
        self._write(method, payload, want=False)

    def close(self) -> None:
        try:
            self._write("exit", {}, want=False)
            self.chan.shutdown_write()
            self._reader.join(timeout=10)
        except OSError:
            pass
        finally:
            self.conn.close()


class SshLease:
    """The lease for an SSH cluster: a file lock held by the agent on the first host, so it
    lives exactly as long as that agent; a dead controller's connection drops and with it
    the lock."""

    def __init__(self, client: AgentClient, cluster: str, holder: str) -> None:
        self.client = client
        self.cluster = cluster
        self.holder = holder

    def acquire(self) -> None:
        self.client.lease_acquire(self.cluster, self.holder)

    def release(self) -> None:
        try:
            self.client.lease_release()
        except DrillError:
            pass  # the connection is gone, and the lock with it


class SshNodes(Nodes):
    def __init__(self, run_dir: Path, cluster_name: str, cluster: ClusterSpec) -> None:
        super().__init__(run_dir, cluster_name, deadman_s=cluster.deadman, job_grace_s=cluster.job_grace)
        self.cluster = cluster

    def connect(self) -> dict[str, AgentClient]:
        if self.clients:
            return self.clients
        clients: dict[str, AgentClient] = {}
        try:
            for host in self.cluster.hosts:
                clients[host.name] = SshAgentClient(host, self.cluster.known_hosts,
                                                    self.cluster.simulate_clock_skew.get(host.name, 0.0),
                                                    self.cluster.simulate_agent_version)
        except Exception:
            for client in clients.values():
                client.close()
            raise
        return clients

    def acquire(self, holder: str) -> SshLease:
        self.clients = self.connect()
        lease = SshLease(next(iter(self.clients.values())), self.cluster_name, holder)
        lease.acquire()
        return lease

    def head_host(self) -> str:
        return self.cluster.hosts[0].host

    def python_for(self, node: str) -> str:
        return next(h.python for h in self.cluster.hosts if h.name == node)
