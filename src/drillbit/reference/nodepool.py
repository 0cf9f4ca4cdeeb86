"""The reference stack's node pool and node-replacement provider, as a real cluster has one.

``pool.json`` holds the node the job runs on, the spares, and the nodes known bad:
    {"active": "node-0", "spares": ["spare-1", "spare-2", "spare-3"], "bad": []}
``replace`` is the provider's API (what a scheduler's "give me a new node" call would be):
it marks the failed node bad and hands out a spare. It knows nothing of drillbit:
fail-node-replacement stands in front of its command on the job's PATH.

    python -m drillbit.reference.nodepool init --pool P --spares 3
    drillbit-ref-nodepool replace --pool P --failed node-0   (the stack finds it on PATH)
    python -m drillbit.reference.nodepool mark-bad --pool P (--node node-0 | --active)
    python -m drillbit.reference.nodepool mark-good --pool P (--node node-0 | --last-marked)
"""
from __future__ import annotations

import argparse
import fcntl
import json
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


@contextmanager
def locked(pool: Path) -> Iterator[dict]:
    with open(pool.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        state = json.loads(pool.read_text())
        yield state
        tmp = pool.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        tmp.replace(pool)


def init(pool: Path, spares: int) -> None:
    if not pool.exists():
        pool.parent.mkdir(parents=True, exist_ok=True)
        pool.write_text(json.dumps({"active": "node-0", "spares": [f"spare-{i}" for i in range(1, spares + 1)],
                                    "bad": []}))


def read(pool: Path) -> dict:
    return json.loads(pool.read_text())


def mark_bad(pool: Path, node: str) -> None:
    with locked(pool) as state:
        if node not in state["bad"]:
            state["bad"].append(node)
            state["last_marked"] = node


def mark_good(pool: Path, node: str | None) -> None:
    """The health check's verdict taken back (``node``, or the one ``mark-bad`` marked last)."""
    with locked(pool) as state:
        node = node or state.pop("last_marked", None)
        if node in state["bad"]:
            state["bad"].remove(node)


def replace(pool: Path, failed: str) -> str:
    """Mark ``failed`` bad and return the node to use instead (raises on failure)."""
    mark_bad(pool, failed)
    with locked(pool) as state:
        if not state["spares"]:
            raise RuntimeError("node replacement failed: the spare pool is empty")
        node = state["spares"].pop(0)
        state["active"] = node
        return node


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("init")
    a.add_argument("--pool", required=True)
    a.add_argument("--spares", type=int, default=3)
    b = sub.add_parser("replace")
    b.add_argument("--pool", required=True)
    b.add_argument("--failed", required=True)
    c = sub.add_parser("mark-bad")
    c.add_argument("--pool", required=True)
    which = c.add_mutually_exclusive_group(required=True)
    which.add_argument("--node")
    which.add_argument("--active", action="store_true", help="the node the job runs on now (a health check's "
                                                               "verdict: that node is dead)")
    d = sub.add_parser("mark-good")
    d.add_argument("--pool", required=True)
    which = d.add_mutually_exclusive_group(required=True)
    which.add_argument("--node")
    which.add_argument("--last-marked", action="store_true", help="the node mark-bad marked last")
    args = p.parse_args(argv)
    pool = Path(args.pool)
    if args.cmd == "init":
        init(pool, args.spares)
    elif args.cmd == "mark-bad":
        mark_bad(pool, read(pool)["active"] if args.active else args.node)
    elif args.cmd == "mark-good":
        mark_good(pool, args.node)
    else:
        try:
            print(replace(pool, args.failed))
        except RuntimeError as exc:
            print(str(exc), file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
