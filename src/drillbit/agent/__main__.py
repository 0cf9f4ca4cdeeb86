"""``python -m drillbit.agent serve|guard``: a node's agent over stdin/stdout (SSH), or the
guardian process of the dead-man's switch."""
from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from drillbit.core.proc import ProcRef


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m drillbit.agent")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="run one node's agent, JSON-lines RPC on stdin/stdout (used over SSH)")
    s.add_argument("--node", required=True)
    s.add_argument("--state-dir", help="where the registry is kept (default: $XDG_RUNTIME_DIR/drillbit, else "
                                       "/tmp/drillbit-<uid>); a folder only this user can write")
    s.add_argument("--skew", type=float, default=0.0, help=argparse.SUPPRESS)
    s.add_argument("--pretend-version", help=argparse.SUPPRESS)
    s.add_argument("--slurm-job", help="the Slurm job whose allocation this agent runs in (its ranks are found "
                                       "among the job's processes on this node)")
    g = sub.add_parser("guard", help="dead-man's switch for one agent's registry")
    g.add_argument("--registry", required=True)
    g.add_argument("--watch-pid", type=int, required=True)
    g.add_argument("--watch-start", type=float, required=True)
    g.add_argument("--watch-boot-start", type=float, help="its start in seconds after boot (what names it)")
    h = sub.add_parser("heal", help="heal what the drills left in this state folder (their agents died)")
    h.add_argument("--state-dir", help="default: this user's, as for serve")
    h.add_argument("--force", action="store_true", help="even where the drill still seems to run")
    h.add_argument("--abandon", metavar="REASON", help="give the faults up (recorded with REASON) instead of healing")
    args = p.parse_args(argv)
    if args.cmd in ("serve", "heal"):
        from drillbit.core.errors import ConfigError
        from drillbit.core.statedir import private_dir

        try:
            args.state_dir = private_dir(args.state_dir)
        except ConfigError as exc:
            print(f"drillbit agent: {exc}", file=sys.stderr)
            return 2
    if args.cmd == "heal":
        import json

        from drillbit.agent.leftovers import heal_folder

        done = heal_folder(Path(args.state_dir), args.force, args.abandon)
        print(json.dumps([d.model_dump() for d in done]))
        return 1 if any(d.failed for d in done) else 0
    if args.cmd == "serve":
        from drillbit.agent.serve import serve
        from drillbit.agent.service import AgentService

        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # a dropped SSH session is handled as lost heartbeats
        return serve(AgentService(args.node, args.state_dir, skew_s=args.skew, version=args.pretend_version,
                                  slurm_job=args.slurm_job))
    from drillbit.agent.guardian import guard

    return guard(Path(args.registry), ProcRef(pid=args.watch_pid, start_time=args.watch_start,
                                                boot_start=args.watch_boot_start))


if __name__ == "__main__":
    raise SystemExit(main())
