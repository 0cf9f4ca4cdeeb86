"""The examples of docs/own-job.md, taken from the page as a user copies them: a test runs
the file the page prints, not a copy of its own. A fenced YAML block is found by its first
line (``# drill.yaml: …``), read as CommonMark pairs the fences."""
from __future__ import annotations

from pathlib import Path

import yaml
from markdown_it import MarkdownIt

PAGE = Path(__file__).resolve().parents[2] / "docs" / "own-job.md"
JOB = Path(__file__).parent / "jobs" / "megatron_ddp.py"  # the page's train.py


def example(first_line: str) -> str:
    """The YAML block of own-job.md whose first line starts with ``first_line``, as printed."""
    found = [t.content for t in MarkdownIt("commonmark").parse(PAGE.read_text())
             if t.type == "fence" and t.info.strip() == "yaml" and t.content.startswith(first_line)]
    assert len(found) == 1, f"{PAGE}: {len(found)} yaml blocks begin {first_line!r}"
    return found[0]


def project(folder: Path, first_line: str, cluster: dict | None = None, replace: dict[str, str] | None = None) -> Path:
    """A user's project folder: the page's drill.yaml and train.py. ``cluster`` puts the test's
    own machines in place of the entry the page marks ``# yours`` (hosts, a slurm.conf);
    ``replace`` swaps a path the page names for the test's (its /shared folder)."""
    text = example(first_line)
    for old, new in (replace or {}).items():
        text = text.replace(old, new)
    folder.mkdir(parents=True, exist_ok=True)
    if cluster is not None:
        data = yaml.safe_load(text)
        (name,) = data["clusters"]
        data["clusters"][name] = cluster
        text = yaml.safe_dump(data, sort_keys=False)
    (folder / "drill.yaml").write_text(text)
    (folder / "train.py").write_text(JOB.read_text())
    return folder
