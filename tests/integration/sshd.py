"""A real OpenSSH server on 127.0.0.1 for the SSH executor's tests (Debian openssh-server;
.ci/run installs it). Keys are made for the test; nothing outside tmp_path is used but
the privilege-separation directory sshd insists on."""
from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


@dataclass
class Sshd:
    port: int
    user: str
    key: Path
    known_hosts: Path
    host_pub: str
    proc: subprocess.Popen


def start_sshd(base: Path, listen: str = "127.0.0.1", port: int | None = None,
               wrap: Callable[[list[str]], list[str]] | None = None,
               reachable: Callable[[str, int], bool] | None = None) -> Sshd:
    """An sshd on ``listen``; ``wrap`` runs it elsewhere (a namespace node's
    ``Topology.wrap``) and ``reachable`` then says whether it answers."""
    base.mkdir(parents=True, exist_ok=True)
    for name in ("host_key", "client_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(base / name)], check=True)
    (base / "authorized_keys").write_text((base / "client_key.pub").read_text())
    os.chmod(base / "authorized_keys", 0o600)
    if port is None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    (base / "sshd_config").write_text(f"""
Port {port}
ListenAddress {listen}
HostKey {base / 'host_key'}
PidFile {base / 'sshd.pid'}
AuthorizedKeysFile {base / 'authorized_keys'}
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
StrictModes no
UsePAM no
""")
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(parents=True, exist_ok=True)
    host_pub = (base / "host_key.pub").read_text().split()
    name = listen if port == 22 else f"[{listen}]:{port}"
    (base / "known_hosts").write_text(f"{name} {host_pub[0]} {host_pub[1]}\n")
    argv = [SSHD, "-D", "-e", "-f", str(base / "sshd_config")]
    with open(base / "sshd.log", "ab") as log:  # sshd keeps its own copy
        proc = subprocess.Popen(wrap(argv) if wrap else argv, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 15
    while time.time() < deadline:
        if (reachable or _answers)(listen, port):
            break
        if proc.poll() is not None:
            raise RuntimeError((base / "sshd.log").read_text())
        time.sleep(0.1)
    return Sshd(port=port, user=getpass.getuser(), key=base / "client_key", known_hosts=base / "known_hosts",
                host_pub=" ".join(host_pub[:2]), proc=proc)


def _answers(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=1).close()
        return True
    except OSError:
        return False


def stop_sshd(sshd: Sshd) -> None:
    sshd.proc.terminate()
    try:
        sshd.proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        sshd.proc.kill()
        sshd.proc.wait()
