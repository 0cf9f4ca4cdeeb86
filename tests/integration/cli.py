"""The installed ``drill`` script, as users call it (not ``python -m drillbit.entry.cli``)."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path


def drill_script() -> str:
    here = Path(sys.executable).parent / "drill"  # the venv's script, installed by pip
    found = str(here) if here.exists() else shutil.which("drill")
    assert found, "the drill script is not installed: pip install -e ."
    return found


def drill_cli(*args: str, stdin: str | None = None, cwd: Path | None = None,
              env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([drill_script(), *args], capture_output=True, text=True, input=stdin, timeout=timeout,
                          cwd=cwd, env=env)
