"""Namespace nodes in the tests. What a test on the namespace cluster left behind, when other tests make namespaces of their
own beside it (pytest-xdist workers): drillbit's namespaces and /etc/netns folders on this
machine, less those of a topology whose manifest names a live owner that is neither this
process nor one it started (another test's drill, still running). A topology writes its
manifest before it makes a namespace and removes it after the last one is gone, so the
manifests read before and after the listing cover every namespace a running topology holds."""
from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import psutil

from drillbit.transport import netcluster


def namespace_nodes() -> bool:
    """Whether the multi-node tests put their nodes in network namespaces: wherever this machine
    allows it (root, iproute2, nftables), unless DRILLBIT_TEST_TOPOLOGY=host asks for 127.0.0.1
    (what a machine without root runs)."""
    return os.environ.get("DRILLBIT_TEST_TOPOLOGY", "netns") != "host" and not netcluster.preflight()


def _others() -> set[str]:
    mine = {os.getpid()} | {p.pid for p in psutil.Process().children(recursive=True)}
    held: set[str] = set()
    if not netcluster.STATE_DIR.is_dir():
        return held
    for manifest in netcluster.STATE_DIR.glob("*.json"):
        try:
            data = json.loads(manifest.read_text())
        except (OSError, ValueError):
            continue
        if data.get("owner_pid") in mine or not netcluster._owner_alive(data):
            continue
        held.update(data["namespaces"])
        held.update(str(netcluster.ETC_NETNS / ns) for ns in data["namespaces"])
    return held


def leftovers() -> set[str]:
    """drillbit's namespaces and /etc/netns folders that no other running test holds."""
    before = _others()
    found = set(netcluster.leftovers())
    return found - before - _others()


def assert_nothing_left(before: set[str], wait_s: float = 90.0) -> None:
    """No namespace or /etc/netns folder that was not there ``before`` (after a SIGKILL the
    reaper waits for the job to stop first: up to ``wait_s``)."""
    deadline = time.time() + wait_s
    left = leftovers() - before
    while left and time.time() < deadline:
        time.sleep(0.5)
        left = leftovers() - before
    assert not left, f"namespaces left behind: {sorted(left)}"


def assert_on_their_nodes(run_dir: Path, events: list[dict], hostnames: dict[str, str]) -> None:
    """What only nodes that are namespaces show of a two-node reference job: each agent ran on
    its node under the node's hostname (``hostnames``: drillbit's node name to the hostname),
    the ranks on both, and both torchruns rendezvoused at node 0's address, over the bridge."""
    assert {e["node"]: e["data"]["host"] for e in events if e["kind"] == "agent.ready"} == hostnames
    [ranks] = [e["data"]["ranks"] for e in events if e["kind"] == "job.ranks"][:1]
    assert {r["node"] for r in ranks} == set(hostnames)
    endpoints = re.findall(r"rdzv_endpoint\s*: (\S+)", (run_dir / "job" / "launcher.log").read_text())
    assert len(endpoints) == 2 and all(e.startswith(f"{netcluster.SUBNET}.1:") for e in endpoints), endpoints
