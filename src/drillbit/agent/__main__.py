"""``python -m drillbit.agent serve|guard``: a node's agent over stdin/stdout (SSH), or the
guardian process of the dead-man's switch."""
from __future__ import annotations

import argparse
import signal
from pathlib import Path

from drillbit.proc import ProcRef


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m drillbit.agent")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="run one node's agent, JSON-lines RPC on stdin/stdout (used over SSH)")
    s.add_argument("--node", required=True)
    s.add_argument("--state-dir", required=True)
    s.add_argument("--skew", type=float, default=0.0, help=argparse.SUPPRESS)
    s.add_argument("--pretend-version", help=argparse.SUPPRESS)
    g = sub.add_parser("guard", help="dead-man's switch for one agent's registry")
    g.add_argument("--registry", required=True)
    g.add_argument("--watch-pid", type=int, required=True)
    g.add_argument("--watch-start", type=float, required=True)
    args = p.parse_args(argv)
    if args.cmd == "serve":
        from drillbit.agent.serve import serve
        from drillbit.agent.service import AgentService

        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # a dropped SSH session is handled as lost heartbeats
        return serve(AgentService(args.node, args.state_dir, skew_s=args.skew, version=args.pretend_version))
    from drillbit.agent.deadman import guard

    return guard(Path(args.registry), ProcRef(pid=args.watch_pid, start_time=args.watch_start))


if __name__ == "__main__":
    raise SystemExit(main())
