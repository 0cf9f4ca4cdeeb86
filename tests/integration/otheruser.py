"""A second local user for the root-careful tests (issue 57): a uid and gid no account holds
(nothing is added to /etc/passwd, so nothing is left behind), a folder under /tmp that it owns
and that anyone can traverse, and a way to run a command as it.

Every test that attacks a root drill as that user takes :func:`other_user`; the attack runs
as ``other.run([...])`` or ``other.popen([...])`` (setuid in the child, no supplementary
groups), and the job it owns is launched with ``other.prefix`` before its command line.
"""
from __future__ import annotations

import os
import pwd
import grp
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest


def _free_id(start: int) -> int:
    for candidate in range(start, start + 500):
        try:
            pwd.getpwuid(candidate)
            continue
        except KeyError:
            pass
        try:
            grp.getgrgid(candidate)
            continue
        except KeyError:
            return candidate
    raise RuntimeError("no free uid/gid")


@dataclass
class OtherUser:
    uid: int
    gid: int
    home: Path  # owned by the user, mode 0755, inside a root-owned 0755 folder under /tmp
    root_base: Path  # the root-owned folder that holds home (and anything root-owned a test makes)
    env: dict = field(default_factory=dict)

    @property
    def python(self) -> str:
        """An interpreter this user can run: the suite's own where every folder on its way lets
        others through, else the system's (a pyenv under /root is 0700)."""
        real = os.path.realpath(sys.executable)
        if all(os.stat(p).st_mode & 0o001 for p in [*Path(real).parents][:-1]):
            return sys.executable
        return shutil.which("python3", path="/usr/bin:/bin") or "/usr/bin/python3"

    @property
    def prefix(self) -> list[str]:
        """Before a command line: run it as this user (util-linux setpriv, no supplementary groups)."""
        return ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups", "--"]

    def _kw(self, kw: dict) -> dict:
        return {"user": self.uid, "group": self.gid, "extra_groups": [],
                "env": {**self.env, **kw.pop("env", {})}, "cwd": kw.pop("cwd", str(self.home)), **kw}

    def run(self, argv: list[str], **kw) -> subprocess.CompletedProcess:
        return subprocess.run(argv, **self._kw(kw))

    def popen(self, argv: list[str], **kw) -> subprocess.Popen:
        return subprocess.Popen(argv, **self._kw(kw))

    def own(self, path: Path) -> Path:
        """``path`` and everything under it handed to this user."""
        for p in [path, *path.rglob("*")] if path.is_dir() else [path]:
            os.lchown(p, self.uid, self.gid)
        return path


@pytest.fixture
def other_user():
    if os.geteuid() != 0:
        pytest.skip("needs root: the attacks are a second local user's against a root drill")
    uid = _free_id(61000)
    base = Path(tempfile.mkdtemp(prefix="drillbit-57-", dir="/tmp"))
    os.chmod(base, 0o755)
    home = base / "home"
    home.mkdir(mode=0o755)
    os.chown(home, uid, uid)
    user = OtherUser(uid=uid, gid=uid, home=home, root_base=base,
                     env={"HOME": str(home), "USER": f"u{uid}", "LOGNAME": f"u{uid}",
                          "PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    yield user
    # rm, not shutil.rmtree: a test's tree may be deeper than Python's recursion limit
    subprocess.run(["rm", "-rf", "--one-file-system", "--", str(base)], check=False)
