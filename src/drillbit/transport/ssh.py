"""The SSH transport, for hosts without Ray (Slurm-style): Fabric opens one connection per
host and runs ``python -m drillbit.agent serve`` there; the controller speaks JSON lines
with it over that channel (:mod:`drillbit.agent.serve`). The agent is the same as on Ray.

Host keys are checked against ``known_hosts`` and an unknown or changed key is refused
(Fabric's own default would add it silently). Passwords are SecretStr: never in reports,
logs or error messages. If the controller dies the connection drops, the remote agent
reads end of input, and its dead-man's switch heals what it holds.
"""
from __future__ import annotations

import contextlib
import os
import shlex
from pathlib import Path
from collections.abc import Iterator
from typing import Any

from drillbit.core.errors import DrillError
from drillbit.transport import aids
from drillbit.transport.nodes import Nodes
from drillbit.spec.config import SshCluster, SshHost
from drillbit.transport.client import AgentClient
from drillbit.transport.jsonlines import JsonLinesClient


def where(host: SshHost) -> str:
    via = f" via `{host.proxy_command}`" if host.proxy_command else ""
    return f"{host.user + '@' if host.user else ''}{host.host}:{host.port}{via}"


def _proxy_command(command: str) -> Any:
    """paramiko's ProxyCommand, but one whose end of output is the end of the connection.
    paramiko's own loops on a command that has exited (its output is at EOF, so select says
    readable and read returns nothing) until the connect timeout: a host the relay or bastion
    cannot reach spun a core for 15 s before it was named (seen with the namespace nodes'
    relay). Returning no bytes is a socket's EOF, which paramiko reports at once."""
    import select
    import socket
    import time

    from paramiko.proxy import ProxyCommand

    class EofProxyCommand(ProxyCommand):
        def recv(self, size: int) -> bytes:
            start = time.time()
            while True:
                wait = None if self.timeout is None else self.timeout - (time.time() - start)
                if wait is not None and wait <= 0:
                    raise socket.timeout()
                readable, _, _ = select.select([self.process.stdout], [], [], wait)
                if readable:
                    return os.read(self.process.stdout.fileno(), size)  # b"" at EOF

    return EofProxyCommand(command)


def connect(host: SshHost, known_hosts: str | None) -> Any:
    """An open Fabric connection to ``host``, its key checked against ``known_hosts``."""
    from fabric import Connection
    from paramiko import RejectPolicy
    from paramiko.ssh_exception import SSHException

    kwargs: dict[str, Any] = {}
    if host.key_filename:
        kwargs["key_filename"] = os.path.expanduser(host.key_filename)
    if host.password is not None:
        kwargs["password"] = host.password.get_secret_value()
    gateway = None
    if host.proxy_command:
        gateway = host.proxy_command.replace("%h", host.host).replace("%p", str(host.port))
    conn = Connection(host.host, user=host.user, port=host.port, connect_timeout=15, connect_kwargs=kwargs,
                      gateway=gateway)
    if gateway is not None:
        conn.open_gateway = lambda: _proxy_command(gateway)
    client = conn.client
    client.set_missing_host_key_policy(RejectPolicy())
    known = os.path.expanduser(known_hosts or "~/.ssh/known_hosts")
    try:
        client.load_host_keys(known)
    except OSError as exc:
        raise DrillError(f"{host.name}: cannot read known_hosts {known}: {exc.strerror}") from None
    try:
        conn.open()
    except SSHException as exc:
        _abandon(conn)
        reason = str(exc).replace(host.password.get_secret_value(), "***") if host.password else str(exc)
        raise DrillError(f"{host.name} ({where(host)}): {reason} (host keys are checked against {known})") from None
    except OSError as exc:
        _abandon(conn)
        raise DrillError(f"{host.name} ({where(host)}): {exc}") from None
    return conn


def _abandon(conn: Any) -> None:
    """Close a connection that failed to open, its ProxyCommand with it: Fabric closes only a
    connection that is up, and paramiko's transport stops its socket only while active, so a
    refused host key left the ProxyCommand's process running (seen with the namespace nodes'
    relay)."""
    transport = conn.client.get_transport()
    sock = getattr(transport, "sock", None)
    try:
        conn.client.close()
    finally:
        if sock is not None and not getattr(sock, "closed", True):
            sock.close()


def heal_host(host: SshHost, known_hosts: str | None, force: bool = False, abandon: str | None = None) -> list[dict]:
    """``drill heal`` on one SSH host: its own agent's ``heal`` over SSH (the registries are
    judged where their processes live). The host's answer, one Leftover per registry."""
    import json

    conn = connect(host, known_hosts)
    command = [host.python, "-m", "drillbit.agent", "heal", *(["--state-dir", host.state_dir] if host.state_dir else []),
               *(["--force"] if force else []), *(["--abandon", abandon] if abandon else [])]
    try:
        done = conn.run(" ".join(shlex.quote(c) for c in command), hide=True, warn=True, timeout=600)
    finally:
        conn.close()
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise DrillError(f"{host.name}: `drillbit.agent heal` answered exit {done.exited}: "
                         f"{(done.stderr or done.stdout).strip()[-300:]}") from None


class SshAgentClient(JsonLinesClient):
    channel = "SSH channel"

    def __init__(self, host: SshHost, known_hosts: str | None, skew: float = 0.0, version: str | None = None) -> None:
        super().__init__(host.name)
        self.where = where(host)
        self.conn = connect(host, known_hosts)
        command = [host.python, "-m", "drillbit.agent", "serve", "--node", host.name,
                   *(["--state-dir", host.state_dir] if host.state_dir else [])]
        if skew:
            command += ["--skew", repr(skew)]
        if version:
            command += ["--pretend-version", version]
        self.chan = self.conn.client.get_transport().open_session()
        self.chan.exec_command(" ".join(shlex.quote(c) for c in command))
        self._begin(_ChannelWriter(self.chan), _channel_lines(self.chan))

    def _stderr(self) -> str:
        return self.chan.recv_stderr(4096).decode(errors="replace") if self.chan.recv_stderr_ready() else ""

    def close(self) -> None:
        try:
            self._write("exit", {}, want=False)
            self.chan.shutdown_write()
            self._reader.join(timeout=10)
        except OSError:
            pass
        finally:
            self.conn.close()


class _ChannelWriter:
    """The agent's standard input: text straight into the channel. Not paramiko's
    ``makefile_stdin``: a paramiko file that ends up in a reference cycle has its buffer
    finalized before itself, and its own finalizer then raises ("I/O operation on closed
    file") in whatever code the collection interrupted; CI saw that inside an ``ast.parse``."""

    def __init__(self, chan: Any) -> None:
        self.chan = chan

    def write(self, text: str) -> int:
        self.chan.sendall(text.encode())
        return len(text)

    def flush(self) -> None:
        pass


def _channel_lines(chan: Any) -> Iterator[str]:
    """The agent's standard output, line by line, until the channel's end (for the same
    reason as :class:`_ChannelWriter`, not paramiko's ``makefile``)."""
    pending: list[bytes] = []  # a line not yet ended, in the pieces it came in
    while data := chan.recv(65536):
        if b"\n" not in data:
            pending.append(data)
            continue
        first, *lines, rest = data.split(b"\n")
        for line in (b"".join([*pending, first]), *lines):
            yield line.decode(errors="replace") + "\n"
        pending = [rest] if rest else []
    if pending:
        yield b"".join(pending).decode(errors="replace")


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
        with contextlib.suppress(DrillError):  # the connection is gone, and the lock with it
            self.client.lease_release()


class SshNodes(Nodes):
    engine = "ssh"

    def __init__(self, run_dir: Path, cluster_name: str, cluster: SshCluster) -> None:
        super().__init__(run_dir, cluster_name, deadman_s=cluster.deadman, job_grace_s=cluster.job_grace)
        self.cluster = cluster

    def connect(self) -> dict[str, AgentClient]:
        if self.clients:
            return self.clients
        clients: dict[str, AgentClient] = {}
        try:
            for host in self.cluster.hosts:
                clients[host.name] = SshAgentClient(host, self.cluster.known_hosts,
                                                    aids.clock_skew().get(host.name, 0.0), aids.agent_version())
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
